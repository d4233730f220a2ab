/* The shared dictionary (see shdict.h for the contract).
 *
 * Layout of a region: struct shdict, its shards, then each shard's arena:
 * its bucket heads (uint32_t block indices) and its blocks. Everything in
 * the region refers to blocks by their 1-based index inside their shard's
 * arena (0 = none), never by pointer, so the region means the same in
 * every process whatever address it is mapped at.
 *
 * An entry is a chain of blocks linked by `more`: the head block (struct
 * shd_entry) carries the hash chain and LRU links, the expiry, the number
 * and the first bytes of key-then-string; continuation blocks carry 60
 * more bytes each. Free blocks are on a free list linked by `more` too,
 * and blocks never used yet lie past `hwm`, so a fresh region touches no
 * page until it is used.
 *
 * Locking. One robust, process-shared mutex per shard. A mutex rather
 * than a spinlock: the critical sections are short, but a holder can be
 * preempted (2 workers on 2 cores with other load), and a spinning waiter
 * would burn its core meanwhile; the kernel wakes a futex waiter when the
 * holder leaves. Robust, so that a holder that dies inside (an OOM kill,
 * an operator's SIGKILL) hands the lock to the next locker with EOWNERDEAD
 * instead of wedging every worker: that locker empties the shard, whose links may be half
 * written, and marks the mutex consistent. Waits are bounded
 * (SHDICT_LOCK_WAIT_MS) because a stopped holder never releases. Nothing
 * inside a critical section can fail or call out (no Lua, no allocation);
 * the Lua binding checks its arguments before and pushes results after. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include "buf.h"
#include "hash.h"
#include "log.h"
#include "shdict.h"
#include "util.h"

#define SHD_MAGIC 0x73686469637431ull    /* "shdict1" */
#define SHD_SHARD_TARGET (256u * 1024)   /* bytes per shard the shard count aims at */
#define SHD_SHARDS_MAX 64u
#define SHD_EXPIRE_SCAN 64               /* entries from the cold end examined for expired ones */
#define SHD_HEAD_DATA 20u
#define SHD_CONT_DATA 60u

struct shd_entry {
	uint32_t more;          /* next block of this entry, 0 = none (first field in every block) */
	uint32_t hnext;         /* next entry in the bucket */
	uint32_t lprev, lnext;  /* LRU list: prev is more recent, next is less */
	uint64_t expire_us;     /* CLOCK_MONOTONIC us, 0 = never */
	union { int64_t i; double d; } num;
	uint32_t hash32;
	uint32_t vlen;          /* string bytes */
	uint8_t klen;
	uint8_t type;           /* enum shdict_type */
	uint16_t nblk;          /* blocks in the chain, this one included */
	char data[SHD_HEAD_DATA];
};

struct shd_cont {
	uint32_t more;
	char data[SHD_CONT_DATA];
};

_Static_assert(sizeof(struct shd_entry) == SHDICT_BLOCK, "an entry head is one block");
_Static_assert(sizeof(struct shd_cont) == SHDICT_BLOCK, "a continuation is one block");

struct shd_shard {
	pthread_mutex_t lock;
	uint64_t arena;         /* offset of the buckets from the region's start */
	uint64_t blocks;        /* offset of block 1 */
	uint32_t nblocks, nbuckets;
	uint32_t hwm;           /* blocks 1..hwm have been handed out at least once */
	uint32_t free_head;     /* free list, linked by `more` */
	uint32_t used;          /* blocks in entries */
	uint32_t entries;
	uint32_t lru_head, lru_tail;
	uint64_t evictions, expired, recoveries;
} __attribute__((aligned(64)));

struct shdict {
	uint64_t magic;
	uint64_t size;          /* bytes mapped */
	uint64_t seed;          /* of the key hash: keys come from clients */
	uint32_t nshards;       /* a power of 2 */
	uint32_t value_max;
	int private_map;
	struct shd_shard shards[];
};

static struct shdict *inst;

/* ---- blocks ---- */

static inline void *blk(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	return (char *)d + sh->blocks + (uint64_t)(i - 1) * SHDICT_BLOCK;
}

static inline struct shd_entry *ent(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	return blk(d, sh, i);
}

static inline uint32_t *buckets(struct shdict *d, struct shd_shard *sh)
{
	return (uint32_t *)((char *)d + sh->arena);
}

static uint32_t blocks_for(size_t payload)
{
	if (payload <= SHD_HEAD_DATA)
		return 1;
	return 1 + (uint32_t)((payload - SHD_HEAD_DATA + SHD_CONT_DATA - 1) / SHD_CONT_DATA);
}

static inline uint32_t shard_free(const struct shd_shard *sh)
{
	return sh->nblocks - sh->used;
}

/* A chain of N blocks; the caller made sure they are there. */
static uint32_t chain_alloc(struct shdict *d, struct shd_shard *sh, uint32_t n)
{
	uint32_t first = 0, *link = &first;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t i;
		if (sh->free_head) {
			i = sh->free_head;
			sh->free_head = ((struct shd_cont *)blk(d, sh, i))->more;
		} else {
			AN(sh->hwm < sh->nblocks);
			i = ++sh->hwm;
		}
		*link = i;
		link = &((struct shd_cont *)blk(d, sh, i))->more;
	}
	*link = 0;
	sh->used += n;
	return first;
}

static void chain_free(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	while (i) {
		struct shd_cont *c = blk(d, sh, i);
		uint32_t next = c->more;
		c->more = sh->free_head;
		sh->free_head = i;
		sh->used--;
		i = next;
	}
}

/* A walk over an entry's payload bytes, across its blocks. */
struct cursor {
	struct shdict *d;
	struct shd_shard *sh;
	uint32_t at;    /* block the cursor is in */
	char *p;
	size_t room;    /* bytes left in that block */
};

static void cursor_init(struct cursor *c, struct shdict *d, struct shd_shard *sh, uint32_t e)
{
	c->d = d;
	c->sh = sh;
	c->at = e;
	c->p = ent(d, sh, e)->data;
	c->room = SHD_HEAD_DATA;
}

static void cursor_step(struct cursor *c)
{
	c->at = ((struct shd_cont *)blk(c->d, c->sh, c->at))->more;
	AN(c->at);
	c->p = ((struct shd_cont *)blk(c->d, c->sh, c->at))->data;
	c->room = SHD_CONT_DATA;
}

static void cursor_write(struct cursor *c, const char *src, size_t n)
{
	while (n) {
		if (c->room == 0)
			cursor_step(c);
		size_t k = n < c->room ? n : c->room;
		memcpy(c->p, src, k);
		c->p += k, c->room -= k, src += k, n -= k;
	}
}

static void cursor_read(struct cursor *c, char *dst, size_t n)
{
	while (n) {
		if (c->room == 0)
			cursor_step(c);
		size_t k = n < c->room ? n : c->room;
		memcpy(dst, c->p, k);
		c->p += k, c->room -= k, dst += k, n -= k;
	}
}

static int cursor_equal(struct cursor *c, const char *s, size_t n)
{
	while (n) {
		if (c->room == 0)
			cursor_step(c);
		size_t k = n < c->room ? n : c->room;
		if (memcmp(c->p, s, k) != 0)
			return 0;
		c->p += k, c->room -= k, s += k, n -= k;
	}
	return 1;
}

/* ---- the region ---- */

static void shard_reset(struct shdict *d, struct shd_shard *sh)
{
	memset(buckets(d, sh), 0, (size_t)sh->nbuckets * sizeof(uint32_t));
	sh->hwm = sh->free_head = sh->used = sh->entries = 0;
	sh->lru_head = sh->lru_tail = 0;
}

static uint32_t pow2_floor(uint64_t x)
{
	uint32_t p = 1;
	while ((uint64_t)p * 2 <= x && p < (1u << 30))
		p *= 2;
	return p;
}

static struct shdict *region_make(uint64_t size, int private_map)
{
	if (size < SHDICT_SIZE_MIN || size > SHDICT_SIZE_MAX) {
		errno = EINVAL;
		return NULL;
	}
	uint32_t nshards = pow2_floor(size / SHD_SHARD_TARGET);
	if (nshards > SHD_SHARDS_MAX)
		nshards = SHD_SHARDS_MAX;
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       (private_map ? MAP_PRIVATE : MAP_SHARED) | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	struct shdict *d = p;
	d->magic = SHD_MAGIC;
	d->size = size;
	d->nshards = nshards;
	d->private_map = private_map;
	if (getrandom(&d->seed, sizeof(d->seed), GRND_NONBLOCK) != (ssize_t)sizeof(d->seed))
		d->seed = (uint64_t)now_us() * 0x9e3779b97f4a7c15ull;
	uint64_t head = sizeof(*d) + (uint64_t)nshards * sizeof(struct shd_shard);
	head = (head + SHDICT_BLOCK - 1) & ~(uint64_t)(SHDICT_BLOCK - 1);
	uint64_t per = (size - head) / nshards / SHDICT_BLOCK * SHDICT_BLOCK;
	/* About one bucket per two blocks (an entry is one block or more):
	 * 3% of the arena, chains of a few entries at most when full. */
	uint32_t nbuckets = pow2_floor(per / SHDICT_BLOCK / 2);
	uint64_t bbytes = ((uint64_t)nbuckets * sizeof(uint32_t) + SHDICT_BLOCK - 1) & ~(uint64_t)(SHDICT_BLOCK - 1);
	uint32_t nblocks = (uint32_t)((per - bbytes) / SHDICT_BLOCK);

	pthread_mutexattr_t ma;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	for (uint32_t s = 0; s < nshards; s++) {
		struct shd_shard *sh = &d->shards[s];
		if (pthread_mutex_init(&sh->lock, &ma) != 0) {
			pthread_mutexattr_destroy(&ma);
			munmap(p, size);
			errno = ENOMEM;
			return NULL;
		}
		sh->arena = head + (uint64_t)s * per;
		sh->blocks = sh->arena + bbytes;
		sh->nbuckets = nbuckets;
		sh->nblocks = nblocks;
	}
	pthread_mutexattr_destroy(&ma);
	/* A value must fit in half a shard together with the longest key,
	 * so that evicting can always make room for it. */
	uint64_t fit = (uint64_t)(nblocks / 2 - 1) * SHD_CONT_DATA + SHD_HEAD_DATA - SHDICT_KEY_MAX;
	d->value_max = fit < SHDICT_VALUE_MAX ? (uint32_t)fit : SHDICT_VALUE_MAX;
	return d;
}

int shdict_init(uint64_t size)
{
	if (inst != NULL) {
		if (size != inst->size)
			log_warn("lua_shared_memory: the file asks for %llu bytes; the shared dictionary "
				 "keeps its %llu bytes and its entries until sluice restarts",
				 (unsigned long long)size, (unsigned long long)inst->size);
		return 0;
	}
	inst = region_make(size, 0);
	return inst ? 0 : -1;
}

struct shdict *shdict_instance(void)
{
	return inst;
}

struct shdict *shdict_create_private(uint64_t size)
{
	return region_make(size, 1);
}

void shdict_destroy_private(struct shdict *d)
{
	if (d == NULL || !d->private_map)
		return;
	for (uint32_t s = 0; s < d->nshards; s++)
		pthread_mutex_destroy(&d->shards[s].lock);
	munmap(d, d->size);
}

size_t shdict_value_max(const struct shdict *d)
{
	return d->value_max;
}

/* ---- locking ---- */

static enum shdict_rc shard_lock(struct shdict *d, struct shd_shard *sh)
{
	int rc = pthread_mutex_trylock(&sh->lock);
	if (rc == EBUSY) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += (long)SHDICT_LOCK_WAIT_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		rc = pthread_mutex_clocklock(&sh->lock, CLOCK_MONOTONIC, &ts);
	}
	if (rc == EOWNERDEAD) {
		/* Its holder died between any two stores: the links cannot
		 * be trusted, the entries can be lost. */
		shard_reset(d, sh);
		sh->recoveries++;
		pthread_mutex_consistent(&sh->lock);
		log_warn("sluice.shared: a process died holding shard %u's lock; its entries are dropped",
			 (unsigned)(sh - d->shards));
		return SHD_OK;
	}
	return rc == 0 ? SHD_OK : SHD_BUSY;
}

static void shard_unlock(struct shd_shard *sh)
{
	pthread_mutex_unlock(&sh->lock);
}

/* ---- entries (shard locked) ---- */

struct keyref {
	const char *key;
	size_t klen;
	uint32_t hash32;
	struct shd_shard *sh;
};

static int keyref_make(struct shdict *d, const char *key, size_t klen, struct keyref *k)
{
	if (klen > SHDICT_KEY_MAX)
		return -1;
	uint64_t h = hash_bytes(d->seed, key, klen);
	k->key = key;
	k->klen = klen;
	k->hash32 = (uint32_t)(h >> 32);
	k->sh = &d->shards[h & (d->nshards - 1)];
	return 0;
}

static uint32_t find(struct shdict *d, const struct keyref *k)
{
	struct shd_shard *sh = k->sh;
	uint32_t i = buckets(d, sh)[k->hash32 & (sh->nbuckets - 1)];
	while (i) {
		struct shd_entry *e = ent(d, sh, i);
		if (e->hash32 == k->hash32 && e->klen == k->klen) {
			struct cursor c;
			cursor_init(&c, d, sh, i);
			if (cursor_equal(&c, k->key, k->klen))
				return i;
		}
		i = e->hnext;
	}
	return 0;
}

static void lru_unlink(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	struct shd_entry *e = ent(d, sh, i);
	if (e->lprev)
		ent(d, sh, e->lprev)->lnext = e->lnext;
	else
		sh->lru_head = e->lnext;
	if (e->lnext)
		ent(d, sh, e->lnext)->lprev = e->lprev;
	else
		sh->lru_tail = e->lprev;
	e->lprev = e->lnext = 0;
}

static void lru_push(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	struct shd_entry *e = ent(d, sh, i);
	e->lprev = 0;
	e->lnext = sh->lru_head;
	if (sh->lru_head)
		ent(d, sh, sh->lru_head)->lprev = i;
	sh->lru_head = i;
	if (sh->lru_tail == 0)
		sh->lru_tail = i;
}

static void lru_touch(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	if (sh->lru_head == i)
		return;
	lru_unlink(d, sh, i);
	lru_push(d, sh, i);
}

static void entry_remove(struct shdict *d, struct shd_shard *sh, uint32_t i)
{
	struct shd_entry *e = ent(d, sh, i);
	uint32_t *link = &buckets(d, sh)[e->hash32 & (sh->nbuckets - 1)];
	while (*link != i) {
		AN(*link);
		link = &ent(d, sh, *link)->hnext;
	}
	*link = e->hnext;
	lru_unlink(d, sh, i);
	sh->entries--;
	chain_free(d, sh, i);
}

static inline int expired(const struct shd_entry *e, uint64_t now)
{
	return e->expire_us != 0 && e->expire_us <= now;
}

/* The live entry for K, or 0; an expired one found is reclaimed. */
static uint32_t find_live(struct shdict *d, const struct keyref *k, uint64_t now)
{
	uint32_t i = find(d, k);
	if (i && expired(ent(d, k->sh, i), now)) {
		entry_remove(d, k->sh, i);
		k->sh->expired++;
		i = 0;
	}
	return i;
}

/* Make N blocks free: expired entries at the cold end first, then the
 * least recently used live ones. A couple of expired entries are reclaimed
 * on every insert anyway, as nginx's shared dictionaries do, so that
 * entries nobody reads again do not wait for the shard to fill up. */
static void make_room(struct shdict *d, struct shd_shard *sh, uint32_t n, uint64_t now, int *forcible)
{
	uint32_t i = sh->lru_tail;
	for (int k = 0; i && k < 2; k++) {
		uint32_t prev = ent(d, sh, i)->lprev;
		if (!expired(ent(d, sh, i), now))
			break;
		entry_remove(d, sh, i);
		sh->expired++;
		i = prev;
	}
	if (shard_free(sh) >= n)
		return;
	i = sh->lru_tail;
	for (int k = 0; i && k < SHD_EXPIRE_SCAN && shard_free(sh) < n; k++) {
		uint32_t prev = ent(d, sh, i)->lprev;
		if (expired(ent(d, sh, i), now)) {
			entry_remove(d, sh, i);
			sh->expired++;
		}
		i = prev;
	}
	while (shard_free(sh) < n && sh->lru_tail) {
		entry_remove(d, sh, sh->lru_tail);
		sh->evictions++;
		if (forcible)
			*forcible = 1;
	}
}

static void payload_write(struct shdict *d, struct shd_shard *sh, uint32_t i, const struct keyref *k,
			  const struct shdict_val *v, uint64_t expire_us)
{
	struct shd_entry *e = ent(d, sh, i);
	e->expire_us = expire_us;
	e->type = v->type;
	e->vlen = 0;
	e->num.i = 0;
	if (v->type == SHD_BOOL)
		e->num.i = v->b ? 1 : 0;
	else if (v->type == SHD_INT)
		e->num.i = v->i;
	else if (v->type == SHD_NUM)
		e->num.d = v->d;
	else if (v->type == SHD_STR)
		e->vlen = (uint32_t)v->len;
	struct cursor c;
	cursor_init(&c, d, sh, i);
	cursor_write(&c, k->key, k->klen);
	if (v->type == SHD_STR)
		cursor_write(&c, v->s, v->len);
}

static void value_read(struct shdict *d, struct shd_shard *sh, uint32_t i, struct shdict_val *out, char *buf)
{
	struct shd_entry *e = ent(d, sh, i);
	memset(out, 0, sizeof(*out));
	out->type = e->type;
	if (e->type == SHD_BOOL)
		out->b = e->num.i != 0;
	else if (e->type == SHD_INT)
		out->i = e->num.i;
	else if (e->type == SHD_NUM)
		out->d = e->num.d;
	else if (e->type == SHD_STR) {
		struct cursor c;
		cursor_init(&c, d, sh, i);
		char skip[SHDICT_KEY_MAX];
		cursor_read(&c, skip, e->klen);
		cursor_read(&c, buf, e->vlen);
		out->s = buf;
		out->len = e->vlen;
	}
}

/* Store V for K (shard locked, V not nil, sizes checked). EXISTING is K's
 * live entry or 0. Rewritten in place when the block count is the same. */
static void put(struct shdict *d, const struct keyref *k, uint32_t existing, const struct shdict_val *v,
		uint64_t expire_us, uint64_t now, int *forcible)
{
	struct shd_shard *sh = k->sh;
	uint32_t n = blocks_for(k->klen + (v->type == SHD_STR ? v->len : 0));
	if (existing && ent(d, sh, existing)->nblk == n) {
		payload_write(d, sh, existing, k, v, expire_us);
		lru_touch(d, sh, existing);
		return;
	}
	if (existing)
		entry_remove(d, sh, existing);
	make_room(d, sh, n, now, forcible);
	uint32_t i = chain_alloc(d, sh, n);
	struct shd_entry *e = ent(d, sh, i);
	e->hash32 = k->hash32;
	e->klen = (uint8_t)k->klen;
	e->nblk = (uint16_t)n;
	payload_write(d, sh, i, k, v, expire_us);
	uint32_t *b = &buckets(d, sh)[k->hash32 & (sh->nbuckets - 1)];
	e->hnext = *b;
	*b = i;
	lru_push(d, sh, i);
	sh->entries++;
}

static uint64_t deadline(uint64_t ttl_us, uint64_t now)
{
	return ttl_us ? now + ttl_us : 0;
}

static int value_fits(const struct shdict *d, const struct shdict_val *v)
{
	return v->type != SHD_STR || v->len <= d->value_max;
}

/* ---- operations ---- */

enum shdict_rc shdict_get(struct shdict *d, const char *key, size_t klen,
			  struct shdict_val *out, char *buf, size_t cap, uint64_t *ttl_us)
{
	struct keyref k;
	memset(out, 0, sizeof(*out));
	if (ttl_us)
		*ttl_us = 0;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_KEY_TOO_LARGE;
	AN(cap >= d->value_max);
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint64_t now = now_us();
	uint32_t i = find_live(d, &k, now);
	if (i) {
		value_read(d, k.sh, i, out, buf);
		uint64_t exp = ent(d, k.sh, i)->expire_us;
		if (ttl_us && exp)
			*ttl_us = exp - now;
		lru_touch(d, k.sh, i);
	}
	shard_unlock(k.sh);
	return SHD_OK;
}

enum shdict_rc shdict_store(struct shdict *d, enum shdict_store_mode mode, const char *key, size_t klen,
			    const struct shdict_val *v, uint64_t ttl_us, int *forcible)
{
	struct keyref k;
	if (forcible)
		*forcible = 0;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_KEY_TOO_LARGE;
	if (!value_fits(d, v))
		return SHD_VALUE_TOO_LARGE;
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint64_t now = now_us();
	uint32_t i = find_live(d, &k, now);
	enum shdict_rc rc = SHD_OK;
	if (mode == SHD_ADD && i)
		rc = SHD_EXISTS;
	else if (mode == SHD_REPLACE && !i)
		rc = SHD_NOT_FOUND;
	else if (v->type == SHD_NIL) {
		if (i)
			entry_remove(d, k.sh, i);
	} else
		put(d, &k, i, v, deadline(ttl_us, now), now, forcible);
	shard_unlock(k.sh);
	return rc;
}

/* Lua's equality for the values a dictionary holds. */
static int val_equal(const struct shdict_val *a, const struct shdict_val *b)
{
	if (a->type == SHD_NIL || b->type == SHD_NIL)
		return a->type == b->type;
	if ((a->type == SHD_INT || a->type == SHD_NUM) && (b->type == SHD_INT || b->type == SHD_NUM)) {
		if (a->type == SHD_INT && b->type == SHD_INT)
			return a->i == b->i;
		if (a->type == SHD_NUM && b->type == SHD_NUM)
			return a->d == b->d;
		int64_t i = a->type == SHD_INT ? a->i : b->i;
		double f = a->type == SHD_NUM ? a->d : b->d;
		/* exact: 2^53 + 1 is not 2^53 as a double */
		if (!(f >= -9223372036854775808.0 && f < 9223372036854775808.0) || f != floor(f))
			return 0;
		return (int64_t)f == i;
	}
	if (a->type != b->type)
		return 0;
	if (a->type == SHD_BOOL)
		return !a->b == !b->b;
	return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
}

enum shdict_rc shdict_cas(struct shdict *d, const char *key, size_t klen, const struct shdict_val *old,
			  const struct shdict_val *nw, uint64_t ttl_us, struct shdict_val *cur,
			  char *buf, size_t cap, int *forcible)
{
	struct keyref k;
	AN(old != cur);
	AN(old->type != SHD_STR || (uintptr_t)old->s + old->len <= (uintptr_t)buf ||
	   (uintptr_t)old->s >= (uintptr_t)buf + cap);
	memset(cur, 0, sizeof(*cur));
	if (forcible)
		*forcible = 0;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_KEY_TOO_LARGE;
	if (!value_fits(d, nw))
		return SHD_VALUE_TOO_LARGE;
	AN(cap >= d->value_max);
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint64_t now = now_us();
	uint32_t i = find_live(d, &k, now);
	if (i)
		value_read(d, k.sh, i, cur, buf);
	enum shdict_rc rc = SHD_MISMATCH;
	if (val_equal(cur, old)) {
		rc = SHD_OK;
		if (nw->type == SHD_NIL) {
			if (i)
				entry_remove(d, k.sh, i);
		} else
			put(d, &k, i, nw, deadline(ttl_us, now), now, forcible);
	}
	shard_unlock(k.sh);
	return rc;
}

static void num_add(const struct shdict_val *a, const struct shdict_val *b, struct shdict_val *out)
{
	memset(out, 0, sizeof(*out));
	if (a->type == SHD_INT && b->type == SHD_INT && !__builtin_add_overflow(a->i, b->i, &out->i)) {
		out->type = SHD_INT;
		return;
	}
	out->type = SHD_NUM;
	out->d = (a->type == SHD_INT ? (double)a->i : a->d) + (b->type == SHD_INT ? (double)b->i : b->d);
}

enum shdict_rc shdict_incr(struct shdict *d, const char *key, size_t klen, const struct shdict_val *by,
			   const struct shdict_val *init, uint64_t init_ttl_us, struct shdict_val *out,
			   int *forcible)
{
	struct keyref k;
	memset(out, 0, sizeof(*out));
	if (forcible)
		*forcible = 0;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_KEY_TOO_LARGE;
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint64_t now = now_us();
	uint32_t i = find_live(d, &k, now);
	enum shdict_rc rc = SHD_OK;
	if (i == 0) {
		if (init == NULL)
			rc = SHD_NOT_FOUND;
		else {
			num_add(init, by, out);
			put(d, &k, 0, out, deadline(init_ttl_us, now), now, forcible);
		}
	} else {
		struct shd_entry *e = ent(d, k.sh, i);
		if (e->type != SHD_INT && e->type != SHD_NUM)
			rc = SHD_NOT_NUMBER;
		else {
			struct shdict_val curv = { .type = e->type };
			if (e->type == SHD_INT)
				curv.i = e->num.i;
			else
				curv.d = e->num.d;
			num_add(&curv, by, out);
			e->type = out->type;
			if (out->type == SHD_INT)
				e->num.i = out->i;
			else
				e->num.d = out->d;
			lru_touch(d, k.sh, i);
		}
	}
	shard_unlock(k.sh);
	return rc;
}

enum shdict_rc shdict_delete(struct shdict *d, const char *key, size_t klen)
{
	struct keyref k;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_OK;  /* cannot be there */
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint32_t i = find(d, &k);
	if (i)
		entry_remove(d, k.sh, i);
	shard_unlock(k.sh);
	return SHD_OK;
}

enum shdict_rc shdict_expire(struct shdict *d, const char *key, size_t klen, uint64_t ttl_us)
{
	struct keyref k;
	if (keyref_make(d, key, klen, &k) < 0)
		return SHD_NOT_FOUND;
	if (shard_lock(d, k.sh) != SHD_OK)
		return SHD_BUSY;
	uint64_t now = now_us();
	uint32_t i = find_live(d, &k, now);
	if (i)
		ent(d, k.sh, i)->expire_us = deadline(ttl_us, now);
	shard_unlock(k.sh);
	return i ? SHD_OK : SHD_NOT_FOUND;
}

enum shdict_rc shdict_flush(struct shdict *d)
{
	enum shdict_rc rc = SHD_OK;
	for (uint32_t s = 0; s < d->nshards; s++) {
		struct shd_shard *sh = &d->shards[s];
		if (shard_lock(d, sh) != SHD_OK) {
			rc = SHD_BUSY;
			continue;
		}
		shard_reset(d, sh);
		shard_unlock(sh);
	}
	return rc;
}

void shdict_stats(struct shdict *d, struct shdict_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->shards = d->nshards;
	for (uint32_t s = 0; s < d->nshards; s++) {
		struct shd_shard *sh = &d->shards[s];
		st->bytes_capacity += (uint64_t)sh->nblocks * SHDICT_BLOCK;
		/* A shard whose lock stays busy is read as it is: these are
		 * figures for a graph, not decisions. */
		int locked = shard_lock(d, sh) == SHD_OK;
		st->entries += sh->entries;
		st->bytes_used += (uint64_t)sh->used * SHDICT_BLOCK;
		st->evictions += sh->evictions;
		st->expired += sh->expired;
		st->recoveries += sh->recoveries;
		if (locked)
			shard_unlock(sh);
	}
}

void shdict_test_lock_shard(struct shdict *d, const char *key, size_t klen)
{
	struct keyref k;
	if (keyref_make(d, key, klen, &k) == 0)
		AZ(shard_lock(d, k.sh));
}

const char *shdict_rc_str(enum shdict_rc rc)
{
	switch (rc) {
	case SHD_OK: return "ok";
	case SHD_NOT_FOUND: return "not found";
	case SHD_EXISTS: return "exists";
	case SHD_MISMATCH: return "changed";
	case SHD_NOT_NUMBER: return "not a number";
	case SHD_KEY_TOO_LARGE: return "key too large";
	case SHD_VALUE_TOO_LARGE: return "value too large";
	case SHD_BUSY: return "busy";
	}
	return "?";
}

void shdict_metrics(struct buf *out)
{
	if (inst == NULL)
		return;
	struct shdict_stats st;
	shdict_stats(inst, &st);
	buf_appendf(out,
		    "# HELP sluice_lua_shared_entries Entries in sluice.shared, expired ones not yet reclaimed included\n"
		    "# TYPE sluice_lua_shared_entries gauge\nsluice_lua_shared_entries %llu\n"
		    "# HELP sluice_lua_shared_bytes_used Bytes of sluice.shared's blocks in use\n"
		    "# TYPE sluice_lua_shared_bytes_used gauge\nsluice_lua_shared_bytes_used %llu\n"
		    "# HELP sluice_lua_shared_bytes_capacity Bytes of blocks sluice.shared can hold (lua_shared_memory less its index)\n"
		    "# TYPE sluice_lua_shared_bytes_capacity gauge\nsluice_lua_shared_bytes_capacity %llu\n"
		    "# HELP sluice_lua_shared_evictions_total Live entries of sluice.shared evicted to make room\n"
		    "# TYPE sluice_lua_shared_evictions_total counter\nsluice_lua_shared_evictions_total %llu\n"
		    "# HELP sluice_lua_shared_expired_total Expired entries of sluice.shared reclaimed\n"
		    "# TYPE sluice_lua_shared_expired_total counter\nsluice_lua_shared_expired_total %llu\n",
		    (unsigned long long)st.entries, (unsigned long long)st.bytes_used,
		    (unsigned long long)st.bytes_capacity, (unsigned long long)st.evictions,
		    (unsigned long long)st.expired);
}
