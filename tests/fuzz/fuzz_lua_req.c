/* libFuzzer target: the Lua inspection API (src/inspect.c, inspect_api.c,
 * luaprim.c, transform.c; docs/lua-api.md) driven by generated scripts.
 *
 * The input bytes are turned into three Lua chunks by a small grammar of
 * req/resp API calls with fuzzed arguments (strings, numbers, nil,
 * booleans, tables, the objects themselves, stale objects and iterators
 * kept from an earlier phase), sluice.* primitives and bounded loops.
 * They travel as the body of a POST through a real sluice worker
 * (tests/fuzz/rig.c) whose listener runs tests/fuzz/lua_req_driver.lua:
 * its inspect(req) compiles the chunks and runs the first; its
 * inspect_response(resp, req) and log(req) run the other two.
 *
 * Oracles, beyond crashes, leaks and sanitizer reports (ASan sees every
 * allocation the Lua state makes) and the rig's own (the backend gets
 * well-formed requests, the client well-formed responses, the worker is
 * idle afterwards): the generator's chunks always compile (the driver
 * answers 599 with a marker otherwise); when the request reaches the
 * backend it is the client's POST to the same target, with its body byte
 * for byte, whatever the script did; every answer is either the backend's
 * 200 or a status a script may choose (deny 400-599, redirect 301-308) or
 * on_error's (this listener allows). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SCRIPT_MAX 6000   /* the listener holds 8k of body: never truncated */

static const char driver[] =
	"-- Runs the chunks a fuzz_lua_req request carries in its body.\n"
	"local pending\n"
	"local function compile(src, name)\n"
	"  return load(src, name, 't', _ENV)\n"
	"end\n"
	"function inspect(req)\n"
	"  pending = nil\n"
	"  local body = req:body() or ''\n"
	"  local a, b, c = body:match('^(.-)%-%-@@\\n(.-)%-%-@@\\n(.*)$')\n"
	"  if not a then a, b, c = body, '', '' end\n"
	"  local fa, ea = compile(a, '=inspect')\n"
	"  local fb, eb = compile(b, '=response')\n"
	"  local fc, ec = compile(c, '=log')\n"
	"  if not (fa and fb and fc) then\n"
	"    req:deny(599, 'fuzz-driver: compile error: ' .. tostring(ea or eb or ec))\n"
	"    return\n"
	"  end\n"
	"  local S = {}\n"
	"  pending = { fb, fc, S }\n"
	"  fa(req, nil, S)\n"
	"end\n"
	"function inspect_response(resp, req)\n"
	"  if pending then pending[1](resp, req, pending[3]) end\n"
	"end\n"
	"function log(req)\n"
	"  local p = pending\n"
	"  pending = nil\n"
	"  if p then p[2](req, nil, p[3]) end\n"
	"end\n";

static const char *const files[] = { "driver.lua", driver, NULL };

static const char listener[] =
	"    inspect:\n"
	"      script: $DIR/driver.lua\n"
	"      body: 8k\n"
	"      on_error: allow\n"
	"      budget:\n"
	"        instructions: 200000\n"
	"        time: 0\n";

/* ---- the input as a stream of choices ---- */

struct rd {
	const uint8_t *p;
	size_t n;
};

static unsigned rd(struct rd *r, unsigned mod)
{
	if (r->n == 0)
		return 0;
	r->n--;
	return *r->p++ % mod;
}

static struct buf out;

static void emit(const char *s)
{
	buf_append_str(&out, s);
}

/* A Lua string literal of LEN bytes, every byte but letters and digits
 * escaped, so no chunk can contain the driver's separator. */
static void emit_lit(const char *s, size_t len)
{
	buf_append(&out, "\"", 1);
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
			buf_append(&out, s + i, 1);
		else
			buf_appendf(&out, "\\%03u", c);
	}
	buf_append(&out, "\"", 1);
}

static const char *const req_methods[] = {
	"method", "version", "uri", "path", "query", "arg", "args", "header", "header_count", "headers",
	"cookie", "cookies", "body", "body_truncated", "client_ip", "client_port", "listener", "backend",
	"tls", "tls_version", "tls_cipher", "sni", "client_cert_subject", "id", "deny", "redirect",
	"set_header", "add_header", "remove_header", "set_backend", "tag", "status", "decision", "tags",
	"inspect_us", "total_us", "nonexistent",
};
static const char *const resp_methods[] = {
	"status", "header", "header_count", "headers", "set_header", "add_header", "remove_header",
};

/* Strings with their lengths: some hold a NUL. */
#define STR(x) { x, sizeof(x) - 1 }
static const struct { const char *s; size_t n; } strs[] = {
	STR("X-Fuzz"), STR("Host"), STR("host"), STR("Content-Length"), STR("Transfer-Encoding"),
	STR("Connection"), STR("Upgrade"), STR("Keep-Alive"), STR("Trailer"), STR("X-Forwarded-For"),
	STR("Forwarded"), STR("X-Real-IP"), STR("WL-Proxy-Client-IP"), STR("Cookie"), STR("cookie"),
	STR("Set-Cookie"), STR("X-Dup"), STR("a"), STR("b"), STR("c"), STR("k"), STR(""), STR(" "),
	STR("bad name"), STR("x:y"), STR("a\r\nInjected: 1"), STR("v\n"), STR("v\r"), STR("\0"),
	STR("nul\0inside"), STR("app"), STR("pp"), STR("nope"), STR("crs:942100"), STR("sqli-942100"),
	STR("a,b"), STR("t\"q"), STR("/"), STR("/r?x=1"), STR("https://example.com/p"), STR("//evil"),
	STR("%41%zz%"), STR("%uFF21+b"), STR("&lt;&#x41;&#65"), STR("QUJD"), STR("10.0.0.0/8"),
	STR("127.0.0.1"), STR("::1"), STR("2001:db8::/32"), STR("10.1.0.0/8"), STR("256.1.1.1"),
	STR("(a+)+$"), STR("["), STR("a|b"), STR("(?i)x"), STR("\\d+"), STR("i"), STR("ims"), STR("xu"),
	STR("z"), STR("\xff\xfe"), STR("\xc3\xa9"),
};
#define NSTRS (sizeof(strs) / sizeof(strs[0]))

static const char *const specs[] = {
	"urldecode", "urldecode_uni", "htmldecode", "lower", "compress_ws", "remove_ws", "remove_nulls",
	"b64decode", "normalize_path", "trim", "jsondecode", "nope", "",
};

static void emit_str(struct rd *r)
{
	unsigned k = rd(r, 4);
	if (k == 0) {  /* bytes straight from the input */
		size_t n = rd(r, 64);
		if (n > r->n)
			n = r->n;
		emit_lit((const char *)r->p, n);
		r->p += n;
		r->n -= n;
	} else if (k == 1) {
		unsigned i = rd(r, NSTRS);
		emit("string.rep(");
		emit_lit(strs[i].s, strs[i].n);
		static const unsigned reps[] = { 0, 1, 2, 3, 4, 64, 300, 1200 };
		buf_appendf(&out, ", %u)", reps[rd(r, 8)]);
	} else {
		unsigned i = rd(r, NSTRS);
		emit_lit(strs[i].s, strs[i].n);
	}
}

/* A pattern for sluice.multi: short. Hyperscan's compile time grows
 * steeply with repeated quantifiers ("1+b" 300 times takes over 10 s),
 * and docs/lua-api.md says to compile at load time for that reason. */
static void emit_short_str(struct rd *r)
{
	if (rd(r, 2)) {
		size_t n = rd(r, 12);
		if (n > r->n)
			n = r->n;
		emit_lit((const char *)r->p, n);
		r->p += n;
		r->n -= n;
	} else {
		unsigned i = rd(r, NSTRS);
		emit_lit(strs[i].s, strs[i].n);
	}
}

/* A transformation spec: one to three steps, or any string. */
static void emit_spec(struct rd *r)
{
	if (rd(r, 4) == 0) {
		emit_str(r);
		return;
	}
	char sp[128] = "";
	unsigned k = 1 + rd(r, 3);
	for (unsigned i = 0; i < k; i++) {
		if (i)
			strcat(sp, ",");
		strcat(sp, specs[rd(r, sizeof(specs) / sizeof(specs[0]))]);
	}
	emit_lit(sp, strlen(sp));
}

static void emit_arg(struct rd *r, const char *obj)
{
	static const char *const nums[] = {
		"0", "1", "-1", "200", "301", "302", "307", "399", "400", "403", "429", "599", "600",
		"math.maxinteger", "math.mininteger", "2^31", "0.5", "1e308", "-1e308", "0/0", "math.huge",
		"-math.huge", "3.0", "65536",
	};
	switch (rd(r, 12)) {
	case 0: emit("nil"); break;
	case 1: emit(rd(r, 2) ? "true" : "false"); break;
	case 2: case 3: emit(nums[rd(r, sizeof(nums) / sizeof(nums[0]))]); break;
	case 4: emit("{}"); break;
	case 5: emit("{1, \"a\", x = {}}"); break;
	case 6: emit(obj); break;
	case 7: emit("v"); break;
	case 8: emit("tostring(v)"); break;
	default: emit_str(r); break;
	}
}

static void emit_args(struct rd *r, const char *obj)
{
	unsigned n = rd(r, 4);
	for (unsigned i = 0; i < n; i++) {
		emit(", ");
		emit_arg(r, obj);
	}
}

static const char *method(struct rd *r, int resp)
{
	if (resp && rd(r, 4))
		return resp_methods[rd(r, sizeof(resp_methods) / sizeof(resp_methods[0]))];
	return req_methods[rd(r, sizeof(req_methods) / sizeof(req_methods[0]))];
}

/* One statement. O is this phase's object (req, or resp in the response
 * phase), R the request in the response phase (nil elsewhere), S a table
 * the three phases of one request share. */
static void emit_stmt(struct rd *r, int phase, int depth)
{
	int resp = phase == 1;
	const char *obj = resp && rd(r, 3) == 0 ? "R" : "O";
	int obj_resp = resp && obj[0] == 'O';
	switch (rd(r, 14)) {
	case 0: case 1: case 2:  /* protected call */
		buf_appendf(&out, "ok, v = pcall(%s.%s, %s", obj, method(r, obj_resp), obj);
		emit_args(r, obj);
		emit(")\n");
		break;
	case 3:  /* unprotected: an error ends the call (on_error) */
		buf_appendf(&out, "v = %s:%s(", obj, method(r, obj_resp));
		emit_arg(r, obj);
		emit_args(r, obj);
		emit(")\n");
		break;
	case 4: {  /* iterate */
		static const char *const it[] = { "headers", "args", "cookies" };
		buf_appendf(&out, "pcall(function() for a, b in %s:%s() do n = n + 1; v = b end end)\n", obj,
			    obj_resp ? "headers" : it[rd(r, 3)]);
		break;
	}
	case 5:  /* keep the object or an iterator for a later phase */
		if (rd(r, 2))
			buf_appendf(&out, "S.o = %s\n", obj);
		else
			buf_appendf(&out, "S.it, S.st = %s:%s()\n", obj, obj_resp || rd(r, 2) ? "headers" : "cookies");
		break;
	case 6:  /* use what an earlier phase kept */
		if (rd(r, 2)) {
			buf_appendf(&out, "pcall(function() return S.o:%s(", method(r, 0));
			emit_arg(r, obj);
			emit(") end)\n");
		} else {
			emit("pcall(function() return S.it(S.st) end)\n");
		}
		break;
	case 7:
		emit("ok, v = pcall(sluice.transform, ");
		emit_arg(r, obj);
		emit(", ");
		emit_spec(r);
		emit(")\n");
		break;
	case 8: {
		static const char *const one[] = { "urldecode", "htmldecode", "lower", "compress_ws", "b64decode" };
		buf_appendf(&out, "ok, v = pcall(sluice.%s, ", one[rd(r, 5)]);
		emit_arg(r, obj);
		emit(")\n");
		break;
	}
	case 9:
		emit("ok, v = pcall(function() local re = sluice.regex(");
		emit_str(r);
		if (rd(r, 2)) {
			emit(", ");
			emit_str(r);
		}
		emit("); local s = ");
		emit_arg(r, obj);
		emit("; return re:test(s), re:find(s, ");
		emit_arg(r, obj);
		emit("), re:match(s) end)\n");
		break;
	case 10:
		emit("ok, v = pcall(function() local c = sluice.cidrs({");
		emit_str(r);
		emit(", ");
		emit_str(r);
		emit("}); return c:contains(");
		emit_arg(r, obj);
		emit("), c:count() end)\n");
		break;
	case 11:
		if (rd(r, 32) == 0) {  /* a Hyperscan compile costs milliseconds: seldom */
			emit("ok, v = pcall(function() local m = sluice.multi({");
			emit_short_str(r);
			emit(", {id = 7, pattern = ");
			emit_short_str(r);
			emit(", literal = true}}); local out = {}; local s = ");
			emit_arg(r, obj);
			emit("; return m:test(s), m:first(s), m:scan(s, out) end)\n");
		} else if (rd(r, 2) == 0) {
			emit("v = sluice.now() + sluice.time() + sluice.worker; sluice.worker_state.k = v\n");
		} else {  /* the shared dictionary, with any arguments */
			static const char *const dm[] = { "get", "set", "add", "replace", "incr", "cas",
							  "delete", "ttl", "expire", "count" };
			emit("ok, v = pcall(function() return sluice.shared:");
			emit(dm[rd(r, sizeof(dm) / sizeof(dm[0]))]);
			emit("(");
			emit_arg(r, obj);
			emit_args(r, obj);
			emit(") end)\n");
		}
		break;
	case 12:  /* a bounded loop around a few statements */
		if (depth < 2) {
			buf_appendf(&out, "for i = 1, %u do\n", 1 + rd(r, depth ? 4 : 40));
			unsigned k = 1 + rd(r, 3);
			for (unsigned i = 0; i < k; i++)
				emit_stmt(r, phase, depth + 1);
			emit("end\n");
		}
		break;
	default:  /* an error of the script's own */
		emit(rd(r, 4) == 0 ? "error({})\n" : "if v == nil then n = n + 1 end\n");
		break;
	}
}

static void emit_chunk(struct rd *r, int phase)
{
	emit("local O, R, S = ...\nlocal ok, v, n = nil, nil, 0\n");
	unsigned k = 1 + rd(r, 16);
	for (unsigned i = 0; i < k && out.len < SCRIPT_MAX - 1500 && r->n; i++)
		emit_stmt(r, phase, 0);
}

static const char *const targets[] = {
	"/r?x=1",
	"/a/../b//c?k=v&k=w&empty=&noval&%41=%42+c&&=x",
	"/p?q=%3Cscript%3E&u=%uFF21",
	"/c",
};
static const char *const extra[] = {
	"",
	"Cookie: a=1; b= 2 ;c\r\nCookie: d=\"q\"\r\n",
	"X-Dup: 1\r\nX-Dup: 2\r\nx-dup: 3\r\nX-Forwarded-For: 1.2.3.4\r\n",
	"Authorization: Bearer t\r\nUser-Agent: sqlmap/1.0\r\nX-Empty:\r\n",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		rig_init(listener, NULL, files);
		ready = 1;
	}
	if (size == 0)
		return 0;
	struct rd r = { data + 1, size - 1 };
	unsigned t = data[0] % 4, x = data[0] / 4 % 4;
	out.len = 0;
	emit_chunk(&r, 0);
	emit("--@@\n");
	emit_chunk(&r, 1);
	emit("--@@\n");
	emit_chunk(&r, 2);
	if (out.len > SCRIPT_MAX)
		out.len = 0;  /* cannot happen (see emit_chunk); an empty script then */

	static int print = -1;
	if (print < 0)
		print = getenv("FUZZ_LUA_PRINT") != NULL;
	if (print)
		fprintf(stderr, "---- generated chunks (%zu bytes)\n%.*s\n----\n", out.len, (int)out.len, out.data);

	static struct buf req;
	req.len = 0;
	buf_appendf(&req, "POST %s HTTP/1.1\r\nHost: example.com\r\n%sContent-Length: %zu\r\n\r\n", targets[t], extra[x],
		    out.len);
	buf_append(&req, out.data, out.len);
	const struct rig_result *res = rig_exchange(RIG_LI_PLAIN, (const uint8_t *)req.data, req.len,
						    RIG_ANSWER_EACH, NULL, 0);
	if (res->client.len && memmem(res->client.data, res->client.len, "fuzz-driver: compile error", 26))
		RIG_FAIL("a generated chunk did not compile (generator bug):\n%.*s\n---\n%.*s", (int)res->client.len,
			 res->client.data, (int)out.len, out.data);
	if (res->nreqs > 1)
		RIG_FAIL("the backend received %u requests for one", res->nreqs);
	if (res->nreqs == 1) {
		const struct rig_req *q = &res->reqs[0];
		if (strcmp(q->method, "POST") != 0 || q->framing != 1 || q->body_len != out.len ||
		    memcmp(res->bodies.data + q->body_off, out.data, out.len) != 0)
			RIG_FAIL("the request reached the backend changed: %s, framing %d, %llu body bytes of %zu",
				 q->method, q->framing, (unsigned long long)q->body_len, out.len);
	}
	if (res->nresp != 1)
		RIG_FAIL("the client received %u responses to its one request:\n%.*s", res->nresp,
			 (int)res->client.len, res->client.data);
	int st = res->resp_status[0];
	if (!(st == 200 || (st >= 400 && st <= 599) || st == 301 || st == 302 || st == 303 || st == 307 ||
	      st == 308))
		RIG_FAIL("the client received a %d", st);
	if (res->nreqs == 1 && st != 200 && st != 502 && st != 504)
		RIG_FAIL("the request was forwarded, yet the client got a %d", st);
	return 0;
}
