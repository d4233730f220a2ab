/* Session persistence: which server holds a request's session, and what a
 * response teaches about that (persistence.type of the backend).
 *
 * persist_request() reads the request's key once, when it is forwarded;
 * persist_target() is asked at every server choice (a retry after a failed
 * connect asks again, the failed server then avoided) for the server the
 * session should go to that can take it now, NULL to balance;
 * persist_response() learns from the response's head (weblogic, app_cookie)
 * and sets sluice's cookie (cookie). */
#ifndef SLUICE_PERSIST_H
#define SLUICE_PERSIST_H

#include "proxy-t.h"

enum persist_result {
	PERSIST_NONE,      /* the backend has no persistence */
	PERSIST_MISS,      /* no key, or one naming no server: balanced (a new session) */
	PERSIST_HIT,       /* sent to the server the key names */
	PERSIST_FAILOVER,  /* that server could not take it: sent elsewhere */
};

/* What persistence must know of a server's state. The upstream layer
 * owns it and calls persistence, so it hands these in at worker start
 * rather than persistence calling back up by name. */
struct persist_server_state {
	int (*usable)(const struct server *srv);          /* in balancing now */
	int (*keeps_sessions)(const struct server *srv);  /* ... or draining */
	uint32_t (*weight)(const struct server *srv);     /* the operator's or the config's */
};
void persist_set_server_state(const struct persist_server_state *st);

const char *persist_result_text(enum persist_result r);
/* Worker start: the servers' hashes. */
void persist_init_server(struct server *srv);
void persist_request(struct stream *s);
struct server *persist_target(struct stream *s);
void persist_response(struct stream *s);

/* Pure parsing, exported for the fuzz target. The value of path parameter
 * NAME (";name=value") in the path of target U (N bytes), as Tomcat and
 * WebLogic rewrite URLs for clients without cookies: 1 found, 0 not. */
int persist_path_param(const char *u, size_t n, const char *name, const char **v, size_t *vl);
/* "<session>!<primary>!<secondary>[!...]": the two JVMIDs (NULL when absent). */
void persist_weblogic_ids(const char *v, size_t vl, const char *id[2], size_t n[2]);

#endif
