/* ModSecurity's request variables (seccoll.h says what and why). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "seccoll.h"
#include "util.h"
#include "vhash.h"

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
	c->mp_flags = 0;
	c->mp_error = NULL;
	arena_put(c, "", 0);  /* offset 0 is the empty string */
}

void seccoll_free(struct seccoll *c)
{
	buf_free(&c->arena);
	for (int i = 0; i < SC__LISTS; i++)
		free(c->list[i].v);
	memset(c, 0, sizeof(*c));
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
			if (i + 2 < n && hex_value(p[i + 1]) >= 0 && hex_value(p[i + 2]) >= 0) {
				d[k++] = (unsigned char)(hex_value(p[i + 1]) << 4 | hex_value(p[i + 2]));
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
		while (a < e && c_isspace((unsigned char)s[a]))
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

static int unreserved(int ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' ||
	       ch == '_' || ch == '~';
}

int seccoll_server_path(struct seccoll *c)
{
	const char *raw = sc_str(c, c->filename);
	size_t n = c->filename_len;
	if (n == 0 || raw[0] != '/')
		return 0;
	/* escapes of unreserved characters decoded, slashes merged */
	char *p = malloc(n + 1);
	AN(p);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)raw[i];
		if (ch == '%' && i + 2 < n + 0 && hex_value((unsigned char)raw[i + 1]) >= 0 && hex_value((unsigned char)raw[i + 2]) >= 0) {
			int d = hex_value((unsigned char)raw[i + 1]) << 4 | hex_value((unsigned char)raw[i + 2]);
			if (unreserved(d)) {
				ch = d;
				i += 2;
			}
		}
		if (ch == '/' && k > 0 && p[k - 1] == '/')
			continue;
		p[k++] = (char)ch;
	}
	/* dot segments: "/." dropped, "/.." takes the segment before it away */
	size_t out = 0;
	int above_root = 0;
	for (size_t i = 0; i < k;) {
		/* p[i] is '/' */
		size_t e = i + 1;
		while (e < k && p[e] != '/')
			e++;
		size_t seg = e - i - 1;
		const char *sp = p + i + 1;
		if (seg == 1 && sp[0] == '.') {
			if (e == k)
				p[out++] = '/';
		} else if (seg == 2 && sp[0] == '.' && sp[1] == '.') {
			if (out == 0)
				above_root = 1;
			while (out > 0 && p[out - 1] != '/')
				out--;
			if (out > 0)
				out--;
			if (e == k)
				p[out++] = '/';
		} else {
			memmove(p + out, p + i, e - i);
			out += e - i;
		}
		i = e;
	}
	if (out == 0)
		p[out++] = '/';
	int bad = above_root;
	c->filename = arena_put(c, p, out);
	c->filename_len = (uint32_t)out;
	size_t b = out;
	while (b > 0 && p[b - 1] != '/')
		b--;
	c->basename = arena_put(c, p + b, out - b);
	c->basename_len = (uint32_t)(out - b);
	/* REQUEST_URI: that path %-decoded (an encoded '/' stays encoded), the query raw */
	uint32_t off = (uint32_t)c->arena.len;
	for (size_t i = 0; i < out; i++) {
		if (p[i] == '%' && i + 2 < out + 0 && hex_value((unsigned char)p[i + 1]) >= 0 && hex_value((unsigned char)p[i + 2]) >= 0) {
			int d = hex_value((unsigned char)p[i + 1]) << 4 | hex_value((unsigned char)p[i + 2]);
			if (d == 0)
				bad = 1;
			if (d != '/') {
				char ch = (char)d;
				buf_append(&c->arena, &ch, 1);
				i += 2;
				continue;
			}
		} else if (p[i] == '%') {
			bad = 1;
		}
		buf_append(&c->arena, p + i, 1);
	}
	if (c->query) {
		/* the query lives in the arena: room first, then its address */
		buf_reserve(&c->arena, (size_t)c->query_len + 2);
		buf_append(&c->arena, "?", 1);
		buf_append(&c->arena, sc_str(c, c->query), c->query_len);
	}
	c->uri_len = (uint32_t)(c->arena.len - off);
	c->uri = off;
	buf_append(&c->arena, "", 1);
	free(p);
	return bad ? -1 : 0;
}

void seccoll_add(struct seccoll *c, enum sc_list_id into, const char *name, size_t nlen, const char *value, size_t vlen)
{
	uint32_t n = arena_put(c, name, nlen);
	uint32_t v = arena_put(c, value, vlen);
	list_add(&c->list[into], n, (uint32_t)nlen, v, (uint32_t)vlen);
}

void seccoll_urlencoded_body(struct seccoll *c, const char *body, size_t len)
{
	c->body = arena_put(c, body, len);
	c->body_len = (uint32_t)len;
	seccoll_parse_args(c, SC_ARGS_POST, body, len, '&');
}

/* ---- the JSON body processor ---- */

struct jparse {
	struct seccoll *c;
	const unsigned char *p, *end;
	struct buf name;   /* the current argument's name */
	struct buf str;    /* a decoded string */
	struct buf keys;   /* the keys of the objects being read, a stack */
	int depth;
	struct jstr *seen; /* the names and values stored so far, by content */
	size_t nseen, seen_cap;
};

/* A JSON body repeats itself (every element of an array of objects has
 * the same names, and flags, enums and small numbers recur): a string
 * already in the arena is stored once, so the CRS engine's caches, which
 * know a value by where it is, transform and scan it once. */
struct jstr {
	uint64_t hash;
	uint32_t off, len;  /* off + 1 in the arena; 0: an empty slot */
};

#define J_SEEN_MAX_PROBE 32  /* past it a string is stored again (values made to share a hash) */
#define J_SEEN_MAX 65536      /* distinct strings remembered (2 MiB of table at most); later ones are stored */

static void j_seen_grow(struct jparse *j)
{
	size_t ncap = j->seen_cap ? j->seen_cap * 2 : 64;
	struct jstr *old = j->seen, *tab = calloc(ncap, sizeof(*tab));
	AN(tab);
	for (size_t k = 0; k < j->seen_cap; k++) {
		if (!old[k].off)
			continue;
		size_t i = (size_t)old[k].hash & (ncap - 1);
		while (tab[i].off)
			i = (i + 1) & (ncap - 1);
		tab[i] = old[k];
	}
	free(old);
	j->seen = tab;
	j->seen_cap = ncap;
}

/* S (N bytes) in the arena: where it already is, or a new copy. */
static uint32_t j_put(struct jparse *j, const char *s, size_t n)
{
	struct seccoll *c = j->c;
	if (j->nseen < J_SEEN_MAX && (j->nseen + 1) * 2 > j->seen_cap)
		j_seen_grow(j);
	uint64_t h = vhash(s, n, 0x6a);
	size_t i = (size_t)h & (j->seen_cap - 1);
	for (unsigned probe = 0; j->seen[i].off; probe++, i = (i + 1) & (j->seen_cap - 1)) {
		const struct jstr *e = &j->seen[i];
		if (e->hash == h && e->len == n && memcmp(c->arena.data + e->off - 1, s, n) == 0)
			return e->off - 1;
		if (probe + 1 >= J_SEEN_MAX_PROBE)
			return arena_put(c, s, n);
	}
	uint32_t off = arena_put(c, s, n);
	if (j->nseen < J_SEEN_MAX) {
		j->seen[i] = (struct jstr){ .hash = h, .off = off + 1, .len = (uint32_t)n };
		j->nseen++;
	}
	return off;
}

static void j_ws(struct jparse *j)
{
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int j_hex4(struct jparse *j, unsigned *out)
{
	if (j->end - j->p < 4)
		return -1;
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hex_value(j->p[i]);
		if (h < 0)
			return -1;
		v = v << 4 | (unsigned)h;
	}
	j->p += 4;
	*out = v;
	return 0;
}

/* Length of the valid UTF-8 sequence at P (before END), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned char c = p[0];
	size_t n = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 0;
	if (n == 0 || (size_t)(end - p) < n)
		return 0;
	for (size_t i = 1; i < n; i++)
		if ((p[i] & 0xC0) != 0x80)
			return 0;
	if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] > 0x9F) || (c == 0xF0 && p[1] < 0x90) ||
	    (c == 0xF4 && p[1] > 0x8F))
		return 0;  /* overlong, surrogate or above U+10FFFF */
	return n;
}

/* The string at j->p (its opening quote) decoded into j->str. */
static int j_string(struct jparse *j)
{
	j->str.len = 0;
	if (j->p >= j->end || *j->p != '"')
		return -1;
	j->p++;
	while (j->p < j->end) {
		unsigned char ch = *j->p;
		if (ch == '"') {
			j->p++;
			return 0;
		}
		if (ch < 0x20)
			return -1;
		if (ch >= 0x80) {
			size_t n = utf8_len(j->p, j->end);
			if (n == 0)
				return -1;
			buf_append(&j->str, j->p, n);
			j->p += n;
			continue;
		}
		j->p++;
		if (ch != '\\') {
			buf_append(&j->str, &ch, 1);
			continue;
		}
		if (j->p >= j->end)
			return -1;
		ch = *j->p++;
		unsigned cp;
		switch (ch) {
		case '"': case '\\': case '/': break;
		case 'b': ch = '\b'; break;
		case 'f': ch = '\f'; break;
		case 'n': ch = '\n'; break;
		case 'r': ch = '\r'; break;
		case 't': ch = '\t'; break;
		case 'u':
			if (j_hex4(j, &cp) < 0)
				return -1;
			if (cp >= 0xD800 && cp <= 0xDBFF && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
				const unsigned char *save = j->p;
				unsigned lo;
				j->p += 2;
				if (j_hex4(j, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF)
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				else
					j->p = save;
			}
			if (cp >= 0xD800 && cp <= 0xDFFF)
				buf_append(&j->str, "?", 1);  /* a lone surrogate */
			else {
				char u[4];
				buf_append(&j->str, u, utf8_encode(u, cp));
			}
			continue;
		default:
			return -1;
		}
		buf_append(&j->str, &ch, 1);
	}
	return -1;
}

static void j_arg(struct jparse *j, const char *v, size_t vlen)
{
	uint32_t n = j_put(j, j->name.data ? j->name.data : "", j->name.len);
	uint32_t val = j_put(j, v, vlen);
	list_add(&j->c->list[SC_ARGS_JSON], n, (uint32_t)j->name.len, val, (uint32_t)vlen);
}

/* A value named j->name; the key it came under (j->keys at KOFF, KLEN
 * bytes) is what an array names each of its elements again. */
static int j_value(struct jparse *j, size_t koff, size_t klen)
{
	j_ws(j);
	if (j->p >= j->end)
		return -1;
	size_t base = j->name.len;
	unsigned char ch = *j->p;
	if (ch == '{' || ch == '[') {
		if (++j->depth > SC_JSON_DEPTH)
			return -1;
		j->p++;
		j_ws(j);
		unsigned char close = ch == '{' ? '}' : ']';
		if (j->p < j->end && *j->p == close) {
			j->p++;
			j->depth--;
			return 0;
		}
		for (;;) {
			j->name.len = base;
			if (ch == '{') {
				j_ws(j);
				if (j_string(j) < 0)
					return -1;
				if (base)
					buf_append(&j->name, ".", 1);
				buf_append(&j->name, j->str.data ? j->str.data : "", j->str.len);
				j_ws(j);
				if (j->p >= j->end || *j->p != ':')
					return -1;
				j->p++;
				/* the key outlives j->str, which the value reuses */
				size_t kbase = j->keys.len;
				buf_append(&j->keys, j->str.data ? j->str.data : "", j->str.len);
				int rc = j_value(j, kbase, j->str.len);
				j->keys.len = kbase;
				if (rc < 0)
					return -1;
			} else {
				if (base)
					buf_append(&j->name, ".", 1);
				if (klen)
					buf_append(&j->name, j->keys.data + koff, klen);
				if (j_value(j, koff, klen) < 0)
					return -1;
			}
			j_ws(j);
			if (j->p < j->end && *j->p == ',') {
				j->p++;
				continue;
			}
			if (j->p < j->end && *j->p == close) {
				j->p++;
				break;
			}
			return -1;
		}
		j->name.len = base;
		j->depth--;
		return 0;
	}
	if (ch == '"') {
		if (j_string(j) < 0)
			return -1;
		j_arg(j, j->str.data ? j->str.data : "", j->str.len);
		return 0;
	}
	static const char *const words[] = { "true", "false", "null" };
	for (int w = 0; w < 3; w++) {
		size_t wl = strlen(words[w]);
		if ((size_t)(j->end - j->p) >= wl && memcmp(j->p, words[w], wl) == 0) {
			j->p += wl;
			j_arg(j, w == 2 ? "" : words[w], w == 2 ? 0 : wl);
			return 0;
		}
	}
	/* a number, kept as written: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
	const unsigned char *s = j->p, *q = j->p;
	if (q < j->end && *q == '-')
		q++;
	if (q < j->end && *q == '0')
		q++;
	else if (q < j->end && *q >= '1' && *q <= '9')
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	else
		return -1;
	if (q < j->end && *q == '.') {
		q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return -1;
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < j->end && (*q == 'e' || *q == 'E')) {
		q++;
		if (q < j->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= j->end || *q < '0' || *q > '9')
			return -1;
		while (q < j->end && *q >= '0' && *q <= '9')
			q++;
	}
	j->p = q;
	j_arg(j, (const char *)s, (size_t)(q - s));
	return 0;
}

int seccoll_json_body(struct seccoll *c, const char *body, size_t len)
{
	c->body = arena_put(c, body, len);
	c->body_len = (uint32_t)len;
	struct jparse j = { .c = c, .p = (const unsigned char *)body, .end = (const unsigned char *)body + len };
	uint32_t before = c->list[SC_ARGS_JSON].n;
	j_ws(&j);
	int rc;
	if (j.p < j.end && *j.p == '[') {  /* a top-level array is called "array" */
		buf_append(&j.name, "array", 5);
		buf_append(&j.keys, "array", 5);
		rc = j_value(&j, 0, 5);
	} else {
		rc = j_value(&j, 0, 0);
	}
	j_ws(&j);
	if (rc == 0 && j.p != j.end)
		rc = -1;  /* something after the value */
	if (rc < 0)
		c->list[SC_ARGS_JSON].n = before;  /* no half-read arguments */
	buf_free(&j.name);
	buf_free(&j.str);
	buf_free(&j.keys);
	free(j.seen);
	return rc;
}
