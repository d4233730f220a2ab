/* libFuzzer target: request-target normalisation and route lookup
 * (src/route.c).
 *
 * Input: byte 0 picks the method; then the Host value up to '\n', the
 * target up to '\n', and header lines "Name: value\n".
 * Oracles beyond "no crash":
 *   - an accepted origin-form target normalises to a path with no empty,
 *     "." or ".." segment (also none hidden behind ;parameters), whose
 *     key has no ';', and normalising the result again changes nothing;
 *   - the indexed lookup (route_match) picks the same route as trying every
 *     route in order (route_match_linear), over a table with exact, prefix,
 *     plain-prefix, regex, host, wildcard-host, method, header and cookie
 *     routes;
 *   - cookies (msg_cookie, cookie_next, set_cookie_split) and persistence's
 *     keys (the ;jsessionid= path parameter, WebLogic's !-separated ids)
 *     come back as slices of their input holding no separator. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cfg.h"
#include "httpmsg.h"
#include "persist.h"
#include "route.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_route: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static const char yaml[] =
	"user: root\n"
	"listeners:\n"
	"  - address: 127.0.0.1:1\n"
	"    backend: app\n"
	"    routes:\n"
	"      - {name: a, match: {path: {exact: /a/b}}}\n"
	"      - {name: b, match: {path: {prefix: /a}, methods: [POST]}}\n"
	"      - {name: c, match: {path: {prefix: /static/}, host: [x.example]}}\n"
	"      - {name: d, match: {path: {prefix: /im, plain: true}}}\n"
	"      - {name: e, match: {path: {regex: '^/v[0-9]+/'}}}\n"
	"      - {name: f, match: {host: [shop.example, '*.cdn.example']}}\n"
	"      - {name: g, match: {headers: [{name: X-A, equals: '1'}]}}\n"
	"      - {name: h, match: {cookies: [{name: s, present: true}], path: {prefix: /}}}\n"
	"      - {name: i, match: {headers: [{name: X-B, regex: 'b+$'}], methods: [GET]}}\n"
	"      - {name: j, match: {path: {prefix: /a/b/c}}}\n"
	"      - {name: k, match: {host: ['*.example'], path: {exact: /}}}\n"
	"      - {name: l, match: {cookies: [{name: t, equals: v}]}}\n"
	"backends:\n"
	"  - name: app\n"
	"    servers: [{address: 127.0.0.1:2}]\n";

static struct cfg *cfg;
static struct route_table *table;
static struct buf out, key, out2, key2;
static struct msg m;

static void setup(void)
{
	char path[] = "/tmp/fuzz_route_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, yaml, sizeof(yaml) - 1) != (ssize_t)(sizeof(yaml) - 1))
		abort();
	close(fd);
	char err[2048];
	cfg = cfg_load(path, err, sizeof(err));
	unlink(path);
	if (cfg == NULL)
		FAIL("config: %s", err);
	table = route_table_build(&cfg->listeners[0]);
	if (table == NULL)
		abort();
}

static const char *line(const uint8_t **p, const uint8_t *end, size_t *len)
{
	const uint8_t *s = *p, *nl = memchr(s, '\n', (size_t)(end - s));
	const uint8_t *e = nl ? nl : end;
	*len = (size_t)(e - s);
	*p = nl ? nl + 1 : end;
	return (const char *)s;
}

/* route_normalize, with an already-normal target copied to OUT. */
static int normalize(const char *t, size_t n, struct buf *o, struct buf *k)
{
	int rc = route_normalize(t, n, o, k);
	if (rc == 1)
		buf_append(o, t, n);
	return rc < 0 ? -1 : 0;
}

static void check_normal(const char *t, size_t n)
{
	if (normalize(t, n, &out, &key) < 0 || n == 0 || t[0] != '/')
		return;
	const char *q = memchr(out.data, '?', out.len);
	size_t pl = q ? (size_t)(q - out.data) : out.len;
	if (pl == 0 || out.data[0] != '/')
		FAIL("normalised path does not start with /");
	for (size_t i = 0; i < pl;) {
		size_t s = ++i;
		while (i < pl && out.data[i] != '/')
			i++;
		const char *semi = memchr(out.data + s, ';', i - s);
		size_t nl = semi ? (size_t)(semi - (out.data + s)) : i - s;
		if (i - s == 0 && i < pl)
			FAIL("empty segment left in %.*s", (int)pl, out.data);
		if ((nl == 1 && out.data[s] == '.') || (nl == 2 && out.data[s] == '.' && out.data[s + 1] == '.'))
			FAIL("dot segment left in %.*s", (int)pl, out.data);
	}
	if (memchr(key.data, ';', key.len))
		FAIL("key keeps a parameter: %.*s", (int)key.len, key.data);
	if (normalize(out.data, out.len, &out2, &key2) < 0)
		FAIL("normalised target refused: %.*s", (int)out.len, out.data);
	if (out2.len != out.len || memcmp(out2.data, out.data, out.len) != 0 ||
	    key2.len != key.len || memcmp(key2.data, key.data, key.len) != 0)
		FAIL("normalising twice changed %.*s", (int)out.len, out.data);
}

static void within(const char *what, const char *v, size_t vl, const char *b, size_t bl, const char *banned)
{
	if (v < b || v + vl > b + bl)
		FAIL("%s: value outside its input", what);
	for (size_t i = 0; i < vl; i++)
		if (strchr(banned, v[i]) && v[i])
			FAIL("%s: value %.*s holds a separator", what, (int)vl, v);
}

static void check_cookies(const struct msg *mm, const char *target, size_t tl)
{
	static const char *const names[] = { "s", "t", "JSESSIONID" };
	const char *v, *n;
	size_t vl, nl;
	for (unsigned i = 0; i < sizeof(names) / sizeof(*names); i++)
		if (msg_cookie(mm, names[i], strlen(names[i]), &v, &vl)) {
			within("cookie", v, vl, mm->raw.data, mm->raw.len, ";");
			const char *id[2];
			size_t idn[2];
			persist_weblogic_ids(v, vl, id, idn);
			for (int k = 0; k < 2; k++)
				if (id[k])
					within("jvmid", id[k], idn[k], v, vl, "!");
		}
	for (uint32_t i = 0; i < mm->nhdrs; i++) {
		const char *hv = msg_str(mm, mm->hdrs[i].val_off);
		size_t hl = mm->hdrs[i].val_len;
		if (set_cookie_split(hv, hl, &n, &nl, &v, &vl) == 0) {
			within("set-cookie name", n, nl, hv, hl, ";=");
			within("set-cookie value", v, vl, hv, hl, ";");
		}
	}
	if (persist_path_param(target, tl, "jsessionid", &v, &vl))
		within("path parameter", v, vl, target, tl, ";/?");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const int methods[] = { 1 /* GET */, 3 /* POST */, 2 /* HEAD */, 0 /* DELETE */ };
	if (cfg == NULL)
		setup();
	if (size < 1)
		return 0;
	const uint8_t *p = data + 1, *end = data + size;
	size_t hl, tl;
	const char *host = line(&p, end, &hl);
	const char *target = line(&p, end, &tl);
	check_normal(target, tl);
	if (normalize(target, tl, &out, &key) < 0)
		return 0;
	msg_reset(&m, 100);
	while (p < end) {
		size_t ll;
		const char *l = line(&p, end, &ll);
		const char *colon = memchr(l, ':', ll);
		if (colon == NULL || colon == l)
			continue;
		const char *v = colon + 1;
		while (v < l + ll && *v == ' ')
			v++;
		if (msg_on_field(&m, l, (size_t)(colon - l)) < 0 || msg_on_value(&m, v, (size_t)(l + ll - v)) < 0)
			break;
		msg_finish_header(&m);
	}
	check_cookies(&m, target, tl);
	const char *hn;
	size_t hnl;
	route_host_name(host, hl, &hn, &hnl);
	struct route_req q = { methods[data[0] & 3], hn, hnl, key.data, key.len, &m };
	const struct cfg_route *fast = route_match(table, &q), *slow = route_match_linear(table, &q);
	if (fast != slow)
		FAIL("index chose %s, the routes in order %s (path %.*s host %.*s)", fast ? fast->name : "none",
		     slow ? slow->name : "none", (int)key.len, key.data, (int)hnl, hn);
	return 0;
}
