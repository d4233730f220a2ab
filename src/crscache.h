/* The CRS engine's per-phase caches (crseval.h): a value's result through
 * a transformation chain, and the prefilter bits of its chain's literal
 * scan (crsprog.h, struct crs_prefilter), kept for the phase.
 *
 * Prefilter groups: the rules that share a target list and a chain
 * (crs_rule.pf_group) look at the same transformed values and read their
 * bits from the same scans. The first of them to run in a phase records
 * each value's bits and their union; the others then test their bit in the
 * union — a rule none of whose values has it cannot match, and costs a
 * test instead of a pass over its values — and otherwise visit only the
 * values that have it. Internal to the engine: it shares struct crs_txn's
 * cache fields with crseval.c. */
#ifndef SLUICE_CRSCACHE_H
#define SLUICE_CRSCACHE_H

#include <stddef.h>
#include <stdint.h>
#include "crseval.h"

/* One value of a rule's target list. Its name, "VNAME:key" or "VNAME", is
 * put together only when something reads it (a match, a ctl exclusion):
 * the parts stay where they are. A value and key that rules may change
 * (TX, MATCHED_VARS) are copies in the list's buffer. */
struct crs_target {
	const char *vname;         /* the variable's name (static) */
	const char *key;           /* the member's name; NULL for a scalar */
	const char *value;
	uint32_t klen, vlen;
	uint32_t koff, voff;       /* while the list is built: a copied key's and value's place */
	uint8_t vnlen;
	uint8_t stable;            /* the value stays where it is for the phase (cacheable) */
};

/* Keys of the transformation cache, per value: a chain's result (with its
 * prefilter bits), or the result of a sequence of steps that changed the
 * value (up to SEQ_MAX of them, 6 bits each: exact, no collision), which
 * chains that differ only by steps without effect share. */
#define TC_CHAIN(c) (1ull << 63 | (c))
#define SEQ_MAX 10
#define TC_INFO 0                  /* the value's own features (no step sequence is 0) */
#define TC_BYTES (1ull << 62)      /* the set of its bytes, 4 words in pf_bits at OFF (no step
				    * sequence reaches bit 62); a transformed value's: src NULL,
				    * key TC_BYTES | its offset in tc_data */

struct crs_tcache {
	const char *src;           /* the value's place (stable for the phase) */
	uint32_t slen, epoch;
	uint64_t key;              /* TC_CHAIN(chain), or a step sequence */
	uint8_t same;              /* no step changed it: the result is the value itself */
	uint8_t changed;           /* a step sequence's: its last step said it changed the value */
	uint32_t off, len;         /* the result, in tc_data */
	uint32_t pf;               /* its prefilter bits in pf_bits, PF_NONE before the scan */
};

#define PF_NONE UINT32_MAX

/* A prefilter group's record for one phase. */
struct crs_pfgroup {
	uint32_t epoch;            /* the phase (tc_epoch) it was filled in; another: not filled */
	uint32_t uni;              /* the union of its values' bits, in pf_bits */
	uint32_t view;             /* each value's bits (as an offset in pf_bits), in grp_view */
	uint32_t n;                /* how many values */
};

/* The cached entry of value SRC (SLEN bytes) under KEY, or NULL. The
 * pointer is valid until the next entry is added. */
struct crs_tcache *crscache_find(struct crs_txn *t, const char *src, uint32_t slen, uint64_t key);

/* Value V (stable for the phase) through LINK's chain, into the cache. */
struct crs_tcache *crscache_transform(struct crs_txn *t, const struct crs_rule *link, const char *v, size_t vl);

/* Whether LINK's operator can match the cached value E at all: its
 * chain's literals, scanned once per value (the bits kept with E, their
 * offset in pf_bits put in *AT). May add entries: E and other entry
 * pointers go stale. */
int crscache_pf_may_match(struct crs_txn *t, const struct crs_rule *link, struct crs_tcache *e, uint32_t *at);

/* VALUE's features (sectfn_features), cached for the phase. */
uint32_t crscache_features(struct crs_txn *t, const char *value, size_t vlen);

/* A walk of a value (stable for the phase) through a chain one step at a
 * time, for multiMatch, whose operator looks at every value a step made:
 * steps that cannot change the value are passed over without a copy, and
 * the results of the others are shared through the cache with every chain
 * and walk that took the same steps (crscache_transform's keys). */
struct crs_walk {
	const char *value;         /* the walk's start */
	size_t vlen;
	uint32_t feat;             /* crscache_features(value) */
	const char *v;             /* the current result (in value, tc_data or val[]) */
	size_t vl;
	uint64_t seq;
	int nseq, cur;
};
static inline void crscache_walk_start(struct crs_txn *t, struct crs_walk *w, const char *value, size_t vlen)
{
	*w = (struct crs_walk){ .value = value, .vlen = vlen, .feat = crscache_features(t, value, vlen),
				.v = value, .vl = vlen };
}
/* STEP applied to W's current result: 1 when it changed it (W then holds
 * the new one), 0 when not. */
int crscache_step(struct crs_txn *t, struct crs_walk *w, enum sl_tfn step);

/* A new phase: every entry and group record goes stale. Returns 1 when
 * the epoch wrapped (the caller's own epoch-tagged records must be reset). */
int crscache_clear(struct crs_txn *t);

/* Before evaluating with P: room for P's group records. */
void crscache_begin(struct crs_txn *t, const struct crs_program *p);

/* LINK's group record for this phase, filled from TG[0..NTG) (LINK's
 * target list) if it was not yet: every value transformed and scanned, as
 * LINK's own pass would have done. NULL when the list holds a value that
 * cannot be cached (the caller then takes the ordinary way). */
const struct crs_pfgroup *crscache_group(struct crs_txn *t, const struct crs_rule *link, const struct crs_target *tg,
					 size_t ntg);

/* Whether BITS (an offset in pf_bits) has prefilter bit PREFILTER - 1
 * (crs_rule.prefilter, crs_gate.prefilter). */
static inline int crscache_has_bit(const struct crs_txn *t, uint32_t bits, unsigned prefilter)
{
	unsigned bit = prefilter - 1u;
	return (t->pf_bits[bits + (bit >> 6)] >> (bit & 63)) & 1;
}

/* 1 when the rule of gate G (not negated, in a group) certainly matches
 * no value in this phase: its group was filled and no value has its bit.
 * 0 when it may match, or nothing is known yet. */
static inline int crscache_group_rules_out(const struct crs_txn *t, const struct crs_gate *g)
{
	if (!g->pf_group || g->negated)
		return 0;
	const struct crs_pfgroup *grp = &t->grp[g->pf_group - 1u];
	return grp->epoch == t->tc_epoch && !crscache_has_bit(t, grp->uni, g->prefilter);
}

#endif
