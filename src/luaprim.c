/* Fast matching primitives for inspection scripts. Everything is compiled
 * once, when a script's main chunk runs; a request only scans. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <hs/hs.h>
#include <lauxlib.h>
#include <pcre2.h>
#include "buf.h"
#include "cidrset.h"
#include "luaprim.h"
#include "objcache.h"
#include "netaddr.h"
#include "transform.h"

#define REGEX_MT "sluice.regex"
#define MULTI_MT "sluice.multi"
#define CIDRS_MT "sluice.cidrs"
/* Backtracking bound per match: a pathological pattern/subject pair stops
 * with an error (the hook's on_error) instead of burning the worker. */
#define REGEX_MATCH_LIMIT 1000000u
#define REGEX_DEPTH_LIMIT 10000u

/* Per process (one Lua state per worker; the master's check states are
 * short-lived): scan scratch sized for the largest database, and the
 * buffer transformations run in. */
static hs_scratch_t *hs_scratch;
static struct buf xbuf;
static pcre2_match_context *match_ctx;

/* ---- sluice.regex ---- */

struct lregex {
	pcre2_code *code;
	pcre2_match_data *md;
};

static int regex_gc(lua_State *L)
{
	struct lregex *r = luaL_checkudata(L, 1, REGEX_MT);
	pcre2_match_data_free(r->md);
	pcre2_code_free(r->code);
	r->md = NULL;
	r->code = NULL;
	return 0;
}

static int regex_new(lua_State *L)
{
	size_t plen, flen = 0;
	const char *pat = luaL_checklstring(L, 1, &plen);
	const char *flags = luaL_optlstring(L, 2, "", &flen);
	uint32_t opts = 0;
	for (size_t i = 0; i < flen; i++) {
		switch (flags[i]) {
		case 'i': opts |= PCRE2_CASELESS; break;
		case 'm': opts |= PCRE2_MULTILINE; break;
		case 's': opts |= PCRE2_DOTALL; break;
		case 'x': opts |= PCRE2_EXTENDED; break;
		case 'u': opts |= PCRE2_UTF | PCRE2_UCP; break;
		default: return luaL_error(L, "sluice.regex: unknown flag '%c' (use i, m, s, x, u)", flags[i]);
		}
	}
	struct lregex *r = lua_newuserdatauv(L, sizeof(*r), 0);
	r->code = NULL;
	r->md = NULL;
	luaL_setmetatable(L, REGEX_MT);
	int err;
	PCRE2_SIZE off;
	r->code = pcre2_compile((PCRE2_SPTR)pat, plen, opts, &err, &off, NULL);
	if (r->code == NULL) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(err, msg, sizeof(msg));
		return luaL_error(L, "sluice.regex: %s at offset %d of /%s/", (const char *)msg, (int)off, pat);
	}
	pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  /* interpreted if JIT is unavailable */
	r->md = pcre2_match_data_create_from_pattern(r->code, NULL);
	if (r->md == NULL)
		return luaL_error(L, "sluice.regex: out of memory");
	return 1;
}

/* Match R against S from byte INIT; returns the pcre2 result (>0 on a match). */
static int regex_run(lua_State *L, struct lregex *r, const char *s, size_t len, size_t init)
{
	if (r->code == NULL)
		return luaL_error(L, "regex used after it was collected");
	int rc = pcre2_match(r->code, (PCRE2_SPTR)s, len, init, 0, r->md, match_ctx);
	if (rc == PCRE2_ERROR_NOMATCH || rc == PCRE2_ERROR_PARTIAL)
		return 0;
	if (rc < 0) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(rc, msg, sizeof(msg));
		return luaL_error(L, "regex match failed: %s", (const char *)msg);
	}
	return rc;
}

static int regex_test(lua_State *L)
{
	struct lregex *r = luaL_checkudata(L, 1, REGEX_MT);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	lua_pushboolean(L, regex_run(L, r, s, len, 0) > 0);
	return 1;
}

static int regex_find(lua_State *L)
{
	struct lregex *r = luaL_checkudata(L, 1, REGEX_MT);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	lua_Integer init = luaL_optinteger(L, 3, 1);
	if (init < 1)
		init = 1;
	if ((size_t)init > len + 1) {
		lua_pushnil(L);
		return 1;
	}
	if (regex_run(L, r, s, len, (size_t)init - 1) <= 0) {
		lua_pushnil(L);
		return 1;
	}
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
	lua_pushinteger(L, (lua_Integer)ov[0] + 1);
	lua_pushinteger(L, (lua_Integer)ov[1]);
	return 2;
}

static int regex_match(lua_State *L)
{
	struct lregex *r = luaL_checkudata(L, 1, REGEX_MT);
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	int rc = regex_run(L, r, s, len, 0);
	if (rc <= 0) {
		lua_pushnil(L);
		return 1;
	}
	uint32_t groups;
	pcre2_pattern_info(r->code, PCRE2_INFO_CAPTURECOUNT, &groups);
	PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
	luaL_checkstack(L, (int)groups + 1, "too many captures");
	for (uint32_t i = 0; i <= groups; i++) {
		if ((int)i < rc && ov[2 * i] != PCRE2_UNSET)
			lua_pushlstring(L, s + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
		else
			lua_pushnil(L);
	}
	return (int)groups + 1;
}

/* ---- sluice.multi ---- */

/* Compiled databases, by their exact source (patterns, flags, ids):
 * objcache.h says why and when. */
static void free_db(void *db)
{
	hs_free_database(db);
}
static struct objcache hcache = { .free_obj = free_db };

struct lmulti {
	hs_database_t *db;
	struct objcache_entry *cached;  /* NULL: the object owns db */
	unsigned n;            /* patterns */
	unsigned *hits;        /* scan(): ids found, at most N (SINGLEMATCH) */
	unsigned nhits;
	int stop_first;
};

static int multi_gc(lua_State *L)
{
	struct lmulti *m = luaL_checkudata(L, 1, MULTI_MT);
	if (m->cached)
		objcache_release(m->cached);
	else
		hs_free_database(m->db);
	m->cached = NULL;
	free(m->hits);
	m->db = NULL;
	m->hits = NULL;
	return 0;
}

/* Hyperscan flags of F; returns 0, or the first unknown flag character. */
static int hs_flags_of(const char *f, size_t n, unsigned *out)
{
	for (size_t i = 0; i < n; i++) {
		switch (f[i]) {
		case 'i': *out |= HS_FLAG_CASELESS; break;
		case 'm': *out |= HS_FLAG_MULTILINE; break;
		case 's': *out |= HS_FLAG_DOTALL; break;
		default: return f[i] ? f[i] : '?';
		}
	}
	return 0;
}

/* A literal as a Hyperscan regex: every non-alphanumeric byte escaped. */
static void escape_literal(struct buf *out, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
			buf_append(out, s + i, 1);
		else
			buf_appendf(out, "\\x%02x", c);
	}
}

static int multi_new(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	size_t gflen = 0;
	const char *gf = luaL_optlstring(L, 2, "", &gflen);
	unsigned gflags = HS_FLAG_SINGLEMATCH;
	int badc = hs_flags_of(gf, gflen, &gflags);
	if (badc)
		return luaL_error(L, "sluice.multi: unknown flag '%c' (use i, m, s)", badc);
	lua_Integer n = luaL_len(L, 1);
	if (n < 1 || n > 100000)
		return luaL_error(L, "sluice.multi: the list must have 1 to 100000 entries");
	struct lmulti *m = lua_newuserdatauv(L, sizeof(*m), 0);
	memset(m, 0, sizeof(*m));
	luaL_setmetatable(L, MULTI_MT);
	m->n = (unsigned)n;
	m->hits = calloc((size_t)n, sizeof(*m->hits));
	/* Pattern texts go into one buffer; pointers are fixed up after. */
	struct buf text = { 0 };
	size_t *offs = calloc((size_t)n, sizeof(*offs));
	const char **exprs = calloc((size_t)n, sizeof(*exprs));
	unsigned *flags = calloc((size_t)n, sizeof(*flags));
	unsigned *ids = calloc((size_t)n, sizeof(*ids));
	if (!m->hits || !offs || !exprs || !flags || !ids) {
		free(offs), free(exprs), free(flags), free(ids);
		return luaL_error(L, "sluice.multi: out of memory");
	}
	const char *bad = NULL;
	char why[256] = "";
	for (lua_Integer i = 1; i <= n && !bad; i++) {
		lua_geti(L, 1, i);
		size_t plen = 0, flen = 0;
		const char *pat = NULL, *ef = "";
		int literal = 0;
		lua_Integer id = i;
		if (lua_type(L, -1) == LUA_TSTRING) {
			pat = lua_tolstring(L, -1, &plen);
		} else if (lua_type(L, -1) == LUA_TTABLE) {
			if (lua_getfield(L, -1, "pattern") == LUA_TSTRING)
				pat = lua_tolstring(L, -1, &plen);
			lua_pop(L, 1);
			if (lua_getfield(L, -1, "id") != LUA_TNIL) {
				int isnum;
				id = lua_tointegerx(L, -1, &isnum);
				if (!isnum || id < 0 || id > 0x7fffffff)
					snprintf(why, sizeof(why), "entry %lld: id must be an integer 0..2^31-1", (long long)i);
			}
			lua_pop(L, 1);
			if (lua_getfield(L, -1, "flags") == LUA_TSTRING)
				ef = lua_tolstring(L, -1, &flen);
			lua_pop(L, 1);
			lua_getfield(L, -1, "literal");
			literal = lua_toboolean(L, -1);
			lua_pop(L, 1);
		}
		if (pat == NULL && !why[0])
			snprintf(why, sizeof(why), "entry %lld: expected a pattern string or {pattern = ...}", (long long)i);
		if (why[0]) {
			bad = why;
			lua_pop(L, 1);
			break;
		}
		offs[i - 1] = text.len;
		if (literal)
			escape_literal(&text, pat, plen);
		else
			buf_append(&text, pat, plen);
		buf_append(&text, "", 1);
		flags[i - 1] = gflags;
		ids[i - 1] = (unsigned)id;
		if ((badc = hs_flags_of(ef, flen, &flags[i - 1])) != 0) {
			snprintf(why, sizeof(why), "entry %lld: unknown flag '%c' (use i, m, s)", (long long)i, badc);
			bad = why;
		}
		lua_pop(L, 1);
	}
	struct objcache_entry *hit = NULL;
	if (!bad) {
		/* The cache key: every pattern with its flags and id. */
		for (lua_Integer i = 0; i < n; i++)
			buf_appendf(&text, "%u:%u;", flags[i], ids[i]);
		hit = objcache_get(&hcache, text.data, text.len);
	}
	if (hit) {
		m->db = hit->obj;
		m->cached = hit;
		if (hs_alloc_scratch(m->db, &hs_scratch) != HS_SUCCESS) {
			snprintf(why, sizeof(why), "cannot allocate scan scratch");
			bad = why;
		}
	} else if (!bad) {
		for (lua_Integer i = 0; i < n; i++)
			exprs[i] = text.data + offs[i];
		hs_compile_error_t *ce = NULL;
		if (hs_compile_multi(exprs, flags, ids, (unsigned)n, HS_MODE_BLOCK, NULL, &m->db, &ce) != HS_SUCCESS) {
			if (ce && ce->expression >= 0)
				snprintf(why, sizeof(why), "entry %d (id %u, /%.80s/): %s", ce->expression + 1,
					 ids[ce->expression], exprs[ce->expression], ce->message);
			else
				snprintf(why, sizeof(why), "%s", ce ? ce->message : "compile failed");
			hs_free_compile_error(ce);
			bad = why;
		} else if (hs_alloc_scratch(m->db, &hs_scratch) != HS_SUCCESS) {
			snprintf(why, sizeof(why), "cannot allocate scan scratch");
			bad = why;
		} else {
			m->cached = objcache_put(&hcache, text.data, text.len, m->db);
		}
	}
	free(offs), free(exprs), free(flags), free(ids), buf_free(&text);
	if (bad)
		return luaL_error(L, "sluice.multi: %s", bad);
	return 1;
}

static int on_hit(unsigned id, unsigned long long from, unsigned long long to, unsigned fl, void *ctx)
{
	(void)from, (void)to, (void)fl;
	struct lmulti *m = ctx;
	if (m->nhits < m->n)
		m->hits[m->nhits++] = id;
	return m->stop_first;
}

/* Scan S; the ids found are in m->hits[0..nhits). */
static void multi_run(lua_State *L, struct lmulti *m, int stop_first)
{
	size_t len;
	const char *s = luaL_checklstring(L, 2, &len);
	if (m->db == NULL)
		luaL_error(L, "multi used after it was collected");
	if (len > 0xffffffffu)
		luaL_error(L, "subject too long");
	m->nhits = 0;
	m->stop_first = stop_first;
	hs_error_t e = hs_scan(m->db, s, (unsigned)len, 0, hs_scratch, on_hit, m);
	if (e != HS_SUCCESS && e != HS_SCAN_TERMINATED)
		luaL_error(L, "multi scan failed (hyperscan error %d)", (int)e);
}

static int multi_test(lua_State *L)
{
	struct lmulti *m = luaL_checkudata(L, 1, MULTI_MT);
	multi_run(L, m, 1);
	lua_pushboolean(L, m->nhits > 0);
	return 1;
}

static int multi_first(lua_State *L)
{
	struct lmulti *m = luaL_checkudata(L, 1, MULTI_MT);
	multi_run(L, m, 1);
	if (m->nhits)
		lua_pushinteger(L, m->hits[0]);
	else
		lua_pushnil(L);
	return 1;
}

static int multi_scan(lua_State *L)
{
	struct lmulti *m = luaL_checkudata(L, 1, MULTI_MT);
	luaL_checktype(L, 3, LUA_TTABLE);
	multi_run(L, m, 0);
	for (unsigned i = 0; i < m->nhits; i++) {
		lua_pushinteger(L, m->hits[i]);
		lua_rawseti(L, 3, (lua_Integer)i + 1);
	}
	/* Clear what an earlier, longer result left behind. */
	for (lua_Integer i = (lua_Integer)m->nhits + 1;; i++) {
		if (lua_rawgeti(L, 3, i) == LUA_TNIL) {
			lua_pop(L, 1);
			break;
		}
		lua_pop(L, 1);
		lua_pushnil(L);
		lua_rawseti(L, 3, i);
	}
	lua_pushinteger(L, m->nhits);
	return 1;
}

/* ---- sluice.cidrs ---- */

static int cidrs_gc(lua_State *L)
{
	cidrset_free(luaL_checkudata(L, 1, CIDRS_MT));
	return 0;
}

static int cidrs_new(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_Integer n = luaL_len(L, 1);
	struct cidrset *s = lua_newuserdatauv(L, sizeof(*s), 0);
	memset(s, 0, sizeof(*s));
	luaL_setmetatable(L, CIDRS_MT);
	if (n <= 0)
		return 1;
	struct cidr *nets = calloc((size_t)n, sizeof(*nets));
	if (nets == NULL)
		return luaL_error(L, "sluice.cidrs: out of memory");
	for (lua_Integer i = 1; i <= n; i++) {
		const char *why;
		lua_geti(L, 1, i);
		const char *t = lua_tostring(L, -1);
		if (t == NULL || cidr_parse(t, &nets[i - 1], &why) < 0) {
			char msg[200];
			snprintf(msg, sizeof(msg), "sluice.cidrs: entry %lld \"%.60s\": %s", (long long)i,
				 t ? t : "(not a string)", t ? why : "expected a network");
			free(nets);
			return luaL_error(L, "%s", msg);
		}
		lua_pop(L, 1);
	}
	int rc = cidrset_build(s, nets, (size_t)n);
	free(nets);
	if (rc < 0)
		return luaL_error(L, "sluice.cidrs: out of memory");
	return 1;
}

static int cidrs_contains(lua_State *L)
{
	const struct cidrset *s = luaL_checkudata(L, 1, CIDRS_MT);
	const char *ip = luaL_checkstring(L, 2);
	struct netaddr a = { 0 };
	if (inet_pton(AF_INET, ip, a.ip) == 1)
		a.family = AF_INET;
	else if (inet_pton(AF_INET6, ip, a.ip) == 1)
		a.family = AF_INET6;
	lua_pushboolean(L, a.family && cidrset_contains(s, &a));
	return 1;
}

static int cidrs_count(lua_State *L)
{
	const struct cidrset *s = luaL_checkudata(L, 1, CIDRS_MT);
	lua_pushinteger(L, (lua_Integer)s->n);
	return 1;
}

/* ---- transformations ---- */

/* Parsed chains, remembered by their text: a script passes the same few
 * spec strings on every request. */
#define XCACHE 8
static struct {
	char spec[96];
	uint8_t len, n;
	uint8_t steps[XFORM_MAX_STEPS];
} xcache[XCACHE];
static unsigned xcache_next;

static int xform_lookup(lua_State *L, const char *spec, size_t len, const uint8_t **steps)
{
	for (unsigned i = 0; i < XCACHE; i++)
		if (xcache[i].len == len && xcache[i].n && memcmp(xcache[i].spec, spec, len) == 0) {
			*steps = xcache[i].steps;
			return xcache[i].n;
		}
	uint8_t tmp[XFORM_MAX_STEPS];
	const char *bad;
	size_t badlen;
	int n = xform_parse(spec, len, tmp, XFORM_MAX_STEPS, &bad, &badlen);
	if (n < 0)
		return luaL_error(L, "sluice.transform: unknown step \"%.*s\"", (int)badlen, bad);
	if (len >= sizeof(xcache[0].spec)) {
		static uint8_t once[XFORM_MAX_STEPS];
		memcpy(once, tmp, sizeof(once));
		*steps = once;
		return n;
	}
	unsigned slot = xcache_next++ % XCACHE;
	memcpy(xcache[slot].spec, spec, len);
	xcache[slot].len = (uint8_t)len;
	xcache[slot].n = (uint8_t)n;
	memcpy(xcache[slot].steps, tmp, sizeof(tmp));
	*steps = xcache[slot].steps;
	return n;
}

/* One copy into the scratch buffer, every step in place, one Lua string. */
static int push_transformed(lua_State *L, const char *s, size_t len, const uint8_t *steps, int n)
{
	xbuf.len = 0;
	buf_append(&xbuf, s, len);
	size_t out = xform_apply(steps, n, xbuf.data, len);
	lua_pushlstring(L, xbuf.data, out);
	if (xbuf.cap > (1u << 20) && len < (1u << 16))
		buf_free(&xbuf);  /* one huge subject must not pin its buffer */
	return 1;
}

static int l_transform(lua_State *L)
{
	size_t len, slen;
	const char *s = luaL_checklstring(L, 1, &len);
	const char *spec = luaL_checklstring(L, 2, &slen);
	const uint8_t *steps = NULL;
	int n = xform_lookup(L, spec, slen, &steps);
	return push_transformed(L, s, len, steps, n);
}

static int one_step(lua_State *L, enum xform_step st)
{
	size_t len;
	const char *s = luaL_checklstring(L, 1, &len);
	uint8_t step = (uint8_t)st;
	return push_transformed(L, s, len, &step, 1);
}

static int l_urldecode(lua_State *L) { return one_step(L, XF_URLDECODE); }
static int l_htmldecode(lua_State *L) { return one_step(L, XF_HTMLDECODE); }
static int l_lower(lua_State *L) { return one_step(L, XF_LOWER); }
static int l_compress_ws(lua_State *L) { return one_step(L, XF_COMPRESS_WS); }
static int l_b64decode(lua_State *L) { return one_step(L, XF_B64DECODE); }

void luaprim_new_mt(lua_State *L, const char *name, const luaL_Reg *methods, lua_CFunction gc)
{
	luaL_newmetatable(L, name);
	lua_newtable(L);
	luaL_setfuncs(L, methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, gc);
	lua_setfield(L, -2, "__gc");
	lua_pushstring(L, name);
	lua_setfield(L, -2, "__name");
	lua_pop(L, 1);
}

void luaprim_open(lua_State *L)
{
	static const luaL_Reg regex_m[] = { { "test", regex_test }, { "find", regex_find },
					     { "match", regex_match }, { NULL, NULL } };
	static const luaL_Reg multi_m[] = { { "test", multi_test }, { "first", multi_first },
					     { "scan", multi_scan }, { NULL, NULL } };
	static const luaL_Reg cidrs_m[] = { { "contains", cidrs_contains }, { "count", cidrs_count },
					     { NULL, NULL } };
	static const luaL_Reg funcs[] = {
		{ "regex", regex_new }, { "multi", multi_new }, { "cidrs", cidrs_new },
		{ "transform", l_transform }, { "urldecode", l_urldecode }, { "htmldecode", l_htmldecode },
		{ "lower", l_lower }, { "compress_ws", l_compress_ws }, { "b64decode", l_b64decode },
		{ NULL, NULL },
	};
	if (match_ctx == NULL) {
		match_ctx = pcre2_match_context_create(NULL);
		if (match_ctx) {
			pcre2_set_match_limit(match_ctx, REGEX_MATCH_LIMIT);
			pcre2_set_depth_limit(match_ctx, REGEX_DEPTH_LIMIT);
		}
	}
	luaprim_new_mt(L, REGEX_MT, regex_m, regex_gc);
	luaprim_new_mt(L, MULTI_MT, multi_m, multi_gc);
	luaprim_new_mt(L, CIDRS_MT, cidrs_m, cidrs_gc);
	luaL_setfuncs(L, funcs, 0);
}

void luaprim_cache_begin(void)
{
	objcache_begin(&hcache);
}

void luaprim_cache_end(void)
{
	objcache_end(&hcache);
}

void luaprim_close(void)
{
	hs_free_scratch(hs_scratch);
	hs_scratch = NULL;
	buf_free(&xbuf);
}
