/* The Lua inspection hook: one Lua 5.4 state per worker, a sandbox, a
 * guard (instruction count, time budget, memory cap) and the three phases
 * a script may define: inspect(req), inspect_response(resp, req), log(req).
 * docs/lua-api.md is the contract. */
#ifndef SLUICE_INSPECT_H
#define SLUICE_INSPECT_H

#include <stddef.h>
#include <stdint.h>
#include "proxy-t.h"

/* Largest `inspect.body` (bytes held per request). */
#define INSPECT_BODY_MAX (1u << 20)

/* Load SCRIPT in a fresh sandbox the way a worker will (memory cap
 * MEMORY_MAX) and check it defines inspect(). Returns 0, or -1 with the
 * reason (the Lua message, with file and line) in WHY. For `sluice -t`
 * and every config load. */
int inspect_script_check(const char *script, uint64_t memory_max, char *why, size_t cap);

/* Around all the checks of one config load: compiled pattern databases
 * are kept for the workers that will be forked, and those of the previous
 * load that are no longer used are freed. */
void inspect_check_begin(void);
void inspect_check_end(void);

struct worker;
/* Worker start: create the state, load the scripts of W's listeners and
 * set each listener's insp. A script that fails to load here is logged,
 * and its requests get on_error. */
void inspect_init(struct worker *w);

/* Which inspection applies to S (after its route is known): its route's
 * override, none (route inspect: off), or its listener's. */
void inspect_select(struct stream *s);
/* The hook applies to S: one was selected and the switch is on. */
int inspect_active(const struct stream *s);

/* Run inspect(req) for stream S's request (head, and body if held). Fills
 * s->insp. Returns REASON_OK to forward the request, or the reason of the
 * local answer: REASON_INSPECT_DENIED (deny or redirect; status and body
 * in s->insp) or REASON_INSPECT_ERROR (on_error: deny). */
enum reason inspect_request(struct stream *s);
/* inspect_response(resp, req), when the script has one and inspect ran. */
void inspect_response(struct stream *s);
/* log(req), when the script has one and inspect ran; then the per-tag counters. */
void inspect_finish(struct stream *s);

/* Apply the hook's header edits of one direction while writing a head:
 * HDRS' dropped-by-hook headers are marked, and the added lines appended. */
void inspect_apply_removals(const struct buf *del, struct msg *m);

/* Empty the per-request state, keeping buffer capacity. */
void inspect_txn_reset(struct txn_insp *in);
/* ... and give back capacity beyond KEEP bytes per buffer. */
void inspect_txn_trim(struct txn_insp *in, size_t keep);
void inspect_txn_free(struct txn_insp *in);


#endif
