/* The `sluice` Lua module's fast primitives, in C: PCRE2 regexes (JIT),
 * Hyperscan multi-pattern databases, CIDR sets and rule transformations
 * (docs/lua-api.md). Compiled objects are userdata whose memory lives
 * outside the Lua allocator (PCRE2 and Hyperscan allocate their own) and
 * is freed by __gc. */
#ifndef SLUICE_LUAPRIM_H
#define SLUICE_LUAPRIM_H

#include <lauxlib.h>
#include <lua.h>

/* Register the primitives' metatables and set them as fields of the table
 * on top of the stack (sluice.regex, sluice.multi, ...). */
void luaprim_open(lua_State *L);
/* A config check is starting / has ended: compiled databases no script of
 * that check used, and no live object holds, are freed at the end. Only
 * what is compiled between the two is cached for the workers forked
 * later; anything compiled outside a check is freed with its object. */
void luaprim_cache_begin(void);
void luaprim_cache_end(void);
/* Release the per-process scratch (Hyperscan scratch, transform buffer). */
void luaprim_close(void);
/* A primitive object's metatable NAME: METHODS as __index, GC as __gc, NAME
 * as __name (left off the stack). */
void luaprim_new_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc);

#endif
