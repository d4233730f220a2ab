/* Per-route request counters in shared memory: a compact row per route
 * and worker (a full stats_block per route would cost ~20 KB each, and a
 * listener may have thousands of routes). Routes are named
 * "listener/route"; the master allocates their slots before forking, and a
 * name keeps its slot across reloads, so counters go on. Workers write
 * only their own row; a worker that exits has its row moved to the retired
 * row, as stats.c does. */
#ifndef SLUICE_ROUTESTATS_H
#define SLUICE_ROUTESTATS_H

#include <stddef.h>
#include <stdint.h>

#define ROUTESTATS_MAX 8192

enum routestats_counter {
	RS_REQUESTS,
	RS_1XX, RS_2XX, RS_3XX, RS_4XX, RS_5XX,
	RS_NONE,          /* ended without a response */
	RS_BYTES_OUT,     /* response bytes sent to clients */
	RS_RATE_LIMITED,  /* answered 429 (or 503: the limit's store failed) by its rate_limit */
	RS_N
};

/* Master: map the region (before any fork). */
int routestats_init(void);
/* Master: the slot of route NAME, allocated if new; -1 when full. */
int routestats_slot_get(const char *name);
/* Worker W: one request of route SLOT ended. STATUS_CLASS 1..5, 0 = none. */
void routestats_count(int w, int slot, int status_class, uint64_t bytes_out);
/* Worker W: one more of counter C for route SLOT. */
void routestats_add(int w, int slot, enum routestats_counter c);
/* Totals over live workers and retired ones. */
void routestats_read(int slot, uint64_t out[RS_N]);
/* Master: worker slot W's process has ended. */
void routestats_worker_retire(int w);

#endif
