/* Growable byte buffers. A buffer has exactly one owner; ownership moves
 * only by buf_swap or by an explicit hand-over documented at the call site.
 * Capacity is kept across requests so the warm path does not allocate. */
#ifndef SLUICE_BUF_H
#define SLUICE_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct buf {
	char *data;
	size_t len;
	size_t cap;
};

/* Make room for EXTRA more bytes; aborts on out-of-memory (a proxy that
 * cannot allocate a few KiB cannot serve anything safely). */
void buf_grow(struct buf *b, size_t extra);
/* Inline: a proxied request makes dozens of small appends, nearly all of
 * which fit the capacity kept from earlier requests. */
static inline void buf_reserve(struct buf *b, size_t extra)
{
	if (b->cap - b->len < extra)
		buf_grow(b, extra);
}
static inline void buf_append(struct buf *b, const void *data, size_t len)
{
	if (len == 0)
		return;
	buf_reserve(b, len);
	memcpy(b->data + b->len, data, len);
	b->len += len;
}
void buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append V in decimal, and in lower-case hexadecimal (chunk sizes). */
void buf_append_u64(struct buf *b, uint64_t v);
void buf_append_hex(struct buf *b, uint64_t v);
/* Append DATA base64-encoded (RFC 4648, padded, no line breaks). */
void buf_append_base64(struct buf *b, const void *data, size_t len);
/* Append S (LEN bytes) as a JSON string literal, quotes included. */
void buf_append_json(struct buf *b, const char *s, size_t len);
/* Drop the first N bytes. */
void buf_consume(struct buf *b, size_t n);
/* Release memory beyond KEEP bytes of capacity when empty (idle trimming). */
void buf_trim(struct buf *b, size_t keep);
void buf_free(struct buf *b);

static inline void buf_append_str(struct buf *b, const char *s) { buf_append(b, s, strlen(s)); }
static inline void buf_swap(struct buf *a, struct buf *b) { struct buf t = *a; *a = *b; *b = t; }

#endif
