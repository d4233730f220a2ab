/* Instance-wide shared memory: created by the master before any fork, so
 * every worker of every generation sees the same mapping.
 *
 * Named slots hold the counters that must be exact across workers: open
 * connections per backend server (the max_connections cap), requests waiting
 * per backend, server health. Every counter a worker changes is mirrored in
 * that worker's own contribution row, so when a worker dies the master
 * subtracts exactly what it held (shm_worker_reclaim) and the cap cannot leak.
 * Only the master allocates slots; workers look them up by name. */
#ifndef SLUICE_SHM_H
#define SLUICE_SHM_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define SHM_MAX_WORKERS 128
#define SHM_MAX_SLOTS   512
#define SHM_NAME_MAX    136

enum shm_counter {
	SHM_CONNS,    /* open backend connections (server slot) */
	SHM_WAITING,  /* requests queued, all workers (backend slot; server slot: its own queue) */
	SHM_BUSY,     /* connections carrying a request now (server slot; leastconn only) */
	SHM_NCOUNTERS
};

struct shm_slot {
	char name[SHM_NAME_MAX];        /* "backend" or "backend/server"; "" = free */
	_Atomic uint32_t c[SHM_NCOUNTERS];
	_Atomic int up;                 /* server health: 1 up, 0 down */
	_Atomic int admin;              /* enum shm_admin: operator's state (server slot) */
	_Atomic uint32_t max_conns;     /* operator's max_connections, 0 = the config's */
	_Atomic uint32_t weight_op;     /* operator's weight + 1, 0 = the config's */
	/* CLOCK_MONOTONIC ms when the server last came back into balancing
	 * (health rise, enable): slow start ramps from there; 0 = never left. */
	_Atomic uint64_t back_since_ms;
	/* Passive outlier ejection (server slot): failures in a row, and the
	 * CLOCK_MONOTONIC ms until which the server is out (0 = in). */
	_Atomic uint32_t fails_5xx, fails_timeout;
	_Atomic uint64_t ejected_until_ms;
	/* weblogic persistence (server slot): hash of the JVMID the server
	 * last showed in a response, 0 = none learned. Kept across reloads. */
	_Atomic uint64_t wl_id;
};

struct shm_worker {
	_Atomic pid_t pid;              /* 0 = free slot */
	int efd;                        /* eventfd that wakes this worker (kick) */
	uint32_t generation;
};

/* Why the instance is not ready (struct shm's drain): each cause is set
 * and cleared on its own, and any one makes it answer 503. */
enum shm_drain {
	SHM_DRAIN_ADMIN = 1,   /* POST /drain, until POST /ready */
	SHM_DRAIN_STOP = 2,    /* stopping: the drain notice, then the drain */
};
#define SHM_MAX_CLOSING 64

/* A listening address as a non-zero 64-bit key (FNV-1a of its sockaddr
 * bytes): what the master and the workers compare to tell a listener a
 * reload removed. */
static inline uint64_t shm_addr_key(const void *sa, size_t len)
{
	const unsigned char *p = sa;
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h ? h : 1;
}

/* Server states an operator sets through the admin listener. */
enum shm_admin {
	SHM_ADMIN_ENABLED,
	SHM_ADMIN_DISABLED,  /* out of balancing, health checks paused */
	SHM_ADMIN_DRAIN,     /* out of balancing, in-flight requests finish, checks go on */
};

/* app_cookie persistence: application cookie values (hashed with their
 * backend) -> server slot, instance-wide and bounded. Set-associative:
 * a value hashes to one set of STICK_WAYS entries; a full set gives up
 * its least recently used entry, and an entry unused for the backend's
 * ttl is dead. One short lock per set, its holder's worker slot + 1, so
 * the master can break it if that worker dies holding it. */
#define STICK_WAYS 8
#define STICK_SETS 8192
struct stick_entry {
	uint64_t key;                   /* 0 = free */
	uint32_t slot;                  /* the server's shm slot */
	uint32_t used_s;                /* CLOCK_MONOTONIC seconds of the last use */
};
struct stick_set {
	_Atomic uint32_t lock;
	struct stick_entry e[STICK_WAYS];
};

struct shm {
	_Atomic int inspect_on;         /* the inspection hook switch, all workers */
	_Atomic int64_t started;        /* master start, unix seconds */
	_Atomic pid_t master_pid;
	/* POST /reload from a worker that may not signal a root master. */
	_Atomic int reload_requested;
	/* Readiness for a balancer (GET /ready, monitor_uri): why the instance
	 * is draining, enum shm_drain bits; 0 = ready. */
	_Atomic uint32_t drain;
	/* Listening addresses a reload removed (shm_addr_key), from the start
	 * of their drain notice: their monitor_uri answers 503. 0 = free. */
	_Atomic uint64_t closing_addrs[SHM_MAX_CLOSING];
	_Atomic uint64_t ticket;        /* last queue ticket issued */
	struct shm_worker workers[SHM_MAX_WORKERS];
	struct shm_slot slots[SHM_MAX_SLOTS];
	_Atomic uint32_t contrib[SHM_MAX_WORKERS][SHM_MAX_SLOTS][SHM_NCOUNTERS];
	/* Ticket of the request at the head of each worker's queue for each
	 * backend slot, 0 = none: the instance-wide FIFO order. */
	_Atomic uint64_t head_ticket[SHM_MAX_WORKERS][SHM_MAX_SLOTS];
	struct stick_set stick[STICK_SETS];
};

extern struct shm *shm;

/* Master: map the region and create one eventfd per worker slot. */
int shm_init(void);
/* Master: slot index for NAME, allocating it (up=1) if new; -1 when full. */
int shm_slot_get(const char *name);
/* Worker: slot index for NAME, or -1. */
int shm_slot_find(const char *name);
/* Master: a free worker slot, or -1. */
int shm_worker_alloc(void);
/* Master: subtract everything worker slot W still held, then free it. */
void shm_worker_reclaim(int w);

/* Worker-side counter updates (W = this worker's slot). */
void shm_add(int w, int slot, enum shm_counter c, int delta);
/* Increment SHM_CONNS of SLOT if below MAX; returns 1 when reserved. */
int shm_conns_reserve(int w, int slot, uint32_t max);
static inline uint32_t shm_get(int slot, enum shm_counter c)
{
	return atomic_load_explicit(&shm->slots[slot].c[c], memory_order_relaxed);
}
/* Queue order across workers and queues: tickets from one instance-wide
 * counter, so that a backend's queue and its servers' compare by age; each
 * worker publishes the ticket of each of its queue heads (head_ticket). */
uint64_t shm_ticket_next(void);
void shm_head_publish(int w, int slot, uint64_t ticket);
/* 1 when another worker's queue head for SLOT is older than MINE. */
int shm_older_waiter(int w, int slot, uint64_t mine);

/* The app_cookie table (see struct stick_set): the server slot KEY was
 * learned for, -1 when unknown or older than TTL_S; learning KEY for SLOT. */
int shm_stick_get(int w, uint64_t key, uint32_t now_s, uint32_t ttl_s);
void shm_stick_put(int w, uint64_t key, int slot, uint32_t now_s);

/* Wake every other live worker so it re-examines queues and idle pools. */
void shm_kick_others(int w);

#endif
