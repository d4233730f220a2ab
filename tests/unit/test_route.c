/* Unit test for src/route.c: target normalisation (what is forwarded and
 * what routes match: escapes, dot segments with and without ;parameters,
 * merged slashes, refused escapes), and route lookup through a real config:
 * first match wins across the path, host and generic indexes, every kind of
 * condition, and 1,000 prefix routes that still find the right one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <llhttp.h>
#include "cfg.h"
#include "route.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static struct buf out, key;

static void norm(const char *in, const char *want_out, const char *want_key)
{
	int rc = route_normalize(in, strlen(in), &out, &key);
	if (rc == 1) {  /* already normal: forwarded as it came */
		buf_append(&out, in, strlen(in));
		rc = 0;
	}
	if (want_out == NULL) {
		if (rc != -1)
			fprintf(stderr, "normalize %s: accepted as %.*s\n", in, (int)out.len, out.data);
		CHECK(rc == -1);
		return;
	}
	int ok = rc == 0 && out.len == strlen(want_out) && memcmp(out.data, want_out, out.len) == 0 &&
		 key.len == strlen(want_key) && memcmp(key.data, want_key, key.len) == 0;
	if (!ok)
		fprintf(stderr, "normalize %s: got %.*s key %.*s, want %s key %s\n", in, (int)out.len, out.data,
			(int)key.len, key.data, want_out, want_key);
	CHECK(ok);
}

static struct cfg *load(const char *yaml)
{
	char path[] = "/tmp/test_route_XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, yaml, strlen(yaml)) != (ssize_t)strlen(yaml))
		return NULL;
	close(fd);
	char err[4096];
	struct cfg *c = cfg_load(path, err, sizeof(err));
	if (c == NULL)
		fprintf(stderr, "config: %s\n", err);
	unlink(path);
	return c;
}

static struct msg req;

/* A request with HEADERS ("Name: value\n"...) through T. */
static const char *match(struct route_table *t, int method, const char *host, const char *target,
			 const char *headers)
{
	msg_reset(&req, 100);
	for (const char *p = headers; p && *p;) {
		const char *colon = strchr(p, ':'), *nl = strchr(p, '\n');
		msg_on_field(&req, p, (size_t)(colon - p));
		msg_on_value(&req, colon + 2, (size_t)(nl - colon - 2));
		msg_finish_header(&req);
		p = nl + 1;
	}
	if (route_normalize(target, strlen(target), &out, &key) < 0)
		return "refused";
	struct route_req q = { method, host, strlen(host), key.data, key.len, &req };
	const struct cfg_route *r = route_match(t, &q);
	return r ? r->name : "none";
}

#define HEAD "user: root\nlisteners:\n  - address: 127.0.0.1:1\n    backend: app\n    routes:\n"
#define TAIL "backends:\n  - name: app\n    servers: [{address: 127.0.0.1:2}]\n" \
	     "  - name: other\n    servers: [{address: 127.0.0.1:3}]\n"

int main(void)
{
	norm("/", "/", "/");
	norm("/a/b?x=1", "/a/b?x=1", "/a/b");
	norm("/a//b///c", "/a/b/c", "/a/b/c");
	norm("/a/./b/../c/", "/a/c/", "/a/c/");
	norm("/a/b/..", "/a/", "/a/");
	norm("/..", "/", "/");
	norm("/../../etc/passwd", "/etc/passwd", "/etc/passwd");
	norm("/static/%2e%2e/admin", "/admin", "/admin");
	norm("/static/%2E./admin", "/admin", "/admin");
	norm("/static/..;/admin", "/admin", "/admin");          /* Tomcat's "..;" */
	norm("/static/..;x=1/admin", "/admin", "/admin");
	norm("/app;jsessionid=AB.n1/x", "/app;jsessionid=AB.n1/x", "/app/x");
	norm("/a/;x/b", "/a/;x/b", "/a/b");
	norm("/%7euser/%41", "/~user/A", "/~user/A");
	norm("/a%20b/%3f", "/a%20b/%3F", "/a%20b/%3F");
	norm("/q?a=/../b", "/q?a=/../b", "/q");                  /* the query is not a path */
	norm("http://h.example/a/../b?q", "http://h.example/b?q", "/b");
	norm("*", "*", "*");
	norm("/a%2fb", NULL, NULL);                              /* encoded '/' */
	norm("/a%5Cb", NULL, NULL);                              /* encoded '\' */
	norm("/a%00", NULL, NULL);
	norm("/a%2", NULL, NULL);
	norm("/a%zz", NULL, NULL);

	struct cfg *c = load(HEAD
		"      - {name: health, match: {path: {exact: /health}}, respond: {status: 200, body: ok}}\n"
		"      - {name: api-post, match: {path: {prefix: /api}, methods: [POST, PUT]}, backend: other}\n"
		"      - {name: api, match: {path: {prefix: /api/}}}\n"
		"      - {name: img, match: {path: {prefix: /img, plain: true}}}\n"
		"      - {name: re, match: {path: {regex: '^/v[0-9]+/'}}}\n"
		"      - {name: shop, match: {host: [shop.example.com]}}\n"
		"      - {name: wild, match: {host: ['*.example.com', 'x.y.example.com', '*.y.example.com']}}\n"
		"      - {name: beta, match: {cookies: [{name: beta, equals: 'on'}]}}\n"
		"      - {name: canary, match: {headers: [{name: X-Canary, present: true}]}}\n"
		"      - {name: ua, match: {headers: [{name: User-Agent, regex: 'curl/'}]}}\n"
		"      - {name: all, redirect: {status: 301, location: 'https://{host}{path}{query}'}}\n"
		TAIL);
	CHECK(c != NULL);
	if (c) {
		struct route_table *t = route_table_build(&c->listeners[0]);
		CHECK(t != NULL);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/health", NULL), "health") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/health/", NULL), "all") == 0);
		CHECK(strcmp(match(t, HTTP_POST, "x", "/api/v1", NULL), "api-post") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/api/v1", NULL), "api") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/api", NULL), "api") == 0);   /* "/api/" = the /api subtree */
		CHECK(strcmp(match(t, HTTP_GET, "x", "/apis", NULL), "all") == 0);  /* not a segment */
		CHECK(strcmp(match(t, HTTP_GET, "x", "/imgs/a.png", NULL), "img") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/v2/x", NULL), "re") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "SHOP.example.com", "/", NULL), "shop") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "a.b.example.com", "/", NULL), "wild") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x.y.example.com", "/", NULL), "wild") == 0); /* three keys of one route */
		CHECK(strcmp(match(t, HTTP_GET, "example.com", "/", NULL), "all") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "shop.example.com", "/api/x", NULL), "api") == 0); /* order */
		CHECK(strcmp(match(t, HTTP_GET, "x", "/", "Cookie: a=1; beta=on\n"), "beta") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/", "Cookie: beta=off\n"), "all") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/", "Cookie: xbeta=on\n"), "all") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/", "x-canary: 1\n"), "canary") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/", "User-Agent: curl/8.0\n"), "ua") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/api/%2e%2e/health", NULL), "health") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/api/..;/health", NULL), "health") == 0);
		CHECK(strcmp(match(t, HTTP_GET, "x", "/api;x=1/y", NULL), "api") == 0);
		struct buf loc = { 0 };
		route_location(&c->listeners[0].routes[10], 0, "h.example", 9, "/a/b?x=1", 8, &loc);
		CHECK(loc.len == 25 && memcmp(loc.data, "https://h.example/a/b?x=1", 25) == 0);
		loc.len = 0;
		route_location(&c->listeners[0].routes[10], 0, "h", 1, "/", 1, &loc);
		CHECK(loc.len == 10 && memcmp(loc.data, "https://h/", 10) == 0);
		buf_free(&loc);
		route_table_free(t);
		cfg_free(c);
	}

	/* 1,000 prefix routes and a catch-all: the right one, whichever. */
	{
		size_t cap = 200000, len = 0;
		char *y = malloc(cap);
		len += (size_t)snprintf(y + len, cap - len, "%s", HEAD);
		for (int i = 0; i < 1000; i++)
			len += (size_t)snprintf(y + len, cap - len,
						"      - {name: p%d, match: {path: {prefix: /app%d}}, backend: other}\n", i, i);
		len += (size_t)snprintf(y + len, cap - len, "      - {name: last}\n%s", TAIL);
		c = load(y);
		free(y);
		CHECK(c != NULL);
		if (c) {
			struct route_table *t = route_table_build(&c->listeners[0]);
			CHECK(strcmp(match(t, HTTP_GET, "x", "/app0/x", NULL), "p0") == 0);
			CHECK(strcmp(match(t, HTTP_GET, "x", "/app999", NULL), "p999") == 0);
			CHECK(strcmp(match(t, HTTP_GET, "x", "/app123/a/b", NULL), "p123") == 0);
			CHECK(strcmp(match(t, HTTP_GET, "x", "/app1000", NULL), "last") == 0);
			CHECK(strcmp(match(t, HTTP_GET, "x", "/", NULL), "last") == 0);
			route_table_free(t);
			cfg_free(c);
		}
	}
	msg_free(&req);
	buf_free(&out);
	buf_free(&key);
	printf("test_route: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
