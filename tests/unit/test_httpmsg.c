/* Unit tests for the pure pieces: header arena and classification,
 * Connection handling, list parsing, head line-ending scan, shm counters. */
#include <string.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "httpmsg.h"
#include "shm.h"
#include "util.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static void add_header(struct msg *m, const char *name, const char *value)
{
	CHECK(msg_on_field(m, name, strlen(name)) == 0);
	if (*value)
		CHECK(msg_on_value(m, value, strlen(value)) == 0);
	CHECK(msg_finish_header(m) != NULL);
}

static void test_connection_tokens(void)
{
	struct msg m = { 0 };
	msg_reset(&m, 16);
	add_header(&m, "Host", "a");
	add_header(&m, "Connection", " keep-alive , X-Secret,close ");
	add_header(&m, "x-secret", "1");
	add_header(&m, "Keep-Alive", "timeout=5");
	add_header(&m, "X-Other", "v  ");
	unsigned f = msg_apply_connection(&m);
	CHECK(f == (CONN_CLOSE | CONN_KEEPALIVE));
	struct buf out = { 0 };
	msg_write_headers(&m, &out);
	buf_append(&out, "", 1);
	CHECK(strcmp(out.data, "Host: a\r\nX-Other: v\r\n") == 0);
	CHECK(msg_find(&m, HDR_HOST) != NULL);
	CHECK(msg_count(&m, HDR_CONNECTION) == 1);
	buf_free(&out);
	msg_free(&m);
}

/* Connection may not unlist framing or routing headers (smuggling). */
static void test_connection_cannot_drop_framing(void)
{
	struct msg m = { 0 };
	msg_reset(&m, 16);
	add_header(&m, "Host", "a");
	add_header(&m, "Content-Length", "5");
	add_header(&m, "Connection", "content-length, host, x-y");
	add_header(&m, "X-Y", "1");
	msg_apply_connection(&m);
	struct buf out = { 0 };
	msg_write_headers(&m, &out);
	buf_append(&out, "", 1);
	CHECK(strcmp(out.data, "Host: a\r\nContent-Length: 5\r\n") == 0);
	buf_free(&out);
	msg_free(&m);
}

static void test_limits_and_bad_headers(void)
{
	struct msg m = { 0 };
	msg_reset(&m, 2);
	add_header(&m, "A", "1");
	add_header(&m, "B", "2");
	CHECK(msg_on_field(&m, "C", 1) == -1);
	msg_reset(&m, 4);
	CHECK(msg_on_value(&m, "orphan", 6) == -1);  /* value without a name */
	CHECK(msg_finish_header(&m) == NULL);
	/* a split field and value, as llhttp delivers across reads */
	CHECK(msg_on_field(&m, "Conte", 5) == 0);
	CHECK(msg_on_field(&m, "nt-Length", 9) == 0);
	CHECK(msg_on_value(&m, "1", 1) == 0);
	CHECK(msg_on_value(&m, "2", 1) == 0);
	struct hdr *h = msg_finish_header(&m);
	CHECK(h && h->kind == HDR_CONTENT_LENGTH && h->val_len == 2);
	CHECK(m.nhdrs == 1);
	msg_free(&m);
}

static void test_list_next(void)
{
	const char *v = " gzip ,, chunked\t,", *p = v, *t;
	size_t n;
	CHECK(list_next(&p, v + strlen(v), &t, &n) && n == 4 && strncmp(t, "gzip", 4) == 0);
	CHECK(list_next(&p, v + strlen(v), &t, &n) && n == 7 && strncmp(t, "chunked", 7) == 0);
	CHECK(!list_next(&p, v + strlen(v), &t, &n));
	CHECK(tok_eq("ChUnKeD", 7, "chunked"));
	CHECK(!tok_eq("chunked ", 8, "chunked"));
}

static int scan(const char *s)
{
	struct head_scan hs = { 0 };
	return head_scan(&hs, s, strlen(s));
}

static void test_head_scan(void)
{
	CHECK(scan("GET / HTTP/1.1\r\nHost: a\r\n\r\n") == 27);
	CHECK(scan("GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY") == 27);
	CHECK(scan("GET / HTTP/1.1\r\nHost: a\r\n") == 0);          /* need more */
	CHECK(scan("GET / HTTP/1.1\nHost: a\r\n\r\n") == -1);       /* bare LF */
	CHECK(scan("GET / HTTP/1.1\r\nHost: a\rX\r\n\r\n") == -1);  /* bare CR */
	CHECK(scan("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n") == 0);      /* strlen stops at NUL */
	struct head_scan hs = { 0 };
	CHECK(head_scan(&hs, "GET /\0 HTTP/1.1\r\n", 17) == -1);
	CHECK(scan("\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n") == 29);  /* leading CRLF tolerated */
	/* split across calls, including between CR and LF */
	struct head_scan h2 = { 0 };
	CHECK(head_scan(&h2, "GET / HTTP/1.1\r", 15) == 0);
	CHECK(head_scan(&h2, "\nHost: a\r\n\r", 11) == 0);
	CHECK(head_scan(&h2, "\nrest", 5) == 1);
}

/* The byte-at-a-time definition head_scan's word-at-a-time scan must agree
 * with: same result for every input, whatever the split into calls. */
static int head_scan_ref(struct head_scan *hs, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (hs->state == HS_CR || hs->state == HS_CRLF_CR) {
			if (c != '\n')
				return -1;
			if (hs->state == HS_CRLF_CR && hs->seen_text)
				return (int)(i + 1);
			hs->state = HS_CRLF;
			continue;
		}
		if (c == '\n' || c == 0)
			return -1;
		if (c == '\r') {
			hs->state = hs->state == HS_CRLF ? HS_CRLF_CR : HS_CR;
		} else {
			hs->state = HS_TEXT;
			hs->seen_text = 1;
		}
	}
	return 0;
}

static void test_head_scan_matches_bytewise(void)
{
	static const char alphabet[] = "\r\n\r\n\r\nab: \t\x01\x0c\x0d\x0e\x80\xff";
	unsigned seed = 12345, mismatches = 0;
	char in[96];
	for (int round = 0; round < 20000; round++) {
		size_t n = 1 + (seed = seed * 1103515245u + 12345u) % sizeof(in);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			/* mostly text, so long runs cross the 8-byte words */
			in[i] = (seed >> 16) % 4 ? (char)('A' + (seed >> 8) % 26)
						  : alphabet[(seed >> 20) % (sizeof(alphabet) - 1)];
		}
		size_t split = (seed >> 4) % (n + 1);
		struct head_scan a = { 0 }, b = { 0 };
		int ra = head_scan(&a, in, split), rb = head_scan_ref(&b, in, split);
		if (ra == 0 && rb == 0) {
			ra = head_scan(&a, in + split, n - split);
			rb = head_scan_ref(&b, in + split, n - split);
		}
		if (ra != rb || (ra == 0 && (a.state != b.state || a.seen_text != b.seen_text)))
			mismatches++;
	}
	CHECK(mismatches == 0);
}

/* Headers taken whole from the arena (msg_add_parsed) go out as they came,
 * kept lines copied in runs; dropped, edited and added ones as usual. */
static void test_write_from_arena(void)
{
	const char head[] = "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nX-A: 1\r\nX-B:  2\r\nX-C: 3\r\n"
			    "X-D: 4\r\n\r\n";
	struct msg m = { 0 };
	msg_reset(&m, 16);
	buf_append(&m.raw, head, sizeof(head) - 1);
	const char *names[] = { "Host", "Connection", "X-A", "X-B", "X-C", "X-D" };
	const char *vals[] = { "a", "close", "1", "2", "3", "4" };
	for (int i = 0; i < 6; i++) {
		const char *n = strstr(head, names[i]);
		const char *v = strstr(n, vals[i]);
		CHECK(msg_add_parsed(&m, (uint32_t)(n - head), (uint32_t)strlen(names[i]), (uint32_t)(v - head),
				     (uint32_t)strlen(vals[i])) != NULL);
	}
	CHECK(m.hdrs[1].drop == 1);   /* Connection: hop-by-hop */
	msg_set_value(&m, &m.hdrs[4], "three", 5);
	msg_add(&m, "X-E", "5", 1);
	struct buf out = { 0 };
	msg_write_headers(&m, &out);
	buf_append(&out, "", 1);
	CHECK(strcmp(out.data, "Host: a\r\nX-A: 1\r\nX-B: 2\r\nX-C: three\r\nX-D: 4\r\nX-E: 5\r\n") == 0);
	CHECK(m.head_bytes == 6 * 4 + 4 + 1 + 10 + 5 + 3 + 1 + 3 + 1 + 3 + 1 + 3 + 1);
	buf_free(&out);
	msg_free(&m);
}

static void test_classify(void)
{
	int hop;
	CHECK(hdr_classify("Host", 4, &hop) == HDR_HOST && !hop);
	CHECK(hdr_classify("TE", 2, &hop) == HDR_TE && hop);
	CHECK(hdr_classify("Trailer", 7, &hop) == HDR_TRAILER && hop);
	CHECK(hdr_classify("HTTP2-Settings", 14, &hop) == HDR_OTHER && hop);
	CHECK(hdr_classify("Content-Length", 14, &hop) == HDR_CONTENT_LENGTH && !hop);
	CHECK(hdr_classify("UPGRADE", 7, &hop) == HDR_UPGRADE && hop);
	CHECK(hdr_classify("keep-alive", 10, &hop) == HDR_KEEP_ALIVE && hop);
	CHECK(hdr_classify("Connection", 10, &hop) == HDR_CONNECTION && hop);
	CHECK(hdr_classify("X-Real-IP", 9, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("Forwarded", 9, &hop) == HDR_FORWARDED);
	CHECK(hdr_classify("Proxy-Client-IP", 15, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("X-Forwarded-For", 15, &hop) == HDR_X_FORWARDED_FOR);
	CHECK(hdr_classify("x-forwarded-proto", 17, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("Transfer-Encoding", 17, &hop) == HDR_TRANSFER_ENCODING && hop);
	CHECK(hdr_classify("WL-Proxy-Client-IP", 18, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("X_Real_IP", 9, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("Hosts", 5, &hop) == HDR_OTHER);
	CHECK(hdr_classify("Hast", 4, &hop) == HDR_OTHER);
	CHECK(hdr_classify("wl-proxy-", 9, &hop) == HDR_OTHER);  /* a prefix alone names nothing */
	CHECK(hdr_classify("", 0, &hop) == HDR_OTHER);
	/* Underscore aliases of each identity family, any case. */
	CHECK(hdr_classify("proxy_client_ip", 15, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("FORWARDED", 9, &hop) == HDR_FORWARDED);
	CHECK(hdr_classify("x_forwarded_for", 15, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("Wl_Proxy_Client_IP", 18, &hop) == HDR_IDENTITY);
	CHECK(hdr_classify("X_WEBLOGIC_Request", 18, &hop) == HDR_IDENTITY);
	/* Control bytes are not letters: only A-Z fold. */
	CHECK(hdr_classify("\x08ost", 4, &hop) == HDR_OTHER);
	CHECK(hdr_classify("Content\x0dLength", 14, &hop) == HDR_OTHER);
	CHECK(hdr_classify("User-Agent", 10, &hop) == HDR_OTHER && !hop);
}

static void test_framing_alias(void)
{
	CHECK(hdr_framing_alias("Content_Length", 14) == 1);
	CHECK(hdr_framing_alias("transfer_encoding", 17) == 1);
	CHECK(hdr_framing_alias("TRANSFER_encoding", 17) == 1);
	CHECK(hdr_framing_alias("Content-Length", 14) == 0);   /* the real one */
	CHECK(hdr_framing_alias("X_Forwarded_For", 15) == 0);
	CHECK(hdr_framing_alias("Content_Lengths", 15) == 0);
}

static int split(const char *u, const char *auth, const char *path)
{
	const char *a, *p;
	size_t al, pl;
	int r = url_absolute_split(u, strlen(u), &a, &al, &p, &pl);
	if (r != 1)
		return r;
	return al == strlen(auth) && memcmp(a, auth, al) == 0 && pl == strlen(path) &&
	       memcmp(p, path, pl) == 0 ? 1 : 2;
}

static void test_absolute_form(void)
{
	CHECK(split("/a?b", "", "") == 0);
	CHECK(split("*", "", "") == 0);
	CHECK(split("http://h.example/a?b", "h.example", "/a?b") == 1);
	CHECK(split("HTTPS://h.example:8443", "h.example:8443", "") == 1);
	CHECK(split("http://h.example?q", "h.example", "?q") == 1);
	CHECK(split("http:///x", "", "") == -1);              /* no authority */
	CHECK(split("http://u@h.example/", "", "") == -1);    /* userinfo */
	CHECK(split("ftp://h.example/", "", "") == -1);
	CHECK(split("h.example:80", "", "") == -1);           /* authority-form */
}

static int hv(const char *v)
{
	return host_valid(v, strlen(v));
}

static void test_host_valid(void)
{
	CHECK(hv("t.example") && hv("t.example:8080") && hv("T-1_x~.example") && hv(""));
	CHECK(hv("[::1]") && hv("[::1]:443") && hv("127.0.0.1:80") && hv("a%2Db") && hv("h:"));
	CHECK(!hv("good.example/evil") && !hv("a@b") && !hv("a b") && !hv("a\\b"));
	CHECK(!hv("a,b") && !hv("a:80x") && !hv("a:80:90") && !hv("[::1") && !hv("[]"));
	CHECK(!hv("[::1]x") && !hv("a%zz") && !hv("a%2") && !hv("a?b") && !hv("a#b"));
	CHECK(host_valid("a\0b", 3) == 0);
}

static void test_add_and_set_value(void)
{
	struct msg m = { 0 };
	msg_reset(&m, 1);
	add_header(&m, "Content-Length", "010");
	msg_set_value(&m, &m.hdrs[0], "10", 2);
	msg_add(&m, "Host", "h.example", 9);   /* past max_hdrs: sluice's own */
	CHECK(m.nhdrs == 2 && m.hdrs[1].kind == HDR_HOST);
	struct buf out = { 0 };
	msg_write_headers(&m, &out);
	buf_append(&out, "", 1);
	CHECK(strcmp(out.data, "Content-Length: 10\r\nHost: h.example\r\n") == 0);
	buf_free(&out);
	msg_free(&m);
}

static int cookie_is(const struct msg *m, const char *name, const char *want)
{
	const char *v;
	size_t vl;
	if (!msg_cookie(m, name, strlen(name), &v, &vl))
		return want == NULL;
	return want && vl == strlen(want) && memcmp(v, want, vl) == 0;
}

static void test_cookies(void)
{
	struct msg m = { 0 };
	msg_reset(&m, 16);
	add_header(&m, "Accept", "*/*");
	add_header(&m, "Cookie", "a=1; JSESSIONID=abc.node1 ;b= \"q v\" ; c");
	add_header(&m, "cookie", "x=y; a=2; =z; d=");
	CHECK(cookie_is(&m, "a", "1"));                 /* the first one wins */
	CHECK(cookie_is(&m, "JSESSIONID", "abc.node1"));
	CHECK(cookie_is(&m, "b", "q v"));               /* quotes taken off */
	CHECK(cookie_is(&m, "x", "y"));                 /* the second field too */
	CHECK(cookie_is(&m, "d", ""));
	CHECK(cookie_is(&m, "c", NULL));                /* no '=': not a pair */
	CHECK(cookie_is(&m, "jsessionid", NULL));       /* names are case-sensitive */
	CHECK(cookie_is(&m, "JSESSION", NULL));
	CHECK(cookie_is(&m, "", NULL) || cookie_is(&m, "", "z"));
	/* every occurrence, in order */
	const char *f = "s=1;t=2; s=3", *p = f, *v;
	size_t vl;
	CHECK(cookie_next(&p, f + strlen(f), "s", 1, &v, &vl) && vl == 1 && *v == '1');
	CHECK(cookie_next(&p, f + strlen(f), "s", 1, &v, &vl) && vl == 1 && *v == '3');
	CHECK(!cookie_next(&p, f + strlen(f), "s", 1, &v, &vl));
	msg_free(&m);

	const char *n;
	size_t nl;
	const char *sc = " SLUICE = tok42 ; Path=/; HttpOnly";
	CHECK(set_cookie_split(sc, strlen(sc), &n, &nl, &v, &vl) == 0);
	CHECK(nl == 6 && memcmp(n, "SLUICE", 6) == 0 && vl == 5 && memcmp(v, "tok42", 5) == 0);
	sc = "JSESSIONID=\"a!1!2\"";
	CHECK(set_cookie_split(sc, strlen(sc), &n, &nl, &v, &vl) == 0 && vl == 5 && v[1] == '!');
	sc = "novalue; Path=/a=b";
	CHECK(set_cookie_split(sc, strlen(sc), &n, &nl, &v, &vl) == -1);
}

/* The app_cookie table: learned values, their ttl, a full set giving up
 * its least recently used entry, a lock a dead worker held. */
static void test_stick_table(void)
{
	CHECK(shm_stick_get(0, 12345, 100, 60) == -1);
	shm_stick_put(0, 12345, 7, 100);
	CHECK(shm_stick_get(1, 12345, 150, 60) == 7);   /* another worker sees it; used at 150 */
	CHECK(shm_stick_get(1, 12345, 209, 60) == 7);   /* 59 s after the last use */
	CHECK(shm_stick_get(1, 12345, 300, 60) == -1);  /* 91 s: forgotten */
	CHECK(shm_stick_get(1, 12345, 301, 60) == -1);
	shm_stick_put(0, 12345, 8, 400);
	shm_stick_put(0, 12345, 9, 401);                 /* relearned: replaced, not added */
	CHECK(shm_stick_get(0, 12345, 402, 60) == 9);
	/* STICK_WAYS + 1 keys of one set: the least recently used one goes */
	uint64_t k[STICK_WAYS + 1];
	for (int i = 0; i <= STICK_WAYS; i++)
		k[i] = 1000 + (uint64_t)i * STICK_SETS * 2;  /* one set */
	for (int i = 0; i < STICK_WAYS; i++)
		shm_stick_put(0, k[i], i, 500 + (uint32_t)i);
	CHECK(shm_stick_get(0, k[0], 520, 600) == 0);     /* k[0] used again: k[1] is now the oldest */
	shm_stick_put(0, k[STICK_WAYS], 99, 521);
	CHECK(shm_stick_get(0, k[STICK_WAYS], 522, 600) == 99);
	CHECK(shm_stick_get(0, k[1], 522, 600) == -1);
	CHECK(shm_stick_get(0, k[0], 522, 600) == 0);
	CHECK(shm_stick_get(0, k[2], 522, 600) == 2);
	/* a worker that died holding a set's lock: the master breaks it */
	atomic_store(&shm->stick[((k[0] | 1) >> 1) % STICK_SETS].lock, 3 + 1);
	CHECK(shm_stick_get(0, k[0], 523, 600) == -1);   /* held: a miss, not a spin */
	shm_worker_reclaim(3);
	CHECK(shm_stick_get(0, k[0], 523, 600) == 0);
}

static void test_shm_cap_and_reclaim(void)
{
	CHECK(shm_init() == 0);
	int s = shm_slot_get("be/s1");
	CHECK(s >= 0 && shm_slot_get("be/s1") == s && shm_slot_find("be/s1") == s);
	CHECK(shm_slot_find("nope") == -1);
	CHECK(shm_conns_reserve(0, s, 2) == 1);
	CHECK(shm_conns_reserve(1, s, 2) == 1);
	CHECK(shm_conns_reserve(1, s, 2) == 0);   /* cap reached across "workers" */
	CHECK(shm_get(s, SHM_CONNS) == 2);
	/* a forked child reserves too: the counter is shared */
	pid_t pid = fork();
	if (pid == 0)
		_exit(shm_conns_reserve(2, s, 3) == 1 ? 0 : 1);
	int st;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK(shm_get(s, SHM_CONNS) == 3);
	shm_worker_reclaim(2);                    /* the child "died" holding one */
	CHECK(shm_get(s, SHM_CONNS) == 2);
	shm_add(1, s, SHM_CONNS, -1);
	CHECK(shm_get(s, SHM_CONNS) == 1);
	shm_worker_reclaim(0);
	CHECK(shm_get(s, SHM_CONNS) == 0);
}

/* The eight-bytes-a-step folding agrees with the byte-wise definition for
 * every byte value, at every offset within a word and every length tail. */
static void test_ascii_lower_copy(void)
{
	char src[300], dst[300], want[300];
	int bad = 0;
	for (int off = 0; off < 8; off++)
		for (size_t n = 0; n + off <= 256 + 8; n += 1 + n / 16) {
			for (size_t i = 0; i < n; i++)
				src[off + i] = (char)((i * 7 + (size_t)off * 31) & 0xff);
			for (size_t i = 0; i < n; i++) {
				unsigned char c = (unsigned char)src[off + i];
				want[i] = (char)(c >= 'A' && c <= 'Z' ? c + 32 : c);
			}
			memset(dst, 0x55, sizeof(dst));
			ascii_lower_copy(dst + off, src + off, n);
			bad += memcmp(dst + off, want, n) != 0 || dst[off + n] != 0x55;
		}
	CHECK(bad == 0);
	/* every byte value in every lane */
	for (int v = 0; v < 256; v++) {
		for (int i = 0; i < 8; i++)
			src[i] = (char)(i == v % 8 ? v : 'Q');
		ascii_lower_copy(dst, src, 8);
		CHECK((unsigned char)dst[v % 8] == (v >= 'A' && v <= 'Z' ? v + 32 : v));
	}
}

int main(void)
{
	test_ascii_lower_copy();
	test_connection_tokens();
	test_connection_cannot_drop_framing();
	test_limits_and_bad_headers();
	test_list_next();
	test_head_scan();
	test_head_scan_matches_bytewise();
	test_classify();
	test_write_from_arena();
	test_framing_alias();
	test_absolute_form();
	test_add_and_set_value();
	test_host_valid();
	test_shm_cap_and_reclaim();
	test_stick_table();
	test_cookies();
	printf("test_httpmsg: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
