/* Shared-memory statistics: one row of blocks per worker slot (plus one
 * for workers that have exited), one block per shm slot (listener, backend,
 * server). Workers write only their own row; readers sum the rows of live
 * workers and the retired row. The region is mapped by the master before
 * any fork, with MAP_NORESERVE: only the blocks that are written (a few per
 * worker) take memory. */
#ifndef SLUICE_STATS_H
#define SLUICE_STATS_H

#include <stddef.h>
#include "stats-t.h"

int stats_init(void);
/* Listeners share the slot namespace with backends ("app") and servers
 * ("app/s1"): their slots are ">name", a character names cannot contain. */
struct cfg_listener;
void stats_listener_slot_name(const struct cfg_listener *l, char *out, size_t cap);
/* Worker W's block for shm slot SLOT. */
struct stats_block *stats_block(int w, int slot);

static inline void stats_add(struct stats_block *b, enum stats_counter c, uint64_t n)
{
#ifndef SLUICE_NO_STATS
	atomic_store_explicit(&b->c[c], atomic_load_explicit(&b->c[c], memory_order_relaxed) + n,
			      memory_order_relaxed);
#else
	(void)b; (void)c; (void)n;
#endif
}

static inline void stats_gauge_add(struct stats_block *b, enum stats_gauge g, int64_t d)
{
#ifndef SLUICE_NO_STATS
	atomic_store_explicit(&b->gauge[g], atomic_load_explicit(&b->gauge[g], memory_order_relaxed) + d,
			      memory_order_relaxed);
#else
	(void)b; (void)g; (void)d;
#endif
}

static inline void stats_reason(struct stats_block *b, enum reason r)
{
#ifndef SLUICE_NO_STATS
	atomic_store_explicit(&b->reason[r], atomic_load_explicit(&b->reason[r], memory_order_relaxed) + 1,
			      memory_order_relaxed);
#else
	(void)b; (void)r;
#endif
}

size_t stats_bucket(uint64_t us);
/* Bucket I holds the values in (low, high], in microseconds. */
uint64_t stats_bucket_low(size_t i);
uint64_t stats_bucket_high(size_t i);
#ifndef SLUICE_NO_STATS
void stats_observe_us(struct stats_block *b, enum stats_hist h, uint64_t us);
#else
static inline void stats_observe_us(struct stats_block *b, enum stats_hist h, uint64_t us)
{
	(void)b; (void)h; (void)us;
}
#endif

/* Master: a worker slot's process has ended. Its counters and histograms
 * move to the retired row (totals never go backwards); gauges vanish. Call
 * before its slot is freed for reuse. */
void stats_worker_retire(int w);

/* Totals over all workers for SLOT. */
struct stats_hist_sum {
	uint64_t count, sum_us;
	uint64_t b[STATS_NBUCKETS];
};
struct stats_sum {
	uint64_t c[STAT_NCOUNTERS];
	uint64_t reason[REASON__COUNT];
	int64_t gauge[GAUGE_N];
	struct stats_hist_sum h[HIST_N];
};
void stats_read(int slot, struct stats_sum *out);
/* The value (us, a bucket's upper edge) below which fraction Q of the
 * observations fall; 0 without observations. */
uint64_t stats_quantile(const struct stats_hist_sum *h, double q);

/* Inspection rule tags ("sqli-942100"), instance-wide: how many requests
 * carrying each tag were allowed, denied, or hit a script error. Tags are
 * interned on first use in a fixed shared table; when it is full, further
 * new tags are counted under "other". */
enum stats_tag_outcome { STATS_TAG_ALLOW, STATS_TAG_DENY, STATS_TAG_ERROR, STATS_TAG_N };
#define STATS_MAX_TAGS 2048
#define STATS_TAG_MAX 64
void stats_tag_add(const char *tag, size_t len, enum stats_tag_outcome o);
/* FN for every tag in use; N holds its counts by outcome. */
void stats_tags_each(void (*fn)(const char *tag, const uint64_t *n, void *ctx), void *ctx);

extern const char *const stats_counter_names[STAT_NCOUNTERS];
extern const char *const stats_counter_help[STAT_NCOUNTERS];
extern const char *const stats_gauge_names[GAUGE_N];
extern const char *const stats_gauge_help[GAUGE_N];
extern const char *const stats_hist_names[HIST_N];
extern const char *const stats_hist_help[HIST_N];

#endif
