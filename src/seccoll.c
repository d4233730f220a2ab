/* ModSecurity's request variables (seccoll.h says what and why). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "seccoll.h"
#include "util.h"

static uint32_t arena_put(struct seccoll *c, const char *s, size_t n)
{
	uint32_t off = (uint32_t)c->arena.len;
	buf_append(&c->arena, s, n);
	buf_append(&c->arena, "", 1);  /* NUL after every string: regex engines and logs like it */
	return off;
}

static void list_add(struct sc_list *l, uint32_t name, uint32_t nlen, uint32_t value, uint32_t vlen)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 16;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		AN(l->v);
	}
	l->v[l->n++] = (struct sc_pair){ name, nlen, value, vlen };
}

void seccoll_reset(struct seccoll *c)
{
	c->arena.len = 0;
	for (int i = 0; i < SC__LISTS; i++)
		c->list[i].n = 0;
	c->method = c->method_len = c->uri = c->uri_len = c->protocol = c->protocol_len = 0;
	c->filename = c->filename_len = c->basename = c->basename_len = c->query = c->query_len = 0;
	c->line = c->line_len = c->body = c->body_len = 0;
	c->urlencoded_invalid = 0;
	arena_put(c, "", 0);  /* offset 0 is the empty string */
}

void seccoll_free(struct seccoll *c)
{
	buf_free(&c->arena);
	for (int i = 0; i < SC__LISTS; i++)
		free(c->list[i].v);
	memset(c, 0, sizeof(*c));
}

static int hexdig(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f');
}

static unsigned char hexval(unsigned char ch)
{
	return (unsigned char)(ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
}

/* URL-decode S into the arena ('+' a space; a bad escape stays, counted). */
static uint32_t put_decoded(struct seccoll *c, const char *s, size_t n, uint32_t *outlen)
{
	uint32_t off = (uint32_t)c->arena.len;
	buf_reserve(&c->arena, n + 1);
	unsigned char *d = (unsigned char *)c->arena.data + off;
	const unsigned char *p = (const unsigned char *)s;
	size_t k = 0;
	for (size_t i = 0; i < n;) {
		if (p[i] == '%') {
			if (i + 2 < n && hexdig(p[i + 1]) && hexdig(p[i + 2])) {
				d[k++] = (unsigned char)(hexval(p[i + 1]) << 4 | hexval(p[i + 2]));
				i += 3;
				continue;
			}
			c->urlencoded_invalid++;
		}
		d[k++] = p[i] == '+' ? ' ' : p[i];
		i++;
	}
	d[k] = '\0';
	c->arena.len = off + k + 1;
	*outlen = (uint32_t)k;
	return off;
}

void seccoll_parse_args(struct seccoll *c, enum sc_list_id into, const char *s, size_t len, char sep)
{
	size_t i = 0;
	while (i < len) {
		size_t ns = i;
		while (i < len && s[i] != '=' && s[i] != sep)
			i++;
		uint32_t nlen, vlen = 0;
		uint32_t name = put_decoded(c, s + ns, i - ns, &nlen);
		uint32_t value = 0;
		if (i < len && s[i] == '=') {
			size_t vs = ++i;
			while (i < len && s[i] != sep)
				i++;
			value = put_decoded(c, s + vs, i - vs, &vlen);
		}
		list_add(&c->list[into], name, nlen, value, vlen);
		i++;  /* over the separator */
	}
}

static int c_space(unsigned char ch)
{
	return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/* Version 0 cookies as ModSecurity splits them: on ';' (empty pieces
 * skipped), leading whitespace off the name, the value after the first
 * '=' as it is; a cookie without a name is dropped. */
static void parse_cookies(struct seccoll *c, const char *s, size_t len)
{
	size_t i = 0;
	while (i < len) {
		size_t e = i;
		while (e < len && s[e] != ';')
			e++;
		size_t a = i;
		while (a < e && c_space((unsigned char)s[a]))
			a++;
		const char *eq = memchr(s + a, '=', e - a);
		size_t nend = eq ? (size_t)(eq - s) : e;
		if (nend > a) {
			uint32_t name = arena_put(c, s + a, nend - a), value = 0, vlen = 0;
			if (eq) {
				vlen = (uint32_t)(e - nend - 1);
				value = arena_put(c, eq + 1, vlen);
			}
			list_add(&c->list[SC_COOKIES], name, (uint32_t)(nend - a), value, vlen);
		}
		i = e + 1;
	}
}

static int name_is(const char *n, size_t len, const char *want)
{
	return strlen(want) == len && strncasecmp(n, want, len) == 0;
}

void seccoll_request(struct seccoll *c, const char *method, size_t mlen, const char *target, size_t tlen,
		     const char *protocol, size_t plen, const struct sc_header *h, size_t nh)
{
	c->method = arena_put(c, method, mlen);
	c->method_len = (uint32_t)mlen;
	c->protocol = arena_put(c, protocol, plen);
	c->protocol_len = (uint32_t)plen;
	/* REQUEST_LINE: method, target and protocol as one line */
	c->line = (uint32_t)c->arena.len;
	buf_append(&c->arena, method, mlen);
	buf_append(&c->arena, " ", 1);
	buf_append(&c->arena, target, tlen);
	buf_append(&c->arena, " ", 1);
	buf_append(&c->arena, protocol, plen);
	c->line_len = (uint32_t)(c->arena.len - c->line);
	buf_append(&c->arena, "", 1);
	/* REQUEST_URI never holds scheme and host, even when the request
	 * line did (absolute-form) */
	const char *path = target;
	size_t plen2 = tlen;
	const char *sch = tlen > 3 ? memchr(target, ':', tlen < 16 ? tlen : 16) : NULL;
	if (sch && (size_t)(sch - target) + 2 < tlen && sch[1] == '/' && sch[2] == '/') {
		const char *slash = memchr(sch + 3, '/', tlen - (size_t)(sch + 3 - target));
		path = slash ? slash : target + tlen;
		plen2 = (size_t)(target + tlen - path);
	}
	c->uri = arena_put(c, path, plen2);
	c->uri_len = (uint32_t)plen2;
	const char *q = memchr(path, '?', plen2);
	size_t flen = q ? (size_t)(q - path) : plen2;
	c->filename = arena_put(c, path, flen);
	c->filename_len = (uint32_t)flen;
	size_t b = flen;
	while (b > 0 && path[b - 1] != '/' && path[b - 1] != '\\')
		b--;
	c->basename = arena_put(c, path + b, flen - b);
	c->basename_len = (uint32_t)(flen - b);
	if (q) {
		c->query = arena_put(c, q + 1, plen2 - flen - 1);
		c->query_len = (uint32_t)(plen2 - flen - 1);
		seccoll_parse_args(c, SC_ARGS_GET, q + 1, plen2 - flen - 1, '&');
	}
	for (size_t i = 0; i < nh; i++) {
		uint32_t n = arena_put(c, h[i].name, h[i].nlen);
		uint32_t v = arena_put(c, h[i].value, h[i].vlen);
		list_add(&c->list[SC_HEADERS], n, (uint32_t)h[i].nlen, v, (uint32_t)h[i].vlen);
		if (name_is(h[i].name, h[i].nlen, "cookie"))
			parse_cookies(c, h[i].value, h[i].vlen);
	}
}

void seccoll_urlencoded_body(struct seccoll *c, const char *body, size_t len)
{
	c->body = arena_put(c, body, len);
	c->body_len = (uint32_t)len;
	seccoll_parse_args(c, SC_ARGS_POST, body, len, '&');
}
