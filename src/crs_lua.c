/* sluice.crs (crs_lua.h says what and why). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lauxlib.h>
#include "crs_lua.h"
#include "crseval.h"
#include "httpmsg.h"
#include "inspect_api.h"
#include "luaprim.h"
#include "objcache.h"
#include "util.h"

#define CRS_MT "sluice.crs"
#define CRS_MAX_SKIP 256
#define CRS_MAX_HEADERS 256

/* Compiled programs by their source (the config text and the skip list):
 * objcache.h says why and when. */
static void free_program(void *obj)
{
	crs_program_free(obj);
	free(obj);
}
static struct objcache cache = { .free_obj = free_program };

struct lcrs {
	struct crs_program *prog;
	struct objcache_entry *cached;  /* NULL: the object owns prog */
};

/* One evaluation at a time per process (a worker runs one Lua call at a
 * time), so one transaction, reused: its buffers keep their capacity. */
static struct crs_txn txn;
static int txn_ready;
static struct sc_header headers[CRS_MAX_HEADERS];

static int crs_gc(lua_State *L)
{
	struct lcrs *o = luaL_checkudata(L, 1, CRS_MT);
	if (o->cached)
		objcache_release(o->cached);
	else if (o->prog)
		free_program(o->prog);
	o->prog = NULL;
	o->cached = NULL;
	return 0;
}

/* Relative Includes are read from the calling script's directory (like
 * files a script ships with), else from the working directory. */
static void config_name(lua_State *L, char *out, size_t cap)
{
	lua_Debug ar;
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar) && ar.source[0] == '@')
		snprintf(out, cap, "%s (sluice.crs config)", ar.source + 1);
	else
		snprintf(out, cap, "sluice.crs config");
}

static struct crs_program *compile(lua_State *L, const char *config, size_t clen, const uint32_t *skip, size_t nskip)
{
	struct seclang sl;
	char name[1024];
	config_name(L, name, sizeof(name));
	seclang_init(&sl);
	if (seclang_load_buffer(&sl, name, config, clen, 1) < 0 || seclang_finish(&sl) < 0) {
		lua_pushfstring(L, "sluice.crs: %s", sl.error);
		seclang_free(&sl);
		lua_error(L);
	}
	struct crs_program *p = calloc(1, sizeof(*p));
	AN(p);
	if (crs_compile(p, &sl, skip, nskip) < 0) {
		lua_pushfstring(L, "sluice.crs: %s", p->error);
		free_program(p);
		lua_error(L);
	}
	return p;
}

/* sluice.crs{config = "SecLang text", skip = {ids}} */
static int crs_new(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	if (lua_getfield(L, 1, "config") != LUA_TSTRING)
		return luaL_error(L, "sluice.crs: config must be SecLang text (Include lines, directives)");
	size_t clen;
	const char *config = lua_tolstring(L, -1, &clen);
	uint32_t skip[CRS_MAX_SKIP];
	size_t nskip = 0;
	int t = lua_getfield(L, 1, "skip");
	if (t == LUA_TTABLE) {
		lua_Integer n = luaL_len(L, -1);
		if (n > CRS_MAX_SKIP)
			return luaL_error(L, "sluice.crs: at most %d rule ids to skip", CRS_MAX_SKIP);
		for (lua_Integer i = 1; i <= n; i++) {
			lua_geti(L, -1, i);
			int isnum;
			lua_Integer id = lua_tointegerx(L, -1, &isnum);
			if (!isnum || id < 1 || id > 0x7fffffff)
				return luaL_error(L, "sluice.crs: skip entry %d is not a rule id", (int)i);
			skip[nskip++] = (uint32_t)id;
			lua_pop(L, 1);
		}
	} else if (t != LUA_TNIL) {
		return luaL_error(L, "sluice.crs: skip must be a list of rule ids");
	}
	lua_pop(L, 1);
	/* the key: the config text and the skip list, as given */
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	luaL_addlstring(&b, config, clen);
	luaL_addchar(&b, '\0');
	luaL_addlstring(&b, (const char *)skip, nskip * sizeof(*skip));
	luaL_pushresult(&b);
	size_t keylen;
	const char *key = lua_tolstring(L, -1, &keylen);
	struct objcache_entry *hit = objcache_get(&cache, key, keylen);
	struct crs_program *p = hit ? hit->obj : compile(L, config, clen, skip, nskip);
	struct lcrs *o = lua_newuserdatauv(L, sizeof(*o), 0);
	o->prog = p;
	o->cached = hit ? hit : objcache_put(&cache, key, keylen, p);
	luaL_setmetatable(L, CRS_MT);
	return 1;
}

static void push_ids(lua_State *L, const struct crs_verdict *v, int logged_only)
{
	lua_createtable(L, (int)v->nalerts, 0);
	lua_Integer n = 0;
	uint32_t last = 0;
	for (size_t i = 0; i < v->nalerts; i++) {
		const struct crs_alert *a = &v->alerts[i];
		uint32_t id = crs_rule_id(a->rule);
		if (a->secaction || (logged_only && !a->logged) || id == last)
			continue;
		last = id;
		lua_pushinteger(L, id);
		lua_rawseti(L, -2, ++n);
	}
}

/* The tags and messages of the logged alerts, each tag once. */
static void push_tags_msgs(lua_State *L, const struct crs_verdict *v)
{
	lua_newtable(L);  /* tags */
	lua_newtable(L);  /* msgs */
	lua_newtable(L);  /* seen tags */
	lua_Integer nt = 0, nm = 0;
	for (size_t i = 0; i < v->nalerts; i++) {
		const struct crs_alert *a = &v->alerts[i];
		if (a->secaction || !a->logged || (i > 0 && v->alerts[i - 1].rule == a->rule))
			continue;
		const struct sl_rule *r = a->rule->src;
		for (size_t k = 0; k < r->nactions; k++) {
			const struct sl_action *act = &r->actions[k];
			if (act->act == SL_ACT_TAG && act->value) {
				if (lua_getfield(L, -1, act->value) == LUA_TNIL) {
					lua_pop(L, 1);
					lua_pushboolean(L, 1);
					lua_setfield(L, -2, act->value);
					lua_pushstring(L, act->value);
					lua_rawseti(L, -4, ++nt);
				} else {
					lua_pop(L, 1);
				}
			} else if (act->act == SL_ACT_MSG && act->value) {
				lua_pushstring(L, act->value);
				lua_rawseti(L, -3, ++nm);
			}
		}
	}
	lua_pop(L, 1);
}

/* crs:eval(req) -> {blocked, status, rule, score, ids, matched, tags, msgs} */
static int crs_eval(lua_State *L)
{
	struct lcrs *o = luaL_checkudata(L, 1, CRS_MT);
	if (!o->prog)
		return luaL_error(L, "sluice.crs: object already released");
	struct inspect_req_view rv;
	inspect_api_req_view(L, 2, &rv);
	const struct msg *m = rv.head;
	size_t nh = 0;
	for (uint32_t i = 0; i < m->nhdrs && nh < CRS_MAX_HEADERS; i++) {
		const struct hdr *h = &m->hdrs[i];
		headers[nh++] = (struct sc_header){ msg_str(m, h->name_off), msg_str(m, h->val_off), h->name_len, h->val_len };
	}
	struct crs_request rq = {
		.method = rv.method, .method_len = strlen(rv.method),
		.target = rv.target, .target_len = rv.target_len,
		.protocol = rv.version, .protocol_len = strlen(rv.version),
		.headers = headers, .nheaders = nh,
		.body = rv.body, .body_len = rv.body_len,
		.remote_addr = rv.client_ip, .remote_port = rv.client_port,
	};
	if (!txn_ready) {
		crs_txn_init(&txn);
		txn_ready = 1;
	}
	crs_eval_request(&txn, o->prog, &rq);
	const struct crs_verdict *v = &txn.v;
	lua_createtable(L, 0, 9);
	lua_pushboolean(L, v->intercepted);
	lua_setfield(L, -2, "blocked");
	if (v->intercepted) {
		lua_pushinteger(L, v->status);
		lua_setfield(L, -2, "status");
		lua_pushinteger(L, v->rule_id);
		lua_setfield(L, -2, "rule");
	}
	/* CRS 3 keeps the inbound total in tx.anomaly_score, CRS 4 in
	 * tx.blocking_inbound_anomaly_score */
	int score = crs_txn_tx(&txn, "blocking_inbound_anomaly_score", NULL) ? crs_txn_tx_int(&txn, "blocking_inbound_anomaly_score")
									     : crs_txn_tx_int(&txn, "anomaly_score");
	lua_pushinteger(L, score);
	lua_setfield(L, -2, "score");
	lua_pushinteger(L, crs_txn_tx_int(&txn, "inbound_anomaly_score_threshold"));
	lua_setfield(L, -2, "threshold");
	lua_pushboolean(L, v->body_error);
	lua_setfield(L, -2, "body_error");
	push_ids(L, v, 1);
	lua_setfield(L, -2, "ids");
	push_ids(L, v, 0);
	lua_setfield(L, -2, "matched");
	push_tags_msgs(L, v);
	lua_setfield(L, -3, "msgs");
	lua_setfield(L, -2, "tags");
	return 1;
}

/* crs:tx(name): a TX variable after the last eval, or nil. */
static int crs_tx(lua_State *L)
{
	luaL_checkudata(L, 1, CRS_MT);
	const char *name = luaL_checkstring(L, 2);
	size_t n;
	const char *v = txn_ready ? crs_txn_tx(&txn, name, &n) : NULL;
	if (v)
		lua_pushlstring(L, v, n);
	else
		lua_pushnil(L);
	return 1;
}

/* crs:rules(): how many rules (chain starters and SecActions) it runs. */
static int crs_rules(lua_State *L)
{
	struct lcrs *o = luaL_checkudata(L, 1, CRS_MT);
	lua_Integer n = 0;
	for (int ph = 1; o->prog && ph <= 5; ph++)
		for (size_t i = 0; i < o->prog->nphase[ph]; i++)
			n += o->prog->phase[ph][i].src->kind != SL_MARKER;
	lua_pushinteger(L, n);
	return 1;
}

void crs_lua_open(lua_State *L)
{
	static const luaL_Reg methods[] = { { "eval", crs_eval }, { "tx", crs_tx }, { "rules", crs_rules }, { NULL, NULL } };
	luaprim_new_mt(L, CRS_MT, methods, crs_gc);
	lua_pushcfunction(L, crs_new);
	lua_setfield(L, -2, "crs");
}

void crs_lua_cache_begin(void)
{
	objcache_begin(&cache);
}

void crs_lua_cache_end(void)
{
	objcache_end(&cache);
}

void crs_lua_close(void)
{
	if (txn_ready) {
		crs_txn_free(&txn);
		txn_ready = 0;
	}
}
