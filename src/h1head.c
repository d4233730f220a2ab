/* The common request head in one pass (h1head.h).
 *
 * Owns: nothing (pure). May call: nothing but libc.
 *
 * Why it exists: most requests a proxy sees are a handful of shapes, and
 * llhttp's general state machine spends about as much per head as the rest
 * of the request path in user space. Recognising only the strict common form
 * keeps this small enough to check byte for byte against llhttp
 * (fuzz_h1head); anything else goes to llhttp unchanged, so every error and
 * every unusual head keeps exactly llhttp's behaviour. */
#include <string.h>
#include "h1head.h"
#include "llhttp.h"

/* RFC 9110 5.6.2 tchar. */
static const uint8_t is_tchar[256] = {
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['*'] = 1, ['+'] = 1,
	['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1, ['`'] = 1, ['|'] = 1, ['~'] = 1,
	['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
};

/* RFC 3986 characters of an origin-form target: unreserved, sub-delims,
 * ":", "@", "/", "?" and "%". Not "#": a fragment is llhttp's. */
static const uint8_t is_target[256] = {
	['!'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1, ['('] = 1, [')'] = 1, ['*'] = 1,
	['+'] = 1, [','] = 1, ['-'] = 1, ['.'] = 1, ['/'] = 1, [':'] = 1, [';'] = 1, ['='] = 1,
	['?'] = 1, ['@'] = 1, ['_'] = 1, ['~'] = 1,
	['0' ... '9'] = 1, ['A' ... 'Z'] = 1, ['a' ... 'z'] = 1,
};

static int method_of(const unsigned char *m, size_t n)
{
	switch (n) {
	case 3:
		if (!memcmp(m, "GET", 3)) return HTTP_GET;
		if (!memcmp(m, "PUT", 3)) return HTTP_PUT;
		return -1;
	case 4:
		if (!memcmp(m, "HEAD", 4)) return HTTP_HEAD;
		if (!memcmp(m, "POST", 4)) return HTTP_POST;
		return -1;
	case 5:
		if (!memcmp(m, "PATCH", 5)) return HTTP_PATCH;
		if (!memcmp(m, "TRACE", 5)) return HTTP_TRACE;
		return -1;
	case 6:
		return !memcmp(m, "DELETE", 6) ? HTTP_DELETE : -1;
	case 7:
		return !memcmp(m, "OPTIONS", 7) ? HTTP_OPTIONS : -1;
	default:
		return -1;
	}
}

static int name_is(const unsigned char *name, size_t n, const char *lower, size_t ln)
{
	if (n != ln)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((name[i] | 0x20) != (unsigned char)lower[i])
			return 0;
	return 1;
}

/* The end of the run of tchar from P: four table lookups per branch. */
static const unsigned char *tchar_run(const unsigned char *p, const unsigned char *end)
{
	while (end - p >= 4 && (is_tchar[p[0]] & is_tchar[p[1]] & is_tchar[p[2]] & is_tchar[p[3]]))
		p += 4;
	while (p < end && is_tchar[*p])
		p++;
	return p;
}

/* Eight bytes at a time, little-endian: the lowest byte flagged by the tests
 * of "Bit Twiddling Hacks" (hasless, hasmore) is exactly the first byte
 * outside 0x20..0x7E; borrows and carries only flag bytes above it. */
#define ONES UINT64_C(0x0101010101010101)
#define HIGH UINT64_C(0x8080808080808080)

static uint64_t flag_not_visible_or_sp(uint64_t x)
{
	return ((x - ONES * 0x20) & ~x & HIGH) | (((x + ONES) | x) & HIGH);
}

/* The end of the run of bytes in 0x20..0x7E from P. */
static const unsigned char *visible_run(const unsigned char *p, const unsigned char *end)
{
	for (; end - p >= 8; p += 8) {
		uint64_t x;
		memcpy(&x, p, 8);
		if (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__)
			x = __builtin_bswap64(x);
		uint64_t stop = flag_not_visible_or_sp(x);
		if (stop)
			return p + (__builtin_ctzll(stop) >> 3);
	}
	while (p < end && (unsigned)(*p - 0x20) < 0x5f)
		p++;
	return p;
}

/* What a header name means to the common form. */
enum field_role { F_PLAIN, F_REFUSED, F_LENGTH, F_CONNECTION };

static enum field_role role_of(const unsigned char *name, size_t n, int response)
{
	/* Framing and protocol changes stay llhttp's, and so does anything
	 * llhttp reads a connection option from besides Connection. */
	if (name_is(name, n, "transfer-encoding", 17) || name_is(name, n, "upgrade", 7) ||
	    name_is(name, n, "proxy-connection", 16))
		return F_REFUSED;
	if (name_is(name, n, "content-length", 14))
		return response ? F_LENGTH : F_REFUSED;
	if (response && name_is(name, n, "connection", 10))
		return F_CONNECTION;
	return F_PLAIN;
}

/* A Content-Length value the common form takes: 1 to 15 digits. */
static int length_of(const unsigned char *v, size_t n, uint64_t *out)
{
	if (n == 0 || n > 15)
		return 0;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return 0;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	*out = x;
	return 1;
}

/* The header lines from P through the empty line; returns the head's
 * length, or 0 when they are not of the common form. */
static size_t fields(const unsigned char *base, const unsigned char *p, const unsigned char *end,
		     struct h1head *out, int response)
{
	unsigned n = 0;
	for (;;) {
		if (p == end)
			return 0;
		if (*p == '\r')
			break;
		const unsigned char *name = p;
		p = tchar_run(p, end);
		if (p == name || p == end || *p != ':')
			return 0;
		size_t name_len = (size_t)(p - name);
		p++;
		while (p < end && *p == ' ')
			p++;
		const unsigned char *v = p;
		p = visible_run(p, end);
		if (p == v || p[-1] == ' ' || end - p < 2 || p[0] != '\r' || p[1] != '\n')
			return 0;
		if (n == H1HEAD_MAX_HDRS)
			return 0;
		switch (role_of(name, name_len, response)) {
		case F_PLAIN:
			break;
		case F_REFUSED:
			return 0;
		case F_LENGTH:
			if (out->has_length || !length_of(v, (size_t)(p - v), &out->content_length))
				return 0;
			out->has_length = 1;
			break;
		case F_CONNECTION:
			if (out->connection != H1HEAD_CONN_NONE)
				return 0;
			if (name_is(v, (size_t)(p - v), "keep-alive", 10))
				out->connection = H1HEAD_CONN_KEEP_ALIVE;
			else if (name_is(v, (size_t)(p - v), "close", 5))
				out->connection = H1HEAD_CONN_CLOSE;
			else
				return 0;
			break;
		}
		out->name[n] = (struct h1head_span){ (uint32_t)(name - base), (uint32_t)name_len };
		out->value[n] = (struct h1head_span){ (uint32_t)(v - base), (uint32_t)(p - v) };
		n++;
		p += 2;
	}
	if (end - p < 2 || p[1] != '\n')
		return 0;
	out->nhdrs = (uint16_t)n;
	return (size_t)(p + 2 - base);
}

size_t h1head_parse(const char *data, size_t len, struct h1head *out)
{
	const unsigned char *base = (const unsigned char *)data, *end = base + len, *p = base;
	while (p < end && *p >= 'A' && *p <= 'Z')
		p++;
	if (p == end || *p != ' ')
		return 0;
	int method = method_of(base, (size_t)(p - base));
	if (method < 0)
		return 0;
	const unsigned char *t = ++p;
	while (p < end && is_target[*p])
		p++;
	if (p == t || *t != '/' || p == end || *p != ' ')
		return 0;
	out->start = (struct h1head_span){ (uint32_t)(t - base), (uint32_t)(p - t) };
	p++;
	if (end - p < 10 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
	    p[8] != '\r' || p[9] != '\n')
		return 0;
	out->method = (uint8_t)method;
	out->http_minor = (uint8_t)(p[7] - '0');
	out->status = 0;
	out->has_length = 0;
	out->content_length = 0;
	out->connection = H1HEAD_CONN_NONE;
	return fields(base, p + 10, end, out, 0);
}

size_t h1head_parse_response(const char *data, size_t len, struct h1head *out)
{
	const unsigned char *base = (const unsigned char *)data, *end = base + len, *p = base;
	if (len < 13 || memcmp(p, "HTTP/1.1 ", 9) != 0)
		return 0;
	p += 9;
	unsigned status = 0;
	for (int i = 0; i < 3; i++) {
		if (p[i] < '0' || p[i] > '9')
			return 0;
		status = status * 10 + (unsigned)(p[i] - '0');
	}
	/* 1xx, 204 and 304 are framed by more than their headers. */
	if (status < 200 || status > 599 || status == 204 || status == 304 || p[3] != ' ')
		return 0;
	p += 4;
	const unsigned char *r = p;
	p = visible_run(p, end);
	if (p == r || p[-1] == ' ' || end - p < 2 || p[0] != '\r' || p[1] != '\n')
		return 0;
	out->start = (struct h1head_span){ (uint32_t)(r - base), (uint32_t)(p - r) };
	out->method = 0;
	out->http_minor = 1;
	out->status = (uint16_t)status;
	out->has_length = 0;
	out->content_length = 0;
	out->connection = H1HEAD_CONN_NONE;
	size_t n = fields(base, p + 2, end, out, 1);
	/* Without a length the body would run to the connection's end. */
	return out->has_length ? n : 0;
}
