/* The HTTP/1.1 codec (codec.h): requests parsed with llhttp into streams,
 * responses serialised for this client.
 *
 * Owns: struct h1s (the parser state of the request being read, and how its
 * response is framed), pooled per worker and attached to the connection
 * (cl->codec_ctx) and its stream only while a request is under way; HTTP/1.1
 * syntax and framing checks (versions, Transfer-Encoding, Content-Length,
 * Host, target forms, obs-fold, Connection and Upgrade); pipelining order;
 * keep-alive; 100 Continue; chunked or length framing of responses; the
 * relay of an upgraded connection.
 * May call: the connection (conn.h) by name; the stream layer only through
 * codec_ev (struct stream_events). It reads a stream's response facts to
 * frame them and fills in its request facts.
 *
 * The request parser is paused (HPE_PAUSED) at the end of each request:
 * later bytes are the next pipelined request and wait in cl->in until the
 * response is done. Nothing is closed from inside an llhttp callback. */
#include <string.h>
#include "h1.h"
#include "h1head.h"
#include "codec.h"
#include "conn.h"
#include "log.h"
#include "worker.h"

/* The codec's state for one request on one connection. */
struct h1s {
	struct client *cl;
	struct stream *s;
	struct list link;          /* in the pool when free */
	llhttp_t parser;
	struct head_scan hscan;
	/* Bounds of the current and previous llhttp_execute input, and the end
	 * of the last header value piece: only compared, never dereferenced
	 * outside the current input (obs-fold detection). */
	const char *exec_start, *exec_end, *prev_exec_end, *val_end;
	uint8_t head_scanned;      /* head_scan saw the end of this request's head */
	uint8_t llhttp_fed;        /* llhttp has seen bytes of this request */
	uint8_t parse_error;       /* a parser callback reported s->reason */
	uint8_t keepalive;         /* this request allows another after it */
	uint8_t client_close;      /* the client itself ends the connection after this request */
	uint8_t chunked_out;       /* the response body goes out chunked */
};

static llhttp_settings_t req_settings;
static struct list h1s_free = { &h1s_free, &h1s_free };
static unsigned h1s_nfree;
#define H1S_POOL_KEEP 256

static const struct cfg_limits *limits(void) { return &W->cfg->limits; }
static const struct cfg_timeouts *timeouts(void) { return &W->cfg->timeouts; }
static struct h1s *cur(const struct client *cl) { return cl->codec_ctx; }
static struct h1s *of(const struct stream *s) { return s->codec_ctx; }

static void h1_run_input(struct client *cl);

/* A request starts: codec state and stream from their pools. */
static struct h1s *h1s_get(struct client *cl)
{
	struct h1s *h;
	if (!list_empty(&h1s_free)) {
		h = CONTAINER_OF(h1s_free.next, struct h1s, link);
		list_del(&h->link);
		h1s_nfree--;
	} else {
		h = malloc(sizeof(*h));
		AN(h);
	}
	memset(h, 0, sizeof(*h));
	llhttp_init(&h->parser, HTTP_REQUEST, &req_settings);
	h->parser.data = h;
	h->cl = cl;
	h->s = codec_ev->open(cl, h);
	cl->codec_ctx = h;
	return h;
}

/* The request is over: the stream and the codec state go back. */
static void h1s_put(struct client *cl)
{
	struct h1s *h = cur(cl);
	if (h == NULL)
		return;
	cl->codec_ctx = NULL;
	codec_ev->release(h->s);
	if (h1s_nfree >= H1S_POOL_KEEP) {
		free(h);
		return;
	}
	list_add_head(&h1s_free, &h->link);
	h1s_nfree++;
}

static void h1_out(struct stream *s, const void *data, size_t len)
{
	buf_append(&s->cl->out.pending, data, len);
	s->bytes_out += len;
}

/* ---- request parsing ---- */

static int req_fail(struct h1s *h, enum reason r)
{
	h->parse_error = 1;
	h->s->reason = r;
	return -1;
}

static int on_req_begin(llhttp_t *p)
{
	struct h1s *h = p->data;
	if (h->s->t_start == 0)
		h->s->t_start = now_us();
	return 0;
}

static int on_req_url(llhttp_t *p, const char *at, size_t len)
{
	struct h1s *h = p->data;
	h->s->method = llhttp_get_method(p);
	if (h->s->req.url_len + len > limits()->max_request_line)
		return req_fail(h, REASON_URI_TOO_LONG);
	msg_on_url(&h->s->req, at, len);
	return 0;
}

static int check_head_size(struct h1s *h)
{
	if (h->s->req.head_bytes > limits()->max_header_size)
		return req_fail(h, REASON_HEADERS_TOO_LARGE);
	return 0;
}

static int on_req_field(llhttp_t *p, const char *at, size_t len)
{
	struct h1s *h = p->data;
	if (msg_on_field(&h->s->req, at, len) < 0)
		return req_fail(h, REASON_HEADERS_TOO_LARGE);
	return check_head_size(h);
}

/* llhttp 8 accepts obs-fold (a header line starting with SP/HTAB) and
 * reports the folded part as more value bytes. RFC 9112 5.2 lets a proxy
 * reject it, and passing it on is a smuggling vector, so detect it: a value
 * that continues anywhere but across an execute boundary, or that starts
 * right after a line break, was folded. */
static int value_is_folded(struct h1s *h, const char *at)
{
	if (h->s->req.in_value)
		return !(at == h->exec_start && h->val_end == h->prev_exec_end);
	const char *q = at;
	while (q > h->exec_start && (q[-1] == ' ' || q[-1] == '\t'))
		q--;
	return q > h->exec_start && q < at && q[-1] == '\n';
}

static int on_req_value(llhttp_t *p, const char *at, size_t len)
{
	struct h1s *h = p->data;
	if (value_is_folded(h, at))
		return req_fail(h, REASON_BAD_REQUEST);
	h->val_end = at + len;
	if (msg_on_value(&h->s->req, at, len) < 0)
		return req_fail(h, REASON_BAD_REQUEST);
	return check_head_size(h);
}

static int header_checks(struct h1s *h, struct hdr *hd);

static int on_req_value_done(llhttp_t *p)
{
	struct h1s *h = p->data;
	struct msg *m = &h->s->req;
	struct hdr *hd = msg_finish_header(m);
	if (hd == NULL)
		return req_fail(h, REASON_BAD_REQUEST);
	/* llhttp folds obs-fold lines into the value; RFC 9112 5.2 lets a
	 * proxy reject them, and forwarding them is a smuggling vector. */
	if (memchr(msg_str(m, hd->val_off), '\r', hd->val_len) || memchr(msg_str(m, hd->val_off), '\n', hd->val_len))
		return req_fail(h, REASON_BAD_REQUEST);
	return header_checks(h, hd);
}

/* A finished header line, as any request parser read it. */
static int header_checks(struct h1s *h, struct hdr *hd)
{
	struct msg *m = &h->s->req;
	/* Transfer_Encoding / Content_Length: sluice would not frame by it,
	 * a CGI-style backend would (0.CL / TE.0 desync). */
	const char *name = msg_str(m, hd->name_off);
	if (memchr(name, '_', hd->name_len)) {
		if (hdr_framing_alias(name, hd->name_len))
			return req_fail(h, REASON_BAD_REQUEST);
		const struct cfg_listener *l = h->cl->li->cfg;
		if (l->underscores == CFG_US_REJECT)
			return req_fail(h, REASON_UNDERSCORE_HEADER);
		if (l->underscores != CFG_US_ALLOW)
			hd->drop = 1;
	}
	if (h->s->head_done) {
		/* A trailer field: checked like a header, then dropped. Kept,
		 * a held request's head (built after its body) would carry a
		 * trailer "Content-Length" next to Transfer-Encoding, and the
		 * hook would read trailers as headers. Its bytes still count
		 * toward max_header_size. */
		msg_drop_last(m);
	}
	return 0;
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

/* The head as HTTP/1.1 defines it (RFC 9112): version, method form,
 * framing, Host; then the connection's fate (keep-alive, upgrade). The
 * stream layer checks the rest. */
static enum reason h1_check(struct h1s *h)
{
	struct stream *s = h->s;
	llhttp_t *p = &h->parser;
	struct msg *m = &s->req;
	s->method = llhttp_get_method(p);
	s->http_minor = llhttp_get_http_minor(p);
	if (llhttp_get_http_major(p) != 1)
		return REASON_BAD_REQUEST;
	if (s->method == HTTP_CONNECT)
		return REASON_METHOD_UNSUPPORTED;
	int hosts = msg_count(m, HDR_HOST);
	if (hosts > 1 || (hosts == 0 && s->http_minor >= 1))
		return REASON_MISSING_HOST;
	int tes = msg_count(m, HDR_TRANSFER_ENCODING);
	if (tes) {
		const struct hdr *te = msg_find(m, HDR_TRANSFER_ENCODING);
		const char *v = msg_str(m, te->val_off);
		if (s->http_minor == 0 || tes > 1 || msg_count(m, HDR_CONTENT_LENGTH))
			return REASON_BAD_TE;
		if (!tok_eq(v, te->val_len, "chunked")) {
			const char *q = v, *end = v + te->val_len, *tok;
			size_t tl;
			while (list_next(&q, end, &tok, &tl))
				if (tok_eq(tok, tl, "chunked"))
					return REASON_BAD_TE;
			/* 501 only for one well-formed coding we do not know;
			 * lists, parameters, quotes and empty values are 400. */
			if (te->val_len == 0)
				return REASON_BAD_TE;
			for (size_t i = 0; i < te->val_len; i++)
				if (!tchar((unsigned char)v[i]))
					return REASON_BAD_TE;
			return REASON_TE_UNSUPPORTED;
		}
		s->req_chunked = 1;
	}
	/* What we frame by must be what llhttp frames by. */
	if (s->req_chunked != !!(p->flags & F_CHUNKED) ||
	    !!msg_count(m, HDR_CONTENT_LENGTH) != !!(p->flags & F_CONTENT_LENGTH))
		return REASON_BAD_REQUEST;
	if (m->url_len == 0)
		return REASON_BAD_REQUEST;
	if (msg_str(m, m->url_off)[0] != '/' &&
	    !(s->method == HTTP_OPTIONS && m->url_len == 1 && msg_str(m, m->url_off)[0] == '*')) {
		enum reason r = req_absolute_form(m);
		if (r != REASON_OK)
			return r;
	}
	/* RFC 9112 3.2: an invalid Host value is a 400. "good.example/x",
	 * "a@b" or "a b" route one way here and another at the backend. */
	const struct hdr *host = msg_find(m, HDR_HOST);
	if (host && !host_valid(msg_str(m, host->val_off), host->val_len))
		return REASON_MISSING_HOST;
	uint64_t clen = (p->flags & F_CONTENT_LENGTH) ? p->content_length : 0;
	if (clen > CONTENT_LENGTH_MAX)
		return REASON_BAD_REQUEST;
	s->req_clen = clen;
	if (p->flags & F_CONTENT_LENGTH)
		msg_canonical_length(m, clen);
	unsigned conn = msg_apply_connection(m);
	h->keepalive = s->http_minor >= 1 ? !(conn & CONN_CLOSE) : !!(conn & CONN_KEEPALIVE);
	h->client_close = !h->keepalive;
	if (W->draining)
		h->keepalive = 0;
	s->upgrade = (conn & CONN_UPGRADE) && msg_find(m, HDR_UPGRADE) && s->http_minor >= 1 &&
		     !upgrade_offers_h2c(m);
	if (s->upgrade) {
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (m->hdrs[i].kind == HDR_UPGRADE)
				m->hdrs[i].drop = 0;
	}
	return REASON_OK;
}

/* Dispatching from inside the callback is safe: nothing there closes the
 * connection; a failure is reported to h1_exec through req_fail. */
static int on_req_headers_done(llhttp_t *p)
{
	struct h1s *h = p->data;
	h->s->head_done = 1;
	enum reason r = h1_check(h);
	if (r == REASON_OK)
		r = codec_ev->head(h->s);
	return r == REASON_OK ? 0 : req_fail(h, r);
}

static int on_req_body(llhttp_t *p, const char *at, size_t len)
{
	struct h1s *h = p->data;
	enum reason r = codec_ev->body(h->s, at, len);
	return r == REASON_OK ? 0 : req_fail(h, r);
}

static int on_req_chunk_header(llhttp_t *p)
{
	struct h1s *h = p->data;
	enum reason r = codec_ev->chunk(h->s, p->content_length);
	return r == REASON_OK ? 0 : req_fail(h, r);
}

static int on_req_done(llhttp_t *p)
{
	struct h1s *h = p->data;
	enum reason r = codec_ev->end(h->s);
	return r == REASON_OK ? HPE_PAUSED : req_fail(h, r);
}

static enum reason map_llhttp_error(llhttp_errno_t e)
{
	switch (e) {
	case HPE_INVALID_TRANSFER_ENCODING: return REASON_BAD_TE;
	case HPE_INVALID_CHUNK_SIZE: return REASON_BAD_CHUNK;
	default: return REASON_BAD_REQUEST;
	}
}

/* A head h1head_parse read, taken as llhttp's callbacks would take it: the
 * same fields, limits, checks and outcome (no body: no Content-Length, no
 * Transfer-Encoding). The head is copied into the arena once, not piece by
 * piece. Returns the head's length, or -1 when the request failed. */
static ssize_t h1_exec_common(struct h1s *h, const char *data, size_t len, const struct h1head *hd)
{
	llhttp_t *p = &h->parser;
	struct stream *s = h->s;
	struct msg *m = &s->req;
	p->method = hd->method;
	p->http_major = 1;
	p->http_minor = hd->http_minor;
	on_req_begin(p);
	s->method = hd->method;
	if (hd->start.len > limits()->max_request_line) {
		req_fail(h, REASON_URI_TOO_LONG);
		goto fail;
	}
	uint32_t base = msg_take_head(m, data, len, hd->start.off, hd->start.len);
	for (unsigned i = 0; i < hd->nhdrs; i++) {
		struct hdr *x = msg_add_parsed(m, base + hd->name[i].off, hd->name[i].len, base + hd->value[i].off,
					       hd->value[i].len);
		if (x == NULL) {
			req_fail(h, REASON_HEADERS_TOO_LARGE);
			goto fail;
		}
		if (check_head_size(h) != 0 || header_checks(h, x) != 0)
			goto fail;
	}
	if (on_req_headers_done(p) != 0 || on_req_done(p) != HPE_PAUSED)
		goto fail;
	return (ssize_t)len;
fail:
	codec_ev->fail(s, s->reason);
	return -1;
}

/* Feed DATA to the request parser. Returns bytes consumed, or -1 when the
 * request failed (error response under way or closed). Stops early at the
 * end of a request: later bytes are the next pipelined request. */
static ssize_t h1_exec(struct client *cl, const char *data, size_t len)
{
	if (len == 0)
		return 0;
	struct h1s *h = cur(cl);
	if (h == NULL) {
		h = h1s_get(cl);
		conn_timer(cl, timeouts()->client_header_ms);
	}
	if (!h->llhttp_fed) {
		/* A whole head of the common form skips llhttp; any other
		 * (or a head that arrives in pieces) is llhttp's throughout. */
		struct h1head hd;
		size_t n = h1head_parse(data, len, &hd);
		if (n > 0)
			return h1_exec_common(h, data, n, &hd);
		h->llhttp_fed = 1;
	}
	if (!h->head_scanned) {
		int n = head_scan(&h->hscan, data, len);
		if (n < 0) {
			codec_ev->fail(h->s, REASON_BAD_REQUEST);
			return -1;
		}
		h->head_scanned = n > 0;
	}
	h->prev_exec_end = h->exec_end;
	h->exec_start = data;
	h->exec_end = data + len;
	llhttp_errno_t e = llhttp_execute(&h->parser, data, len);
	if (e == HPE_PAUSED_UPGRADE && !h->s->head_done && llhttp_get_error_pos(&h->parser) == data) {
		/* llhttp pauses for an upgrade after the request that asked for
		 * it, so here, before the next one: that one was finished as a
		 * plain request (h2c refused, HTTP/1.0). */
		llhttp_resume_after_upgrade(&h->parser);
		e = llhttp_execute(&h->parser, data, len);
	}
	if (e == HPE_OK)
		return (ssize_t)len;
	if (e != HPE_PAUSED && e != HPE_PAUSED_UPGRADE) {
		enum reason r = h->parse_error ? h->s->reason : map_llhttp_error(e);
		codec_ev->fail(h->s, r);
		return -1;
	}
	/* Paused at the end of a request: the rest is pipelined. */
	return (ssize_t)(llhttp_get_error_pos(&h->parser) - data);
}

/* After request bytes were produced: push them and apply backpressure. */
static void h1_after_input(struct client *cl)
{
	struct h1s *h = cur(cl);
	if (h == NULL)
		return;
	struct stream *s = h->s;
	int full = codec_ev->pushed(s);
	if (full < 0)
		return;  /* the stream ended */
	int held = full || cl->in.len > PIPELINE_MAX;
	if (held)
		conn_read_pause(cl, 1);
	/* The body timeout measures the client; while we hold it back for a
	 * slow backend it is not running (the backend's timer is). */
	if ((s->state == ST_EXCHANGE || s->state == ST_WAIT) && !s->queued)
		conn_timer(cl, !s->req_done && !held ? timeouts()->client_body_ms : 0);
}

/* Parse what is buffered in cl->in (pipelined or held back). */
static void h1_run_input(struct client *cl)
{
	if (cl->in.len == 0 || (cur(cl) && cur(cl)->s->req_done) || cl->state != CL_OPEN)
		return;
	ssize_t n = h1_exec(cl, cl->in.data, cl->in.len);
	if (n < 0)
		return;
	buf_consume(&cl->in, (size_t)n);
	h1_after_input(cl);
}

/* ---- from the connection ---- */

static void h1_data(struct client *cl, const char *data, size_t len)
{
	struct h1s *h = cur(cl);   /* NULL until a request starts */
	struct stream *s = h ? h->s : NULL;
	if (s && s->state == ST_TUNNEL) {
		int full = codec_ev->tunnel_in(s, data, len);
		if (full >= 0) {
			if (full)
				conn_read_pause(cl, 1);
			conn_timer(cl, timeouts()->client_keepalive_ms);
		}
		return;
	}
	if (cl->in.len > 0 || (s && s->req_done)) {
		/* Earlier bytes wait, or a response is pending: keep order. */
		buf_append(&cl->in, data, len);
		if (s && s->req_done) {
			if (cl->in.len > PIPELINE_MAX)
				conn_read_pause(cl, 1);
			return;
		}
		h1_run_input(cl);
		return;
	}
	ssize_t n = h1_exec(cl, data, len);
	if (n < 0)
		return;
	if ((size_t)n < len)
		buf_append(&cl->in, data + n, len - (size_t)n);
	h1_after_input(cl);
}

static void h1_eof(struct client *cl)
{
	struct h1s *h = cur(cl);
	if (h == NULL || !codec_ev->peer_eof(h->s))
		conn_close(cl);
}

static void h1_timeout(struct client *cl)
{
	codec_ev->timeout(cur(cl)->s);
}

static void h1_sent(struct client *cl, int more)
{
	struct h1s *h = cur(cl);
	struct stream *s = h ? h->s : NULL;
	if (more) {
		/* With output queued, the client's pace is what we wait for: a
		 * response being delivered or the last one draining. */
		if (s == NULL || (s->state == ST_EXCHANGE && s->req_done))
			conn_timer(cl, timeouts()->client_send_ms);
		return;
	}
	if (s == NULL) {
		conn_keepalive_wait(cl);
		if (cl->read_stopped && cl->in.len <= PIPELINE_MAX)
			conn_read_pause(cl, 0);
		return;
	}
	codec_ev->writable(s);
	switch (s->state) {
	case ST_HEAD:
		if (cl->read_stopped && cl->in.len <= PIPELINE_MAX)
			conn_read_pause(cl, 0);
		break;
	case ST_EXCHANGE:
		if (s->req_done)
			conn_timer(cl, 0);  /* the backend's timer governs again */
		break;
	default:
		break;
	}
}

static void h1_fail(struct client *cl, enum reason r)
{
	struct h1s *h = cur(cl) ? cur(cl) : h1s_get(cl);
	codec_ev->fail(h->s, r);
}

static void h1_error(struct client *cl, enum reason r)
{
	if (cur(cl))
		cur(cl)->s->reason = r;
}

static void h1_close(struct client *cl)
{
	if (cur(cl))
		codec_ev->abort(cur(cl)->s);
}

static void h1_closed(struct client *cl)
{
	h1s_put(cl);
}

/* Draining: a response whose head has gone out promising keep-alive keeps
 * the promise (its client may send the next request the moment the body
 * ends, and gets the answer with Connection: close); any other request in
 * progress ends the connection. */
static void h1_drain(struct client *cl)
{
	struct h1s *h = cur(cl);
	if (h && !(h->s->state == ST_EXCHANGE && h->s->resp_head_sent))
		h->keepalive = 0;
}

static int h1_idle(const struct client *cl)
{
	return cur(cl) == NULL;
}

/* ---- from the stream ---- */

static void h1_timer(struct stream *s, uint64_t ms)
{
	conn_timer(s->cl, ms);
}

static size_t h1_out_mark(const struct stream *s)
{
	return s->cl->out.pending.len;
}

static void h1_out_rewind(struct stream *s, size_t mark)
{
	s->cl->out.pending.len = mark;
}

static void h1_flush(struct stream *s)
{
	conn_flush(s->cl);
}

static size_t h1_queued(const struct stream *s)
{
	return conn_queued(s->cl);
}

static void h1_resume(struct stream *s)
{
	struct client *cl = s->cl;
	if (cl->read_stopped && !s->req_done && cl->in.len <= PIPELINE_MAX) {
		conn_read_pause(cl, 0);
		if (s->state == ST_EXCHANGE)
			conn_timer(cl, timeouts()->client_body_ms);
	} else if (s->state == ST_TUNNEL && cl->read_stopped) {
		conn_read_pause(cl, 0);
	}
}

static void h1_send_continue(struct stream *s)
{
	static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
	buf_append(&s->cl->out.pending, cont, sizeof(cont) - 1);
	conn_flush(s->cl);
}

static void write_status_line(struct stream *s, int status)
{
	struct msg *m = &s->resp;
	struct buf *out = &s->cl->out.pending;
	char line[13] = "HTTP/1.1 000 ";  /* status is 100..599 (upstream_h1.c) */
	line[9] = (char)('0' + status / 100);
	line[10] = (char)('0' + status / 10 % 10);
	line[11] = (char)('0' + status % 10);
	buf_append(out, line, sizeof(line));
	buf_append(out, msg_str(m, m->url_off), m->url_len);
	buf_append(out, "\r\n", 2);
}

/* Interim responses are relayed to HTTP/1.1 clients only. */
static void h1_send_interim(struct stream *s, int status)
{
	struct buf *out = &s->cl->out.pending;
	size_t before = out->len;
	if (s->http_minor >= 1 && status != 100) {
		write_status_line(s, status);
		msg_write_headers(&s->resp, out);
		buf_append(out, "\r\n", 2);
		s->bytes_out += out->len - before;
	}
}

static void h1_send_head(struct stream *s, int status, unsigned flags)
{
	struct h1s *h = of(s);
	struct buf *out = &s->cl->out.pending;
	size_t before = out->len;
	if (flags & RESP_UPGRADE) {
		write_status_line(s, status);
		msg_write_headers(&s->resp, out);
		buf_append_str(out, "Connection: upgrade\r\n\r\n");
		s->bytes_out += out->len - before;
		return;
	}
	int bodyless = (flags & RESP_BODYLESS) != 0;
	int chunked = (flags & RESP_CHUNKED) != 0;
	if (s->upgrade)
		h->keepalive = 0;  /* refused upgrade: the client may already send frames */
	/* A body of unknown length (close-delimited, or chunked from the
	 * backend) goes out chunked to an HTTP/1.1 client; an HTTP/1.0
	 * client reads it until we close. */
	if (!bodyless && (chunked || !(flags & RESP_LENGTH))) {
		if (s->http_minor >= 1)
			h->chunked_out = 1;
		else
			h->keepalive = 0;
	}
	if (!s->req_done || W->draining)
		h->keepalive = 0;
	write_status_line(s, status);
	msg_write_headers(&s->resp, out);
	buf_append(out, s->insp.resp_hdrs.data, s->insp.resp_hdrs.len);
	if (h->chunked_out)
		buf_append_str(out, "Transfer-Encoding: chunked\r\n");
	if (!h->keepalive)
		buf_append_str(out, "Connection: close\r\n");
	else if (s->http_minor == 0)
		buf_append_str(out, "Connection: keep-alive\r\n");
	buf_append(out, "\r\n", 2);
	s->bytes_out += out->len - before;
}

static void h1_send_data(struct stream *s, const char *data, size_t len)
{
	if (of(s)->chunked_out) {
		struct buf *out = &s->cl->out.pending;
		size_t before = out->len;
		buf_append_hex(out, len);
		buf_append(out, "\r\n", 2);
		buf_append(out, data, len);
		buf_append(out, "\r\n", 2);
		s->bytes_out += out->len - before;
	} else {
		h1_out(s, data, len);
	}
}

static void h1_send_end(struct stream *s)
{
	if (of(s)->chunked_out)
		h1_out(s, "0\r\n\r\n", 5);
}

/* sluice's own answer: an error, or the hook's deny or redirect. */
static void h1_send_local(struct stream *s, enum reason r, int close)
{
	struct h1s *h = of(s);
	struct txn_insp *in = &s->insp;
	struct local_answer a;
	local_answer(s, r, &a);
	if (W->draining)
		h->keepalive = 0;
	close = close || !h->keepalive;
	char head[384];
	int hlen = snprintf(head, sizeof(head), "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n",
			    s->status, http_status_text(s->status), a.ctype, a.blen);
	h1_out(s, head, (size_t)hlen);
	if (a.route)  /* the route's set_response_headers */
		h1_out(s, in->resp_hdrs.data, in->resp_hdrs.len);
	if (a.redirect) {
		h1_out(s, "Location: ", 10);
		h1_out(s, in->local.data, in->local.len);
		h1_out(s, "\r\n", 2);
	}
	if (close)
		h1_out(s, "Connection: close\r\n", 19);
	else if (s->http_minor == 0)
		h1_out(s, "Connection: keep-alive\r\n", 24);
	h1_out(s, "\r\n", 2);
	/* s->is_head is the stream layer's; a head this codec refused never got there */
	if (!s->is_head && s->method != HTTP_HEAD)
		h1_out(s, a.body, a.blen);
}

static void h1_tunnel(struct stream *s, const char *rest, size_t len)
{
	struct client *cl = s->cl;
	h1_out(s, rest, len);
	conn_flush(cl);
	if (cl->state == CL_CLOSING)
		return;
	if (cl->in.len) {
		codec_ev->tunnel_in(s, cl->in.data, cl->in.len);
		cl->in.len = 0;
	}
	conn_timer(cl, timeouts()->client_keepalive_ms);
	if (cl->peer_eof)
		codec_ev->peer_eof(s);
	else if (cl->read_stopped)
		conn_read_pause(cl, 0);
}

static void h1_tunnel_end(struct stream *s)
{
	conn_end(s->cl, 0);
}

static void h1_abort(struct stream *s)
{
	conn_close(s->cl);
}

/* The exchange is over: the connection waits for the next request, runs
 * one already buffered, or ends once the response is out. */
static void h1_done(struct stream *s, int close)
{
	struct client *cl = s->cl;
	struct h1s *h = of(s);
	if (close)
		h->keepalive = 0;
	/* Draining, keepalive is still set only where a response head promised
	 * it (h1_drain): the connection waits for one more request. */
	if (!h->keepalive || (cl->peer_eof && cl->in.len == 0)) {
		cl->input_done = h->client_close && s->req_done && cl->in.len == 0;
		conn_end(cl, 1);
		return;
	}
	cl->nrequests++;
	h1s_put(cl);
	conn_flush(cl);
	if (conn_queued(cl))
		conn_timer(cl, timeouts()->client_send_ms);
	else
		conn_keepalive_wait(cl);
	if (cl->in.len) {
		h1_run_input(cl);
		if (cl->state != CL_OPEN)
			return;
	}
	/* The client half-closed: whatever it left unfinished never will be. */
	if (cl->peer_eof && (cur(cl) == NULL || cur(cl)->s->state == ST_HEAD)) {
		conn_close(cl);
		return;
	}
	if (cl->read_stopped && cl->in.len <= PIPELINE_MAX && conn_queued(cl) < OUT_HIGH_WATER)
		conn_read_pause(cl, 0);
}

const struct codec_ops h1_codec = {
	.name = "http/1.1",
	.data = h1_data,
	.eof = h1_eof,
	.timeout = h1_timeout,
	.sent = h1_sent,
	.fail = h1_fail,
	.error = h1_error,
	.close = h1_close,
	.closed = h1_closed,
	.drain = h1_drain,
	.idle = h1_idle,
	.timer = h1_timer,
	.out_mark = h1_out_mark,
	.out_rewind = h1_out_rewind,
	.flush = h1_flush,
	.queued = h1_queued,
	.resume = h1_resume,
	.send_continue = h1_send_continue,
	.send_interim = h1_send_interim,
	.send_head = h1_send_head,
	.send_data = h1_send_data,
	.send_end = h1_send_end,
	.send_local = h1_send_local,
	.tunnel = h1_tunnel,
	.done = h1_done,
	.tunnel_end = h1_tunnel_end,
	.abort = h1_abort,
};

void h1_init(void)
{
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
}
