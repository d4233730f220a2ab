/* Worker process: owns a libuv loop, its listeners' accept sockets, its
 * clients and its backend connection pools. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "worker.h"
#include "admin.h"
#include "alloc.h"
#include "health.h"
#include "http1.h"
#include "inspect.h"
#include "log.h"
#include "master.h"
#include "shm.h"
#include "stats.h"
#include "upstream.h"

struct worker *W;

/* Accept back-off. On EMFILE/ENFILE libuv closes a reserved descriptor,
 * accepts and closes the pending connections, and opens the reserve again.
 * When that cannot help (the limit is below the reserve, or the reserve
 * could not be reopened) it reports the error to on_connection and calls
 * accept() again at once, in a loop that does not return to the event loop
 * while the listening fd is open: the worker spins, logs every attempt and
 * serves no one. Closing the handle is the only way out of that loop, so
 * each listener keeps a duplicate of its socket: the handle is closed, the
 * socket stays open (the kernel keeps queueing its connections), and a
 * timer opens a handle on it again once a descriptor is free. */
#define ACCEPT_BACKOFF_MIN_MS 20
#define ACCEPT_BACKOFF_MAX_MS 500

struct accept_pause {
	uv_timer_t timer;
	int spare;                  /* dup of the listening socket; -1 once drained */
	uint64_t since_us;          /* start of the current episode, 0 = accepting */
	uint64_t last_log_us;       /* rate limit for other accept errors */
	unsigned backoff_ms;
};

static struct accept_pause *pauses;  /* parallel to W->listeners */

static void on_connection(uv_stream_t *server, int status);

static struct accept_pause *pause_of(const struct worker_listener *li)
{
	return &pauses[li - W->listeners];
}

static int accept_listen(struct worker_listener *li, int fd)
{
	uv_tcp_init(&W->loop, &li->tcp);
	li->tcp.data = li;
	int rc = uv_tcp_open(&li->tcp, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&li->tcp, li->cfg->backlog, on_connection);
	return rc;
}

static void accept_retry_cb(uv_timer_t *t)
{
	struct worker_listener *li = t->data;
	struct accept_pause *ap = pause_of(li);
	if (W->draining || ap->spare < 0)
		return;
	/* The handle takes the spare; a new spare needs a free descriptor,
	 * which is also the sign that accepting can work again. */
	int spare = fcntl(ap->spare, F_DUPFD_CLOEXEC, 0);
	if (spare < 0) {
		ap->backoff_ms = ap->backoff_ms * 2 > ACCEPT_BACKOFF_MAX_MS ? ACCEPT_BACKOFF_MAX_MS
									  : ap->backoff_ms * 2;
		uv_timer_start(&ap->timer, accept_retry_cb, ap->backoff_ms, 0);
		return;
	}
	int fd = ap->spare;
	ap->spare = spare;
	int rc = accept_listen(li, fd);
	if (rc < 0) {
		log_error("listener %s: cannot listen again: %s", li->cfg->addr.text, uv_strerror(rc));
		uv_close((uv_handle_t *)&li->tcp, NULL);
	}
}

static void accept_paused_cb(uv_handle_t *h)
{
	struct worker_listener *li = h->data;
	struct accept_pause *ap = pause_of(li);
	if (W->draining)
		return;
	uv_timer_start(&ap->timer, accept_retry_cb, ap->backoff_ms, 0);
}

static void accept_failed(struct worker_listener *li, int status)
{
	struct accept_pause *ap = pause_of(li);
	int exhausted = status == UV_EMFILE || status == UV_ENFILE || status == UV_ENOBUFS ||
			status == UV_ENOMEM;
	uint64_t now = now_us();
	if (!exhausted) {
		/* Per-connection failures: libuv goes on with the next one. */
		if (now - ap->last_log_us >= 1000000) {
			ap->last_log_us = now;
			log_error("accept on %s: %s", li->cfg->addr.text, uv_strerror(status));
		}
		return;
	}
	if (ap->since_us == 0) {
		ap->since_us = now;
		ap->backoff_ms = ACCEPT_BACKOFF_MIN_MS;
		log_error("accept on %s: %s: new connections wait until descriptors are free (%u open clients)",
			  li->cfg->addr.text, uv_strerror(status), W->nclients);
	}
	if (!uv_is_closing((uv_handle_t *)&li->tcp))
		uv_close((uv_handle_t *)&li->tcp, accept_paused_cb);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct worker_listener *li = server->data;
	if (status < 0) {
		accept_failed(li, status);
		return;
	}
	struct accept_pause *ap = pause_of(li);
	if (ap->since_us) {
		log_warn("accept on %s: accepting again after %llu ms", li->cfg->addr.text,
			 (unsigned long long)((now_us() - ap->since_us) / 1000));
		ap->since_us = 0;
	}
	client_accept(li);
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

static void worker_drain(void)
{
	if (W->draining)
		return;
	W->draining = 1;
	log_info("draining: %u client connection(s) open", W->nclients);
	for (unsigned i = 0; i < W->nlisteners; i++) {
		if (!uv_is_closing((uv_handle_t *)&W->listeners[i].tcp))
			uv_close((uv_handle_t *)&W->listeners[i].tcp, listener_closed);
		uv_timer_stop(&pauses[i].timer);
		if (pauses[i].spare >= 0)
			close(pauses[i].spare);
		pauses[i].spare = -1;
	}
	health_stop();
	admin_stop();
	client_drain_all();
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
	case SIGUSR1:
		log_flush();
		log_open(W->cfg->error_log, W->cfg->access_log);
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
	http1_settings_init();
	upstream_init(&w, tls);

	w.nlisteners = nfds;
	w.listeners = calloc(nfds, sizeof(*w.listeners));
	AN(w.listeners);
	pauses = calloc(nfds, sizeof(*pauses));
	AN(pauses);
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
		li->w = &w;
		struct accept_pause *ap = &pauses[i];
		uv_timer_init(&w.loop, &ap->timer);
		uv_unref((uv_handle_t *)&ap->timer);
		ap->timer.data = li;
		ap->spare = fcntl(fds[i].fd, F_DUPFD_CLOEXEC, 0);
		int rc = ap->spare < 0 ? uv_translate_sys_error(errno) : accept_listen(li, fds[i].fd);
		if (rc < 0) {
			log_error("listener %s: %s", li->cfg->addr.text, uv_strerror(rc));
			exit(2);
		}
	}
	inspect_init(&w);
	uv_signal_init(&w.loop, &w.sig_term);
	uv_signal_start(&w.sig_term, on_signal, SIGTERM);
	uv_signal_init(&w.loop, &w.sig_int);
	uv_signal_start(&w.sig_int, on_signal, SIGINT);
	uv_signal_init(&w.loop, &w.sig_usr1);
	uv_signal_start(&w.sig_usr1, on_signal, SIGUSR1);
	uv_signal_init(&w.loop, &w.sig_hup);
	uv_signal_start(&w.sig_hup, on_signal, SIGHUP);  /* the master reloads, not us */
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
	if (getppid() == 1)
		worker_drain();
}

void worker_run(struct cfg *cfg, int index, int slot, const struct worker_fd *fds, unsigned nfds,
		struct tls_set *tls)
{
	worker_start(cfg, index, slot, fds, nfds, tls);
	uv_run(&W->loop, UV_RUN_DEFAULT);
	log_flush();
	exit(0);
}
