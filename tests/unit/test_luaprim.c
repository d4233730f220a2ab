/* Unit tests for the `sluice` Lua module's primitives (src/luaprim.c):
 * where the compiled databases' memory goes. Hyperscan's database
 * allocator is replaced by a counting one, so the test sees exactly how
 * many databases are alive, whichever malloc the build links. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <hs/hs.h>
#include <lauxlib.h>
#include <lualib.h>
#include "luaprim.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static long live_dbs;

static void *db_alloc(size_t n)
{
	live_dbs++;
	return malloc(n);
}

static void db_free(void *p)
{
	if (p)
		live_dbs--;
	free(p);
}

static lua_State *state(void)
{
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_newtable(L);
	luaprim_open(L);
	lua_setglobal(L, "sluice");
	return L;
}

static int run(lua_State *L, const char *code)
{
	if (luaL_dostring(L, code) != LUA_OK) {
		fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
		lua_pop(L, 1);
		return 0;
	}
	return 1;
}

/* Found by fuzz_lua_req: every sluice.multi() compiled while a worker
 * served requests stayed in the compile cache for good, database
 * included, after its object was collected. A script compiling per
 * request (against the advice of docs/lua-api.md) grew the worker
 * without bound, outside the Lua memory cap. */
static void test_multi_runtime_compiles_are_freed(void)
{
	lua_State *L = state();
	long before = live_dbs;
	CHECK(run(L, "for i = 1, 200 do\n"
		     "  local m = sluice.multi({'abc' .. i, {id = 7, pattern = 'x' .. i .. 'y', literal = true}})\n"
		     "  assert(m:test('abc' .. i) and m:first('zx' .. i .. 'y') == 7)\n"
		     "end\n"
		     "collectgarbage()\n"));
	if (live_dbs - before != 0)
		fprintf(stderr, "  %ld databases still allocated after 200 compiles and a collection\n",
			live_dbs - before);
	CHECK(live_dbs - before == 0);
	lua_close(L);
	CHECK(live_dbs == before);
}

/* What a config check compiles is kept for the workers forked after it
 * (they find it instead of compiling again), and freed by the next check
 * that no longer uses it. */
static void test_multi_check_cache(void)
{
	long before = live_dbs;
	luaprim_cache_begin();
	lua_State *L = state();
	CHECK(run(L, "M = sluice.multi({'cached[0-9]+'})"));
	lua_close(L);
	luaprim_cache_end();
	CHECK(live_dbs == before + 1);  /* kept for the workers */

	/* A worker's script: a cache hit, no new database. */
	L = state();
	CHECK(run(L, "M = sluice.multi({'cached[0-9]+'}); assert(M:test('cached42'))"));
	CHECK(live_dbs == before + 1);
	lua_close(L);
	CHECK(live_dbs == before + 1);

	/* The next check does not use it: freed. */
	luaprim_cache_begin();
	luaprim_cache_end();
	CHECK(live_dbs == before);
}

int main(void)
{
	if (hs_set_database_allocator(db_alloc, db_free) != HS_SUCCESS) {
		fprintf(stderr, "hs_set_database_allocator failed\n");
		return 1;
	}
	test_multi_runtime_compiles_are_freed();
	test_multi_check_cache();
	luaprim_close();
	printf("test_luaprim: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
