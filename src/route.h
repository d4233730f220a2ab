/* Content routing at run time: a listener's routes (cfg_route.c checked and
 * compiled them) indexed for lookup, a request target normalised the way it
 * is forwarded, and the first route whose conditions all hold. Pure: no
 * I/O, no worker state; the stream layer calls it between "head complete"
 * and the inspection hook.
 *
 * Cost: exact paths, path prefixes (on segment boundaries and plain) and
 * exact or wildcard hosts are looked up in sorted tables, so a request is
 * checked only against the routes that can match its path or host, plus
 * those that index on neither, whatever the number of routes. */
#ifndef SLUICE_ROUTE_H
#define SLUICE_ROUTE_H

#include <stddef.h>
#include "buf.h"
#include "cfg-t.h"
#include "httpmsg.h"

struct route_table;

/* The table for LI's routes, or NULL when it has none (or no memory). */
struct route_table *route_table_build(const struct cfg_listener *li);
void route_table_free(struct route_table *t);

/* Normalise TARGET (origin-form "/p?q", absolute-form "http://h/p?q", or
 * "*"): %-escapes of unreserved characters decoded and the others' hex in
 * upper case, empty segments merged, "." and ".." segments (also with
 * ;parameters, also %-encoded) resolved, never above the root. OUT gets the
 * target to forward (query untouched, ;parameters kept) and KEY the path the
 * routes match (each segment without its ;parameters). Returns 0; 1 when
 * the target is already normal (OUT is left empty: forward TARGET as it is);
 * or -1 for a target sluice refuses: a bad %-escape, or an encoded '/', '\'
 * or NUL, which a server would decode into a path the routes never saw. */
int route_normalize(const char *target, size_t len, struct buf *out, struct buf *key);

struct route_req {
	int method;                 /* llhttp_method_t */
	const char *host;           /* the Host header's name part: no port, any case */
	size_t host_len;
	const char *path;           /* KEY from route_normalize */
	size_t path_len;
	const struct msg *m;        /* headers and cookies */
};

/* The first route of T that REQ matches, or NULL. */
const struct cfg_route *route_match(struct route_table *t, const struct route_req *req);

/* The same answer by trying every route in order: the reference the
 * indexes are tested against (unit test, fuzz target). */
const struct cfg_route *route_match_linear(struct route_table *t, const struct route_req *req);

/* The Location of redirect route R: its template with {scheme} ("http" or
 * "https"), {host} (HOST), {path} (the normalised path, ;parameters kept)
 * and {query} ("?..." or nothing) substituted; appended to OUT. */
void route_location(const struct cfg_route *r, int tls, const char *host, size_t host_len,
		    const char *target, size_t target_len, struct buf *out);

/* The name part of a Host value: without ":port", brackets kept for IPv6. */
void route_host_name(const char *v, size_t len, const char **name, size_t *name_len);

#endif
