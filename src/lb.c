/* Load-balancing arithmetic (lb.h). Calls nothing. */
#include <string.h>
#include "lb.h"

uint32_t lb_ramp(uint32_t full, uint64_t since_ms, uint64_t now_ms, uint32_t slow_ms)
{
	if (full == 0 || slow_ms == 0 || since_ms == 0 || now_ms >= since_ms + slow_ms)
		return full;
	uint64_t elapsed = now_ms > since_ms ? now_ms - since_ms : 0;
	uint64_t v = (uint64_t)full * elapsed / slow_ms;
	return v ? (uint32_t)v : 1;
}

void lb_swrr_begin(struct lb_round *r, int64_t *cw, const uint32_t *w, unsigned n)
{
	memset(r->skip, 0, sizeof(r->skip));
	r->total = 0;
	for (unsigned i = 0; i < n; i++) {
		cw[i] += w[i];
		r->total += w[i];
	}
}

int lb_swrr_next(struct lb_round *r, const int64_t *cw, const uint32_t *w, unsigned n)
{
	int best = -1;
	for (unsigned i = 0; i < n; i++) {
		if (w[i] == 0 || (r->skip[i / 64] >> (i % 64) & 1))
			continue;
		if (best < 0 || cw[i] > cw[best])
			best = (int)i;
	}
	if (best >= 0)
		r->skip[best / 64] |= 1ull << (best % 64);
	return best;
}

void lb_swrr_commit(const struct lb_round *r, int64_t *cw, unsigned i)
{
	cw[i] -= r->total;
}

void lb_swrr_undo(const struct lb_round *r, int64_t *cw, const uint32_t *w, unsigned n)
{
	(void)r;
	for (unsigned i = 0; i < n; i++)
		cw[i] -= w[i];
}
