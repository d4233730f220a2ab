/* Small shared helpers: assertions, list macros, clocks. */
#ifndef SLUICE_UTIL_H
#define SLUICE_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define CONTAINER_OF(ptr, type, field) ((type *)((char *)(ptr) - offsetof(type, field)))

/* Invariants that must hold in every build: a violated one means memory is
 * already wrong, so stop loudly instead of corrupting more (Varnish AN/AZ). */
#define AN(x) do { if (!(x)) { fprintf(stderr, "%s:%d: assertion %s failed\n", \
	__FILE__, __LINE__, #x); abort(); } } while (0)
#define AZ(x) AN(!(x))

/* Intrusive doubly linked list (the kernel's shape). An empty head points
 * at itself; an unlinked node is self-linked too, so list_del is idempotent. */
struct list { struct list *prev, *next; };
static inline void list_init(struct list *l) { l->prev = l->next = l; }
static inline int list_empty(const struct list *l) { return l->next == l; }
static inline void list_add_tail(struct list *head, struct list *n)
{
	n->prev = head->prev; n->next = head;
	head->prev->next = n; head->prev = n;
}
static inline void list_add_head(struct list *head, struct list *n)
{
	n->next = head->next; n->prev = head;
	head->next->prev = n; head->next = n;
}
static inline void list_del(struct list *n)
{
	n->prev->next = n->next; n->next->prev = n->prev;
	n->prev = n->next = n;
}

/* Monotonic microseconds; the one clock every timing in a log line uses. */
static inline uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* T = MS milliseconds from now on the monotonic clock: a deadline the
 * master's loops compare with ts_passed(). */
static inline void ts_after_ms(struct timespec *t, uint32_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, t);
	t->tv_sec += ms / 1000;
	t->tv_nsec += (long)(ms % 1000) * 1000000;
	if (t->tv_nsec >= 1000000000) {
		t->tv_sec++;
		t->tv_nsec -= 1000000000;
	}
}

static inline int ts_passed(const struct timespec *t)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > t->tv_sec || (now.tv_sec == t->tv_sec && now.tv_nsec >= t->tv_nsec);
}

/* Copy N bytes, ASCII upper case folded to lower case, eight bytes a step
 * (header names on every HTTP/2 response). Bytes >= 0x80 pass unchanged. */
static inline void ascii_lower_copy(char *dst, const char *src, size_t n)
{
	const uint64_t ones = 0x0101010101010101u, high = ones * 0x80;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, src + i, 8);
		uint64_t low7 = w & ~high;
		uint64_t ge_a = low7 + ones * (0x80 - 'A');     /* high bit: byte >= 'A' */
		uint64_t gt_z = low7 + ones * (0x80 - 'Z' - 1); /* high bit: byte > 'Z' */
		uint64_t upper = (ge_a ^ gt_z) & ~w & high;
		w |= upper >> 2;
		memcpy(dst + i, &w, 8);
	}
	for (; i < n; i++)
		dst[i] = (char)(src[i] >= 'A' && src[i] <= 'Z' ? src[i] | 0x20 : src[i]);
}

/* The value of a hex digit, or -1. */
static inline int hex_value(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* isspace() of the C locale, whatever the process's locale. */
static inline int c_isspace(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r');
}

/* UTF-8 of CP at OUT (4 bytes of room); returns its length. A code point
 * above U+10FFFF or a surrogate becomes U+FFFD. */
static inline size_t utf8_encode(char *out, unsigned long cp)
{
	if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		cp = 0xFFFD;
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xC0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xE0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
		out[2] = (char)(0x80 | (cp & 0x3F));
		return 3;
	}
	out[0] = (char)(0xF0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
	out[3] = (char)(0x80 | (cp & 0x3F));
	return 4;
}

#endif
