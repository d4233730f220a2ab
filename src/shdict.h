/* The instance-wide shared dictionary behind `sluice.shared`: a bounded
 * key -> value store in one MAP_SHARED region that the master maps before
 * the first fork and keeps across reloads, so every worker of every
 * generation reads and writes the same entries.
 *
 * Keys are byte strings of at most SHDICT_KEY_MAX bytes; values are
 * booleans, 64-bit integers, doubles or byte strings of at most
 * shdict_value_max() bytes. Each entry may carry a time to live on
 * CLOCK_MONOTONIC, which is one clock for every process of the machine.
 *
 * The region is split into shards (a key's hash picks one), each with its
 * own robust process-shared mutex, hash buckets and blocks of SHDICT_BLOCK
 * bytes. An entry is a chain of blocks; a shard that lacks room for a new
 * one reclaims expired entries from the cold end of its LRU list first,
 * then evicts the least recently used live ones (counted). Nothing is
 * allocated per operation: string values are copied into the caller's
 * buffer. A worker killed while holding a shard's lock does not wedge the
 * others: the next locker gets EOWNERDEAD and empties that shard (its
 * lists may be half-updated), which is logged and counted. */
#ifndef SLUICE_SHDICT_H
#define SLUICE_SHDICT_H

#include <stddef.h>
#include <stdint.h>

#define SHDICT_KEY_MAX       255u
#define SHDICT_VALUE_MAX     (64u * 1024)   /* never more than this, smaller for tiny regions */
#define SHDICT_BLOCK         64u
#define SHDICT_SIZE_MIN      (64u * 1024)
#define SHDICT_SIZE_MAX      (16ull << 30)
#define SHDICT_SIZE_DEFAULT  (8u << 20)
#define SHDICT_TTL_MAX_US    (1000000000ull * 1000000ull)  /* 10^9 s, about 31 years */

struct shdict;

enum shdict_type {
	SHD_NIL,      /* absent (get/cas), or "delete" as a value to store */
	SHD_BOOL,
	SHD_INT,
	SHD_NUM,      /* double */
	SHD_STR,
};

struct shdict_val {
	uint8_t type;         /* enum shdict_type */
	int b;
	int64_t i;
	double d;
	const char *s;        /* SHD_STR: bytes (the caller's buffer on the way out) */
	size_t len;
};

enum shdict_rc {
	SHD_OK,
	SHD_NOT_FOUND,        /* replace, incr without init, expire, ttl */
	SHD_EXISTS,           /* add */
	SHD_MISMATCH,         /* cas: the current value was not OLD (it is in *CUR) */
	SHD_NOT_NUMBER,       /* incr on a value that is not a number */
	SHD_KEY_TOO_LARGE,
	SHD_VALUE_TOO_LARGE,
	SHD_BUSY,             /* the shard's lock stayed held past SHDICT_LOCK_WAIT_MS */
};

enum shdict_store_mode {
	SHD_SET,              /* store whatever is there */
	SHD_ADD,              /* only if no live entry */
	SHD_REPLACE,          /* only if a live entry */
};

/* How long an operation waits for a shard's lock before giving up with
 * SHD_BUSY: a holder that was stopped (SIGSTOP, a debugger) must not stop
 * every worker's event loop with it. Holders keep it for microseconds. */
#define SHDICT_LOCK_WAIT_MS 100

struct shdict_stats {
	uint64_t entries;       /* stored, expired ones not yet reclaimed included */
	uint64_t bytes_used;    /* blocks in use x SHDICT_BLOCK */
	uint64_t bytes_capacity;
	uint64_t evictions;     /* live entries removed to make room */
	uint64_t expired;       /* expired entries reclaimed */
	uint64_t recoveries;    /* shards emptied after a lock holder died */
	uint32_t shards;
};

/* Master, before any fork: map the instance's dictionary of SIZE bytes
 * (SHDICT_SIZE_MIN..SHDICT_SIZE_MAX). Called again on reload: the region
 * stays as it is, with a warning if SIZE changed. Returns 0, or -1 with
 * errno. */
int shdict_init(uint64_t size);
/* The instance's dictionary, or NULL outside a master and its workers. */
struct shdict *shdict_instance(void);
/* A process-private dictionary of SIZE bytes (config checks, the fuzz
 * rig, unit tests). NULL on failure. */
struct shdict *shdict_create_private(uint64_t size);
void shdict_destroy_private(struct shdict *d);

/* Largest string value D holds. */
size_t shdict_value_max(const struct shdict *d);

/* Lookup. A string value is copied into BUF (CAP >= shdict_value_max())
 * and OUT->s points there. SHD_OK with OUT->type SHD_NIL when absent or
 * expired. TTL_US (may be NULL): the time left, 0 = none. */
enum shdict_rc shdict_get(struct shdict *d, const char *key, size_t klen,
			  struct shdict_val *out, char *buf, size_t cap, uint64_t *ttl_us);
/* Store V under KEY (V SHD_NIL deletes) with a time to live of TTL_US
 * (0 = none), as MODE says. *FORCIBLE (may be NULL) is set when live
 * entries were evicted to make room. */
enum shdict_rc shdict_store(struct shdict *d, enum shdict_store_mode mode, const char *key, size_t klen,
			    const struct shdict_val *v, uint64_t ttl_us, int *forcible);
/* Compare-and-set: store NEW (SHD_NIL: delete) only if the current value
 * equals OLD (SHD_NIL: absent). Numbers compare as Lua compares them (1 ==
 * 1.0). On SHD_MISMATCH the current value is in *CUR (strings copied into
 * BUF). OLD must share no storage with CUR or BUF: CUR is written before OLD
 * is compared (a retry loop keeps the value it read apart from the one it
 * passes back). */
enum shdict_rc shdict_cas(struct shdict *d, const char *key, size_t klen, const struct shdict_val *old,
			  const struct shdict_val *nw, uint64_t ttl_us, struct shdict_val *cur,
			  char *buf, size_t cap, int *forcible);
/* Add BY (SHD_INT or SHD_NUM) to the number under KEY. An absent key is
 * SHD_NOT_FOUND unless INIT is given (not NULL): then INIT + BY is stored
 * with INIT_TTL_US. An existing entry keeps its expiry. The sum stays an
 * integer unless either side is a double or it would overflow. */
enum shdict_rc shdict_incr(struct shdict *d, const char *key, size_t klen, const struct shdict_val *by,
			   const struct shdict_val *init, uint64_t init_ttl_us, struct shdict_val *out,
			   int *forcible);
enum shdict_rc shdict_delete(struct shdict *d, const char *key, size_t klen);
/* Set a live entry's time to live (0 = none). */
enum shdict_rc shdict_expire(struct shdict *d, const char *key, size_t klen, uint64_t ttl_us);
/* Remove every entry. */
enum shdict_rc shdict_flush(struct shdict *d);
void shdict_stats(struct shdict *d, struct shdict_stats *st);

/* Tests only: lock the shard KEY hashes to and return, holding it (the
 * caller then dies, or stops, with the lock held). */
void shdict_test_lock_shard(struct shdict *d, const char *key, size_t klen);

/* Text of an rc for scripts: "not found", "exists", "busy", ... */
const char *shdict_rc_str(enum shdict_rc rc);

struct buf;
/* /metrics: the instance dictionary's gauges and counters (nothing when
 * there is none). */
void shdict_metrics(struct buf *out);

#endif
