/* Client connections: the HTTP/1.1 state machine of enum client_state.
 *
 * Request path: bytes -> llhttp (request) -> struct msg -> validation ->
 * rewritten head + (re-chunked) body -> backend connection.
 * Response path: backend bytes -> llhttp (response) -> rewritten head +
 * body framed for this client -> client.
 *
 * Parsers are paused (HPE_PAUSED) at the two points where sluice must act
 * outside a callback: after a head (validate, dispatch) and after a message
 * (finish the exchange). Nothing is closed from inside an llhttp callback. */
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include "http1.h"
#include "deadline.h"
#include "forward.h"
#include "inspect.h"
#include "inspect_api.h"
#include "log.h"
#include "proxy_proto.h"
#include "stats.h"
#include "tls.h"
#include "upstream.h"
#include "worker.h"

#define OUT_HIGH_WATER (256 * 1024)
#define OUT_LOW_WATER  (64 * 1024)
#define PIPELINE_MAX   (64 * 1024)   /* unparsed bytes held while a response is pending */
#define LINGER_MS      2000          /* read-and-discard after an error response */
#define BUF_KEEP       (16 * 1024)   /* capacity an idle client may keep */
#define IDLE_TRIM_MS   250           /* keepalive idle time after which buffers go back */
#define DRAIN_IDLE_MS  2000          /* draining: how long an idle keepalive client may still send */

static llhttp_settings_t req_settings, resp_settings;
static struct list cl_free = { &cl_free, &cl_free };

static void client_close(struct client *cl);
static void client_fail(struct client *cl, enum reason r);
static void client_flush(struct client *cl);
static void client_run_input(struct client *cl);
static void client_read_pause(struct client *cl, int pause);
static void client_timer_fired(struct deadline *d);
/* Every client's timeout, on one libuv timer (a uv_timer_t per connection
 * would cost each idle one 152 bytes). */
static struct deadline_heap client_deadlines;
static void client_backend_ready(struct client *cl);
static void client_backend_error(struct client *cl, enum reason r);
static void client_backend_eof(struct client *cl, enum reason r);
static void client_backend_writable(struct client *cl);

static const char *status_text(int status)
{
	switch (status) {
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 429: return "Too Many Requests";
	case 408: return "Request Timeout";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	default:  return "Error";
	}
}

static const struct cfg_limits *limits(void) { return &W->cfg->limits; }
static const struct cfg_timeouts *timeouts(void) { return &W->cfg->timeouts; }

static void client_timer(struct client *cl, uint64_t ms)
{
	cl->trim_pending = 0;
	deadline_set(&client_deadlines, &cl->dl, ms);
}

/* ---- statistics and the access log ---- */

static void txn_count(struct stats_block *st, const struct txn *t, enum stats_counter cls, uint64_t total)
{
	stats_add(st, STAT_REQUESTS, 1);
	stats_add(st, cls, 1);
	stats_add(st, STAT_BYTES_IN, t->req_body);
	stats_add(st, STAT_BYTES_OUT, t->bytes_out);
	stats_reason(st, t->reason);
	stats_observe_us(st, HIST_TOTAL, total);
}

/* One request ended: the same figures the access log prints go to the
 * listener's, backend's and server's stats. */
static void txn_stats(struct client *cl, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct txn *t = cl->txn;
	enum stats_counter cls = STAT_RESP_NONE;
	if (t->resp_head_sent && t->status >= 100 && t->status < 600)
		cls = (enum stats_counter)(STAT_RESP_1XX + t->status / 100 - 1);
	txn_count(cl->li->st, t, cls, total);
	if (t->be == NULL || t->t_queue == 0)
		return;  /* never reached the backend stage */
	txn_count(t->be->st, t, cls, total);
	stats_observe_us(t->be->st, HIST_QUEUE, queue);
	if (t->srv == NULL)
		return;
	txn_count(t->srv->st, t, cls, total);
	stats_observe_us(t->srv->st, HIST_QUEUE, queue);
	if (t->bconn_req == 1 && t->t_connected) {  /* only new connections that connected */
		stats_observe_us(t->be->st, HIST_CONNECT, conn);
		stats_observe_us(t->srv->st, HIST_CONNECT, conn);
	}
	if (t->t_first_byte) {
		stats_observe_us(t->be->st, HIST_BACKEND, be);
		stats_observe_us(t->srv->st, HIST_BACKEND, be);
	}
}

/* One JSON object per line: the fields of the text format, typed. */
static void txn_log_json(struct client *cl, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct txn *t = cl->txn;
	struct buf *b = log_access_begin_raw();
	char ip[NETADDR_IP_MAX];
	buf_append_str(b, "{\"ts\":\"");
	log_timestamp(b);
	buf_append_str(b, "\",\"client\":");
	netaddr_ip_text(&cl->src, ip, sizeof(ip));
	buf_append_json(b, ip, strlen(ip));
	buf_appendf(b, ",\"client_port\":%u,\"method\":", netaddr_port(&cl->src));
	if (t->req.url_len || t->head_done) {
		const char *m = llhttp_method_name((llhttp_method_t)t->method);
		buf_append_json(b, m, strlen(m));
	} else {
		buf_append_str(b, "null");
	}
	buf_append_str(b, ",\"target\":");
	if (t->req.url_len)
		buf_append_json(b, msg_str(&t->req, t->req.url_off), t->req.url_len);
	else
		buf_append_str(b, "null");
	buf_appendf(b, ",\"status\":%d,\"bytes\":%llu,\"backend\":", t->status, (unsigned long long)t->bytes_out);
	if (t->srv) {
		buf_append_json(b, t->be->cfg->name, strlen(t->be->cfg->name));
		buf_append_str(b, ",\"server\":");
		buf_append_json(b, t->srv->cfg->name, strlen(t->srv->cfg->name));
	} else {
		buf_append_str(b, "null,\"server\":null");
	}
	buf_appendf(b, ",\"total_us\":%llu,\"queue_us\":%llu,\"connect_us\":%llu,\"backend_us\":%llu,"
		    "\"be_conn_req\":", (unsigned long long)total,
		    (unsigned long long)queue, (unsigned long long)conn, (unsigned long long)be);
	if (t->bconn_req)
		buf_appendf(b, "%u", t->bconn_req);
	else
		buf_append_str(b, "null");
	if (t->insp.ran)
		buf_appendf(b, ",\"inspect_us\":%llu,\"inspect\":\"%s\"", (unsigned long long)t->insp.us,
			    inspect_decision_name(t->insp.decision));
	else
		buf_append_str(b, ",\"inspect_us\":null,\"inspect\":\"off\"");
	if (t->insp.ntags) {
		buf_append_str(b, ",\"tags\":");
		buf_append_json(b, t->insp.tags.data, t->insp.tags.len);
	}
	buf_appendf(b, ",\"reason\":\"%s\"", reason_name(t->reason));
	if (cl->tls)
		tls_conn_describe_json(cl->tls, b);
	buf_append_str(b, "}");
	log_access_commit();
}

static void txn_log_text(struct client *cl, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct txn *t = cl->txn;
	struct buf *b = log_access_begin();
	const char *method = t->req.url_len || t->head_done ? llhttp_method_name((llhttp_method_t)t->method) : "-";
	buf_appendf(b, "%s %s ", cl->peer, method);
	if (t->req.url_len)
		buf_append(b, msg_str(&t->req, t->req.url_off), t->req.url_len);
	else
		buf_append(b, "-", 1);
	buf_appendf(b, " %d %llu ", t->status, (unsigned long long)t->bytes_out);
	if (t->srv)
		buf_appendf(b, "%s/%s", t->be->cfg->name, t->srv->cfg->name);
	else
		buf_append(b, "-", 1);
	buf_appendf(b, " total_us=%llu queue_us=%llu connect_us=%llu backend_us=%llu",
		    (unsigned long long)total, (unsigned long long)queue,
		    (unsigned long long)conn, (unsigned long long)be);
	/* Which request this was on its backend connection: 1 = a new one. */
	if (t->bconn_req)
		buf_appendf(b, " be_conn_req=%u", t->bconn_req);
	else
		buf_append_str(b, " be_conn_req=-");
	if (t->insp.ran)
		buf_appendf(b, " inspect_us=%llu inspect=%s", (unsigned long long)t->insp.us,
			    inspect_decision_name(t->insp.decision));
	else
		buf_append_str(b, " inspect_us=- inspect=off");
	if (t->insp.ntags) {
		buf_append_str(b, " tags=");
		buf_append(b, t->insp.tags.data, t->insp.tags.len);
	}
	buf_appendf(b, " reason=%s", reason_name(t->reason));
	if (cl->tls)
		tls_conn_describe(cl->tls, b);
	log_access_commit();
}

static void txn_log(struct client *cl)
{
	struct txn *t = cl->txn;
	uint64_t now = now_us();
	uint64_t total = t->t_start ? now - t->t_start : 0;
	uint64_t queue = t->t_connect_start > t->t_queue && t->t_queue ? t->t_connect_start - t->t_queue : 0;
	uint64_t conn = t->t_connected > t->t_connect_start && t->t_connect_start ? t->t_connected - t->t_connect_start : 0;
	uint64_t be = t->t_first_byte > t->t_sent && t->t_sent ? t->t_first_byte - t->t_sent : 0;
	txn_stats(cl, total, queue, conn, be);
	if (log_access_enabled()) {
		if (W->cfg->access_log_format == CFG_LOG_JSON)
			txn_log_json(cl, total, queue, conn, be);
		else
			txn_log_text(cl, total, queue, conn, be);
	}
	if (t->insp.ran)
		inspect_finish(cl);
}

/* ---- the request pool ---- */

/* Free requests of this worker, buffers warm (each process has its own). */
static struct list txn_free = { &txn_free, &txn_free };
static unsigned txn_nfree;
#define TXN_POOL_KEEP 256           /* free requests kept warm; more go back to the allocator */
#define TXN_BUF_KEEP  (4 * 1024)    /* capacity a pooled request's buffer keeps */

static void txn_free_bufs(struct txn *t)
{
	msg_free(&t->req);
	msg_free(&t->resp);
	buf_free(&t->head);
	buf_free(&t->tobe);
	inspect_txn_free(&t->insp);
}

/* Attach a request to CL: a pooled one (its buffers keep their capacity),
 * emptied. */
static struct txn *txn_get(struct client *cl)
{
	struct txn *t;
	if (!list_empty(&txn_free)) {
		t = CONTAINER_OF(txn_free.next, struct txn, qlink);
		list_del(&t->qlink);
		txn_nfree--;
	} else {
		t = calloc(1, sizeof(*t));
		AN(t);
	}
	struct msg req = t->req, resp = t->resp;
	struct buf head = t->head, tobe = t->tobe;
	struct txn_insp insp = t->insp;
	inspect_txn_reset(&insp);
	msg_reset(&req, limits()->max_headers);
	msg_reset(&resp, limits()->max_headers);
	head.len = tobe.len = 0;
	memset(t, 0, sizeof(*t));
	t->req = req;
	t->resp = resp;
	t->head = head;
	t->tobe = tobe;
	t->insp = insp;
	list_init(&t->qlink);
	llhttp_init(&t->rx.parser, HTTP_REQUEST, &req_settings);
	t->rx.parser.data = cl;
	t->cl = cl;
	cl->txn = t;
	return t;
}

/* CL's request is over (and detached from upstream): back to the pool.
 * Big buffers a request grew (a long head, a held body) are trimmed so
 * the pool stays small. */
static void txn_put(struct client *cl)
{
	struct txn *t = cl->txn;
	if (t == NULL)
		return;
	cl->txn = NULL;
	AZ(t->bc);
	AZ(t->queued);
	t->cl = NULL;
	if (txn_nfree >= TXN_POOL_KEEP) {
		txn_free_bufs(t);
		free(t);
		return;
	}
	t->req.raw.len = t->resp.raw.len = t->head.len = t->tobe.len = 0;
	buf_trim(&t->req.raw, TXN_BUF_KEEP);
	buf_trim(&t->resp.raw, TXN_BUF_KEEP);
	buf_trim(&t->head, TXN_BUF_KEEP);
	buf_trim(&t->tobe, TXN_BUF_KEEP);
	inspect_txn_trim(&t->insp, TXN_BUF_KEEP);
	list_add_head(&txn_free, &t->qlink);
	txn_nfree++;
}

/* ---- output to the client ---- */

static void client_out(struct client *cl, const void *data, size_t len)
{
	buf_append(&cl->out.pending, data, len);
	cl->txn->bytes_out += len;
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
static struct outq *client_wire(struct client *cl)
{
	return cl->tls ? &cl->tx->wire : &cl->out;
}

static size_t client_queued(const struct client *cl)
{
	return cl->tls ? outq_queued_via(&cl->out, &cl->tx->wire, cl->tls) : outq_queued(&cl->out);
}

/* Buffers keep their capacity across requests, so a busy keepalive
 * connection never allocates; one that has gone quiet gives it back, which
 * takes an idle keepalive connection from ~5.5 KB of heap to the ~2 KB of its
 * struct (bench memory). */
static void client_trim(struct client *cl)
{
	struct client_tls *tx = cl->tx;
	if (cl->in.len || client_queued(cl) || cl->out.writing || (tx && tx->wire.writing))
		return;
	/* Only a trim that freed something is worth a page purge. */
	int held = cl->in.cap || cl->out.pending.cap || cl->out.inflight.cap ||
		   (tx && (tx->wire.pending.cap || tx->wire.inflight.cap || tx->hs_in.cap));
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
static void client_keepalive_wait(struct client *cl)
{
	uint64_t ka = timeouts()->client_keepalive_ms;
	if (W->draining) {  /* see client_drain_all */
		client_timer(cl, ka < DRAIN_IDLE_MS ? ka : DRAIN_IDLE_MS);
		return;
	}
	if (ka <= IDLE_TRIM_MS) {
		client_timer(cl, ka);
		return;
	}
	client_timer(cl, IDLE_TRIM_MS);
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
 * close into a reset that destroys the response in flight. */
static void client_linger(struct client *cl)
{
	if (cl->state == CL_CLOSING)
		return;
	cl->state = CL_ERROR;
	if (cl->peer_eof) {
		client_close(cl);
		return;
	}
	if (cl->tls && tls_conn_handshake_done(cl->tls)) {
		tls_conn_shutdown(cl->tls, &cl->tx->wire.pending);
		client_flush(cl);
		if (cl->state == CL_CLOSING)
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
		client_close(cl);
		return;
	}
	client_read_pause(cl, 0);
	client_timer(cl, LINGER_MS);
}

/* States in which, with output queued, the client's pace is what we wait
 * for: a response being delivered or the last one draining. */
static int send_timer_applies(const struct client *cl)
{
	return cl->state == CL_IDLE || cl->state == CL_ERROR ||
	       (cl->state == CL_EXCHANGE && cl->txn->req_done);
}

static void client_write_cb(uv_write_t *req, int status)
{
	struct client *cl = req->data;
	outq_written(client_wire(cl));
	if (cl->state == CL_CLOSING)
		return;
	if (status < 0) {
		if (cl->txn)
			cl->txn->reason = REASON_CLIENT_WRITE_ERROR;
		client_close(cl);
		return;
	}
	client_flush(cl);
	if (client_wire(cl)->writing) {
		/* Progress: the slow-reader guard starts over. */
		if (send_timer_applies(cl))
			client_timer(cl, timeouts()->client_send_ms);
		return;
	}
	if (cl->txn && cl->txn->bc && cl->txn->bc->read_stopped)
		bconn_read_pause(cl->txn->bc, 0);
	switch (cl->state) {
	case CL_ERROR:
		client_linger(cl);
		break;
	case CL_IDLE:
		client_keepalive_wait(cl);
		if (cl->read_stopped && cl->in.len <= PIPELINE_MAX)
			client_read_pause(cl, 0);
		break;
	case CL_HEAD:
		if (cl->read_stopped && cl->in.len <= PIPELINE_MAX)
			client_read_pause(cl, 0);
		break;
	case CL_EXCHANGE:
		if (cl->txn->req_done)
			client_timer(cl, 0);  /* the backend's timer governs again */
		break;
	default:
		break;
	}
}

static void client_flush(struct client *cl)
{
	if (cl->state == CL_CLOSING)
		return;
	int rc = outq_flush_via(&cl->out, cl->tls ? &cl->tx->wire : NULL, cl->tls, (uv_stream_t *)&cl->tcp,
				client_write_cb, cl);
	if (rc == OUTQ_ERR_TLS)
		log_info("%s TLS write failed: %s", cl->peer, tls_conn_error(cl->tls));
	if (rc < 0)
		client_close(cl);
}

/* ---- lifecycle ---- */

static void client_handle_closed(uv_handle_t *h)
{
	struct client *cl = h->data;
	if (--cl->closing_handles > 0)
		return;
	cl->in.len = cl->out.pending.len = cl->out.inflight.len = 0;
	txn_put(cl);
	tls_conn_free(cl->tls);
	cl->tls = NULL;
	client_tls_put(cl);
	buf_trim(&cl->in, BUF_KEEP);
	buf_trim(&cl->out.pending, BUF_KEEP);
	buf_trim(&cl->out.inflight, BUF_KEEP);
	list_add_head(&cl_free, &cl->link);
	worker_maybe_exit();
}

static void client_close(struct client *cl)
{
	if (cl->state == CL_CLOSING)
		return;
	struct txn *t = cl->txn;
	if (t) {
		if (t->bc) {
			if (t->bc->state == BC_CONNECTING)
				upstream_cancel(cl);
			else
				upstream_abort(t->bc);
		}
		upstream_cancel(cl);
	}
	upstream_client_gone(cl);
	/* A request that never got its answer still gets its log line. */
	if (t && cl->state != CL_IDLE && cl->state != CL_ERROR && (t->req.url_len || t->t_start) &&
	    !t->resp_done) {
		if (t->reason == REASON_OK)
			t->reason = REASON_CLIENT_ABORT;
		if (t->status == 0)
			t->status = 499;
		txn_log(cl);
	}
	cl->state = CL_CLOSING;
	list_del(&cl->link);
	if (cl->tx)
		list_del(&cl->tx->hs_link);
	W->nclients--;
	stats_gauge_add(cl->li->st, GAUGE_CLIENTS, -1);
	deadline_set(&client_deadlines, &cl->dl, 0);
	cl->closing_handles = 1;
	uv_close((uv_handle_t *)&cl->tcp, client_handle_closed);
}

static void client_read_cb(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void client_read_start(struct client *cl)
{
	uv_read_start((uv_stream_t *)&cl->tcp, worker_read_alloc, client_read_cb);
}

static void client_read_pause(struct client *cl, int pause)
{
	if (cl->state == CL_CLOSING || cl->read_stopped == pause || (!pause && cl->peer_eof))
		return;
	cl->read_stopped = (uint8_t)pause;
	if (pause)
		uv_read_stop((uv_stream_t *)&cl->tcp);
	else
		client_read_start(cl);
}

/* ---- error responses ---- */

/* sluice's own answer: an error, or the hook's deny or redirect. */
static void client_reply(struct client *cl, enum reason r, int close)
{
	struct txn *t = cl->txn;
	struct txn_insp *in = &t->insp;
	int status = t->status;
	const char *body = NULL;
	size_t blen = 0;
	char text[200];
	int redirect = r == REASON_INSPECT_DENIED && in->decision == INSPECT_REDIRECT;
	if (r == REASON_INSPECT_DENIED && !redirect && in->deny_body) {
		body = in->local.data;
		blen = in->local.len;
	} else {
		blen = (size_t)snprintf(text, sizeof(text), "%d %s: %s\n", status, status_text(status),
					redirect ? "see Location" : reason_text(r));
		body = text;
	}
	char head[256];
	int hlen = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n",
			    status, status_text(status), blen);
	client_out(cl, head, (size_t)hlen);
	if (redirect) {
		client_out(cl, "Location: ", 10);
		client_out(cl, in->local.data, in->local.len);
		client_out(cl, "\r\n", 2);
	}
	if (close)
		client_out(cl, "Connection: close\r\n", 19);
	else if (t->http_minor == 0)
		client_out(cl, "Connection: keep-alive\r\n", 24);
	client_out(cl, "\r\n", 2);
	if (!t->is_head)
		client_out(cl, body, blen);
	t->resp_head_sent = 1;
	t->resp_done = 1;
}

static void client_fail(struct client *cl, enum reason r)
{
	if (cl->state == CL_CLOSING)
		return;
	struct txn *t = cl->txn ? cl->txn : txn_get(cl);
	t->reason = r;
	if (t->bc)
		upstream_abort(t->bc);
	upstream_cancel(cl);
	int status = reason_status(r);
	if (r == REASON_INSPECT_DENIED || r == REASON_INSPECT_ERROR)
		status = t->insp.status;
	if (status == 0 || t->resp_head_sent || cl->state == CL_ERROR || cl->state == CL_TUNNEL) {
		if (t->status == 0)
			t->status = status ? status : 499;
		txn_log(cl);
		t->resp_done = 1;
		client_close(cl);
		return;
	}
	t->status = status;
	if (r == REASON_INSPECT_DENIED)
		;  /* the hook's decision: counted and in the access log, not an error */
	else if (status >= 500)
		log_warn("%s %s: %s", cl->peer, reason_name(r), reason_text(r));
	else
		log_info("%s %s: %s", cl->peer, reason_name(r), reason_text(r));
	client_reply(cl, r, 1);
	txn_log(cl);
	cl->keepalive = 0;
	cl->state = CL_ERROR;
	client_timer(cl, timeouts()->client_send_ms);
	client_flush(cl);
	if (!client_wire(cl)->writing && client_queued(cl) == 0)
		client_linger(cl);
}

static void txn_finish(struct client *cl, int reusable);

/* The hook answered a request that has been read in full: reply, and the
 * connection goes on to its next request. */
static void client_reply_pending(struct client *cl)
{
	struct txn *t = cl->txn;
	t->insp.reply_pending = 0;
	t->status = t->insp.status;
	if (W->draining)
		cl->keepalive = 0;
	client_reply(cl, t->reason, !cl->keepalive);
	txn_finish(cl, 0);
}

/* ---- request parsing ---- */

static int req_fail(struct client *cl, enum reason r)
{
	cl->txn->rx.parse_error = 1;
	cl->txn->reason = r;
	return -1;
}

static int on_req_begin(llhttp_t *p)
{
	struct client *cl = p->data;
	if (cl->txn->t_start == 0)
		cl->txn->t_start = now_us();
	return 0;
}

static int on_req_url(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = p->data;
	cl->txn->method = llhttp_get_method(p);
	if (cl->txn->req.url_len + len > limits()->max_request_line)
		return req_fail(cl, REASON_URI_TOO_LONG);
	msg_on_url(&cl->txn->req, at, len);
	return 0;
}

static int check_head_size(struct client *cl)
{
	if (cl->txn->req.head_bytes > limits()->max_header_size)
		return req_fail(cl, REASON_HEADERS_TOO_LARGE);
	return 0;
}

static int on_req_field(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = p->data;
	if (msg_on_field(&cl->txn->req, at, len) < 0)
		return req_fail(cl, REASON_HEADERS_TOO_LARGE);
	return check_head_size(cl);
}

/* llhttp 8 accepts obs-fold (a header line starting with SP/HTAB) and
 * reports the folded part as more value bytes. RFC 9112 5.2 lets a proxy
 * reject it, and passing it on is a smuggling vector, so detect it: a value
 * that continues anywhere but across an execute boundary, or that starts
 * right after a line break, was folded. */
static int value_is_folded(struct client *cl, const char *at)
{
	if (cl->txn->req.in_value)
		return !(at == cl->txn->rx.exec_start && cl->txn->rx.val_end == cl->txn->rx.prev_exec_end);
	const char *q = at;
	while (q > cl->txn->rx.exec_start && (q[-1] == ' ' || q[-1] == '\t'))
		q--;
	return q > cl->txn->rx.exec_start && q < at && q[-1] == '\n';
}

static int on_req_value(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = p->data;
	if (value_is_folded(cl, at))
		return req_fail(cl, REASON_BAD_REQUEST);
	cl->txn->rx.val_end = at + len;
	if (msg_on_value(&cl->txn->req, at, len) < 0)
		return req_fail(cl, REASON_BAD_REQUEST);
	return check_head_size(cl);
}

static int on_req_value_done(llhttp_t *p)
{
	struct client *cl = p->data;
	struct hdr *h = msg_finish_header(&cl->txn->req);
	if (h == NULL)
		return req_fail(cl, REASON_BAD_REQUEST);
	/* llhttp folds obs-fold lines into the value; RFC 9112 5.2 lets a
	 * proxy reject them, and forwarding them is a smuggling vector. */
	if (memchr(msg_str(&cl->txn->req, h->val_off), '\r', h->val_len) ||
	    memchr(msg_str(&cl->txn->req, h->val_off), '\n', h->val_len))
		return req_fail(cl, REASON_BAD_REQUEST);
	/* Transfer_Encoding / Content_Length: sluice would not frame by it,
	 * a CGI-style backend would (0.CL / TE.0 desync). */
	const char *name = msg_str(&cl->txn->req, h->name_off);
	if (hdr_framing_alias(name, h->name_len))
		return req_fail(cl, REASON_BAD_REQUEST);
	if (cl->li->cfg->underscores != CFG_US_ALLOW && memchr(name, '_', h->name_len)) {
		if (cl->li->cfg->underscores == CFG_US_REJECT)
			return req_fail(cl, REASON_UNDERSCORE_HEADER);
		h->drop = 1;
	}
	if (cl->txn->head_done) {
		/* A trailer field: checked like a header, then dropped. Kept,
		 * a held request's head (built after its body) would carry a
		 * trailer "Content-Length" next to Transfer-Encoding, and the
		 * hook would read trailers as headers. Its bytes still count
		 * toward max_header_size. */
		cl->txn->req.raw.len = h->name_off;
		cl->txn->req.nhdrs--;
	}
	return 0;
}

static enum reason txn_dispatch(struct client *cl);
static enum reason txn_body_held(struct client *cl, int complete);

/* Dispatching from inside the callback is safe: nothing here closes the
 * client; a failure is reported to client_exec through req_fail. */
static int on_req_headers_done(llhttp_t *p)
{
	struct client *cl = p->data;
	cl->txn->head_done = 1;
	enum reason r = txn_dispatch(cl);
	return r == REASON_OK ? 0 : req_fail(cl, r);
}

/* Where request bytes for the backend go right now. */
static struct buf *req_sink(struct client *cl)
{
	struct bconn *bc = cl->txn->bc;
	if (bc && bc->state == BC_BUSY)
		return &bc->out.pending;
	return &cl->txn->tobe;
}

static int on_req_body(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = p->data;
	struct txn *t = cl->txn;
	t->req_body += len;
	if (limits()->max_body_size && t->req_body > limits()->max_body_size)
		return req_fail(cl, REASON_BODY_TOO_LARGE);
	if (t->insp.reply_pending)
		return 0;  /* answered locally: the rest of the body is read and dropped */
	if (t->insp.waiting) {
		buf_append(&t->tobe, at, len);
		/* Exactly `body` bytes may be the whole body: on_req_done says. */
		if (t->tobe.len <= cl->li->cfg->inspect.body)
			return 0;
		enum reason r = txn_body_held(cl, 0);
		return r == REASON_OK ? 0 : req_fail(cl, r);
	}
	struct buf *out = req_sink(cl);
	if (t->req_chunked)
		buf_appendf(out, "%zx\r\n", len);
	buf_append(out, at, len);
	if (t->req_chunked)
		buf_append(out, "\r\n", 2);
	return 0;
}

/* A chunk that would take the body past max_body_size is refused from its
 * size line, not after its bytes have been streamed (and waited for). */
static int on_req_chunk_header(llhttp_t *p)
{
	struct client *cl = p->data;
	uint64_t max = limits()->max_body_size;
	if (max && (p->content_length > max || cl->txn->req_body + p->content_length > max))
		return req_fail(cl, REASON_BODY_TOO_LARGE);
	return 0;
}

static int on_req_done(llhttp_t *p)
{
	struct client *cl = p->data;
	struct txn *t = cl->txn;
	t->req_done = 1;
	if (t->insp.waiting) {
		enum reason r = txn_body_held(cl, 1);
		if (r != REASON_OK)
			return req_fail(cl, r);
	}
	if (t->req_chunked && !t->insp.reply_pending)
		buf_append(req_sink(cl), "0\r\n\r\n", 5);
	return HPE_PAUSED;
}

static int has_body(const struct client *cl)
{
	return cl->txn->req_chunked ||
	       ((cl->txn->rx.parser.flags & F_CONTENT_LENGTH) && cl->txn->rx.parser.content_length > 0);
}

/* Absolute-form target (RFC 9112 3.2.2): the backend would take the
 * authority from the target and ignore Host, while the hook, the logs and
 * sluice's routing read Host. Make them one: the target becomes origin-form
 * and Host becomes the authority (added for HTTP/1.0 without one). */
static enum reason req_absolute_form(struct msg *m)
{
	const char *auth, *path;
	size_t alen, plen;
	if (url_absolute_split(msg_str(m, m->url_off), m->url_len, &auth, &alen, &path, &plen) <= 0)
		return REASON_BAD_REQUEST;
	size_t aoff = (size_t)(auth - m->raw.data), poff = (size_t)(path - m->raw.data);
	/* Every append below copies from the arena into itself: no realloc. */
	buf_reserve(&m->raw, 1 + plen + 4 + alen);
	uint32_t url_off = (uint32_t)m->raw.len;
	if (plen == 0 || m->raw.data[poff] != '/')
		buf_append(&m->raw, "/", 1);
	buf_append(&m->raw, m->raw.data + poff, plen);
	m->url_off = url_off;
	m->url_len = (uint32_t)(m->raw.len - url_off);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		if (m->hdrs[i].kind == HDR_HOST) {
			msg_set_value(m, &m->hdrs[i], m->raw.data + aoff, alen);
			return REASON_OK;
		}
	}
	msg_add(m, "Host", m->raw.data + aoff, alen);
	return REASON_OK;
}

/* The largest Content-Length sluice accepts, either way: what a signed
 * 64-bit length holds, as nginx (off_t) and Go. Beyond it a peer would
 * wrap, saturate or refuse: the two sides of us would disagree. */
#define CONTENT_LENGTH_MAX ((uint64_t)INT64_MAX)

/* Content-Length as sluice parsed it, in decimal: "010" or "005" mean 10
 * and 5 here, and the next hop must not get the chance to read them
 * another way (octal, or refusing what we accepted). */
static void canonical_length(struct msg *m, uint64_t clen)
{
	char num[24];
	int n = snprintf(num, sizeof(num), "%llu", (unsigned long long)clen);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *h = &m->hdrs[i];
		if (h->kind != HDR_CONTENT_LENGTH)
			continue;
		if (h->val_len != (uint32_t)n || memcmp(msg_str(m, h->val_off), num, (size_t)n) != 0)
			msg_set_value(m, h, num, (size_t)n);
	}
}

/* An Upgrade header offering h2c: HTTP/2 over cleartext would take the
 * rest of the connection past the parser and the hook (h2c smuggling). */
static int upgrade_offers_h2c(const struct msg *m)
{
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->kind != HDR_UPGRADE)
			continue;
		const char *q = msg_str(m, h->val_off), *end = q + h->val_len, *tok;
		size_t tl;
		while (list_next(&q, end, &tok, &tl))
			if (tok_eq(tok, tl, "h2c"))
				return 1;
	}
	return 0;
}

/* Validate the head and settle the connection's fate (keepalive, upgrade). */
static enum reason txn_check(struct client *cl)
{
	struct txn *t = cl->txn;
	llhttp_t *p = &cl->txn->rx.parser;
	struct msg *m = &t->req;
	t->method = llhttp_get_method(p);
	t->http_minor = llhttp_get_http_minor(p);
	if (llhttp_get_http_major(p) != 1)
		return REASON_BAD_REQUEST;
	if (t->method == HTTP_CONNECT)
		return REASON_METHOD_UNSUPPORTED;
	int hosts = msg_count(m, HDR_HOST);
	if (hosts > 1 || (hosts == 0 && t->http_minor >= 1))
		return REASON_MISSING_HOST;
	int tes = msg_count(m, HDR_TRANSFER_ENCODING);
	if (tes) {
		const struct hdr *h = msg_find(m, HDR_TRANSFER_ENCODING);
		const char *v = msg_str(m, h->val_off);
		if (t->http_minor == 0 || tes > 1 || msg_count(m, HDR_CONTENT_LENGTH))
			return REASON_BAD_TE;
		if (!tok_eq(v, h->val_len, "chunked")) {
			const char *q = v, *end = v + h->val_len, *tok;
			size_t tl;
			while (list_next(&q, end, &tok, &tl))
				if (tok_eq(tok, tl, "chunked"))
					return REASON_BAD_TE;
			/* 501 only for one well-formed coding we do not know;
			 * lists, parameters, quotes and empty values are 400. */
			if (h->val_len == 0)
				return REASON_BAD_TE;
			for (size_t i = 0; i < h->val_len; i++)
				if (!tchar((unsigned char)v[i]))
					return REASON_BAD_TE;
			return REASON_TE_UNSUPPORTED;
		}
		t->req_chunked = 1;
	}
	/* What we frame by must be what llhttp frames by. */
	if (t->req_chunked != !!(p->flags & F_CHUNKED) ||
	    !!msg_count(m, HDR_CONTENT_LENGTH) != !!(p->flags & F_CONTENT_LENGTH))
		return REASON_BAD_REQUEST;
	if (m->url_len == 0)
		return REASON_BAD_REQUEST;
	if (msg_str(m, m->url_off)[0] != '/' &&
	    !(t->method == HTTP_OPTIONS && m->url_len == 1 && msg_str(m, m->url_off)[0] == '*')) {
		enum reason r = req_absolute_form(m);
		if (r != REASON_OK)
			return r;
	}
	/* RFC 9112 3.2: an invalid Host value is a 400. "good.example/x",
	 * "a@b" or "a b" route one way here and another at the backend. */
	const struct hdr *host = msg_find(m, HDR_HOST);
	if (host && !host_valid(msg_str(m, host->val_off), host->val_len))
		return REASON_MISSING_HOST;
	const struct hdr *ex = msg_find(m, HDR_EXPECT);
	if (ex) {
		if (msg_count(m, HDR_EXPECT) > 1 || !tok_eq(msg_str(m, ex->val_off), ex->val_len, "100-continue"))
			return REASON_EXPECT_FAILED;
		t->expect_continue = t->http_minor >= 1;
	}
	uint64_t clen = (p->flags & F_CONTENT_LENGTH) ? p->content_length : 0;
	if (clen > CONTENT_LENGTH_MAX)
		return REASON_BAD_REQUEST;
	if (limits()->max_body_size && clen > limits()->max_body_size)
		return REASON_BODY_TOO_LARGE;
	if (p->flags & F_CONTENT_LENGTH)
		canonical_length(m, clen);
	unsigned conn = msg_apply_connection(m);
	cl->keepalive = t->http_minor >= 1 ? !(conn & CONN_CLOSE) : !!(conn & CONN_KEEPALIVE);
	if (W->draining)
		cl->keepalive = 0;
	t->upgrade = (conn & CONN_UPGRADE) && msg_find(m, HDR_UPGRADE) && t->http_minor >= 1 &&
		     !upgrade_offers_h2c(m);
	if (t->upgrade) {
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_UPGRADE)
				m->hdrs[i].drop = 0;
	}
	t->is_head = t->method == HTTP_HEAD;
	t->idempotent = (t->method == HTTP_GET || t->method == HTTP_HEAD || t->method == HTTP_OPTIONS) &&
			!t->req_chunked && clen == 0;
	return REASON_OK;
}

static void send_continue(struct client *cl)
{
	struct txn *t = cl->txn;
	if (t->expect_continue && !t->continue_sent && has_body(cl)) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		t->continue_sent = 1;
		buf_append(&cl->out.pending, cont, sizeof(cont) - 1);
		client_flush(cl);
	}
}

/* Build the head the backend will receive: the client's headers minus
 * hop-by-hop and spoofed identity ones and those the hook removed, the
 * hook's own, the framing sluice re-emits, then sluice's identity headers
 * (last, so nothing before can cancel them; docs/client-identity.md). */
static void txn_build_head(struct client *cl)
{
	struct txn *t = cl->txn;
	struct msg *m = &t->req;
	const struct cfg_forward *fwd = &t->be->cfg->forward;
	forward_filter(cl, m, fwd);
	if (t->insp.req_del.len)
		inspect_apply_removals(&t->insp.req_del, m);
	struct buf *h = &t->head;
	h->len = 0;
	buf_append_str(h, llhttp_method_name((llhttp_method_t)t->method));
	buf_append(h, " ", 1);
	buf_append(h, msg_str(m, m->url_off), m->url_len);
	buf_append(h, " HTTP/1.1\r\n", 11);
	msg_write_headers(m, h);
	buf_append(h, t->insp.req_hdrs.data, t->insp.req_hdrs.len);
	if (msg_count(m, HDR_HOST) == 0) {
		/* HTTP/1.0 without Host: HTTP/1.1 requires one; use the address
		 * the client connected to, the authority it implicitly used (not
		 * the listener's, which may be a wildcard). */
		char ip[NETADDR_IP_MAX];
		netaddr_ip_text(&cl->dst, ip, sizeof(ip));
		buf_appendf(h, cl->dst.family == AF_INET6 ? "Host: [%s]:%u\r\n" : "Host: %s:%u\r\n", ip,
			    netaddr_port(&cl->dst));
	}
	if (t->req_chunked)
		buf_append_str(h, "Transfer-Encoding: chunked\r\n");
	if (t->upgrade)
		buf_append_str(h, "Connection: upgrade\r\n");
	forward_write(cl, m, fwd, h);
	buf_append(h, "\r\n", 2);
	send_continue(cl);
}

/* Send the request on its way: head, then a backend connection. */
static enum reason txn_forward(struct client *cl)
{
	txn_build_head(cl);
	if (cl->state == CL_CLOSING)  /* the 100 Continue could not be written */
		return REASON_CLIENT_WRITE_ERROR;
	cl->state = CL_WAIT;
	client_timer(cl, 0);
	enum reason r = upstream_request(cl);
	if (r == REASON_OK && cl->txn->queued)
		client_timer(cl, cl->txn->be->cfg->queue_timeout_ms);
	return r;
}

/* Run the hook, then forward or (REASON_INSPECT_*) answer locally. A
 * local answer to a request already read in full keeps the connection:
 * it is sent once the parser pauses (reply_pending); otherwise the
 * unread body makes the stream unusable and client_fail closes it. */
static enum reason txn_inspect(struct client *cl)
{
	struct txn *t = cl->txn;
	enum reason r = inspect_request(cl);
	if (r == REASON_OK)
		return txn_forward(cl);
	t->reason = r;
	if (t->req_done || !has_body(cl)) {
		t->insp.reply_pending = 1;
		cl->state = CL_WAIT;
		client_timer(cl, 0);
		return REASON_OK;
	}
	return r;
}

/* The head is complete (called from the parser callback). */
static enum reason txn_dispatch(struct client *cl)
{
	struct txn *t = cl->txn;
	t->be = cl->li->be;
	enum reason r = txn_check(cl);
	if (r != REASON_OK)
		return r;
	if (!inspect_active(cl))
		return txn_forward(cl);
	const struct cfg_inspect *ic = &cl->li->cfg->inspect;
	if (ic->body && has_body(cl)) {
		uint64_t clen = (cl->txn->rx.parser.flags & F_CONTENT_LENGTH) ? cl->txn->rx.parser.content_length : 0;
		if (ic->body_reject && clen > ic->body)
			return REASON_INSPECT_BODY_TOO_LARGE;
		/* Hold the request: the body collects, de-chunked, in tobe
		 * until it is complete or `body` bytes long. */
		t->insp.waiting = 1;
		cl->state = CL_WAIT;
		client_timer(cl, 0);
		send_continue(cl);
		return cl->state == CL_CLOSING ? REASON_CLIENT_WRITE_ERROR : REASON_OK;
	}
	return txn_inspect(cl);
}

/* The held body is complete, or has reached `body` bytes (from on_req_body
 * or on_req_done). Frame it for the backend and go on as for a head. */
static enum reason txn_body_held(struct client *cl, int complete)
{
	struct txn *t = cl->txn;
	const struct cfg_inspect *ic = &cl->li->cfg->inspect;
	t->insp.waiting = 0;
	if (!complete && ic->body_reject)
		return REASON_INSPECT_BODY_TOO_LARGE;
	t->insp.body_truncated = !complete;
	enum reason r = inspect_request(cl);
	if (r != REASON_OK) {
		t->reason = r;
		if (complete) {
			t->insp.reply_pending = 1;
			return REASON_OK;
		}
		return r;
	}
	if (t->req_chunked && t->tobe.len) {
		char sz[24];
		int n = snprintf(sz, sizeof(sz), "%zx\r\n", t->tobe.len);
		buf_reserve(&t->tobe, (size_t)n + 2);
		memmove(t->tobe.data + n, t->tobe.data, t->tobe.len);
		memcpy(t->tobe.data, sz, (size_t)n);
		t->tobe.len += (size_t)n;
		buf_append(&t->tobe, "\r\n", 2);
	}
	return txn_forward(cl);
}

static enum reason map_llhttp_error(llhttp_errno_t e)
{
	switch (e) {
	case HPE_INVALID_TRANSFER_ENCODING: return REASON_BAD_TE;
	case HPE_INVALID_CHUNK_SIZE: return REASON_BAD_CHUNK;
	default: return REASON_BAD_REQUEST;
	}
}

/* Feed DATA to the request parser. Returns bytes consumed, or -1 when the
 * client failed (error response under way or closed). Stops early at the end
 * of a request: later bytes are the next pipelined request. */
static ssize_t client_exec(struct client *cl, const char *data, size_t len)
{
	size_t off = 0;
	while (off < len) {
		if (cl->state == CL_IDLE) {
			cl->state = CL_HEAD;
			txn_get(cl);
			client_timer(cl, timeouts()->client_header_ms);
		}
		if (!cl->txn->rx.head_scanned) {
			int n = head_scan(&cl->txn->rx.hscan, data + off, len - off);
			if (n < 0) {
				client_fail(cl, REASON_BAD_REQUEST);
				return -1;
			}
			cl->txn->rx.head_scanned = n > 0;
		}
		cl->txn->rx.prev_exec_end = cl->txn->rx.exec_end;
		cl->txn->rx.exec_start = data + off;
		cl->txn->rx.exec_end = data + len;
		llhttp_errno_t e = llhttp_execute(&cl->txn->rx.parser, data + off, len - off);
		if (e == HPE_PAUSED_UPGRADE && !cl->txn->head_done &&
		    llhttp_get_error_pos(&cl->txn->rx.parser) == data + off) {
			/* llhttp pauses for an upgrade after the request that
			 * asked for it, so here, before the next one: that one was
			 * finished as a plain request (h2c refused, HTTP/1.0). */
			llhttp_resume_after_upgrade(&cl->txn->rx.parser);
			e = llhttp_execute(&cl->txn->rx.parser, data + off, len - off);
		}
		if (e == HPE_OK)
			return (ssize_t)len;
		if (e != HPE_PAUSED && e != HPE_PAUSED_UPGRADE) {
			enum reason r = cl->txn->rx.parse_error ? cl->txn->reason : map_llhttp_error(e);
			client_fail(cl, r);
			return -1;
		}
		/* Paused at the end of a request: the rest is pipelined. */
		off = (size_t)(llhttp_get_error_pos(&cl->txn->rx.parser) - data);
		return (ssize_t)off;
	}
	return (ssize_t)off;
}

/* After request bytes were produced: push them and apply backpressure. */
static void client_after_input(struct client *cl)
{
	struct txn *t = cl->txn;
	if (t == NULL)
		return;
	struct bconn *bc = t->bc;
	if (t->insp.reply_pending && t->req_done) {
		client_reply_pending(cl);
		return;
	}
	if (bc && bc->state == BC_BUSY) {
		bconn_flush(bc);
		if (!t->req_done)
			bconn_timeout(bc, t->be->cfg->response_timeout_ms);
	}
	size_t queued = bc && bc->state == BC_BUSY ? bconn_queued(bc) : t->tobe.len;
	/* A body held for inspection may grow to `inspect.body` first. */
	size_t high = t->insp.waiting ? OUT_HIGH_WATER + cl->li->cfg->inspect.body : OUT_HIGH_WATER;
	int held = queued > high || cl->in.len > PIPELINE_MAX;
	if (held)
		client_read_pause(cl, 1);
	/* The body timeout measures the client; while we hold it back for a
	 * slow backend it is not running (the backend's timer is). */
	if ((cl->state == CL_EXCHANGE || cl->state == CL_WAIT) && !t->queued)
		client_timer(cl, !t->req_done && !held ? timeouts()->client_body_ms : 0);
}

/* Parse what is buffered in cl->in (pipelined or held back). */
static void client_run_input(struct client *cl)
{
	if (cl->in.len == 0 || (cl->txn && cl->txn->req_done) || cl->state == CL_CLOSING ||
	    cl->state == CL_ERROR)
		return;
	ssize_t n = client_exec(cl, cl->in.data, cl->in.len);
	if (n < 0)
		return;
	buf_consume(&cl->in, (size_t)n);
	client_after_input(cl);
}


static void client_on_eof(struct client *cl)
{
	struct txn *t = cl->txn;
	cl->peer_eof = 1;
	uv_read_stop((uv_stream_t *)&cl->tcp);
	switch (cl->state) {
	case CL_TUNNEL:
		/* Pass the half-close on and keep relaying the backend's side
		 * until it closes too (or the tunnel idles out). */
		if (t->bc) {
			bconn_shutdown_write(t->bc);
			return;
		}
		client_close(cl);
		return;
	case CL_PROXY:
		if (cl->proxy_required || cl->in.len) {
			log_warn("%s closed: connection ended inside the PROXY header (%zu bytes)", cl->peer,
				 cl->in.len);
		}
		client_close(cl);
		return;
	case CL_WAIT:
		/* Still queued, nothing sent: a client that went away (clients
		 * that give up close, they rarely half-close and wait) must not
		 * cost the slow server a request nobody reads. */
		if (t->queued && t->be->cfg->queue_abort_on_close) {
			log_info("%s closed while queued for backend %s: request dropped", cl->peer,
				 t->be->cfg->name);
			t->reason = REASON_CLIENT_ABORT;
			client_close(cl);
			return;
		}
		__attribute__((fallthrough));
	case CL_EXCHANGE:
		if (t->req_done)  /* half-close after a full request: answer it */
			return;   /* (and any complete one buffered behind it) */
		client_close(cl);
		return;
	default:
		client_close(cl);
		return;
	}
}

static void client_on_plain(struct client *cl, const char *data, size_t len);
static void client_on_tls(struct client *cl, const char *data, size_t len);
static void client_on_proxy(struct client *cl, const char *data, size_t len);

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
		client_read_pause(cl, 0);
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
	client_read_pause(cl, 1);
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
	    cl->nrequests == 0 && cl->txn == NULL) {
		tls_conn_free(cl->tls);
		cl->tls = NULL;
		client_fail(cl, REASON_TLS_PLAIN_HTTP);
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
		if (cl->txn)
			cl->txn->reason = was_done ? REASON_TLS_ERROR : REASON_TLS_HANDSHAKE;
		/* Send the alert we have, then close. */
		outq_flush(&cl->tx->wire, (uv_stream_t *)&cl->tcp, client_write_cb, cl);
		client_close(cl);
		return;
	}
	client_flush(cl);
	if (cl->state == CL_CLOSING)
		return;
	if (!was_done && tls_conn_handshake_done(cl->tls)) {
		struct tls_facts tf;
		tls_conn_facts(cl->tls, &tf);
		stats_add(cl->li->st, tf.resumed ? STAT_TLS_RESUMED
				      : tf.key_alg && tf.key_alg[0] == 'E' ? STAT_TLS_FULL_ECDSA : STAT_TLS_FULL_RSA, 1);
		if (cl->state == CL_IDLE)
			client_timer(cl, timeouts()->client_keepalive_ms);
	}
	if (plain->len)
		client_on_plain(cl, plain->data, plain->len);
	if (st == TLS_CLOSED && cl->state != CL_CLOSING)
		client_on_eof(cl);
}

static void client_on_plain(struct client *cl, const char *data, size_t len)
{
	struct txn *t = cl->txn;   /* NULL until a request starts */
	ssize_t nread = (ssize_t)len;
	switch (cl->state) {
	case CL_ERROR:
		return;  /* lingering: discard */
	case CL_TUNNEL:
		if (t->bc) {
			buf_append(&t->bc->out.pending, data, (size_t)nread);
			bconn_flush(t->bc);
			if (bconn_queued(t->bc) > OUT_HIGH_WATER)
				client_read_pause(cl, 1);
			client_timer(cl, timeouts()->client_keepalive_ms);
		}
		return;
	default:
		break;
	}
	if (cl->in.len > 0 || (t && t->req_done)) {
		/* Earlier bytes wait, or a response is pending: keep order. */
		buf_append(&cl->in, data, (size_t)nread);
		if (t && t->req_done) {
			if (cl->in.len > PIPELINE_MAX)
				client_read_pause(cl, 1);
			return;
		}
		client_run_input(cl);
		return;
	}
	ssize_t n = client_exec(cl, data, (size_t)nread);
	if (n < 0)
		return;
	if ((size_t)n < (size_t)nread)
		buf_append(&cl->in, data + n, (size_t)nread - (size_t)n);
	client_after_input(cl);
}

static void client_timer_fired(struct deadline *d)
{
	struct client *cl = CONTAINER_OF(d, struct client, dl);
	switch (cl->state) {
	case CL_PROXY:
		log_info("%s closed: no %s within client_header", cl->peer,
			 cl->proxy_required ? "complete PROXY header" : "request bytes");
		client_close(cl);
		break;
	case CL_IDLE:
		if (cl->trim_pending) {
			client_trim(cl);
			client_timer(cl, timeouts()->client_keepalive_ms - IDLE_TRIM_MS);
			break;
		}
		if (cl->tls && !tls_conn_handshake_done(cl->tls))
			log_info("%s TLS handshake timeout", cl->peer);
		client_close(cl);  /* keepalive expired: nothing to answer */
		break;
	case CL_HEAD:
		client_fail(cl, REASON_HEADER_TIMEOUT);
		break;
	case CL_WAIT:
		if (cl->txn->queued) {
			client_fail(cl, REASON_QUEUE_TIMEOUT);
			break;
		}
		/* body stalled while connecting */
		__attribute__((fallthrough));
	case CL_EXCHANGE:
		client_fail(cl, cl->txn->req_done ? REASON_CLIENT_SEND_TIMEOUT : REASON_BODY_TIMEOUT);
		break;
	case CL_TUNNEL:
	case CL_ERROR:
		client_close(cl);
		break;
	case CL_CLOSING:
		break;
	}
}

/* ---- accept ---- */

static void format_peer(struct client *cl)
{
	char ip[NETADDR_IP_MAX];
	netaddr_ip_text(&cl->src, ip, sizeof(ip));
	/* IPv6 in brackets, or the port could not be told from the address. */
	snprintf(cl->peer, sizeof(cl->peer), cl->src.family == AF_INET6 ? "[%s]:%u" : "%s:%u",
		 cl->src.family ? ip : "?", netaddr_port(&cl->src));
}

static void client_read_addrs(struct client *cl)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	memset(&cl->src, 0, sizeof(cl->src));
	memset(&cl->dst, 0, sizeof(cl->dst));
	if (uv_tcp_getpeername(&cl->tcp, (struct sockaddr *)&ss, &len) == 0)
		netaddr_from_sockaddr(&cl->src, (struct sockaddr *)&ss);
	len = sizeof(ss);
	if (uv_tcp_getsockname(&cl->tcp, (struct sockaddr *)&ss, &len) == 0)
		netaddr_from_sockaddr(&cl->dst, (struct sockaddr *)&ss);
	format_peer(cl);
}

/* The client's address is final (socket peer, or a PROXY header's): what
 * it may assert in headers follows, and the HTTP (or TLS) phase begins. */
static void client_identity_known(struct client *cl)
{
	const struct cfg_listener *l = cl->li->cfg;
	cl->trusted_fwd = l->ntrusted_forwarders && cidr_list_match(l->trusted_forwarders, l->ntrusted_forwarders, &cl->src);
	cl->state = CL_IDLE;
	if (cl->tls)
		client_timer(cl, l->tls.handshake_timeout_ms);
	else
		client_timer(cl, timeouts()->client_keepalive_ms);
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
			client_close(cl);
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
			client_close(cl);
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

void client_accept(struct worker_listener *li)
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
	list_init(&cl->parked);
	list_add_tail(&W->clients, &cl->link);
	W->nclients++;
	stats_add(li->st, STAT_CONN_ACCEPTED, 1);
	stats_gauge_add(li->st, GAUGE_CLIENTS, 1);
	if (uv_accept((uv_stream_t *)&li->tcp, (uv_stream_t *)&cl->tcp) < 0) {
		cl->state = CL_IDLE;
		client_close(cl);
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
		client_close(cl);
		return;
	}
	uv_tcp_nodelay(&cl->tcp, 1);
	cl->serial = ++W->conn_serial;
	client_read_addrs(cl);
	if (li->tls) {
		cl->tls = tls_conn_new(li->tls);
		client_tls_get(cl);
	}
	if (li->cfg->nproxy_from) {
		cl->state = CL_PROXY;
		cl->proxy_required = (uint8_t)cidr_list_match(li->cfg->proxy_from, li->cfg->nproxy_from, &cl->src);
		client_timer(cl, timeouts()->client_header_ms);
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
void client_drain_all(void)
{
	struct list *pos = W->clients.next;
	while (pos != &W->clients) {
		struct client *cl = CONTAINER_OF(pos, struct client, link);
		pos = pos->next;
		/* A response whose head has gone out promising keep-alive keeps
		 * the promise: its client may send the next request the moment
		 * the body ends, and gets the answer with Connection: close. */
		if (!(cl->state == CL_EXCHANGE && cl->txn->resp_head_sent))
			cl->keepalive = 0;
		if (cl->state != CL_IDLE || cl->in.len)
			continue;
		if (cl->nrequests == 0)
			client_timer(cl, timeouts()->client_header_ms);
		else if (client_queued(cl) == 0)
			client_keepalive_wait(cl);
		/* else the last response is still going out: the write callback
		 * starts the wait once it is delivered. */
	}
}

/* ---- backend side ---- */

static void client_backend_ready(struct client *cl)
{
	struct txn *t = cl->txn;
	struct bconn *bc = t->bc;
	if (cl->state == CL_WAIT)
		client_timer(cl, 0);
	cl->state = CL_EXCHANGE;
	llhttp_init(&bc->parser, HTTP_RESPONSE, &resp_settings);
	bc->parser.data = bc;
	buf_append(&bc->out.pending, t->head.data, t->head.len);
	buf_append(&bc->out.pending, t->tobe.data, t->tobe.len);
	t->tobe.len = 0;
	t->t_sent = now_us();
	enum stats_counter kind = bc->nreq > 1 ? STAT_BCONN_REUSED : STAT_BCONN_NEW;
	stats_add(t->be->st, kind, 1);
	stats_add(bc->srv->st, kind, 1);
	bconn_flush(bc);
	if (bc->state != BC_BUSY)
		return;
	bconn_timeout(bc, t->be->cfg->response_timeout_ms);
	client_backend_writable(cl);
	if (!t->req_done)
		client_timer(cl, timeouts()->client_body_ms);
}

static void client_backend_writable(struct client *cl)
{
	if (cl->read_stopped && !cl->txn->req_done && cl->in.len <= PIPELINE_MAX) {
		client_read_pause(cl, 0);
		if (cl->state == CL_EXCHANGE)
			client_timer(cl, timeouts()->client_body_ms);
	}
	else if (cl->state == CL_TUNNEL && cl->read_stopped)
		client_read_pause(cl, 0);
}

/* A connect that failed sent nothing, so the request, whatever its
 * method, may go to another server (HAProxy's redispatch, nginx's
 * proxy_next_upstream error timeout): no more attempts than servers, and
 * REDISPATCH_MAX at most. A backend with one server answers at once: trying
 * the same address again would only add a connect timeout. */
#define REDISPATCH_MAX 3

static void client_backend_error(struct client *cl, enum reason r)
{
	struct txn *t = cl->txn;
	if ((r == REASON_BACKEND_REFUSED || r == REASON_CONNECT_TIMEOUT) && t->bc == NULL && t->srv &&
	    t->redispatches < REDISPATCH_MAX && t->redispatches + 1u < t->be->nservers &&
	    upstream_other_server_up(t->be, t->srv)) {
		t->redispatches++;
		t->avoid = t->srv;
		/* The request's own outcome is counted where it ends; the failed
		 * server's errors show what it cost. */
		stats_reason(t->srv->st, r);
		log_info("%s %s to server %s; trying another server", cl->peer, reason_text(r),
			 t->srv->cfg->name);
		t->srv = NULL;
		r = upstream_request(cl);
		if (r == REASON_OK) {
			if (t->queued)
				client_timer(cl, t->be->cfg->queue_timeout_ms);
			return;
		}
	}
	client_fail(cl, r);
}

/* The exchange is complete: log, give the connection back, go on. */
static void txn_finish(struct client *cl, int reusable)
{
	struct txn *t = cl->txn;
	if (t->bc)
		upstream_release(t->bc, reusable && t->req_done);
	txn_log(cl);
	if (!t->req_done)
		cl->keepalive = 0;  /* unread body: the stream is unusable */
	/* Draining, keepalive is still set only where a response head promised
	 * it (client_drain_all): the connection waits for one more request. */
	if (!cl->keepalive || (cl->peer_eof && cl->in.len == 0)) {
		cl->state = CL_ERROR;
		client_timer(cl, timeouts()->client_send_ms);
		client_flush(cl);
		if (!client_wire(cl)->writing && client_queued(cl) == 0)
			client_linger(cl);
		return;
	}
	cl->nrequests++;
	txn_put(cl);
	cl->state = CL_IDLE;
	client_flush(cl);
	if (client_queued(cl))
		client_timer(cl, timeouts()->client_send_ms);
	else
		client_keepalive_wait(cl);
	if (cl->in.len) {
		client_run_input(cl);
		if (cl->state == CL_CLOSING || cl->state == CL_ERROR)
			return;
	}
	/* The client half-closed: whatever it left unfinished never will be. */
	if (cl->peer_eof && (cl->state == CL_IDLE || cl->state == CL_HEAD)) {
		client_close(cl);
		return;
	}
	if (cl->read_stopped && cl->in.len <= PIPELINE_MAX && client_queued(cl) < OUT_HIGH_WATER)
		client_read_pause(cl, 0);
}

static int retry_possible(struct client *cl)
{
	struct txn *t = cl->txn;
	struct bconn *bc = t->bc;
	return bc && !bc->got_bytes && bc->nreq > 1 && t->idempotent && !t->retried && t->req_done &&
	       !t->resp_started;
}

static void txn_retry(struct client *cl)
{
	struct txn *t = cl->txn;
	upstream_abort(t->bc);
	t->retried = 1;
	t->srv = NULL;
	cl->state = CL_WAIT;
	log_info("%s retrying %s on a fresh connection after a stale pooled one", cl->peer,
		 llhttp_method_name((llhttp_method_t)t->method));
	enum reason r = upstream_request(cl);
	if (r != REASON_OK)
		client_fail(cl, r);
	else if (t->queued)
		client_timer(cl, t->be->cfg->queue_timeout_ms);
}

static void client_backend_eof(struct client *cl, enum reason r)
{
	struct txn *t = cl->txn;
	struct bconn *bc = t->bc;
	if (cl->state == CL_TUNNEL) {
		/* Backend ended the tunnel: deliver what is queued, then close. */
		if (bc)
			upstream_abort(bc);
		cl->state = CL_ERROR;
		client_flush(cl);
		if (!client_wire(cl)->writing && client_queued(cl) == 0)
			client_linger(cl);
		return;
	}
	if (bc && r == REASON_BACKEND_CLOSED && t->resp_started && !t->resp_done) {
		/* Close-delimited body ends at EOF. */
		llhttp_errno_t e = llhttp_finish(&bc->parser);
		if ((e == HPE_OK || e == HPE_PAUSED) && t->resp_done) {
			txn_finish(cl, 0);
			return;
		}
	}
	if ((r == REASON_BACKEND_RESET || r == REASON_BACKEND_CLOSED) && retry_possible(cl)) {
		txn_retry(cl);
		return;
	}
	if (t->resp_started)
		r = REASON_BACKEND_ABORT;
	client_fail(cl, r);
}

/* ---- response parsing ---- */

static struct client *resp_client(llhttp_t *p)
{
	return ((struct bconn *)p->data)->cl;
}

static int resp_fail(llhttp_t *p)
{
	resp_client(p)->txn->reason = REASON_BACKEND_BAD_RESPONSE;
	return -1;
}

static int on_resp_begin(llhttp_t *p)
{
	struct client *cl = resp_client(p);
	msg_reset(&cl->txn->resp, limits()->max_headers);
	return 0;
}

static int on_resp_status(llhttp_t *p, const char *at, size_t len)
{
	msg_on_url(&resp_client(p)->txn->resp, at, len);
	return 0;
}

static int on_resp_field(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = resp_client(p);
	if (msg_on_field(&cl->txn->resp, at, len) < 0 || cl->txn->resp.head_bytes > limits()->max_header_size)
		return resp_fail(p);
	return 0;
}

static int on_resp_value(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = resp_client(p);
	if (msg_on_value(&cl->txn->resp, at, len) < 0 || cl->txn->resp.head_bytes > limits()->max_header_size)
		return resp_fail(p);
	return 0;
}

static int on_resp_value_done(llhttp_t *p)
{
	return msg_finish_header(&resp_client(p)->txn->resp) ? 0 : resp_fail(p);
}

static void write_status_line(struct client *cl, int status)
{
	struct msg *m = &cl->txn->resp;
	buf_appendf(&cl->out.pending, "HTTP/1.1 %03d ", status);
	buf_append(&cl->out.pending, msg_str(m, m->url_off), m->url_len);
	buf_append(&cl->out.pending, "\r\n", 2);
}

/* The only transfer coding sluice decodes is one "chunked". A response
 * with another (gzip, chunked) would reach the client still coded with
 * nothing saying so; "chunked" twice is not a valid message. */
static int resp_te_acceptable(const struct msg *m)
{
	int n = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->kind != HDR_TRANSFER_ENCODING)
			continue;
		const char *q = msg_str(m, h->val_off), *end = q + h->val_len, *tok;
		size_t tl;
		if (h->val_len == 0)
			return 0;
		while (list_next(&q, end, &tok, &tl))
			if (!tok_eq(tok, tl, "chunked") || ++n > 1)
				return 0;
	}
	return 1;
}

static int on_resp_headers_done(llhttp_t *p)
{
	struct client *cl = resp_client(p);
	struct txn *t = cl->txn;
	struct msg *m = &t->resp;
	int status = llhttp_get_status_code(p);
	if (llhttp_get_http_major(p) != 1)
		return resp_fail(p);
	/* llhttp takes 1 to 3 digits: "2" would go out as "002", a status
	 * the backend never sent. */
	if (status < 100 || status > 599)
		return resp_fail(p);
	/* A control byte in the reason phrase (NUL) ends the status line early
	 * for some clients and not for others. */
	const char *reason = msg_str(m, m->url_off);
	for (uint32_t i = 0; i < m->url_len; i++)
		if (((unsigned char)reason[i] < 0x20 && reason[i] != '\t') || reason[i] == 0x7f)
			return resp_fail(p);
	if (!resp_te_acceptable(m))
		return resp_fail(p);
	if ((p->flags & F_CONTENT_LENGTH) && p->content_length > CONTENT_LENGTH_MAX)
		return resp_fail(p);
	msg_apply_connection(m);
	size_t before = cl->out.pending.len;
	if (status >= 100 && status < 200 && status != 101) {
		/* A 1xx has no body (RFC 9112 6.3); one that announces a body
		 * means the backend and we disagree on where the final response
		 * starts. */
		if ((p->flags & (F_CHUNKED | F_TRANSFER_ENCODING)) ||
		    ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0))
			return resp_fail(p);
		/* Nor a length, then (RFC 9110 8.6: never sent in a 1xx); a
		 * relayed "00" is one more spelling for the client to judge. */
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_CONTENT_LENGTH)
				m->hdrs[i].drop = 1;
		/* Interim responses are relayed to HTTP/1.1 clients only. */
		if (t->http_minor >= 1 && status != 100) {
			write_status_line(cl, status);
			msg_write_headers(m, &cl->out.pending);
			buf_append(&cl->out.pending, "\r\n", 2);
			t->bytes_out += cl->out.pending.len - before;
		}
		return 1;  /* no body, whatever the headers say */
	}
	if (status == 101) {
		if (!t->upgrade)
			return resp_fail(p);
		t->status = 101;
		t->resp_started = t->resp_head_sent = 1;
		t->t_first_byte = now_us();
		write_status_line(cl, status);
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_UPGRADE)
				m->hdrs[i].drop = 0;
		msg_write_headers(m, &cl->out.pending);
		buf_append_str(&cl->out.pending, "Connection: upgrade\r\n\r\n");
		t->bytes_out += cl->out.pending.len - before;
		return 2;
	}
	t->status = status;
	t->resp_started = 1;
	t->t_first_byte = now_us();
	int bodyless = t->is_head || status == 204 || status == 304;
	if (status == 204) {  /* it has no body, so no length to announce */
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_CONTENT_LENGTH)
				m->hdrs[i].drop = 1;
	}
	int chunked = (p->flags & F_CHUNKED) != 0;
	int has_len = (p->flags & F_CONTENT_LENGTH) != 0;
	if (has_len)
		canonical_length(m, p->content_length);
	if (t->upgrade)
		cl->keepalive = 0;  /* refused upgrade: the client may already send frames */
	if (!bodyless && !chunked && !has_len) {
		t->resp_close_delimited = 1;
		if (t->http_minor >= 1)
			t->resp_chunked_out = 1;
		else
			cl->keepalive = 0;
	} else if (!bodyless && chunked) {
		if (t->http_minor >= 1)
			t->resp_chunked_out = 1;
		else
			cl->keepalive = 0;
	}
	if (!t->req_done || W->draining)
		cl->keepalive = 0;
	if (t->insp.ran) {
		inspect_response(cl);
		if (t->insp.resp_del.len)
			inspect_apply_removals(&t->insp.resp_del, m);
	}
	write_status_line(cl, status);
	msg_write_headers(m, &cl->out.pending);
	buf_append(&cl->out.pending, t->insp.resp_hdrs.data, t->insp.resp_hdrs.len);
	if (t->resp_chunked_out)
		buf_append_str(&cl->out.pending, "Transfer-Encoding: chunked\r\n");
	if (!cl->keepalive)
		buf_append_str(&cl->out.pending, "Connection: close\r\n");
	else if (t->http_minor == 0)
		buf_append_str(&cl->out.pending, "Connection: keep-alive\r\n");
	buf_append(&cl->out.pending, "\r\n", 2);
	t->bytes_out += cl->out.pending.len - before;
	t->resp_head_sent = 1;
	/* 1 tells llhttp there is no body whatever the framing headers say
	 * (it would read a 204's or 304's Content-Length bytes as one). */
	return bodyless ? 1 : 0;
}

static int on_resp_body(llhttp_t *p, const char *at, size_t len)
{
	struct client *cl = resp_client(p);
	struct txn *t = cl->txn;
	t->resp_body_in += len;
	if (t->resp_chunked_out) {
		char sz[24];
		int n = snprintf(sz, sizeof(sz), "%zx\r\n", len);
		client_out(cl, sz, (size_t)n);
		client_out(cl, at, len);
		client_out(cl, "\r\n", 2);
	} else {
		client_out(cl, at, len);
	}
	return 0;
}

static int on_resp_done(llhttp_t *p)
{
	struct client *cl = resp_client(p);
	struct txn *t = cl->txn;
	if (!t->resp_started || t->status == 101)
		return 0;  /* interim (1xx) response, or the upgrade pause follows */
	if (t->resp_chunked_out)
		client_out(cl, "0\r\n\r\n", 5);
	t->resp_done = 1;
	return HPE_PAUSED;
}

/* A bodiless response that announced a body (204 with any framing header,
 * 304 chunked): the backend may believe it sent one, and bytes still on
 * their way would be read as the next request's response. */
static int resp_framing_suspect(const struct txn *t)
{
	const struct msg *m = &t->resp;
	if (t->status == 204)
		return msg_count(m, HDR_CONTENT_LENGTH) || msg_count(m, HDR_TRANSFER_ENCODING);
	if (t->status == 304)
		return msg_count(m, HDR_TRANSFER_ENCODING);
	return 0;
}

static void client_start_tunnel(struct client *cl, const char *rest, size_t len)
{
	struct txn *t = cl->txn;
	cl->state = CL_TUNNEL;
	t->resp_done = 1;
	txn_log(cl);
	client_out(cl, rest, len);
	client_flush(cl);
	if (cl->state == CL_CLOSING)
		return;
	if (cl->in.len) {
		buf_append(&t->bc->out.pending, cl->in.data, cl->in.len);
		cl->in.len = 0;
		bconn_flush(t->bc);
	}
	uv_timer_stop(&t->bc->timer);
	client_timer(cl, timeouts()->client_keepalive_ms);
	if (cl->peer_eof)
		bconn_shutdown_write(t->bc);
	else if (cl->read_stopped)
		client_read_pause(cl, 0);
}

static void client_backend_data(struct client *cl, const char *data, size_t len)
{
	struct txn *t = cl->txn;
	struct bconn *bc = t->bc;
	if (cl->state == CL_TUNNEL) {
		client_out(cl, data, len);
		client_flush(cl);
		if (client_queued(cl) > OUT_HIGH_WATER)
			bconn_read_pause(bc, 1);
		client_timer(cl, timeouts()->client_keepalive_ms);
		return;
	}
	bconn_timeout(bc, t->be->cfg->response_timeout_ms);
	/* Where this read's output starts: see the error path. */
	size_t pend0 = cl->out.pending.len;
	uint64_t out0 = t->bytes_out;
	uint8_t head0 = t->resp_head_sent;
	llhttp_errno_t e = llhttp_execute(&bc->parser, data, len);
	if (e == HPE_OK) {
		client_flush(cl);
		if (client_queued(cl) > OUT_HIGH_WATER) {
			bconn_read_pause(bc, 1);
			if (t->req_done)
				client_timer(cl, timeouts()->client_send_ms);
		}
		return;
	}
	if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
		size_t used = (size_t)(llhttp_get_error_pos(&bc->parser) - data);
		if (e == HPE_PAUSED_UPGRADE) {
			client_start_tunnel(cl, data + used, len - used);
			return;
		}
		/* Bytes after a complete response mean a confused backend: do
		 * not let them reach the next request on this connection. */
		int reusable = used == len && llhttp_should_keep_alive(&bc->parser) && !t->upgrade &&
			       !resp_framing_suspect(t);
		txn_finish(cl, reusable);
		return;
	}
	if (t->reason != REASON_BACKEND_BAD_RESPONSE)
		t->reason = REASON_BACKEND_BAD_RESPONSE;
	log_warn("%s backend %s/%s sent an invalid response: %s", cl->peer, t->be->cfg->name,
		 bc->srv->cfg->name, llhttp_get_error_reason(&bc->parser));
	if (!head0 && t->resp_head_sent) {
		/* The head was queued in this very read, so nothing of it has
		 * reached the client: take it back and answer 502, rather than
		 * close on a client that then sees no reply at all. */
		cl->out.pending.len = pend0;
		t->bytes_out = out0;
		t->resp_head_sent = 0;
	}
	client_fail(cl, t->resp_head_sent ? REASON_BACKEND_ABORT : REASON_BACKEND_BAD_RESPONSE);
}

static const struct upstream_events backend_events = {
	.ready = client_backend_ready,
	.error = client_backend_error,
	.data = client_backend_data,
	.eof = client_backend_eof,
	.writable = client_backend_writable,
};

void http1_settings_init(void)
{
	upstream_events_set(&backend_events);
	deadline_heap_init(&client_deadlines, &W->loop, client_timer_fired);
	llhttp_settings_init(&req_settings);
	req_settings.on_message_begin = on_req_begin;
	req_settings.on_url = on_req_url;
	req_settings.on_header_field = on_req_field;
	req_settings.on_header_value = on_req_value;
	req_settings.on_header_value_complete = on_req_value_done;
	req_settings.on_headers_complete = on_req_headers_done;
	req_settings.on_body = on_req_body;
	req_settings.on_chunk_header = on_req_chunk_header;
	req_settings.on_message_complete = on_req_done;

	llhttp_settings_init(&resp_settings);
	resp_settings.on_message_begin = on_resp_begin;
	resp_settings.on_status = on_resp_status;
	resp_settings.on_header_field = on_resp_field;
	resp_settings.on_header_value = on_resp_value;
	resp_settings.on_header_value_complete = on_resp_value_done;
	resp_settings.on_headers_complete = on_resp_headers_done;
	resp_settings.on_body = on_resp_body;
	resp_settings.on_message_complete = on_resp_done;
}
