/* The HTTP/2 codec (codec.h): a client's streams, framed by libnghttp2,
 * become streams of the stream layer, each an HTTP/1.1 request to a backend.
 *
 * Owns: struct h2c (the nghttp2 session of one connection, its streams) and
 * struct h2s (one HTTP/2 stream: the response body waiting for the client's
 * flow-control window, the request body bytes not yet credited back, its
 * timer), both pooled per worker; the mapping of HTTP/2 request fields to the
 * HTTP/1.1 head the stream layer forwards (RFC 9113 8.3: :authority becomes
 * Host, cookie crumbs are joined, a body without content-length goes
 * chunked); response fields to HEADERS and DATA.
 * May call: the connection (conn.h) by name; the stream layer only through
 * codec_ev (struct stream_events). nghttp2 does framing, HPACK, flow control
 * and the protocol checks of RFC 9113 8.2 (connection-specific fields,
 * uppercase names, CR/LF/NUL, pseudo-header order, content-length against
 * DATA): a stream that breaks them is reset before the stream layer hears of
 * a head.
 *
 * Backpressure. Incoming: the connection window is credited as soon as DATA
 * arrives, a stream's own window only once the stream layer has taken the
 * bytes and its backend side is not full (h2s.unconsumed), so a stream with
 * a slow backend stalls alone; each holds at most its window
 * (http2.initial_window_size). Outgoing: a stream's response body waits in
 * h2s.out until the client's windows let nghttp2 frame it; the stream layer
 * stops reading its backend past CLIENT_HIGH_WATER there, and frames are
 * produced only while the socket's queue is below OUT_HIGH_WATER.
 *
 * nghttp2 may not be asked to send from inside its own callbacks: while it
 * parses input (in_recv) a flush is only noted and runs after. */
#include <string.h>
#include <nghttp2/nghttp2.h>
#include "h2.h"
#include "codec.h"
#include "conn.h"
#include "log.h"
#include "stats.h"
#include "worker.h"

#define H2S_POOL_KEEP 256
#define H2S_OUT_KEEP (16 * 1024)
#define STREAM_LOW_WATER (64 * 1024)   /* a stream's output under this: its backend may send again */

struct h2c {
	struct client *cl;
	nghttp2_session *ng;
	struct list streams;       /* its struct h2s */
	struct list flush_link;    /* in flush_due while a flush waits for the loop's check phase */
	int32_t last_id;           /* the stream the last lookup found (0: none) */
	struct h2s *last_h;
	uint32_t nstreams;         /* h2s alive (nghttp2 has not closed them) */
	uint32_t nactive;          /* of which a struct stream is attached */
	uint32_t heads_pending;    /* response heads to submit at the next flush */
	uint32_t heads_ready;      /* request heads waiting for the end of the input */
	uint64_t client_resets;    /* RST_STREAM from the client on a stream still under way */
	uint64_t completed;        /* streams the stream layer finished */
	uint64_t glitches;         /* frames that asked for work and made no request progress */
	int32_t max_id;            /* highest stream id the client opened */
	uint8_t ngaps;             /* ranges of ids it skipped, kept in gaps */
	struct { int32_t lo, hi; } gaps[8];
	uint8_t in_recv;           /* inside nghttp2_session_mem_recv, or dispatching after it */
	uint8_t flush_wanted;      /* a flush was asked for meanwhile */
	uint8_t goaway;            /* the last GOAWAY is queued: no new stream */
	uint8_t draining;          /* the shutdown notice and its PING went out */
	uint8_t send_timer;        /* the connection's timer is client_send, for a write in flight */
	uint8_t cut;               /* ended for abuse (rapid reset, flood): said once */
	uint8_t flush_due;         /* on the flush_due list */
	struct deadline dl;        /* draining: when the last GOAWAY goes */
};

struct h2s {
	struct h2c *c;
	struct stream *s;          /* NULL once the stream layer is done with it */
	struct list link;          /* in c->streams; in the pool when free */
	struct deadline dl;
	struct buf out;            /* response body not yet framed; read from out_off */
	struct buf early;          /* request DATA that came with a head not yet dispatched */
	size_t out_off;
	int32_t id;
	uint32_t unconsumed;       /* request DATA taken but not credited to the client */
	enum reason bad;           /* a request field broke a limit or rule */
	uint32_t auth_off, auth_len;  /* :authority, in s->req.raw */
	int head_status;           /* a response head waiting for the next flush */
	unsigned head_flags;
	uint8_t head_pending;
	uint8_t head_sent;         /* a final response's HEADERS were submitted */
	uint8_t out_eof;           /* the response body is complete */
	uint8_t deferred;          /* nghttp2 waits for body bytes (resume_data) */
	uint8_t held;              /* the backend side is full: the window stays closed */
	uint8_t req_end;           /* END_STREAM received */
	uint8_t head_ready;        /* the head is complete, dispatched after the input */
	uint8_t head_end;          /* ... and its HEADERS frame ended the stream */
	uint8_t has_path, has_method;
	uint8_t was_full;          /* the stream layer saw its output above high water */
};

/* Draining, in two steps (RFC 9113 6.8): a GOAWAY naming no stream says no
 * more will be taken, with a PING behind it; its ACK proves the client has
 * seen the notice. A request it queued before the notice may still follow
 * the ACK (a client library sends control frames first), so the real
 * GOAWAY, naming the last stream served, waits DRAIN_GRACE_MS more; the
 * open streams finish, and the connection ends. No request the client sent
 * before it saw the notice is refused. (timeouts.drain bounds it all.) */
#define DRAIN_GRACE_MS 200
static const uint8_t drain_ping[8] = { 's', 'l', 'u', 'i', 'c', 'e', '-', 'd' };

static nghttp2_session_callbacks *h2_callbacks;
static struct deadline_heap h2_deadlines;
static struct deadline_heap h2c_deadlines;
static struct list h2s_free = { &h2s_free, &h2s_free };
static unsigned h2s_nfree;
/* Name-value scratch for one header block (valid until the submit call
 * returns: nghttp2 copies what it is given). */
static nghttp2_nv *nvs;
static size_t nvs_cap;
static struct buf nv_names;

static const struct cfg_limits *limits(void) { return &W->cfg->limits; }
static const struct cfg_timeouts *timeouts(void) { return &W->cfg->timeouts; }
static struct h2c *conn_of(const struct client *cl) { return cl->codec_ctx; }
static struct h2s *of(const struct stream *s) { return s->codec_ctx; }

static void h2c_flush(struct h2c *c);
static void h2c_goaway(struct h2c *c);

/* ---- streams ---- */

/* nghttp2 finds a stream's user data by hashing its id; one request's
 * header, data and close callbacks ask for the same stream over and over. */
static struct h2s *stream_of(struct h2c *c, int32_t id)
{
	if (id != c->last_id || c->last_h == NULL) {
		c->last_h = nghttp2_session_get_stream_user_data(c->ng, id);
		c->last_id = id;
	}
	return c->last_h;
}

static void stream_set(struct h2c *c, int32_t id, struct h2s *h)
{
	nghttp2_session_set_stream_user_data(c->ng, id, h);
	c->last_id = id;
	c->last_h = h;
}

static struct h2s *h2s_new(struct h2c *c, int32_t id)
{
	struct h2s *h;
	if (!list_empty(&h2s_free)) {
		h = CONTAINER_OF(h2s_free.next, struct h2s, link);
		list_del(&h->link);
		h2s_nfree--;
	} else {
		h = calloc(1, sizeof(*h));
		AN(h);
	}
	struct buf out = h->out, early = h->early;
	memset(h, 0, sizeof(*h));
	h->out = out;
	h->out.len = 0;
	h->early = early;
	h->early.len = 0;
	h->c = c;
	h->id = id;
	list_add_tail(&c->streams, &h->link);
	c->nstreams++;
	stats_gauge_add(c->cl->li->st, GAUGE_H2_STREAMS, 1);
	return h;
}

/* The stream layer is done with the stream: it goes back to its pool. */
static void h2s_detach(struct h2s *h)
{
	struct stream *s = h->s;
	if (s == NULL)
		return;
	if (h->head_pending) {
		h->head_pending = 0;
		h->c->heads_pending--;
	}
	h->s = NULL;
	h->c->nactive--;
	h->c->cl->nrequests++;
	deadline_set(&h2_deadlines, &h->dl, 0);
	codec_ev->release(s);
}

static void h2s_free_one(struct h2s *h)
{
	struct h2c *c = h->c;
	AZ(h->s);
	deadline_set(&h2_deadlines, &h->dl, 0);
	list_del(&h->link);
	c->nstreams--;
	stats_gauge_add(c->cl->li->st, GAUGE_H2_STREAMS, -1);
	if (h->head_ready) {
		h->head_ready = 0;
		c->heads_ready--;
	}
	if (h2s_nfree >= H2S_POOL_KEEP) {
		buf_free(&h->out);
		buf_free(&h->early);
		free(h);
		return;
	}
	h->out.len = h->early.len = 0;
	buf_trim(&h->out, H2S_OUT_KEEP);
	buf_trim(&h->early, H2S_OUT_KEEP);
	list_add_head(&h2s_free, &h->link);
	h2s_nfree++;
}

/* A stream's timer: the stream layer's, or, once it is done with the
 * stream, the client_send bound on the rest of its response (a client that
 * keeps the stream's window shut would hold it for ever). */
static void h2s_deadline_fired(struct deadline *d)
{
	struct h2s *h = CONTAINER_OF(d, struct h2s, dl);
	struct h2c *c = h->c;
	if (h->s) {
		codec_ev->timeout(h->s);
	} else {
		log_info("%s h2 stream %d: client did not take the response within client_send", c->cl->peer,
			 h->id);
		nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, h->id, NGHTTP2_CANCEL);
	}
	h2c_flush(c);
}

/* Credit the client for request bytes the stream layer has taken. */
static void h2s_consume(struct h2s *h)
{
	if (h->unconsumed) {
		nghttp2_session_consume_stream(h->c->ng, h->id, h->unconsumed);
		h->unconsumed = 0;
	}
}

/* Request bytes went to the stream layer: push them on, and keep the
 * stream's window closed while its backend side is full. */
static void h2s_pushed(struct h2s *h)
{
	struct stream *s = h->s;
	if (s == NULL) {
		h2s_consume(h);
		return;
	}
	int full = codec_ev->pushed(s);
	if (full < 0 || h->s == NULL) {
		h2s_consume(h);
		return;
	}
	h->held = (uint8_t)full;
	if (!full)
		h2s_consume(h);
	if ((s->state == ST_EXCHANGE || s->state == ST_WAIT) && !s->queued)
		deadline_set(&h2_deadlines, &h->dl, !s->req_done && !full ? timeouts()->client_body_ms : 0);
}

/* ---- request fields ---- */

static uint8_t method_of(const uint8_t *v, size_t n, int *ok)
{
	static const struct { const char *name; uint8_t id; } methods[] = {
#define H2_METHOD(num, id, name) { #name, num },
		HTTP_METHOD_MAP(H2_METHOD)
#undef H2_METHOD
	};
	for (size_t i = 0; i < ARRAY_SIZE(methods); i++) {
		if (strlen(methods[i].name) == n && memcmp(methods[i].name, v, n) == 0) {
			*ok = 1;
			return methods[i].id;
		}
	}
	*ok = 0;
	return 0;
}

static int h2s_fail_field(struct h2s *h, enum reason r)
{
	if (h->bad == REASON_OK)
		h->bad = r;
	return 0;
}

static int on_begin_headers(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
	(void)ng;
	struct h2c *c = ud;
	if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;
	int32_t id = f->hd.stream_id, next = c->max_id ? c->max_id + 2 : 1;
	if (id > next && c->ngaps < ARRAY_SIZE(c->gaps)) {
		/* ids skipped: closed for good (RFC 9113 5.1.1) */
		c->gaps[c->ngaps].lo = next;
		c->gaps[c->ngaps].hi = id - 2;
		c->ngaps++;
	}
	if (id > c->max_id)
		c->max_id = id;
	struct h2s *h = h2s_new(c, f->hd.stream_id);
	stream_set(c, f->hd.stream_id, h);
	h->s = codec_ev->open(c->cl, h);
	c->nactive++;
	h->s->t_start = now_us();
	h->s->http_minor = 1;
	h->s->http_major = 2;
	deadline_set(&h2_deadlines, &h->dl, timeouts()->client_header_ms);
	conn_timer(c->cl, 0);  /* a stream is open: its own timer governs */
	return 0;
}

/* RFC 9113 5.1.1: HEADERS on a stream id the client skipped (lower than
 * one it opened since) is a connection error, PROTOCOL_ERROR; nghttp2
 * ignores it silently. Ids it did open, closed since, stay ignored as
 * nghttp2 does: the client may not have seen our RST_STREAM yet. */
static int on_begin_frame(nghttp2_session *ng, const nghttp2_frame_hd *hd, void *ud)
{
	(void)ng;
	struct h2c *c = ud;
	if (hd->type != NGHTTP2_HEADERS || !(hd->stream_id & 1) || hd->stream_id >= c->max_id)
		return 0;
	for (unsigned i = 0; i < c->ngaps; i++)
		if (hd->stream_id >= c->gaps[i].lo && hd->stream_id <= c->gaps[i].hi)
			return NGHTTP2_ERR_CALLBACK_FAILURE;  /* h2_data: GOAWAY(PROTOCOL_ERROR) */
	return 0;
}

static int on_header(nghttp2_session *ng, const nghttp2_frame *f, const uint8_t *name, size_t nl,
		     const uint8_t *value, size_t vl, uint8_t flags, void *ud)
{
	(void)ng;
	(void)flags;
	struct h2s *h = stream_of(ud, f->hd.stream_id);
	if (h == NULL || h->s == NULL || h->bad != REASON_OK)
		return 0;
	struct stream *s = h->s;
	struct msg *m = &s->req;
	m->head_bytes += (uint32_t)(nl + vl + 4);
	if (m->head_bytes > limits()->max_header_size)
		return h2s_fail_field(h, REASON_HEADERS_TOO_LARGE);
	if (f->headers.cat != NGHTTP2_HCAT_REQUEST)
		return 0;  /* trailers: counted, checked by nghttp2, dropped as for HTTP/1.1 */
	const char *n = (const char *)name, *v = (const char *)value;
	if (nl > 0 && n[0] == ':') {
		if (nl == 7 && memcmp(n, ":method", 7) == 0) {
			int ok;
			s->method = method_of(value, vl, &ok);
			h->has_method = 1;
			if (!ok) {
				s->method = STREAM_METHOD_UNKNOWN;
				return h2s_fail_field(h, REASON_METHOD_UNSUPPORTED);
			}
		} else if (nl == 5 && memcmp(n, ":path", 5) == 0) {
			if (vl > limits()->max_request_line)
				return h2s_fail_field(h, REASON_URI_TOO_LONG);
			msg_on_url(m, v, vl);
			h->has_path = 1;
		} else if (nl == 10 && memcmp(n, ":authority", 10) == 0) {
			h->auth_off = (uint32_t)m->raw.len;
			h->auth_len = (uint32_t)vl;
			buf_append(&m->raw, v, vl);
		}
		return 0;  /* :scheme: nghttp2 checked it is there */
	}
	if (msg_on_field(m, n, nl) < 0)
		return h2s_fail_field(h, REASON_HEADERS_TOO_LARGE);
	msg_on_value(m, v, vl);
	struct hdr *hd = msg_finish_header(m);
	if (hd == NULL)
		return h2s_fail_field(h, REASON_BAD_REQUEST);
	if (hdr_framing_alias(n, nl))
		return h2s_fail_field(h, REASON_BAD_REQUEST);
	const struct cfg_listener *l = h->c->cl->li->cfg;
	if (l->underscores != CFG_US_ALLOW && memchr(n, '_', nl)) {
		if (l->underscores == CFG_US_REJECT)
			return h2s_fail_field(h, REASON_UNDERSCORE_HEADER);
		hd->drop = 1;
	}
	return 0;
}

/* RFC 9113 8.2.3: cookie crumbs become one field for HTTP/1.1. */
static void join_cookies(struct msg *m)
{
	struct hdr *first = NULL;
	size_t total = 0;
	unsigned n = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *hd = &m->hdrs[i];
		if (hd->drop || hd->name_len != 6 || strncasecmp(msg_str(m, hd->name_off), "cookie", 6) != 0)
			continue;
		if (first == NULL)
			first = hd;
		total += hd->val_len + 2;
		n++;
	}
	if (n < 2)
		return;
	buf_reserve(&m->raw, total);  /* the copies below read from the arena */
	uint32_t off = (uint32_t)m->raw.len;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *hd = &m->hdrs[i];
		if (hd->drop || hd->name_len != 6 || strncasecmp(msg_str(m, hd->name_off), "cookie", 6) != 0)
			continue;
		if (m->raw.len > off)
			buf_append(&m->raw, "; ", 2);
		buf_append(&m->raw, m->raw.data + hd->val_off, hd->val_len);
		if (hd != first)
			hd->drop = 1;
	}
	first->val_off = off;
	first->val_len = (uint32_t)(m->raw.len - off);
}

/* Strict decimal, as HTTP/1.1's Content-Length: -1 for anything else. */
static int64_t parse_length(const char *v, size_t n)
{
	uint64_t x = 0;
	if (n == 0 || n > 19)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	return x > CONTENT_LENGTH_MAX ? -1 : (int64_t)x;
}

/* The request head as HTTP/2 defines it, mapped to what the stream layer
 * forwards as HTTP/1.1. */
static enum reason h2_check(struct h2s *h, int end_stream)
{
	struct stream *s = h->s;
	struct msg *m = &s->req;
	if (h->bad != REASON_OK)
		return h->bad;
	if (h->has_method && s->method == HTTP_CONNECT)
		return REASON_METHOD_UNSUPPORTED;  /* before :path, which CONNECT has none of */
	if (!h->has_method || !h->has_path || m->url_len == 0)
		return REASON_BAD_REQUEST;
	const char *path = msg_str(m, m->url_off);
	if (path[0] != '/' && !(s->method == HTTP_OPTIONS && m->url_len == 1 && path[0] == '*'))
		return REASON_BAD_REQUEST;
	/* What an HTTP/1.1 request line may carry (llhttp's strict URL check):
	 * visible ASCII. nghttp2 lets other bytes through in :path. */
	for (uint32_t i = 0; i < m->url_len; i++)
		if ((unsigned char)path[i] < 0x21 || (unsigned char)path[i] > 0x7e)
			return REASON_BAD_REQUEST;
	int hosts = msg_count(m, HDR_HOST);
	if (hosts > 1)
		return REASON_MISSING_HOST;
	const struct hdr *host = msg_find(m, HDR_HOST);
	if (h->auth_len) {
		/* RFC 9113 8.3.1: Host and :authority must agree; a proxy that
		 * forwarded both would route one and let the backend read the
		 * other. */
		if (host && (host->val_len != h->auth_len ||
			     strncasecmp(msg_str(m, host->val_off), msg_str(m, h->auth_off), h->auth_len) != 0))
			return REASON_BAD_REQUEST;
		if (host == NULL) {
			buf_reserve(&m->raw, 4 + h->auth_len);  /* msg_add copies from the arena */
			msg_add(m, "Host", msg_str(m, h->auth_off), h->auth_len);
			host = msg_find(m, HDR_HOST);
		}
	}
	if (host == NULL)
		return REASON_MISSING_HOST;
	if (!host_valid(msg_str(m, host->val_off), host->val_len))
		return REASON_MISSING_HOST;
	int clens = msg_count(m, HDR_CONTENT_LENGTH);
	if (clens > 1)
		return REASON_BAD_REQUEST;
	if (clens == 1) {
		const struct hdr *cl = msg_find(m, HDR_CONTENT_LENGTH);
		int64_t n = parse_length(msg_str(m, cl->val_off), cl->val_len);
		/* DATA that came with the head must agree with it now: nghttp2's
		 * own reset for it is only queued, and the head is about to go. */
		if (n >= 0 && (h->early.len > (uint64_t)n || (h->req_end && h->early.len != (uint64_t)n)))
			return REASON_BAD_REQUEST;
		if (n < 0)
			return REASON_BAD_REQUEST;
		s->req_clen = (uint64_t)n;
		msg_canonical_length(m, s->req_clen);
	} else if (!end_stream) {
		s->req_chunked = 1;  /* a body of unknown length: chunked to the backend */
	}
	join_cookies(m);
	return REASON_OK;
}

/* END_STREAM from the client (h->req_end): the request is complete. */
static void h2s_req_end(struct h2s *h)
{
	struct stream *s = h->s;
	if (s == NULL || !s->head_done || s->req_done)
		return;
	enum reason r = codec_ev->end(s);
	if (r != REASON_OK) {
		codec_ev->fail(s, r);
		return;
	}
	h2s_pushed(h);
}

/* A complete head goes to the stream layer only once the input it came in
 * has been read: a stream that the same input resets (Rapid Reset, or a
 * browser's cancel) is gone by then and never reaches a backend. DATA that
 * came meanwhile waited in h->early. */
static void h2s_dispatch(struct h2s *h)
{
	struct stream *s = h->s;
	h->head_ready = 0;
	h->c->heads_ready--;
	if (s == NULL)
		return;
	s->head_done = 1;
	deadline_set(&h2_deadlines, &h->dl, 0);
	enum reason r = h2_check(h, h->head_end);
	if (r == REASON_OK)
		r = codec_ev->head(s);
	if (r == REASON_OK && h->early.len && h->s) {
		r = codec_ev->body(s, h->early.data, h->early.len);
		h->early.len = 0;
	}
	if (r != REASON_OK) {
		codec_ev->fail(s, r);
		return;
	}
	if (h->s == NULL)
		return;
	if (h->req_end)
		h2s_req_end(h);
	else
		h2s_pushed(h);
}

static void h2c_dispatch(struct h2c *c)
{
	struct list *pos = c->streams.next;
	while (pos != &c->streams && c->heads_ready) {
		struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
		pos = pos->next;  /* nothing is freed here: in_recv holds nghttp2's callbacks */
		if (h->head_ready)
			h2s_dispatch(h);
	}
}

/* A client that resets streams faster than it lets them complete (CVE-2023-
 * 44487, Rapid Reset) costs us work and gives nothing back: past 100 resets,
 * more than twice the completed streams ends the connection. nghttp2's own
 * token bucket (1,000, then 33/s) bounds the rate on top. */
#define RESETS_FREE 100

static void h2c_count_reset(struct h2c *c)
{
	c->client_resets++;
	if (!c->cut && c->client_resets > RESETS_FREE && c->client_resets > 2 * c->completed) {
		c->cut = 1;
		log_warn("%s h2: %llu streams reset by the client, %llu completed: closing (rapid reset)",
			 c->cl->peer, (unsigned long long)c->client_resets, (unsigned long long)c->completed);
		nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
	}
}

/* Frames that cost us work and move no request forward: PRIORITY, PING
 * and SETTINGS (not ACKs), and DATA with nothing in it and no end. A client
 * that reads what we send escapes nghttp2's limit on queued ACKs, so past
 * GLITCHES_FREE of them, more than GLITCHES_PER_STREAM per completed stream
 * ends the connection (the SETTINGS/PING/PRIORITY and empty-frame floods;
 * CVE-2019-9512, -9513, -9515, -9518). WINDOW_UPDATE is not counted: a long
 * download has the client send one per window it empties. */
#define GLITCHES_FREE 1000
#define GLITCHES_PER_STREAM 100

static void h2c_count_glitch(struct h2c *c)
{
	c->glitches++;
	if (!c->cut && c->glitches > GLITCHES_FREE && c->glitches > GLITCHES_PER_STREAM * c->completed) {
		c->cut = 1;
		log_warn("%s h2: %llu control or empty frames for %llu completed streams: closing (flood)",
			 c->cl->peer, (unsigned long long)c->glitches, (unsigned long long)c->completed);
		nghttp2_session_terminate_session(c->ng, NGHTTP2_ENHANCE_YOUR_CALM);
	}
}

static int on_frame_recv(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
	(void)ng;
	struct h2c *gc = ud;
	switch (f->hd.type) {
	case NGHTTP2_PRIORITY:
		h2c_count_glitch(gc);
		return 0;
	case NGHTTP2_SETTINGS:
	case NGHTTP2_PING:
		if (!(f->hd.flags & NGHTTP2_FLAG_ACK))
			h2c_count_glitch(gc);
		break;
	case NGHTTP2_DATA:
		if (f->hd.length == 0 && !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
			h2c_count_glitch(gc);
		break;
	default:
		break;
	}
	if (f->hd.type == NGHTTP2_PING) {
		struct h2c *c = ud;
		if ((f->hd.flags & NGHTTP2_FLAG_ACK) && c->draining && !c->goaway &&
		    memcmp(f->ping.opaque_data, drain_ping, sizeof(drain_ping)) == 0)
			deadline_set(&h2c_deadlines, &c->dl, DRAIN_GRACE_MS);
		return 0;
	}
	if (f->hd.type == NGHTTP2_RST_STREAM) {
		struct h2s *r = stream_of(ud, f->hd.stream_id);
		if (r != NULL && r->s != NULL)
			h2c_count_reset(r->c);
		return 0;
	}
	if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA)
		return 0;
	struct h2s *h = stream_of(ud, f->hd.stream_id);
	if (h == NULL)
		return 0;
	int end = (f->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
	if (end)
		h->req_end = 1;
	if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) {
		h->head_ready = 1;
		h->head_end = (uint8_t)end;
		h->c->heads_ready++;
		return 0;
	}
	if (h->head_ready)
		return 0;  /* the dispatch takes it from here */
	if (end)
		h2s_req_end(h);
	else if (f->hd.type == NGHTTP2_DATA)
		h2s_pushed(h);
	return 0;
}

static int on_data_chunk(nghttp2_session *ng, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
			 void *ud)
{
	(void)flags;
	(void)ud;
	nghttp2_session_consume_connection(ng, len);
	struct h2s *h = stream_of(ud, id);
	if (h == NULL)
		return 0;
	h->unconsumed += (uint32_t)len;
	if (h->head_ready) {
		buf_append(&h->early, (const char *)data, len);
		return 0;
	}
	struct stream *s = h->s;
	if (s == NULL || !s->head_done || s->req_done)
		return 0;  /* answered already: read and dropped (credited by h2s_pushed) */
	enum reason r = codec_ev->body(s, (const char *)data, len);
	if (r != REASON_OK)
		codec_ev->fail(s, r);
	return 0;
}

static int on_stream_close(nghttp2_session *ng, int32_t id, uint32_t error_code, void *ud)
{
	(void)ng;
	struct h2s *h = stream_of(ud, id);
	if (h == NULL)
		return 0;
	struct stream *s = h->s;
	if (s != NULL) {
		/* Reset (by the client, or by nghttp2 for a malformed request)
		 * before the stream layer finished it. */
		if (s->reason == REASON_OK)
			s->reason = error_code == NGHTTP2_PROTOCOL_ERROR && !s->head_done ? REASON_BAD_REQUEST
											 : REASON_CLIENT_ABORT;
		codec_ev->abort(s);
		h2s_detach(h);
	}
	stream_set(ud, id, NULL);
	h2s_free_one(h);
	return 0;
}

/* Our response ended while the client still sends its body: nothing more
 * of it will be read (RFC 9113 8.1). */
static int on_frame_send(nghttp2_session *ng, const nghttp2_frame *f, void *ud)
{
	(void)ud;
	if ((f->hd.type != NGHTTP2_DATA && f->hd.type != NGHTTP2_HEADERS) || !(f->hd.flags & NGHTTP2_FLAG_END_STREAM))
		return 0;
	struct h2s *h = stream_of(ud, f->hd.stream_id);
	if (h != NULL && !h->req_end)
		nghttp2_submit_rst_stream(ng, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
	return 0;
}

/* ---- responses ---- */

static ssize_t body_read(nghttp2_session *ng, int32_t id, uint8_t *dst, size_t cap, uint32_t *flags,
			 nghttp2_data_source *src, void *ud)
{
	(void)ng;
	(void)id;
	(void)ud;
	struct h2s *h = src->ptr;
	size_t avail = h->out.len - h->out_off;
	size_t n = avail < cap ? avail : cap;
	if (n)  /* an empty buffer may have no storage yet */
		memcpy(dst, h->out.data + h->out_off, n);
	h->out_off += n;
	if (h->s == NULL && n > 0)  /* progress: the client_send bound starts over */
		deadline_set(&h2_deadlines, &h->dl, timeouts()->client_send_ms);
	if (h->out_off == h->out.len)
		h->out.len = h->out_off = 0;
	if (h->out.len == 0 && h->out_eof) {
		*flags |= NGHTTP2_DATA_FLAG_EOF;
		return (ssize_t)n;
	}
	if (n == 0) {
		h->deferred = 1;
		return NGHTTP2_ERR_DEFERRED;
	}
	return (ssize_t)n;
}

static void nv_reserve(size_t n)
{
	if (n <= nvs_cap)
		return;
	nvs_cap = n + 16;
	nvs = realloc(nvs, nvs_cap * sizeof(*nvs));
	AN(nvs);
}

static void nv_set(nghttp2_nv *nv, const char *name, size_t nl, const char *value, size_t vl)
{
	nv->name = (uint8_t *)(uintptr_t)name;
	nv->namelen = nl;
	nv->value = (uint8_t *)(uintptr_t)value;
	nv->valuelen = vl;
	nv->flags = NGHTTP2_NV_FLAG_NONE;
}

/* Names of the fields in M (not dropped) and in the raw lines EXTRA
 * ("Name: value\r\n"), lowercased into nv_names, which is sized first so
 * that the pointers taken stay valid. Returns the count added at NVS+AT. */
static size_t nv_add_fields(size_t at, const struct msg *m, const struct buf *extra)
{
	size_t need = 0, count = 0;
	if (m) {
		for (uint32_t i = 0; i < m->nhdrs; i++)
			if (!m->hdrs[i].drop) {
				need += m->hdrs[i].name_len;
				count++;
			}
	}
	if (extra)
		for (size_t i = 0; i < extra->len; i++)
			count += extra->data[i] == '\n';
	if (extra)
		need += extra->len;
	nv_reserve(at + count);
	nv_names.len = 0;
	buf_reserve(&nv_names, need + 1);
	size_t k = at;
	if (m) {
		for (uint32_t i = 0; i < m->nhdrs; i++) {
			const struct hdr *hd = &m->hdrs[i];
			if (hd->drop)
				continue;
			char *lc = nv_names.data + nv_names.len;
			const char *nm = msg_str(m, hd->name_off);
			ascii_lower_copy(lc, nm, hd->name_len);
			nv_names.len += hd->name_len;
			nv_set(&nvs[k++], lc, hd->name_len, msg_str(m, hd->val_off), hd->val_len);
		}
	}
	if (extra && extra->len) {  /* an empty buffer may have no storage: no pointer arithmetic on it */
		const char *p = extra->data, *end = p + extra->len;
		while (p < end) {
			const char *eol = memchr(p, '\n', (size_t)(end - p));
			const char *colon = memchr(p, ':', (size_t)(end - p));
			if (eol == NULL || colon == NULL || colon > eol)
				break;
			const char *v = colon + 1, *ve = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
			while (v < ve && (*v == ' ' || *v == '\t'))
				v++;
			size_t nl = (size_t)(colon - p);
			char *lc = nv_names.data + nv_names.len;
			ascii_lower_copy(lc, p, nl);
			nv_names.len += nl;
			nv_set(&nvs[k++], lc, nl, v, (size_t)(ve - v));
			p = eol + 1;
		}
	}
	return k - at;
}

static size_t nv_bytes(size_t n)
{
	size_t b = 0;
	for (size_t i = 0; i < n; i++)
		b += nvs[i].namelen + nvs[i].valuelen + 4;
	return b;
}

static void status_text3(char *dst, int status)
{
	dst[0] = (char)('0' + status / 100 % 10);
	dst[1] = (char)('0' + status / 10 % 10);
	dst[2] = (char)('0' + status % 10);
}

/* Submit the response head held by send_head. */
static void h2s_submit_head(struct h2s *h)
{
	struct stream *s = h->s;
	struct h2c *c = h->c;
	h->head_pending = 0;
	c->heads_pending--;
	char st[3];
	status_text3(st, h->head_status);
	nv_reserve(1);
	nv_set(&nvs[0], ":status", 7, st, 3);
	size_t n = 1 + nv_add_fields(1, &s->resp, &s->insp.resp_hdrs);
	s->bytes_out += nv_bytes(n);
	nghttp2_data_provider dp = { .source.ptr = h, .read_callback = body_read };
	int bodyless = (h->head_flags & RESP_BODYLESS) || s->is_head;
	h->head_sent = 1;
	if (nghttp2_submit_response(c->ng, h->id, nvs, n, bodyless ? NULL : &dp) != 0)
		log_info("%s h2 stream %d: response not submitted", c->cl->peer, h->id);
}

/* ---- the connection ---- */

static ssize_t no_send(nghttp2_session *ng, const uint8_t *data, size_t len, int flags, void *ud)
{
	(void)ng;
	(void)data;
	(void)len;
	(void)flags;
	(void)ud;
	return NGHTTP2_ERR_WOULDBLOCK;  /* frames are taken with nghttp2_session_mem_send */
}

static struct h2c *h2c_new(struct client *cl)
{
	const struct cfg_listener *l = cl->li->cfg;
	struct h2c *c = calloc(1, sizeof(*c));
	AN(c);
	c->cl = cl;
	list_init(&c->streams);
	nghttp2_option *opt;
	AZ(nghttp2_option_new(&opt));
	nghttp2_option_set_no_auto_window_update(opt, 1);
	AZ(nghttp2_session_server_new2(&c->ng, h2_callbacks, c, opt));
	nghttp2_option_del(opt);
	nghttp2_settings_entry iv[] = {
		{ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, l->h2_max_streams },
		{ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, l->h2_window },
		{ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, limits()->max_header_size },
		{ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 },
	};
	AZ(nghttp2_submit_settings(c->ng, NGHTTP2_FLAG_NONE, iv, ARRAY_SIZE(iv)));
	cl->codec_ctx = c;
	stats_add(cl->li->st, STAT_H2_CONNS, 1);
	stats_gauge_add(cl->li->st, GAUGE_H2_CONNS, 1);
	return c;
}

/* The connection's timer: a stream's own timers govern while any is open;
 * with none, the keepalive wait (or the last bytes' delivery). */
static void h2c_conn_timer(struct h2c *c)
{
	struct client *cl = c->cl;
	if (cl->state != CL_OPEN)
		return;
	if (conn_writing(cl)) {
		/* A write in flight must progress within client_send (h2_sent
		 * re-arms it on progress); otherwise the client is not reading. */
		if (!c->send_timer) {
			c->send_timer = 1;
			conn_timer(cl, timeouts()->client_send_ms);
		}
		return;
	}
	c->send_timer = 0;
	if (c->nactive)
		conn_timer(cl, 0);
	else
		conn_keepalive_wait(cl);
}

/* Frame what may go now and write it; then tell streams whose output
 * drained that their backends may send again. */
/* Frame what nghttp2 has to send into the connection's output, up to the
 * high water mark, without writing it. Returns the last mem_send result
 * (0: nothing more), or -1 once the connection is closed. */
static ssize_t h2c_frame(struct h2c *c)
{
	struct client *cl = c->cl;
	ssize_t n = 0;
	while (conn_queued(cl) < OUT_HIGH_WATER) {
		const uint8_t *p;
		n = nghttp2_session_mem_send(c->ng, &p);
		if (n < 0) {
			log_info("%s h2: %s", cl->peer, nghttp2_strerror((int)n));
			conn_close(cl);
			return -1;
		}
		if (n == 0)
			break;
		buf_append(&cl->out.pending, p, (size_t)n);
	}
	return n;
}

/* Flushes wait for the end of the loop iteration, so the responses that
 * several backends delivered in one iteration leave in one write (and one
 * TLS record) per connection, not one each. They run in libuv's prepare
 * phase, the last before poll blocks: whatever phase asked for a flush (I/O
 * callbacks, timers, close callbacks), it happens before the loop waits. */
static struct list flush_due = { &flush_due, &flush_due };
static uv_prepare_t flush_prepare;
static void h2c_flush_now(struct h2c *c);

static void flush_prepare_cb(uv_prepare_t *h)
{
	(void)h;
	while (!list_empty(&flush_due)) {
		struct h2c *c = CONTAINER_OF(flush_due.next, struct h2c, flush_link);
		list_del(&c->flush_link);
		c->flush_due = 0;
		h2c_flush_now(c);
	}
	uv_prepare_stop(&flush_prepare);
}

static void h2c_flush(struct h2c *c)
{
	if (c->in_recv) {
		c->flush_wanted = 1;
		return;
	}
	if (c->flush_due || c->cl->state == CL_CLOSING)
		return;
	c->flush_due = 1;
	list_add_tail(&flush_due, &c->flush_link);
	if (!uv_is_active((uv_handle_t *)&flush_prepare))
		uv_prepare_start(&flush_prepare, flush_prepare_cb);
}

static void h2c_flush_now(struct h2c *c)
{
	struct client *cl = c->cl;
	if (cl->state == CL_CLOSING)
		return;
	if (c->heads_pending) {
		struct list *pos;
		for (pos = c->streams.next; pos != &c->streams && c->heads_pending; pos = pos->next) {
			struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
			if (h->head_pending)
				h2s_submit_head(h);
		}
	}
	/* Frame up to the high water mark and write; a write that completes
	 * at once makes room again, and no callback will say so. */
	for (;;) {
		ssize_t n = h2c_frame(c);
		if (n < 0)
			return;
		conn_flush(cl);
		if (cl->state == CL_CLOSING)
			return;
		if (n == 0 || conn_writing(cl))
			break;
	}
	/* A client that does not read what we send gets no more of its input
	 * read (its PINGs, SETTINGS and requests would each queue more output);
	 * client_send then ends it. */
	if (conn_queued(cl) >= OUT_HIGH_WATER)
		conn_read_pause(cl, 1);
	else if (cl->read_stopped && conn_queued(cl) < OUT_LOW_WATER)
		conn_read_pause(cl, 0);
	struct list *pos = c->streams.next;
	while (pos != &c->streams) {
		struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
		pos = pos->next;
		struct stream *s = h->s;
		if (s == NULL || !h->was_full || h->out.len - h->out_off >= STREAM_LOW_WATER)
			continue;
		h->was_full = 0;
		if (s->req_done && s->state == ST_EXCHANGE)
			deadline_set(&h2_deadlines, &h->dl, 0);
		codec_ev->writable(s);
	}
	if (!nghttp2_session_want_read(c->ng) && !nghttp2_session_want_write(c->ng)) {
		/* An abuser's input is not read to its end (CL_LINGER would). */
		if (c->cut)
			conn_close(cl);
		else
			conn_end(cl, 1);
		return;
	}
	if (c->goaway && c->nstreams == 0 && conn_queued(cl) == 0) {
		conn_end(cl, 0);
		return;
	}
	h2c_conn_timer(c);
}

static void h2_data(struct client *cl, const char *data, size_t len)
{
	struct h2c *c = conn_of(cl);
	if (c == NULL)
		c = h2c_new(cl);
	c->in_recv = 1;
	ssize_t n = nghttp2_session_mem_recv(c->ng, (const uint8_t *)data, len);
	c->in_recv = 0;
	if (n >= 0 && c->heads_ready) {
		/* nghttp2 only queues the RST_STREAM of a stream it found
		 * malformed in this input (bad trailers, DATA past its length):
		 * frame those first (written with the rest below), so that such
		 * streams close before their heads are dispatched. */
		if (h2c_frame(c) < 0 || cl->state != CL_OPEN)
			return;
		c->in_recv = 1;
		h2c_dispatch(c);
		c->in_recv = 0;
	}
	if (n < 0) {
		log_info("%s h2: %s", cl->peer, nghttp2_strerror((int)n));
		if (n != NGHTTP2_ERR_BAD_CLIENT_MAGIC)
			nghttp2_session_terminate_session(c->ng, NGHTTP2_PROTOCOL_ERROR);
		c->flush_wanted = 0;
		h2c_flush_now(c);
		/* A flood is not read to its end (CL_LINGER would): closed now. */
		if (n == NGHTTP2_ERR_FLOODED)
			conn_close(cl);
		else if (cl->state == CL_OPEN)
			conn_end(cl, 1);
		return;
	}
	c->flush_wanted = 0;
	h2c_flush(c);
}

static void h2_eof(struct client *cl)
{
	conn_close(cl);
}

/* The connection's own timer fired with streams open: the client has not
 * taken our bytes within client_send. */
static void h2_timeout(struct client *cl)
{
	log_info("%s h2: client did not read within client_send", cl->peer);
	struct h2c *c = conn_of(cl);
	struct list *pos;
	for (pos = c->streams.next; pos != &c->streams; pos = pos->next) {
		struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
		if (h->s && h->s->reason == REASON_OK)
			h->s->reason = REASON_CLIENT_SEND_TIMEOUT;
	}
	conn_close(cl);
}

static void h2_sent(struct client *cl, int more)
{
	struct h2c *c = conn_of(cl);
	if (more) {
		conn_timer(cl, timeouts()->client_send_ms);
		if (c)
			c->send_timer = 1;
		return;
	}
	if (c == NULL) {
		conn_keepalive_wait(cl);
		return;
	}
	c->send_timer = 0;
	h2c_flush(c);
}

static void h2_fail(struct client *cl, enum reason r)
{
	(void)r;
	conn_close(cl);
}

static void h2_error(struct client *cl, enum reason r)
{
	struct h2c *c = conn_of(cl);
	if (c == NULL)
		return;
	struct list *pos;
	for (pos = c->streams.next; pos != &c->streams; pos = pos->next) {
		struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
		if (h->s)
			h->s->reason = r;
	}
}

static void h2_close(struct client *cl)
{
	struct h2c *c = conn_of(cl);
	if (c == NULL)
		return;
	struct list *pos;
	for (pos = c->streams.next; pos != &c->streams; pos = pos->next) {
		struct h2s *h = CONTAINER_OF(pos, struct h2s, link);
		if (h->s)
			codec_ev->abort(h->s);
	}
}

static void h2_closed(struct client *cl)
{
	struct h2c *c = conn_of(cl);
	if (c == NULL)
		return;
	while (!list_empty(&c->streams)) {
		struct h2s *h = CONTAINER_OF(c->streams.next, struct h2s, link);
		h2s_detach(h);
		h2s_free_one(h);
	}
	c->last_h = NULL;
	deadline_set(&h2c_deadlines, &c->dl, 0);
	if (c->flush_due)
		list_del(&c->flush_link);
	nghttp2_session_del(c->ng);
	stats_gauge_add(cl->li->st, GAUGE_H2_CONNS, -1);
	cl->codec_ctx = NULL;
	free(c);
}

static void h2c_goaway(struct h2c *c)
{
	c->goaway = 1;
	nghttp2_submit_goaway(c->ng, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(c->ng),
			      NGHTTP2_NO_ERROR, NULL, 0);
}

static void h2c_deadline_fired(struct deadline *d)
{
	struct h2c *c = CONTAINER_OF(d, struct h2c, dl);
	if (c->draining && !c->goaway && c->cl->state == CL_OPEN) {
		h2c_goaway(c);
		h2c_flush(c);
	}
}

static void h2_drain(struct client *cl)
{
	struct h2c *c = conn_of(cl);
	if (c == NULL || c->draining || c->goaway)
		return;
	c->draining = 1;
	nghttp2_submit_shutdown_notice(c->ng);
	nghttp2_submit_ping(c->ng, NGHTTP2_FLAG_NONE, drain_ping);
	h2c_flush(c);
}

static int h2_idle(const struct client *cl)
{
	const struct h2c *c = conn_of(cl);
	return c == NULL || c->nactive == 0;
}

/* ---- from the stream ---- */

static void h2_timer(struct stream *s, uint64_t ms)
{
	deadline_set(&h2_deadlines, &of(s)->dl, ms);
}

/* A mark: the body bytes queued, and whether a head is held (bit 0). */
static size_t h2_out_mark(const struct stream *s)
{
	const struct h2s *h = of(s);
	return (h->out.len << 1) | h->head_pending;
}

static void h2_out_rewind(struct stream *s, size_t mark)
{
	struct h2s *h = of(s);
	h->out.len = mark >> 1;
	if (!(mark & 1) && h->head_pending) {
		h->head_pending = 0;
		h->c->heads_pending--;
	}
}

static void h2_flush(struct stream *s)
{
	h2c_flush(of(s)->c);
}

static size_t h2_queued(const struct stream *s)
{
	const struct h2s *h = of(s);
	size_t q = h->out.len - h->out_off;
	if (q > 0)
		((struct h2s *)h)->was_full = 1;
	return q;
}

static void h2_resume(struct stream *s)
{
	struct h2s *h = of(s);
	if (h->held && !s->req_done) {
		h->held = 0;
		h2s_consume(h);
		h2c_flush(h->c);
		if (s->state == ST_EXCHANGE)
			deadline_set(&h2_deadlines, &h->dl, timeouts()->client_body_ms);
	}
}

static void h2_submit_status(struct h2s *h, int status)
{
	char st[3];
	status_text3(st, status);
	nv_reserve(1);
	nv_set(&nvs[0], ":status", 7, st, 3);
	nghttp2_submit_headers(h->c->ng, NGHTTP2_FLAG_NONE, h->id, NULL, nvs, 1, NULL);
}

static void h2_send_continue(struct stream *s)
{
	struct h2s *h = of(s);
	h2_submit_status(h, 100);
	h2c_flush(h->c);
}

static void h2_send_interim(struct stream *s, int status)
{
	struct h2s *h = of(s);
	if (status == 100)
		return;  /* sluice sends its own 100 Continue */
	char st[3];
	status_text3(st, status);
	nv_reserve(1);
	nv_set(&nvs[0], ":status", 7, st, 3);
	size_t n = 1 + nv_add_fields(1, &s->resp, NULL);
	s->bytes_out += nv_bytes(n);
	nghttp2_submit_headers(h->c->ng, NGHTTP2_FLAG_NONE, h->id, NULL, nvs, n, NULL);
}

static void h2_send_head(struct stream *s, int status, unsigned flags)
{
	struct h2s *h = of(s);
	if (flags & RESP_UPGRADE)
		return;  /* never asked for: HTTP/2 requests carry no Upgrade */
	h->head_status = status;
	h->head_flags = flags;
	h->head_pending = 1;
	h->c->heads_pending++;
}

static void h2_send_data(struct stream *s, const char *data, size_t len)
{
	struct h2s *h = of(s);
	buf_append(&h->out, data, len);
	s->bytes_out += len;
	if (h->deferred) {
		h->deferred = 0;
		nghttp2_session_resume_data(h->c->ng, h->id);
	}
}

static void h2_send_end(struct stream *s)
{
	struct h2s *h = of(s);
	h->out_eof = 1;
	if (h->deferred) {
		h->deferred = 0;
		nghttp2_session_resume_data(h->c->ng, h->id);
	}
}

/* sluice's own answer (an error, the hook's deny or redirect, a route's
 * response), as HTTP/1.1 gives it, in HEADERS and DATA. */
static void h2_send_local(struct stream *s, enum reason r, int close)
{
	(void)close;  /* the stream ends; the connection goes on */
	struct h2s *h = of(s);
	struct txn_insp *in = &s->insp;
	int status = s->status;
	struct local_answer a;
	local_answer(s, r, &a);
	if (h->head_pending) {
		h->head_pending = 0;
		h->c->heads_pending--;
	}
	h->out.len = h->out_off = 0;
	char st[3], len[24];
	status_text3(st, status);
	int ll = snprintf(len, sizeof(len), "%zu", a.blen);
	size_t n = 1 + (a.route ? nv_add_fields(1, NULL, &in->resp_hdrs) : 0);
	nv_reserve(n + 3);
	nv_set(&nvs[0], ":status", 7, st, 3);
	nv_set(&nvs[n++], "content-type", 12, a.ctype, strlen(a.ctype));
	nv_set(&nvs[n++], "content-length", 14, len, (size_t)ll);
	if (a.redirect)
		nv_set(&nvs[n++], "location", 8, in->local.data, in->local.len);
	s->bytes_out += nv_bytes(n);
	/* s->is_head is the stream layer's; a head this codec refused never got there */
	int head = s->is_head || s->method == HTTP_HEAD;
	if (!head) {
		buf_append(&h->out, a.body, a.blen);
		s->bytes_out += a.blen;
	}
	h->out_eof = 1;
	h->head_sent = 1;
	nghttp2_data_provider dp = { .source.ptr = h, .read_callback = body_read };
	nghttp2_submit_response(h->c->ng, h->id, nvs, n, head ? NULL : &dp);
}

static void h2_tunnel(struct stream *s, const char *data, size_t len)
{
	(void)data;
	(void)len;
	codec_ev->fail(s, REASON_BACKEND_BAD_RESPONSE);
}

static void h2_tunnel_end(struct stream *s)
{
	(void)s;
}

/* The exchange is over and logged: the stream goes back; nghttp2 keeps the
 * h2s until its last frame is out. */
static void h2_done(struct stream *s, int close)
{
	(void)close;
	struct h2s *h = of(s);
	struct h2c *c = h->c;
	if (h->head_pending)  /* built from the stream, which goes back now */
		h2s_submit_head(h);
	if (!h->head_sent) {
		/* No response at all (the stream layer gave up quietly). */
		nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, h->id, NGHTTP2_INTERNAL_ERROR);
	} else if (!h->out_eof) {
		h->out_eof = 1;
		if (h->deferred) {
			h->deferred = 0;
			nghttp2_session_resume_data(c->ng, h->id);
		}
	}
	c->completed++;
	h2s_detach(h);
	if (h->out.len - h->out_off > 0 || !h->head_sent || h->deferred)
		deadline_set(&h2_deadlines, &h->dl, timeouts()->client_send_ms);
	h2c_flush(c);
}

static void h2_abort(struct stream *s)
{
	struct h2s *h = of(s);
	struct h2c *c = h->c;
	nghttp2_submit_rst_stream(c->ng, NGHTTP2_FLAG_NONE, h->id, NGHTTP2_INTERNAL_ERROR);
	h2s_detach(h);
	h2c_flush(c);
}

const struct codec_ops h2_codec = {
	.name = "h2",
	.data = h2_data,
	.eof = h2_eof,
	.timeout = h2_timeout,
	.sent = h2_sent,
	.fail = h2_fail,
	.error = h2_error,
	.close = h2_close,
	.closed = h2_closed,
	.drain = h2_drain,
	.idle = h2_idle,
	.timer = h2_timer,
	.out_mark = h2_out_mark,
	.out_rewind = h2_out_rewind,
	.flush = h2_flush,
	.queued = h2_queued,
	.resume = h2_resume,
	.send_continue = h2_send_continue,
	.send_interim = h2_send_interim,
	.send_head = h2_send_head,
	.send_data = h2_send_data,
	.send_end = h2_send_end,
	.send_local = h2_send_local,
	.tunnel = h2_tunnel,
	.done = h2_done,
	.tunnel_end = h2_tunnel_end,
	.abort = h2_abort,
};

void h2_init(void)
{
	deadline_heap_init(&h2_deadlines, &W->loop, h2s_deadline_fired);
	deadline_heap_init(&h2c_deadlines, &W->loop, h2c_deadline_fired);
	uv_prepare_init(&W->loop, &flush_prepare);
	uv_unref((uv_handle_t *)&flush_prepare);  /* a pending flush keeps no loop alive by itself */
	if (h2_callbacks)
		return;
	AZ(nghttp2_session_callbacks_new(&h2_callbacks));
	nghttp2_session_callbacks_set_send_callback(h2_callbacks, no_send);
	nghttp2_session_callbacks_set_on_begin_headers_callback(h2_callbacks, on_begin_headers);
	nghttp2_session_callbacks_set_on_begin_frame_callback(h2_callbacks, on_begin_frame);
	nghttp2_session_callbacks_set_on_header_callback(h2_callbacks, on_header);
	nghttp2_session_callbacks_set_on_frame_recv_callback(h2_callbacks, on_frame_recv);
	nghttp2_session_callbacks_set_on_data_chunk_recv_callback(h2_callbacks, on_data_chunk);
	nghttp2_session_callbacks_set_on_stream_close_callback(h2_callbacks, on_stream_close);
	nghttp2_session_callbacks_set_on_frame_send_callback(h2_callbacks, on_frame_send);
}
