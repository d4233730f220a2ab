/* Unit test for src/ratelimit.c: the rate parser, GCRA arithmetic (a
 * burst at once, the boundary, the refill, Retry-After rounding), and the
 * instance-wide table: exact under concurrent deciders (threads on one
 * table, as workers share one mapping), reuse of entries whose TAT is past
 * (no eviction), eviction of the smallest TAT when a window is full, and
 * separate buckets for separate keys. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ratelimit.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static void test_parse(void)
{
	uint64_t iv = 0;
	uint32_t n = 0;
	const char *why = NULL;
	CHECK(ratelimit_parse_rate("100/s", &iv, &n, &why) == 0 && iv == 10000 && n == 100);
	CHECK(ratelimit_parse_rate("6000/m", &iv, &n, &why) == 0 && iv == 10000 && n == 6000);
	CHECK(ratelimit_parse_rate("10/h", &iv, &n, &why) == 0 && iv == 360000000ull && n == 10);
	CHECK(ratelimit_parse_rate("3", &iv, &n, &why) == 0 && iv == 333333 && n == 3);
	CHECK(ratelimit_parse_rate("1000000/s", &iv, &n, &why) == 0 && iv == 1);
	CHECK(ratelimit_parse_rate("1000001/s", &iv, &n, &why) == -1 && strstr(why, "1000000"));
	CHECK(ratelimit_parse_rate("0/s", &iv, &n, &why) == -1);
	CHECK(ratelimit_parse_rate("10/d", &iv, &n, &why) == -1 && strstr(why, "s, m or h"));
	CHECK(ratelimit_parse_rate("", &iv, &n, &why) == -1);
	CHECK(ratelimit_parse_rate("/s", &iv, &n, &why) == -1);
	CHECK(ratelimit_parse_rate("10/", &iv, &n, &why) == -1);
	CHECK(ratelimit_parse_rate("10 /s", &iv, &n, &why) == -1);
	CHECK(ratelimit_parse_rate("99999999999999999999/s", &iv, &n, &why) == -1);
}

static void test_gcra(void)
{
	const uint64_t T = 100000, B = 5, tau = (B - 1) * T;  /* 10/s, burst 5 */
	uint64_t tat = 0, nt = 0, retry = 0, now = 1000000;
	unsigned ok = 0;
	for (int i = 0; i < 8; i++)
		if (ratelimit_gcra(tat, now, T, tau, &nt, &retry)) {
			ok++;
			tat = nt;
		}
	CHECK(ok == B);                        /* exactly the burst at once */
	CHECK(retry == T);                     /* the next token in one interval */
	CHECK(!ratelimit_gcra(tat, now + T - 1, T, tau, &nt, &retry) && retry == 1);
	CHECK(ratelimit_gcra(tat, now + T, T, tau, &nt, &retry));
	tat = nt;
	CHECK(!ratelimit_gcra(tat, now + T, T, tau, &nt, &retry));   /* only one came back */
	/* idle long enough: a full bucket again, the same as never seen */
	CHECK(ratelimit_gcra(tat, now + 100 * T, T, tau, &nt, &retry) && nt == now + 101 * T);
	/* burst 1: strictly one per interval */
	tat = 0;
	CHECK(ratelimit_gcra(tat, now, T, 0, &nt, &retry));
	tat = nt;
	CHECK(!ratelimit_gcra(tat, now, T, 0, &nt, &retry) && retry == T);
	CHECK(ratelimit_retry_s(1) == 1 && ratelimit_retry_s(999999) == 1 && ratelimit_retry_s(1000000) == 1 &&
	      ratelimit_retry_s(1000001) == 2 && ratelimit_retry_s(0) == 1 && ratelimit_retry_s(6000000) == 6);
}

static struct rl_table *new_table(uint32_t n, void **mem)
{
	*mem = calloc(1, ratelimit_table_size(n));
	return ratelimit_table_at(*mem, n, 1000);
}

static void test_table_basic(void)
{
	void *mem;
	struct rl_table *t = new_table(1024, &mem);
	uint64_t retry = 0, now = 5000000, T = 1000000;
	unsigned a = 0, b = 0;
	for (int i = 0; i < 10; i++) {
		a += ratelimit_table_decide(t, 0, 0x1111, now, T, 3, &retry);
		b += ratelimit_table_decide(t, 0, 0x2222, now, T, 2, &retry);
	}
	CHECK(a == 3 && b == 2);               /* one bucket per key */
	CHECK(!ratelimit_table_decide(t, 0, 0x1111, now, T, 3, &retry) && retry == T);
	CHECK(ratelimit_table_decide(t, 0, 0x1111, now + T, T, 3, &retry));
	CHECK(ratelimit_table_decide(t, 0, 0, now, T, 1, &retry));   /* hash 0 is a key like another */
	CHECK(!ratelimit_table_decide(t, 0, 0, now, T, 1, &retry));
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 0);
	free(mem);
}

/* Keys that all share one home (a multiple of the table size apart), with
 * distinct high bits as real hashes have (the entry's tag is taken there:
 * two keys of one window with the same 16-bit tag, 1 in 65536, would let
 * an evicting newcomer inherit the evicted key's TAT). */
static uint64_t same_home(unsigned i, uint32_t n)
{
	return (uint64_t)n * (i + 1) + 7 + ((uint64_t)(i + 1) << 50);
}

static void test_table_full_window(void)
{
	const uint32_t n = 64;
	void *mem;
	struct rl_table *t = new_table(n, &mem);
	uint64_t retry = 0, now = 10000000, T = 1000000;
	/* fill the window: key i made its request at now + i, so key 0 has
	 * the smallest TAT */
	for (unsigned i = 0; i < RL_WINDOW; i++)
		CHECK(ratelimit_table_decide(t, 0, same_home(i, n), now + i, T, 1, &retry));
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 0);
	/* a newcomer: the smallest TAT (key 0) goes, counted */
	CHECK(ratelimit_table_decide(t, 0, same_home(100, n), now + 10, T, 1, &retry));
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 1);
	for (unsigned i = 1; i < RL_WINDOW; i++)   /* the others keep their state */
		CHECK(!ratelimit_table_decide(t, 0, same_home(i, n), now + 20, T, 1, &retry));
	/* key 0 starts afresh: allowed (its debt forgiven) */
	CHECK(ratelimit_table_decide(t, 0, same_home(0, n), now + 30, T, 1, &retry));
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 2);
	/* later, every TAT is past: newcomers reuse entries, no eviction */
	uint64_t later = now + 10 * T;
	for (unsigned i = 200; i < 200 + RL_WINDOW; i++)
		CHECK(ratelimit_table_decide(t, 0, same_home(i, n), later, T, 1, &retry));
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 2);
	for (unsigned i = 200; i < 200 + RL_WINDOW; i++)
		CHECK(!ratelimit_table_decide(t, 0, same_home(i, n), later, T, 1, &retry));
	free(mem);
}

/* Deciders on one table at once, as the workers of an instance: with no
 * refill during the run, exactly BURST pass, whoever asks. */
#define THREADS 4
#define PER_THREAD 20000
struct hammer {
	struct rl_table *t;
	int w;
	uint64_t key;
	unsigned allowed;
};

static void *hammer_run(void *arg)
{
	struct hammer *h = arg;
	uint64_t retry;
	for (int i = 0; i < PER_THREAD; i++) {
		/* one hot key and a crowd that keeps the window busy */
		h->allowed += ratelimit_table_decide(h->t, h->w, h->key, 2000000, 1000000000ull, 777, &retry);
		ratelimit_table_decide(h->t, h->w, (uint64_t)(i % 50) * 64 + 1000 + (uint64_t)h->w, 2000000,
				       1000000000ull, 5, &retry);
	}
	return NULL;
}

static void test_table_concurrent(void)
{
	void *mem;
	struct rl_table *t = new_table(64, &mem);
	pthread_t th[THREADS];
	struct hammer h[THREADS];
	for (int i = 0; i < THREADS; i++) {
		h[i] = (struct hammer){ t, i, 0xabcdef, 0 };
		pthread_create(&th[i], NULL, hammer_run, &h[i]);
	}
	unsigned total = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		total += h[i].allowed;
	}
	/* The crowd shares the hot key's windows on this tiny table: the hot
	 * key may be evicted (then it starts afresh), so exactness is checked
	 * without eviction in the next run. */
	if (ratelimit_table_counter(t, RLC_EVICTIONS) == 0)
		CHECK(total == 777);
	free(mem);

	t = new_table(1 << 16, &mem);
	for (int i = 0; i < THREADS; i++) {
		h[i] = (struct hammer){ t, i, 0x5eed, 0 };
		pthread_create(&th[i], NULL, hammer_run, &h[i]);
	}
	total = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		total += h[i].allowed;
	}
	CHECK(ratelimit_table_counter(t, RLC_EVICTIONS) == 0);
	CHECK(total == 777);
	free(mem);
}

int main(void)
{
	test_parse();
	test_gcra();
	test_table_basic();
	test_table_full_window();
	test_table_concurrent();
	printf("test_ratelimit: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
