/* Load-balancing arithmetic, pure: smooth weighted round-robin, least
 * connections relative to weight, and slow start's ramp. upstream.c decides
 * which servers are eligible and whether one can take a request; this module
 * only says which eligible one comes next.
 *
 * Weights here are scaled by LB_SCALE so that a ramp has steps even for a
 * server of configured weight 1 (HAProxy scales its weights the same way). */
#ifndef SLUICE_LB_H
#define SLUICE_LB_H

#include <stdint.h>

#define LB_SCALE 16
#define LB_MAX_PEERS 256

/* FULL ramped over SLOW_MS since SINCE_MS: FULL * elapsed / SLOW_MS, at least
 * 1 while FULL > 0. FULL when there is no ramp (SLOW_MS or SINCE_MS is 0) or
 * it is over. */
uint32_t lb_ramp(uint32_t full, uint64_t since_ms, uint64_t now_ms, uint32_t slow_ms);

/* Smooth weighted round-robin (nginx's): each round adds every eligible
 * peer's weight W[i] (0 = not eligible) to its current weight CW[i]; the
 * largest CW[i] goes next and gives back the round's total. Over any run of
 * sum(W) picks each peer gets exactly W[i], interleaved rather than in
 * bursts. The caller may skip a peer that cannot take the request and ask
 * for the next best of the same round. */
struct lb_round {
	int64_t total;
	uint64_t skip[LB_MAX_PEERS / 64];
};
void lb_swrr_begin(struct lb_round *r, int64_t *cw, const uint32_t *w, unsigned n);
/* The best eligible peer not skipped yet, marked skipped; -1 when none is left. */
int lb_swrr_next(struct lb_round *r, const int64_t *cw, const uint32_t *w, unsigned n);
/* Peer I takes the request: the round is over. */
void lb_swrr_commit(const struct lb_round *r, int64_t *cw, unsigned i);
/* Nobody could take it: the round leaves no trace. */
void lb_swrr_undo(const struct lb_round *r, int64_t *cw, const uint32_t *w, unsigned n);

/* 1 when a peer with BUSY_A requests in flight and weight W_A is the better
 * choice for one more than one with BUSY_B and W_B: fewer requests per unit
 * of weight once this one is added. Weights must be > 0. */
static inline int lb_lc_better(uint32_t busy_a, uint32_t w_a, uint32_t busy_b, uint32_t w_b)
{
	return ((uint64_t)busy_a + 1) * w_b < ((uint64_t)busy_b + 1) * w_a;
}

#endif
