/* Worker process: owns a libuv loop, its listeners' accept sockets, its
 * clients and its backend connection pools. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "worker.h"
#include "route.h"
#include "acceptor.h"
#include "admin.h"
#include "alloc.h"
#include "health.h"
#include "conn.h"
#include "h1.h"
#include "h2.h"
#include "stream.h"
#include "inspect.h"
#include "log.h"
#include "logpass.h"
#include "master.h"
#include "shm.h"
#include "stats.h"
#include "tls.h"
#include "ratelimit.h"
#include "upstream.h"

struct worker *W;

static void on_connection(uv_stream_t *server, int status)
{
	struct worker_listener *li = server->data;
	if (acceptor_ready(&li->acc, status))
		conn_accept(li);
}

void worker_read_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	(void)h;
	(void)suggested;
	if (W->rbuf_busy) {  /* never expected; libuv then reports ENOBUFS */
		buf->base = NULL;
		buf->len = 0;
		return;
	}
	W->rbuf_busy = 1;
	buf->base = W->rbuf;
	buf->len = sizeof(W->rbuf);
}

static void kick_cb(uv_poll_t *h, int status, int events)
{
	(void)h;
	(void)events;
	uint64_t v;
	if (status < 0)
		return;
	while (read(shm->workers[W->slot].efd, &v, sizeof(v)) == sizeof(v))
		;
	upstream_on_kick();
}

static void flush_cb(uv_check_t *h)
{
	(void)h;
	log_flush();
	W->hs_budget = WORKER_HS_BUDGET;  /* once per loop turn */
}

/* Until the stats module exports them, a worker's connection reuse per
 * backend is reported in its last words. */
static void log_reuse(void)
{
	for (unsigned b = 0; b < W->nbackends; b++) {
		const struct backend *be = &W->backends[b];
		if (be->nrequests == 0)
			continue;
		log_info("backend %s: %llu requests on %llu new connections, %.1f%% on reused ones",
			 be->cfg->name, (unsigned long long)be->nrequests, (unsigned long long)be->nconnects,
			 100.0 * (double)be->nreused / (double)be->nrequests);
	}
}

void worker_maybe_exit(void)
{
	if (!W->draining || W->nclients > 0 || W->nbconns > 0)
		return;
	log_reuse();
	log_info("drained, exiting");
	log_flush();
	exit(0);
}

#define PURGE_DELAY_MS 250   /* batch the frees of many connections going idle */

static void purge_cb(uv_timer_t *t)
{
	(void)t;
	alloc_release_free_pages();
}

void worker_memory_freed(void)
{
	if (!uv_is_active((uv_handle_t *)&W->purge_timer))
		uv_timer_start(&W->purge_timer, purge_cb, PURGE_DELAY_MS, 0);
}

static void drain_timeout_cb(uv_timer_t *t)
{
	(void)t;
	if (W->nclients)
		log_warn("drain timeout: closing %u client connection(s) still open", W->nclients);
	else
		log_info("drain timeout: closing %u backend connection(s) still open", W->nbconns);
	log_reuse();
	log_flush();
	exit(0);
}

static void listener_closed(uv_handle_t *h)
{
	(void)h;
}

int worker_ready(const struct worker_listener *li)
{
	if (atomic_load_explicit(&shm->drain, memory_order_relaxed))
		return 0;
	if (li == NULL)
		return 1;
	/* Only a request on the monitor_uri gets here: hashing the address
	 * each time costs less than keeping it per listener. */
	uint64_t key = shm_addr_key(&li->cfg->addr.ss, li->cfg->addr.len);
	for (unsigned i = 0; i < SHM_MAX_CLOSING; i++)
		if (atomic_load_explicit(&shm->closing_addrs[i], memory_order_relaxed) == key)
			return 0;
	return 1;
}

static void worker_drain(void)
{
	if (W->draining)
		return;
	W->draining = 1;
	/* The master is gone (PR_SET_PDEATHSIG): nobody else will say the
	 * instance is going. A reload's drain leaves readiness alone: the new
	 * generation serves on the same sockets. */
	if (worker_orphaned())
		atomic_fetch_or(&shm->drain, SHM_DRAIN_STOP);
	log_info("draining: %u client connection(s) open", W->nclients);
	for (unsigned i = 0; i < W->nlisteners; i++)
		acceptor_stop(&W->listeners[i].acc, listener_closed);
	health_stop();
	admin_stop();
	conn_drain_all();
	upstream_close_idle();
	uv_timer_start(&W->drain_timer, drain_timeout_cb, W->cfg->timeouts.drain_ms, 0);
	/* Closing handles finish in callbacks; the loop exits from there. */
	worker_maybe_exit();
}

static void on_signal(uv_signal_t *h, int signum)
{
	(void)h;
	switch (signum) {
	case SIGTERM:
	case SIGINT:
		worker_drain();
		break;
	case SIGUSR1:   /* the master reopens the logs and hands them over */
		break;
	case SIGHUP:    /* the master reloads */
	case SIGUSR2:   /* the master upgrades */
		break;
	default:
		break;
	}
}

void worker_start(struct cfg *cfg, int index, int slot, const struct worker_fd *fds, unsigned nfds,
		  struct tls_set *tls)
{
	static struct worker w;
	W = &w;
	w.cfg = cfg;
	w.index = index;
	w.slot = slot;
	list_init(&w.clients);
	list_init(&w.hs_deferred);
	w.hs_budget = WORKER_HS_BUDGET;
	list_init(&w.bconns);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	w.boot_us = (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
	char role[32];
	snprintf(role, sizeof(role), "worker %d", index);
	log_set_role(role);
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	signal(SIGPIPE, SIG_IGN);
	AZ(uv_loop_init(&w.loop));
	conn_init();
	h1_init();
	codec_default_set(&h1_codec);
	h2_init();
	codec_h2_set(&h2_codec);
	stream_init();
	upstream_init(&w, tls);

	w.nlisteners = nfds;
	w.listeners = calloc(nfds, sizeof(*w.listeners));
	AN(w.listeners);
	for (unsigned i = 0; i < nfds; i++) {
		struct worker_listener *li = &w.listeners[i];
		li->cfg = &cfg->listeners[fds[i].listener];
		li->be = upstream_backend(li->cfg->backend_name);
		li->tls = tls->listeners[fds[i].listener];
		char sname[SHM_NAME_MAX];
		stats_listener_slot_name(li->cfg, sname, sizeof(sname));
		int sslot = shm_slot_find(sname);
		AN(sslot >= 0);
		li->st = stats_block(slot, sslot);
		AN(li->be);
		li->routes = route_table_build(li->cfg);
		AN(li->routes || li->cfg->nroutes == 0);
		li->w = &w;
		int rc = acceptor_open(&w.loop, &li->acc, &li->tcp, fds[i].fd, li->cfg->backlog,
				       li->cfg->addr.text, on_connection, li);
		if (rc < 0) {
			log_error("listener %s: %s", li->cfg->addr.text, uv_strerror(rc));
			exit(2);
		}
	}
	inspect_init(&w);
	ratelimit_worker_start();
	uv_signal_init(&w.loop, &w.sig_term);
	uv_signal_start(&w.sig_term, on_signal, SIGTERM);
	uv_signal_init(&w.loop, &w.sig_int);
	uv_signal_start(&w.sig_int, on_signal, SIGINT);
	uv_signal_init(&w.loop, &w.sig_usr1);
	uv_signal_start(&w.sig_usr1, on_signal, SIGUSR1);
	uv_signal_init(&w.loop, &w.sig_hup);
	uv_signal_start(&w.sig_hup, on_signal, SIGHUP);  /* the master reloads, not us */
	/* The master upgrades, not us; its default action would kill us
	 * (`pkill -USR2 sluice`, `systemctl kill -s USR2` without
	 * --kill-whom=main). */
	uv_signal_init(&w.loop, &w.sig_usr2);
	uv_signal_start(&w.sig_usr2, on_signal, SIGUSR2);
	/* Unblock (the master blocks them for sigtimedwait) only now that the
	 * handlers exist: a SIGTERM sent right after fork is then a drain,
	 * not a death. */
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	uv_poll_init(&w.loop, &w.kick, shm->workers[slot].efd);
	uv_poll_start(&w.kick, UV_READABLE, kick_cb);
	uv_check_init(&w.loop, &w.flush);
	uv_check_start(&w.flush, flush_cb);
	uv_unref((uv_handle_t *)&w.flush);
	uv_idle_init(&w.loop, &w.hs_idle);
	uv_timer_init(&w.loop, &w.drain_timer);
	uv_timer_init(&w.loop, &w.queue_timer);
	uv_timer_init(&w.loop, &w.purge_timer);
	uv_unref((uv_handle_t *)&w.purge_timer);  /* never keeps a draining worker alive */
	if (index == 0) {
		health_start(&w);
		admin_start(&w);
	}
	/* The master may have been told to stop while we were forking. */
	if (worker_orphaned())
		worker_drain();
}

static void logs_cb(uv_poll_t *h, int status, int events)
{
	(void)events;
	int r = status < 0 ? -1 : logpass_recv(W->logs_fd);
	while (r == 1)
		r = logpass_recv(W->logs_fd);
	if (r < 0)   /* the master is gone: nothing more will come */
		uv_poll_stop(h);
}

void worker_take_logs(int fd)
{
	W->logs_fd = fd;
	uv_poll_init(&W->loop, &W->logs_poll, fd);
	uv_poll_start(&W->logs_poll, UV_READABLE, logs_cb);
	uv_unref((uv_handle_t *)&W->logs_poll);   /* never keeps a draining worker alive */
}

int worker_orphaned(void)
{
	pid_t master = atomic_load(&shm->master_pid);
	/* master == getpid(): set up in-process (the fuzz rig), no master. */
	return master != getpid() && getppid() != master;
}

void worker_run(struct cfg *cfg, int index, int slot, const struct worker_fd *fds, unsigned nfds,
		struct tls_set *tls)
{
	worker_start(cfg, index, slot, fds, nfds, tls);
	uv_run(&W->loop, UV_RUN_DEFAULT);
	log_flush();
	exit(0);
}
