/* The stream layer: one request/response exchange, whatever protocol it
 * came in (docs/architecture.md, "Layers").
 *
 * Owns: struct stream and its pool, the request's checks that are not about
 * its protocol's syntax, the inspection hook, the choice of backend, the
 * queue wait, the request bytes for the backend (the backend always speaks
 * HTTP/1.1), relaying the response, retries and redispatch, the access log
 * and the statistics.
 * May call: its codec through s->cl->codec (codec.h), upstream and its
 * response parser (upstream.h, upstream_h1.h), inspect, forward, stats, log.
 * Is called by codecs through the struct stream_events it registers
 * (codec_events_set) and by upstream through struct upstream_events
 * (upstream_events_set); never by name. Of the connection a stream came
 * on (s->cl) it reads the identity (listener, addresses, TLS, serial) and
 * whether it is closing, nothing else. */
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include "stream.h"
#include "persist.h"
#include "ratelimit.h"
#include "route.h"
#include "routestats.h"
#include "codec.h"
#include "forward.h"
#include "inspect.h"
#include "inspect_api.h"
#include "log.h"
#include "stats.h"
#include "tls.h"
#include "upstream.h"
#include "upstream_h1.h"
#include "worker.h"

/* Request bytes queued for the backend beyond which the client waits. */
#define BACKEND_HIGH_WATER (256 * 1024)
/* Response bytes queued for the client beyond which the backend waits. */
#define CLIENT_HIGH_WATER  (256 * 1024)

static const struct cfg_limits *limits(void) { return &W->cfg->limits; }
static const struct cfg_timeouts *timeouts(void) { return &W->cfg->timeouts; }
static const struct codec_ops *codec(const struct stream *s) { return s->cl->codec; }

static void stream_fail(struct stream *s, enum reason r);
static void stream_finish(struct stream *s, int reusable);
static enum reason stream_admit(struct stream *s, int waited);
static enum reason stream_limited(struct stream *s, enum reason r);
static enum reason stream_body_held(struct stream *s, int complete);
static struct buf *req_sink(struct stream *s);

/* ---- statistics and the access log ---- */

static void stream_count(struct stats_block *st, const struct stream *t, enum stats_counter cls, uint64_t total)
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
static void stream_stats(struct stream *t, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct client *cl = t->cl;
	enum stats_counter cls = STAT_RESP_NONE;
	if (t->resp_head_sent && t->status >= 100 && t->status < 600)
		cls = (enum stats_counter)(STAT_RESP_1XX + t->status / 100 - 1);
	stream_count(cl->li->st, t, cls, total);
	if (t->http_major == 2)
		stats_add(cl->li->st, STAT_H2_REQUESTS, 1);
	if (t->route) {
		routestats_count(W->slot, t->route->stats_slot, cls == STAT_RESP_NONE ? 0 : t->status / 100,
				 t->bytes_out);
		if (t->reason == REASON_RATE_LIMITED || t->reason == REASON_RATE_LIMIT_STORE)
			routestats_add(W->slot, t->route->stats_slot, RS_RATE_LIMITED);
	}
	if (t->be == NULL || t->t_queue == 0)
		return;  /* never reached the backend stage */
	stream_count(t->be->st, t, cls, total);
	stats_observe_us(t->be->st, HIST_QUEUE, queue);
	if (t->persist != PERSIST_NONE)
		stats_add(t->be->st, (enum stats_counter)(STAT_PERSIST_MISS + t->persist - PERSIST_MISS), 1);
	if (t->srv == NULL)
		return;
	stream_count(t->srv->st, t, cls, total);
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

static const char *stream_method(const struct stream *t)
{
	return t->method == STREAM_METHOD_UNKNOWN ? "-" : llhttp_method_name((llhttp_method_t)t->method);
}

/* The request's protocol as the client spoke it; NULL before an HTTP/1
 * request line was parsed. */
static const char *stream_proto(const struct stream *t)
{
	if (t->http_major == 2)
		return "HTTP/2.0";
	if (!t->head_done)
		return NULL;
	return t->http_minor ? "HTTP/1.1" : "HTTP/1.0";
}

/* One JSON object per line: the fields of the text format, typed. */
static void stream_log_json(struct stream *t, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct client *cl = t->cl;
	struct buf *b = log_access_begin_raw();
	char ip[NETADDR_IP_MAX];
	buf_append_str(b, "{\"ts\":\"");
	log_timestamp(b);
	buf_append_str(b, "\",\"client\":");
	netaddr_ip_text(&cl->src, ip, sizeof(ip));
	buf_append_json(b, ip, strlen(ip));
	buf_appendf(b, ",\"client_port\":%u,\"method\":", netaddr_port(&cl->src));
	if (t->req.url_len || t->head_done) {
		const char *m = stream_method(t);
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
	if (t->route) {
		buf_append_str(b, ",\"route\":");
		buf_append_json(b, t->route->name, strlen(t->route->name));
	}
	if (t->persist != PERSIST_NONE)
		buf_appendf(b, ",\"persistence\":\"%s\"", persist_result_text((enum persist_result)t->persist));
	buf_appendf(b, ",\"reason\":\"%s\",\"proto\":", reason_name(t->reason));
	const char *proto = stream_proto(t);
	if (proto)
		buf_appendf(b, "\"%s\"", proto);
	else
		buf_append_str(b, "null");
	if (cl->tls)
		tls_conn_describe_json(cl->tls, b);
	buf_append_str(b, "}");
	log_access_commit();
}

static void stream_log_text(struct stream *t, uint64_t total, uint64_t queue, uint64_t conn, uint64_t be)
{
	struct client *cl = t->cl;
	struct buf *b = log_access_begin();
	const char *method = t->req.url_len || t->head_done ? stream_method(t) : "-";
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
	if (t->route)
		buf_appendf(b, " route=%s", t->route->name);
	if (t->persist != PERSIST_NONE)
		buf_appendf(b, " persistence=%s", persist_result_text((enum persist_result)t->persist));
	buf_appendf(b, " reason=%s proto=%s", reason_name(t->reason), stream_proto(t) ? stream_proto(t) : "-");
	if (cl->tls)
		tls_conn_describe(cl->tls, b);
	log_access_commit();
}

static void stream_log(struct stream *t)
{
	uint64_t now = now_us();
	uint64_t total = t->t_start ? now - t->t_start : 0;
	uint64_t queue = t->t_connect_start > t->t_queue && t->t_queue ? t->t_connect_start - t->t_queue : 0;
	uint64_t conn = t->t_connected > t->t_connect_start && t->t_connect_start ? t->t_connected - t->t_connect_start : 0;
	uint64_t be = t->t_first_byte > t->t_sent && t->t_sent ? t->t_first_byte - t->t_sent : 0;
	stream_stats(t, total, queue, conn, be);
	if (log_access_enabled()) {
		if (W->cfg->access_log_format == CFG_LOG_JSON)
			stream_log_json(t, total, queue, conn, be);
		else
			stream_log_text(t, total, queue, conn, be);
	}
	if (t->insp.ran)
		inspect_finish(t);
}

/* ---- the stream pool ---- */

/* Free streams of this worker, buffers warm (each process has its own). */
static struct list stream_free = { &stream_free, &stream_free };
static unsigned stream_nfree;
#define STREAM_POOL_KEEP 256           /* free streams kept warm; more go back to the allocator */
#define STREAM_BUF_KEEP  (4 * 1024)    /* capacity a pooled stream's buffer keeps */

static void stream_free_bufs(struct stream *s)
{
	msg_free(&s->req);
	msg_free(&s->resp);
	buf_free(&s->head);
	buf_free(&s->tobe);
	inspect_txn_free(&s->insp);
}

/* A request starts on CL: a pooled stream (its buffers keep their
 * capacity), emptied. */
static struct stream *stream_open(struct client *cl, void *codec_ctx)
{
	struct stream *s;
	if (!list_empty(&stream_free)) {
		s = CONTAINER_OF(stream_free.next, struct stream, qlink);
		list_del(&s->qlink);
		stream_nfree--;
	} else {
		s = calloc(1, sizeof(*s));
		AN(s);
	}
	struct msg req = s->req, resp = s->resp;
	struct buf head = s->head, tobe = s->tobe;
	struct txn_insp insp = s->insp;
	inspect_txn_reset(&insp);
	msg_reset(&req, limits()->max_headers);
	msg_reset(&resp, limits()->max_headers);
	head.len = tobe.len = 0;
	memset(s, 0, sizeof(*s));
	s->req = req;
	s->resp = resp;
	s->head = head;
	s->tobe = tobe;
	s->insp = insp;
	list_init(&s->qlink);
	s->cl = cl;
	s->codec_ctx = codec_ctx;
	s->state = ST_HEAD;
	return s;
}

/* The stream is over (detached from upstream, forgotten by its codec):
 * back to the pool. Big buffers a request grew (a long head, a held body)
 * are trimmed so the pool stays small. */
static void stream_release(struct stream *s)
{
	AZ(s->bc);
	AZ(s->queued);
	ratelimit_cancel(s);
	s->cl = NULL;
	s->codec_ctx = NULL;
	if (stream_nfree >= STREAM_POOL_KEEP) {
		stream_free_bufs(s);
		free(s);
		return;
	}
	s->req.raw.len = s->resp.raw.len = s->head.len = s->tobe.len = 0;
	buf_trim(&s->req.raw, STREAM_BUF_KEEP);
	buf_trim(&s->resp.raw, STREAM_BUF_KEEP);
	buf_trim(&s->head, STREAM_BUF_KEEP);
	buf_trim(&s->tobe, STREAM_BUF_KEEP);
	inspect_txn_trim(&s->insp, STREAM_BUF_KEEP);
	list_add_head(&stream_free, &s->qlink);
	stream_nfree++;
}

/* ---- ending a stream ---- */

/* The request fails with R: sluice answers it (the connection then ends),
 * or, once a response has begun or none can be sent, the stream is aborted. */
static void stream_fail(struct stream *s, enum reason r)
{
	struct client *cl = s->cl;
	ratelimit_cancel(s);
	if (cl->state == CL_CLOSING)
		return;
	s->reason = r;
	if (s->bc)
		upstream_abort(s->bc);
	upstream_cancel(s);
	int status = reason_status(r);
	if (r == REASON_INSPECT_DENIED || r == REASON_INSPECT_ERROR || r == REASON_ROUTE_REDIRECT ||
	    r == REASON_ROUTE_RESPOND || r == REASON_MONITOR)
		status = s->insp.status;  /* monitor: 200 or 503 by readiness */
	if (status == 0 || s->resp_head_sent || s->resp_done || s->state == ST_TUNNEL) {
		if (s->status == 0)
			s->status = status ? status : 499;
		stream_log(s);
		s->resp_done = 1;
		codec(s)->abort(s);
		return;
	}
	s->status = status;
	if (r == REASON_INSPECT_DENIED || r == REASON_ROUTE_REDIRECT || r == REASON_ROUTE_RESPOND ||
	    r == REASON_RATE_LIMITED || r == REASON_RATE_LIMIT_STORE || r == REASON_MONITOR)
		;  /* the hook's, a route's, a limit's or readiness's decision: counted and in the access
		    * log, not an error (a failing limit store logs for itself, rate-limited) */
	else if (status >= 500)
		log_warn("%s %s: %s", cl->peer, reason_name(r), reason_text(r));
	else
		log_info("%s %s: %s", cl->peer, reason_name(r), reason_text(r));
	codec(s)->send_local(s, r, 1);
	s->resp_head_sent = 1;
	s->resp_done = 1;
	stream_log(s);
	codec(s)->done(s, 1);
}

/* The exchange is complete: log, give the connection back, and let the
 * codec go on (S may be back in the pool when this returns). */
static void stream_finish(struct stream *s, int reusable)
{
	if (s->bc)
		upstream_release(s->bc, reusable && s->req_done);
	stream_log(s);
	/* An unread body makes the connection unusable. */
	codec(s)->done(s, !s->req_done);
}

/* The hook answered a request that has been read in full: reply, and the
 * connection goes on to its next request. */
static void stream_reply_pending(struct stream *s)
{
	s->insp.reply_pending = 0;
	s->status = s->insp.status;
	codec(s)->send_local(s, s->reason, 0);
	s->resp_head_sent = 1;
	s->resp_done = 1;
	stream_finish(s, 0);
}

/* The connection closes under the stream. A request that never got its
 * answer still gets its log line. */
static void stream_abort(struct stream *s)
{
	ratelimit_cancel(s);
	if (s->bc) {
		if (s->bc->state == BC_CONNECTING)
			upstream_cancel(s);
		else
			upstream_abort(s->bc);
	}
	upstream_cancel(s);
	if ((s->req.url_len || s->t_start) && !s->resp_done) {
		if (s->reason == REASON_OK)
			s->reason = REASON_CLIENT_ABORT;
		if (s->status == 0)
			s->status = 499;
		stream_log(s);
	}
}

/* ---- the request ---- */

static int has_body(const struct stream *s)
{
	return s->req_chunked || s->req_clen > 0;
}

/* What the codec left to the stream: expectations, the body's size, and
 * what the method says about retrying. */
/* The request body limit: the route's, else limits.max_body_size (0 = none). */
static uint64_t body_max(const struct stream *s)
{
	return s->route && s->route->max_body_size != UINT64_MAX ? s->route->max_body_size
								 : limits()->max_body_size;
}

static enum reason stream_check(struct stream *s)
{
	struct msg *m = &s->req;
	const struct hdr *ex = msg_find(m, HDR_EXPECT);
	if (ex) {
		if (msg_count(m, HDR_EXPECT) > 1 || !tok_eq(msg_str(m, ex->val_off), ex->val_len, "100-continue"))
			return REASON_EXPECT_FAILED;
		s->expect_continue = s->http_minor >= 1;
	}
	if (body_max(s) && s->req_clen > body_max(s))
		return REASON_BODY_TOO_LARGE;
	s->is_head = s->method == HTTP_HEAD;
	s->idempotent = (s->method == HTTP_GET || s->method == HTTP_HEAD || s->method == HTTP_OPTIONS) &&
			!s->req_chunked && s->req_clen == 0;
	return REASON_OK;
}

static void stream_continue(struct stream *s)
{
	if (s->expect_continue && !s->continue_sent && has_body(s)) {
		s->continue_sent = 1;
		codec(s)->send_continue(s);
	}
}

/* Build the head the backend will receive: the client's headers minus
 * hop-by-hop and spoofed identity ones and those the hook removed, the
 * hook's own, the framing sluice re-emits, then sluice's identity headers
 * (last, so nothing before can cancel them; docs/client-identity.md). */
static void stream_build_head(struct stream *s)
{
	struct client *cl = s->cl;
	struct msg *m = &s->req;
	const struct cfg_forward *fwd = &s->be->cfg->forward;
	forward_filter(cl, m, fwd);
	if (s->insp.req_del.len)
		inspect_apply_removals(&s->insp.req_del, m);
	struct buf *h = &s->head;
	h->len = 0;
	buf_append_str(h, llhttp_method_name((llhttp_method_t)s->method));
	buf_append(h, " ", 1);
	buf_append(h, msg_str(m, m->url_off), m->url_len);
	buf_append(h, " HTTP/1.1\r\n", 11);
	msg_write_headers(m, h);
	buf_append(h, s->insp.req_hdrs.data, s->insp.req_hdrs.len);
	if (msg_count(m, HDR_HOST) == 0) {
		/* HTTP/1.0 without Host: HTTP/1.1 requires one; use the address
		 * the client connected to, the authority it implicitly used (not
		 * the listener's, which may be a wildcard). */
		char ip[NETADDR_IP_MAX];
		netaddr_ip_text(&cl->dst, ip, sizeof(ip));
		buf_appendf(h, cl->dst.family == AF_INET6 ? "Host: [%s]:%u\r\n" : "Host: %s:%u\r\n", ip,
			    netaddr_port(&cl->dst));
	}
	if (s->req_chunked)
		buf_append_str(h, "Transfer-Encoding: chunked\r\n");
	if (s->upgrade)
		buf_append_str(h, "Connection: upgrade\r\n");
	forward_write(cl, m, fwd, h);
	buf_append(h, "\r\n", 2);
	stream_continue(s);
}

/* Send the request on its way: head, then a backend connection. */
static enum reason stream_forward(struct stream *s)
{
	s->resp_timeout_ms = s->route && s->route->response_timeout_ms ? s->route->response_timeout_ms
								      : s->be->cfg->response_timeout_ms;
	stream_build_head(s);
	if (s->cl->state == CL_CLOSING)  /* the 100 Continue could not be written */
		return REASON_CLIENT_WRITE_ERROR;
	s->state = ST_WAIT;
	codec(s)->timer(s, 0);
	persist_request(s);
	enum reason r = upstream_request(s);
	if (r == REASON_OK && s->queued)
		codec(s)->timer(s, s->be->cfg->queue_timeout_ms);
	return r;
}

/* Answer locally with R once the request is read. A body still to come
 * is read and dropped first when DRAIN (the connection then goes on), but
 * never invited with a 100 Continue: then, or without DRAIN, the answer
 * goes now and the connection closes. */
static enum reason stream_answer(struct stream *s, enum reason r, int drain)
{
	s->reason = r;
	if (s->req_done || !has_body(s) || (drain && !s->expect_continue)) {
		s->insp.reply_pending = 1;
		s->state = ST_WAIT;
		codec(s)->timer(s, 0);
		return REASON_OK;
	}
	return r;
}

/* Run the hook, then forward or (REASON_INSPECT_*) answer locally. A
 * local answer to a request already read in full keeps the connection:
 * it is sent once the request has been read (reply_pending); otherwise the
 * unread body makes the connection unusable and stream_fail ends it. */
static enum reason stream_inspect(struct stream *s)
{
	enum reason r = inspect_request(s);
	if (r == REASON_OK)
		return stream_forward(s);
	return stream_answer(s, r, 0);
}

/* The worker's scratch for routing (one stream at a time is routed). */
static struct buf route_target, route_key;

/* Where a target's path starts: after an absolute-form's authority. */
static size_t target_path_start(const char *t, size_t n)
{
	if (n == 0 || t[0] == '/' || t[0] == '*')
		return 0;
	const char *sep = memmem(t, n, "://", 3);
	size_t i = sep ? (size_t)(sep - t) + 3 : 0;
	while (i < n && t[i] != '/' && t[i] != '?')
		i++;
	return i;
}

/* Normalise the target (what is forwarded is what was matched), pick the
 * listener's first matching route and apply what it says before the hook
 * runs: its backend, its header edits, or the local answer it makes. */
static enum reason stream_route(struct stream *s)
{
	struct msg *m = &s->req;
	int rc = route_normalize(msg_str(m, m->url_off), m->url_len, &route_target, &route_key);
	if (rc < 0)
		return REASON_PATH_REFUSED;
	if (rc == 0 && (route_target.len != m->url_len ||
			memcmp(route_target.data, msg_str(m, m->url_off), m->url_len) != 0)) {
		m->url_off = (uint32_t)m->raw.len;
		buf_append(&m->raw, route_target.data, route_target.len);
		m->url_len = (uint32_t)route_target.len;
	}
	const char *host = "";
	size_t hl = 0;
	const struct hdr *h = msg_find(m, HDR_HOST);
	if (h)
		route_host_name(msg_str(m, h->val_off), h->val_len, &host, &hl);
	struct route_req q = { s->method, host, hl, route_key.data, route_key.len, m };
	const struct cfg_route *rt = route_match(s->cl->li->routes, &q);
	s->route = rt;
	if (rt == NULL)
		return REASON_OK;
	if (rt->backend)
		s->be = &W->backends[rt->backend - W->cfg->backends];
	struct txn_insp *in = &s->insp;
	buf_append(&in->req_del, rt->req_del, rt->req_del_len);
	buf_append(&in->req_hdrs, rt->req_add, rt->req_add_len);
	buf_append(&in->resp_del, rt->resp_del, rt->resp_del_len);
	buf_append(&in->resp_hdrs, rt->resp_add, rt->resp_add_len);
	if (rt->action == CFG_ROUTE_REDIRECT) {
		size_t ps = target_path_start(msg_str(m, m->url_off), m->url_len);
		char ip[NETADDR_IP_MAX + 2];
		if (hl == 0) {  /* HTTP/1.0 without Host: the address it connected to */
			int v6 = s->cl->dst.family == AF_INET6;
			netaddr_ip_text(&s->cl->dst, ip + v6, NETADDR_IP_MAX);
			if (v6) {
				ip[0] = '[';
				strcat(ip, "]");
			}
			host = ip;
			hl = strlen(ip);
		}
		in->local.len = 0;
		route_location(rt, s->cl->tls != NULL, host, hl, msg_str(m, m->url_off) + ps, m->url_len - ps,
			       &in->local);
	}
	in->status = (uint16_t)rt->status;
	return REASON_OK;
}

/* The listener's monitor_uri (HAProxy's monitor-uri): a balancer's health
 * check on the traffic port. The path of the target as received, query
 * left out, must be exactly the configured one. */
static int stream_is_monitor(const struct stream *s)
{
	const char *mu = s->cl->li->cfg->monitor_uri;
	if (mu[0] == '\0')
		return 0;
	const struct msg *m = &s->req;
	const char *t = msg_str(m, m->url_off);
	size_t ps = target_path_start(t, m->url_len), pl = 0;
	while (ps + pl < m->url_len && t[ps + pl] != '?')
		pl++;
	return pl == strlen(mu) && memcmp(t + ps, mu, pl) == 0;
}

/* Answered here, 200 or 503 by readiness (worker_ready), before routes and
 * the hook: never proxied, never inspected, logged with reason monitor. */
static enum reason stream_monitor(struct stream *s)
{
	struct txn_insp *in = &s->insp;
	int ready = worker_ready(s->cl->li);
	in->status = ready ? 200 : 503;
	in->local.len = 0;
	buf_append_str(&in->local, ready ? "ready\n" : "draining\n");
	buf_append_str(&in->resp_hdrs, "Cache-Control: no-store\r\n");
	s->is_head = s->method == HTTP_HEAD;
	/* stream_check does not run for it: a client waiting for 100 Continue
	 * before its body would wait for nothing, so it is answered at once
	 * (the connection then closes; stream_answer). */
	s->expect_continue = msg_find(&s->req, HDR_EXPECT) != NULL && s->http_minor >= 1;
	return stream_answer(s, REASON_MONITOR, 1);
}

/* The head is complete (called from the codec's parser). */
static enum reason stream_head(struct stream *s)
{
	struct client *cl = s->cl;
	s->be = cl->li->be;
	enum reason r;
	if (stream_is_monitor(s))
		return stream_monitor(s);
	if (cl->li->routes && (r = stream_route(s)) != REASON_OK)
		return r;
	r = stream_check(s);
	if (r != REASON_OK)
		return r;
	if (s->route && s->route->action != CFG_ROUTE_BACKEND)
		return stream_answer(s, s->route->action == CFG_ROUTE_REDIRECT ? REASON_ROUTE_REDIRECT
										 : REASON_ROUTE_RESPOND, 1);
	inspect_select(s);
	const struct cfg_rate_limit *rl = ratelimit_select(s);
	if (rl == NULL)
		return stream_admit(s, 0);
	/* Before the hook: a request over the limit costs no inspection. */
	switch (ratelimit_check(s, rl)) {
	case RL_ALLOW:
		break;
	case RL_DENY:
		return stream_limited(s, REASON_RATE_LIMITED);
	case RL_STORE_DENY:
		return stream_limited(s, REASON_RATE_LIMIT_STORE);
	case RL_PENDING:
		/* Redis decides (stream_limit_done). No 100 Continue meanwhile;
		 * a body the hook will hold collects de-chunked, as it would. */
		s->insp.waiting = inspect_active(s) && s->ic->body && has_body(s);
		s->state = ST_LIMIT;
		/* The verdict comes within redis.timeout; the body timeout
		 * is a backstop for the client meanwhile (stream_pushed). */
		codec(s)->timer(s, timeouts()->client_body_ms);
		return REASON_OK;
	}
	return stream_admit(s, 0);
}

/* Past the rate limit: the hook, then the backend. WAITED: the verdict
 * came later (ST_LIMIT), and the body read meanwhile is in tobe, held
 * de-chunked for the hook if insp.waiting, else framed for the backend. */
static enum reason stream_admit(struct stream *s, int waited)
{
	struct client *cl = s->cl;
	if (!inspect_active(s) && !s->insp.waiting)
		return stream_forward(s);
	const struct cfg_inspect *ic = s->ic;
	if (ic->body && has_body(s) && (!waited || s->insp.waiting)) {
		if (ic->body_reject && s->req_clen > ic->body)
			return REASON_INSPECT_BODY_TOO_LARGE;
		/* Hold the request: the body collects, de-chunked, in tobe
		 * until it is complete or `body` bytes long. */
		s->insp.waiting = 1;
		s->state = ST_WAIT;
		codec(s)->timer(s, 0);
		stream_continue(s);
		if (cl->state == CL_CLOSING)
			return REASON_CLIENT_WRITE_ERROR;
		if (!waited)
			return REASON_OK;
		if (s->req_done) {
			/* While the verdict was awaited the body collected past
			 * `body` (stream_body only collects in ST_LIMIT): only a
			 * body that fits is complete for the hook. */
			enum reason r = stream_body_held(s, s->tobe.len <= ic->body);
			if (r == REASON_OK && s->req_chunked && !s->insp.reply_pending)
				buf_append(req_sink(s), "0\r\n\r\n", 5);
			return r;
		}
		return s->tobe.len > ic->body ? stream_body_held(s, 0) : REASON_OK;
	}
	return stream_inspect(s);
}

/* Over the limit (429), or its store failed with on_store_error deny (503):
 * answered here with Retry-After, never forwarded nor inspected. */
static enum reason stream_limited(struct stream *s, enum reason r)
{
	s->insp.waiting = 0;
	s->insp.status = (uint16_t)reason_status(r);
	buf_appendf(&s->insp.resp_hdrs, "Retry-After: %u\r\n", r == REASON_RATE_LIMITED ? s->rl_retry_s : 1);
	return stream_answer(s, r, 1);
}

/* Redis's verdict on a stream in ST_LIMIT (ratelimit_cancel saw to it that
 * the stream is still there and waiting). */
static void stream_limit_done(struct stream *s, enum rl_verdict v)
{
	if (s->state != ST_LIMIT || s->cl->state == CL_CLOSING)
		return;
	enum reason r;
	if (v == RL_ALLOW) {
		s->state = ST_WAIT;
		r = stream_admit(s, 1);
	} else {
		r = stream_limited(s, v == RL_DENY ? REASON_RATE_LIMITED : REASON_RATE_LIMIT_STORE);
	}
	if (r != REASON_OK) {
		stream_fail(s, r);
		return;
	}
	if (s->insp.reply_pending && s->req_done) {
		stream_reply_pending(s);
		return;
	}
	/* A body still to come (held, to be dropped after a 429/503, or on its
	 * way to a backend being connected) is the client's to send: the body
	 * timeout runs, re-armed by the codec as bytes arrive. Without it a
	 * client that stops mid-body would hold the connection forever. */
	if (!s->req_done && !s->queued)
		codec(s)->timer(s, timeouts()->client_body_ms);
	if (s->bc && s->bc->state == BC_BUSY)
		bconn_flush(s->bc);
	codec(s)->resume(s);  /* reading may have paused while the verdict was awaited */
}

/* The held body is complete, or has reached `body` bytes. Frame it for the
 * backend and go on as for a head. */
static enum reason stream_body_held(struct stream *s, int complete)
{
	const struct cfg_inspect *ic = s->ic;
	s->insp.waiting = 0;
	if (!complete && ic->body_reject)
		return REASON_INSPECT_BODY_TOO_LARGE;
	s->insp.body_truncated = !complete;
	enum reason r = inspect_request(s);
	if (r != REASON_OK) {
		s->reason = r;
		if (complete) {
			s->insp.reply_pending = 1;
			return REASON_OK;
		}
		return r;
	}
	if (s->req_chunked && s->tobe.len) {
		char sz[24];
		int n = snprintf(sz, sizeof(sz), "%zx\r\n", s->tobe.len);
		buf_reserve(&s->tobe, (size_t)n + 2);
		memmove(s->tobe.data + n, s->tobe.data, s->tobe.len);
		memcpy(s->tobe.data, sz, (size_t)n);
		s->tobe.len += (size_t)n;
		buf_append(&s->tobe, "\r\n", 2);
	}
	return stream_forward(s);
}

/* Where request bytes for the backend go right now. */
static struct buf *req_sink(struct stream *s)
{
	struct bconn *bc = s->bc;
	if (bc && bc->state == BC_BUSY)
		return &bc->out.pending;
	return &s->tobe;
}

static enum reason stream_body(struct stream *s, const char *at, size_t len)
{
	s->req_body += len;
	if (body_max(s) && s->req_body > body_max(s))
		return REASON_BODY_TOO_LARGE;
	if (s->insp.reply_pending)
		return REASON_OK;  /* answered locally: the rest of the body is read and dropped */
	if (s->insp.waiting) {
		buf_append(&s->tobe, at, len);
		/* Exactly `body` bytes may be the whole body: stream_end says.
		 * Awaiting the rate limit's verdict, it only collects. */
		if (s->tobe.len <= s->ic->body || s->state == ST_LIMIT)
			return REASON_OK;
		return stream_body_held(s, 0);
	}
	/* The backend hears HTTP/1.1: a body of unknown length goes chunked. */
	struct buf *out = req_sink(s);
	if (s->req_chunked) {
		buf_append_hex(out, len);
		buf_append(out, "\r\n", 2);
	}
	buf_append(out, at, len);
	if (s->req_chunked)
		buf_append(out, "\r\n", 2);
	return REASON_OK;
}

/* A chunk that would take the body past max_body_size is refused from its
 * announcement, not after its bytes have been streamed (and waited for). */
static enum reason stream_chunk(struct stream *s, uint64_t len)
{
	uint64_t max = body_max(s);
	if (max && (len > max || s->req_body + len > max))
		return REASON_BODY_TOO_LARGE;
	return REASON_OK;
}

static enum reason stream_end(struct stream *s)
{
	s->req_done = 1;
	if (s->state == ST_LIMIT)
		codec(s)->timer(s, 0);  /* the client is done: only Redis is awaited (redis.timeout) */
	if (s->insp.waiting && s->state == ST_LIMIT)
		return REASON_OK;  /* judged with the verdict (stream_admit) */
	if (s->insp.waiting) {
		enum reason r = stream_body_held(s, 1);
		if (r != REASON_OK)
			return r;
	}
	if (s->req_chunked && !s->insp.reply_pending)
		buf_append(req_sink(s), "0\r\n\r\n", 5);
	return REASON_OK;
}

/* Request bytes were produced: push them to the backend. -1: the stream
 * ended (a local answer went out); 1: the client must wait. */
static int stream_pushed(struct stream *s)
{
	struct bconn *bc = s->bc;
	if (s->insp.reply_pending && s->req_done) {
		stream_reply_pending(s);
		return -1;
	}
	if (bc && bc->state == BC_BUSY) {
		bconn_flush(bc);
		if (!s->req_done)
			bconn_timeout(bc, s->resp_timeout_ms);
	}
	size_t queued = bc && bc->state == BC_BUSY ? bconn_queued(bc) : s->tobe.len;
	/* A body held for inspection may grow to `inspect.body` first. */
	size_t high = s->insp.waiting ? BACKEND_HIGH_WATER + s->ic->body : BACKEND_HIGH_WATER;
	int full = queued > high;
	/* Awaiting a verdict the codec leaves the timer alone: the body
	 * timeout measures the client, not while sluice holds it back. */
	if (s->state == ST_LIMIT)
		codec(s)->timer(s, !s->req_done && !full ? timeouts()->client_body_ms : 0);
	return full;
}

static int stream_tunnel_in(struct stream *s, const char *data, size_t len)
{
	if (s->bc == NULL)
		return -1;
	buf_append(&s->bc->out.pending, data, len);
	bconn_flush(s->bc);
	return bconn_queued(s->bc) > BACKEND_HIGH_WATER;
}

static int stream_peer_eof(struct stream *s)
{
	switch (s->state) {
	case ST_TUNNEL:
		/* Pass the half-close on and keep relaying the backend's side
		 * until it closes too (or the tunnel idles out). */
		if (s->bc) {
			bconn_shutdown_write(s->bc);
			return 1;
		}
		return 0;
	case ST_LIMIT:
		/* Awaiting its rate limit verdict: as for a queued request, the
		 * verdict (ratelimit_cancel) and the backend are spared. */
		if (s->be->cfg->queue_abort_on_close) {
			s->reason = REASON_CLIENT_ABORT;
			return 0;
		}
		return s->req_done;
	case ST_WAIT:
		/* Still queued, nothing sent: a client that went away (clients
		 * that give up close, they rarely half-close and wait) must not
		 * cost the slow server a request nobody reads. */
		if (s->queued && s->be->cfg->queue_abort_on_close) {
			log_info("%s closed while queued for backend %s: request dropped", s->cl->peer,
				 s->be->cfg->name);
			s->reason = REASON_CLIENT_ABORT;
			return 0;
		}
		__attribute__((fallthrough));
	case ST_EXCHANGE:
		/* Half-close after a full request: answer it (and any complete
		 * one buffered behind it). */
		return s->req_done;
	default:
		return 0;
	}
}

static void stream_timeout(struct stream *s)
{
	switch (s->state) {
	case ST_HEAD:
		stream_fail(s, REASON_HEADER_TIMEOUT);
		break;
	case ST_WAIT:
		if (s->queued) {
			stream_fail(s, REASON_QUEUE_TIMEOUT);
			break;
		}
		/* body stalled while connecting */
		__attribute__((fallthrough));
	case ST_LIMIT:
	case ST_EXCHANGE:
		stream_fail(s, s->req_done ? REASON_CLIENT_SEND_TIMEOUT : REASON_BODY_TIMEOUT);
		break;
	case ST_TUNNEL:
		codec(s)->abort(s);
		break;
	}
}

/* The client took what was queued for it: the backend may send again. */
static void stream_client_writable(struct stream *s)
{
	if (s->bc && s->bc->read_stopped)
		bconn_read_pause(s->bc, 0);
}

/* ---- the backend side ---- */

static void stream_backend_writable(struct stream *s)
{
	codec(s)->resume(s);
}

static void stream_backend_ready(struct stream *s)
{
	struct bconn *bc = s->bc;
	if (s->state == ST_WAIT)
		codec(s)->timer(s, 0);
	s->state = ST_EXCHANGE;
	upstream_h1_start(bc);
	buf_append(&bc->out.pending, s->head.data, s->head.len);
	buf_append(&bc->out.pending, s->tobe.data, s->tobe.len);
	s->tobe.len = 0;
	s->t_sent = now_us();
	enum stats_counter kind = bc->nreq > 1 ? STAT_BCONN_REUSED : STAT_BCONN_NEW;
	stats_add(s->be->st, kind, 1);
	stats_add(bc->srv->st, kind, 1);
	bconn_flush(bc);
	if (bc->state != BC_BUSY)
		return;
	bconn_timeout(bc, s->resp_timeout_ms);
	codec(s)->resume(s);
	if (!s->req_done)
		codec(s)->timer(s, timeouts()->client_body_ms);
}

/* A connect that failed sent nothing, so the request, whatever its
 * method, may go to another server (HAProxy's redispatch, nginx's
 * proxy_next_upstream error timeout): no more attempts than servers, and
 * REDISPATCH_MAX at most. A backend with one server answers at once: trying
 * the same address again would only add a connect timeout. */
#define REDISPATCH_MAX 3

static void stream_backend_error(struct stream *s, enum reason r)
{
	if (s->srv)
		upstream_server_outcome(s->srv, r == REASON_CONNECT_TIMEOUT ? SRV_TIMEOUT : SRV_5XX);
	if ((r == REASON_BACKEND_REFUSED || r == REASON_CONNECT_TIMEOUT) && s->bc == NULL && s->srv &&
	    s->redispatches < REDISPATCH_MAX && s->redispatches + 1u < s->be->nservers &&
	    upstream_other_server_up(s->be, s->srv)) {
		s->redispatches++;
		s->avoid = s->srv;
		/* The request's own outcome is counted where it ends; the failed
		 * server's errors show what it cost. */
		stats_reason(s->srv->st, r);
		log_info("%s %s to server %s; trying another server", s->cl->peer, reason_text(r),
			 s->srv->cfg->name);
		s->srv = NULL;
		r = upstream_request(s);
		if (r == REASON_OK) {
			if (s->queued)
				codec(s)->timer(s, s->be->cfg->queue_timeout_ms);
			return;
		}
	}
	stream_fail(s, r);
}

static int retry_possible(const struct stream *s)
{
	struct bconn *bc = s->bc;
	return bc && !bc->got_bytes && bc->nreq > 1 && s->idempotent && !s->retried && s->req_done &&
	       !s->resp_started;
}

static void stream_retry(struct stream *s)
{
	upstream_abort(s->bc);
	s->retried = 1;
	s->srv = NULL;
	s->state = ST_WAIT;
	log_info("%s retrying %s on a fresh connection after a stale pooled one", s->cl->peer,
		 llhttp_method_name((llhttp_method_t)s->method));
	enum reason r = upstream_request(s);
	if (r != REASON_OK)
		stream_fail(s, r);
	else if (s->queued)
		codec(s)->timer(s, s->be->cfg->queue_timeout_ms);
}

static void stream_backend_eof(struct stream *s, enum reason r)
{
	struct bconn *bc = s->bc;
	if (s->state == ST_TUNNEL) {
		/* Backend ended the tunnel: deliver what is queued, then close. */
		if (bc)
			upstream_abort(bc);
		codec(s)->tunnel_end(s);
		return;
	}
	if (bc && r == REASON_BACKEND_CLOSED && s->resp_started && !s->resp_done) {
		/* Close-delimited body ends at EOF. */
		if (upstream_h1_finish(bc) && s->resp_done) {
			stream_finish(s, 0);
			return;
		}
	}
	if ((r == REASON_BACKEND_RESET || r == REASON_BACKEND_CLOSED) && retry_possible(s)) {
		stream_retry(s);
		return;
	}
	if (s->resp_started)
		r = REASON_BACKEND_ABORT;
	else if (s->srv)
		upstream_server_outcome(s->srv, r == REASON_BACKEND_TIMEOUT ? SRV_TIMEOUT : SRV_5XX);
	stream_fail(s, r);
}

/* ---- the response, as upstream's parser reports it ---- */

static void stream_resp_interim(struct stream *s, int status)
{
	codec(s)->send_interim(s, status);
}

static void stream_resp_head(struct stream *s, int status, unsigned flags)
{
	struct msg *m = &s->resp;
	s->status = status;
	s->resp_started = 1;
	if (s->srv)
		upstream_server_outcome(s->srv, status >= 500 ? SRV_5XX : SRV_OK);
	s->t_first_byte = now_us();
	if (flags & RESP_UPGRADE) {
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_UPGRADE)
				m->hdrs[i].drop = 0;
	} else {
		if (s->insp.ran)
			inspect_response(s);
		if (s->insp.resp_del.len)  /* the route's and the hook's */
			inspect_apply_removals(&s->insp.resp_del, m);
		persist_response(s);
	}
	codec(s)->send_head(s, status, flags);
	s->resp_head_sent = 1;
}

static void stream_resp_body(struct stream *s, const char *data, size_t len)
{
	s->resp_body_in += len;
	codec(s)->send_data(s, data, len);
}

static void stream_resp_end(struct stream *s)
{
	codec(s)->send_end(s);
	s->resp_done = 1;
}

static void stream_start_tunnel(struct stream *s, const char *rest, size_t len)
{
	s->state = ST_TUNNEL;
	s->resp_done = 1;
	stream_log(s);
	bconn_timeout(s->bc, 0);
	codec(s)->tunnel(s, rest, len);
}

/* Response bytes from the backend. */
static void stream_backend_data(struct stream *s, const char *data, size_t len)
{
	struct bconn *bc = s->bc;
	if (s->state == ST_TUNNEL) {
		codec(s)->send_data(s, data, len);
		codec(s)->flush(s);
		if (codec(s)->queued(s) > CLIENT_HIGH_WATER)
			bconn_read_pause(bc, 1);
		codec(s)->timer(s, timeouts()->client_keepalive_ms);
		return;
	}
	bconn_timeout(bc, s->resp_timeout_ms);
	/* Where this read's output starts: see the error path. */
	size_t mark = codec(s)->out_mark(s);
	uint64_t out0 = s->bytes_out;
	uint8_t head0 = s->resp_head_sent;
	size_t used;
	int reusable;
	switch (upstream_h1_parse(bc, data, len, &used, &reusable)) {
	case H1R_MORE:
		codec(s)->flush(s);
		if (codec(s)->queued(s) > CLIENT_HIGH_WATER) {
			bconn_read_pause(bc, 1);
			if (s->req_done)
				codec(s)->timer(s, timeouts()->client_send_ms);
		}
		return;
	case H1R_UPGRADE:
		stream_start_tunnel(s, data + used, len - used);
		return;
	case H1R_DONE:
		stream_finish(s, reusable);
		return;
	case H1R_INVALID:
		break;
	}
	s->reason = REASON_BACKEND_BAD_RESPONSE;
	log_warn("%s backend %s/%s sent an invalid response: %s", s->cl->peer, s->be->cfg->name,
		 bc->srv->cfg->name, upstream_h1_error(bc));
	if (!head0 && s->resp_head_sent) {
		/* The head was queued in this very read, so nothing of it has
		 * reached the client: take it back and answer 502, rather than
		 * close on a client that then sees no reply at all. */
		codec(s)->out_rewind(s, mark);
		s->bytes_out = out0;
		s->resp_head_sent = 0;
	}
	stream_fail(s, s->resp_head_sent ? REASON_BACKEND_ABORT : REASON_BACKEND_BAD_RESPONSE);
}

/* ---- registration ---- */

static const struct stream_events codec_events = {
	.open = stream_open,
	.head = stream_head,
	.body = stream_body,
	.chunk = stream_chunk,
	.end = stream_end,
	.pushed = stream_pushed,
	.tunnel_in = stream_tunnel_in,
	.peer_eof = stream_peer_eof,
	.timeout = stream_timeout,
	.fail = stream_fail,
	.writable = stream_client_writable,
	.abort = stream_abort,
	.release = stream_release,
};

static const struct upstream_events backend_events = {
	.ready = stream_backend_ready,
	.error = stream_backend_error,
	.data = stream_backend_data,
	.eof = stream_backend_eof,
	.writable = stream_backend_writable,
	.resp_interim = stream_resp_interim,
	.resp_head = stream_resp_head,
	.resp_body = stream_resp_body,
	.resp_end = stream_resp_end,
};

void stream_init(void)
{
	codec_events_set(&codec_events);
	upstream_events_set(&backend_events);
	ratelimit_events_set(stream_limit_done);
}
