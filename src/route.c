/* Content routing at run time (route.h). Calls only pcre2 and buf. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pcre2.h>
#include "route.h"
#include "util.h"

struct rt_entry {
	const char *s;
	uint32_t len;
	uint32_t route;
};

struct rt_index {
	struct rt_entry *e;
	unsigned n;
};

struct route_table {
	const struct cfg_route *routes;
	unsigned nroutes;
	struct rt_index exact, prefix, plain, host, wild;
	uint32_t *plain_lens;      /* distinct lengths of plain prefixes, ascending */
	unsigned nplain_lens;
	uint32_t *generic;         /* routes indexed on neither path nor host, in order */
	unsigned ngeneric;
	uint32_t *cand;            /* scratch: candidates of one request */
	unsigned ncand;
	pcre2_match_data *md;
};

static int entry_cmp(const void *a, const void *b)
{
	const struct rt_entry *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->s, y->s, n);
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->route < y->route ? -1 : x->route > y->route;
}

static int add(struct rt_index *ix, const char *s, size_t len, unsigned route)
{
	struct rt_entry *e = realloc(ix->e, (ix->n + 1) * sizeof(*e));
	if (e == NULL)
		return -1;
	ix->e = e;
	e[ix->n++] = (struct rt_entry){ s, (uint32_t)len, route };
	return 0;
}

void route_table_free(struct route_table *t)
{
	if (t == NULL)
		return;
	free(t->exact.e);
	free(t->prefix.e);
	free(t->plain.e);
	free(t->host.e);
	free(t->wild.e);
	free(t->plain_lens);
	free(t->generic);
	free(t->cand);
	pcre2_match_data_free(t->md);
	free(t);
}

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

struct route_table *route_table_build(const struct cfg_listener *li)
{
	if (li->nroutes == 0)
		return NULL;
	struct route_table *t = calloc(1, sizeof(*t));
	if (t == NULL)
		return NULL;
	t->routes = li->routes;
	t->nroutes = li->nroutes;
	t->generic = calloc(li->nroutes, sizeof(*t->generic));
	t->plain_lens = calloc(li->nroutes, sizeof(*t->plain_lens));
	t->md = pcre2_match_data_create(1, NULL);
	if (t->generic == NULL || t->plain_lens == NULL || t->md == NULL)
		goto fail;
	for (unsigned i = 0; i < li->nroutes; i++) {
		const struct cfg_route *r = &li->routes[i];
		int rc = 0;
		switch (r->path_kind) {
		case CFG_PATH_EXACT:
			rc = add(&t->exact, r->path, strlen(r->path), i);
			break;
		case CFG_PATH_PREFIX:
			/* the root prefix matches every path: the empty key */
			rc = add(&t->prefix, r->path, strcmp(r->path, "/") == 0 ? 0 : strlen(r->path), i);
			break;
		case CFG_PATH_PLAIN_PREFIX:
			rc = add(&t->plain, r->path, strlen(r->path), i);
			t->plain_lens[t->nplain_lens++] = (uint32_t)strlen(r->path);
			break;
		default:
			if (r->nhosts == 0) {
				t->generic[t->ngeneric++] = i;
				break;
			}
			for (unsigned h = 0; h < r->nhosts && rc == 0; h++) {
				const char *name = r->hosts[h];
				if (name[0] == '*')  /* "*.example.com": keyed by ".example.com" */
					rc = add(&t->wild, name + 1, strlen(name + 1), i);
				else
					rc = add(&t->host, name, strlen(name), i);
			}
		}
		if (rc < 0)
			goto fail;
	}
	/* A request can draw each entry at most once (every lookup key differs),
	 * and a route with several host names may match under more than one. */
	struct rt_index *all[] = { &t->exact, &t->prefix, &t->plain, &t->host, &t->wild };
	size_t ncand = t->ngeneric;
	for (unsigned k = 0; k < 5; k++) {
		ncand += all[k]->n;
		if (all[k]->n)
			qsort(all[k]->e, all[k]->n, sizeof(struct rt_entry), entry_cmp);
	}
	t->cand = calloc(ncand ? ncand : 1, sizeof(*t->cand));
	if (t->cand == NULL)
		goto fail;
	if (t->nplain_lens) {
		qsort(t->plain_lens, t->nplain_lens, sizeof(uint32_t), u32_cmp);
		unsigned w = 1;
		for (unsigned k = 1; k < t->nplain_lens; k++)
			if (t->plain_lens[k] != t->plain_lens[w - 1])
				t->plain_lens[w++] = t->plain_lens[k];
		t->nplain_lens = w;
	}
	return t;
fail:
	route_table_free(t);
	return NULL;
}

/* Every route of IX keyed exactly S, as candidates. CASE: compare ASCII
 * case-insensitively (hosts; the index holds lower case). */
static void lookup(struct route_table *t, const struct rt_index *ix, const char *s, size_t len, int icase)
{
	char low[256];
	if (icase) {
		if (len > sizeof(low))
			return;
		ascii_lower_copy(low, s, len);
		s = low;
	}
	struct rt_entry key = { s, (uint32_t)len, 0 };
	unsigned lo = 0, hi = ix->n;
	while (lo < hi) {  /* first entry >= (s, route 0) */
		unsigned mid = (lo + hi) / 2;
		if (entry_cmp(&ix->e[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < ix->n && ix->e[lo].len == len && memcmp(ix->e[lo].s, s, len) == 0; lo++)
		t->cand[t->ncand++] = ix->e[lo].route;
}

static int host_matches(const struct cfg_route *r, const char *h, size_t hl)
{
	for (unsigned i = 0; i < r->nhosts; i++) {
		const char *n = r->hosts[i];
		size_t nl = strlen(n);
		if (n[0] == '*') {
			n++;
			nl--;  /* ".example.com": a proper suffix, label boundary included */
			if (hl > nl && strncasecmp(h + hl - nl, n, nl) == 0)
				return 1;
		} else if (hl == nl && strncasecmp(h, n, nl) == 0) {
			return 1;
		}
	}
	return 0;
}

static int regex_matches(struct route_table *t, void *re, const char *s, size_t len)
{
	return pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, t->md, NULL) >= 0;
}

static int header_cond(struct route_table *t, const struct cfg_cond *c, const struct msg *m)
{
	size_t nl = strlen(c->name);
	int present = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->name_len != nl || strncasecmp(msg_str(m, h->name_off), c->name, nl) != 0)
			continue;
		present = 1;
		const char *v = msg_str(m, h->val_off);
		if (c->op == CFG_COND_EQUALS && h->val_len == c->value_len && memcmp(v, c->value, c->value_len) == 0)
			return 1;
		if (c->op == CFG_COND_REGEX && regex_matches(t, c->re, v, h->val_len))
			return 1;
	}
	return c->op == CFG_COND_PRESENT ? present : c->op == CFG_COND_ABSENT ? !present : 0;
}

/* RFC 6265 5.4: "a=1; b=2" in one or more Cookie fields; names are case
 * sensitive. */
static int cookie_cond(const struct cfg_cond *c, const struct msg *m)
{
	size_t nl = strlen(c->name);
	int present = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->name_len != 6 || strncasecmp(msg_str(m, h->name_off), "cookie", 6) != 0)
			continue;
		const char *p = msg_str(m, h->val_off), *end = p + h->val_len, *v;
		size_t vl;
		while (cookie_next(&p, end, c->name, nl, &v, &vl)) {
			present = 1;
			if (c->op == CFG_COND_EQUALS && vl == c->value_len && memcmp(v, c->value, vl) == 0)
				return 1;
		}
	}
	return c->op == CFG_COND_PRESENT ? present : c->op == CFG_COND_ABSENT ? !present : 0;
}

static int route_matches(struct route_table *t, const struct cfg_route *r, const struct route_req *q)
{
	if (r->methods && (q->method < 0 || q->method > 63 || !(r->methods >> q->method & 1)))
		return 0;
	if (r->nhosts && !host_matches(r, q->host, q->host_len))
		return 0;
	size_t pl = r->path ? strlen(r->path) : 0;
	switch (r->path_kind) {
	case CFG_PATH_ANY:
		break;
	case CFG_PATH_EXACT:
		if (q->path_len != pl || memcmp(q->path, r->path, pl) != 0)
			return 0;
		break;
	case CFG_PATH_PREFIX:
		if (pl == 1)
			break;  /* "/" */
		if (q->path_len < pl || memcmp(q->path, r->path, pl) != 0 ||
		    (q->path_len > pl && q->path[pl] != '/'))
			return 0;
		break;
	case CFG_PATH_PLAIN_PREFIX:
		if (q->path_len < pl || memcmp(q->path, r->path, pl) != 0)
			return 0;
		break;
	case CFG_PATH_REGEX:
		if (!regex_matches(t, r->path_re, q->path, q->path_len))
			return 0;
		break;
	}
	for (unsigned i = 0; i < r->nheaders; i++)
		if (!header_cond(t, &r->headers[i], q->m))
			return 0;
	for (unsigned i = 0; i < r->ncookies; i++)
		if (!cookie_cond(&r->cookies[i], q->m))
			return 0;
	return 1;
}

const struct cfg_route *route_match(struct route_table *t, const struct route_req *q)
{
	const char *p = q->path;
	size_t n = q->path_len;
	t->ncand = 0;
	for (unsigned i = 0; i < t->ngeneric; i++)
		t->cand[t->ncand++] = t->generic[i];
	if (t->exact.n)
		lookup(t, &t->exact, p, n, 0);
	if (t->prefix.n) {
		lookup(t, &t->prefix, p, 0, 0);
		for (size_t i = 1; i <= n; i++)
			if (i == n || p[i] == '/')
				lookup(t, &t->prefix, p, i, 0);
	}
	for (unsigned k = 0; k < t->nplain_lens && t->plain_lens[k] <= n; k++)
		lookup(t, &t->plain, p, t->plain_lens[k], 0);
	if (t->host.n)
		lookup(t, &t->host, q->host, q->host_len, 1);
	if (t->wild.n)
		for (size_t i = 1; i < q->host_len; i++)
			if (q->host[i] == '.')
				lookup(t, &t->wild, q->host + i, q->host_len - i, 1);
	/* In the config's order: the first that matches wins. The lookups
	 * each give a route at most once, so insertion sort over a handful. */
	for (unsigned i = 1; i < t->ncand; i++) {
		uint32_t v = t->cand[i];
		unsigned j = i;
		for (; j > 0 && t->cand[j - 1] > v; j--)
			t->cand[j] = t->cand[j - 1];
		t->cand[j] = v;
	}
	for (unsigned i = 0; i < t->ncand; i++) {
		if (i && t->cand[i] == t->cand[i - 1])
			continue;  /* a host route listed under two wildcards */
		const struct cfg_route *r = &t->routes[t->cand[i]];
		if (route_matches(t, r, q))
			return r;
	}
	return NULL;
}

const struct cfg_route *route_match_linear(struct route_table *t, const struct route_req *q)
{
	for (unsigned i = 0; i < t->nroutes; i++)
		if (route_matches(t, &t->routes[i], q))
			return &t->routes[i];
	return NULL;
}

/* ---- normalisation ---- */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '.' || c == '_' || c == '~';
}

/* Drop the last segment of B (a path "/a/b" or "/"): never above the root. */
static void pop_segment(struct buf *b)
{
	while (b->len > 0 && b->data[b->len - 1] != '/')
		b->len--;
	if (b->len > 0)
		b->len--;  /* its '/' */
}

/* KEY from the normalised path P: each segment without its ;parameters,
 * segments left empty dropped (a server maps "/a/;x/b" as "/a/b"). */
static void path_key(const char *p, size_t n, struct buf *key)
{
	size_t i = 0;
	while (i < n) {
		i++;  /* the '/' */
		size_t s = i;
		while (i < n && p[i] != '/')
			i++;
		const char *semi = memchr(p + s, ';', i - s);
		size_t nl = semi ? (size_t)(semi - (p + s)) : i - s;
		if (nl) {
			buf_append(key, "/", 1);
			buf_append(key, p + s, nl);
		}
	}
	if (key->len == 0 || (n > 1 && p[n - 1] == '/'))
		buf_append(key, "/", 1);
}

int route_normalize(const char *t, size_t n, struct buf *out, struct buf *key)
{
	static const char hx[] = "0123456789ABCDEF";
	out->len = key->len = 0;
	if (n == 1 && t[0] == '*') {
		buf_append(out, "*", 1);
		buf_append(key, "*", 1);
		return 0;
	}
	size_t ps = 0;  /* where the path starts: after an absolute-form's authority */
	if (n && t[0] != '/') {
		const char *sep = memmem(t, n, "://", 3);
		if (sep == NULL)
			return -1;
		ps = (size_t)(sep - t) + 3;
		while (ps < n && t[ps] != '/' && t[ps] != '?')
			ps++;
		buf_append(out, t, ps);
	}
	size_t qs = ps;
	while (qs < n && t[qs] != '?')
		qs++;
	/* Most paths need nothing: no escape, no parameter, no empty or dot
	 * segment. They are forwarded as they came (OUT stays empty). */
	int plain = qs > ps && t[ps] == '/';
	for (size_t i = ps; plain && i < qs; i++) {
		char c = t[i];
		plain = c != '%' && c != ';' && !(c == '/' && i + 1 < qs && (t[i + 1] == '/' || t[i + 1] == '.'));
	}
	if (plain) {
		out->len = 0;
		buf_append(key, t + ps, qs - ps);
		return 1;
	}
	size_t base = out->len;
	/* The path never grows (an escape stays 3 bytes or becomes 1), plus
	 * one '/' at the end: room reserved once, bytes stored directly. */
	buf_reserve(out, n - ps + 2);
	/* Segment by segment: decode, then resolve a dot segment against what
	 * is already written. */
	size_t i = ps;
	int trailing = 0;
	while (i < qs) {
		if (t[i] == '/') {
			i++;
			continue;  /* empty segments merge */
		}
		size_t seg = out->len, name_len = (size_t)-1;
		buf_append(out, "/", 1);
		for (; i < qs && t[i] != '/'; i++) {
			char enc[3] = { t[i], 0, 0 };
			size_t el = 1;
			if (t[i] == '%') {
				int hi = i + 2 < qs ? hexval(t[i + 1]) : -1, lo = hi >= 0 ? hexval(t[i + 2]) : -1;
				if (hi < 0 || lo < 0)
					return -1;
				int v = hi * 16 + lo;
				if (v == '/' || v == '\\' || v == 0)
					return -1;
				i += 2;
				if (unreserved(v)) {
					enc[0] = (char)v;
				} else {
					enc[0] = '%';
					enc[1] = hx[v >> 4];
					enc[2] = hx[v & 15];
					el = 3;
				}
			} else if (t[i] == ';' && name_len == (size_t)-1) {
				name_len = out->len - seg - 1;
			}
			memcpy(out->data + out->len, enc, el);
			out->len += el;
		}
		if (name_len == (size_t)-1)
			name_len = out->len - seg - 1;
		const char *name = out->data + seg + 1;
		trailing = i < qs;  /* a '/' follows */
		if (name_len == 1 && name[0] == '.') {
			out->len = seg;
			trailing = 1;
		} else if (name_len == 2 && name[0] == '.' && name[1] == '.') {
			out->len = seg;
			if (out->len > base)
				pop_segment(out);
			trailing = 1;  /* "/a/b/.." is the directory "/a/" */
		}
	}
	if (out->len == base || trailing)
		buf_append(out, "/", 1);
	path_key(out->data + base, out->len - base, key);
	buf_append(out, t + qs, n - qs);
	return 0;
}

void route_host_name(const char *v, size_t len, const char **name, size_t *name_len)
{
	size_t n = len;
	if (len && v[0] == '[') {
		const char *rb = memchr(v, ']', len);
		n = rb ? (size_t)(rb - v) + 1 : len;
	} else {
		const char *colon = memchr(v, ':', len);
		if (colon)
			n = (size_t)(colon - v);
	}
	if (n > 1 && v[n - 1] == '.')
		n--;
	*name = v;
	*name_len = n;
}

void route_location(const struct cfg_route *r, int tls, const char *host, size_t host_len,
		    const char *target, size_t target_len, struct buf *out)
{
	const char *q = memchr(target, '?', target_len);
	size_t path_len = q ? (size_t)(q - target) : target_len;
	for (const char *p = r->location; *p; p++) {
		if (*p != '{') {
			const char *next = strchr(p, '{');
			size_t l = next ? (size_t)(next - p) : strlen(p);
			buf_append(out, p, l);
			p += l - 1;
			continue;
		}
		if (strncmp(p, "{scheme}", 8) == 0) {
			buf_append_str(out, tls ? "https" : "http");
			p += 7;
		} else if (strncmp(p, "{host}", 6) == 0) {
			buf_append(out, host, host_len);
			p += 5;
		} else if (strncmp(p, "{path}", 6) == 0) {
			buf_append(out, target, path_len);
			p += 5;
		} else if (strncmp(p, "{query}", 7) == 0) {
			if (q)
				buf_append(out, q, target_len - path_len);
			p += 6;
		}
	}
}
