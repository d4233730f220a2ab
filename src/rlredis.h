/* The Redis store of native rate limits (ratelimit.h): one asynchronous
 * connection per worker on its libuv loop (hiredis's libuv adapter), one
 * EVALSHA of a GCRA script per decision, a per-decision deadline, and
 * reconnection with backoff. Internal to the ratelimit module. */
#ifndef SLUICE_RLREDIS_H
#define SLUICE_RLREDIS_H

#include <stdint.h>
#include <uv.h>
#include "cfg-t.h"
#include "ratelimit.h"

struct stream;

/* Connect (and keep reconnecting) to C's Redis on LOOP. */
void rlredis_start(uv_loop_t *loop, const struct cfg_redis *c);
/* Ask for a decision on key hash H of S under RL: RL_PENDING (s->rl_seq
 * set; the verdict comes through ratelimit_redis_done), or RL_STORE_DENY
 * when it cannot be asked now (no connection, too many waiting): the
 * caller applies on_store_error. */
enum rl_verdict rlredis_ask(struct stream *s, const struct cfg_rate_limit *rl, uint64_t h);
/* The verdict for SEQ is no longer wanted (its stream ended). */
void rlredis_cancel(uint64_t seq);

/* ratelimit.c: the verdict of a pending decision. OUTCOME 1 allowed, 0
 * over the limit (RETRY_US), -1 the store failed. */
void ratelimit_redis_done(struct stream *s, const struct cfg_rate_limit *rl, int outcome, uint64_t retry_us);

#endif
