/* Unit tests for ModSecurity's request variables (src/seccoll.c). */
#include <stdio.h>
#include <string.h>
#include "seccoll.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static int is(const struct seccoll *c, uint32_t off, uint32_t len, const char *want, size_t wlen)
{
	return len == wlen && memcmp(sc_str(c, off), want, wlen) == 0 && sc_str(c, off)[len] == '\0';
}
#define IS(c, off, len, want) is(c, off, len, want, sizeof(want) - 1)

static int pair(const struct seccoll *c, enum sc_list_id l, uint32_t i, const char *name, size_t nl, const char *value,
		size_t vl)
{
	if (i >= c->list[l].n)
		return 0;
	const struct sc_pair *p = &c->list[l].v[i];
	return is(c, p->name, p->nlen, name, nl) && is(c, p->value, p->vlen, value, vl);
}
#define PAIR(c, l, i, n, v) pair(c, l, i, n, sizeof(n) - 1, v, sizeof(v) - 1)


/* JSON bodies, named as ModSecurity 2.9.7 names them (checked against it:
 * Debian's libapache2-mod-security2 debug log, "Adding JSON argument"). */
static void test_json(void)
{
	struct seccoll c = { 0 };
	seccoll_reset(&c);
	static const char obj[] = "{\"a\": {\"b\": 1, \"c\": [10, \"x\\u00e9\", {\"d\": null}]}, \"e\": true, "
				  "\"f\": \"q\\\"r\", \"\": 5}";
	CHECK(seccoll_json_body(&c, obj, sizeof(obj) - 1) == 0);
	CHECK(c.list[SC_ARGS_JSON].n == 7 && c.list[SC_ARGS_POST].n == 0);
	CHECK(PAIR(&c, SC_ARGS_JSON, 0, "a.b", "1"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 1, "a.c.c", "10"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 2, "a.c.c", "x\xc3\xa9"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 3, "a.c.c.d", ""));
	CHECK(PAIR(&c, SC_ARGS_JSON, 4, "e", "true"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 5, "f", "q\"r"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 6, "", "5"));
	CHECK(is(&c, c.body, c.body_len, obj, sizeof(obj) - 1));
	seccoll_reset(&c);
	static const char arr[] = "[1, 2.50, -0.0e3, [3, [4]], {\"k\": [5]}, \"\\ud83d\\ude00\", \"\\u0041\\n\", "
				  "12345678901234567890]";
	CHECK(seccoll_json_body(&c, arr, sizeof(arr) - 1) == 0);
	CHECK(c.list[SC_ARGS_JSON].n == 9);
	CHECK(PAIR(&c, SC_ARGS_JSON, 0, "array.array", "1"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 1, "array.array", "2.50"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 2, "array.array", "-0.0e3"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 3, "array.array.array", "3"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 4, "array.array.array.array", "4"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 5, "array.array.k.k", "5"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 6, "array.array", "\xf0\x9f\x98\x80"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 7, "array.array", "A\n"));
	CHECK(PAIR(&c, SC_ARGS_JSON, 8, "array.array", "12345678901234567890"));
	/* not JSON: refused, and nothing half-read stays */
	static const char *const bad[] = { "", "{", "{\"a\":}", "[1,]", "{\"a\" 1}", "01", "1.", "-", "tru",
					   "\"\\x\"", "\"a\x01\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "{} {}", "[1] x" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		seccoll_reset(&c);
		int rc = seccoll_json_body(&c, bad[i], strlen(bad[i]));
		CHECK(rc == -1 && c.list[SC_ARGS_JSON].n == 0);
		if (rc != -1)
			fprintf(stderr, "  accepted: %s\n", bad[i]);
	}
	/* nesting is bounded */
	char deep[2 * (SC_JSON_DEPTH + 1) + 1];
	memset(deep, '[', SC_JSON_DEPTH + 1);
	memset(deep + SC_JSON_DEPTH + 1, ']', SC_JSON_DEPTH + 1);
	seccoll_reset(&c);
	CHECK(seccoll_json_body(&c, deep, sizeof(deep) - 1) == -1);
	CHECK(seccoll_json_body(&c, deep + 1, sizeof(deep) - 3) == 0);
	/* a lone surrogate becomes '?' */
	seccoll_reset(&c);
	static const char lone[] = "{\"s\":\"\\ud800x\"}";
	CHECK(seccoll_json_body(&c, lone, sizeof(lone) - 1) == 0 && PAIR(&c, SC_ARGS_JSON, 0, "s", "?x"));
	/* a name or value seen before is stored once (the CRS engine's caches
	 * know values by where they are); equal only when the bytes are */
	seccoll_reset(&c);
	static const char rep[] = "{\"o\": [{\"id\": \"7\", \"f\": true}, {\"id\": \"7\", \"f\": \"true\"}, "
				  "{\"id\": \"8\", \"f\": \"7\"}], \"g\": \"o.id\"}";
	CHECK(seccoll_json_body(&c, rep, sizeof(rep) - 1) == 0 && c.list[SC_ARGS_JSON].n == 7);
	const struct sc_pair *v = c.list[SC_ARGS_JSON].v;
	CHECK(PAIR(&c, SC_ARGS_JSON, 0, "o.o.id", "7") && PAIR(&c, SC_ARGS_JSON, 2, "o.o.id", "7") &&
	      PAIR(&c, SC_ARGS_JSON, 4, "o.o.id", "8") && PAIR(&c, SC_ARGS_JSON, 5, "o.o.f", "7") &&
	      PAIR(&c, SC_ARGS_JSON, 6, "g", "o.id"));
	CHECK(v[0].value == v[2].value && v[0].value == v[5].value && v[0].value != v[4].value);
	CHECK(v[0].name == v[2].name && v[0].name == v[4].name && v[1].name == v[3].name && v[0].name != v[1].name);
	CHECK(v[1].value == v[3].value && PAIR(&c, SC_ARGS_JSON, 1, "o.o.f", "true"));
	/* thousands of strings, every one read back as it was, the repeats
	 * stored once (but for a rare few past the probe bound: the hash is
	 * keyed per process, so which is not fixed) */
	static char many[200000];
	size_t k = (size_t)snprintf(many, sizeof(many), "[");
	for (unsigned i = 0; i < 5000; i++)
		k += (size_t)snprintf(many + k, sizeof(many) - k, "%s\"v%u\"", i ? "," : "", i % 3000);
	k += (size_t)snprintf(many + k, sizeof(many) - k, "]");
	seccoll_reset(&c);
	CHECK(seccoll_json_body(&c, many, k) == 0 && c.list[SC_ARGS_JSON].n == 5000);
	unsigned wrong = 0, stored_again = 0;
	for (unsigned i = 0; i < 5000; i++) {
		char want[16];
		int wl = snprintf(want, sizeof(want), "v%u", i % 3000);
		const struct sc_pair *p = &c.list[SC_ARGS_JSON].v[i];
		wrong += !is(&c, p->value, p->vlen, want, (size_t)wl);
		stored_again += i >= 3000 && p->value != c.list[SC_ARGS_JSON].v[i - 3000].value;
	}
	CHECK(wrong == 0 && stored_again <= 20);
	seccoll_free(&c);
}

int main(void)
{
	struct seccoll c = { 0 };
	seccoll_reset(&c);
	static const char target[] = "/shop/a%20b/cart.php?id=1%27+or&x&=v&&y=%zz%4&z=a=b";
	struct sc_header h[] = {
		{ "Host", "example.com", 4, 11 },
		{ "Cookie", "  sess=abc; ;x=; =nameless;flag; t=a=b;  ", 6, 41 },
		{ "User-Agent", "curl/8", 10, 6 },
	};
	seccoll_request(&c, "GET", 3, target, sizeof(target) - 1, "HTTP/1.1", 8, h, 3);
	CHECK(IS(&c, c.method, c.method_len, "GET"));
	CHECK(IS(&c, c.protocol, c.protocol_len, "HTTP/1.1"));
	CHECK(IS(&c, c.uri, c.uri_len, "/shop/a%20b/cart.php?id=1%27+or&x&=v&&y=%zz%4&z=a=b"));
	CHECK(IS(&c, c.filename, c.filename_len, "/shop/a%20b/cart.php"));
	CHECK(IS(&c, c.basename, c.basename_len, "cart.php"));
	CHECK(IS(&c, c.query, c.query_len, "id=1%27+or&x&=v&&y=%zz%4&z=a=b"));
	CHECK(IS(&c, c.line, c.line_len, "GET /shop/a%20b/cart.php?id=1%27+or&x&=v&&y=%zz%4&z=a=b HTTP/1.1"));
	CHECK(c.list[SC_ARGS_GET].n == 6);
	CHECK(PAIR(&c, SC_ARGS_GET, 0, "id", "1' or"));
	CHECK(PAIR(&c, SC_ARGS_GET, 1, "x", ""));
	CHECK(PAIR(&c, SC_ARGS_GET, 2, "", "v"));
	CHECK(PAIR(&c, SC_ARGS_GET, 3, "", ""));
	CHECK(PAIR(&c, SC_ARGS_GET, 4, "y", "%zz%4"));
	CHECK(PAIR(&c, SC_ARGS_GET, 5, "z", "a=b"));
	CHECK(c.urlencoded_invalid == 2);
	CHECK(c.list[SC_HEADERS].n == 3 && PAIR(&c, SC_HEADERS, 2, "User-Agent", "curl/8"));
	CHECK(c.list[SC_COOKIES].n == 4);
	CHECK(PAIR(&c, SC_COOKIES, 0, "sess", "abc"));
	CHECK(PAIR(&c, SC_COOKIES, 1, "x", ""));
	CHECK(PAIR(&c, SC_COOKIES, 2, "flag", ""));
	CHECK(PAIR(&c, SC_COOKIES, 3, "t", "a=b"));

	/* absolute-form: REQUEST_URI drops scheme and host */
	seccoll_reset(&c);
	seccoll_request(&c, "GET", 3, "http://h.example:8080/p/q?a", 27, "HTTP/1.1", 8, NULL, 0);
	CHECK(IS(&c, c.uri, c.uri_len, "/p/q?a") && IS(&c, c.filename, c.filename_len, "/p/q"));
	CHECK(PAIR(&c, SC_ARGS_GET, 0, "a", "") && c.list[SC_COOKIES].n == 0);
	seccoll_reset(&c);
	seccoll_request(&c, "OPTIONS", 7, "*", 1, "HTTP/1.1", 8, NULL, 0);
	CHECK(IS(&c, c.uri, c.uri_len, "*") && IS(&c, c.basename, c.basename_len, "*") && c.query_len == 0);
	seccoll_reset(&c);
	seccoll_request(&c, "GET", 3, "/a\\b.exe", 8, "HTTP/1.0", 8, NULL, 0);
	CHECK(IS(&c, c.basename, c.basename_len, "b.exe"));

	/* an urlencoded body */
	seccoll_urlencoded_body(&c, "a=1&b=%3Cscript%3E&c", 20);
	CHECK(IS(&c, c.body, c.body_len, "a=1&b=%3Cscript%3E&c"));
	CHECK(c.list[SC_ARGS_POST].n == 3 && PAIR(&c, SC_ARGS_POST, 1, "b", "<script>") && PAIR(&c, SC_ARGS_POST, 2, "c", ""));
	/* values with NUL bytes survive (lengths, not strlen) */
	seccoll_parse_args(&c, SC_ARGS_POST, "n=%00x", 6, '&');
	CHECK(pair(&c, SC_ARGS_POST, 3, "n", 1, "\0x", 2));
	seccoll_free(&c);
	test_json();
	printf("test_seccoll: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
