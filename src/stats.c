#include <string.h>
#include <sys/mman.h>
#include <stdio.h>
#include "stats.h"
#include "cfg-t.h"
#include "shm.h"
#include "util.h"
#include "vgmem.h"

#define ROWS (SHM_MAX_WORKERS + 1)   /* the last row: workers that have exited */
#define RETIRED SHM_MAX_WORKERS

static struct stats_block *region;

struct stats_tag {
	_Atomic uint32_t state;          /* TAG_FREE, TAG_CLAIMED (name being written), TAG_READY */
	char name[STATS_TAG_MAX + 1];
	_Atomic uint64_t n[STATS_TAG_N]; /* shared by all workers: atomic adds (tags are rare events) */
};
enum { TAG_FREE, TAG_CLAIMED, TAG_READY };
static struct stats_tag *tags;

#define NAME(id, name, help) name,
#define HELP(id, name, help) help,
const char *const stats_counter_names[STAT_NCOUNTERS] = { STATS_COUNTERS(NAME) };
const char *const stats_counter_help[STAT_NCOUNTERS] = { STATS_COUNTERS(HELP) };
const char *const stats_gauge_names[GAUGE_N] = { STATS_GAUGES(NAME) };
const char *const stats_gauge_help[GAUGE_N] = { STATS_GAUGES(HELP) };
const char *const stats_hist_names[HIST_N] = { STATS_HISTS(NAME) };
const char *const stats_hist_help[HIST_N] = { STATS_HISTS(HELP) };
#undef NAME
#undef HELP

void stats_listener_slot_name(const struct cfg_listener *l, char *out, size_t cap)
{
	snprintf(out, cap, ">%s", l->name);
}

int stats_init(void)
{
	size_t size = sizeof(struct stats_block) * ROWS * SHM_MAX_SLOTS;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	region = p;
	vg_mem_noaccess(p, size); /* defined block by block in stats_block() */
	p = mmap(NULL, sizeof(*tags) * (STATS_MAX_TAGS + 1), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	tags = p;
	/* The last entry counts whatever does not fit. */
	snprintf(tags[STATS_MAX_TAGS].name, sizeof(tags[0].name), "other");
	atomic_store(&tags[STATS_MAX_TAGS].state, TAG_READY);
	return 0;
}

void stats_tag_add(const char *tag, size_t len, enum stats_tag_outcome o)
{
#ifndef SLUICE_NO_STATS
	if (tags == NULL)
		return;
	if (len > STATS_TAG_MAX)
		len = STATS_TAG_MAX;
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)tag[i]) * 16777619u;
	struct stats_tag *hit = &tags[STATS_MAX_TAGS];
	for (unsigned probe = 0; probe < STATS_MAX_TAGS; probe++) {
		struct stats_tag *e = &tags[(h + probe) % STATS_MAX_TAGS];
		uint32_t st = atomic_load_explicit(&e->state, memory_order_acquire);
		if (st == TAG_FREE) {
			uint32_t expect = TAG_FREE;
			if (atomic_compare_exchange_strong(&e->state, &expect, TAG_CLAIMED)) {
				memcpy(e->name, tag, len);
				e->name[len] = '\0';
				atomic_store_explicit(&e->state, TAG_READY, memory_order_release);
				hit = e;
				break;
			}
			st = expect;
		}
		/* Another worker is writing this entry's name: it takes
		 * nanoseconds, and it may be our tag. */
		while (st == TAG_CLAIMED)
			st = atomic_load_explicit(&e->state, memory_order_acquire);
		if (strncmp(e->name, tag, len) == 0 && e->name[len] == '\0') {
			hit = e;
			break;
		}
	}
	atomic_fetch_add_explicit(&hit->n[o], 1, memory_order_relaxed);
#else
	(void)tag, (void)len, (void)o;
#endif
}

void stats_tags_each(void (*fn)(const char *tag, const uint64_t *n, void *ctx), void *ctx)
{
	for (unsigned i = 0; tags && i <= STATS_MAX_TAGS; i++) {
		struct stats_tag *e = &tags[i];
		if (atomic_load_explicit(&e->state, memory_order_acquire) != TAG_READY)
			continue;
		uint64_t n[STATS_TAG_N];
		uint64_t sum = 0;
		for (int k = 0; k < STATS_TAG_N; k++)
			sum += n[k] = atomic_load_explicit(&e->n[k], memory_order_relaxed);
		if (sum)
			fn(e->name, n, ctx);
	}
}

struct stats_block *stats_block(int w, int slot)
{
	struct stats_block *b = &region[(size_t)w * SHM_MAX_SLOTS + (size_t)slot];
	vg_mem_defined(b, sizeof(*b));
	return b;
}

size_t stats_bucket(uint64_t us)
{
	/* Bucket i holds (low(i), high(i)]: upper edges inclusive, as
	 * Prometheus' "le" means; 0 and 1 share bucket 0. */
	if (us)
		us--;
	if (us < 2 * STATS_SUB)
		return (size_t)us;
	unsigned top = 63u - (unsigned)__builtin_clzll(us);
	if (top >= STATS_TOP_BITS)
		return STATS_NBUCKETS - 1;
	unsigned shift = top - STATS_SUB_BITS;
	return (size_t)shift * STATS_SUB + (size_t)(us >> shift);
}

uint64_t stats_bucket_low(size_t i)
{
	if (i < 2 * STATS_SUB)
		return i;
	size_t shift = i / STATS_SUB - 1;
	return (uint64_t)(i - shift * STATS_SUB) << shift;
}

uint64_t stats_bucket_high(size_t i)
{
	return i + 1 < STATS_NBUCKETS ? stats_bucket_low(i + 1) : UINT64_MAX;
}

static inline void bump(_Atomic uint64_t *v, uint64_t n)
{
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n, memory_order_relaxed);
}

#ifndef SLUICE_NO_STATS
void stats_observe_us(struct stats_block *b, enum stats_hist h, uint64_t us)
{
	struct stats_hist_data *d = &b->h[h];
	bump(&d->b[stats_bucket(us)], 1);
	bump(&d->count, 1);
	bump(&d->sum_us, us);
}
#endif

void stats_worker_retire(int w)
{
	for (int s = 0; s < SHM_MAX_SLOTS; s++) {
		if (shm->slots[s].name[0] == '\0')
			continue;
		struct stats_block *from = stats_block(w, s), *to = stats_block(RETIRED, s);
		for (int c = 0; c < STAT_NCOUNTERS; c++)
			bump(&to->c[c], atomic_exchange(&from->c[c], 0));
		for (int r = 0; r < REASON__COUNT; r++)
			bump(&to->reason[r], atomic_exchange(&from->reason[r], 0));
		for (int g = 0; g < GAUGE_N; g++)
			atomic_store(&from->gauge[g], 0);
		for (int h = 0; h < HIST_N; h++) {
			struct stats_hist_data *fh = &from->h[h], *th = &to->h[h];
			if (atomic_load(&fh->count) == 0)
				continue;
			bump(&th->count, atomic_exchange(&fh->count, 0));
			bump(&th->sum_us, atomic_exchange(&fh->sum_us, 0));
			for (size_t i = 0; i < STATS_NBUCKETS; i++)
				if (atomic_load_explicit(&fh->b[i], memory_order_relaxed))
					bump(&th->b[i], atomic_exchange(&fh->b[i], 0));
		}
	}
}

static void add_block(struct stats_sum *out, struct stats_block *b, int gauges)
{
	for (int c = 0; c < STAT_NCOUNTERS; c++)
		out->c[c] += atomic_load_explicit(&b->c[c], memory_order_relaxed);
	for (int r = 0; r < REASON__COUNT; r++)
		out->reason[r] += atomic_load_explicit(&b->reason[r], memory_order_relaxed);
	if (gauges)
		for (int g = 0; g < GAUGE_N; g++)
			out->gauge[g] += atomic_load_explicit(&b->gauge[g], memory_order_relaxed);
	for (int h = 0; h < HIST_N; h++) {
		struct stats_hist_data *d = &b->h[h];
		uint64_t n = atomic_load_explicit(&d->count, memory_order_relaxed);
		if (n == 0)
			continue;
		out->h[h].count += n;
		out->h[h].sum_us += atomic_load_explicit(&d->sum_us, memory_order_relaxed);
		for (size_t i = 0; i < STATS_NBUCKETS; i++)
			out->h[h].b[i] += atomic_load_explicit(&d->b[i], memory_order_relaxed);
	}
}

void stats_read(int slot, struct stats_sum *out)
{
	memset(out, 0, sizeof(*out));
	for (int w = 0; w < SHM_MAX_WORKERS; w++)
		if (atomic_load_explicit(&shm->workers[w].pid, memory_order_relaxed) != 0)
			add_block(out, stats_block(w, slot), 1);
	add_block(out, stats_block(RETIRED, slot), 0);
	/* A bucket read a moment after its count can make them disagree
	 * slightly; the buckets are the truth for quantiles and exports. */
	for (int h = 0; h < HIST_N; h++) {
		uint64_t n = 0;
		for (size_t i = 0; i < STATS_NBUCKETS; i++)
			n += out->h[h].b[i];
		out->h[h].count = n;
	}
}

uint64_t stats_quantile(const struct stats_hist_sum *h, double q)
{
	if (h->count == 0)
		return 0;
	uint64_t want = (uint64_t)(q * (double)h->count + 0.5);
	if (want == 0)
		want = 1;
	uint64_t seen = 0;
	for (size_t i = 0; i < STATS_NBUCKETS; i++) {
		seen += h->b[i];
		if (seen >= want)
			return i + 1 < STATS_NBUCKETS ? stats_bucket_high(i) : stats_bucket_low(i);
	}
	return stats_bucket_low(STATS_NBUCKETS - 1);
}
