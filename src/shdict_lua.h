/* `sluice.shared`, the Lua face of the shared dictionary (shdict.h): one
 * userdata per Lua state with ngx.shared.DICT-like methods
 * (docs/lua-api.md, "sluice.shared"). */
#ifndef SLUICE_SHDICT_LUA_H
#define SLUICE_SHDICT_LUA_H

#include <lua.h>

struct shdict;

/* Push the object for dictionary D (its metatable made on first use). */
void shdict_lua_push(lua_State *L, struct shdict *d);

#endif
