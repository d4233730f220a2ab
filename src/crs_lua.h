/* sluice.crs: the Core Rule Set engine (crseval.h) as an inspection-hook
 * primitive (issue 22, docs/lua-api.md). A script compiles a SecLang
 * configuration once, at load, and evaluates requests with it:
 *
 *   local crs = sluice.crs{config = "Include ...", skip = {910100}}
 *   local r = crs:eval(req)     -- r.blocked, r.status, r.rule, r.score, r.ids, ...
 *
 * Compiled programs are cached by their source like sluice.multi's
 * databases: the master compiles them when it checks the config, and the
 * workers it forks find them instead of compiling again. */
#ifndef SLUICE_CRS_LUA_H
#define SLUICE_CRS_LUA_H

#include <lua.h>

/* Set `crs` in the table on top of the stack (the sluice module). */
void crs_lua_open(lua_State *L);
/* A config check starts / ends: programs no script of that check used and
 * no live object holds are freed at the end (luaprim.h's rule). */
void crs_lua_cache_begin(void);
void crs_lua_cache_end(void);
/* Release the per-process evaluation state. */
void crs_lua_close(void);

#endif
