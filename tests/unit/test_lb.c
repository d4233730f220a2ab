/* Unit test for src/lb.c: smooth weighted round-robin gives nginx's
 * interleaved sequences and exact shares, skipping a full peer keeps the
 * round's accounting, an undone round leaves no trace; the slow-start ramp
 * and weighted least-connections comparisons. */
#include <stdio.h>
#include <string.h>
#include "lb.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static int pick(int64_t *cw, const uint32_t *w, unsigned n)
{
	struct lb_round r;
	lb_swrr_begin(&r, cw, w, n);
	int i = lb_swrr_next(&r, cw, w, n);
	if (i >= 0)
		lb_swrr_commit(&r, cw, (unsigned)i);
	return i;
}

static void sequence(const uint32_t *w, unsigned n, unsigned len, const char *want)
{
	int64_t cw[8] = { 0 };
	char got[64];
	for (unsigned k = 0; k < len; k++)
		got[k] = (char)('a' + pick(cw, w, n));
	got[len] = '\0';
	if (strcmp(got, want) != 0)
		fprintf(stderr, "weights sequence: got %s, want %s\n", got, want);
	CHECK(strcmp(got, want) == 0);
}

int main(void)
{
	/* nginx's documented example: weights 5, 1, 1 -> a a b a c a a */
	sequence((uint32_t[]){ 5, 1, 1 }, 3, 7, "aabacaa");
	sequence((uint32_t[]){ 1, 1, 1 }, 3, 6, "abcabc");
	sequence((uint32_t[]){ 2, 1 }, 2, 6, "abaaba");
	sequence((uint32_t[]){ 3, 0, 1 }, 3, 8, "aacaaaca");  /* weight 0: never */

	/* Exact shares over sum(w) picks, for uneven weights. */
	{
		uint32_t w[5] = { 7, 3, 1, 12, 5 };
		int64_t cw[5] = { 0 };
		unsigned got[5] = { 0 };
		for (unsigned round = 0; round < 3; round++)
			for (unsigned k = 0; k < 28; k++)
				got[pick(cw, w, 5)]++;
		for (unsigned i = 0; i < 5; i++)
			CHECK(got[i] == 3 * w[i]);
		int64_t sum = 0;
		for (unsigned i = 0; i < 5; i++)
			sum += cw[i];
		CHECK(sum == 0);  /* every completed round gives back what it added */
	}

	/* A peer that cannot take the request is skipped: the next best of the
	 * same round takes it, and the weights added stay accounted. */
	{
		uint32_t w[3] = { 5, 1, 1 };
		int64_t cw[3] = { 0 };
		struct lb_round r;
		lb_swrr_begin(&r, cw, w, 3);
		CHECK(lb_swrr_next(&r, cw, w, 3) == 0);   /* a is full */
		int i = lb_swrr_next(&r, cw, w, 3);
		CHECK(i == 1);
		lb_swrr_commit(&r, cw, (unsigned)i);
		CHECK(cw[0] + cw[1] + cw[2] == 0);
		/* every peer full: undo, and the state is what it was */
		int64_t before[3] = { cw[0], cw[1], cw[2] };
		lb_swrr_begin(&r, cw, w, 3);
		CHECK(lb_swrr_next(&r, cw, w, 3) >= 0);
		CHECK(lb_swrr_next(&r, cw, w, 3) >= 0);
		CHECK(lb_swrr_next(&r, cw, w, 3) >= 0);
		CHECK(lb_swrr_next(&r, cw, w, 3) == -1);
		lb_swrr_undo(&r, cw, w, 3);
		CHECK(memcmp(before, cw, sizeof(cw)) == 0);
	}
	/* No eligible peer at all. */
	{
		uint32_t w[2] = { 0, 0 };
		int64_t cw[2] = { 0 };
		CHECK(pick(cw, w, 2) == -1);
	}

	/* Slow start. */
	CHECK(lb_ramp(160, 0, 5000, 30000) == 160);          /* never came back: no ramp */
	CHECK(lb_ramp(160, 1000, 5000, 0) == 160);           /* no slow_start */
	CHECK(lb_ramp(160, 1000, 1000, 30000) == 1);         /* just up: the least */
	CHECK(lb_ramp(160, 1000, 16000, 30000) == 80);       /* half way */
	CHECK(lb_ramp(160, 1000, 31000, 30000) == 160);      /* over */
	CHECK(lb_ramp(160, 1000, 999, 30000) == 1);          /* clock before since */
	CHECK(lb_ramp(0, 1000, 2000, 30000) == 0);           /* weight 0 stays 0 */
	CHECK(lb_ramp(32, 1000, 8500, 30000) == 8);          /* max_connections ramps the same */

	/* Weighted least connections: (busy + 1) / weight, lower wins. */
	CHECK(lb_lc_better(0, 1, 1, 1));
	CHECK(!lb_lc_better(1, 1, 1, 1));                     /* tie: keep the first */
	CHECK(lb_lc_better(2, 3, 1, 1));                      /* 3/3 < 2/1 */
	CHECK(!lb_lc_better(1, 2, 0, 1));                     /* 2/2 == 1/1 */
	CHECK(lb_lc_better(UINT32_MAX - 1, 256, UINT32_MAX - 1, 1)); /* no overflow */

	printf("test_lb: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
