/* The connection layer (conn.h): one client socket from accept to close.
 *
 * Owns: struct client (from slabs), its socket, input buffer and output
 * queues, the TLS side (struct client_tls, pooled), the deadline heap of
 * every client, half-close and lingering close.
 * May call: tls, proxy_proto, outq, deadline, stats, log, worker, and
 * upstream_client_gone (a connection's PROXY-keyed backend connections die
 * with it). Calls its codec only through cl->codec (codec.h); knows nothing
 * of HTTP or of streams.
 *
 * States (enum client_state): CL_PROXY until the client's identity is known,
 * CL_OPEN while the codec has it, CL_LINGER once its last response is
 * queued, CL_CLOSING until the handles are closed. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include "conn.h"
#include "codec.h"
#include "deadline.h"
#include "log.h"
#include "proxy_proto.h"
#include "stats.h"
#include "tls.h"
#include "upstream.h"
#include "worker.h"

#define LINGER_MS      2000          /* read-and-discard after the last response */
#define BUF_KEEP       (16 * 1024)   /* capacity an idle client may keep */
#define IDLE_TRIM_MS   250           /* keepalive idle time after which buffers go back */
#define DRAIN_IDLE_MS  2000          /* draining: how long an idle keepalive client may still send */

static struct list cl_free = { &cl_free, &cl_free };
/* Every client's timeout, on one libuv timer (a uv_timer_t per connection
 * would cost each idle one 152 bytes). */
static struct deadline_heap conn_deadlines;

static void client_on_tls(struct client *cl, const char *data, size_t len);
static void client_on_plain(struct client *cl, const char *data, size_t len);
static void client_on_proxy(struct client *cl, const char *data, size_t len);
static void client_timer_fired(struct deadline *d);

static const struct cfg_limits *limits(void) { return &W->cfg->limits; }
static const struct cfg_timeouts *timeouts(void) { return &W->cfg->timeouts; }

void conn_init(void)
{
	deadline_heap_init(&conn_deadlines, &W->loop, client_timer_fired);
}

void conn_timer(struct client *cl, uint64_t ms)
{
	cl->trim_pending = 0;
	deadline_set(&conn_deadlines, &cl->dl, ms);
}

/* ---- the TLS side's pool ---- */

static struct list ctls_free = { &ctls_free, &ctls_free };

static void client_tls_get(struct client *cl)
{
	struct client_tls *tx;
	if (!list_empty(&ctls_free)) {
		tx = CONTAINER_OF(ctls_free.next, struct client_tls, hs_link);
		list_del(&tx->hs_link);
	} else {
		tx = calloc(1, sizeof(*tx));
		AN(tx);
	}
	tx->wire.pending.len = tx->wire.inflight.len = tx->hs_in.len = 0;
	list_init(&tx->hs_link);
	tx->cl = cl;
	cl->tx = tx;
}

static void client_tls_put(struct client *cl)
{
	struct client_tls *tx = cl->tx;
	if (tx == NULL)
		return;
	cl->tx = NULL;
	AZ(tx->wire.writing);
	tx->cl = NULL;
	tx->wire.pending.len = tx->wire.inflight.len = tx->hs_in.len = 0;
	buf_trim(&tx->wire.pending, BUF_KEEP);
	buf_trim(&tx->wire.inflight, BUF_KEEP);
	buf_trim(&tx->hs_in, BUF_KEEP);
	list_add_head(&ctls_free, &tx->hs_link);
}

/* The queue whose bytes go to the socket: ciphertext under TLS. */
static struct outq *client_wire(const struct client *cl)
{
	return cl->tls ? &cl->tx->wire : (struct outq *)&cl->out;
}

size_t conn_queued(const struct client *cl)
{
	return cl->tls ? outq_queued_via(&cl->out, &cl->tx->wire, cl->tls) : outq_queued(&cl->out);
}

int conn_writing(const struct client *cl)
{
	return client_wire(cl)->writing;
}

/* Buffers keep their capacity across requests, so a busy keepalive
 * connection never allocates; one that has gone quiet gives it back, which
 * takes an idle keepalive connection from ~5.5 KB of heap to the ~2 KB of its
 * struct (bench memory). */
static void client_trim(struct client *cl)
{
	struct client_tls *tx = cl->tx;
	if (cl->in.len || conn_queued(cl) || cl->out.writing || (tx && tx->wire.writing))
		return;
	/* Only a trim that freed something is worth a page purge. */
	int held = cl->in.cap || cl->out.pending.cap || cl->out.inflight.cap ||
		   (tx && (tx->wire.pending.cap || tx->wire.inflight.cap || tx->hs_in.cap));
	if (cl->tls)
		held |= tls_conn_trim(cl->tls);
	buf_trim(&cl->in, 0);
	buf_trim(&cl->out.pending, 0);
	buf_trim(&cl->out.inflight, 0);
	if (tx) {
		buf_trim(&tx->wire.pending, 0);
		buf_trim(&tx->wire.inflight, 0);
		buf_trim(&tx->hs_in, 0);
	}
	if (held)
		worker_memory_freed();
}

/* Waiting for the next request on a keepalive connection: the timer fires
 * first after IDLE_TRIM_MS to trim, then again when keepalive expires. */
void conn_keepalive_wait(struct client *cl)
{
	uint64_t ka = timeouts()->client_keepalive_ms;
	if (W->draining) {  /* see conn_drain_all */
		conn_timer(cl, ka < DRAIN_IDLE_MS ? ka : DRAIN_IDLE_MS);
		return;
	}
	if (ka <= IDLE_TRIM_MS) {
		conn_timer(cl, ka);
		return;
	}
	conn_timer(cl, IDLE_TRIM_MS);
	cl->trim_pending = 1;
}

/* Half-close requests, only while one is under way (a connection at rest
 * holds none); free ones are chained through their data field. */
static uv_shutdown_t *sreq_free;

static void client_shutdown_cb(uv_shutdown_t *req, int status)
{
	(void)status;  /* a failed half-close shows up as a read error */
	req->data = sreq_free;
	sreq_free = req;
}

/* After the last byte of a closing response: half-close, then read and
 * discard until EOF or LINGER_MS, so unread request bytes do not turn the
 * close into a reset that destroys the response in flight. A client that
 * announced its last request (Connection: close, or HTTP/1.0 without
 * keep-alive) and sent nothing after it has no such bytes: it is closed
 * at once (a FIN after the response), as nginx does, which saves the
 * half-close and the wait for its EOF. */
static void client_linger(struct client *cl)
{
	if (cl->state == CL_CLOSING)
		return;
	cl->state = CL_LINGER;
	if (cl->peer_eof) {
		conn_close(cl);
		return;
	}
	if (cl->tls && tls_conn_handshake_done(cl->tls)) {
		tls_conn_shutdown(cl->tls, &cl->tx->wire.pending);
		conn_flush(cl);
		if (cl->state == CL_CLOSING)
			return;
	}
	if (cl->input_done && cl->in.len == 0 && !client_wire(cl)->writing && conn_queued(cl) == 0) {
		conn_close(cl);
		return;
	}
	uv_shutdown_t *req = sreq_free;
	if (req != NULL) {
		sreq_free = req->data;
	} else {
		req = malloc(sizeof(*req));
		AN(req);
	}
	if (uv_shutdown(req, (uv_stream_t *)&cl->tcp, client_shutdown_cb) < 0) {
		client_shutdown_cb(req, 0);
		conn_close(cl);
		return;
	}
	conn_read_pause(cl, 0);
	conn_timer(cl, LINGER_MS);
}

static void client_write_cb(uv_write_t *req, int status)
{
	struct client *cl = req->data;
	outq_written(client_wire(cl));
	if (cl->state == CL_CLOSING)
		return;
	if (status < 0) {
		cl->codec->error(cl, REASON_CLIENT_WRITE_ERROR);
		conn_close(cl);
		return;
	}
	conn_flush(cl);
	if (cl->state == CL_CLOSING)
		return;
	if (client_wire(cl)->writing) {
		/* Progress: the slow-reader guard starts over. */
		if (cl->state == CL_LINGER)
			conn_timer(cl, timeouts()->client_send_ms);
		else if (cl->state == CL_OPEN)
			cl->codec->sent(cl, 1);
		return;
	}
	if (cl->state == CL_LINGER)
		client_linger(cl);
	else if (cl->state == CL_OPEN)
		cl->codec->sent(cl, 0);
}

static void flush(struct client *cl, int last)
{
	if (cl->state == CL_CLOSING)
		return;
	int rc = (last ? outq_flush_via_last : outq_flush_via)(&cl->out, cl->tls ? &cl->tx->wire : NULL, cl->tls,
							       (uv_stream_t *)&cl->tcp, client_write_cb, cl);
	if (rc == OUTQ_ERR_TLS)
		log_info("%s TLS write failed: %s", cl->peer, tls_conn_error(cl->tls));
	if (rc < 0)
		conn_close(cl);
}

void conn_flush(struct client *cl)
{
	flush(cl, 0);
}

void conn_end(struct client *cl, int send_timer)
{
	if (cl->state == CL_CLOSING)
		return;
	cl->state = CL_LINGER;
	if (send_timer)
		conn_timer(cl, timeouts()->client_send_ms);
	/* Closing at once (client_linger): the close_notify leaves in the
	 * response's write, not in a write of its own. */
	if (cl->input_done && cl->in.len == 0 && cl->tls && tls_conn_handshake_done(cl->tls) &&
	    !client_wire(cl)->writing) {
		if (outq_seal(&cl->out, &cl->tx->wire, cl->tls) < 0) {
			log_info("%s TLS write failed: %s", cl->peer, tls_conn_error(cl->tls));
			conn_close(cl);
			return;
		}
		tls_conn_shutdown(cl->tls, &cl->tx->wire.pending);
	}
	/* When client_linger() will close at once, this write is the last. Not
	 * while reading is paused: unread bytes may wait in the kernel, and a
	 * close over them is a reset that would drop what MSG_MORE held. */
	flush(cl, cl->in.len == 0 && !cl->read_stopped &&
		  (cl->peer_eof || (cl->input_done && (cl->tls == NULL || tls_conn_handshake_done(cl->tls)))));
	if (cl->state != CL_CLOSING && !client_wire(cl)->writing && conn_queued(cl) == 0)
		client_linger(cl);
}

static void client_on_eof(struct client *cl)
{
	cl->peer_eof = 1;
	uv_read_stop((uv_stream_t *)&cl->tcp);
	switch (cl->state) {
	case CL_PROXY:
		if (cl->proxy_required || cl->in.len) {
			log_warn("%s closed: connection ended inside the PROXY header (%zu bytes)", cl->peer,
				 cl->in.len);
		}
		conn_close(cl);
		return;
	case CL_OPEN:
		if (cl->codec->idle(cl))
			conn_close(cl);
		else
			cl->codec->eof(cl);
		return;
	default:
		conn_close(cl);
		return;
	}
}

/* ---- lifecycle ---- */

static void client_handle_closed(uv_handle_t *h)
{
	struct client *cl = h->data;
	if (--cl->closing_handles > 0)
		return;
	cl->in.len = cl->out.pending.len = cl->out.inflight.len = 0;
	cl->codec->closed(cl);
	tls_conn_free(cl->tls);
	cl->tls = NULL;
	client_tls_put(cl);
	buf_trim(&cl->in, BUF_KEEP);
	buf_trim(&cl->out.pending, BUF_KEEP);
	buf_trim(&cl->out.inflight, BUF_KEEP);
	list_add_head(&cl_free, &cl->link);
	worker_maybe_exit();
}

void conn_close(struct client *cl)
{
	if (cl->state == CL_CLOSING)
		return;
	cl->codec->close(cl);
	upstream_client_gone(cl);
	cl->state = CL_CLOSING;
	list_del(&cl->link);
	if (cl->tx)
		list_del(&cl->tx->hs_link);
	W->nclients--;
	stats_gauge_add(cl->li->st, GAUGE_CLIENTS, -1);
	deadline_set(&conn_deadlines, &cl->dl, 0);
	cl->closing_handles = 1;
	uv_close((uv_handle_t *)&cl->tcp, client_handle_closed);
}

static void client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void client_read_start(struct client *cl)
{
	uv_read_start((uv_stream_t *)&cl->tcp, worker_read_alloc, client_read_cb);
}

void conn_read_pause(struct client *cl, int pause)
{
	if (cl->state == CL_CLOSING || cl->read_stopped == pause || (!pause && cl->peer_eof))
		return;
	cl->read_stopped = (uint8_t)pause;
	if (pause)
		uv_read_stop((uv_stream_t *)&cl->tcp);
	else
		client_read_start(cl);
}


static void client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct client *cl = s->data;
	worker_read_done(buf);
	if (nread == 0 || cl->state == CL_CLOSING)
		return;
	if (nread < 0) {
		client_on_eof(cl);
		return;
	}
	if (cl->state == CL_PROXY)
		client_on_proxy(cl, buf->base, (size_t)nread);
	else if (cl->tls)
		client_on_tls(cl, buf->base, (size_t)nread);
	else
		client_on_plain(cl, buf->base, (size_t)nread);
}

/* Plain-HTTP bytes on a TLS port: answer in plain text (nginx does the same)
 * so the operator sees the cause, instead of a handshake error. */
static int looks_like_http(const char *p, size_t n)
{
	return n >= 4 && p[0] >= 'A' && p[0] <= 'Z' && p[1] >= 'A' && p[1] <= 'Z';
}

static void hs_idle_cb(uv_idle_t *h)
{
	(void)h;
	while (W->hs_budget > 0 && !list_empty(&W->hs_deferred)) {
		struct client_tls *tx = CONTAINER_OF(W->hs_deferred.next, struct client_tls, hs_link);
		struct client *cl = tx->cl;
		list_del(&tx->hs_link);
		struct buf in = tx->hs_in;
		tx->hs_in = (struct buf){ 0 };
		conn_read_pause(cl, 0);
		client_on_tls(cl, in.data, in.len);
		if (tx->hs_in.data == NULL) {  /* keep the capacity for next time */
			in.len = 0;
			tx->hs_in = in;
		} else {
			buf_free(&in);
		}
	}
	if (list_empty(&W->hs_deferred))
		uv_idle_stop(&W->hs_idle);
}

/* Out of handshake budget for this loop turn: keep the bytes, stop reading,
 * and let the idle handler (which runs after the next poll, so established
 * connections get their turn first) continue. */
static void client_defer_handshake(struct client *cl, const char *data, size_t len)
{
	buf_append(&cl->tx->hs_in, data, len);
	conn_read_pause(cl, 1);
	if (list_empty(&cl->tx->hs_link))
		list_add_tail(&W->hs_deferred, &cl->tx->hs_link);
	if (!uv_is_active((uv_handle_t *)&W->hs_idle))
		uv_idle_start(&W->hs_idle, hs_idle_cb);
}

static void client_on_tls(struct client *cl, const char *data, size_t len)
{
	int was_done = tls_conn_handshake_done(cl->tls);
	if (!was_done) {
		if (W->hs_budget == 0 || !list_empty(&cl->tx->hs_link)) {
			client_defer_handshake(cl, data, len);
			return;
		}
		W->hs_budget--;
	}
	if (!was_done && cl->tx->wire.pending.len == 0 && !cl->tx->wire.writing && looks_like_http(data, len) &&
	    cl->nrequests == 0 && cl->codec->idle(cl)) {
		tls_conn_free(cl->tls);
		cl->tls = NULL;
		cl->codec->fail(cl, REASON_TLS_PLAIN_HTTP);
		return;
	}
	struct buf *plain = &W->tls_plain;
	plain->len = 0;
	enum tls_status st = tls_conn_feed(cl->tls, data, len, plain, &cl->tx->wire.pending);
	if (st == TLS_ERROR) {
		if (!was_done)
			stats_add(cl->li->st, STAT_TLS_FAILED, 1);
		log_info("%s TLS %s: %s", cl->peer, was_done ? "error" : "handshake failed",
			 tls_conn_error(cl->tls));
		cl->codec->error(cl, was_done ? REASON_TLS_ERROR : REASON_TLS_HANDSHAKE);
		/* Send the alert we have, then close. */
		outq_flush(&cl->tx->wire, (uv_stream_t *)&cl->tcp, client_write_cb, cl);
		conn_close(cl);
		return;
	}
	conn_flush(cl);
	if (cl->state == CL_CLOSING)
		return;
	if (!was_done && tls_conn_handshake_done(cl->tls)) {
		struct tls_facts tf;
		tls_conn_facts(cl->tls, &tf);
		stats_add(cl->li->st, tf.resumed ? STAT_TLS_RESUMED
				      : tf.key_alg && tf.key_alg[0] == 'E' ? STAT_TLS_FULL_ECDSA : STAT_TLS_FULL_RSA, 1);
		if (cl->state == CL_OPEN && cl->codec->idle(cl))
			conn_timer(cl, timeouts()->client_keepalive_ms);
	}
	if (plain->len)
		client_on_plain(cl, plain->data, plain->len);
	if (st == TLS_CLOSED && cl->state != CL_CLOSING)
		client_on_eof(cl);
}

/* The first plaintext bytes choose the protocol (codec_choose). A strict
 * beginning of the HTTP/2 preface waits in cl->in for the rest. */
static void client_choose_codec(struct client *cl, const char *data, size_t len)
{
	struct buf held = { 0 };
	if (cl->in.len) {
		buf_append(&cl->in, data, len);
		held = cl->in;
		cl->in = (struct buf){ 0 };
		data = held.data;
		len = held.len;
	}
	const struct codec_ops *ops = codec_choose(cl, data, len);
	if (ops == NULL) {
		if (held.data)
			cl->in = held;
		else
			buf_append(&cl->in, data, len);
		return;
	}
	cl->codec_chosen = 1;
	cl->codec = ops;
	cl->codec->data(cl, data, len);
	if (held.data) {
		if (cl->in.data == NULL) {  /* keep the capacity */
			held.len = 0;
			cl->in = held;
		} else {
			buf_free(&held);
		}
	}
}

static void client_on_plain(struct client *cl, const char *data, size_t len)
{
	if (cl->state == CL_LINGER)
		return;  /* discard */
	if (!cl->codec_chosen) {
		client_choose_codec(cl, data, len);
		return;
	}
	cl->codec->data(cl, data, len);
}

static void client_timer_fired(struct deadline *d)
{
	struct client *cl = CONTAINER_OF(d, struct client, dl);
	switch (cl->state) {
	case CL_PROXY:
		log_info("%s closed: no %s within client_header", cl->peer,
			 cl->proxy_required ? "complete PROXY header" : "request bytes");
		conn_close(cl);
		break;
	case CL_OPEN:
		if (!cl->codec->idle(cl)) {
			cl->codec->timeout(cl);
			break;
		}
		if (cl->trim_pending) {
			client_trim(cl);
			conn_timer(cl, timeouts()->client_keepalive_ms - IDLE_TRIM_MS);
			break;
		}
		if (cl->tls && !tls_conn_handshake_done(cl->tls))
			log_info("%s TLS handshake timeout", cl->peer);
		conn_close(cl);  /* keepalive expired: nothing to answer */
		break;
	case CL_LINGER:
		conn_close(cl);
		break;
	case CL_CLOSING:
		break;
	}
}

/* ---- accept ---- */

_Static_assert(sizeof(((struct client *)0)->peer) >= NETADDR_PEER_MAX, "peer text fits");

static void format_peer(struct client *cl)
{
	netaddr_peer_text(&cl->src, cl->peer, sizeof(cl->peer));
}

/* A listener bound to one address is where every one of its clients
 * connected to: only a wildcard bind needs getsockname per connection. */
static int addr_is_wildcard(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return ((const struct sockaddr_in *)ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return ss->ss_family != AF_INET6 || IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)ss)->sin6_addr);
}

static void client_read_addrs(struct client *cl)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	const struct cfg_addr *bound = &cl->li->cfg->addr;
	memset(&cl->src, 0, sizeof(cl->src));
	memset(&cl->dst, 0, sizeof(cl->dst));
	if (uv_tcp_getpeername(&cl->tcp, (struct sockaddr *)&ss, &len) == 0)
		netaddr_from_sockaddr(&cl->src, (struct sockaddr *)&ss);
	if (!addr_is_wildcard(&bound->ss)) {
		netaddr_from_sockaddr(&cl->dst, (const struct sockaddr *)&bound->ss);
	} else {
		len = sizeof(ss);
		if (uv_tcp_getsockname(&cl->tcp, (struct sockaddr *)&ss, &len) == 0)
			netaddr_from_sockaddr(&cl->dst, (struct sockaddr *)&ss);
	}
	format_peer(cl);
}

/* The client's address is final (socket peer, or a PROXY header's): what
 * it may assert in headers follows, and the HTTP (or TLS) phase begins. */
static void client_identity_known(struct client *cl)
{
	const struct cfg_listener *l = cl->li->cfg;
	cl->trusted_fwd = l->ntrusted_forwarders && cidr_list_match(l->trusted_forwarders, l->ntrusted_forwarders, &cl->src);
	cl->state = CL_OPEN;
	if (cl->tls)
		conn_timer(cl, l->tls.handshake_timeout_ms);
	else
		conn_timer(cl, timeouts()->client_keepalive_ms);
}

/* CL_PROXY: a trusted peer's first bytes must be a valid PROXY header; an
 * untrusted peer's must not look like one. Partial input waits in cl->in. */
static void client_on_proxy(struct client *cl, const char *data, size_t len)
{
	if (cl->in.len || len == 0) {
		buf_append(&cl->in, data, len);
		data = cl->in.data;
		len = cl->in.len;
	}
	const uint8_t *p = (const uint8_t *)data;
	size_t used = 0;
	if (cl->proxy_required) {
		struct pp_decoded d;
		const char *why = "";
		ssize_t n = pp_decode(p, len, &d, &why);
		if (n < 0) {
			log_warn("%s closed: invalid PROXY header: %s", cl->peer, why);
			conn_close(cl);
			return;
		}
		if (n == 0)
			goto more;
		if (!d.local) {
			cl->src = d.src;
			cl->dst = d.dst;
			format_peer(cl);
		}
		used = (size_t)n;
	} else {
		int d = pp_detect(p, len);
		if (d > 0) {
			log_warn("%s closed: PROXY header from a peer outside accept_proxy_from", cl->peer);
			conn_close(cl);
			return;
		}
		if (d == 0)
			goto more;
	}
	client_identity_known(cl);
	/* Hand the bytes after the header on as if they had just been read. */
	struct buf rest = cl->in;
	int from_in = cl->in.len > 0;
	if (from_in) {
		cl->in = (struct buf){ 0 };
		data = rest.data;
	}
	if (len > used) {
		if (cl->tls)
			client_on_tls(cl, data + used, len - used);
		else
			client_on_plain(cl, data + used, len - used);
	}
	if (from_in) {
		if (cl->in.data == NULL) {  /* keep the capacity */
			rest.len = 0;
			cl->in = rest;
		} else {
			buf_free(&rest);
		}
	}
	return;
more:
	if (cl->in.len == 0)
		buf_append(&cl->in, data, len);
}

/* Connection structs come in 64 KiB slabs, never go back to the allocator
 * (a closed one waits in cl_free), and cost their size: one by one, each
 * would be rounded up to the allocator's next size class, and a slab of an
 * odd size up to its next large class. */
#define CLIENT_SLAB_BYTES (64 * 1024)
#define CLIENT_SLAB (CLIENT_SLAB_BYTES / sizeof(struct client))

static struct client *client_slab_alloc(void)
{
	struct client *slab = calloc(CLIENT_SLAB, sizeof(*slab));
	AN(slab);
	for (size_t i = 1; i < CLIENT_SLAB; i++)
		list_add_tail(&cl_free, &slab[i].link);
	return &slab[0];
}

void conn_accept(struct worker_listener *li)
{
	struct client *cl;
	if (!list_empty(&cl_free)) {
		cl = CONTAINER_OF(cl_free.next, struct client, link);
		list_del(&cl->link);
		struct buf in = cl->in, op = cl->out.pending, oi = cl->out.inflight;
		memset(cl, 0, sizeof(*cl));
		cl->in = in;
		cl->out.pending = op;
		cl->out.inflight = oi;
	} else {
		cl = client_slab_alloc();
	}
	uv_tcp_init(&W->loop, &cl->tcp);
	cl->tcp.data = cl;
	cl->li = li;
	cl->codec = codec_default;
	list_init(&cl->parked);
	list_add_tail(&W->clients, &cl->link);
	W->nclients++;
	stats_add(li->st, STAT_CONN_ACCEPTED, 1);
	stats_gauge_add(li->st, GAUGE_CLIENTS, 1);
	if (uv_accept((uv_stream_t *)&li->tcp, (uv_stream_t *)&cl->tcp) < 0) {
		cl->state = CL_OPEN;
		conn_close(cl);
		return;
	}
	if (W->nclients > limits()->max_connections) {
		static uint64_t last_log_us;
		uint64_t now = now_us();
		if (now - last_log_us >= 1000000) {  /* a flood must not flood the log */
			last_log_us = now;
			log_warn("limits.max_connections (%u) reached: closing new connections",
				 limits()->max_connections);
		}
		conn_close(cl);
		return;
	}
	/* TCP_NODELAY comes from the listening socket (master.c). */
	cl->serial = ++W->conn_serial;
	client_read_addrs(cl);
	if (li->tls) {
		cl->tls = tls_conn_new(li->tls);
		client_tls_get(cl);
	}
	if (li->cfg->nproxy_from) {
		cl->state = CL_PROXY;
		cl->proxy_required = (uint8_t)cidr_list_match(li->cfg->proxy_from, li->cfg->nproxy_from, &cl->src);
		conn_timer(cl, timeouts()->client_header_ms);
	} else {
		client_identity_known(cl);
	}
	client_read_start(cl);
}

/* Drain. An idle keepalive client is not closed at once: its next request
 * may already be on the wire, and a close under it turns that request into
 * a reset or an EOF before any response, which the client cannot tell from
 * a request lost half-way. It may still send one for DRAIN_IDLE_MS (at most
 * its keepalive timeout); that request is answered with Connection: close,
 * since W->draining clears keepalive. Only a client that stays silent is
 * closed, as at any keepalive expiry. A connection accepted but not yet
 * used gets to send its first request (bounded by the header timeout).
 * The drain timeout bounds it all. */
void conn_drain_all(void)
{
	struct list *pos = W->clients.next;
	while (pos != &W->clients) {
		struct client *cl = CONTAINER_OF(pos, struct client, link);
		pos = pos->next;
		if (cl->state != CL_OPEN)
			continue;
		cl->codec->drain(cl);
		if (!cl->codec->idle(cl) || cl->in.len)
			continue;
		if (cl->nrequests == 0)
			conn_timer(cl, timeouts()->client_header_ms);
		else if (conn_queued(cl) == 0)
			conn_keepalive_wait(cl);
		/* else the last response is still going out: the write callback
		 * starts the wait once it is delivered. */
	}
}
