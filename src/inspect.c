/* The inspection hook's runtime: the worker's Lua state, the sandbox its
 * scripts run in, the guard that stops a runaway call, and the calls into
 * the three phases.
 *
 * Guard. A count hook fires every HOOK_EVERY VM instructions and checks the
 * call's instruction budget, its CPU-time budget and its wall-clock
 * ceiling; the allocator enforces the state's memory cap. The time budget
 * is the worker thread's own CPU time: wall time would stop a script for
 * the time other processes held the CPU, and with on_error: allow anyone
 * able to load the machine could get requests past inspection uninspected.
 * The wall-clock ceiling is a much larger last resort, for a call that
 * somehow stops consuming CPU while it holds the worker's loop. When a call overruns, it is "doomed": the hook is re-armed to
 * fire on every instruction and raises again each time, so a script that
 * catches the error with pcall is stopped at its next instruction, until
 * the error reaches our own lua_pcall. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <lauxlib.h>
#include <lualib.h>
#include "alloc.h"
#include "crs_lua.h"
#include "inspect.h"
#include "inspect_api.h"
#include "log.h"
#include "luaprim.h"
#include "shdict.h"
#include "shdict_lua.h"
#include "shm.h"
#include "stats.h"
#include "util.h"
#include "worker.h"

#define HOOK_EVERY 1000           /* instructions between guard checks */
#define MEM_SLACK (256 * 1024)    /* room to raise the error once the cap is hit */
/* A script's main chunk may compile big pattern sets (waf.lua: ~2.5 s of
 * Hyperscan), so it gets a CPU budget of its own, and no wall-clock
 * ceiling: a busy machine (several masters checking configs at once, a
 * loaded CI box) must not turn a valid script into an invalid
 * configuration. */
#if defined(__SANITIZE_ADDRESS__)
/* ASan+UBSan builds run it about 3.5x slower (waf.lua: ~8 s of CPU against
 * ~2.3 s on a quiet VM, 12 s when the VM ran 1.5x slow), and this VM's speed
 * moves 2x between hours: 20 s left a CI run's every waf test failing. */
#define LOAD_CPU_US 40000000u     /* 5x what waf.lua needs there on a quiet VM */
#else
#define LOAD_CPU_US 10000000u     /* a script's main chunk: 10 s of CPU */
#endif
#define ERRLOG_PER_SEC 10         /* script error lines per second per worker */
#define SCRIPT_FILE_MAX (16u << 20)

struct inspect_script {
	char path[512];
	int fn_inspect, fn_response, fn_log;  /* registry refs, LUA_NOREF if absent */
	int broken;                     /* did not load in this worker */
};

/* One per process: the worker's state, or a short-lived check state. */
struct guard {
	lua_State *L;
	size_t used, max;
	uint64_t instr, instr_max;      /* this call */
	uint64_t cpu_start, cpu_max;    /* thread CPU time (us) at entry; budget, 0 = none */
	uint64_t cpu_check_at;          /* now_us() before which the CPU budget cannot be spent */
	uint64_t wall_start, wall_max;  /* now_us() at entry; ceiling, 0 = none */
	const char *doom;               /* why the current call is being stopped, or NULL */
	int in_call;
	int need_gc;                    /* the call hit the memory cap: collect once it is cleaned up */
};

static struct guard G;
static struct inspect_script *scripts;
static unsigned nscripts;
/* Routes with their own inspection, and the script each loaded. */
static struct route_script { const struct cfg_route *route; struct inspect_script *sc; } *route_scripts;
static unsigned nroute_scripts;
static struct inspect_ref *req_ref, *resp_ref;
static struct { uint64_t second; unsigned n, dropped; } errlog;
/* The dictionary behind sluice.shared in the next state made: the
 * instance's in a worker; a private one for config checks, so that a main
 * chunk run by `sluice -t` or by the master's reload check writes nothing
 * the workers see (and works where no instance exists). */
static struct shdict *state_dict;
static struct shdict *check_dict;
#define CHECK_DICT_SIZE (256u * 1024)

/* ---- the guard ---- */

static void count_hook(lua_State *L, lua_Debug *ar);

static void doom(lua_State *L, const char *why)
{
	G.doom = why;
	lua_sethook(L, count_hook, LUA_MASKCOUNT, 1);
}

static uint64_t thread_cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* A thread's CPU time never runs ahead of the wall clock, so the CPU clock
 * (a system call, ~250 ns here) is read only once enough wall time has
 * passed for the rest of the budget to be spent; the wall clock comes from
 * the vDSO. An unhurried call reads the CPU clock once, at entry. */
static const char *guard_time_check(void)
{
	if (G.cpu_max == 0 && G.wall_max == 0)
		return NULL;
	uint64_t now = now_us();
	if (G.wall_max && now - G.wall_start > G.wall_max)
		return "wall-clock ceiling exceeded";
	if (G.cpu_max && now > G.cpu_check_at) {
		uint64_t used = thread_cpu_us() - G.cpu_start;
		if (used > G.cpu_max)
			return "CPU time budget exceeded";
		G.cpu_check_at = now + (G.cpu_max - used);
	}
	return NULL;
}

static void count_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	if (G.doom == NULL) {
		const char *why;
		G.instr += HOOK_EVERY;
		if (G.instr_max && G.instr > G.instr_max)
			doom(L, "instruction budget exceeded");
		else if ((why = guard_time_check()) != NULL)
			doom(L, why);
		else
			return;
	}
	luaL_error(L, "%s", G.doom);
}

static void *guard_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct guard *g = ud;
	size_t old = ptr ? osize : 0;
	if (nsize == 0) {
		free(ptr);
		g->used -= old;
		return NULL;
	}
	if (nsize > old && g->used + (nsize - old) > g->max + (g->doom ? MEM_SLACK : 0)) {
		if (g->in_call && g->doom == NULL && g->L)
			doom(g->L, "memory limit exceeded");
		return NULL;
	}
	void *p = realloc(ptr, nsize);
	if (p == NULL)
		return NULL;
	g->used = g->used - old + nsize;
	return p;
}

static void guard_arm(uint64_t instructions, uint64_t cpu_us, uint64_t wall_us)
{
	G.instr = 0;
	G.instr_max = instructions;
	G.cpu_max = cpu_us;
	G.cpu_start = cpu_us ? thread_cpu_us() : 0;
	G.wall_max = wall_us;
	G.wall_start = now_us();
	G.cpu_check_at = G.wall_start + cpu_us;
	G.doom = NULL;
	G.in_call = 1;
	if (instructions || cpu_us || wall_us)
		lua_sethook(G.L, count_hook, LUA_MASKCOUNT, HOOK_EVERY);
	else
		lua_sethook(G.L, NULL, 0, 0);
}

/* Call the function below NARGS arguments, guarded (budgets of 0 are
 * none). Returns NULL, or why it failed (valid until the next call); the
 * stack is left as before the push. */
static const char *guarded_pcall(int nargs, uint64_t instructions, uint64_t cpu_us, uint64_t wall_us)
{
	static char why[512];
	guard_arm(instructions, cpu_us, wall_us);
	int rc = lua_pcall(G.L, nargs, 0, 0);
	G.in_call = 0;
	if (rc == LUA_OK)
		return NULL;
	/* The guard's own errors carry the script position luaL_error put
	 * in front ("waf.lua:12: CPU time budget exceeded"); keep it. */
	const char *msg = lua_type(G.L, -1) == LUA_TSTRING ? lua_tostring(G.L, -1) : NULL;
	if (G.doom && !(msg && strstr(msg, G.doom)))
		snprintf(why, sizeof(why), "%s", G.doom);
	else if (rc == LUA_ERRMEM)
		snprintf(why, sizeof(why), "memory limit exceeded");
	else if (msg)
		snprintf(why, sizeof(why), "%s", msg);
	else
		snprintf(why, sizeof(why), "error object is a %s value, not a string", luaL_typename(G.L, -1));
	G.need_gc = G.doom ? strcmp(G.doom, "memory limit exceeded") == 0 : rc == LUA_ERRMEM;
	lua_pop(G.L, 1);
	G.doom = NULL;
	return why;
}

/* ---- the sandbox ---- */

static int l_load_text(lua_State *L)
{
	size_t len;
	const char *chunk = luaL_checklstring(L, 1, &len);
	const char *name = luaL_optstring(L, 2, "=(load)");
	if (luaL_loadbufferx(L, chunk, len, name, "t") != LUA_OK) {
		lua_pushnil(L);
		lua_insert(L, -2);
		return 2;
	}
	if (!lua_isnoneornil(L, 4)) {
		lua_pushvalue(L, 4);
		if (!lua_setupvalue(L, -2, 1))
			lua_pop(L, 1);
	}
	return 1;
}

/* xpcall whose message handler runs after the stack has unwound, as an
 * ordinary call the guard can stop. (Lua runs a handler at the error site,
 * and an error raised by the guard's own hook would run it inside the
 * hook, where hooks are off: a looping handler could never be stopped.) */
static int l_xpcall(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	lua_pushvalue(L, 1);            /* f */
	for (int i = 3; i <= n; i++)
		lua_pushvalue(L, i);
	if (lua_pcall(L, n - 2 > 0 ? n - 2 : 0, LUA_MULTRET, 0) == LUA_OK) {
		lua_pushboolean(L, 1);
		lua_replace(L, n);      /* keep 1..n-1 as they are; results follow */
		return lua_gettop(L) - n + 1;
	}
	lua_pushvalue(L, 2);            /* handler, then the error */
	lua_insert(L, -2);
	if (lua_pcall(L, 1, 1, 0) != LUA_OK && G.doom)
		return lua_error(L);    /* a stopped handler stays stopped */
	lua_pushboolean(L, 0);
	lua_insert(L, -2);
	return 2;
}

/* setmetatable that refuses __gc: finalizers run inside the collector
 * with hooks off, beyond the guard's reach. */
static int l_setmetatable(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TTABLE && lua_getfield(L, 2, "__gc") != LUA_TNIL)
		return luaL_error(L, "setmetatable: __gc is not allowed in inspection scripts");
	lua_settop(L, 2);
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, 2, 1);
	return 1;
}

static int l_now(lua_State *L)
{
	lua_pushnumber(L, (lua_Number)now_us() / 1e6);
	return 1;
}

static int l_time(lua_State *L)
{
	struct timeval tv;
	gettimeofday(&tv, NULL);
	lua_pushnumber(L, (lua_Number)tv.tv_sec + (lua_Number)tv.tv_usec / 1e6);
	return 1;
}

static int l_log(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	for (int i = 1; i <= n; i++) {
		if (i > 1)
			luaL_addchar(&b, ' ');
		luaL_tolstring(L, i, NULL);
		luaL_addvalue(&b);
	}
	luaL_pushresult(&b);
	lua_Debug ar;
	const char *where = "lua";
	if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "S", &ar))
		where = ar.short_src;
	log_warn("%s: %s", where, lua_tostring(L, -1));
	return 0;
}

/* Build the sandbox in the state's global table (run protected). */
static int sandbox_open(lua_State *L)
{
	static const struct { const char *name; lua_CFunction open; } libs[] = {
		{ LUA_GNAME, luaopen_base }, { LUA_STRLIBNAME, luaopen_string },
		{ LUA_TABLIBNAME, luaopen_table }, { LUA_MATHLIBNAME, luaopen_math },
		{ LUA_UTF8LIBNAME, luaopen_utf8 },
	};
	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		luaL_requiref(L, libs[i].name, libs[i].open, 1);
		lua_pop(L, 1);
	}
	/* Files, the collector, binary chunks: none of a script's business. */
	static const char *const drop[] = { "dofile", "loadfile", "collectgarbage" };
	for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++) {
		lua_pushnil(L);
		lua_setglobal(L, drop[i]);
	}
	lua_pushcfunction(L, l_load_text);
	lua_setglobal(L, "load");
	lua_pushcfunction(L, l_xpcall);
	lua_setglobal(L, "xpcall");
	lua_getglobal(L, "setmetatable");
	lua_pushcclosure(L, l_setmetatable, 1);
	lua_setglobal(L, "setmetatable");
	lua_pushcfunction(L, l_log);
	lua_setglobal(L, "print");
	lua_getglobal(L, LUA_STRLIBNAME);
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);

	lua_newtable(L);
	luaprim_open(L);
	crs_lua_open(L);
	lua_pushcfunction(L, l_now);
	lua_setfield(L, -2, "now");
	lua_pushcfunction(L, l_time);
	lua_setfield(L, -2, "time");
	lua_pushcfunction(L, l_log);
	lua_setfield(L, -2, "log");
	shdict_lua_push(L, state_dict);
	lua_setfield(L, -2, "shared");
	lua_newtable(L);
	lua_setfield(L, -2, "worker_state");
	lua_pushinteger(L, W ? W->index : 0);
	lua_setfield(L, -2, "worker");
	lua_setglobal(L, "sluice");

	inspect_api_open(L);
	return 0;
}

static int on_panic(lua_State *L)
{
	/* Every call is protected; reaching here is a bug in sluice. */
	log_error("Lua panic: %s", lua_tostring(L, -1));
	log_flush();
	abort();
}

static lua_State *state_new(uint64_t memory_max, char *why, size_t cap)
{
	memset(&G, 0, sizeof(G));
	G.max = (size_t)memory_max;
	lua_State *L = lua_newstate(guard_alloc, &G);
	if (L == NULL) {
		snprintf(why, cap, "cannot create a Lua state (out of memory)");
		return NULL;
	}
	G.L = L;
	lua_atpanic(L, on_panic);
	/* Requests make short-lived garbage (strings from reads and
	 * transformations): the generational collector handles it in small
	 * steps instead of long incremental cycles over the rule tables. */
	lua_gc(L, LUA_GCGEN, 0, 0);
	lua_pushcfunction(L, sandbox_open);
	if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
		snprintf(why, cap, "cannot set up Lua: %s", lua_tostring(L, -1));
		lua_close(L);
		G.L = NULL;
		return NULL;
	}
	return L;
}

static char *file_slurp(const char *path, size_t *len, char *why, size_t cap)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		snprintf(why, cap, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	struct buf b = { 0 };
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && b.len <= SCRIPT_FILE_MAX)
		buf_append(&b, chunk, n);
	int err = ferror(f);
	fclose(f);
	if (err || b.len > SCRIPT_FILE_MAX) {
		snprintf(why, cap, "%s: %s", path, err ? "read error" : "larger than 16 MiB");
		buf_free(&b);
		return NULL;
	}
	buf_append(&b, "", 1);
	*len = b.len - 1;
	return b.data;
}

/* Compile and run PATH in its own environment (whose __index is the
 * sandbox), then collect its phase functions. Returns 0, or -1 with WHY. */
static int script_load(struct inspect_script *sc, const char *path, char *why, size_t cap)
{
	lua_State *L = G.L;
	size_t len;
	char *src = file_slurp(path, &len, why, cap);
	if (src == NULL)
		return -1;
	char chunkname[520];
	snprintf(chunkname, sizeof(chunkname), "@%s", path);
	int rc = luaL_loadbufferx(L, src, len, chunkname, "t");
	free(src);
	if (rc != LUA_OK) {
		snprintf(why, cap, "%s", lua_tostring(L, -1));
		lua_pop(L, 1);
		return -1;
	}
	/* env = setmetatable({}, {__index = _G}) as the chunk's _ENV */
	lua_newtable(L);
	lua_newtable(L);
	lua_pushglobaltable(L);
	lua_setfield(L, -2, "__index");
	lua_setmetatable(L, -2);
	lua_pushvalue(L, -1);
	lua_insert(L, -3);               /* env, chunk, env */
	lua_setupvalue(L, -2, 1);        /* env, chunk */
	const char *err = guarded_pcall(0, 0, LOAD_CPU_US, 0);
	if (err) {
		snprintf(why, cap, "%s", err);
		lua_pop(L, 1);
		return -1;
	}
	static const char *const names[] = { "inspect", "inspect_response", "log" };
	int *refs[] = { &sc->fn_inspect, &sc->fn_response, &sc->fn_log };
	for (int i = 0; i < 3; i++) {
		int t = lua_getfield(L, -1, names[i]);
		*refs[i] = LUA_NOREF;
		if (t == LUA_TFUNCTION) {
			*refs[i] = luaL_ref(L, LUA_REGISTRYINDEX);
			continue;
		}
		lua_pop(L, 1);
		if (t != LUA_TNIL || i == 0) {
			snprintf(why, cap, "%s: %s %s", path, names[i],
				 t == LUA_TNIL ? "is not defined (the script must define function inspect(req))"
					       : "must be a function");
			lua_pop(L, 1);
			return -1;
		}
	}
	lua_pop(L, 1);  /* env: the functions keep it alive as their upvalue */
	return 0;
}

int inspect_script_check(const char *script, uint64_t memory_max, char *why, size_t cap)
{
	struct guard saved = G;
	if (check_dict == NULL)
		check_dict = shdict_create_private(CHECK_DICT_SIZE);
	state_dict = check_dict;
	if (state_new(memory_max, why, cap) == NULL) {
		G = saved;
		return -1;
	}
	struct inspect_script sc = { 0 };
	int rc = script_load(&sc, script, why, cap);
	lua_close(G.L);
	luaprim_close();
	crs_lua_close();
	G = saved;
	return rc;
}

void inspect_check_begin(void)
{
	luaprim_cache_begin();
	crs_lua_cache_begin();
	if (check_dict)
		shdict_flush(check_dict);
}

void inspect_check_end(void)
{
	luaprim_cache_end();
	crs_lua_cache_end();
	/* Compiling a ruleset's databases (waf.lua: ~40 MB at its peak) leaves
	 * freed pages that forked workers would inherit and keep. */
	alloc_release_free_pages();
}

/* ---- the worker ---- */

/* The script at PATH, loaded once per worker whoever names it: listeners
 * and routes naming the same file share its environment. */
static struct inspect_script *script_for(const char *path, const char *who, const struct cfg_inspect *ic)
{
	char why[512];
	for (unsigned k = 0; k < nscripts; k++)
		if (strcmp(scripts[k].path, path) == 0)
			return &scripts[k];
	struct inspect_script *sc = &scripts[nscripts++];
	snprintf(sc->path, sizeof(sc->path), "%s", path);
	uint64_t t0 = now_us();
	if (G.L == NULL) {
		sc->broken = 1;
	} else if (script_load(sc, path, why, sizeof(why)) < 0) {
		sc->broken = 1;
		log_error("inspection: %s: %s; its requests get on_error (%s)", who, why,
			  ic->on_error_deny ? "deny" : "allow");
	} else {
		log_info("inspection: %s: %s loaded in %.1f ms, Lua memory %zu KiB", who, path,
			 (double)(now_us() - t0) / 1000.0, G.used / 1024);
	}
	return sc;
}

void inspect_init(struct worker *w)
{
	unsigned want = 0, nroutes = 0;
	for (unsigned i = 0; i < w->nlisteners; i++) {
		const struct cfg_listener *l = w->listeners[i].cfg;
		want += l->inspect.enabled;
		for (unsigned r = 0; r < l->nroutes; r++)
			nroutes += l->routes[r].inspect_override != NULL;
	}
	if (want + nroutes == 0)
		return;
	char why[512], who[2 * CFG_NAME_MAX + 32];
	/* No instance dictionary without a master (the fuzz rig runs a worker
	 * in-process): a private one then. */
	static struct shdict *own;
	state_dict = shdict_instance();
	if (state_dict == NULL) {
		if (own == NULL)
			own = shdict_create_private(SHDICT_SIZE_DEFAULT);
		state_dict = own;
	}
	if (state_new(w->cfg->lua_memory_max, why, sizeof(why)) == NULL) {
		log_error("inspection: %s; inspected listeners apply on_error to every request", why);
	}
	scripts = calloc(want + nroutes, sizeof(*scripts));
	route_scripts = calloc(nroutes ? nroutes : 1, sizeof(*route_scripts));
	AN(scripts && route_scripts);
	for (unsigned i = 0; i < w->nlisteners; i++) {
		struct worker_listener *li = &w->listeners[i];
		const struct cfg_listener *l = li->cfg;
		if (l->inspect.enabled) {
			snprintf(who, sizeof(who), "listener %s", l->name);
			li->insp = script_for(l->inspect.script, who, &l->inspect);
		}
		for (unsigned r = 0; r < l->nroutes; r++) {
			const struct cfg_route *rt = &l->routes[r];
			if (rt->inspect_override == NULL)
				continue;
			snprintf(who, sizeof(who), "listener %s route %s", l->name, rt->name);
			route_scripts[nroute_scripts].route = rt;
			route_scripts[nroute_scripts++].sc = script_for(rt->inspect_override->script, who,
									 rt->inspect_override);
		}
	}
}

void inspect_select(struct stream *s)
{
	const struct cfg_route *r = s->route;
	struct worker_listener *li = s->cl->li;
	s->ic = &li->cfg->inspect;
	s->isc = li->insp;
	if (r == NULL)
		return;
	if (r->inspect_override) {
		s->ic = r->inspect_override;
		s->isc = NULL;
		for (unsigned i = 0; i < nroute_scripts && s->isc == NULL; i++)
			if (route_scripts[i].route == r)
				s->isc = route_scripts[i].sc;
	} else if (!r->inspect) {
		s->isc = NULL;
	}
}

int inspect_active(const struct stream *s)
{
	return s->isc != NULL && atomic_load_explicit(&shm->inspect_on, memory_order_relaxed);
}

/* At most ERRLOG_PER_SEC lines a second: a script failing on every request
 * must not turn the error log into the bottleneck. */
static void error_log(const struct stream *t, const char *phase, const char *why)
{
	const struct client *cl = t->cl;
	uint64_t sec = now_us() / 1000000u;
	if (sec != errlog.second) {
		if (errlog.dropped)
			log_warn("inspection: %u more script error(s) not logged", errlog.dropped);
		errlog.second = sec;
		errlog.n = errlog.dropped = 0;
	}
	if (errlog.n++ >= ERRLOG_PER_SEC) {
		errlog.dropped++;
		return;
	}
	/* Lua's messages start with "script:line:"; give the others the script. */
	const char *colon = strchr(why, ':');
	int positioned = colon && colon[1] >= '0' && colon[1] <= '9';
	log_warn("inspection: listener %s: %s() failed for %s %s %.*s: %s%s%s", cl->li->cfg->name, phase, cl->peer,
		 llhttp_method_name((llhttp_method_t)t->method), (int)(t->req.url_len > 200 ? 200 : t->req.url_len),
		 msg_str(&t->req, t->req.url_off), positioned ? "" : t->isc->path, positioned ? "" : ": ", why);
}

/* One call into a phase, set up inside the protected call so that making
 * the objects may fail (memory cap) like anything else the script does. */
struct phase_call {
	struct stream *s;
	int fn;
	int phase;
	int with_resp;
};

/* New req (and resp) objects each call: one a script kept from an earlier
 * call stays cleared and raises, instead of reading another request. */
static int phase_entry(lua_State *L)
{
	const struct phase_call *pc = lua_touserdata(L, 1);
	const struct cfg_inspect *ic = pc->s->ic;
	lua_rawgeti(L, LUA_REGISTRYINDEX, pc->fn);
	if (pc->with_resp) {
		resp_ref = inspect_api_new(L, 1);
		resp_ref->s = pc->s;
		resp_ref->ic = ic;
		resp_ref->phase = (uint8_t)pc->phase;
	}
	req_ref = inspect_api_new(L, 0);
	req_ref->s = pc->s;
	req_ref->ic = ic;
	req_ref->phase = (uint8_t)pc->phase;
	lua_call(L, pc->with_resp ? 2 : 1, 0);
	return 0;
}

static const char *phase_call(struct stream *s, int fn, int phase, int with_resp)
{
	const struct cfg_inspect *ic = s->ic;
	struct phase_call pc = { s, fn, phase, with_resp };
	req_ref = resp_ref = NULL;
	lua_pushcfunction(G.L, phase_entry);   /* a light C function: no allocation */
	lua_pushlightuserdata(G.L, &pc);
	const char *why = guarded_pcall(1, ic->budget_instructions, ic->budget_us, ic->budget_wall_us);
	/* Nothing has allocated since the call ended, so the objects are
	 * still there even if nothing references them any more. */
	if (req_ref) {
		req_ref->s = NULL;
		req_ref->phase = INSPECT_PH_NONE;
	}
	if (resp_ref) {
		resp_ref->s = NULL;
		resp_ref->phase = INSPECT_PH_NONE;
	}
	req_ref = resp_ref = NULL;
	if (G.need_gc) {
		G.need_gc = 0;
		lua_gc(G.L, LUA_GCCOLLECT);
	}
	return why;
}

enum reason inspect_request(struct stream *t)
{
	struct client *cl = t->cl;
	struct txn_insp *in = &t->insp;
	const struct cfg_inspect *ic = t->ic;
	struct inspect_script *sc = t->isc;
	uint64_t t0 = now_us();
	/* What the route chose and edited stands if the script fails. */
	struct backend *be0 = t->be;
	size_t add0 = in->req_hdrs.len, del0 = in->req_del.len;
	in->ran = 1;
	in->decision = INSPECT_ALLOW;
	const char *why = sc->broken ? "the script did not load (see the error log at worker start)"
				     : phase_call(t, sc->fn_inspect, INSPECT_PH_INSPECT, 0);
	in->us = now_us() - t0;
	struct stats_block *st = cl->li->st;
	stats_observe_us(st, HIST_INSPECT, in->us);
	if (why) {
		error_log(t, "inspect", why);
		in->decision = INSPECT_ERROR;
		in->req_hdrs.len = add0;  /* half-made edits are not applied */
		in->req_del.len = del0;
		t->be = be0;
		stats_add(st, STAT_INSPECT_ERROR, 1);
		if (ic->on_error_deny) {
			in->status = 500;
			in->local.len = 0;
			return REASON_INSPECT_ERROR;
		}
		return REASON_OK;
	}
	switch (in->decision) {
	case INSPECT_DENY:
	case INSPECT_REDIRECT:
		stats_add(st, STAT_INSPECT_DENY, 1);
		return REASON_INSPECT_DENIED;
	case INSPECT_WOULD_DENY:
	case INSPECT_WOULD_REDIRECT:
		log_info("inspection: listener %s (shadow): would %s %s %s %.*s with %u%s%.*s", cl->li->cfg->name,
			 in->decision == INSPECT_WOULD_DENY ? "deny" : "redirect", cl->peer,
			 llhttp_method_name((llhttp_method_t)t->method),
			 (int)(t->req.url_len > 200 ? 200 : t->req.url_len), msg_str(&t->req, t->req.url_off),
			 in->status, in->ntags ? ", tags " : "", (int)in->tags.len, in->tags.data);
		stats_add(st, STAT_INSPECT_DENY, 1);
		return REASON_OK;
	default:
		stats_add(st, STAT_INSPECT_ALLOW, 1);
		return REASON_OK;
	}
}

void inspect_response(struct stream *s)
{
	struct client *cl = s->cl;
	struct inspect_script *sc = s->isc;
	struct txn_insp *in = &s->insp;
	if (!in->ran || sc == NULL || sc->broken || sc->fn_response == LUA_NOREF)
		return;
	size_t add0 = in->resp_hdrs.len, del0 = in->resp_del.len;
	const char *why = phase_call(s, sc->fn_response, INSPECT_PH_RESPONSE, 1);
	if (why) {
		error_log(s, "inspect_response", why);
		in->resp_hdrs.len = add0;
		in->resp_del.len = del0;
		stats_add(cl->li->st, STAT_INSPECT_ERROR, 1);
	}
}

void inspect_finish(struct stream *s)
{
	struct client *cl = s->cl;
	struct inspect_script *sc = s->isc;
	struct txn_insp *in = &s->insp;
	if (!in->ran || sc == NULL)
		return;
	if (!sc->broken && sc->fn_log != LUA_NOREF) {
		const char *why = phase_call(s, sc->fn_log, INSPECT_PH_LOG, 0);
		if (why) {
			error_log(s, "log", why);
			stats_add(cl->li->st, STAT_INSPECT_ERROR, 1);
		}
	}
	if (in->ntags) {
		enum stats_tag_outcome o = in->decision == INSPECT_ERROR ? STATS_TAG_ERROR
					 : in->decision == INSPECT_ALLOW ? STATS_TAG_ALLOW : STATS_TAG_DENY;
		const char *p = in->tags.data, *end = p + in->tags.len;
		while (p < end) {
			const char *c = memchr(p, ',', (size_t)(end - p));
			size_t n = c ? (size_t)(c - p) : (size_t)(end - p);
			stats_tag_add(p, n, o);
			p += n + 1;
		}
	}
}

void inspect_apply_removals(const struct buf *del, struct msg *m)
{
	for (size_t pos = 0; pos < del->len;) {
		const char *name = del->data + pos;
		size_t nl = strlen(name);
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].name_len == nl && strncasecmp(msg_str(m, m->hdrs[i].name_off), name, nl) == 0)
				m->hdrs[i].drop = 1;
		pos += nl + 1;
	}
}

void inspect_txn_reset(struct txn_insp *in)
{
	struct txn_insp keep = *in;
	memset(in, 0, sizeof(*in));
	in->req_hdrs = keep.req_hdrs;
	in->req_del = keep.req_del;
	in->resp_hdrs = keep.resp_hdrs;
	in->resp_del = keep.resp_del;
	in->local = keep.local;
	in->tags = keep.tags;
	in->req_hdrs.len = in->req_del.len = in->resp_hdrs.len = in->resp_del.len = 0;
	in->local.len = in->tags.len = 0;
}

void inspect_txn_trim(struct txn_insp *in, size_t keep)
{
	inspect_txn_reset(in);
	buf_trim(&in->req_hdrs, keep);
	buf_trim(&in->req_del, keep);
	buf_trim(&in->resp_hdrs, keep);
	buf_trim(&in->resp_del, keep);
	buf_trim(&in->local, keep);
	buf_trim(&in->tags, keep);
}

void inspect_txn_free(struct txn_insp *in)
{
	buf_free(&in->req_hdrs);
	buf_free(&in->req_del);
	buf_free(&in->resp_hdrs);
	buf_free(&in->resp_del);
	buf_free(&in->local);
	buf_free(&in->tags);
}
