/* libFuzzer target: h1head_parse and h1head_parse_response, the one-pass
 * readers of the common request and response heads, against llhttp (strict
 * mode, as sluice builds it).
 *
 * Input: bytes read both as a client's request and as a backend's response.
 * Whenever h1head_parse takes a head, llhttp must read the same bytes the
 * same way: the same method and version, the target and every header name
 * and value byte for byte, in order, no body framing, no upgrade, and the
 * message complete exactly where h1head_parse says the head ends. Whenever
 * h1head_parse_response takes one: the same status, reason phrase and
 * headers, Content-Length framing with the same length, the same connection
 * flags and keep-alive verdict, and the message complete exactly after the
 * body (or still waiting for it when the input is shorter). (Declining is
 * always allowed: llhttp then reads the head itself.) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "h1head.h"
#include "llhttp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_h1head: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

/* What llhttp reported: pieces of one span are joined. */
struct seen {
	char url[4096];
	size_t url_len;
	unsigned nhdrs;            /* headers whose value completed */
	char name[H1HEAD_MAX_HDRS + 1][512], value[H1HEAD_MAX_HDRS + 1][4096];
	size_t name_len[H1HEAD_MAX_HDRS + 1], value_len[H1HEAD_MAX_HDRS + 1];
	char reason[4096];
	size_t reason_len;
	int begins, headers_done, completes;
	int overflow;
	uint16_t flags_at_head;     /* parser flags and length when the head ended */
	uint64_t length_at_head;
};

static struct seen seen;

static void add(char *dst, size_t cap, size_t *len, const char *at, size_t n)
{
	if (*len + n > cap) {
		seen.overflow = 1;
		return;
	}
	memcpy(dst + *len, at, n);
	*len += n;
}

static int on_begin(llhttp_t *p) { (void)p; seen.begins++; return 0; }
static int on_url(llhttp_t *p, const char *at, size_t n)
{
	(void)p;
	add(seen.url, sizeof(seen.url), &seen.url_len, at, n);
	return 0;
}
static int on_field(llhttp_t *p, const char *at, size_t n)
{
	(void)p;
	if (seen.nhdrs > H1HEAD_MAX_HDRS) {
		seen.overflow = 1;
		return 0;
	}
	add(seen.name[seen.nhdrs], sizeof(seen.name[0]), &seen.name_len[seen.nhdrs], at, n);
	return 0;
}
static int on_value(llhttp_t *p, const char *at, size_t n)
{
	(void)p;
	if (seen.nhdrs > H1HEAD_MAX_HDRS) {
		seen.overflow = 1;
		return 0;
	}
	add(seen.value[seen.nhdrs], sizeof(seen.value[0]), &seen.value_len[seen.nhdrs], at, n);
	return 0;
}
static int on_status(llhttp_t *p, const char *at, size_t n)
{
	(void)p;
	add(seen.reason, sizeof(seen.reason), &seen.reason_len, at, n);
	return 0;
}
static int on_value_done(llhttp_t *p) { (void)p; seen.nhdrs++; return 0; }
static int on_headers_done(llhttp_t *p)
{
	seen.headers_done++;
	seen.flags_at_head = p->flags;
	seen.length_at_head = p->content_length;
	return 0;
}
static int on_done(llhttp_t *p) { (void)p; seen.completes++; return HPE_PAUSED; }

static void same(const char *what, unsigned i, const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen || memcmp(a, b, alen) != 0)
		FAIL("%s %u: llhttp read \"%.*s\", h1head_parse \"%.*s\"", what, i, (int)alen, a, (int)blen, b);
}

static llhttp_settings_t settings;

static void same_fields(const char *in, const struct h1head *hd)
{
	if (seen.nhdrs != hd->nhdrs)
		FAIL("llhttp: %u headers, h1head %u", seen.nhdrs, hd->nhdrs);
	for (unsigned i = 0; i < hd->nhdrs; i++) {
		same("name", i, seen.name[i], seen.name_len[i], in + hd->name[i].off, hd->name[i].len);
		same("value", i, seen.value[i], seen.value_len[i], in + hd->value[i].off, hd->value[i].len);
	}
}

static void check_request(const char *in, size_t size)
{
	static struct h1head hd, shorter;
	size_t n = h1head_parse(in, size, &hd);
	if (n == 0)
		return;
	if (n > size)
		FAIL("head of %zu bytes in an input of %zu", n, size);
	/* A shorter input is never a whole head. */
	if (h1head_parse(in, n - 1, &shorter) != 0)
		FAIL("took the first %zu bytes of a %zu-byte head as a head", n - 1, n);

	memset(&seen, 0, sizeof(seen));
	llhttp_t p;
	llhttp_init(&p, HTTP_REQUEST, &settings);
	llhttp_errno_t e = llhttp_execute(&p, in, size);
	if (e != HPE_PAUSED)
		FAIL("llhttp: %s (%s) on a head h1head_parse took", llhttp_errno_name(e), llhttp_get_error_reason(&p));
	if (llhttp_get_error_pos(&p) != in + n)
		FAIL("llhttp completed the message after %zu bytes, h1head_parse after %zu",
		     (size_t)(llhttp_get_error_pos(&p) - in), n);
	if (seen.overflow)
		return;   /* bigger than this oracle records; the checks above held */
	if (seen.begins != 1 || seen.headers_done != 1 || seen.completes != 1)
		FAIL("llhttp: %d begins, %d heads, %d messages", seen.begins, seen.headers_done, seen.completes);
	if (p.method != hd.method || p.http_major != 1 || p.http_minor != hd.http_minor)
		FAIL("llhttp: method %d HTTP/%d.%d; h1head_parse: method %d HTTP/1.%d", p.method, p.http_major,
		     p.http_minor, hd.method, hd.http_minor);
	if (p.flags & (F_CHUNKED | F_CONTENT_LENGTH | F_UPGRADE | F_TRANSFER_ENCODING) || p.upgrade)
		FAIL("llhttp: flags 0x%x upgrade %d on a head h1head_parse took", p.flags, p.upgrade);
	same("target", 0, seen.url, seen.url_len, in + hd.start.off, hd.start.len);
	same_fields(in, &hd);
}

static void check_response(const char *in, size_t size)
{
	static struct h1head hd, shorter;
	size_t n = h1head_parse_response(in, size, &hd);
	if (n == 0)
		return;
	if (n > size || !hd.has_length)
		FAIL("response head of %zu bytes in an input of %zu, has_length %d", n, size, hd.has_length);
	if (h1head_parse_response(in, n - 1, &shorter) != 0)
		FAIL("took the first %zu bytes of a %zu-byte response head as a head", n - 1, n);

	memset(&seen, 0, sizeof(seen));
	llhttp_t p;
	llhttp_init(&p, HTTP_RESPONSE, &settings);
	llhttp_errno_t e = llhttp_execute(&p, in, size);
	int whole = hd.content_length <= size - n;
	if (whole) {
		if (e != HPE_PAUSED)
			FAIL("llhttp: %s (%s) on a response h1head_parse_response took", llhttp_errno_name(e),
			     llhttp_get_error_reason(&p));
		if (llhttp_get_error_pos(&p) != in + n + hd.content_length)
			FAIL("llhttp completed the response after %zu bytes, h1head_parse_response after %zu + %llu",
			     (size_t)(llhttp_get_error_pos(&p) - in), n, (unsigned long long)hd.content_length);
	} else if (e != HPE_OK) {
		FAIL("llhttp: %s (%s) on a response whose body is still coming", llhttp_errno_name(e),
		     llhttp_get_error_reason(&p));
	}
	if (seen.overflow)
		return;
	if (seen.begins != 1 || seen.headers_done != 1 || seen.completes != whole)
		FAIL("llhttp: %d begins, %d heads, %d messages", seen.begins, seen.headers_done, seen.completes);
	if (p.status_code != hd.status || p.http_major != 1 || p.http_minor != 1)
		FAIL("llhttp: status %d HTTP/%d.%d; h1head_parse_response: %d", p.status_code, p.http_major,
		     p.http_minor, hd.status);
	unsigned want = F_CONTENT_LENGTH;
	if (hd.connection == H1HEAD_CONN_KEEP_ALIVE)
		want |= F_CONNECTION_KEEP_ALIVE;
	else if (hd.connection == H1HEAD_CONN_CLOSE)
		want |= F_CONNECTION_CLOSE;
	if (seen.flags_at_head != want || seen.length_at_head != hd.content_length || p.upgrade)
		FAIL("llhttp: flags 0x%x length %llu upgrade %d; h1head_parse_response: flags 0x%x length %llu",
		     seen.flags_at_head, (unsigned long long)seen.length_at_head, p.upgrade, want,
		     (unsigned long long)hd.content_length);
	if (whole) {
		/* What the backend side decides reuse by, as sluice sets it. */
		llhttp_t q = p;
		q.flags = (uint16_t)want;
		if (llhttp_should_keep_alive(&p) != llhttp_should_keep_alive(&q))
			FAIL("keep-alive: llhttp %d, from h1head_parse_response's fields %d",
			     llhttp_should_keep_alive(&p), llhttp_should_keep_alive(&q));
	}
	same("reason", 0, seen.reason, seen.reason_len, in + hd.start.off, hd.start.len);
	same_fields(in, &hd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		llhttp_settings_init(&settings);
		settings.on_message_begin = on_begin;
		settings.on_url = on_url;
		settings.on_status = on_status;
		settings.on_header_field = on_field;
		settings.on_header_value = on_value;
		settings.on_header_value_complete = on_value_done;
		settings.on_headers_complete = on_headers_done;
		settings.on_message_complete = on_done;
		ready = 1;
	}
	check_request((const char *)data, size);
	check_response((const char *)data, size);
	return 0;
}
