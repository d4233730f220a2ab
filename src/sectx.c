/* ModSecurity's per-request variables (sectx.h says what and why). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "secop.h"
#include "sectx.h"
#include "util.h"

static const char *const coll_names[SX__COLLS] = { "tx", "ip", "global", "session", "user", "resource" };

int sectx_coll(const char *name, size_t len)
{
	for (int i = 0; i < SX__COLLS; i++)
		if (strlen(coll_names[i]) == len && strncasecmp(coll_names[i], name, len) == 0)
			return i;
	return -1;
}

void sectx_reset(struct sectx *t)
{
	t->arena.len = 0;
	t->n = 0;
	t->tx_digits = 0;
	if (t->idx)
		memset(t->idx, 0, t->idx_cap * sizeof(*t->idx));
	memset(t->open, 0, sizeof(t->open));
	t->open[SX_TX] = 1;
}

void sectx_free(struct sectx *t)
{
	buf_free(&t->arena);
	buf_free(&t->scratch[0]);
	buf_free(&t->scratch[1]);
	free(t->v);
	free(t->idx);
	memset(t, 0, sizeof(*t));
}

/* S may point into the arena itself (a value copied from another
 * variable): its offset survives the arena moving, the pointer would not. */
static uint32_t put(struct sectx *t, const char *s, size_t n)
{
	int inside = t->arena.data && s >= t->arena.data && s < t->arena.data + t->arena.len;
	size_t from = inside ? (size_t)(s - t->arena.data) : 0;
	uint32_t off = (uint32_t)t->arena.len;
	buf_reserve(&t->arena, n + 1);
	memmove(t->arena.data + off, inside ? t->arena.data + from : s, n);
	t->arena.data[off + n] = '\0';
	t->arena.len = off + n + 1;
	return off;
}

/* Eight bytes at a time, each ORed with 0x20: that folds ASCII case and
 * folds a few other pairs too ('_' and DEL, '@' and '`'), which only makes
 * them collide; find() compares the names. Per byte it cost most of a
 * lookup, and a request's rules look TX up some hundreds of times. */
static uint32_t name_hash(int coll, const char *name, size_t nlen)
{
	const uint64_t fold = 0x2020202020202020ull, mul = 0xff51afd7ed558ccdull;
	uint64_t h = 0x9e3779b97f4a7c15ull ^ (uint64_t)coll ^ ((uint64_t)nlen << 8);
	size_t i = 0;
	for (; i + 8 <= nlen; i += 8) {
		uint64_t w;
		memcpy(&w, name + i, 8);
		h = (h ^ (w | fold)) * mul;
		h ^= h >> 32;
	}
	if (i < nlen) {  /* the last eight bytes, overlapping the words before */
		uint64_t w = 0;
		if (nlen >= 8)
			memcpy(&w, name + nlen - 8, 8);
		else
			for (size_t k = 0; k < nlen; k++)
				w |= (uint64_t)(unsigned char)name[k] << (8 * k);
		h = (h ^ (w | fold)) * mul;
	}
	h ^= h >> 33;  /* the last word's high bytes reach the low bits too */
	h *= mul;
	h ^= h >> 33;
	return (uint32_t)h;
}

static struct sectx_var *find_hashed(const struct sectx *t, int coll, const char *name, size_t nlen, uint32_t h)
{
	if (!t->idx_cap)
		return NULL;
	uint32_t mask = t->idx_cap - 1;
	for (uint32_t i = h & mask; t->idx[i]; i = (i + 1) & mask) {
		struct sectx_var *v = &t->v[t->idx[i] - 1];
		if (v->hash == h && v->coll == coll && v->nlen == nlen &&
		    (memcmp(t->arena.data + v->name, name, nlen) == 0 ||
		     strncasecmp(t->arena.data + v->name, name, nlen) == 0))
			return v;
	}
	return NULL;
}

static struct sectx_var *find(const struct sectx *t, int coll, const char *name, size_t nlen)
{
	return t->idx_cap ? find_hashed(t, coll, name, nlen, name_hash(coll, name, nlen)) : NULL;
}

/* The index of every variable, anew (after growing, or a removal moved one). */
static void reindex(struct sectx *t, uint32_t cap)
{
	if (cap != t->idx_cap) {
		free(t->idx);
		t->idx = malloc(cap * sizeof(*t->idx));
		AN(t->idx);
		t->idx_cap = cap;
	}
	memset(t->idx, 0, cap * sizeof(*t->idx));
	for (uint32_t k = 0; k < t->n; k++) {
		uint32_t i = t->v[k].hash & (cap - 1);
		while (t->idx[i])
			i = (i + 1) & (cap - 1);
		t->idx[i] = k + 1;
	}
}

const struct sectx_var *sectx_get(const struct sectx *t, int coll, const char *name, size_t nlen)
{
	return find(t, coll, name, nlen);
}

uint32_t sectx_hash(int coll, const char *name, size_t nlen)
{
	return name_hash(coll, name, nlen);
}

const struct sectx_var *sectx_get_hashed(const struct sectx *t, int coll, const char *name, size_t nlen, uint32_t hash)
{
	return find_hashed(t, coll, name, nlen, hash);
}

static void set_hashed(struct sectx *t, int coll, const char *name, size_t nlen, uint32_t h, const char *value,
		       size_t vlen)
{
	struct sectx_var *v = find_hashed(t, coll, name, nlen, h);
	if (!v) {
		if (t->n == t->cap) {
			t->cap = t->cap ? t->cap * 2 : 64;
			t->v = realloc(t->v, t->cap * sizeof(*t->v));
			AN(t->v);
		}
		uint32_t off = put(t, name, nlen);
		v = &t->v[t->n++];
		*v = (struct sectx_var){ .coll = (uint8_t)coll, .hash = h, .name = off, .nlen = (uint32_t)nlen };
		if (coll == SX_TX && nlen == 1 && (unsigned)(name[0] - '0') <= 9u)
			t->tx_digits |= (uint16_t)(1u << (name[0] - '0'));
		if (t->n * 2 > t->idx_cap) {
			reindex(t, t->idx_cap ? t->idx_cap * 2 : 128);
		} else {
			uint32_t i = h & (t->idx_cap - 1);
			while (t->idx[i])
				i = (i + 1) & (t->idx_cap - 1);
			t->idx[i] = t->n;
		}
	}
	uint32_t i = (uint32_t)(v - t->v);
	uint32_t voff = put(t, value, vlen);
	t->v[i].value = voff;
	t->v[i].vlen = (uint32_t)vlen;
}

void sectx_set(struct sectx *t, int coll, const char *name, size_t nlen, const char *value, size_t vlen)
{
	set_hashed(t, coll, name, nlen, name_hash(coll, name, nlen), value, vlen);
}

void sectx_unset(struct sectx *t, int coll, const char *name, size_t nlen)
{
	struct sectx_var *v = find(t, coll, name, nlen);
	if (v) {
		*v = t->v[--t->n];
		reindex(t, t->idx_cap);
		if (coll == SX_TX && nlen == 1 && (unsigned)(name[0] - '0') <= 9u)
			t->tx_digits &= (uint16_t)~(1u << (name[0] - '0'));
	}
}

void sectx_expand(const char *tpl, size_t len, sectx_resolve_fn fn, void *ctx, struct buf *out)
{
	size_t i = 0;
	while (i < len) {
		const char *pct = memchr(tpl + i, '%', len - i);
		if (!pct) {
			buf_append(out, tpl + i, len - i);
			return;
		}
		size_t p = (size_t)(pct - tpl);
		buf_append(out, tpl + i, p - i);
		const char *close = p + 2 < len && tpl[p + 1] == '{' ? memchr(tpl + p + 2, '}', len - p - 2) : NULL;
		if (!close) {  /* not a macro: the '%' stays */
			buf_append(out, "%", 1);
			i = p + 1;
			continue;
		}
		const char *name = tpl + p + 2;
		size_t inner = (size_t)(close - name);
		const char *dot = memchr(name, '.', inner);
		size_t nlen = dot ? (size_t)(dot - name) : inner;
		(void)fn(ctx, name, nlen, dot ? dot + 1 : NULL, dot ? inner - nlen - 1 : 0, out);
		i = (size_t)(close - tpl) + 1;
	}
}

/* "=+N" / "=-N": the old value read as a number (0 if none) plus the
 * signed DELTA, kept within 0 .. INT_MAX. */
static void add_to(struct sectx *t, int coll, const char *name, size_t nlen, uint32_t h, const char *delta, size_t dlen)
{
	const struct sectx_var *old = find_hashed(t, coll, name, nlen, h);
	int cur = old ? secop_atoi(t->arena.data + old->value, old->vlen) : 0;
	long long sum = (long long)cur + secop_atoi(delta, dlen);
	char num[24];
	int k = snprintf(num, sizeof(num), "%d", (int)(sum < 0 ? 0 : sum > 0x7fffffff ? 0x7fffffff : sum));
	set_hashed(t, coll, name, nlen, h, num, (size_t)k);
}

/* The name N ("[!]col.name", macros expanded) and the value part VAL
 * (what follows the '=', NULL without one) into C. 0 when N names no
 * collection sectx knows (C then stays on the general path). */
static int setvar_parts(struct sectx_setvar *c, const char *n, size_t nl, const char *val, size_t vlen)
{
	int unset = nl > 0 && n[0] == '!';
	if (unset)
		n++, nl--;
	const char *dot = memchr(n, '.', nl);
	int coll = dot ? sectx_coll(n, (size_t)(dot - n)) : -1;
	if (coll < 0)
		return 0;
	if (!val)
		val = "1", vlen = 1;
	while (vlen > 0 && (*val == ' ' || (*val >= '\t' && *val <= '\r')))
		val++, vlen--;
	c->coll = (int8_t)coll;
	c->unset = (uint8_t)unset;
	c->name = dot + 1;
	c->nlen = (uint32_t)(nl - (size_t)(dot + 1 - n));
	c->hash = name_hash(coll, c->name, c->nlen);
	c->value = val;
	c->vlen = (uint32_t)vlen;
	c->arith = vlen > 0 && (val[0] == '+' || val[0] == '-');
	c->value_macro = memchr(val, '%', vlen) != NULL;
	return 1;
}

void sectx_setvar_compile(struct sectx_setvar *c, const char *spec, size_t len)
{
	memset(c, 0, sizeof(*c));
	c->spec = spec;
	c->len = (uint32_t)len;
	c->coll = -1;
	const char *eq = memchr(spec, '=', len);
	size_t nraw = eq ? (size_t)(eq - spec) : len;
	if (!memchr(spec, '%', nraw))  /* else the name is known only once expanded */
		(void)setvar_parts(c, spec, nraw, eq ? eq + 1 : NULL, eq ? len - nraw - 1 : 0);
}

int sectx_setvar(struct sectx *t, const char *spec, size_t len, sectx_resolve_fn fn, void *ctx)
{
	struct sectx_setvar c;
	sectx_setvar_compile(&c, spec, len);
	if (c.coll >= 0)
		return sectx_setvar_run(t, &c, fn, ctx);
	/* a name with macros: expanded into a scratch buffer that leaves the
	 * store meanwhile (a resolver may read the store, never it) */
	const char *eq = memchr(spec, '=', len);
	size_t nraw = eq ? (size_t)(eq - spec) : len;
	struct buf name = t->scratch[0];
	memset(&t->scratch[0], 0, sizeof(t->scratch[0]));
	name.len = 0;
	sectx_expand(spec, nraw, fn, ctx, &name);
	int changed = setvar_parts(&c, name.data ? name.data : "", name.len, eq ? eq + 1 : NULL, eq ? len - nraw - 1 : 0) &&
		      sectx_setvar_run(t, &c, fn, ctx);
	buf_free(&t->scratch[0]);
	t->scratch[0] = name;
	return changed;
}

int sectx_setvar_run(struct sectx *t, const struct sectx_setvar *c, sectx_resolve_fn fn, void *ctx)
{
	if (c->coll < 0)
		return sectx_setvar(t, c->spec, c->len, fn, ctx);
	if (!t->open[c->coll])
		return 0;
	if (c->unset) {
		sectx_unset(t, c->coll, c->name, c->nlen);
		return 1;
	}
	const char *v = c->value;
	size_t vl = c->vlen;
	struct buf value = t->scratch[1];
	if (c->value_macro) {
		/* the scratch buffer leaves the store while the resolver may read it */
		memset(&t->scratch[1], 0, sizeof(t->scratch[1]));
		value.len = 0;
		sectx_expand(c->value, c->vlen, fn, ctx, &value);
		v = value.data ? value.data : "";
		vl = value.len;
	}
	if (c->arith)
		add_to(t, c->coll, c->name, c->nlen, c->hash, v, vl);
	else
		set_hashed(t, c->coll, c->name, c->nlen, c->hash, v, vl);
	if (c->value_macro) {
		buf_free(&t->scratch[1]);
		t->scratch[1] = value;
	}
	return 1;
}

