/* libFuzzer target: h1head_parse, the codec's one-pass reader of the common
 * request head, against llhttp (strict mode, as the codec builds it).
 *
 * Input: client bytes. Whenever h1head_parse takes a head, llhttp must read
 * the same bytes the same way: the same method and version, the target and
 * every header name and value byte for byte, in order, no body framing, no
 * upgrade, and the message complete exactly where h1head_parse says the head
 * ends. (Declining is always allowed: llhttp then reads the head itself.) */
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
	int begins, headers_done, completes;
	int overflow;
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
static int on_value_done(llhttp_t *p) { (void)p; seen.nhdrs++; return 0; }
static int on_headers_done(llhttp_t *p) { (void)p; seen.headers_done++; return 0; }
static int on_done(llhttp_t *p) { (void)p; seen.completes++; return HPE_PAUSED; }

static void same(const char *what, unsigned i, const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen || memcmp(a, b, alen) != 0)
		FAIL("%s %u: llhttp read \"%.*s\", h1head_parse \"%.*s\"", what, i, (int)alen, a, (int)blen, b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static llhttp_settings_t settings;
	static int ready;
	if (!ready) {
		llhttp_settings_init(&settings);
		settings.on_message_begin = on_begin;
		settings.on_url = on_url;
		settings.on_header_field = on_field;
		settings.on_header_value = on_value;
		settings.on_header_value_complete = on_value_done;
		settings.on_headers_complete = on_headers_done;
		settings.on_message_complete = on_done;
		ready = 1;
	}
	const char *in = (const char *)data;
	static struct h1head hd;
	size_t n = h1head_parse(in, size, &hd);
	if (n == 0)
		return 0;
	if (n > size)
		FAIL("head of %zu bytes in an input of %zu", n, size);
	/* A shorter input is never a whole head. */
	struct h1head shorter;
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
		return 0;   /* bigger than this oracle records; the checks above held */
	if (seen.begins != 1 || seen.headers_done != 1 || seen.completes != 1)
		FAIL("llhttp: %d begins, %d heads, %d messages", seen.begins, seen.headers_done, seen.completes);
	if (p.method != hd.method || p.http_major != 1 || p.http_minor != hd.http_minor)
		FAIL("llhttp: method %d HTTP/%d.%d; h1head_parse: method %d HTTP/1.%d", p.method, p.http_major,
		     p.http_minor, hd.method, hd.http_minor);
	if (p.flags & (F_CHUNKED | F_CONTENT_LENGTH | F_UPGRADE) || p.upgrade)
		FAIL("llhttp: flags 0x%x upgrade %d on a head h1head_parse took", p.flags, p.upgrade);
	same("target", 0, seen.url, seen.url_len, in + hd.url.off, hd.url.len);
	if (seen.nhdrs != hd.nhdrs)
		FAIL("llhttp: %u headers, h1head_parse %u", seen.nhdrs, hd.nhdrs);
	for (unsigned i = 0; i < hd.nhdrs; i++) {
		same("name", i, seen.name[i], seen.name_len[i], in + hd.name[i].off, hd.name[i].len);
		same("value", i, seen.value[i], seen.value_len[i], in + hd.value[i].off, hd.value[i].len);
	}
	return 0;
}
