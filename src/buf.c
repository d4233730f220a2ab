#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "buf.h"
#include "util.h"

void buf_grow(struct buf *b, size_t extra)
{
	size_t cap = b->cap ? b->cap : 512;
	while (cap - b->len < extra)
		cap *= 2;
	char *p = realloc(b->data, cap);
	AN(p);
	b->data = p;
	b->cap = cap;
}

void buf_append_u64(struct buf *b, uint64_t v)
{
	char tmp[20], *e = tmp + sizeof(tmp), *q = e;
	do {
		*--q = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	buf_append(b, q, (size_t)(e - q));
}

void buf_append_hex(struct buf *b, uint64_t v)
{
	char tmp[16], *e = tmp + sizeof(tmp), *q = e;
	do {
		*--q = "0123456789abcdef"[v & 15];
		v >>= 4;
	} while (v);
	buf_append(b, q, (size_t)(e - q));
}

void buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	buf_reserve(b, 64);
	va_start(ap, fmt);
	int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
	va_end(ap);
	AN(n >= 0);
	if ((size_t)n >= b->cap - b->len) {
		buf_reserve(b, (size_t)n + 1);
		va_start(ap, fmt);
		vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
	}
	b->len += (size_t)n;
}

void buf_consume(struct buf *b, size_t n)
{
	AN(n <= b->len);
	if (n == b->len) {
		b->len = 0;
		return;
	}
	memmove(b->data, b->data + n, b->len - n);
	b->len -= n;
}

void buf_trim(struct buf *b, size_t keep)
{
	if (b->len == 0 && b->cap > keep) {
		free(b->data);
		b->data = NULL;
		b->cap = 0;
	}
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

void buf_append_base64(struct buf *b, const void *data, size_t len)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	buf_reserve(b, (len + 2) / 3 * 4);
	char *o = b->data + b->len;
	size_t i = 0;
	for (; i + 2 < len; i += 3) {
		unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = tab[(v >> 6) & 63];
		*o++ = tab[v & 63];
	}
	if (i < len) {
		unsigned v = (unsigned)p[i] << 16 | (i + 1 < len ? (unsigned)p[i + 1] << 8 : 0);
		*o++ = tab[v >> 18];
		*o++ = tab[(v >> 12) & 63];
		*o++ = i + 1 < len ? tab[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	b->len = (size_t)(o - b->data);
}

void buf_append_json(struct buf *b, const char *s, size_t len)
{
	buf_reserve(b, len + 2);
	b->data[b->len++] = '"';
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\')
			buf_appendf(b, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			buf_appendf(b, "\\u%04x", c);
		else
			buf_append(b, s + i, 1);
	}
	buf_append(b, "\"", 1);
}
