/* The `req` and `resp` objects inspection scripts see: one full userdata
 * each per Lua state, pointed at the current request for the length of a
 * call and cleared after it, so no table is built per request. */
#ifndef SLUICE_INSPECT_API_H
#define SLUICE_INSPECT_API_H

#include <lua.h>
#include <stdint.h>
#include <stddef.h>
#include "cfg-t.h"
#include "proxy-t.h"

enum inspect_phase {
	INSPECT_PH_NONE,      /* between calls: every method raises an error */
	INSPECT_PH_INSPECT,   /* inspect(req): read and act */
	INSPECT_PH_RESPONSE,  /* inspect_response(resp, req): read req; read and edit resp */
	INSPECT_PH_LOG,       /* log(req): read, outcome */
};

struct inspect_ref {
	struct stream *s;
	const struct cfg_inspect *ic;
	uint8_t phase;          /* enum inspect_phase */
	uint8_t is_resp;        /* the resp object */
};

/* "allow", "deny", ... for an enum inspect_decision (logs, req:decision()). */
const char *inspect_decision_name(unsigned d);

/* The request as a request-side primitive (sluice.crs) reads it, from the
 * req object at stack index IDX inside its call (a Lua error otherwise).
 * Pointers stay valid until the call returns. BODY is NULL when the body
 * is not inspected (no `body:` in the listener's inspect config) or the
 * call is not inspect(req). */
struct msg;
struct inspect_req_view {
	const char *method;
	const char *target;
	size_t target_len;
	const char *version;           /* "HTTP/1.1" */
	const struct msg *head;        /* the headers as received */
	const char *body;
	size_t body_len;
	char client_ip[48];
	uint16_t client_port;
};
void inspect_api_req_view(lua_State *L, int idx, struct inspect_req_view *v);

/* Create the metatables. */
void inspect_api_open(lua_State *L);
/* Push a new req (IS_RESP 0) or resp object; returns its state. */
struct inspect_ref *inspect_api_new(lua_State *L, int is_resp);

#endif
