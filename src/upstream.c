/* Backend connection pools, the instance-wide connection cap and the queue.
 *
 * Accounting: shm SHM_CONNS of a server slot counts every open connection
 * (connecting, busy and idle) of every worker; a connection is counted from
 * the successful shm_conns_reserve() until its fd is closed. SHM_WAITING of a
 * backend slot counts queued requests of every worker. A worker that releases
 * a connection while another worker has waiters closes it instead of pooling
 * it and kicks the others, so the slot moves to whoever waits. */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "upstream.h"
#include "upstream_h1.h"
#include "forward.h"
#include "lb.h"
#include "persist.h"
#include "log.h"
#include "shm.h"
#include "stats.h"
#include "tls.h"
#include "worker.h"

#define QUEUE_RETRY_MS 50
#define RETIRE_MS 1000  /* how long a retiring connection may wait for the backend's FIN */
#define OUT_LOW_WATER (64 * 1024)

static struct list bc_free = { &bc_free, &bc_free };
static const struct upstream_events *ev;

void upstream_events_set(const struct upstream_events *events)
{
	ev = events;
	upstream_h1_init(events);
}

static void bconn_close(struct bconn *bc);
static void bconn_retire(struct bconn *bc);
static void bconn_write_cb(uv_write_t *req, int status);

/* The queue whose bytes go to the socket: ciphertext under TLS. */
static struct outq *bconn_wire(struct bconn *bc)
{
	return outq_wire(&bc->out, &bc->wire, bc->tls);
}
static void queue_timer_cb(uv_timer_t *t);
static void bconn_timer_cb(struct deadline *d);
/* Every backend connection's timeout on one libuv timer: a response
 * timeout moves with every read, which would otherwise restart a
 * uv_timer_t per read. */
static struct deadline_heap bconn_deadlines;

static void bconn_timer(struct bconn *bc, uint64_t ms)
{
	deadline_set(&bconn_deadlines, &bc->dl, ms);
}
static void bconn_connect_cb(uv_connect_t *req, int status);

static const struct persist_server_state persist_state = {
	.usable = upstream_server_usable,
	.keeps_sessions = upstream_server_keeps_sessions,
	.weight = upstream_server_weight,
};

int upstream_init(struct worker *w, struct tls_set *tls)
{
	persist_set_server_state(&persist_state);
	struct cfg *cfg = w->cfg;
	w->backends = calloc(cfg->nbackends, sizeof(*w->backends));
	AN(w->backends);
	w->nbackends = cfg->nbackends;
	deadline_heap_init(&bconn_deadlines, &w->loop, bconn_timer_cb);
	for (unsigned b = 0; b < cfg->nbackends; b++) {
		struct backend *be = &w->backends[b];
		be->cfg = &cfg->backends[b];
		be->tls = tls->backends[b];
		be->slot = shm_slot_find(be->cfg->name);
		AN(be->slot >= 0);
		list_init(&be->q.list);
		be->q.slot = be->slot;
		be->st = stats_block(w->slot, be->slot);
		be->nservers = be->cfg->nservers;
		be->servers = calloc(be->nservers, sizeof(*be->servers));
		be->cw = calloc(be->nservers, sizeof(*be->cw));
		be->w = calloc(be->nservers, sizeof(*be->w));
		AN(be->servers && be->cw && be->w);
		for (unsigned s = 0; s < be->nservers; s++) {
			struct server *srv = &be->servers[s];
			char name[SHM_NAME_MAX];
			srv->cfg = &be->cfg->servers[s];
			srv->be = be;
			list_init(&srv->idle);
			snprintf(name, sizeof(name), "%s/%s", be->cfg->name, srv->cfg->name);
			srv->slot = shm_slot_find(name);
			AN(srv->slot >= 0);
			srv->st = stats_block(w->slot, srv->slot);
			list_init(&srv->q.list);
			srv->q.slot = srv->slot;
			persist_init_server(srv);
		}
	}
	return 0;
}

void upstream_destroy(void)
{
	for (unsigned b = 0; b < W->nbackends; b++) {
		free(W->backends[b].servers);
		free(W->backends[b].cw);
		free(W->backends[b].w);
	}
	free(W->backends);
	W->backends = NULL;
	while (!list_empty(&bc_free)) {
		struct bconn *bc = CONTAINER_OF(bc_free.next, struct bconn, link);
		list_del(&bc->link);
		buf_free(&bc->out.pending);
		buf_free(&bc->out.inflight);
		buf_free(&bc->wire.pending);
		buf_free(&bc->wire.inflight);
		buf_free(&bc->pp);
		free(bc);
	}
}

struct backend *upstream_backend(const char *name)
{
	for (unsigned b = 0; b < W->nbackends; b++)
		if (strcmp(W->backends[b].cfg->name, name) == 0)
			return &W->backends[b];
	return NULL;
}

int upstream_server_ejected(const struct server *srv)
{
	uint64_t until = atomic_load_explicit(&shm->slots[srv->slot].ejected_until_ms, memory_order_relaxed);
	return until && uv_now(&W->loop) < until;
}

/* Healthy, not taken out of balancing by the operator, not ejected. */
static int server_up(const struct server *srv)
{
	const struct shm_slot *s = &shm->slots[srv->slot];
	return atomic_load_explicit(&s->up, memory_order_relaxed) &&
	       atomic_load_explicit(&s->admin, memory_order_relaxed) == SHM_ADMIN_ENABLED &&
	       !upstream_server_ejected(srv);
}

int upstream_server_usable(const struct server *srv)
{
	return server_up(srv);
}

/* A server draining keeps the sessions it holds; one down, disabled or
 * ejected does not. */
int upstream_server_keeps_sessions(const struct server *srv)
{
	const struct shm_slot *s = &shm->slots[srv->slot];
	return atomic_load_explicit(&s->up, memory_order_relaxed) &&
	       atomic_load_explicit(&s->admin, memory_order_relaxed) != SHM_ADMIN_DISABLED &&
	       !upstream_server_ejected(srv);
}

/* Slow start: where SRV is on its ramp back, 0 = not ramping. */
static uint64_t ramp_since(const struct server *srv, uint64_t *now_ms)
{
	uint32_t slow = srv->be->cfg->slow_start_ms;
	if (slow == 0)
		return 0;
	uint64_t since = atomic_load_explicit(&shm->slots[srv->slot].back_since_ms, memory_order_relaxed);
	if (since == 0)
		return 0;
	*now_ms = now_us() / 1000;
	return *now_ms < since + slow ? since : 0;
}

uint32_t upstream_server_tier_max_conns(const struct server *srv)
{
	uint32_t v = atomic_load_explicit(&shm->slots[srv->slot].max_conns, memory_order_relaxed);
	return v ? v : srv->cfg->max_connections;
}

uint32_t upstream_server_max_conns(const struct server *srv)
{
	uint64_t now_ms, since = ramp_since(srv, &now_ms);
	/* Rounded down, at least 1 (the config refuses a total below
	 * instances; the admin API may set one): the tier never exceeds the
	 * server's total. */
	uint32_t v = upstream_server_tier_max_conns(srv) / W->cfg->instances;
	v = v ? v : 1;
	return since ? lb_ramp(v, since, now_ms, srv->be->cfg->slow_start_ms) : v;
}

uint32_t upstream_server_weight(const struct server *srv)
{
	uint32_t v = atomic_load_explicit(&shm->slots[srv->slot].weight_op, memory_order_relaxed);
	return v ? v - 1 : srv->cfg->weight;
}

/* The weight balancing uses now, scaled by LB_SCALE: the operator's or the
 * config's, on its slow-start ramp. */
uint32_t upstream_server_eweight(const struct server *srv)
{
	uint32_t w = upstream_server_weight(srv) * LB_SCALE;
	uint64_t now_ms, since = ramp_since(srv, &now_ms);
	return since ? lb_ramp(w, since, now_ms, srv->be->cfg->slow_start_ms) : w;
}

/* Instance-wide count of connections carrying a request, which only
 * leastconn reads: other backends skip the shared-cache-line traffic. */
static void busy_add(struct server *srv, int delta)
{
	stats_gauge_add(srv->st, GAUGE_BCONN_BUSY, delta);
	if (srv->be->cfg->balance == CFG_BALANCE_LEASTCONN)
		shm_add(W->slot, srv->slot, SHM_BUSY, delta);
}

static void idle_add(struct server *srv, int delta)
{
	srv->nidle = (uint32_t)((int)srv->nidle + delta);
	stats_gauge_add(srv->st, GAUGE_BCONN_IDLE, delta);
}

/* ---- connection lifecycle ---- */

static void bconn_handle_closed(uv_handle_t *h)
{
	struct bconn *bc = h->data;
	if (--bc->closing_handles > 0)
		return;
	bc->out.pending.len = bc->out.inflight.len = 0;
	bc->wire.pending.len = bc->wire.inflight.len = 0;
	tls_conn_free(bc->tls);
	bc->tls = NULL;
	list_add_head(&bc_free, &bc->link);
	worker_maybe_exit();
}

static void bconn_close(struct bconn *bc)
{
	if (bc->state == BC_CLOSING)
		return;
	struct server *srv = bc->srv;
	if (bc->state == BC_IDLE) {
		idle_add(srv, -1);
	} else if (bc->state == BC_BUSY) {
		busy_add(srv, -1);
	}
	list_del(&bc->link);
	list_del(&bc->park_link);
	bc->state = BC_CLOSING;
	bc->strm = NULL;
	bc->closing_handles = 1;
	bconn_timer(bc, 0);
	uv_close((uv_handle_t *)&bc->tcp, bconn_handle_closed);
	/* The fd is closed by now: free the slot and let waiters have it. */
	srv->local_conns--;
	W->nbconns--;
	shm_add(W->slot, srv->slot, SHM_CONNS, -1);
	/* Our waiters get the slot on the next loop turn, not from inside
	 * this call: a connect that fails synchronously would otherwise
	 * recurse through dispatch -> connect -> close -> dispatch. */
	if (srv->be->q.n || srv->q.n)
		uv_timer_start(&W->queue_timer, queue_timer_cb, 0, QUEUE_RETRY_MS);
	if (shm_get(srv->be->slot, SHM_WAITING) > srv->be->q.n || shm_get(srv->slot, SHM_WAITING) > srv->q.n)
		shm_kick_others(W->slot);
}

static void bconn_shutdown_cb(uv_shutdown_t *req, int status)
{
	struct bconn *bc = req->data;
	if (status < 0 && status != UV_ECANCELED && bc->state == BC_RETIRING)
		bconn_close(bc);
}

static void bconn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* End a clean connection the polite way: half-close and keep its slot until
 * the backend closes its side. A thread-per-connection backend frees the
 * thread when it sees our FIN, so by the time the slot goes to another
 * request the backend really has a thread for it: max_connections then
 * holds from the backend's point of view, not only from ours. */
static void bconn_retire(struct bconn *bc)
{
	if (bc->state != BC_IDLE && bc->state != BC_BUSY)
		return;
	if (bconn_wire(bc)->writing) {
		bconn_close(bc);
		return;
	}
	if (bc->tls) {  /* close_notify first, so the server sees a clean end */
		tls_conn_shutdown(bc->tls, &bc->wire.pending);
		outq_flush(&bc->wire, (uv_stream_t *)&bc->tcp, bconn_write_cb, bc);
	}
	struct server *srv = bc->srv;
	if (bc->state == BC_IDLE)
		idle_add(srv, -1);
	else
		busy_add(srv, -1);
	list_del(&bc->link);
	list_del(&bc->park_link);
	list_add_tail(&W->bconns, &bc->link);
	bc->state = BC_RETIRING;
	bc->strm = NULL;
	bc->sreq.data = bc;
	if (uv_shutdown(&bc->sreq, (uv_stream_t *)&bc->tcp, bconn_shutdown_cb) < 0) {
		bconn_close(bc);
		return;
	}
	if (bc->read_stopped) {
		bc->read_stopped = 0;
		uv_read_start((uv_stream_t *)&bc->tcp, worker_read_alloc, bconn_read_cb);
	}
	bconn_timer(bc, RETIRE_MS);
}

static void bconn_on_bytes(struct bconn *bc, ssize_t nread, const char *data);
static void bconn_on_tls(struct bconn *bc, const char *data, size_t len);

static void bconn_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct bconn *bc = s->data;
	worker_read_done(buf);
	if (nread == 0)
		return;
	if (bc->tls && nread > 0)
		bconn_on_tls(bc, buf->base, (size_t)nread);
	else
		bconn_on_bytes(bc, nread, buf->base);
}

/* The TCP connection is up and, under TLS, the handshake done. */
static void bconn_established(struct bconn *bc)
{
	struct stream *s = bc->strm;
	bconn_timer(bc, 0);
	bc->state = BC_BUSY;
	busy_add(bc->srv, 1);
	if (s == NULL) {  /* its client left while we connected: pool it */
		upstream_release(bc, 1);
		return;
	}
	s->t_connected = now_us();
	ev->ready(s);
}

static void bconn_tls_failed(struct bconn *bc)
{
	struct stream *s = bc->strm;
	log_warn("backend %s server %s (%s): TLS %s: %s", bc->srv->be->cfg->name, bc->srv->cfg->name,
		 bc->srv->cfg->addr.text, tls_conn_handshake_done(bc->tls) ? "error" : "handshake failed",
		 tls_conn_error(bc->tls));
	if (bc->state == BC_CONNECTING) {
		upstream_server_failed(bc->srv, "TLS handshake failed");
		bconn_close(bc);
		if (s) {
			s->bc = NULL;
			ev->error(s, REASON_BACKEND_TLS);
		}
		return;
	}
	bconn_on_bytes(bc, UV_ECONNRESET, NULL);
}

/* Ciphertext from the server: decrypt, finish the handshake, then hand the
 * plaintext to the same path plain connections take. */
static void bconn_on_tls(struct bconn *bc, const char *data, size_t len)
{
	struct buf *plain = &W->tls_plain;
	plain->len = 0;
	int was_done = tls_conn_handshake_done(bc->tls);
	enum tls_status st = tls_conn_feed(bc->tls, data, len, plain, &bc->wire.pending);
	outq_flush(&bc->wire, (uv_stream_t *)&bc->tcp, bconn_write_cb, bc);
	if (st == TLS_ERROR) {
		bconn_tls_failed(bc);
		return;
	}
	if (!was_done && tls_conn_handshake_done(bc->tls) && bc->state == BC_CONNECTING)
		bconn_established(bc);
	if (plain->len && bc->state != BC_CLOSING)
		bconn_on_bytes(bc, (ssize_t)plain->len, plain->data);
	if (st == TLS_CLOSED && bc->state != BC_CLOSING)
		bconn_on_bytes(bc, UV_EOF, NULL);
}

static void bconn_on_bytes(struct bconn *bc, ssize_t nread, const char *data)
{
	if (bc->state == BC_CONNECTING) {  /* TLS: the server closed during the handshake */
		bconn_tls_failed(bc);
		return;
	}
	if (bc->state == BC_IDLE || bc->state == BC_RETIRING) {
		/* An idle connection that speaks or closes is stale; a retiring
		 * one is done when the backend closes its side. */
		if (bc->state == BC_IDLE || nread < 0)
			bconn_close(bc);
		return;
	}
	if (bc->state != BC_BUSY || bc->strm == NULL)
		return;
	if (nread < 0) {
		/* Only a clean EOF may end a close-delimited body. */
		ev->eof(bc->strm, nread == UV_EOF ? REASON_BACKEND_CLOSED : REASON_BACKEND_RESET);
		return;
	}
	bc->got_bytes = 1;
	ev->data(bc->strm, data, (size_t)nread);
}

static void bconn_timer_cb(struct deadline *d)
{
	struct bconn *bc = CONTAINER_OF(d, struct bconn, dl);
	switch (bc->state) {
	case BC_CONNECTING: {
		struct stream *s = bc->strm;
		upstream_server_failed(bc->srv, "connect timeout");
		bconn_close(bc);
		if (s) {
			s->bc = NULL;
			ev->error(s, REASON_CONNECT_TIMEOUT);
		}
		break;
	}
	case BC_BUSY: {
		struct stream *s = bc->strm;
		bconn_close(bc);
		if (s) {
			s->bc = NULL;
			ev->eof(s, REASON_BACKEND_TIMEOUT);
		}
		break;
	}
	case BC_IDLE:
		bconn_retire(bc);
		break;
	case BC_RETIRING:
		bconn_close(bc);
		break;
	case BC_CLOSING:
		break;
	}
}

static struct bconn *bconn_new(struct server *srv)
{
	struct bconn *bc;
	if (!list_empty(&bc_free)) {
		bc = CONTAINER_OF(bc_free.next, struct bconn, link);
		list_del(&bc->link);
		struct outq keep = bc->out, keepw = bc->wire;
		struct buf pp = bc->pp;
		memset(bc, 0, sizeof(*bc));
		bc->pp = pp;
		bc->pp.len = 0;
		bc->out.pending = keep.pending;
		bc->out.inflight = keep.inflight;
		bc->wire.pending = keepw.pending;
		bc->wire.inflight = keepw.inflight;
	} else {
		bc = calloc(1, sizeof(*bc));
		AN(bc);
	}
	list_init(&bc->link);
	list_init(&bc->park_link);
	bc->srv = srv;
	uv_tcp_init(&W->loop, &bc->tcp);
	bc->dl = (struct deadline){ 0 };
	bc->tcp.data = bc->creq.data = bc;
	bc->state = BC_CONNECTING;
	srv->local_conns++;
	W->nbconns++;
	int rc = uv_tcp_connect(&bc->creq, &bc->tcp, (const struct sockaddr *)&srv->cfg->addr.ss,
				bconn_connect_cb);
	if (rc < 0) {
		/* Local failures (EMFILE, ENOBUFS) hit every request alike: one
		 * line a second says so without flooding the log. */
		static uint64_t last_log_us;
		static unsigned suppressed;
		uint64_t now = now_us();
		if (now - last_log_us >= 1000000) {
			log_error("connect to %s (%s) failed: %s (%u more since the last report)",
				  srv->cfg->name, srv->cfg->addr.text, uv_strerror(rc), suppressed);
			last_log_us = now;
			suppressed = 0;
		} else {
			suppressed++;
		}
		bconn_close(bc);
		return NULL;
	}
	list_add_tail(&W->bconns, &bc->link);
	bconn_timer(bc, srv->be->cfg->connect_timeout_ms);
	return bc;
}

static void bconn_attach(struct bconn *bc, struct stream *s)
{
	bc->strm = s;
	bc->got_bytes = 0;
	bc->nreq++;
	s->bconn_req = bc->nreq;
	s->be->nrequests++;
	if (bc->nreq > 1)
		s->be->nreused++;
	s->bc = bc;
	s->srv = bc->srv;
}

static void bconn_connect_cb(uv_connect_t *req, int status)
{
	struct bconn *bc = req->data;
	if (status == UV_ECANCELED || bc->state == BC_CLOSING)
		return;
	struct stream *s = bc->strm;
	if (status < 0) {
		char why[96];
		snprintf(why, sizeof(why), "connect: %s", uv_strerror(status));
		upstream_server_failed(bc->srv, why);
		bconn_close(bc);
		if (s) {
			s->bc = NULL;
			ev->error(s, REASON_BACKEND_REFUSED);
		}
		return;
	}
	uv_tcp_nodelay(&bc->tcp, 1);
	/* Always reading from here on: a busy connection for the response, an
	 * idle one to notice the backend closing it. */
	uv_read_start((uv_stream_t *)&bc->tcp, worker_read_alloc, bconn_read_cb);
	if (bc->srv->be->tls) {
		/* Handshake under the connect timeout, which keeps running. The
		 * PROXY header goes first, in clear, as the server expects. */
		buf_append(&bc->wire.pending, bc->pp.data, bc->pp.len);
		bc->tls = tls_conn_new_client(bc->srv->be->tls, &bc->srv->tls_session);
		struct buf *plain = &W->tls_plain;
		plain->len = 0;
		if (tls_conn_feed(bc->tls, NULL, 0, plain, &bc->wire.pending) == TLS_ERROR) {
			bconn_tls_failed(bc);
			return;
		}
		outq_flush(&bc->wire, (uv_stream_t *)&bc->tcp, bconn_write_cb, bc);
		return;
	}
	/* Plain: the header leaves in one write with the request head. */
	buf_append(&bc->out.pending, bc->pp.data, bc->pp.len);
	bconn_established(bc);
}

/* ---- writing ---- */

static void bconn_write_cb(uv_write_t *req, int status)
{
	struct bconn *bc = req->data;
	outq_written(bconn_wire(bc));
	if (bc->state == BC_CLOSING)
		return;
	if (status < 0) {
		/* The client side decides (retry, 502, abort) and closes bc. */
		if (bc->strm && bc->state == BC_BUSY)
			ev->eof(bc->strm, REASON_BACKEND_RESET);
		else
			bconn_close(bc);
		return;
	}
	bconn_flush(bc);
	if (bc->strm && bconn_queued(bc) < OUT_LOW_WATER)
		ev->writable(bc->strm);
}

void bconn_flush(struct bconn *bc)
{
	if (bc->state != BC_BUSY)
		return;
	if (outq_flush_via(&bc->out, &bc->wire, bc->tls, (uv_stream_t *)&bc->tcp, bconn_write_cb, bc) < 0) {
		/* Report asynchronously through the read side: the caller may be
		 * in the middle of building the request. */
		bconn_timer(bc, 1);
	}
}

void bconn_timeout(struct bconn *bc, uint64_t ms)
{
	bconn_timer(bc, ms);
}

void bconn_shutdown_write(struct bconn *bc)
{
	if (bc->state != BC_BUSY)
		return;
	bconn_flush(bc);
	bc->sreq.data = bc;
	/* libuv runs the shutdown after the pending write; a failure shows up
	 * as a read error or EOF, which ends the tunnel. */
	uv_shutdown(&bc->sreq, (uv_stream_t *)&bc->tcp, bconn_shutdown_cb);
}

size_t bconn_queued(const struct bconn *bc)
{
	return outq_queued_via(&bc->out, &bc->wire, bc->tls);
}

void bconn_read_pause(struct bconn *bc, int pause)
{
	if (bc->state != BC_BUSY || bc->read_stopped == pause)
		return;
	bc->read_stopped = (uint8_t)pause;
	/* While we hold the backend back for a slow client, the backend is not
	 * the one being slow: its response timeout waits (the client's send
	 * timeout runs instead). */
	if (pause) {
		uv_read_stop((uv_stream_t *)&bc->tcp);
		bconn_timer(bc, 0);
	} else {
		uv_read_start((uv_stream_t *)&bc->tcp, worker_read_alloc, bconn_read_cb);
		bconn_timer(bc, bc->strm ? bc->strm->resp_timeout_ms : bc->srv->be->cfg->response_timeout_ms);
	}
}

/* ---- acquiring ---- */

/* ---- acquiring ---- */

/* With the PROXY protocol a connection speaks for the one client connection
 * whose header it carried (the header is a function of that connection:
 * addresses, TLS facts, its UNIQUE_ID), so only that client may reuse it:
 * such connections wait in the client's `parked` list, found without
 * building or comparing headers. Other servers share one pool. */
static int usable_by(const struct bconn *bc, const struct stream *s)
{
	return bc->pp.len == 0 || bc->owner == s->cl->serial;
}

/* Connections open beyond the cap (the operator lowered it); retiring ones
 * still count until the backend closes them. */
static uint32_t over_cap(const struct server *srv)
{
	uint32_t open = shm_get(srv->slot, SHM_CONNS), max = upstream_server_max_conns(srv);
	return open > max ? open - max : 0;
}

/* Close idle connections of SRV here, oldest first, to bring it under its
 * cap (and all of them when it is out of balancing). */
static void server_shrink_idle(struct server *srv)
{
	uint32_t n = server_up(srv) ? over_cap(srv) : srv->nidle;
	while (n-- > 0 && srv->nidle)
		bconn_retire(CONTAINER_OF(srv->idle.prev, struct bconn, link));
}

static struct bconn *server_find_idle(struct server *srv, struct stream *s)
{
	if (srv->nidle == 0)
		return NULL;
	if (over_cap(srv)) {  /* shrink to the cap rather than reuse */
		server_shrink_idle(srv);
		return NULL;
	}
	if (srv->cfg->proxy_protocol == CFG_PP_OFF)
		return CONTAINER_OF(srv->idle.next, struct bconn, link);
	for (struct list *pos = s->cl->parked.next; pos != &s->cl->parked; pos = pos->next) {
		struct bconn *bc = CONTAINER_OF(pos, struct bconn, park_link);
		if (bc->srv == srv)
			return bc;
	}
	return NULL;
}

static void server_take_idle(struct bconn *bc)
{
	struct server *srv = bc->srv;
	list_del(&bc->link);
	list_del(&bc->park_link);
	idle_add(srv, -1);
	bconn_timer(bc, 0);
	bc->state = BC_BUSY;
	busy_add(srv, 1);
	list_add_tail(&W->bconns, &bc->link);
}

/* Make room under a full cap: an idle connection here that CL cannot use
 * (another client's PROXY header) gives its slot up. */
static void server_evict_idle(struct server *srv)
{
	if (srv->nidle > 0 && srv->cfg->proxy_protocol != CFG_PP_OFF)
		bconn_retire(CONTAINER_OF(srv->idle.prev, struct bconn, link));
}

/* Fill BE->w with the weight each server is eligible with for S, 0 for
 * the others: the usable primary servers; when there is none, the usable
 * backups (all of them with all_backups, else the first in the config's
 * order). Usable: healthy, enabled, weight above 0, and not the server S
 * is retrying away from. Returns how many are eligible. */
static unsigned eligible(struct stream *s, struct backend *be)
{
	unsigned n = be->nservers, count = 0;
	for (int backups = 0; backups < 2 && count == 0; backups++) {
		for (unsigned i = 0; i < n; i++) {
			struct server *srv = &be->servers[i];
			be->w[i] = 0;
			if (srv->cfg->backup != backups || !server_up(srv) || srv == s->avoid)
				continue;
			if (backups && count && !be->cfg->all_backups)
				continue;
			be->w[i] = upstream_server_eweight(srv);
			count += be->w[i] != 0;
		}
	}
	return count;
}

/* SRV can take a request of S now: a usable idle connection here (*IDLE
 * set), or room under its instance-wide cap (the slot is then reserved). */
static int waiters_before(struct server *srv, const struct stream *s);

static int server_take(struct server *srv, struct stream *s, struct bconn **idle)
{
	*idle = NULL;
	/* Requests waiting for their session's server, queued before S. */
	if (waiters_before(srv, s))
		return 0;
	if ((*idle = server_find_idle(srv, s)) != NULL)
		return 1;
	if (shm_conns_reserve(W->slot, srv->slot, upstream_server_max_conns(srv)))
		return 1;
	server_evict_idle(srv);
	return 0;
}

/* A server this request may use now (see server_take), chosen among the
 * eligible ones by the backend's algorithm. *ANY_UP: some server is
 * eligible, so a request that gets none now may wait for one. */
static struct server *pick_server(struct stream *s, struct backend *be, struct bconn **idle, int *any_up)
{
	unsigned n = be->nservers;
	*idle = NULL;
	*any_up = eligible(s, be) != 0;
	if (!*any_up)
		return NULL;
	if (be->cfg->balance == CFG_BALANCE_LEASTCONN) {
		struct server *best = NULL;
		uint32_t best_busy = 0, best_w = 0;
		for (unsigned i = 0; i < n; i++) {
			struct server *srv = &be->servers[i];
			if (be->w[i] == 0)
				continue;
			uint32_t busy = shm_get(srv->slot, SHM_BUSY);
			if (best && !lb_lc_better(busy, be->w[i], best_busy, best_w))
				continue;
			if (waiters_before(srv, s))
				continue;
			if (server_find_idle(srv, s) == NULL &&
			    shm_get(srv->slot, SHM_CONNS) >= upstream_server_max_conns(srv)) {
				server_evict_idle(srv);
				continue;
			}
			best = srv;
			best_busy = busy;
			best_w = be->w[i];
		}
		if (best && !server_take(best, s, idle))
			return NULL;
		return best;
	}
	/* Smooth weighted round-robin, each worker on its own: the sum over
	 * workers keeps the weights, and no cache line bounces between cores
	 * per request. */
	struct lb_round r;
	lb_swrr_begin(&r, be->cw, be->w, n);
	int i;
	while ((i = lb_swrr_next(&r, be->cw, be->w, n)) >= 0) {
		if (server_take(&be->servers[i], s, idle)) {
			lb_swrr_commit(&r, be->cw, (unsigned)i);
			return &be->servers[i];
		}
	}
	lb_swrr_undo(&r, be->cw, be->w, n);
	return NULL;
}

/* Give S the connection server_take found (IDLE) or reserved on SRV.
 * 1: attached or connecting; -1: connect failed to start. */
static int attach_to(struct stream *s, struct server *srv, struct bconn *idle)
{
	struct backend *be = s->be;
	if (idle) {
		server_take_idle(idle);
		bconn_attach(idle, s);
		s->t_connect_start = s->t_connected = now_us();
		return 1;
	}
	s->t_connect_start = now_us();
	/* The reserve counted it in shm; bconn_close() uncounts it. */
	struct bconn *bc = bconn_new(srv);
	if (bc == NULL)
		return -1;
	forward_proxy_header(s->cl, srv->cfg, &bc->pp);
	bc->owner = s->cl->serial;
	be->nconnects++;
	bconn_attach(bc, s);
	return 1;
}

/* Attach a connection to S if one can be had now, from any server the
 * balancing allows. 1: attached or connecting; 0: none available; -1:
 * connect failed to start. */
static int try_acquire(struct stream *s, int *any_up)
{
	struct bconn *idle;
	struct server *srv = pick_server(s, s->be, &idle, any_up);
	return srv ? attach_to(s, srv, idle) : 0;
}

/* The same on SRV only (a session's server). */
static int try_acquire_on(struct stream *s, struct server *srv)
{
	struct bconn *idle;
	if (!server_take(srv, s, &idle))
		return 0;
	return attach_to(s, srv, idle);
}

/* ---- the queues: FIFO per worker, ordered by ticket across workers ----
 * Each backend has one for requests any server may take, and each server
 * one for requests whose session is there (persistence). */

static struct stream *queue_head(struct waitq *q)
{
	return list_empty(&q->list) ? NULL : CONTAINER_OF(q->list.next, struct stream, qlink);
}

static void queue_publish(struct waitq *q)
{
	struct stream *head = queue_head(q);
	shm_head_publish(W->slot, q->slot, head ? head->ticket : 0);
}

static void queue_remove(struct stream *s)
{
	struct waitq *q = s->wq;
	if (!s->queued)
		return;
	int was_head = queue_head(q) == s;
	list_del(&s->qlink);
	s->queued = 0;
	s->wq = NULL;
	q->n--;
	stats_gauge_add(s->be->st, GAUGE_QUEUED, -1);
	shm_add(W->slot, q->slot, SHM_WAITING, -1);
	if (was_head)
		queue_publish(q);
}

/* Requests that another worker queued earlier go first: a worker with a
 * busy queue of its own must not keep every slot to itself. */
static int others_first(struct waitq *q, uint64_t mine)
{
	return shm_get(q->slot, SHM_WAITING) > q->n && shm_older_waiter(W->slot, q->slot, mine);
}

/* Some request waits in SRV's own queue (this worker's or another's) that
 * was queued before S (S fresh: any). S itself, in that queue, is its head
 * when asked. Tickets come from one instance-wide counter, so requests of
 * the backend's queue and of the servers' compare by age. */
static int waiters_before(struct server *srv, const struct stream *s)
{
	if (shm_get(srv->slot, SHM_WAITING) == 0 || s->wq == &srv->q)
		return 0;
	uint64_t mine = s->queued ? s->ticket : UINT64_MAX;
	struct stream *h = queue_head(&srv->q);
	return (h && h->ticket < mine) || shm_older_waiter(W->slot, srv->slot, mine);
}

/* Someone in another worker waits in Q and this worker's head is younger
 * (or there is none). */
static int others_waiting(struct waitq *q)
{
	return shm_get(q->slot, SHM_WAITING) > q->n && (q->n == 0 || others_first(q, queue_head(q)->ticket));
}

static void retire_idle(struct backend *be)
{
	for (unsigned s = 0; s < be->nservers; s++) {
		struct server *srv = &be->servers[s];
		while (!list_empty(&srv->idle))
			bconn_retire(CONTAINER_OF(srv->idle.next, struct bconn, link));
	}
}

static void server_retire_idle(struct server *srv)
{
	while (!list_empty(&srv->idle))
		bconn_retire(CONTAINER_OF(srv->idle.next, struct bconn, link));
}

static int queue_waiting_total(void)
{
	for (unsigned b = 0; b < W->nbackends; b++) {
		struct backend *be = &W->backends[b];
		if (be->q.n)
			return 1;
		for (unsigned i = 0; i < be->nservers; i++)
			if (be->servers[i].q.n)
				return 1;
	}
	return 0;
}

static void queue_timer_cb(uv_timer_t *t)
{
	(void)t;
	upstream_on_kick();
	if (!queue_waiting_total())
		uv_timer_stop(&W->queue_timer);
}

/* KEEP: S keeps the ticket it had (moved from one queue to another) and
 * its place by age. */
static enum reason enqueue(struct stream *s, struct waitq *q, int keep)
{
	if (q->n >= s->be->cfg->queue_max)
		return REASON_QUEUE_FULL;
	struct list *after = q->list.prev;
	if (!keep)
		s->ticket = shm_ticket_next();
	else
		while (after != &q->list && CONTAINER_OF(after, struct stream, qlink)->ticket > s->ticket)
			after = after->prev;
	list_add_tail(after->next, &s->qlink);
	s->queued = 1;
	s->wq = q;
	q->n++;
	stats_gauge_add(s->be->st, GAUGE_QUEUED, 1);
	shm_add(W->slot, q->slot, SHM_WAITING, 1);
	if (q->n == 1) {
		queue_publish(q);
		shm_kick_others(W->slot);  /* they may hold idle connections */
		/* ours may be owed to an older waiter */
		if (q == &s->be->q)
			retire_idle(s->be);
		else
			server_retire_idle(CONTAINER_OF(q, struct server, q));
	}
	if (!uv_is_active((uv_handle_t *)&W->queue_timer))
		uv_timer_start(&W->queue_timer, queue_timer_cb, QUEUE_RETRY_MS, QUEUE_RETRY_MS);
	return REASON_OK;
}

static enum reason acquired(struct stream *s, int rc)
{
	if (rc < 0)
		return REASON_BACKEND_REFUSED;
	if (s->bc->state == BC_BUSY)
		ev->ready(s);
	return REASON_OK;
}

/* REQUEUE: S waited already (its session's server stopped keeping
 * sessions): it keeps its ticket and its queue time. */
static enum reason request(struct stream *s, int requeue)
{
	struct backend *be = s->be;
	int any_up, rc;
	if (!requeue)
		s->t_queue = now_us();
	/* The session's server, if it can take it: its own queue. A request
	 * waiting for any server was there first (oldest first, in dispatch). */
	struct server *srv = persist_target(s);
	if (srv) {
		if (srv->q.n == 0 && shm_get(srv->slot, SHM_WAITING) == 0 && be->q.n == 0 &&
		    shm_get(be->slot, SHM_WAITING) == 0 && (rc = try_acquire_on(s, srv)) != 0)
			return acquired(s, rc);
		return enqueue(s, &srv->q, requeue);
	}
	/* FIFO: a newcomer may not overtake requests already waiting, here
	 * or in another worker. */
	if (be->q.n == 0 && shm_get(be->slot, SHM_WAITING) == 0) {
		rc = try_acquire(s, &any_up);
		if (rc != 0)
			return acquired(s, rc);
		if (!any_up)
			return REASON_NO_SERVER;
	}
	return enqueue(s, &be->q, requeue);
}

enum reason upstream_request(struct stream *s)
{
	return request(s, 0);
}

void upstream_cancel(struct stream *s)
{
	queue_remove(s);
	struct bconn *bc = s->bc;
	if (bc && bc->state == BC_CONNECTING) {
		/* Let the connection finish and join the pool: the backend is
		 * already accepting it, and the next request can use it. */
		bc->strm = NULL;
		s->bc = NULL;
	}
}

/* A request given a connection (RC from try_acquire) or refused one after
 * waiting. */
static void dispatched(struct stream *s, int rc, enum reason none)
{
	if (rc == 0)
		ev->error(s, none);
	else if (rc < 0)
		ev->error(s, REASON_BACKEND_REFUSED);
	else if (s->bc->state == BC_BUSY)
		ev->ready(s);
}

/* Serve waiting requests, oldest first across the backend's queue and its
 * servers' own queues (HAProxy's rule too), until each queue's head must
 * go on waiting: the backend's when no server has room for it, a server's
 * when that server has none. A request whose session's server can no
 * longer keep sessions is sent elsewhere (failover). Fairness matters
 * under saturation: users with a session come back at once, and must not
 * keep a server to themselves while new users wait. */
static void backend_dispatch(struct backend *be)
{
	uint8_t blocked[CFG_MAX_SERVERS] = { 0 };
	int be_blocked = 0;
	for (;;) {
		struct stream *s = be_blocked ? NULL : queue_head(&be->q);
		struct server *srv = NULL;
		for (unsigned i = 0; i < be->nservers; i++) {
			struct stream *h = blocked[i] ? NULL : queue_head(&be->servers[i].q);
			if (h && (s == NULL || h->ticket < s->ticket)) {
				s = h;
				srv = &be->servers[i];
			}
		}
		if (s == NULL)
			return;
		if (srv == NULL) {
			int any_up = 1, rc = others_first(&be->q, s->ticket) ? 0 : try_acquire(s, &any_up);
			if (rc == 0 && any_up) {
				be_blocked = 1;  /* FIFO: nobody behind it goes first */
				continue;
			}
			queue_remove(s);
			dispatched(s, rc, REASON_NO_SERVER);
		} else if (persist_target(s) != srv) {
			/* Its server stopped keeping sessions, or (weblogic) began
			 * draining with the secondary able to take over. */
			queue_remove(s);
			enum reason r = request(s, 1);
			if (r != REASON_OK)
				ev->error(s, r);
		} else {
			int rc = others_first(&srv->q, s->ticket) ? 0 : try_acquire_on(s, srv);
			if (rc == 0) {
				blocked[srv - be->servers] = 1;
				continue;
			}
			queue_remove(s);
			dispatched(s, rc, REASON_NO_SERVER);
		}
	}
}

void upstream_on_kick(void)
{
	for (unsigned b = 0; b < W->nbackends; b++) {
		struct backend *be = &W->backends[b];
		/* A server taken out (health or operator) keeps no idle connections. */
		for (unsigned s = 0; s < be->nservers; s++)
			server_shrink_idle(&be->servers[s]);
		backend_dispatch(be);
		for (unsigned s = 0; s < be->nservers; s++)
			if (others_waiting(&be->servers[s].q))
				server_retire_idle(&be->servers[s]);
		/* Others wait, and our idle connections are of no use to us now:
		 * give their slots up. */
		if (others_waiting(&be->q))
			retire_idle(be);
	}
}

void upstream_release(struct bconn *bc, int reusable)
{
	struct server *srv = bc->srv;
	struct backend *be = srv->be;
	struct client *owner = bc->strm ? bc->strm->cl : NULL;
	if (bc->strm)
		bc->strm->bc = NULL;
	bc->strm = NULL;
	if (!reusable || bconn_queued(bc) || bconn_wire(bc)->writing) {
		bconn_close(bc);
		return;
	}
	int in_balancing = server_up(srv);
	if (W->draining || (!in_balancing && !upstream_server_keeps_sessions(srv))) {
		bconn_retire(bc);
		return;
	}
	/* Hand over directly to the oldest of our waiters that may use it (the
	 * head of this server's own queue or of the backend's; only the former
	 * while the server drains), unless another worker's waiter for either
	 * is older: then the slot moves there. */
	struct stream *s = queue_head(&srv->q), *b = in_balancing ? queue_head(&be->q) : NULL;
	if (b && (s == NULL || b->ticket < s->ticket))
		s = b;
	if (!in_balancing && (s == NULL || persist_target(s) != srv)) {
		bconn_retire(bc);  /* the dispatch sends that one elsewhere */
		return;
	}
	uint64_t mine = s ? s->ticket : UINT64_MAX;
	if ((shm_get(srv->slot, SHM_WAITING) > srv->q.n && shm_older_waiter(W->slot, srv->slot, mine)) ||
	    (shm_get(be->slot, SHM_WAITING) > be->q.n && shm_older_waiter(W->slot, be->slot, mine))) {
		bconn_retire(bc);
		return;
	}
	if (s && !usable_by(bc, s)) {
		bconn_retire(bc);  /* speaks for another client: its slot goes instead */
		return;
	}
	if (s) {
		queue_remove(s);
		s->t_connect_start = s->t_connected = now_us();
		bconn_attach(bc, s);
		bconn_read_pause(bc, 0);
		ev->ready(s);
		return;
	}
	if (shm_get(be->slot, SHM_WAITING) > 0 || srv->nidle >= be->cfg->idle_max || over_cap(srv)) {
		bconn_retire(bc);
		return;
	}
	list_del(&bc->link);
	busy_add(srv, -1);
	bc->state = BC_IDLE;
	list_add_head(&srv->idle, &bc->link);
	idle_add(srv, 1);
	if (bc->pp.len && owner)  /* retired when its client goes */
		list_add_tail(&owner->parked, &bc->park_link);
	if (bc->read_stopped) {  /* idle connections always read, to see EOF */
		bc->read_stopped = 0;
		uv_read_start((uv_stream_t *)&bc->tcp, worker_read_alloc, bconn_read_cb);
	}
	bconn_timer(bc, be->cfg->idle_timeout_ms);
}

void upstream_client_gone(struct client *cl)
{
	while (!list_empty(&cl->parked))
		bconn_retire(CONTAINER_OF(cl->parked.next, struct bconn, park_link));
}

void upstream_abort(struct bconn *bc)
{
	if (bc->strm)
		bc->strm->bc = NULL;
	bconn_close(bc);
}

void upstream_close_idle(void)
{
	for (unsigned b = 0; b < W->nbackends; b++)
		retire_idle(&W->backends[b]);
}

int upstream_other_server_up(const struct backend *be, const struct server *srv)
{
	for (unsigned i = 0; i < be->nservers; i++)
		if (&be->servers[i] != srv && server_up(&be->servers[i]))
			return 1;
	return 0;
}

/* Take SRV out for the backend's eject duration, unless that would put
 * more than max_ejected_percent of its servers out at once. */
static void server_eject(struct server *srv, uint32_t n, const char *what)
{
	const struct backend *be = srv->be;
	const struct cfg_eject *e = &be->cfg->eject;
	uint64_t now = uv_now(&W->loop);
	unsigned out = 0;
	for (unsigned i = 0; i < be->nservers; i++)
		out += upstream_server_ejected(&be->servers[i]);
	if ((uint64_t)(out + 1) * 100 > (uint64_t)e->max_ejected_percent * be->nservers) {
		log_warn("backend %s server %s: %u consecutive %s, but %u of %u servers are ejected already "
			 "(max_ejected_percent %u): kept in", be->cfg->name, srv->cfg->name, n, what, out,
			 be->nservers, e->max_ejected_percent);
		return;
	}
	struct shm_slot *sl = &shm->slots[srv->slot];
	uint64_t until = now + e->duration_ms;
	atomic_store(&sl->ejected_until_ms, until);
	atomic_store(&sl->back_since_ms, until);  /* slow start from its return */
	stats_add(srv->st, STAT_EJECTIONS, 1);
	log_warn("backend %s server %s EJECTED for %u ms: %u consecutive %s", be->cfg->name, srv->cfg->name,
		 e->duration_ms, n, what);
}

void upstream_server_outcome(struct server *srv, enum srv_outcome o)
{
	const struct cfg_eject *e = &srv->be->cfg->eject;
	if (!e->enabled)
		return;
	struct shm_slot *sl = &shm->slots[srv->slot];
	if (o == SRV_OK) {
		/* Read first: a healthy server's slot is not written per request. */
		if (atomic_load_explicit(&sl->fails_5xx, memory_order_relaxed))
			atomic_store_explicit(&sl->fails_5xx, 0, memory_order_relaxed);
		if (atomic_load_explicit(&sl->fails_timeout, memory_order_relaxed))
			atomic_store_explicit(&sl->fails_timeout, 0, memory_order_relaxed);
		return;
	}
	_Atomic uint32_t *c = o == SRV_5XX ? &sl->fails_5xx : &sl->fails_timeout;
	uint32_t limit = o == SRV_5XX ? e->consecutive_5xx : e->consecutive_timeouts;
	if (limit == 0 || upstream_server_ejected(srv))
		return;
	uint32_t n = atomic_fetch_add(c, 1) + 1;
	if (n < limit)
		return;
	atomic_store(&sl->fails_5xx, 0);
	atomic_store(&sl->fails_timeout, 0);
	server_eject(srv, n, o == SRV_5XX ? "5xx" : "timeouts");
}

void upstream_server_failed(struct server *srv, const char *why)
{
	log_warn("backend %s server %s (%s): %s", srv->be->cfg->name, srv->cfg->name,
		 srv->cfg->addr.text, why);
	/* Passive marking needs active checks to bring the server back. */
	if (srv->be->cfg->health.enabled && atomic_exchange(&shm->slots[srv->slot].up, 0) == 1)
		log_warn("backend %s server %s marked DOWN (passive)", srv->be->cfg->name, srv->cfg->name);
}
