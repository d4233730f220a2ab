/* The CRS engine's per-phase caches (crscache.h says what and why). */
#include <hs/hs.h>
#include <stdlib.h>
#include <string.h>
#include "crscache.h"
#include "sectfn.h"
#include "util.h"

static size_t tc_hash(const char *src, uint32_t slen, uint64_t key)
{
	uint64_t h = (uint64_t)(uintptr_t)src * 0x9E3779B97F4A7C15ull ^ ((uint64_t)slen << 32 ^ key) * 0xC2B2AE3D27D4EB4Full;
	return (size_t)(h ^ h >> 29);
}

struct crs_tcache *crscache_find(struct crs_txn *t, const char *src, uint32_t slen, uint64_t key)
{
	if (!t->tc_cap)
		return NULL;
	for (size_t i = tc_hash(src, slen, key) & (t->tc_cap - 1);; i = (i + 1) & (t->tc_cap - 1)) {
		struct crs_tcache *e = &t->tc[i];
		if (e->epoch != t->tc_epoch)
			return NULL;
		if (e->src == src && e->slen == slen && e->key == key)
			return e;
	}
}

/* An entry whose result is the value itself (SAME), or LEN bytes at OFF in
 * tc_data. Returns it (valid until the next put). */
static struct crs_tcache *tc_put(struct crs_txn *t, const char *src, uint32_t slen, uint64_t key, uint32_t off, size_t len,
				 int same)
{
	if ((t->tc_n + 1) * 2 > t->tc_cap) {
		size_t ncap = t->tc_cap ? t->tc_cap * 2 : 256;
		struct crs_tcache *old = t->tc;
		size_t ocap = t->tc_cap;
		t->tc = calloc(ncap, sizeof(*t->tc));
		AN(t->tc);
		t->tc_cap = ncap;
		uint32_t epoch = t->tc_epoch;
		for (size_t k = 0; k < ocap; k++) {
			if (old[k].epoch != epoch)
				continue;
			size_t i = tc_hash(old[k].src, old[k].slen, old[k].key) & (ncap - 1);
			while (t->tc[i].epoch == epoch)
				i = (i + 1) & (ncap - 1);
			t->tc[i] = old[k];
		}
		free(old);
	}
	size_t i = tc_hash(src, slen, key) & (t->tc_cap - 1);
	while (t->tc[i].epoch == t->tc_epoch)
		i = (i + 1) & (t->tc_cap - 1);
	t->tc[i] = (struct crs_tcache){ .src = src, .slen = slen, .epoch = t->tc_epoch, .key = key, .same = (uint8_t)same,
					.off = off, .len = (uint32_t)len, .pf = PF_NONE };
	t->tc_n++;
	return &t->tc[i];
}

/* V's bytes into tc_data: their offset. */
static uint32_t tc_keep(struct crs_txn *t, const char *v, size_t vl)
{
	uint32_t off = (uint32_t)t->tc_data.len;
	buf_append(&t->tc_data, v, vl);
	buf_append(&t->tc_data, "", 1);  /* never an empty buffer, and a NUL after each */
	return off;
}

/* VALUE's features (sectfn_features), looked for once per phase: the
 * values of a request go through some twenty chains, most of whose steps
 * leave them as they are. Kept under key TC_INFO, OFF holding them. */
uint32_t crscache_features(struct crs_txn *t, const char *value, size_t vlen)
{
	const struct crs_tcache *e = crscache_find(t, value, (uint32_t)vlen, TC_INFO);
	if (e)
		return e->off;
	uint32_t f = sectfn_features(value, vlen);
	(void)tc_put(t, value, (uint32_t)vlen, TC_INFO, f, 0, 0);
	return f;
}

/* VALUE through LINK's chain, into the cache: a walk (crscache_step) to
 * the chain's end, so steps that cannot change it are skipped and the
 * others' results are shared with every chain that reaches the same
 * sequence of effective steps. */
struct crs_tcache *crscache_transform(struct crs_txn *t, const struct crs_rule *link, const char *value, size_t vlen)
{
	if (link->ntfn == 0)
		return tc_put(t, value, (uint32_t)vlen, TC_CHAIN(link->chain), 0, vlen, 1);
	struct crs_walk w;
	crscache_walk_start(t, &w, value, vlen);
	for (int k = 0; k < link->ntfn; k++)
		(void)crscache_step(t, &w, (enum sl_tfn)link->tfn[k]);
	if (w.v == value)
		return tc_put(t, value, (uint32_t)vlen, TC_CHAIN(link->chain), 0, w.vl, 1);
	/* a step's result the walk kept is in tc_data already; a result past
	 * SEQ_MAX steps is only in val[] */
	int kept = w.v >= t->tc_data.data && w.v < t->tc_data.data + t->tc_data.len;
	uint32_t off = kept ? (uint32_t)(w.v - t->tc_data.data) : tc_keep(t, w.v, w.vl);
	return tc_put(t, value, (uint32_t)vlen, TC_CHAIN(link->chain), off, w.vl, 0);
}

int crscache_step(struct crs_txn *t, struct crs_walk *w, enum sl_tfn step)
{
	const char *in = w->v;
	size_t inl = w->vl;
	if (in == w->value ? sectfn_unchanged_f(step, w->feat) : sectfn_unchanged(step, in, inl))
		return 0;
	if (w->nseq >= 0 && w->nseq < SEQ_MAX) {
		w->seq = w->seq << 6 | (uint64_t)(step + 1);
		w->nseq++;
		const struct crs_tcache *done = crscache_find(t, w->value, (uint32_t)w->vlen, w->seq);
		if (done) {
			w->v = t->tc_data.data + done->off;
			w->vl = done->len;
			return done->changed;
		}
	} else {
		w->nseq = -1;
	}
	struct buf *out = &t->val[w->cur];
	int changed = sectfn_apply(step, in, inl, out);
	w->v = out->data ? out->data : "";
	w->vl = out->len;
	w->cur ^= 1;
	if (w->nseq > 0) {
		uint32_t off = tc_keep(t, w->v, w->vl);
		tc_put(t, w->value, (uint32_t)w->vlen, w->seq, off, w->vl, 0)->changed = (uint8_t)changed;
		w->v = t->tc_data.data + off;
	}
	return changed;
}

struct pf_scan_ctx {
	uint64_t *bits;
	const uint16_t *bit;
};

static int pf_hit(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
	(void)from, (void)to, (void)flags;
	const struct pf_scan_ctx *c = ctx;
	unsigned b = c->bit[id];
	c->bits[b >> 6] |= 1ull << (b & 63);
	return 0;
}

/* WORDS zeroed words in pf_bits: their offset (pf_bits may move). */
static uint32_t pf_alloc(struct crs_txn *t, size_t words)
{
	if (t->pf_n + words > t->pf_cap) {
		t->pf_cap = (t->pf_n + words) * 2;
		t->pf_bits = realloc(t->pf_bits, t->pf_cap * sizeof(*t->pf_bits));
		AN(t->pf_bits);
	}
	uint32_t off = (uint32_t)t->pf_n;
	memset(t->pf_bits + off, 0, words * sizeof(*t->pf_bits));
	t->pf_n += words;
	return off;
}

/* Chains with up to this many one-byte literals look for each with memchr
 * (vectorised, and most stop early); the others read the value's set of
 * bytes, made once per value and shared by the chains that see it. */
#define ONEBYTE_SEARCHED 6

static void byteset(const char *v, size_t vl, uint64_t set[4])
{
	/* four sets filled in turn, OR'ed at the end: neighbouring bytes mostly
	 * fall in the same word, and with one set each would wait for the
	 * store of the one before */
	uint64_t s0[4] = { 0 }, s1[4] = { 0 }, s2[4] = { 0 }, s3[4] = { 0 };
	const unsigned char *p = (const unsigned char *)v;
	size_t i = 0;
	for (; i + 4 <= vl; i += 4) {
		unsigned a = p[i], b = p[i + 1], c = p[i + 2], d = p[i + 3];
		s0[a >> 6] |= 1ull << (a & 63);
		s1[b >> 6] |= 1ull << (b & 63);
		s2[c >> 6] |= 1ull << (c & 63);
		s3[d >> 6] |= 1ull << (d & 63);
	}
	for (; i < vl; i++)
		s0[p[i] >> 6] |= 1ull << (p[i] & 63);
	for (int w = 0; w < 4; w++)
		set[w] = s0[w] | s1[w] | s2[w] | s3[w];
}

/* The set of bytes of a cached value, made once per phase (TC_BYTES): the
 * value itself (SAME, at SRC) or its transformed bytes at OFF in tc_data,
 * which many chains share. Its offset in pf_bits. Adds an entry. */
static uint32_t value_bytes(struct crs_txn *t, const char *src, uint32_t off, uint32_t len, int same)
{
	const char *where = same ? src : NULL;
	uint64_t key = same ? TC_BYTES : TC_BYTES | off;
	const struct crs_tcache *e = crscache_find(t, where, len, key);
	if (e)
		return e->off;
	uint32_t at = pf_alloc(t, 4);
	byteset(same ? src : t->tc_data.data + off, len, t->pf_bits + at);
	(void)tc_put(t, where, len, key, at, 0, 0);
	return at;
}

/* The value holds PF's one-byte literal K: its rules' bits. */
static inline void one_byte_hit(const struct crs_prefilter *pf, uint64_t *bits, unsigned k)
{
	for (unsigned i = pf->one[k].first, end = i + pf->one[k].n; i < end; i++)
		bits[pf->one_bits[i] >> 6] |= 1ull << (pf->one_bits[i] & 63);
}

/* The prefilter bits of PF's literals in a cached value (value_bytes says
 * which), into pf_bits. Adds entries. */
static uint32_t pf_scan(struct crs_txn *t, const struct crs_prefilter *pf, const char *src, uint32_t voff, uint32_t vl,
			int same)
{
	const char *v = same ? src : t->tc_data.data + voff;
	/* a few bytes: one memchr each; more: the value's set of bytes */
	uint32_t have = pf->none > ONEBYTE_SEARCHED ? value_bytes(t, src, voff, vl, same) : PF_NONE;
	size_t words = (pf->nbits + 63) / 64;
	uint32_t off = pf_alloc(t, words);
	uint64_t *bits = t->pf_bits + off;
	struct pf_scan_ctx c = { bits, pf->bit };
	/* A failed scan must not rule anything out (a group's union would skip
	 * whole rules): every bit set, every rule's operator decides. */
	if (pf->hs && hs_scan(pf->hs, vl ? v : "", (unsigned)vl, 0, t->hs_scratch, pf_hit, &c) != HS_SUCCESS)
		memset(bits, 0xff, words * sizeof(*bits));
	if (have == PF_NONE) {
		for (unsigned k = 0; k < pf->none; k++)
			if (vl && memchr(v, (int)pf->one[k].byte, vl))
				one_byte_hit(pf, bits, k);
		return off;
	}
	/* the chain's bytes the value holds, one word of the set at a time */
	for (unsigned w = 0; w < 4; w++)
		for (uint64_t m = t->pf_bits[have + w] & pf->one_mask[w]; m; m &= m - 1)
			one_byte_hit(pf, bits, pf->one_at[w * 64 + (unsigned)__builtin_ctzll(m)]);
	return off;
}

/* The prefilter bits (PF's, chain CHAIN's) of its cached value E: their
 * offset in pf_bits, scanned the first time and kept with E. */
static inline uint32_t entry_bits(struct crs_txn *t, const struct crs_prefilter *pf, unsigned chain,
				  struct crs_tcache *e)
{
	if (e->pf != PF_NONE)
		return e->pf;
	const char *src = e->src;
	uint32_t slen = e->slen;
	size_t cap = t->tc_cap;
	uint32_t at = pf_scan(t, pf, e->src, e->off, e->len, e->same);
	if (t->tc_cap != cap)  /* the scan's entries grew the table: E moved (it stays put otherwise) */
		e = crscache_find(t, src, slen, TC_CHAIN(chain));
	e->pf = at;
	return at;
}

/* Whether LINK's regex can match the cached value E at all: its chain's
 * literals, scanned once per value (the bits kept with E). */
int crscache_pf_may_match(struct crs_txn *t, const struct crs_rule *link, struct crs_tcache *e, uint32_t *at)
{
	*at = entry_bits(t, &t->prog->pf[link->chain], link->chain, e);
	return crscache_has_bit(t, *at, link->prefilter);
}

int crscache_clear(struct crs_txn *t)
{
	int wrapped = 0;
	if (++t->tc_epoch == 0) {  /* wrapped: the stale entries could look current */
		if (t->tc)
			memset(t->tc, 0, t->tc_cap * sizeof(*t->tc));
		if (t->grp)
			memset(t->grp, 0, t->grp_cap * sizeof(*t->grp));
		t->tc_epoch = 1;
		wrapped = 1;
	}
	t->tc_n = 0;
	t->tc_data.len = 0;
	t->pf_n = 0;
	t->grp_view_n = 0;
	return wrapped;
}

void crscache_begin(struct crs_txn *t, const struct crs_program *p)
{
	if (p->npf_groups <= t->grp_cap)
		return;
	t->grp = realloc(t->grp, p->npf_groups * sizeof(*t->grp));
	AN(t->grp);
	memset(t->grp + t->grp_cap, 0, (p->npf_groups - t->grp_cap) * sizeof(*t->grp));
	t->grp_cap = p->npf_groups;
}

const struct crs_pfgroup *crscache_group(struct crs_txn *t, const struct crs_rule *link, const struct crs_target *tg,
					 size_t ntg)
{
	struct crs_pfgroup *g = &t->grp[link->pf_group - 1u];
	if (g->epoch == t->tc_epoch)
		return g;
	for (size_t i = 0; i < ntg; i++)
		if (!tg[i].stable)
			return NULL;  /* not expected: a group's variables are the request's */
	if (t->grp_view_n + ntg > t->grp_view_cap) {
		t->grp_view_cap = (t->grp_view_n + ntg) * 2;
		t->grp_view = realloc(t->grp_view, t->grp_view_cap * sizeof(*t->grp_view));
		AN(t->grp_view);
	}
	const struct crs_prefilter *pf = &t->prog->pf[link->chain];
	size_t words = (pf->nbits + 63) / 64;
	uint32_t view = (uint32_t)t->grp_view_n, uni = pf_alloc(t, words);
	t->grp_view_n += ntg;
	for (size_t i = 0; i < ntg; i++) {
		struct crs_tcache *e = crscache_find(t, tg[i].value, tg[i].vlen, TC_CHAIN(link->chain));
		if (!e)
			e = crscache_transform(t, link, tg[i].value, tg[i].vlen);
		uint32_t at = entry_bits(t, pf, link->chain, e);
		t->grp_view[view + i] = at;
		for (size_t w = 0; w < words; w++)
			t->pf_bits[uni + w] |= t->pf_bits[at + w];
	}
	*g = (struct crs_pfgroup){ .epoch = t->tc_epoch, .uni = uni, .view = view, .n = (uint32_t)ntg };
	return g;
}
