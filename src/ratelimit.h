/* Native rate limits (docs/config.md "rate_limit"): a listener's or a
 * route's limit on requests per key (client address, header, cookie).
 *
 * The algorithm is GCRA, the generic cell rate algorithm: one number per
 * key, its "theoretical arrival time" (TAT), the time at which its bucket
 * will be full again. It decides exactly as a token bucket of BURST tokens
 * refilled one per INTERVAL would, with one word of state instead of two
 * (lua/rate_limit.lua's header says more). A key whose TAT is in the past
 * has a full bucket, the same as a key never seen: such an entry carries no
 * information and may be dropped or reused without changing any decision.
 *
 * Two stores:
 *  - local: a fixed-size open-addressing table in shared memory that the
 *    master maps before forking (ratelimit_init), so the limit is exact
 *    across this instance's workers; lock-free (compare-and-swap).
 *  - redis: one Redis shared by every instance (rlredis.c); one EVALSHA
 *    round trip per decision, the stream waiting in ST_LIMIT.
 *
 * Layering: the stream layer calls ratelimit_check by name; a decision
 * that completes later comes back through the callback the stream layer
 * registered (ratelimit_events_set), never to a stream that has gone:
 * stream ends call ratelimit_cancel. */
#ifndef SLUICE_RATELIMIT_H
#define SLUICE_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>
#include "cfg-t.h"

struct stream;
struct buf;

enum rl_verdict {
	RL_ALLOW,        /* forward */
	RL_DENY,         /* over the limit: 429 with Retry-After (s->rl_retry_s) */
	RL_STORE_DENY,   /* the store failed and on_store_error is deny: 503 */
	RL_PENDING,      /* asked Redis: the verdict comes through the registered callback */
};

/* Instance-wide counters (sluice_rate_limit_*; docs/observability.md). */
#define RL_COUNTERS(X) \
	X(LOCAL_ALLOW,   "local", "allow") \
	X(LOCAL_DENY,    "local", "deny") \
	X(REDIS_ALLOW,   "redis", "allow") \
	X(REDIS_DENY,    "redis", "deny") \
	X(REDIS_ERROR,   "redis", "store_error") \
	X(EVICTIONS,     "", "") \
	X(CONTENDED,     "", "") \
	X(ERR_CONNECT,   "connect", "") \
	X(ERR_TIMEOUT,   "timeout", "") \
	X(ERR_REPLY,     "reply", "") \
	X(ERR_OVERLOAD,  "overload", "") \
	X(REDIS_CONNECTS, "", "")

enum rl_counter {
#define RL_ENUM(id, a, b) RLC_##id,
	RL_COUNTERS(RL_ENUM)
#undef RL_ENUM
	RLC_N
};

/* ---- pure parts (unit tested, fuzzed through the config loader) ---- */

/* "100/s", "6000/m", "10/h" or "100" (per second) into the interval
 * between requests in microseconds, and the count written (the default
 * burst). Returns 0, or -1 with a reason in *WHY. */
int ratelimit_parse_rate(const char *s, uint64_t *interval_us, uint32_t *count, const char **why);

/* One GCRA decision at NOW for a key whose stored TAT is TAT (0 = none):
 * 1 = allowed, *NEW_TAT to store; 0 = over the limit, *RETRY_US until a
 * request would be allowed (nothing to store). TAU = (burst - 1) * interval. */
static inline int ratelimit_gcra(uint64_t tat, uint64_t now, uint64_t interval, uint64_t tau,
				 uint64_t *new_tat, uint64_t *retry_us)
{
	if (tat < now)
		tat = now;
	if (tat - now > tau) {
		*retry_us = tat - tau - now;
		return 0;
	}
	*new_tat = tat + interval;
	return 1;
}

/* Retry-After in whole seconds: rounded up, at least 1. */
static inline uint32_t ratelimit_retry_s(uint64_t retry_us)
{
	uint64_t s = (retry_us + 999999u) / 1000000u;
	return s == 0 ? 1 : s > 86400 ? 86400 : (uint32_t)s;
}

/* ---- the instance-wide table ---- */

/* An entry: the key's 64-bit hash (0 = never used) and, in one word, a
 * 16-bit tag of that hash and the TAT in microseconds since the table's
 * epoch (48 bits: 8.9 years). The tag says which key the TAT belongs to
 * while an entry changes hands. */
struct rl_entry {
	_Atomic uint64_t key;
	_Atomic uint64_t tat;
};

#define RL_WINDOW 8              /* entries probed from a key's home */
#define RL_ENTRIES_MIN 64
#define RL_ENTRIES_MAX (16u << 20)

struct rl_table;

/* Master: map the table for NENTRIES keys (limits.rate_limit_entries)
 * before any fork; it stays for the life of the master. */
int ratelimit_init(uint32_t nentries);
/* The mapping's capacity (what a reload cannot change). */
uint32_t ratelimit_capacity(void);
/* A table in memory the caller owns (unit tests): SIZE bytes at MEM. */
size_t ratelimit_table_size(uint32_t nentries);
struct rl_table *ratelimit_table_at(void *mem, uint32_t nentries, uint64_t epoch_us);
/* One decision on table T for key hash H at NOW_US (CLOCK_MONOTONIC),
 * counted in worker row W: 1 allowed, 0 denied (*RETRY_US set). */
int ratelimit_table_decide(struct rl_table *t, int w, uint64_t h, uint64_t now_us, uint64_t interval_us,
			   uint32_t burst, uint64_t *retry_us);
/* Counter C summed over every worker row. */
uint64_t ratelimit_table_counter(const struct rl_table *t, enum rl_counter c);
void ratelimit_count(int w, enum rl_counter c);

/* ---- the stream's side ---- */

/* The limit for S (its route's, else its listener's), or NULL. */
const struct cfg_rate_limit *ratelimit_select(const struct stream *s);
/* Decide for S under RL. RL_DENY sets s->rl_retry_s; RL_PENDING leaves
 * s->rl_seq set until the verdict comes (or ratelimit_cancel). */
enum rl_verdict ratelimit_check(struct stream *s, const struct cfg_rate_limit *rl);
/* S ends or leaves ST_LIMIT: a verdict still to come is dropped. Safe to
 * call twice, and for a stream that never asked. */
void ratelimit_cancel(struct stream *s);
/* What the stream layer registers: a pending verdict is in. */
void ratelimit_events_set(void (*done)(struct stream *s, enum rl_verdict v));
/* Worker: check the table's size, connect to Redis when a limit uses it
 * (kept through a drain: requests still in flight need verdicts). */
void ratelimit_worker_start(void);
/* Admin: the rate limit metrics (Prometheus text). */
void ratelimit_metrics(struct buf *out);

#endif
