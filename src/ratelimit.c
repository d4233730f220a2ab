/* Native rate limits: the rate parser, the instance-wide GCRA table in
 * shared memory, the key of a request, and the stream's entry points
 * (ratelimit.h says what and why; rlredis.c is the Redis store). */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include "ratelimit.h"
#include "rlredis.h"
#include "buf.h"
#include "hash.h"
#include "httpmsg.h"
#include "log.h"
#include "shm.h"
#include "util.h"
#include "worker.h"

/* ---- the rate ---- */

int ratelimit_parse_rate(const char *s, uint64_t *interval_us, uint32_t *count, const char **why)
{
	uint64_t n = 0, per = 1000000u;
	const char *p = s;
	if (*p < '0' || *p > '9') {
		*why = "expected requests per period: 100/s, 6000/m, 10/h";
		return -1;
	}
	for (; *p >= '0' && *p <= '9'; p++) {
		n = n * 10 + (uint64_t)(*p - '0');
		if (n > 1000000000u) {
			*why = "more than 1000000000 requests per period";
			return -1;
		}
	}
	if (*p == '/') {
		p++;
		if (strcmp(p, "s") == 0)
			per = 1000000u;
		else if (strcmp(p, "m") == 0)
			per = 60u * 1000000u;
		else if (strcmp(p, "h") == 0)
			per = 3600ull * 1000000u;
		else {
			*why = "the period is s, m or h";
			return -1;
		}
	} else if (*p != '\0') {
		*why = "expected requests per period: 100/s, 6000/m, 10/h";
		return -1;
	}
	if (n == 0) {
		*why = "0 would refuse every request (remove rate_limit to allow all)";
		return -1;
	}
	if (per / n == 0) {
		*why = "more than 1000000 requests per second";
		return -1;
	}
	*interval_us = per / n;
	*count = (uint32_t)n;
	return 0;
}

/* ---- the instance-wide table ---- */

#define TAT_BITS 48
#define TAT_MASK ((1ull << TAT_BITS) - 1)
#define RL_RESTARTS 8   /* probe again after losing a race; then allow (counted) */

struct rl_table {
	uint64_t nentries;
	uint64_t epoch_us;       /* CLOCK_MONOTONIC at creation: TATs are relative to it */
	/* One row per worker slot, written only by its worker (relaxed
	 * load+store) and never cleared: a slot's next worker goes on from
	 * where the last one stopped, so the sums only grow. */
	_Atomic uint64_t cnt[SHM_MAX_WORKERS][RLC_N];
	struct rl_entry e[];
};

static struct rl_table *table;

size_t ratelimit_table_size(uint32_t nentries)
{
	return sizeof(struct rl_table) + (size_t)nentries * sizeof(struct rl_entry);
}

struct rl_table *ratelimit_table_at(void *mem, uint32_t nentries, uint64_t epoch_us)
{
	struct rl_table *t = mem;
	memset(t, 0, sizeof(*t));
	t->nentries = nentries;
	t->epoch_us = epoch_us;
	return t;
}

int ratelimit_init(uint32_t nentries)
{
	if (nentries < RL_ENTRIES_MIN)
		nentries = RL_ENTRIES_MIN;
	/* Untouched pages cost nothing: a config without limits pays nothing. */
	void *p = mmap(NULL, ratelimit_table_size(nentries), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	table = ratelimit_table_at(p, nentries, now_us() - 1);
	return 0;
}

uint32_t ratelimit_capacity(void)
{
	return table ? (uint32_t)table->nentries : 0;
}

static void count_in(struct rl_table *t, int w, enum rl_counter c)
{
	_Atomic uint64_t *v = &t->cnt[w][c];
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + 1, memory_order_relaxed);
}

void ratelimit_count(int w, enum rl_counter c)
{
	if (table)
		count_in(table, w, c);
}

uint64_t ratelimit_table_counter(const struct rl_table *t, enum rl_counter c)
{
	uint64_t n = 0;
	for (int w = 0; w < SHM_MAX_WORKERS; w++)
		n += atomic_load_explicit(&t->cnt[w][c], memory_order_relaxed);
	return n;
}

static uint64_t tat_of(uint64_t word, uint16_t tag)
{
	return (uint16_t)(word >> TAT_BITS) == tag ? word & TAT_MASK : 0;
}

/* Lock-free: an entry is claimed by a CAS on its key, its TAT updated by a
 * CAS on the tagged word. Concurrent deciders for one key serialise on the
 * TAT word, so the count is exact across workers.
 *
 * Which entry a newcomer takes in its full probe window: first one never
 * used or whose TAT is past (no information lost); else the one with the
 * smallest TAT, i.e. the key nearest to a full bucket (counted as an
 * eviction). Evicting forgives that key the least debt; refusing to track
 * the newcomer instead would leave it unlimited for as long as the window
 * stays full, which is exactly what a flood of fresh keys would arrange.
 *
 * Races: a decider that updated an entry which meanwhile changed hands
 * (its TAT was past, so another key took it) probes again; the update it
 * made was on a TAT that carried no information, and is overwritten. */
int ratelimit_table_decide(struct rl_table *t, int w, uint64_t h, uint64_t now_abs, uint64_t interval,
			   uint32_t burst, uint64_t *retry_us)
{
	uint64_t n = t->nentries, now = now_abs - t->epoch_us, tau = (uint64_t)(burst - 1) * interval;
	h = h ? h : 1;  /* 0 marks a free entry */
	uint16_t tag = (uint16_t)(h >> TAT_BITS);
	for (int attempt = 0; attempt < RL_RESTARTS; attempt++) {
		uint64_t home = h % n, vkey = 0, vtat = UINT64_MAX;
		struct rl_entry *mine = NULL, *victim = NULL;
		for (unsigned i = 0; i < RL_WINDOW; i++) {
			struct rl_entry *e = &t->e[(home + i) % n];
			uint64_t k = atomic_load_explicit(&e->key, memory_order_acquire);
			if (k == h) {
				mine = e;
				break;
			}
			uint64_t word = atomic_load_explicit(&e->tat, memory_order_acquire);
			uint64_t et = k == 0 ? 0 : tat_of(word, (uint16_t)(k >> TAT_BITS));
			if (et < now)
				et = 0;  /* past: as good as free */
			if (et < vtat) {
				vtat = et;
				vkey = k;
				victim = e;
			}
		}
		if (mine == NULL) {
			if (!atomic_compare_exchange_strong(&victim->key, &vkey, h))
				continue;  /* taken meanwhile: look again */
			if (vtat != 0)
				count_in(t, w, RLC_EVICTIONS);
			mine = victim;
		}
		for (;;) {
			uint64_t word = atomic_load_explicit(&mine->tat, memory_order_acquire), new_tat = 0;
			if (!ratelimit_gcra(tat_of(word, tag), now, interval, tau, &new_tat, retry_us)) {
				if (atomic_load_explicit(&mine->key, memory_order_acquire) != h)
					break;
				return 0;
			}
			if (atomic_compare_exchange_weak(&mine->tat, &word, ((uint64_t)tag << TAT_BITS) | (new_tat & TAT_MASK))) {
				if (atomic_load_explicit(&mine->key, memory_order_acquire) != h)
					break;
				return 1;
			}
			if (atomic_load_explicit(&mine->key, memory_order_acquire) != h)
				break;
		}
	}
	count_in(t, w, RLC_CONTENDED);
	return 1;
}

/* ---- the stream's side ---- */

static void (*done_cb)(struct stream *s, enum rl_verdict v);

void ratelimit_events_set(void (*done)(struct stream *s, enum rl_verdict v))
{
	done_cb = done;
}

const struct cfg_rate_limit *ratelimit_select(const struct stream *s)
{
	const struct cfg_rate_limit *rl = &s->cl->li->cfg->rate_limit;
	if (s->route && s->route->rate_limit.mode != CFG_RL_INHERIT)
		rl = &s->route->rate_limit;
	return rl->mode == CFG_RL_ON ? rl : NULL;
}

/* The request's key under RL, hashed with the limit's scope; 0 = it has
 * none (header or cookie absent): not limited. */
static uint64_t request_key(const struct stream *s, const struct cfg_rate_limit *rl)
{
	const struct msg *m = &s->req;
	switch (rl->key) {
	case CFG_RL_CLIENT: {
		struct netaddr a;
		netaddr_unmap(&a, &s->cl->src);
		return hash_bytes(rl->scope_hash, a.ip, a.family == AF_INET6 ? 16 : 4);
	}
	case CFG_RL_HEADER: {
		size_t nl = strlen(rl->key_name);
		for (uint32_t i = 0; i < m->nhdrs; i++) {
			const struct hdr *h = &m->hdrs[i];
			if (h->name_len == nl && strncasecmp(msg_str(m, h->name_off), rl->key_name, nl) == 0)
				return hash_bytes(rl->scope_hash, msg_str(m, h->val_off), h->val_len) | 1;
		}
		return 0;
	}
	case CFG_RL_COOKIE: {
		const char *v;
		size_t vl;
		if (!msg_cookie(m, rl->key_name, strlen(rl->key_name), &v, &vl))
			return 0;
		return hash_bytes(rl->scope_hash, v, vl) | 1;
	}
	}
	return 0;
}

enum rl_verdict ratelimit_check(struct stream *s, const struct cfg_rate_limit *rl)
{
	uint64_t h = request_key(s, rl);
	if (h == 0)
		return RL_ALLOW;
	if (rl->store == CFG_RL_REDIS) {
		enum rl_verdict v = rlredis_ask(s, rl, h);
		if (v == RL_PENDING)
			return v;
		ratelimit_count(W->slot, RLC_REDIS_ERROR);
		return rl->on_store_error_deny ? RL_STORE_DENY : RL_ALLOW;
	}
	uint64_t retry = 0;
	if (table == NULL)  /* an in-process rig that mapped no table */
		return RL_ALLOW;
	if (ratelimit_table_decide(table, W->slot, h, now_us(), rl->interval_us, rl->burst, &retry)) {
		count_in(table, W->slot, RLC_LOCAL_ALLOW);
		return RL_ALLOW;
	}
	count_in(table, W->slot, RLC_LOCAL_DENY);
	s->rl_retry_s = ratelimit_retry_s(retry);
	return RL_DENY;
}

void ratelimit_redis_done(struct stream *s, const struct cfg_rate_limit *rl, int outcome, uint64_t retry_us)
{
	enum rl_verdict v;
	s->rl_seq = 0;
	if (outcome > 0) {
		ratelimit_count(W->slot, RLC_REDIS_ALLOW);
		v = RL_ALLOW;
	} else if (outcome == 0) {
		ratelimit_count(W->slot, RLC_REDIS_DENY);
		s->rl_retry_s = ratelimit_retry_s(retry_us);
		v = RL_DENY;
	} else {
		ratelimit_count(W->slot, RLC_REDIS_ERROR);
		v = rl->on_store_error_deny ? RL_STORE_DENY : RL_ALLOW;
	}
	done_cb(s, v);
}

void ratelimit_cancel(struct stream *s)
{
	if (s->rl_seq) {
		rlredis_cancel(s->rl_seq);
		s->rl_seq = 0;
	}
}

static int uses_redis(const struct cfg *c)
{
	for (unsigned l = 0; l < c->nlisteners; l++) {
		const struct cfg_listener *li = &c->listeners[l];
		if (li->rate_limit.mode == CFG_RL_ON && li->rate_limit.store == CFG_RL_REDIS)
			return 1;
		for (unsigned r = 0; r < li->nroutes; r++)
			if (li->routes[r].rate_limit.mode == CFG_RL_ON && li->routes[r].rate_limit.store == CFG_RL_REDIS)
				return 1;
	}
	return 0;
}

void ratelimit_worker_start(void)
{
	if (W->index == 0 && table && W->cfg->limits.rate_limit_entries != table->nentries)
		log_warn("limits.rate_limit_entries is %u, the table holds %u: the table is made at start, "
			 "a new size takes a restart", W->cfg->limits.rate_limit_entries,
			 (unsigned)table->nentries);
	if (uses_redis(W->cfg))
		rlredis_start(&W->loop, &W->cfg->redis);
}

void ratelimit_metrics(struct buf *out)
{
	if (table == NULL)
		return;
	buf_append_str(out, "# HELP sluice_rate_limit_decisions_total Rate limit decisions by store and result "
			    "(store_error: the store failed, on_store_error applied)\n"
			    "# TYPE sluice_rate_limit_decisions_total counter\n");
	static const struct { enum rl_counter c; const char *store, *result; } d[] = {
		{ RLC_LOCAL_ALLOW, "local", "allow" }, { RLC_LOCAL_DENY, "local", "deny" },
		{ RLC_REDIS_ALLOW, "redis", "allow" }, { RLC_REDIS_DENY, "redis", "deny" },
		{ RLC_REDIS_ERROR, "redis", "store_error" },
	};
	for (size_t i = 0; i < sizeof(d) / sizeof(d[0]); i++)
		buf_appendf(out, "sluice_rate_limit_decisions_total{store=\"%s\",result=\"%s\"} %llu\n", d[i].store,
			    d[i].result, (unsigned long long)ratelimit_table_counter(table, d[i].c));
	buf_append_str(out, "# HELP sluice_rate_limit_store_errors_total Redis store failures by kind "
			    "(connect, timeout, reply, overload)\n"
			    "# TYPE sluice_rate_limit_store_errors_total counter\n");
	static const struct { enum rl_counter c; const char *kind; } e[] = {
		{ RLC_ERR_CONNECT, "connect" }, { RLC_ERR_TIMEOUT, "timeout" },
		{ RLC_ERR_REPLY, "reply" }, { RLC_ERR_OVERLOAD, "overload" },
	};
	for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++)
		buf_appendf(out, "sluice_rate_limit_store_errors_total{kind=\"%s\"} %llu\n", e[i].kind,
			    (unsigned long long)ratelimit_table_counter(table, e[i].c));
	buf_appendf(out, "# HELP sluice_rate_limit_redis_connects_total Connections made to the Redis store\n"
		    "# TYPE sluice_rate_limit_redis_connects_total counter\n"
		    "sluice_rate_limit_redis_connects_total %llu\n"
		    "# HELP sluice_rate_limit_table_evictions_total Keys dropped from the instance-wide table "
		    "while their bucket was not yet full (its probe window was full)\n"
		    "# TYPE sluice_rate_limit_table_evictions_total counter\n"
		    "sluice_rate_limit_table_evictions_total %llu\n"
		    "# HELP sluice_rate_limit_table_contended_total Local decisions allowed after losing "
		    "%d races in a row for a table entry\n"
		    "# TYPE sluice_rate_limit_table_contended_total counter\n"
		    "sluice_rate_limit_table_contended_total %llu\n"
		    "# HELP sluice_rate_limit_table_entries Keys the instance-wide table can hold\n"
		    "# TYPE sluice_rate_limit_table_entries gauge\n"
		    "sluice_rate_limit_table_entries %llu\n",
		    (unsigned long long)ratelimit_table_counter(table, RLC_REDIS_CONNECTS),
		    (unsigned long long)ratelimit_table_counter(table, RLC_EVICTIONS), RL_RESTARTS,
		    (unsigned long long)ratelimit_table_counter(table, RLC_CONTENDED),
		    (unsigned long long)table->nentries);
}
