/* Unit tests for h1head_parse and h1head_parse_response: the heads they
 * take, with their spans, and the ones they leave to llhttp (fuzz_h1head
 * checks the taken ones against llhttp). */
#include <stdio.h>
#include <string.h>
#include "h1head.h"
#include "llhttp.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static struct h1head hd;

static size_t parse(const char *s)
{
	return h1head_parse(s, strlen(s), &hd);
}

static int span_is(const char *base, struct h1head_span sp, const char *want)
{
	return sp.len == strlen(want) && memcmp(base + sp.off, want, sp.len) == 0;
}

static void test_common_heads(void)
{
	const char *curl = "GET /a/b?x=1&y=%20z HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: curl/7.88.1\r\n"
			   "Accept: */*\r\n\r\n";
	CHECK(parse(curl) == strlen(curl));
	CHECK(hd.method == HTTP_GET && hd.http_minor == 1 && hd.nhdrs == 3);
	CHECK(span_is(curl, hd.start, "/a/b?x=1&y=%20z"));
	CHECK(span_is(curl, hd.name[0], "Host") && span_is(curl, hd.value[0], "example.com:8080"));
	CHECK(span_is(curl, hd.name[2], "Accept") && span_is(curl, hd.value[2], "*/*"));

	/* Pipelined bytes after the head are not part of it; leading spaces
	 * of a value are not part of it, inner ones are. */
	const char *two = "HEAD / HTTP/1.0\r\nX-A:   a  b\r\nx_b:c\r\n\r\nGET / HTTP/1.1\r\n\r\n";
	CHECK(parse(two) == strlen("HEAD / HTTP/1.0\r\nX-A:   a  b\r\nx_b:c\r\n\r\n"));
	CHECK(hd.method == HTTP_HEAD && hd.http_minor == 0 && hd.nhdrs == 2);
	CHECK(span_is(two, hd.value[0], "a  b") && span_is(two, hd.name[1], "x_b") && span_is(two, hd.value[1], "c"));

	/* No headers at all (HTTP/1.0). */
	CHECK(parse("OPTIONS /x HTTP/1.0\r\n\r\n") == 23 && hd.method == HTTP_OPTIONS && hd.nhdrs == 0);
	CHECK(parse("DELETE /x HTTP/1.1\r\nHost: a\r\n\r\n") > 0 && hd.method == HTTP_DELETE);
	CHECK(parse("PATCH /x HTTP/1.1\r\nHost: a\r\n\r\n") > 0 && hd.method == HTTP_PATCH);
	CHECK(parse("TRACE /x HTTP/1.1\r\nHost: a\r\n\r\n") > 0 && hd.method == HTTP_TRACE);
	CHECK(parse("PUT /x HTTP/1.1\r\nHost: a\r\n\r\n") > 0 && hd.method == HTTP_PUT);
	CHECK(parse("POST /x HTTP/1.1\r\nHost: a\r\n\r\n") > 0 && hd.method == HTTP_POST);
	/* Connection is only read by the codec, not by llhttp's framing. */
	CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n") > 0);
}

/* Every prefix of a head is incomplete, never a head. */
static void test_prefixes(void)
{
	const char *h = "GET /index.html HTTP/1.1\r\nHost: a.example\r\nCookie: a=1; b=2\r\n"
			"Accept-Language: en-US,en;q=0.5\r\n\r\n";
	size_t n = strlen(h);
	CHECK(h1head_parse(h, n, &hd) == n);
	int taken = 0;
	for (size_t i = 0; i < n; i++)
		taken += h1head_parse(h, i, &hd) != 0;
	CHECK(taken == 0);
}

/* Anything outside the common form is llhttp's, valid or not. */
static void test_left_to_llhttp(void)
{
	static const char *const others[] = {
		"",
		"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",               /* leading empty line */
		"get / HTTP/1.1\r\nHost: a\r\n\r\n",                   /* method case */
		"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
		"PROPFIND / HTTP/1.1\r\nHost: a\r\n\r\n",              /* a method llhttp knows */
		"GET  / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n",           /* absolute form */
		"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a#frag HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /\x80 HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.2\r\nHost: a\r\n\r\n",
		"GET / HTTP/2.0\r\nHost: a\r\n\r\n",
		"GET / HTTP/1.1\nHost: a\r\n\r\n",                     /* bare LF */
		"GET / HTTP/1.1\r\nHost: a\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\n",
		"GET / HTTP/1.1\r\nHost: a\r\r\n\r\n",
		"GET / HTTP/1.1\r\nHost : a\r\n\r\n",                  /* space before colon */
		"GET / HTTP/1.1\r\nHo(st: a\r\n\r\n",
		"GET / HTTP/1.1\r\n: a\r\n\r\n",                       /* empty name */
		"GET / HTTP/1.1\r\nHost a\r\n\r\n",                    /* no colon */
		"GET / HTTP/1.1\r\nHost:\r\n\r\n",                     /* empty value */
		"GET / HTTP/1.1\r\nHost:   \r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a \r\n\r\n",                  /* trailing space */
		"GET / HTTP/1.1\r\nHost:\ta\r\n\r\n",                  /* tab */
		"GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n",
		"GET / HTTP/1.1\r\nX: caf\xc3\xa9\r\n\r\n",            /* obs-text */
		"GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
		"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",                /* obs-fold */
		"GET / HTTP/1.1\r\nX: a\r\n\tb\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx",
		"POST / HTTP/1.1\r\nHost: a\r\ncontent-LENGTH: 1\r\n\r\nx",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		/* strlen stops at the NUL case's NUL: it is incomplete then. */
		size_t n = h1head_parse(others[i], strlen(others[i]), &hd);
		if (n != 0)
			fprintf(stderr, "taken: %s\n", others[i]);
		CHECK(n == 0);
	}
	const char nul[] = "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n";
	CHECK(h1head_parse(nul, sizeof(nul) - 1, &hd) == 0);
}

/* The header count limit: H1HEAD_MAX_HDRS lines are taken, one more is not. */
static void test_many_headers(void)
{
	char buf[4096];
	for (int extra = 0; extra <= 1; extra++) {
		size_t n = (size_t)snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\n");
		for (int i = 0; i < H1HEAD_MAX_HDRS + extra; i++)
			n += (size_t)snprintf(buf + n, sizeof(buf) - n, "X-H%d: v%d\r\n", i, i);
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\r\n");
		size_t got = h1head_parse(buf, n, &hd);
		CHECK(extra ? got == 0 : got == n && hd.nhdrs == H1HEAD_MAX_HDRS &&
		      span_is(buf, hd.value[H1HEAD_MAX_HDRS - 1], "v63"));
	}
}

/* Values of every length around the eight-byte steps, ending on each
 * position, and a bad byte at each position. */
static void test_value_lengths(void)
{
	char buf[256], val[64];
	for (size_t len = 1; len < 40; len++) {
		for (size_t i = 0; i < len; i++)
			val[i] = (char)('a' + i % 26);
		val[len] = 0;
		int n = snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nX: %s\r\n\r\n", val);
		CHECK(h1head_parse(buf, (size_t)n, &hd) == (size_t)n && span_is(buf, hd.value[0], val));
		for (size_t bad = 0; bad < len; bad++) {
			static const char bads[] = { '\t', 0x7f, (char)0x80, (char)0xff, 0x01, '\n' };
			for (size_t b = 0; b < sizeof(bads); b++) {
				val[bad] = bads[b];
				n = snprintf(buf, sizeof(buf), "GET / HTTP/1.1\r\nX: %s\r\n\r\n", val);
				CHECK(h1head_parse(buf, (size_t)n, &hd) == 0);
				val[bad] = (char)('a' + bad % 26);
			}
		}
	}
}

static size_t parse_resp(const char *s)
{
	return h1head_parse_response(s, strlen(s), &hd);
}

static void test_responses(void)
{
	const char *ng = "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nContent-Type: text/plain\r\n"
			 "Content-Length: 128\r\nConnection: keep-alive\r\n\r\nbody...";
	size_t head = strlen(ng) - strlen("body...");
	CHECK(parse_resp(ng) == head);
	CHECK(hd.status == 200 && hd.nhdrs == 4 && hd.has_length && hd.content_length == 128 &&
	      hd.connection == H1HEAD_CONN_KEEP_ALIVE);
	CHECK(span_is(ng, hd.start, "OK") && span_is(ng, hd.name[3], "Connection"));
	const char *nf = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nCONNECTION: Close\r\n\r\n";
	CHECK(parse_resp(nf) == strlen(nf) && hd.status == 404 && hd.content_length == 0 &&
	      hd.connection == H1HEAD_CONN_CLOSE && span_is(nf, hd.start, "Not Found"));
	const char *plain = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 000000000000042\r\n\r\n";
	CHECK(parse_resp(plain) == strlen(plain) && hd.content_length == 42 && hd.connection == H1HEAD_CONN_NONE);
	for (size_t i = 0; i < strlen(nf); i++)
		CHECK(h1head_parse_response(nf, i, &hd) == 0);

	static const char *const others[] = {
		"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\n\r\n",                                   /* read to EOF */
		"HTTP/1.1 100 Continue\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",                  /* no reason */
		"HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK \r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 \x01K\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: keep-alive, close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: upgrade\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\nConnection: close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nProxy-Connection: close\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nUpgrade: h2c\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n X: folded\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		size_t n = parse_resp(others[i]);
		if (n != 0)
			fprintf(stderr, "taken: %s\n", others[i]);
		CHECK(n == 0);
	}
	/* Requests never take a Content-Length or Proxy-Connection. */
	CHECK(parse("GET / HTTP/1.1\r\nHost: a\r\nProxy-Connection: keep-alive\r\n\r\n") == 0);
}

int main(void)
{
	test_responses();
	test_common_heads();
	test_prefixes();
	test_left_to_llhttp();
	test_many_headers();
	test_value_lengths();
	printf("test_h1head: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
