/* A worker process: one libuv loop serving its share of every listener. */
#ifndef SLUICE_WORKER_H
#define SLUICE_WORKER_H

#include <uv.h>
#include "cfg-t.h"
#include "proxy-t.h"

#define WORKER_RBUF_SIZE 65536
#define WORKER_HS_BUDGET 16

struct worker {
	uv_loop_t loop;
	struct cfg *cfg;
	int index;                  /* 0..workers-1 within its generation */
	int slot;                   /* shm worker slot */
	struct worker_listener *listeners;
	unsigned nlisteners;
	struct backend *backends;
	unsigned nbackends;
	struct list clients;
	uint32_t nclients;
	struct list bconns;         /* busy and connecting backend connections */
	uint32_t nbconns;           /* every open bconn, idle ones included */
	uv_signal_t sig_term, sig_int, sig_usr1, sig_hup, sig_usr2;
	uv_poll_t kick;
	uv_poll_t logs_poll;        /* log files from the master (logpass.h) */
	int logs_fd;
	uv_check_t flush;
	uv_timer_t drain_timer;
	uv_timer_t queue_timer;     /* retries queued requests while any wait */
	uv_timer_t purge_timer;     /* hands freed heap back to the OS (worker_memory_freed) */
	int draining;
	/* Reads land here; whatever must outlive the read callback is copied
	 * by its owner (client->in for unparsed pipelined bytes). */
	char rbuf[WORKER_RBUF_SIZE];
	int rbuf_busy;
	struct buf tls_plain;       /* decrypted bytes of the read being handled */
	/* Handshake fairness: at most WORKER_HS_BUDGET handshake steps per loop
	 * turn; the rest wait here (reads stopped) so a flood of new TLS
	 * connections cannot starve established ones of the loop. */
	uint64_t boot_us;           /* wall clock at start: prefix of connection ids */
	uint64_t conn_serial;       /* last client serial handed out */
	struct buf scratch;         /* short-lived: PROXY headers, encodings (never held across calls) */
	uint32_t hs_budget;
	struct list hs_deferred;
	uv_idle_t hs_idle;
};

extern struct worker *W;
struct tls_set;

/* libuv alloc callback for every connection of this worker: reads land in
 * the one shared buffer (reads never nest); read callbacks give it back
 * with worker_read_done() and copy out whatever must outlive them. */
void worker_read_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* Idle connections gave memory back: within 250 ms, return the
 * allocator's now-unused pages to the OS, so RSS reflects what connections
 * hold. The allocator would otherwise keep them until later allocations
 * trigger its own purge, which an idle worker never makes. */
void worker_memory_freed(void);
static inline void worker_read_done(const uv_buf_t *buf)
{
	if (buf->base == W->rbuf)
		W->rbuf_busy = 0;
}

/* One accept socket handed to a worker, and the listener it belongs to. */
struct worker_fd {
	unsigned listener;  /* index into cfg->listeners */
	int fd;
};

/* Sets the worker up (W, its loop, listeners, pools, hook) without running
 * the loop: worker_run's first half, also what an in-process test rig
 * drives with its own uv_run calls. */
void worker_start(struct cfg *cfg, int index, int slot, const struct worker_fd *fds, unsigned nfds,
		  struct tls_set *tls);
/* Runs the worker until it has drained; never returns. */
void worker_run(struct cfg *cfg, int index, int slot, const struct worker_fd *fds, unsigned nfds,
		struct tls_set *tls) __attribute__((noreturn));
/* Drain finished or a client/bconn count dropped: exit if nothing is left. */
void worker_maybe_exit(void);
/* The master that forked this worker is gone (the worker was reparented).
 * Not "parent is 1": in a container the master itself may be PID 1. */
int worker_orphaned(void);
/* Adopt the log files the master sends on FD (its channel to this worker). */
void worker_take_logs(int fd);
/* Readiness for a balancer: 1 while the instance serves and is not
 * draining (shm's drain: stopping, POST /drain) and, for a listener LI,
 * while LI is not one a reload removed; NULL asks for the instance
 * (GET /ready). Read from shared memory, so every worker agrees. */
int worker_ready(const struct worker_listener *li);

#endif
