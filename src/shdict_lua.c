/* `sluice.shared`: the shared dictionary's methods for scripts.
 *
 * Every argument is checked (and every Lua error raised) before the
 * dictionary is called, and results are pushed after it returned: a Lua
 * error longjmps, and one raised while a shard's lock is held would leave
 * it held. String values are copied out into one static buffer (one Lua
 * state runs at a time in a process) and from there into a Lua string.
 *
 * Conventions, as ngx.shared.DICT's: a method that can fail for a reason
 * a script handles returns false (or nil) and the reason; misuse (a key
 * that is not a string, a table as value, a negative ttl, a dot instead of
 * a colon) raises an error, which gives the request its on_error. */
#include <math.h>
#include <string.h>
#include <lauxlib.h>
#include "shdict.h"
#include "shdict_lua.h"

#define SHARED_MT "sluice.shared"

struct shared_ud {
	struct shdict *d;
};

static char vbuf[SHDICT_VALUE_MAX];

static struct shdict *check_self(lua_State *L, const char *method)
{
	struct shared_ud *u = luaL_testudata(L, 1, SHARED_MT);
	if (u == NULL)
		luaL_error(L, "sluice.shared:%s(...): call it with a colon, on sluice.shared", method);
	if (u->d == NULL)
		luaL_error(L, "sluice.shared:%s: the shared dictionary could not be mapped", method);
	return u->d;
}

static const char *check_key(lua_State *L, size_t *len)
{
	if (lua_type(L, 2) != LUA_TSTRING)
		luaL_typeerror(L, 2, "string");
	return lua_tolstring(L, 2, len);
}

/* The value at IDX; nil only where NIL_OK (set: delete; cas: absent). */
static void check_value(lua_State *L, int idx, int nil_ok, struct shdict_val *v)
{
	memset(v, 0, sizeof(*v));
	switch (lua_type(L, idx)) {
	case LUA_TNIL:
	case LUA_TNONE:
		if (!nil_ok)
			luaL_typeerror(L, idx, "string, number or boolean");
		v->type = SHD_NIL;
		break;
	case LUA_TBOOLEAN:
		v->type = SHD_BOOL;
		v->b = lua_toboolean(L, idx);
		break;
	case LUA_TNUMBER:
		if (lua_isinteger(L, idx)) {
			v->type = SHD_INT;
			v->i = (int64_t)lua_tointeger(L, idx);
		} else {
			v->type = SHD_NUM;
			v->d = (double)lua_tonumber(L, idx);
		}
		break;
	case LUA_TSTRING:
		v->type = SHD_STR;
		v->s = lua_tolstring(L, idx, &v->len);
		break;
	default:
		luaL_typeerror(L, idx, nil_ok ? "string, number, boolean or nil" : "string, number or boolean");
	}
}

static void check_number(lua_State *L, int idx, struct shdict_val *v)
{
	if (lua_type(L, idx) != LUA_TNUMBER)
		luaL_typeerror(L, idx, "number");
	check_value(L, idx, 0, v);
}

/* Seconds (0 or absent: no expiry) as microseconds, at least 1 when > 0. */
static uint64_t check_ttl(lua_State *L, int idx)
{
	if (lua_isnoneornil(L, idx))
		return 0;
	if (lua_type(L, idx) != LUA_TNUMBER)
		luaL_typeerror(L, idx, "number of seconds");
	double s = (double)lua_tonumber(L, idx);
	if (!(s >= 0 && s <= (double)(SHDICT_TTL_MAX_US / 1000000u)))
		luaL_argerror(L, idx, "ttl must be from 0 (no expiry) to 1e9 seconds");
	uint64_t us = (uint64_t)ceil(s * 1e6);
	return s > 0 && us == 0 ? 1 : us;
}

static void push_value(lua_State *L, const struct shdict_val *v)
{
	switch (v->type) {
	case SHD_BOOL: lua_pushboolean(L, v->b); break;
	case SHD_INT: lua_pushinteger(L, (lua_Integer)v->i); break;
	case SHD_NUM: lua_pushnumber(L, (lua_Number)v->d); break;
	case SHD_STR: lua_pushlstring(L, v->s, v->len); break;
	default: lua_pushnil(L); break;
	}
}

static int busy(lua_State *L, const char *method)
{
	return luaL_error(L, "sluice.shared:%s: busy (a lock was held for over %d ms)", method,
			  SHDICT_LOCK_WAIT_MS);
}

/* FIRST (false or nil) and the reason. */
static int fail(lua_State *L, int with_false, enum shdict_rc rc)
{
	if (with_false)
		lua_pushboolean(L, 0);
	else
		lua_pushnil(L);
	lua_pushstring(L, shdict_rc_str(rc));
	return 2;
}

/* get(key) -> value | nil [, "key too large"] */
static int l_get(lua_State *L)
{
	struct shdict *d = check_self(L, "get");
	size_t klen;
	const char *key = check_key(L, &klen);
	struct shdict_val v;
	enum shdict_rc rc = shdict_get(d, key, klen, &v, vbuf, sizeof(vbuf), NULL);
	if (rc == SHD_BUSY)
		return busy(L, "get");
	if (rc != SHD_OK)
		return fail(L, 0, rc);
	push_value(L, &v);
	return 1;
}

static int store(lua_State *L, enum shdict_store_mode mode, const char *method)
{
	struct shdict *d = check_self(L, method);
	size_t klen;
	const char *key = check_key(L, &klen);
	struct shdict_val v;
	check_value(L, 3, mode == SHD_SET, &v);
	uint64_t ttl = check_ttl(L, 4);
	int forcible = 0;
	enum shdict_rc rc = shdict_store(d, mode, key, klen, &v, ttl, &forcible);
	if (rc == SHD_BUSY)
		return busy(L, method);
	if (rc != SHD_OK)
		return fail(L, 1, rc);
	lua_pushboolean(L, 1);
	lua_pushnil(L);
	lua_pushboolean(L, forcible);
	return 3;
}

/* set(key, value [, ttl]) -> true, nil, forcible | false, err; nil deletes */
static int l_set(lua_State *L)
{
	return store(L, SHD_SET, "set");
}

/* add(key, value [, ttl]): only when absent; false, "exists" otherwise */
static int l_add(lua_State *L)
{
	return store(L, SHD_ADD, "add");
}

/* replace(key, value [, ttl]): only when present; false, "not found" otherwise */
static int l_replace(lua_State *L)
{
	return store(L, SHD_REPLACE, "replace");
}

/* incr(key, by [, init [, init_ttl]]) -> new value | nil, err */
static int l_incr(lua_State *L)
{
	struct shdict *d = check_self(L, "incr");
	size_t klen;
	const char *key = check_key(L, &klen);
	struct shdict_val by, init, out;
	check_number(L, 3, &by);
	int has_init = !lua_isnoneornil(L, 4);
	if (has_init)
		check_number(L, 4, &init);
	uint64_t ttl = check_ttl(L, 5);
	enum shdict_rc rc = shdict_incr(d, key, klen, &by, has_init ? &init : NULL, ttl, &out, NULL);
	if (rc == SHD_BUSY)
		return busy(L, "incr");
	if (rc != SHD_OK)
		return fail(L, 0, rc);
	push_value(L, &out);
	return 1;
}

/* cas(key, old, new [, ttl]) -> true | false, current | nil, err */
static int l_cas(lua_State *L)
{
	struct shdict *d = check_self(L, "cas");
	size_t klen;
	const char *key = check_key(L, &klen);
	struct shdict_val old, nw, cur;
	check_value(L, 3, 1, &old);
	check_value(L, 4, 1, &nw);
	uint64_t ttl = check_ttl(L, 5);
	enum shdict_rc rc = shdict_cas(d, key, klen, &old, &nw, ttl, &cur, vbuf, sizeof(vbuf), NULL);
	if (rc == SHD_BUSY)
		return busy(L, "cas");
	if (rc == SHD_OK) {
		lua_pushboolean(L, 1);
		return 1;
	}
	if (rc != SHD_MISMATCH)
		return fail(L, 0, rc);
	lua_pushboolean(L, 0);
	push_value(L, &cur);
	return 2;
}

/* delete(key) */
static int l_delete(lua_State *L)
{
	struct shdict *d = check_self(L, "delete");
	size_t klen;
	const char *key = check_key(L, &klen);
	if (shdict_delete(d, key, klen) == SHD_BUSY)
		return busy(L, "delete");
	return 0;
}

/* ttl(key) -> seconds left (0: no expiry) | nil, "not found" */
static int l_ttl(lua_State *L)
{
	struct shdict *d = check_self(L, "ttl");
	size_t klen;
	const char *key = check_key(L, &klen);
	struct shdict_val v;
	uint64_t left;
	enum shdict_rc rc = shdict_get(d, key, klen, &v, vbuf, sizeof(vbuf), &left);
	if (rc == SHD_BUSY)
		return busy(L, "ttl");
	if (rc == SHD_KEY_TOO_LARGE || v.type == SHD_NIL)
		return fail(L, 0, SHD_NOT_FOUND);
	lua_pushnumber(L, (lua_Number)left / 1e6);
	return 1;
}

/* expire(key, ttl) -> true | false, "not found" */
static int l_expire(lua_State *L)
{
	struct shdict *d = check_self(L, "expire");
	size_t klen;
	const char *key = check_key(L, &klen);
	if (lua_isnoneornil(L, 3))
		luaL_typeerror(L, 3, "number of seconds");
	uint64_t ttl = check_ttl(L, 3);
	enum shdict_rc rc = shdict_expire(d, key, klen, ttl);
	if (rc == SHD_BUSY)
		return busy(L, "expire");
	if (rc != SHD_OK)
		return fail(L, 1, rc);
	lua_pushboolean(L, 1);
	return 1;
}

/* count() -> entries stored */
static int l_count(lua_State *L)
{
	struct shdict *d = check_self(L, "count");
	struct shdict_stats st;
	shdict_stats(d, &st);
	lua_pushinteger(L, (lua_Integer)st.entries);
	return 1;
}

/* stats() -> {entries, bytes_used, bytes_capacity, evictions, expired, value_max} */
static int l_stats(lua_State *L)
{
	struct shdict *d = check_self(L, "stats");
	struct shdict_stats st;
	shdict_stats(d, &st);
	lua_createtable(L, 0, 6);
	static const char *const names[] = { "entries", "bytes_used", "bytes_capacity", "evictions", "expired" };
	const uint64_t vals[] = { st.entries, st.bytes_used, st.bytes_capacity, st.evictions, st.expired };
	for (int i = 0; i < 5; i++) {
		lua_pushinteger(L, (lua_Integer)vals[i]);
		lua_setfield(L, -2, names[i]);
	}
	lua_pushinteger(L, (lua_Integer)shdict_value_max(d));
	lua_setfield(L, -2, "value_max");
	return 1;
}

/* flush(): every entry removed */
static int l_flush(lua_State *L)
{
	struct shdict *d = check_self(L, "flush");
	if (shdict_flush(d) == SHD_BUSY)
		return busy(L, "flush");
	return 0;
}

static const luaL_Reg shared_m[] = {
	{ "get", l_get },
	{ "set", l_set },
	{ "add", l_add },
	{ "replace", l_replace },
	{ "incr", l_incr },
	{ "cas", l_cas },
	{ "delete", l_delete },
	{ "ttl", l_ttl },
	{ "expire", l_expire },
	{ "count", l_count },
	{ "stats", l_stats },
	{ "flush", l_flush },
	{ NULL, NULL }
};

/* Scripts written for the per-worker table (sluice.shared.x = v) get a
 * message that says what changed instead of "attempt to index". */
static int no_field(lua_State *L)
{
	return luaL_error(L, "sluice.shared has no field '%s': it is the instance-wide dictionary "
			  "(sluice.shared:get(k), :set(k, v), ...); per-worker Lua values go in sluice.worker_state",
			  luaL_tolstring(L, 2, NULL));
}

static int no_newindex(lua_State *L)
{
	return luaL_error(L, "sluice.shared cannot be assigned to: use sluice.shared:set(k, v) "
			  "(instance-wide), or sluice.worker_state for per-worker Lua values");
}

void shdict_lua_push(lua_State *L, struct shdict *d)
{
	struct shared_ud *u = lua_newuserdatauv(L, sizeof(*u), 0);
	u->d = d;
	if (luaL_newmetatable(L, SHARED_MT)) {
		luaL_newlib(L, shared_m);
		lua_createtable(L, 0, 1);       /* the methods' own metatable */
		lua_pushcfunction(L, no_field);
		lua_setfield(L, -2, "__index");
		lua_setmetatable(L, -2);
		lua_setfield(L, -2, "__index");
		lua_pushcfunction(L, no_newindex);
		lua_setfield(L, -2, "__newindex");
		lua_pushliteral(L, SHARED_MT);
		lua_setfield(L, -2, "__metatable");
	}
	lua_setmetatable(L, -2);
}
