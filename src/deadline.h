/* Deadlines of many objects on one libuv timer: a binary min-heap of
 * embedded 16-byte nodes, so an object needs no uv_timer_t (152 bytes) of
 * its own. Same clock and semantics as libuv timers: due = uv_now() + ms,
 * fired from the loop once the loop time has reached it. No allocation
 * once the heap array has grown to the peak number of armed deadlines. */
#ifndef SLUICE_DEADLINE_H
#define SLUICE_DEADLINE_H

#include <stdint.h>
#include <uv.h>

struct deadline {
	uint64_t due;           /* heap key: loop time (ms) */
	uint32_t idx;           /* position in the heap, 1-based; 0 = not armed */
	uint32_t later;         /* ms the real deadline lies beyond due (see deadline_set) */
};

struct deadline_heap {
	struct deadline **v;    /* v[1..n] */
	uint32_t n, cap;
	uv_timer_t timer;
	uint64_t timer_due;     /* when the timer fires (loop time); 0: not set */
	uv_loop_t *loop;
	void (*fire)(struct deadline *d);
};

void deadline_heap_init(struct deadline_heap *h, uv_loop_t *loop, void (*fire)(struct deadline *d));
/* Arm D to fire in MS milliseconds (re-arming moves it); MS 0 disarms.
 * FIRE runs with D already disarmed, so it may arm D again. */
void deadline_set(struct deadline_heap *h, struct deadline *d, uint64_t ms);
static inline int deadline_armed(const struct deadline *d) { return d->idx != 0; }

#endif
