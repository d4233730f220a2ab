/* Unit tests for the shared dictionary (src/shdict.c) and its Lua face
 * (src/shdict_lua.c): values, add/replace/incr/cas, expiry, eviction when
 * full (expired entries first, then least recently used), sizes, exact
 * counts across processes, and a lock holder that dies or stops. A 64 KiB
 * dictionary has one shard, which makes eviction order deterministic. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <lauxlib.h>
#include <lualib.h>
#include "shdict.h"
#include "shdict_lua.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static char buf[SHDICT_VALUE_MAX];

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static struct shdict_val vint(int64_t i) { struct shdict_val v = { .type = SHD_INT, .i = i }; return v; }
static struct shdict_val vnum(double d) { struct shdict_val v = { .type = SHD_NUM, .d = d }; return v; }
static struct shdict_val vstr(const char *s, size_t n) { struct shdict_val v = { .type = SHD_STR, .s = s, .len = n }; return v; }
static const struct shdict_val vnil = { .type = SHD_NIL };

static int set(struct shdict *d, const char *k, struct shdict_val v, uint64_t ttl)
{
	return shdict_store(d, SHD_SET, k, strlen(k), &v, ttl, NULL);
}

static struct shdict_val get(struct shdict *d, const char *k)
{
	struct shdict_val v;
	enum shdict_rc rc = shdict_get(d, k, strlen(k), &v, buf, sizeof(buf), NULL);
	if (rc != SHD_OK)
		v.type = 0xff;
	return v;
}

static struct shdict_stats stats(struct shdict *d)
{
	struct shdict_stats st;
	shdict_stats(d, &st);
	return st;
}

static void test_values(void)
{
	struct shdict *d = shdict_create_private(64 * 1024);
	CHECK(d != NULL);
	struct shdict_val b = { .type = SHD_BOOL, .b = 1 };
	CHECK(shdict_store(d, SHD_SET, "b", 1, &b, 0, NULL) == SHD_OK);
	CHECK(get(d, "b").type == SHD_BOOL && get(d, "b").b == 1);
	CHECK(set(d, "i", vint(-42), 0) == SHD_OK);
	CHECK(get(d, "i").type == SHD_INT && get(d, "i").i == -42);
	CHECK(set(d, "f", vnum(0.25), 0) == SHD_OK);
	CHECK(get(d, "f").type == SHD_NUM && get(d, "f").d == 0.25);
	/* strings from empty to many blocks, each overwriting the last */
	static char big[5000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	size_t lens[] = { 0, 1, 3, 4, 64, 65, 300, 5000, 10, 4999 };
	for (size_t n = 0; n < sizeof(lens) / sizeof(lens[0]); n++) {
		CHECK(set(d, "s", vstr(big, lens[n]), 0) == SHD_OK);
		struct shdict_val v = get(d, "s");
		CHECK(v.type == SHD_STR && v.len == lens[n] && memcmp(v.s, big, lens[n]) == 0);
	}
	CHECK(stats(d).entries == 4);
	/* the empty key is a key */
	CHECK(set(d, "", vint(7), 0) == SHD_OK && get(d, "").i == 7);
	CHECK(get(d, "nope").type == SHD_NIL);
	/* nil deletes */
	CHECK(set(d, "i", vnil, 0) == SHD_OK && get(d, "i").type == SHD_NIL);
	CHECK(shdict_delete(d, "f", 1) == SHD_OK && get(d, "f").type == SHD_NIL);
	CHECK(shdict_delete(d, "f", 1) == SHD_OK);
	CHECK(stats(d).entries == 3);
	/* sizes */
	static char key[SHDICT_KEY_MAX + 1];
	memset(key, 'k', sizeof(key));
	struct shdict_val one = vint(1);
	CHECK(shdict_store(d, SHD_SET, key, SHDICT_KEY_MAX, &one, 0, NULL) == SHD_OK);
	CHECK(shdict_store(d, SHD_SET, key, SHDICT_KEY_MAX + 1, &one, 0, NULL) == SHD_KEY_TOO_LARGE);
	struct shdict_val v;
	CHECK(shdict_get(d, key, SHDICT_KEY_MAX + 1, &v, buf, sizeof(buf), NULL) == SHD_KEY_TOO_LARGE);
	size_t vmax = shdict_value_max(d);
	CHECK(vmax > 10000 && vmax <= SHDICT_VALUE_MAX);
	static char huge[SHDICT_VALUE_MAX + 1];
	memset(huge, 'v', sizeof(huge));
	CHECK(set(d, "h", vstr(huge, vmax + 1), 0) == SHD_VALUE_TOO_LARGE);
	CHECK(shdict_store(d, SHD_SET, key, SHDICT_KEY_MAX, &(struct shdict_val){ .type = SHD_STR, .s = huge, .len = vmax },
			   0, NULL) == SHD_OK);
	v = get(d, "h");
	CHECK(v.type == SHD_NIL);
	CHECK(shdict_get(d, key, SHDICT_KEY_MAX, &v, buf, sizeof(buf), NULL) == SHD_OK && v.len == vmax);
	CHECK(shdict_flush(d) == SHD_OK && stats(d).entries == 0 && stats(d).bytes_used == 0);
	shdict_destroy_private(d);
}

static void test_add_replace_incr_cas(void)
{
	struct shdict *d = shdict_create_private(64 * 1024);
	struct shdict_val one = vint(1), two = vint(2), out, cur;
	CHECK(shdict_store(d, SHD_REPLACE, "k", 1, &one, 0, NULL) == SHD_NOT_FOUND);
	CHECK(shdict_store(d, SHD_ADD, "k", 1, &one, 0, NULL) == SHD_OK);
	CHECK(shdict_store(d, SHD_ADD, "k", 1, &two, 0, NULL) == SHD_EXISTS);
	CHECK(get(d, "k").i == 1);
	CHECK(shdict_store(d, SHD_REPLACE, "k", 1, &two, 0, NULL) == SHD_OK && get(d, "k").i == 2);

	CHECK(shdict_incr(d, "n", 1, &one, NULL, 0, &out, NULL) == SHD_NOT_FOUND);
	struct shdict_val init = vint(10);
	CHECK(shdict_incr(d, "n", 1, &one, &init, 0, &out, NULL) == SHD_OK && out.type == SHD_INT && out.i == 11);
	CHECK(shdict_incr(d, "n", 1, &two, &init, 0, &out, NULL) == SHD_OK && out.i == 13);
	struct shdict_val half = vnum(0.5);
	CHECK(shdict_incr(d, "n", 1, &half, NULL, 0, &out, NULL) == SHD_OK && out.type == SHD_NUM && out.d == 13.5);
	CHECK(set(d, "big", vint(INT64_MAX), 0) == SHD_OK);
	CHECK(shdict_incr(d, "big", 3, &one, NULL, 0, &out, NULL) == SHD_OK && out.type == SHD_NUM);
	CHECK(set(d, "s", vstr("x", 1), 0) == SHD_OK);
	CHECK(shdict_incr(d, "s", 1, &one, &init, 0, &out, NULL) == SHD_NOT_NUMBER);

	/* cas: absent -> value, mismatch hands back the current value */
	CHECK(shdict_cas(d, "c", 1, &vnil, &one, 0, &cur, buf, sizeof(buf), NULL) == SHD_OK);
	CHECK(shdict_cas(d, "c", 1, &vnil, &two, 0, &cur, buf, sizeof(buf), NULL) == SHD_MISMATCH);
	CHECK(cur.type == SHD_INT && cur.i == 1);
	struct shdict_val onef = vnum(1.0);
	CHECK(shdict_cas(d, "c", 1, &onef, &two, 0, &cur, buf, sizeof(buf), NULL) == SHD_OK);  /* 1 == 1.0 */
	CHECK(get(d, "c").i == 2);
	struct shdict_val sa = vstr("abc", 3), sb = vstr("abd", 3);
	CHECK(shdict_cas(d, "c", 1, &two, &sa, 0, &cur, buf, sizeof(buf), NULL) == SHD_OK);
	CHECK(shdict_cas(d, "c", 1, &sb, &one, 0, &cur, buf, sizeof(buf), NULL) == SHD_MISMATCH);
	CHECK(cur.type == SHD_STR && cur.len == 3 && memcmp(cur.s, "abc", 3) == 0);
	CHECK(shdict_cas(d, "c", 1, &sa, &vnil, 0, &cur, buf, sizeof(buf), NULL) == SHD_OK);
	CHECK(get(d, "c").type == SHD_NIL);
	shdict_destroy_private(d);
}

static void test_expiry(void)
{
	struct shdict *d = shdict_create_private(64 * 1024);
	struct shdict_val v, one = vint(1), init = vint(0), out;
	uint64_t left;
	CHECK(set(d, "t", vint(5), 30000) == SHD_OK);
	CHECK(set(d, "forever", vint(6), 0) == SHD_OK);
	CHECK(shdict_get(d, "t", 1, &v, buf, sizeof(buf), &left) == SHD_OK && v.i == 5);
	CHECK(left > 0 && left <= 30000);
	CHECK(shdict_get(d, "forever", 7, &v, buf, sizeof(buf), &left) == SHD_OK && left == 0);
	/* an incr keeps the expiry; init_ttl applies to a new entry only */
	CHECK(shdict_incr(d, "t", 1, &one, &init, 0, &out, NULL) == SHD_OK && out.i == 6);
	CHECK(shdict_incr(d, "u", 1, &one, &init, 30000, &out, NULL) == SHD_OK && out.i == 1);
	CHECK(shdict_expire(d, "forever", 7, 30000) == SHD_OK);
	CHECK(shdict_expire(d, "absent", 6, 30000) == SHD_NOT_FOUND);
	sleep_ms(50);
	CHECK(get(d, "t").type == SHD_NIL);
	CHECK(get(d, "u").type == SHD_NIL);
	CHECK(get(d, "forever").type == SHD_NIL);
	CHECK(stats(d).expired == 3 && stats(d).entries == 0);
	/* add over an expired entry */
	CHECK(set(d, "a", vint(1), 1000) == SHD_OK);
	sleep_ms(5);
	CHECK(shdict_store(d, SHD_ADD, "a", 1, &init, 0, NULL) == SHD_OK && get(d, "a").i == 0);
	/* expire(k, 0) removes the expiry */
	CHECK(set(d, "b", vint(1), 1000) == SHD_OK && shdict_expire(d, "b", 1, 0) == SHD_OK);
	sleep_ms(5);
	CHECK(get(d, "b").i == 1);
	shdict_destroy_private(d);
}

static void test_eviction(void)
{
	struct shdict *d = shdict_create_private(64 * 1024);
	struct shdict_stats st = stats(d);
	CHECK(st.shards == 1);
	uint64_t slots = st.bytes_capacity / SHDICT_BLOCK;   /* one block per small entry */
	char k[32];
	/* full of entries that expire */
	for (uint64_t i = 0; i < slots; i++) {
		snprintf(k, sizeof(k), "e%llu", (unsigned long long)i);
		CHECK(set(d, k, vint((int64_t)i), 2000) == SHD_OK);
	}
	st = stats(d);
	CHECK(st.entries == slots && st.evictions == 0 && st.bytes_used == st.bytes_capacity);
	sleep_ms(10);
	/* new live entries take the expired ones' room: nothing live evicted */
	for (uint64_t i = 0; i < slots; i++) {
		snprintf(k, sizeof(k), "l%llu", (unsigned long long)i);
		CHECK(set(d, k, vint((int64_t)i), 0) == SHD_OK);
	}
	st = stats(d);
	CHECK(st.evictions == 0 && st.expired == slots && st.entries == slots);
	/* full of live entries: the least recently used go, and are counted */
	CHECK(get(d, "l0").i == 0);   /* l0 is now the most recently used */
	int forcible = 0;
	struct shdict_val nv = vint(1);
	CHECK(shdict_store(d, SHD_SET, "new", 3, &nv, 0, &forcible) == SHD_OK && forcible == 1);
	CHECK(stats(d).evictions == 1);
	CHECK(get(d, "l1").type == SHD_NIL);   /* the coldest */
	CHECK(get(d, "l0").i == 0 && get(d, "l2").i == 2 && get(d, "new").i == 1);
	/* a big value evicts as many as it needs */
	static char big[3000];
	memset(big, 'x', sizeof(big));
	CHECK(set(d, "big", vstr(big, sizeof(big)), 0) == SHD_OK);
	st = stats(d);
	CHECK(st.evictions >= 1 + sizeof(big) / 60 && st.bytes_used <= st.bytes_capacity);
	CHECK(get(d, "big").len == sizeof(big));
	shdict_destroy_private(d);
}

/* Exact counts with several processes incrementing one key at once. */
static void test_processes(void)
{
	CHECK(shdict_init(1u << 20) == 0);
	struct shdict *d = shdict_instance();
	CHECK(d != NULL);
	CHECK(shdict_init(2u << 20) == 0 && shdict_instance() == d);   /* kept, with a warning */
	enum { PROCS = 4, EACH = 20000 };
	pid_t kids[PROCS];
	for (int p = 0; p < PROCS; p++) {
		kids[p] = fork();
		if (kids[p] == 0) {
			struct shdict_val one = vint(1), zero = vint(0), out;
			for (int i = 0; i < EACH; i++)
				if (shdict_incr(d, "hits", 4, &one, &zero, 0, &out, NULL) != SHD_OK)
					_exit(1);
			/* read-modify-write with cas */
			for (int i = 0; i < EACH / 10; i++) {
				struct shdict_val seen, now;
				char b[SHDICT_VALUE_MAX];
				shdict_get(d, "casn", 4, &seen, b, sizeof(b), NULL);
				for (;;) {
					struct shdict_val next = vint(seen.type == SHD_INT ? seen.i + 1 : 1);
					enum shdict_rc rc = shdict_cas(d, "casn", 4, &seen, &next, 0, &now, b, sizeof(b), NULL);
					if (rc == SHD_OK)
						break;
					if (rc != SHD_MISMATCH)
						_exit(1);
					seen = now;  /* ints only here: nothing in b to keep apart */
				}
			}
			_exit(0);
		}
	}
	int ok = 1;
	for (int p = 0; p < PROCS; p++) {
		int status;
		waitpid(kids[p], &status, 0);
		ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
	}
	CHECK(ok);
	CHECK(get(d, "hits").i == PROCS * EACH);
	CHECK(get(d, "casn").i == PROCS * (EACH / 10));
}

/* A process that dies holding a shard's lock: the next locker empties
 * that shard and goes on. One that stops holding it: others get "busy"
 * after SHDICT_LOCK_WAIT_MS instead of waiting for ever. */
static void test_dead_and_stopped_holders(void)
{
	struct shdict *d = shdict_instance();
	CHECK(set(d, "victim", vint(1), 0) == SHD_OK);
	uint64_t rec = stats(d).recoveries;
	pid_t kid = fork();
	if (kid == 0) {
		shdict_test_lock_shard(d, "victim", 6);
		_exit(0);
	}
	waitpid(kid, NULL, 0);
	CHECK(get(d, "victim").type == SHD_NIL);   /* its shard was emptied */
	CHECK(stats(d).recoveries == rec + 1);
	CHECK(set(d, "victim", vint(2), 0) == SHD_OK && get(d, "victim").i == 2);

	int pfd[2];
	CHECK(pipe(pfd) == 0);
	kid = fork();
	if (kid == 0) {
		shdict_test_lock_shard(d, "victim", 6);
		(void)!write(pfd[1], "x", 1);
		pause();
		_exit(0);
	}
	char c;
	CHECK(read(pfd[0], &c, 1) == 1);
	struct shdict_val v;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	CHECK(shdict_get(d, "victim", 6, &v, buf, sizeof(buf), NULL) == SHD_BUSY);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	CHECK(ms >= SHDICT_LOCK_WAIT_MS - 5 && ms < 10 * SHDICT_LOCK_WAIT_MS);
	kill(kid, SIGKILL);
	waitpid(kid, NULL, 0);
	CHECK(set(d, "victim", vint(3), 0) == SHD_OK && get(d, "victim").i == 3);
	close(pfd[0]);
	close(pfd[1]);
}

/* The Lua methods, their results and their errors. */
static void test_lua(void)
{
	struct shdict *d = shdict_create_private(64 * 1024);
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_newtable(L);
	shdict_lua_push(L, d);
	lua_setfield(L, -2, "shared");
	lua_setglobal(L, "sluice");
	static const char *const ok_code[] = {
		"local s = sluice.shared\n"
		"assert(s:get('a') == nil)\n"
		"local ok, err, forcible = s:set('a', 1)\n"
		"assert(ok == true and err == nil and forcible == false)\n"
		"assert(math.type(s:get('a')) == 'integer' and s:get('a') == 1)\n"
		"s:set('f', 1.5) assert(s:get('f') == 1.5)\n"
		"s:set('b', false) assert(s:get('b') == false)\n"
		"s:set('s', 'x\\0y') assert(s:get('s') == 'x\\0y')\n"
		"assert(select('#', s:add('a', 2)) == 2 and select(2, s:add('a', 2)) == 'exists')\n"
		"local r1, r2 = s:replace('zz', 1) assert(r1 == false and r2 == 'not found')\n"
		"assert(s:incr('n', 1) == nil and select(2, s:incr('n', 1)) == 'not found')\n"
		"assert(s:incr('n', 1, 0) == 1 and s:incr('n', 2) == 3)\n"
		"assert(select(2, s:incr('s', 1)) == 'not a number')\n"
		"assert(s:cas('c', nil, 'v') == true)\n"
		"local ok2, cur = s:cas('c', nil, 'w') assert(ok2 == false and cur == 'v')\n"
		"assert(s:cas('c', 'v', nil) == true and s:get('c') == nil)\n"
		"s:set('t', 1, 100) local t = s:ttl('t') assert(t > 99 and t <= 100)\n"
		"assert(s:ttl('a') == 0 and s:ttl('none') == nil)\n"
		"assert(s:expire('a', 5) == true and s:ttl('a') > 4)\n"
		"assert(s:expire('none', 5) == false)\n"
		"s:set('a', nil) assert(s:get('a') == nil)\n"
		"s:delete('f') assert(s:get('f') == nil)\n"
		"local k = string.rep('k', 256)\n"
		"local g1, g2 = s:get(k) assert(g1 == nil and g2 == 'key too large')\n"
		"local s1, s2 = s:set(k, 1) assert(s1 == false and s2 == 'key too large')\n"
		"local st = s:stats() assert(st.entries == s:count() and st.value_max > 0)\n"
		"local v1, v2 = s:set('v', string.rep('v', st.value_max + 1)) assert(v1 == false and v2 == 'value too large')\n"
		"s:flush() assert(s:count() == 0)\n",
	};
	for (size_t i = 0; i < sizeof(ok_code) / sizeof(ok_code[0]); i++) {
		int rc = luaL_dostring(L, ok_code[i]);
		if (rc != LUA_OK)
			fprintf(stderr, "  lua: %s\n", lua_tostring(L, -1));
		CHECK(rc == LUA_OK);
		lua_settop(L, 0);
	}
	static const struct { const char *code, *msg; } bad[] = {
		{ "sluice.shared:get(1)", "bad argument #1 to 'get' (string expected, got number)" },
		{ "sluice.shared:get()", "bad argument #1 to 'get' (string expected, got no value)" },
		{ "sluice.shared:set('k', {})", "bad argument #2 to 'set' (string, number, boolean or nil expected, got table)" },
		{ "sluice.shared:add('k', nil)", "bad argument #2 to 'add' (string, number or boolean expected, got nil)" },
		{ "sluice.shared:set('k', 1, -1)", "bad argument #3 to 'set' (ttl must be from 0 (no expiry) to 1e9 seconds)" },
		{ "sluice.shared:set('k', 1, 'soon')", "bad argument #3 to 'set' (number of seconds expected, got string)" },
		{ "sluice.shared:incr('k', '1')", "bad argument #2 to 'incr' (number expected, got string)" },
		{ "sluice.shared:cas('k', 1, print)", "bad argument #3 to 'cas' (string, number, boolean or nil expected, got function)" },
		{ "sluice.shared.get('k')", "sluice.shared:get(...): call it with a colon, on sluice.shared" },
		{ "sluice.shared.count = 1", "sluice.shared cannot be assigned to" },
		{ "return sluice.shared.rate_limit", "sluice.shared has no field 'rate_limit'" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = luaL_dostring(L, bad[i].code);
		const char *msg = rc != LUA_OK ? lua_tostring(L, -1) : "";
		int hit = rc != LUA_OK && msg && strstr(msg, bad[i].msg) != NULL;
		if (!hit)
			fprintf(stderr, "  %s -> %s\n", bad[i].code, msg ? msg : "(not a string)");
		CHECK(hit);
		lua_settop(L, 0);
	}
	lua_close(L);
	shdict_destroy_private(d);
}

int main(void)
{
	test_values();
	test_add_replace_incr_cas();
	test_expiry();
	test_eviction();
	test_processes();
	test_dead_and_stopped_holders();
	test_lua();
	printf("test_shdict: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
