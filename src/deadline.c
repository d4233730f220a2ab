#include <stdlib.h>
#include "deadline.h"
#include "util.h"

static void place(struct deadline_heap *h, uint32_t i, struct deadline *d)
{
	h->v[i] = d;
	d->idx = i;
}

static void sift_up(struct deadline_heap *h, uint32_t i)
{
	struct deadline *d = h->v[i];
	while (i > 1 && h->v[i / 2]->due > d->due) {
		place(h, i, h->v[i / 2]);
		i /= 2;
	}
	place(h, i, d);
}

static void sift_down(struct deadline_heap *h, uint32_t i)
{
	struct deadline *d = h->v[i];
	for (;;) {
		uint32_t c = i * 2;
		if (c > h->n)
			break;
		if (c + 1 <= h->n && h->v[c + 1]->due < h->v[c]->due)
			c++;
		if (h->v[c]->due >= d->due)
			break;
		place(h, i, h->v[c]);
		i = c;
	}
	place(h, i, d);
}

static void heap_remove(struct deadline_heap *h, struct deadline *d)
{
	uint32_t i = d->idx;
	struct deadline *last = h->v[h->n--];
	d->idx = 0;
	if (last == d)
		return;
	place(h, i, last);
	if (i > 1 && h->v[i / 2]->due > last->due)
		sift_up(h, i);
	else
		sift_down(h, i);
}

static void timer_cb(uv_timer_t *t);

/* The libuv timer fires no later than the earliest deadline. It is moved
 * only when that deadline comes sooner than the timer: a deadline pushed
 * back (every request pushes its connection's) leaves it alone, and at
 * worst it fires early once, fires nothing and is set again. */
static void rearm(struct deadline_heap *h)
{
	if (h->n == 0) {
		uv_timer_stop(&h->timer);
		h->timer_due = 0;
		return;
	}
	uint64_t now = uv_now(h->loop), due = h->v[1]->due;
	if (h->timer_due && h->timer_due <= due)
		return;
	h->timer_due = due;
	uv_timer_start(&h->timer, timer_cb, due > now ? due - now : 0, 0);
}

static void timer_cb(uv_timer_t *t)
{
	struct deadline_heap *h = t->data;
	uint64_t now = uv_now(h->loop);
	h->timer_due = 0;
	while (h->n > 0 && h->v[1]->due <= now) {
		struct deadline *d = h->v[1];
		if (d->later) {
			d->due += d->later;
			d->later = 0;
			sift_down(h, 1);
			continue;
		}
		heap_remove(h, d);
		h->fire(d);
	}
	rearm(h);
}

void deadline_heap_init(struct deadline_heap *h, uv_loop_t *loop, void (*fire)(struct deadline *d))
{
	h->v = NULL;
	h->n = h->cap = 0;
	h->loop = loop;
	h->fire = fire;
	h->timer_due = 0;
	uv_timer_init(loop, &h->timer);
	h->timer.data = h;
}

/* Most re-arms push a deadline back (activity on a connection or stream
 * renews its timeout), many of them to the same millisecond. A push back
 * only notes how much later the deadline now is; the heap moves the node
 * when its old key comes up, once, instead of on every re-arm. Bringing a
 * deadline forward sifts it up in place. */
void deadline_set(struct deadline_heap *h, struct deadline *d, uint64_t ms)
{
	if (ms == 0) {
		if (d->idx) {
			int was_first = d->idx == 1;
			heap_remove(h, d);
			if (was_first && h->n == 0)
				rearm(h);  /* nothing left to wait for */
		}
		return;
	}
	uint64_t due = uv_now(h->loop) + ms;
	if (d->idx) {
		if (due >= d->due && due - d->due <= UINT32_MAX) {
			d->later = (uint32_t)(due - d->due);
			return;
		}
		d->later = 0;
		if (due < d->due) {
			d->due = due;
			sift_up(h, d->idx);
		} else {
			d->due = due;
			sift_down(h, d->idx);
		}
		if (d->idx == 1)
			rearm(h);
		return;
	}
	if (h->n + 1 >= h->cap) {
		uint32_t cap = h->cap ? h->cap * 2 : 1024;
		struct deadline **v = realloc(h->v, cap * sizeof(*v));
		AN(v);
		h->v = v;
		h->cap = cap;
	}
	d->due = due;
	d->later = 0;
	place(h, ++h->n, d);
	sift_up(h, h->n);
	if (d->idx == 1)
		rearm(h);
}
