/* The backend side's HTTP/1.1 response parser (upstream_h1.h).
 *
 * Owns: each backend connection's llhttp response parser (bc->parser) and
 * what a backend's response must be for sluice to relay it: a valid status
 * line, one "chunked" at most, a 1xx without a body, a sane length.
 * May call: httpmsg; the stream only through the struct upstream_events
 * registered with upstream_events_set(). It fills in the stream's response head (s->resp). */
#include <string.h>
#include "upstream_h1.h"
#include "h1head.h"
#include "worker.h"

static llhttp_settings_t resp_settings;
static const struct upstream_events *upstream_ev;

static struct stream *resp_stream(llhttp_t *p)
{
	return ((struct bconn *)p->data)->strm;
}

static int resp_fail(llhttp_t *p)
{
	resp_stream(p)->reason = REASON_BACKEND_BAD_RESPONSE;
	return -1;
}

static int on_resp_begin(llhttp_t *p)
{
	msg_reset(&resp_stream(p)->resp, W->cfg->limits.max_headers);
	return 0;
}

static int on_resp_status(llhttp_t *p, const char *at, size_t len)
{
	msg_on_url(&resp_stream(p)->resp, at, len);
	return 0;
}

static int on_resp_field(llhttp_t *p, const char *at, size_t len)
{
	struct msg *m = &resp_stream(p)->resp;
	if (msg_on_field(m, at, len) < 0 || m->head_bytes > W->cfg->limits.max_header_size)
		return resp_fail(p);
	return 0;
}

static int on_resp_value(llhttp_t *p, const char *at, size_t len)
{
	struct msg *m = &resp_stream(p)->resp;
	if (msg_on_value(m, at, len) < 0 || m->head_bytes > W->cfg->limits.max_header_size)
		return resp_fail(p);
	return 0;
}

static int on_resp_value_done(llhttp_t *p)
{
	return msg_finish_header(&resp_stream(p)->resp) ? 0 : resp_fail(p);
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

static void drop_lengths(struct msg *m)
{
	for (uint32_t i = 0; i < m->nhdrs; i++)
		if (m->hdrs[i].kind == HDR_CONTENT_LENGTH)
			m->hdrs[i].drop = 1;
}

static int on_resp_headers_done(llhttp_t *p)
{
	struct stream *s = resp_stream(p);
	struct msg *m = &s->resp;
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
	if (status >= 100 && status < 200 && status != 101) {
		/* A 1xx has no body (RFC 9112 6.3); one that announces a body
		 * means the backend and we disagree on where the final response
		 * starts. */
		if ((p->flags & (F_CHUNKED | F_TRANSFER_ENCODING)) ||
		    ((p->flags & F_CONTENT_LENGTH) && p->content_length > 0))
			return resp_fail(p);
		/* Nor a length, then (RFC 9110 8.6: never sent in a 1xx); a
		 * relayed "00" is one more spelling for the client to judge. */
		drop_lengths(m);
		upstream_ev->resp_interim(s, status);
		return 1;  /* no body, whatever the headers say */
	}
	if (status == 101) {
		if (!s->upgrade)
			return resp_fail(p);
		upstream_ev->resp_head(s, status, RESP_UPGRADE);
		return 2;
	}
	int bodyless = s->is_head || status == 204 || status == 304;
	if (status == 204)  /* it has no body, so no length to announce */
		drop_lengths(m);
	unsigned flags = bodyless ? RESP_BODYLESS : 0;
	if (p->flags & F_CHUNKED)
		flags |= RESP_CHUNKED;
	if (p->flags & F_CONTENT_LENGTH) {
		flags |= RESP_LENGTH;
		msg_canonical_length(m, p->content_length);
	}
	upstream_ev->resp_head(s, status, flags);
	/* 1 tells llhttp there is no body whatever the framing headers say
	 * (it would read a 204's or 304's Content-Length bytes as one). */
	return bodyless ? 1 : 0;
}

static int on_resp_body(llhttp_t *p, const char *at, size_t len)
{
	upstream_ev->resp_body(resp_stream(p), at, len);
	return 0;
}

static int on_resp_done(llhttp_t *p)
{
	struct stream *s = resp_stream(p);
	if (!s->resp_started || s->status == 101)
		return 0;  /* interim (1xx) response, or the upgrade pause follows */
	upstream_ev->resp_end(s);
	return HPE_PAUSED;
}

/* A bodiless response that announced a body (204 with any framing header,
 * 304 chunked): the backend may believe it sent one, and bytes still on
 * their way would be read as the next request's response. */
static int resp_framing_suspect(const struct stream *s)
{
	const struct msg *m = &s->resp;
	if (s->status == 204)
		return msg_count(m, HDR_CONTENT_LENGTH) || msg_count(m, HDR_TRANSFER_ENCODING);
	if (s->status == 304)
		return msg_count(m, HDR_TRANSFER_ENCODING);
	return 0;
}

void upstream_h1_start(struct bconn *bc)
{
	llhttp_init(&bc->parser, HTTP_RESPONSE, &resp_settings);
	bc->parser.data = bc;
	bc->resp_fed = 0;
}

/* A whole response of the common form (h1head_parse_response) in one read,
 * taken as llhttp's callbacks would take it: the same fields, limits,
 * checks, body and outcome, the parser fields they and
 * llhttp_should_keep_alive read set as llhttp would set them, and the head
 * copied into the arena once. */
static enum h1r_result common_response(struct bconn *bc, const char *data, size_t len, size_t head,
				       const struct h1head *hd, size_t *used, int *reusable)
{
	llhttp_t *p = &bc->parser;
	struct stream *s = bc->strm;
	struct msg *m = &s->resp;
	p->http_major = 1;
	p->http_minor = 1;
	p->status_code = hd->status;
	p->content_length = hd->content_length;
	p->flags = F_CONTENT_LENGTH;
	if (hd->connection == H1HEAD_CONN_KEEP_ALIVE)
		p->flags |= F_CONNECTION_KEEP_ALIVE;
	else if (hd->connection == H1HEAD_CONN_CLOSE)
		p->flags |= F_CONNECTION_CLOSE;
	*used = len;
	*reusable = 0;
	on_resp_begin(p);
	uint32_t base = msg_take_head(m, data, head, hd->start.off, hd->start.len);
	for (unsigned i = 0; i < hd->nhdrs; i++) {
		if (msg_add_parsed(m, base + hd->name[i].off, hd->name[i].len, base + hd->value[i].off,
				   hd->value[i].len) == NULL ||
		    m->head_bytes > W->cfg->limits.max_header_size) {
			resp_fail(p);
			p->error = HPE_USER;
			p->reason = "too many header fields, or too large a head";
			return H1R_INVALID;
		}
	}
	int r = on_resp_headers_done(p);
	if (r < 0) {
		p->error = HPE_USER;
		p->reason = "User callback error";
		return H1R_INVALID;
	}
	/* 1: no body whatever the length says (HEAD). */
	size_t body = r == 1 ? 0 : (size_t)hd->content_length;
	if (body > 0)
		on_resp_body(p, data + head, body);
	on_resp_done(p);
	*used = head + body;
	*reusable = *used == len && llhttp_should_keep_alive(p) && !s->upgrade && !resp_framing_suspect(s);
	return H1R_DONE;
}

enum h1r_result upstream_h1_parse(struct bconn *bc, const char *data, size_t len, size_t *used, int *reusable)
{
	struct stream *s = bc->strm;
	if (!bc->resp_fed) {
		/* A whole response of the common form skips llhttp; any other
		 * (or one that arrives in pieces) is llhttp's throughout. */
		struct h1head hd;
		size_t head = h1head_parse_response(data, len, &hd);
		if (head > 0 && (s->is_head || hd.content_length <= len - head))
			return common_response(bc, data, len, head, &hd, used, reusable);
		bc->resp_fed = 1;
	}
	llhttp_errno_t e = llhttp_execute(&bc->parser, data, len);
	*used = len;
	*reusable = 0;
	if (e == HPE_OK)
		return H1R_MORE;
	if (e == HPE_PAUSED || e == HPE_PAUSED_UPGRADE) {
		*used = (size_t)(llhttp_get_error_pos(&bc->parser) - data);
		if (e == HPE_PAUSED_UPGRADE)
			return H1R_UPGRADE;
		/* Bytes after a complete response mean a confused backend: do
		 * not let them reach the next request on this connection. */
		*reusable = *used == len && llhttp_should_keep_alive(&bc->parser) && !s->upgrade &&
			    !resp_framing_suspect(s);
		return H1R_DONE;
	}
	return H1R_INVALID;
}

int upstream_h1_finish(struct bconn *bc)
{
	llhttp_errno_t e = llhttp_finish(&bc->parser);
	return e == HPE_OK || e == HPE_PAUSED;
}

const char *upstream_h1_error(const struct bconn *bc)
{
	return llhttp_get_error_reason(&bc->parser);
}

void upstream_h1_init(const struct upstream_events *ev)
{
	upstream_ev = ev;
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
