/* Unit test for src/deadline.c: many deadlines on one libuv timer fire
 * once each, in due order and not before their time; re-arming moves one,
 * disarming (also of the earliest) removes it, and a fired callback may
 * arm its deadline again. */
#include <stdio.h>
#include <stdlib.h>
#include "deadline.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

#define N 2000

struct item {
	struct deadline dl;
	int fired;
	uint64_t due_at_fire, fired_at;
	int rearm;              /* arm again once from the callback */
};

static struct item items[N];
static struct deadline_heap heap;
static uv_loop_t loop;
static uint64_t last_due;
static int out_of_order, early, nfired;

static void fire(struct deadline *d)
{
	struct item *it = (struct item *)((char *)d - offsetof(struct item, dl));
	CHECK(!deadline_armed(d));
	if (d->due < last_due)
		out_of_order++;
	last_due = d->due;
	if (uv_now(&loop) < d->due)
		early++;
	it->fired++;
	nfired++;
	if (it->rearm) {
		it->rearm = 0;
		deadline_set(&heap, d, 3);
	}
}

int main(void)
{
	uv_loop_init(&loop);
	deadline_heap_init(&heap, &loop, fire);
	srand(7);
	for (int i = 0; i < N; i++)
		deadline_set(&heap, &items[i].dl, 1 + (uint64_t)(rand() % 40));
	/* re-arm some later, disarm some (the earliest among them) */
	for (int i = 0; i < N; i += 7)
		deadline_set(&heap, &items[i].dl, 45);
	struct deadline *first = heap.v[1];
	deadline_set(&heap, first, 0);
	CHECK(!deadline_armed(first));
	for (int i = 3; i < N; i += 11)
		deadline_set(&heap, &items[i].dl, 0);
	for (int i = 5; i < N; i += 13)
		items[i].rearm = 1;
	int expect = 0, rearms = 0;
	for (int i = 0; i < N; i++) {
		expect += deadline_armed(&items[i].dl);
		rearms += deadline_armed(&items[i].dl) && items[i].rearm;
	}
	uv_run(&loop, UV_RUN_DEFAULT);   /* returns once nothing is armed */
	CHECK(nfired == expect + rearms);
	CHECK(early == 0);
	CHECK(heap.n == 0);
	/* Disarmed ones never fired; re-armed-from-the-callback ones fired twice. */
	int counts_ok = 1;
	for (int i = 0; i < N; i++) {
		int disarmed = i % 11 == 3 || &items[i].dl == first;
		int want = disarmed ? 0 : i % 13 == 5 ? 2 : 1;
		counts_ok &= items[i].fired == want;
	}
	CHECK(counts_ok);
	/* Due order, except that a deadline re-armed in a callback (3 ms after
	 * its pass) may come due before others armed for later. */
	CHECK(out_of_order <= rearms);

	/* Pushed back many times (kept lazily), brought forward below the heap
	 * key or between the key and the real deadline: each fires once, never
	 * before its last deadline, in the order of the last deadlines. */
	uint64_t base = uv_now(&loop), want_due[N];
	last_due = 0, out_of_order = early = nfired = 0;
	for (int i = 0; i < N; i++) {
		items[i].fired = items[i].rearm = 0;
		uint64_t ms = 5 + (uint64_t)(rand() % 10);
		deadline_set(&heap, &items[i].dl, ms);
		for (int k = 0; k < i % 5; k++) {
			ms += 1 + (uint64_t)(rand() % 7);
			deadline_set(&heap, &items[i].dl, ms);
		}
		if (i % 17 == 0)
			ms = 1 + (uint64_t)(rand() % 4);        /* below the key */
		else if (i % 19 == 0 && i % 5 >= 2)
			ms -= 1;                                /* between key and deadline */
		deadline_set(&heap, &items[i].dl, ms);
		want_due[i] = base + ms;
	}
	uv_run(&loop, UV_RUN_DEFAULT);
	int exact = 1;
	for (int i = 0; i < N; i++)
		exact &= items[i].fired == 1 && items[i].dl.due == want_due[i];
	CHECK(exact);
	CHECK(nfired == N);
	CHECK(early == 0);
	CHECK(out_of_order == 0);
	CHECK(heap.n == 0);
	uv_close((uv_handle_t *)&heap.timer, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	CHECK(uv_loop_close(&loop) == 0);
	free(heap.v);
	printf("test_deadline: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
