/* The `req` and `resp` objects inspection scripts see: one full userdata
 * each per Lua state, pointed at the current request for the length of a
 * call and cleared after it, so no table is built per request. */
#ifndef SLUICE_INSPECT_API_H
#define SLUICE_INSPECT_API_H

#include <lua.h>
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

/* Create the metatables. */
void inspect_api_open(lua_State *L);
/* Push a new req (IS_RESP 0) or resp object; returns its state. */
struct inspect_ref *inspect_api_new(lua_State *L, int is_resp);

#endif
