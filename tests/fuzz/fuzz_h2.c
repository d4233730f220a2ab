/* libFuzzer target: the HTTP/2 codec (src/h2.c). A fuzzed client speaks
 * HTTP/2 with prior knowledge to a real sluice worker (tests/fuzz/rig.c)
 * whose listeners have h2c on; the rig's backend answers every request it
 * parses with one of eight canned HTTP/1.1 responses.
 *
 * Input: byte 0 picks the listener (bit 0: the proxied one; the target
 * sends it a PROXY v1 header first), the backend's answer (bits 1-3,
 * answers[] below), the delivery (bit 4: frame by frame, the worker quiet
 * in between, so frames arrive in reads of their own) and the client (bits
 * 5-7: 7 patient, 6 patient and not reading, else plain); the rest is the
 * client's bytes: the connection preface, then frames. A plain client's
 * write side stays open until the worker is quiet (RIG_HOLD_OPEN: the codec
 * closes the connection at the client's EOF), then it is shut down. A
 * patient client waits for sluice to close the connection by its own
 * timeouts (RIG_WAIT_CLOSE, on the rig's virtual clock: no real time is
 * spent), so the streams' timers fire too (client header, body and send
 * timeouts, keepalive); one that does not read (RIG_CLIENT_STALL, a tiny
 * receive buffer) makes sluice's output back up first. Bytes that do not
 * start with the preface go to the HTTP/1.1 codec and get the rig's checks
 * only.
 *
 * A custom mutator keeps the frames well framed most of the time: it edits
 * one frame's payload, header, or HPACK fields (decoded and re-encoded as
 * literals) and rewrites its length; inserts, drops, duplicates, moves and
 * splits frames (HEADERS into CONTINUATION); repeats a frame or a pair on
 * new stream ids (many streams, Rapid Reset); synthesizes frames of every
 * type; and otherwise mutates the raw bytes. libnghttp2 is not instrumented,
 * so raw mutations alone would mostly break the framing blind.
 *
 * Oracles (beyond crashes, leaks, sanitizer reports, and the rig's: every
 * backend request parses strictly, the worker is idle afterwards, codecs
 * report only about streams they hold and release every stream, the
 * connection and h2 gauges are back to 0):
 *   what the backend receives, for each request (rig_on_request):
 *   - exactly one Host, whose value is one the client sent as :authority
 *     or host; method and target are a :method and :path the client sent;
 *   - no connection-specific field (connection, keep-alive,
 *     proxy-connection, upgrade, te, trailer, expect), at most one cookie;
 *   - every other field, sluice's identity headers and framing aside, is
 *     a name and value the client sent (a CR/LF smuggled inside a value
 *     would show up as a field nobody sent);
 *   - its body is a prefix of the DATA the client sent on some stream;
 *   what the client receives (parsed as frames, HPACK-decoded):
 *   - SETTINGS first, frames whole and at most 16384 bytes, no frame a
 *     server never sends (PUSH_PROMISE, unknown types);
 *   - HEADERS and DATA only on streams the client opened; per stream,
 *     interim 1xx (never 101) without END_STREAM, then one final HEADERS,
 *     then DATA, nothing after END_STREAM but RST_STREAM/WINDOW_UPDATE;
 *   - header blocks decode; :status first, alone and 3 digits; lowercase
 *     token names; no CR/LF/NUL in values; no connection-specific field;
 *   - a finished body matches content-length, is empty for HEAD, 204 and
 *     304, and a backend answer (x-rig) arrives with its status and body
 *     byte for byte;
 *   - unless the client reset a stream or sent GOAWAY, or sluice ended the
 *     connection with an error, every request the backend received before
 *     the client's EOF got a final response (or a RST_STREAM) on some
 *     stream, and whole if the default flow-control windows hold every
 *     body (a client that does not read is excused). Timing could in
 *     principle make this fail: a failure is re-run with a 50 ms settle
 *     time before it counts;
 *   a patient client's connection is closed by sluice by a timer it has
 *   armed, within 120 virtual seconds.
 *
 * FUZZ_H2_PRINT=1 prints each exchange: the frames sluice sent, the
 * requests the backend got. */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <nghttp2/nghttp2.h>
#include "rig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* The oracles' parsers and the mutator are not the code under test: no
 * coverage feedback from them. */
#define NOCOV __attribute__((no_sanitize("coverage")))

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
#define PREFACE_LEN 24
static const char proxy_v1[] = "PROXY TCP4 10.1.2.3 10.0.0.1 40000 80\r\n";

/* ---------------------------------------------------------------------- */
/* The backend's canned answers (byte 0, bits 1-3)                        */

#define BIG_BODY 17000  /* two DATA frames; four exhaust the connection's window */

struct answer {
	const char *wire;   /* what the backend sends (interim heads first), the
			     * body included except for BIG_BODY */
	const char *body;   /* the final body; NULL: BIG_BODY bytes of big_body */
	size_t body_len;
	int status;         /* the final status the client must see */
};

static char big_body[BIG_BODY];
static const struct answer answers[8] = {
	{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Rig: 1\r\n\r\nok", "ok", 2, 200 },
	{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: keep-alive, X-Hop\r\n"
	  "Keep-Alive: timeout=5\r\nX-Hop: 1\r\nX-Rig: 1\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n"
	  "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", "hello world", 11, 200 },
	{ "HTTP/1.1 204 No Content\r\nX-Rig: 1\r\n\r\n", "", 0, 204 },
	{ "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
	  "HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-Rig: 1\r\n\r\nmade\n", "made\n", 5, 201 },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 17000\r\nX-Rig: 1\r\n\r\n", NULL, BIG_BODY, 200 },
	{ "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nX-Rig: 1\r\n\r\n", "", 0, 304 },
	{ "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nUpgrade: h2c\r\nProxy-Connection: keep-alive\r\n"
	  "TE: trailers\r\nTrailer: X-T\r\nConnection: close\r\nX-Rig: 1\r\n\r\n", "", 0, 200 },
	{ "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nRetry-After: 1\r\nX-Rig: 1\r\n\r\nbusy",
	  "busy", 4, 503 },
};
static struct buf answer_bytes[8];  /* wire (+ big_body) */

static const uint8_t *answer_body(const struct answer *a)
{
	return a->body ? (const uint8_t *)a->body : (const uint8_t *)big_body;
}

/* ---------------------------------------------------------------------- */
/* Small helpers                                                          */

static int verbose;

static unsigned patient;  /* this input's client: RIG_WAIT_CLOSE, RIG_CLIENT_STALL or 0 */

NOCOV static int ieq(const uint8_t *a, size_t al, const char *lit)
{
	size_t n = strlen(lit);
	return al == n && strncasecmp((const char *)a, lit, n) == 0;
}

NOCOV static void trim(const uint8_t **v, size_t *n)
{
	while (*n && ((*v)[0] == ' ' || (*v)[0] == '\t'))
		(*v)++, (*n)--;
	while (*n && ((*v)[*n - 1] == ' ' || (*v)[*n - 1] == '\t'))
		(*n)--;
}

NOCOV static uint32_t be24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }
NOCOV static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Fields forbidden in HTTP/2 (RFC 9113 8.2.2) and the hop-by-hop ones
 * sluice drops from every message. */
NOCOV static int connection_specific(const uint8_t *n, size_t nl)
{
	static const char *const names[] = { "connection", "keep-alive", "proxy-connection", "upgrade",
					     "te", "transfer-encoding", "trailer", "expect" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (ieq(n, nl, names[i]))
			return 1;
	return 0;
}

/* The identity headers sluice adds, merges or passes from a trusted
 * forwarder (docs/client-identity.md): their values are its own. */
NOCOV static int identity_name(const uint8_t *n, size_t nl)
{
	static const char *const prefixes[] = { "x-forwarded-", "wl-proxy-", "x-weblogic-" };
	for (size_t i = 0; i < 3; i++) {
		size_t pl = strlen(prefixes[i]);
		if (nl > pl && strncasecmp((const char *)n, prefixes[i], pl) == 0)
			return 1;
	}
	return ieq(n, nl, "forwarded") || ieq(n, nl, "x-real-ip") || ieq(n, nl, "proxy-client-ip");
}

typedef void (*field_fn)(void *ctx, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl);

/* Feed one header block fragment to INF; FINAL: the block ends with it.
 * Returns -1 on a decoding error. */
NOCOV static int inflate(nghttp2_hd_inflater *inf, const uint8_t *in, size_t len, int final, field_fn fn, void *ctx)
{
	for (;;) {
		nghttp2_nv nv;
		int fl = 0;
		ssize_t r = nghttp2_hd_inflate_hd2(inf, &nv, &fl, in, len, final);
		if (r < 0)
			return -1;
		in += r;
		len -= (size_t)r;
		if (fl & NGHTTP2_HD_INFLATE_EMIT)
			fn(ctx, nv.name, nv.namelen, nv.value, nv.valuelen);
		if (fl & NGHTTP2_HD_INFLATE_FINAL) {
			nghttp2_hd_inflate_end_headers(inf);
			return 0;
		}
		if (!(fl & NGHTTP2_HD_INFLATE_EMIT) && len == 0)
			return 0;
	}
}

/* A frame's payload without its padding and priority fields: -1 when the
 * padding does not fit (a connection error for any peer). */
NOCOV static int frame_fragment(uint8_t type, uint8_t flags, const uint8_t *p, size_t len, const uint8_t **frag,
				size_t *fl)
{
	size_t pre = 0, pad = 0;
	if ((type == 0 || type == 1) && (flags & 0x8)) {
		if (len < 1)
			return -1;
		pad = p[0];
		pre = 1;
	}
	if (type == 1 && (flags & 0x20))
		pre += 5;
	if (pre + pad > len)
		return -1;
	*frag = p + pre;
	*fl = len - pre - pad;
	return 0;
}

/* ---------------------------------------------------------------------- */
/* What the client sent, as any server would read it                     */

struct field { uint32_t n_off, n_len, v_off, v_len; };

struct cstream {
	int32_t id;
	uint8_t blocks;    /* header blocks completed on it */
	uint8_t ended;     /* END_STREAM sent */
	uint8_t head;      /* its :method is HEAD */
	struct buf data;   /* DATA after its head, up to END_STREAM */
};

static struct {
	struct buf arena;
	struct field *fields;
	size_t nfields, fields_cap;
	struct cstream *st;
	size_t nst, st_cap;
	int saw_rst, saw_goaway;
	int window_set;    /* a SETTINGS_INITIAL_WINDOW_SIZE (it may shrink windows) */
	int hpack_failed;
} cv;

NOCOV static struct cstream *cstream_get(int32_t id, int create)
{
	for (size_t i = 0; i < cv.nst; i++)
		if (cv.st[i].id == id)
			return &cv.st[i];
	if (!create)
		return NULL;
	if (cv.nst == cv.st_cap) {
		size_t cap = cv.st_cap ? 2 * cv.st_cap : 64;
		cv.st = realloc(cv.st, cap * sizeof(*cv.st));
		if (cv.st == NULL)
			abort();
		memset(cv.st + cv.st_cap, 0, (cap - cv.st_cap) * sizeof(*cv.st));
		cv.st_cap = cap;
	}
	struct cstream *c = &cv.st[cv.nst++];
	struct buf keep = c->data;
	memset(c, 0, sizeof(*c));
	c->data = keep;
	c->data.len = 0;
	c->id = id;
	return c;
}

struct block_ctx {
	struct cstream *c;
	int first;   /* the stream's first block: its request head */
};

NOCOV static void client_field(void *ctx, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
	struct block_ctx *b = ctx;
	if (cv.nfields == cv.fields_cap) {
		cv.fields_cap = cv.fields_cap ? 2 * cv.fields_cap : 256;
		cv.fields = realloc(cv.fields, cv.fields_cap * sizeof(*cv.fields));
		if (cv.fields == NULL)
			abort();
	}
	struct field *f = &cv.fields[cv.nfields++];
	f->n_off = (uint32_t)cv.arena.len;
	f->n_len = (uint32_t)nl;
	buf_append(&cv.arena, (const char *)n, nl);
	f->v_off = (uint32_t)cv.arena.len;
	f->v_len = (uint32_t)vl;
	buf_append(&cv.arena, (const char *)v, vl);
	if (b->first && ieq(n, nl, ":method") && vl == 4 && memcmp(v, "HEAD", 4) == 0)
		b->c->head = 1;
}

/* Walk the client's frames (after the preface) the way nghttp2 reads them,
 * as far as it matters here: one HPACK context over every header block in
 * order (a divergence would make the field oracle lie), and the DATA each
 * stream delivers. The walk never stops early: a frame that a server must
 * refuse is skipped alone, as nghttp2 skips it, while after a connection
 * error a server delivers nothing more, so whatever the walk records past
 * it only adds to the tail of what the client "sent" (the oracles ask for
 * membership and prefixes). Only an HPACK error ends the decoding: the
 * context is lost for nghttp2 as well. */
NOCOV static void client_view(const uint8_t *p, size_t n)
{
	cv.arena.len = 0;
	cv.nfields = cv.nst = 0;
	cv.saw_rst = cv.saw_goaway = cv.hpack_failed = cv.window_set = 0;
	nghttp2_hd_inflater *inf;
	if (nghttp2_hd_inflate_new(&inf) != 0)
		abort();
	struct block_ctx b = { 0 };
	int in_block = 0, block_end_stream = 0;
	int32_t block_id = 0;
	while (n >= 9) {
		uint32_t len = be24(p);
		uint8_t type = p[3], flags = p[4];
		int32_t id = (int32_t)(be32(p + 5) & 0x7fffffff);
		if (len > n - 9) {
			/* The input ends inside this frame. nghttp2 opens a stream
			 * as a HEADERS frame begins (on_begin_headers: sluice may
			 * answer it, after client_header) and hands DATA on as its
			 * bytes arrive (on_data_chunk_recv), so both count; a
			 * header block's fields act only once it is whole. */
			if (type == 1) {
				cstream_get(id, 1);
				break;
			}
			struct cstream *c = cstream_get(id, 0);
			size_t have = n - 9, pad = 0, pre = 0;
			if (type != 0 || (in_block && id != block_id) || c == NULL || !c->blocks || c->ended)
				break;
			if (flags & 0x8) {
				if (have < 1 || p[9] >= len)
					break;
				pre = 1;
				pad = p[9];
			}
			size_t data_end = len - pad;  /* payload offset where the padding starts */
			if (have > data_end)
				have = data_end;
			if (have > pre)
				buf_append(&c->data, (const char *)p + 9 + pre, have - pre);
			break;
		}
		const uint8_t *pl = p + 9;
		p += 9 + len;
		n -= 9 + len;
		if (in_block && (type != 9 || id != block_id))
			in_block = 0;  /* a connection error: the block is abandoned */
		const uint8_t *frag;
		size_t fl;
		switch (type) {
		case 0: {  /* DATA */
			struct cstream *c = cstream_get(id, 0);
			if (frame_fragment(type, flags, pl, len, &frag, &fl) < 0 || c == NULL || !c->blocks || c->ended)
				break;
			buf_append(&c->data, (const char *)frag, fl);
			if (flags & 0x1)
				c->ended = 1;
			break;
		}
		case 1:  /* HEADERS */
			if (frame_fragment(type, flags, pl, len, &frag, &fl) < 0)
				break;
			b.c = cstream_get(id, 1);
			b.first = b.c->blocks == 0;
			block_id = id;
			block_end_stream = flags & 0x1;
			in_block = 1;
			/* fall through */
		case 9:  /* CONTINUATION */
			if (!in_block)
				break;
			if (type == 9) {
				frag = pl;
				fl = len;
			}
			if (!cv.hpack_failed && inflate(inf, frag, fl, flags & 0x4, client_field, &b) < 0)
				cv.hpack_failed = 1;
			if (cv.hpack_failed) {
				in_block = 0;
				break;
			}
			if (flags & 0x4) {
				in_block = 0;
				b.c->blocks++;
				if (block_end_stream)
					b.c->ended = 1;
			}
			break;
		case 3:
			cv.saw_rst = 1;
			break;
		case 4:
			for (size_t i = 0; i + 6 <= len; i += 6)
				if (pl[i] == 0 && pl[i + 1] == 4)
					cv.window_set = 1;
			break;
		case 7:
			cv.saw_goaway = 1;
			break;
		default:
			break;
		}
	}
	nghttp2_hd_inflate_del(inf);
}

NOCOV static int client_sent(const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
	trim(&v, &vl);
	for (size_t i = 0; i < cv.nfields; i++) {
		const struct field *f = &cv.fields[i];
		if (f->n_len != nl || strncasecmp(cv.arena.data + f->n_off, (const char *)n, nl) != 0)
			continue;
		const uint8_t *cvv = (const uint8_t *)cv.arena.data + f->v_off;
		size_t cvl = f->v_len;
		trim(&cvv, &cvl);
		if (cvl == vl && memcmp(cvv, v, vl) == 0)
			return 1;
	}
	return 0;
}

/* ---------------------------------------------------------------------- */
/* What reached the backend                                               */

static int h2_mode;

NOCOV static void backend_request(const char *p, size_t n, const struct rig_req *rq, const char *body)
{
	if (!h2_mode)
		return;
	const char *eol = memchr(p, '\r', n);
	const char *sp1 = memchr(p, ' ', (size_t)(eol - p));
	const char *sp2 = memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1));
	if (verbose)
		fprintf(stderr, "fuzz_h2: backend request: %.*s\n", (int)(eol - p), p);
	if (!client_sent((const uint8_t *)":method", 7, (const uint8_t *)p, (size_t)(sp1 - p)))
		RIG_FAIL("the backend received method %.*s, which the client never sent as :method", (int)(sp1 - p), p);
	if (!client_sent((const uint8_t *)":path", 5, (const uint8_t *)sp1 + 1, (size_t)(sp2 - sp1 - 1)))
		RIG_FAIL("the backend received target %.*s, which the client never sent as :path",
			 (int)(sp2 - sp1 - 1), sp1 + 1);
	int hosts = 0, cookies = 0;
	const char *line = eol + 2;
	for (;;) {
		const char *e = memchr(line, '\r', n - (size_t)(line - p));
		if (e == line)
			break;
		const char *colon = memchr(line, ':', (size_t)(e - line));
		const uint8_t *nm = (const uint8_t *)line, *v = (const uint8_t *)colon + 1;
		size_t nl = (size_t)(colon - line), vl = (size_t)(e - colon - 1);
		trim(&v, &vl);
		if (connection_specific(nm, nl) && !(ieq(nm, nl, "transfer-encoding") && rq->framing == 2))
			RIG_FAIL("the backend received the connection-specific field %.*s from an HTTP/2 client:\n%.*s",
				 (int)nl, line, (int)(n > 2000 ? 2000 : n), p);
		if (ieq(nm, nl, "host")) {
			hosts++;
			if (!client_sent((const uint8_t *)":authority", 10, v, vl) &&
			    !client_sent((const uint8_t *)"host", 4, v, vl))
				RIG_FAIL("the backend received Host %.*s, sent neither as :authority nor as host",
					 (int)vl, (const char *)v);
		} else if (ieq(nm, nl, "cookie")) {
			cookies++;
		} else if (!ieq(nm, nl, "content-length") && !ieq(nm, nl, "transfer-encoding") &&
			   !identity_name(nm, nl) && !client_sent(nm, nl, v, vl)) {
			RIG_FAIL("the backend received a field the client never sent: %.*s\nin:\n%.*s", (int)(e - line),
				 line, (int)(n > 2000 ? 2000 : n), p);
		}
		line = e + 2;
	}
	if (hosts != 1)
		RIG_FAIL("the backend received %d Host fields in a request from an HTTP/2 client", hosts);
	if (cookies > 1)
		RIG_FAIL("the backend received %d cookie fields: HTTP/2 cookie crumbs must be joined into one", cookies);
	if (rq->body_len) {
		for (size_t i = 0; i < cv.nst; i++)
			if (cv.st[i].data.len >= rq->body_len && memcmp(cv.st[i].data.data, body, rq->body_len) == 0)
				return;
		RIG_FAIL("the backend received a %llu-byte body that no stream's DATA begins with: %.*s",
			 (unsigned long long)rq->body_len, (int)(rq->body_len > 200 ? 200 : rq->body_len), body);
	}
}

/* ---------------------------------------------------------------------- */
/* What the client received                                               */

struct sstream {
	int32_t id;
	int final;        /* final status, 0 before it */
	int ended, rst;
	int64_t clen;     /* content-length of the final response, -1 none */
	int rig;          /* x-rig: 1, the backend's own answer */
	uint64_t dlen;
	uint64_t rig_mismatch;  /* offset + 1 where its DATA left the canned body */
};

static struct {
	struct sstream *st;
	size_t nst, cap;
	int goaway_err;   /* sluice sent GOAWAY with an error code */
	int answered;     /* streams with the backend's final response or a RST_STREAM */
	uint64_t owed;    /* body bytes of the backend's answers on them */
	int unfinished;   /* streams with the backend's answer begun, not ended, not reset */
	int32_t unfinished_id;
} sv;

struct sblock {
	struct sstream *s;
	int nfields, status, pseudo_done;
	int64_t clen;
	int rig;
	const char *why;
};

NOCOV static struct sstream *sstream_get(int32_t id)
{
	for (size_t i = 0; i < sv.nst; i++)
		if (sv.st[i].id == id)
			return &sv.st[i];
	if (sv.nst == sv.cap) {
		sv.cap = sv.cap ? 2 * sv.cap : 64;
		sv.st = realloc(sv.st, sv.cap * sizeof(*sv.st));
		if (sv.st == NULL)
			abort();
	}
	struct sstream *s = &sv.st[sv.nst++];
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->clen = -1;
	return s;
}

NOCOV static void server_field(void *ctx, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
	struct sblock *b = ctx;
	int first = b->nfields++ == 0;
	if (b->why)
		return;
	if (nl && n[0] == ':') {
		if (!first || !ieq(n, nl, ":status") || nl != 7) {
			b->why = "a pseudo-header other than one :status first";
			return;
		}
		if (vl != 3 || v[0] < '1' || v[0] > '5' || v[1] < '0' || v[1] > '9' || v[2] < '0' || v[2] > '9') {
			b->why = ":status is not 3 digits within 100-599";
			return;
		}
		b->status = (v[0] - '0') * 100 + (v[1] - '0') * 10 + (v[2] - '0');
		return;
	}
	if (first) {
		b->why = "a header block without :status first";
		return;
	}
	for (size_t i = 0; i < nl; i++) {
		uint8_t c = n[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (c && strchr("!#$%&'*+-.^_`|~", c)))) {
			b->why = "a field name that is not a lowercase token";
			return;
		}
	}
	if (nl == 0) {
		b->why = "an empty field name";
		return;
	}
	if (memchr(v, '\r', vl) || memchr(v, '\n', vl) || memchr(v, '\0', vl)) {
		b->why = "CR, LF or NUL in a field value";
		return;
	}
	if (connection_specific(n, nl) && !ieq(n, nl, "expect") && !ieq(n, nl, "trailer")) {
		b->why = "a connection-specific field";
		return;
	}
	if (ieq(n, nl, "content-length")) {
		int64_t x = 0;
		for (size_t i = 0; i < vl; i++) {
			if (v[i] < '0' || v[i] > '9' || x > INT64_MAX / 10 - 9) {
				b->why = "content-length is not a decimal number";
				return;
			}
			x = x * 10 + (v[i] - '0');
		}
		if (vl == 0 || b->clen >= 0) {
			b->why = "content-length empty or repeated";
			return;
		}
		b->clen = x;
	}
	if (ieq(n, nl, "x-rig"))
		b->rig = 1;
}

NOCOV static void server_fail(const char *why, const struct rig_result *r, size_t at)
{
	RIG_FAIL("the client received %s (at byte %zu of %zu it got)", why, at, r->client.len);
}

static const char *const frame_names[] = { "DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS",
					   "PUSH_PROMISE", "PING", "GOAWAY", "WINDOW_UPDATE", "CONTINUATION" };

NOCOV static void server_view(const struct rig_result *r, const struct answer *a)
{
	const uint8_t *p = (const uint8_t *)r->client.data, *start = p;
	size_t n = r->client.len;
	sv.nst = 0;
	sv.goaway_err = sv.answered = sv.unfinished = 0;
	sv.owed = 0;
	nghttp2_hd_inflater *inf;
	if (nghttp2_hd_inflate_new(&inf) != 0)
		abort();
	struct sblock b;
	int in_block = 0, block_end = 0, first = 1;
	while (n) {
		size_t at = (size_t)(p - start);
		if (n < 9 || be24(p) > n - 9) {
			if (patient == RIG_CLIENT_STALL)
				break;  /* it read what it got after sluice closed: a cut is fine */
			server_fail("a frame cut short", r, at);
		}
		uint32_t len = be24(p);
		uint8_t type = p[3], flags = p[4];
		int32_t id = (int32_t)(be32(p + 5) & 0x7fffffff);
		const uint8_t *pl = p + 9;
		p += 9 + len;
		n -= 9 + len;
		if (verbose)
			fprintf(stderr, "fuzz_h2: sluice sent %s (type %u) stream %d flags 0x%02x, %u bytes\n",
				type < 10 ? frame_names[type] : "?", type, id, flags, len);
		if (len > 16384)
			server_fail("a frame longer than 16384 bytes", r, at);
		if (first && (type != 4 || (flags & 1) || id != 0))
			server_fail("a first frame that is not SETTINGS", r, at);
		first = 0;
		if (in_block && (type != 9 || id != b.s->id))
			server_fail("a header block not continued by CONTINUATION", r, at);
		if ((type == 0 || type == 1) && (id == 0 || cstream_get(id, 0) == NULL))
			server_fail("HEADERS or DATA on a stream the client never opened", r, at);
		switch (type) {
		case 0: {
			struct sstream *s = sstream_get(id);
			const uint8_t *frag;
			size_t fl;
			if (frame_fragment(type, flags, pl, len, &frag, &fl) < 0)
				server_fail("DATA with bad padding", r, at);
			if (!s->final || s->ended || s->rst)
				server_fail("DATA before the final HEADERS, after END_STREAM or after RST_STREAM", r, at);
			if (s->rig && !s->rig_mismatch) {
				if (s->dlen + fl > a->body_len || memcmp(answer_body(a) + s->dlen, frag, fl) != 0)
					s->rig_mismatch = s->dlen + 1;
			}
			s->dlen += fl;
			if (flags & 1)
				s->ended = 1;
			break;
		}
		case 1:
			if (flags & 0x28)
				server_fail("HEADERS with padding or priority (sluice sends neither)", r, at);
			memset(&b, 0, sizeof(b));
			b.s = sstream_get(id);
			b.clen = -1;
			if (b.s->ended || b.s->rst)
				server_fail("HEADERS after END_STREAM or RST_STREAM", r, at);
			block_end = flags & 1;
			in_block = 1;
			/* fall through */
		case 9:
			if (!in_block)
				server_fail("CONTINUATION outside a header block", r, at);
			if (inflate(inf, pl, len, flags & 4, server_field, &b) < 0)
				server_fail("a header block that does not decode (HPACK)", r, at);
			if (!(flags & 4))
				break;
			in_block = 0;
			if (b.why)
				server_fail(b.why, r, at);
			if (b.status == 0)
				server_fail("a header block without :status", r, at);
			if (b.s->final)
				server_fail("a second final response (or trailers) on one stream", r, at);
			if (b.status < 200) {
				if (b.status == 101)
					server_fail("a 101 over HTTP/2", r, at);
				if (block_end)
					server_fail("an interim response with END_STREAM", r, at);
				break;
			}
			b.s->final = b.status;
			b.s->clen = b.clen;
			b.s->rig = b.rig;
			if (b.rig && b.status != a->status)
				server_fail("the backend's answer with another status", r, at);
			if (block_end)
				b.s->ended = 1;
			break;
		case 3:
			if (len != 4 || id == 0)
				server_fail("a malformed RST_STREAM", r, at);
			sstream_get(id)->rst = 1;
			break;
		case 4:
			if (id != 0 || len % 6 || ((flags & 1) && len))
				server_fail("a malformed SETTINGS", r, at);
			break;
		case 5:
			server_fail("PUSH_PROMISE (sluice never pushes)", r, at);
			break;
		case 6:
			if (id != 0 || len != 8)
				server_fail("a malformed PING", r, at);
			break;
		case 7:
			if (id != 0 || len < 8)
				server_fail("a malformed GOAWAY", r, at);
			if (be32(pl + 4) != 0)
				sv.goaway_err = 1;
			break;
		case 8:
			if (len != 4 || (be32(pl) & 0x7fffffff) == 0)
				server_fail("a malformed WINDOW_UPDATE", r, at);
			break;
		case 2:
			server_fail("PRIORITY from a server", r, at);
			break;
		default:
			server_fail("a frame of an unknown type", r, at);
		}
	}
	if (in_block && patient != RIG_CLIENT_STALL)
		server_fail("a header block never ended", r, r->client.len);
	nghttp2_hd_inflate_del(inf);
	for (size_t i = 0; i < sv.nst; i++) {
		const struct sstream *s = &sv.st[i];
		const struct cstream *c = cstream_get(s->id, 0);
		int bodyless = (c && c->head) || s->final == 204 || s->final == 304;
		if (s->rig || s->rst)
			sv.answered++;
		if (s->rig && !s->rst && !bodyless)
			sv.owed += a->body_len;
		if (s->rig && !s->rst && !s->ended) {
			sv.unfinished++;
			sv.unfinished_id = s->id;
		}
		if (!s->final || !s->ended)
			continue;
		if (bodyless && s->dlen)
			RIG_FAIL("stream %d: %llu body bytes (DATA) in a %d response%s", s->id,
				 (unsigned long long)s->dlen, s->final, c && c->head ? " to HEAD" : "");
		/* With the client's header blocks undecodable here, whether a
		 * request sluice answered itself was a HEAD (no DATA, as the
		 * fields nghttp2 did hand over said) is not known. */
		int method_unknown = !s->rig && (cv.hpack_failed || c == NULL || !c->blocks);
		if (!bodyless && !method_unknown && s->clen >= 0 && (uint64_t)s->clen != s->dlen)
			RIG_FAIL("stream %d: content-length %lld, yet %llu DATA bytes", s->id, (long long)s->clen,
				 (unsigned long long)s->dlen);
		if (s->rig && !bodyless && (s->rig_mismatch || s->dlen != a->body_len))
			RIG_FAIL("stream %d: the backend's %zu-byte body arrived as %llu bytes, differing from byte %llu",
				 s->id, a->body_len, (unsigned long long)s->dlen,
				 (unsigned long long)(s->rig_mismatch ? s->rig_mismatch - 1 : s->dlen));
	}
}

/* ---------------------------------------------------------------------- */
/* The target                                                             */

static struct buf input;

static const struct rig_result *exchange(int li, const struct answer *ai, unsigned flags)
{
	flags |= patient;
	return rig_exchange2(li, (const uint8_t *)input.data, input.len, RIG_ANSWER_FIXED,
			     (const uint8_t *)answer_bytes[ai - answers].data, answer_bytes[ai - answers].len, flags);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int ready;
	if (!ready) {
		rig_init2("    h2c: on\n", "    h2c: on\n", NULL, NULL);
		memset(big_body, 'b', sizeof(big_body));
		for (size_t i = 0; i < sizeof(big_body); i += 100)
			big_body[i] = (char)('0' + i / 100 % 10);
		for (int i = 0; i < 8; i++) {
			buf_append_str(&answer_bytes[i], answers[i].wire);
			if (answers[i].body == NULL)
				buf_append(&answer_bytes[i], big_body, sizeof(big_body));
		}
		rig_on_request = backend_request;
		verbose = getenv("FUZZ_H2_PRINT") != NULL;
		ready = 1;
	}
	if (size == 0)
		return 0;
	int li = data[0] & 1 ? RIG_LI_PROXY : RIG_LI_PLAIN;
	const struct answer *a = &answers[(data[0] >> 1) & 7];
	patient = (data[0] >> 5) == 7 ? RIG_WAIT_CLOSE : (data[0] >> 5) == 6 ? RIG_CLIENT_STALL : 0;
	int by_frame = data[0] & 0x10;
	data++, size--;
	input.len = 0;
	if (li == RIG_LI_PROXY)
		buf_append_str(&input, proxy_v1);
	buf_append(&input, (const char *)data, size);
	h2_mode = size >= PREFACE_LEN && memcmp(data, preface, PREFACE_LEN) == 0;
	if (!h2_mode) {
		/* The HTTP/1.1 codec: the rig's own checks. */
		patient = 0;
		exchange(li, a, 0);
		return 0;
	}
	client_view(data + PREFACE_LEN, size - PREFACE_LEN);
	rig_nsplit = 0;
	if (by_frame) {
		/* After the preface and after each whole frame. */
		static size_t split[1024];
		size_t at = input.len - size + PREFACE_LEN;
		while (rig_nsplit < 1024) {
			split[rig_nsplit++] = at;
			if (input.len - at < 9 || be24((const uint8_t *)input.data + at) > input.len - at - 9)
				break;
			at += 9 + be24((const uint8_t *)input.data + at);
		}
		rig_split = split;
	}
	rig_settle_ms = 0;
	const struct rig_result *r = exchange(li, a, RIG_HOLD_OPEN | RIG_CLIENT_RAW);
	server_view(r, a);
	/* The backend answers at once and in full, so by the time the worker
	 * is quiet every request it got has its answer on the client's
	 * stream, and whole when the flow-control windows are the default
	 * ones and hold every body. Unless the client reset a stream or went
	 * away, or sluice ended the connection with an error. */
	int excused = cv.saw_rst || cv.saw_goaway || sv.goaway_err || patient == RIG_CLIENT_STALL;
	int window_ok = !cv.window_set && sv.owed <= 65535;
	if (!excused && ((unsigned)sv.answered < r->nreqs_held || (window_ok && sv.unfinished))) {
		/* Only sure if it does not depend on the loop's timing. */
		unsigned held = r->nreqs_held, answered = (unsigned)sv.answered;
		int unfinished = sv.unfinished;
		if (verbose)
			fprintf(stderr, "fuzz_h2: re-run: %u requests before EOF, %u answered, %d unfinished, "
				"%llu bytes owed\n", held, answered, unfinished, (unsigned long long)sv.owed);
		rig_settle_ms = 50;
		r = exchange(li, a, RIG_HOLD_OPEN | RIG_CLIENT_RAW);
		server_view(r, a);
		rig_settle_ms = 0;
		window_ok = !cv.window_set && sv.owed <= 65535;
		if ((unsigned)sv.answered < r->nreqs_held)
			RIG_FAIL("the backend received %u complete requests before the client's EOF, yet the client "
				 "got its answer or RST_STREAM on %d streams (first run: %u and %u)",
				 r->nreqs_held, sv.answered, held, answered);
		if (window_ok && sv.unfinished)
			RIG_FAIL("%d stream(s) (stream %d, ...) got the backend's answer without its end, though the "
				 "flow-control windows held it (%llu bytes owed; first run: %d unfinished)",
				 sv.unfinished, sv.unfinished_id, (unsigned long long)sv.owed, unfinished);
	}
	if (verbose)
		fprintf(stderr, "fuzz_h2: %u stream(s) opened, %u request(s) at the backend (%u before EOF), "
			"%d stream(s) answered\n", r->nstreams, r->nreqs, r->nreqs_held, sv.answered);
	return 0;
}

/* ---------------------------------------------------------------------- */
/* The mutator                                                            */

static uint64_t rs;

NOCOV static uint32_t rnd(void)
{
	rs ^= rs >> 12;
	rs ^= rs << 25;
	rs ^= rs >> 27;
	return (uint32_t)((rs * 0x2545F4914F6CDD1Dull) >> 32);
}

#define PICK(arr) (arr[rnd() % (sizeof(arr) / sizeof(arr[0]))])

static const char *const i_names[] = {
	"host", "content-length", "transfer-encoding", "connection", "keep-alive", "proxy-connection", "upgrade",
	"te", "trailer", "expect", "cookie", "x-forwarded-for", "forwarded", "x-real-ip", "x-forwarded-host",
	"x-forwarded-proto", "wl-proxy-client-ip", "x_forwarded_for", "content_length", "transfer_encoding",
	"http2-settings", ":authority", ":path", ":method", ":scheme", ":protocol", ":status", "accept",
	"user-agent", "x-a", "Host", "content-type", "if-none-match", "range", "authorization", "x-b:c", "",
	"x y", "x\r\ny",
};
static const char *const i_values[] = {
	"", "0", "1", "10", "00011", "-1", "18446744073709551616", "chunked", "gzip, chunked", "100-continue",
	"trailers", "close", "keep-alive", "a=b", "c=d; e=f", "example.com", "example.com:8080", "[::1]:80",
	"a b", "x@y", "/", "*", "/a?b=c", "/a/../b", "http://example.com/", "GET", "POST", "HEAD", "CONNECT",
	"OPTIONS", "h2c", "x\r\nInjected: 1", " lead", "trail ", "\x7f", "\xff\xfe", "http", "https",
	"websocket", "bytes=0-1", "192.0.2.1",
};
static const char *const i_methods[] = { "GET", "HEAD", "POST", "PUT", "OPTIONS", "DELETE", "CONNECT",
					 "PATCH", "TRACE", "PRI", "get", "FOO", "" };
static const char *const i_paths[] = { "/", "/a?b=c", "*", "/a/../b", "http://x/y", "", "//x", "/%00",
				       "/x#f", "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
static const char *const i_auth[] = { "example.com", "example.com:80", "", "[::1]:8080", "a b", "x@y",
				      "EXAMPLE.com", "example.com." };

struct mfield {
	uint8_t n[256], v[256];
	size_t nl, vl;
};

#define MAX_MFIELDS 48
static struct mfield mf[MAX_MFIELDS];
static size_t nmf;

NOCOV static void mf_set(struct mfield *f, const char *n, size_t nl, const char *v, size_t vl)
{
	f->nl = nl < sizeof(f->n) ? nl : sizeof(f->n);
	f->vl = vl < sizeof(f->v) ? vl : sizeof(f->v);
	memcpy(f->n, n, f->nl);
	memcpy(f->v, v, f->vl);
}

NOCOV static void mf_add(const char *n, const char *v)
{
	if (nmf < MAX_MFIELDS)
		mf_set(&mf[nmf++], n, strlen(n), v, strlen(v));
}

NOCOV static void mf_collect(void *ctx, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl)
{
	(void)ctx;
	if (nmf < MAX_MFIELDS)
		mf_set(&mf[nmf++], (const char *)n, nl, (const char *)v, vl);
}

NOCOV static size_t hp_int(uint8_t *o, size_t v, int prefix, uint8_t first)
{
	size_t lim = ((size_t)1 << prefix) - 1, k = 0;
	if (v < lim) {
		o[k++] = (uint8_t)(first | v);
		return k;
	}
	o[k++] = (uint8_t)(first | lim);
	v -= lim;
	while (v >= 128) {
		o[k++] = (uint8_t)((v & 0x7f) | 0x80);
		v >>= 7;
	}
	o[k++] = (uint8_t)v;
	return k;
}

/* The fields as HPACK literals with literal names (mostly without
 * indexing), into O (room for all: 6 + 512 bytes a field). */
NOCOV static size_t hp_encode(uint8_t *o)
{
	size_t k = 0;
	for (size_t i = 0; i < nmf; i++) {
		/* 0x00 without indexing, 0x10 never indexed, 0x40 incremental
		 * indexing: each with name index 0 (a literal name). */
		unsigned r = rnd() % 16;
		o[k++] = r == 0 ? 0x10 : r == 1 ? 0x40 : 0x00;
		k += hp_int(o + k, mf[i].nl, 7, 0);
		memcpy(o + k, mf[i].n, mf[i].nl);
		k += mf[i].nl;
		k += hp_int(o + k, mf[i].vl, 7, 0);
		memcpy(o + k, mf[i].v, mf[i].vl);
		k += mf[i].vl;
	}
	return k;
}

NOCOV static void mf_request(void)
{
	nmf = 0;
	mf_add(":method", PICK(i_methods));
	mf_add(":scheme", rnd() % 8 ? "http" : PICK(i_values));
	mf_add(":path", PICK(i_paths));
	if (rnd() % 4)
		mf_add(":authority", PICK(i_auth));
	for (unsigned k = rnd() % 4; k; k--)
		mf_add(PICK(i_names), PICK(i_values));
}

NOCOV static void mf_mutate(void)
{
	if (nmf == 0) {
		mf_request();
		return;
	}
	struct mfield *f = &mf[rnd() % nmf];
	switch (rnd() % 9) {
	case 0:
		f->vl = LLVMFuzzerMutate(f->v, f->vl ? f->vl : (f->v[0] = 'a', 1), sizeof(f->v));
		break;
	case 1:
		f->nl = LLVMFuzzerMutate(f->n, f->nl ? f->nl : (f->n[0] = 'a', 1), sizeof(f->n));
		break;
	case 2: {
		const char *nm = PICK(i_names);
		mf_set(f, nm, strlen(nm), (const char *)f->v, f->vl);
		break;
	}
	case 3: {
		const char *v = PICK(i_values);
		f->vl = strlen(v);
		memcpy(f->v, v, f->vl);
		break;
	}
	case 4:
		if (nmf < MAX_MFIELDS) {
			size_t at = rnd() % (nmf + 1);
			memmove(&mf[at + 1], &mf[at], (nmf - at) * sizeof(mf[0]));
			nmf++;
			const char *nm = PICK(i_names), *v = PICK(i_values);
			mf_set(&mf[at], nm, strlen(nm), v, strlen(v));
		}
		break;
	case 5: {
		size_t at = (size_t)(f - mf);
		memmove(&mf[at], &mf[at + 1], (nmf - at - 1) * sizeof(mf[0]));
		nmf--;
		break;
	}
	case 6:
		if (nmf < MAX_MFIELDS)
			mf[nmf++] = *f;
		break;
	case 7: {
		struct mfield t = *f, *g = &mf[rnd() % nmf];
		*f = *g;
		*g = t;
		break;
	}
	default: {
		/* a pseudo-header to an interesting value */
		const char *v = f->nl == 7 && memcmp(f->n, ":method", 7) == 0 ? PICK(i_methods)
				: f->nl == 5 && memcmp(f->n, ":path", 5) == 0 ? PICK(i_paths)
				: PICK(i_auth);
		f->vl = strlen(v);
		memcpy(f->v, v, f->vl);
		break;
	}
	}
}

struct mframe {
	uint8_t type, flags;
	uint32_t sid;
	const uint8_t *p;
	size_t len;
};

#define MAX_MFRAMES 512
static struct mframe fr[MAX_MFRAMES];
static size_t nfr;
static uint8_t scratch[3][1 << 16];  /* new payloads (at most one per kind of edit) */
static uint8_t outb[1 << 17];

NOCOV static uint32_t pick_sid(void)
{
	uint32_t ids[64], n = 0, max = 0;
	for (size_t i = 0; i < nfr && n < 64; i++)
		if (fr[i].type == 1) {
			ids[n++] = fr[i].sid;
			if (fr[i].sid > max)
				max = fr[i].sid;
		}
	switch (rnd() % 8) {
	case 0:
		return 0;
	case 1:
		return (max | 1) + 2;
	case 2:
		return rnd() % 16;
	case 3:
		return 0x7fffffff;
	default:
		return n ? ids[rnd() % n] : 1;
	}
}

NOCOV static void insert_frame(size_t at, struct mframe f)
{
	if (nfr >= MAX_MFRAMES)
		return;
	memmove(&fr[at + 1], &fr[at], (nfr - at) * sizeof(fr[0]));
	fr[at] = f;
	nfr++;
}

NOCOV static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

/* A new frame of some type into scratch[2]. */
NOCOV static struct mframe new_frame(void)
{
	static const uint32_t vals[] = { 0, 1, 100, 16384, 16385, 65535, 65536, 1u << 20, 0x7fffffff, 0x80000000u,
					 (1u << 24) - 1, 1u << 24, 0xffffffffu };
	uint8_t *s = scratch[2];
	struct mframe f = { .p = s, .sid = pick_sid() };
	switch (rnd() % 11) {
	case 0:  /* WINDOW_UPDATE */
		f.type = 8;
		f.len = 4;
		put32(s, rnd() % 2 ? PICK(vals) : rnd());
		break;
	case 1:  /* RST_STREAM */
		f.type = 3;
		f.len = 4;
		put32(s, rnd() % 14);
		break;
	case 2:  /* PING */
		f.type = 6;
		f.sid = 0;
		f.flags = rnd() % 4 == 0;
		f.len = 8;
		memcpy(s, "pingping", 8);
		break;
	case 3: {  /* SETTINGS */
		f.type = 4;
		f.sid = 0;
		if (rnd() % 4 == 0) {
			f.flags = 1;
			break;
		}
		for (unsigned k = 1 + rnd() % 3; k; k--) {
			s[f.len] = 0;
			s[f.len + 1] = (uint8_t)(rnd() % 8 ? 1 + rnd() % 6 : rnd());
			put32(s + f.len + 2, PICK(vals));
			f.len += 6;
		}
		break;
	}
	case 4:  /* PRIORITY */
		f.type = 2;
		f.len = 5;
		put32(s, rnd() % 2 ? pick_sid() : rnd());
		s[4] = (uint8_t)rnd();
		break;
	case 5:  /* GOAWAY */
		f.type = 7;
		f.sid = 0;
		f.len = 8;
		put32(s, pick_sid());
		put32(s + 4, rnd() % 14);
		break;
	case 6:  /* DATA */
		f.type = 0;
		f.flags = rnd() % 2;
		f.len = rnd() % 3 ? rnd() % 32 : rnd() % 20000;
		for (size_t i = 0; i < f.len; i++)
			s[i] = (uint8_t)('a' + i % 26);
		break;
	case 7:
	case 8:  /* HEADERS: a request */
		f.type = 1;
		f.flags = (uint8_t)(0x4 | (rnd() % 3 ? 1 : 0));
		if (rnd() % 4 == 0) {  /* a new stream */
			uint32_t max = 0;
			for (size_t i = 0; i < nfr; i++)
				if (fr[i].type == 1 && fr[i].sid > max)
					max = fr[i].sid;
			f.sid = (max | 1) + 2;
		}
		mf_request();
		f.len = hp_encode(s);
		break;
	case 9:  /* CONTINUATION */
		f.type = 9;
		f.flags = rnd() % 2 ? 4 : 0;
		nmf = 0;
		mf_add(PICK(i_names), PICK(i_values));
		f.len = hp_encode(s);
		break;
	default:  /* an extension frame */
		f.type = (uint8_t)(10 + rnd() % 246);
		f.flags = (uint8_t)rnd();
		f.len = rnd() % 16;
		memset(s, 'x', f.len);
		break;
	}
	return f;
}

NOCOV size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed)
{
	rs = (uint64_t)seed * 0x9E3779B97F4A7C15ull + 0x1234567;
	if (size < 1 + PREFACE_LEN || memcmp(data + 1, preface, PREFACE_LEN) != 0 || rnd() % 10 == 0) {
		if (size >= 1 && size + PREFACE_LEN <= max_size && rnd() % 4 == 0 &&
		    (size < 1 + PREFACE_LEN || memcmp(data + 1, preface, PREFACE_LEN) != 0)) {
			memmove(data + 1 + PREFACE_LEN, data + 1, size - 1);
			memcpy(data + 1, preface, PREFACE_LEN);
			return size + PREFACE_LEN;
		}
		return LLVMFuzzerMutate(data, size, max_size);
	}
	/* The frames after the preface; a partial last frame stays as the tail. */
	nfr = 0;
	size_t pos = 1 + PREFACE_LEN;
	while (size - pos >= 9 && nfr < MAX_MFRAMES) {
		size_t len = be24(data + pos);
		if (len > size - pos - 9)
			break;
		fr[nfr++] = (struct mframe){ data[pos + 3], data[pos + 4], be32(data + pos + 5), data + pos + 9, len };
		pos += 9 + len;
	}
	const uint8_t *tail = data + pos;
	size_t tail_len = size - pos;
	uint8_t opt = data[0];
	if (max_size > sizeof(outb))
		max_size = sizeof(outb);
	size_t room = max_size > size ? max_size - size : 0;
	unsigned op = rnd() % 21;
	if (nfr == 0 && op >= 2)
		op = 10;  /* nothing to edit: add a frame */
	struct mframe *f = nfr ? &fr[rnd() % nfr] : NULL;
	switch (op) {
	case 0:
	case 1:
		return LLVMFuzzerMutate(data, size, max_size);
	case 2:
		opt = (uint8_t)rnd();
		break;
	case 3:
	case 4:
	case 5: {  /* the payload's bytes */
		size_t cap = f->len + room < sizeof(scratch[0]) ? f->len + room : sizeof(scratch[0]);
		uint8_t *s = scratch[0];
		memcpy(s, f->p, f->len);
		size_t len = f->len;
		if (len == 0)
			s[len++] = (uint8_t)rnd();
		if (cap < len)
			return LLVMFuzzerMutate(data, size, max_size);
		f->len = LLVMFuzzerMutate(s, len, cap);
		f->p = s;
		break;
	}
	case 6:
	case 7: {  /* the frame header */
		switch (rnd() % 4) {
		case 0:
			f->flags ^= (uint8_t)(1u << (rnd() % 8));
			break;
		case 1:
			f->flags ^= (uint8_t)(rnd() % 2 ? 0x1 : 0x4);  /* END_STREAM / END_HEADERS */
			break;
		case 2:
			f->type = (uint8_t)(rnd() % 8 ? rnd() % 10 : rnd());
			break;
		default:
			f->sid = pick_sid() | (rnd() % 16 == 0 ? 0x80000000u : 0);
			break;
		}
		break;
	}
	case 8: {  /* duplicate */
		struct mframe c = *f;
		insert_frame(rnd() % (nfr + 1), c);
		break;
	}
	case 9: {  /* drop or move */
		struct mframe c = *f;
		size_t at = (size_t)(f - fr);
		memmove(&fr[at], &fr[at + 1], (nfr - at - 1) * sizeof(fr[0]));
		nfr--;
		if (rnd() % 2)
			insert_frame(rnd() % (nfr + 1), c);
		break;
	}
	case 10:
	case 11:
	case 12:  /* a new frame */
		insert_frame(nfr ? rnd() % (nfr + 1) : 0, new_frame());
		break;
	case 13: {  /* split: HEADERS into HEADERS + CONTINUATION, DATA into two */
		if ((f->type != 1 && f->type != 0) || (f->flags & 0x28) || f->len < 2 || nfr >= MAX_MFRAMES)
			return LLVMFuzzerMutate(data, size, max_size);
		size_t cut = 1 + rnd() % (f->len - 1);
		struct mframe second = *f;
		second.p = f->p + cut;
		second.len = f->len - cut;
		f->len = cut;
		if (f->type == 1) {
			second.type = 9;
			second.flags = f->flags & 0x4;
			f->flags &= (uint8_t)~0x4;
		} else {
			f->flags &= (uint8_t)~0x1;
		}
		insert_frame((size_t)(f - fr) + 1, second);
		break;
	}
	case 20: {  /* a frame (and the next) again and again, on new streams:
		    * many streams, a rapid reset, a flood */
		size_t i = (size_t)(f - fr), k = i + 1 < nfr && rnd() % 2 ? 2 : 1;
		uint32_t max = 0;
		for (size_t j = 0; j < nfr; j++)
			if (fr[j].sid > max && fr[j].sid < 0x7fff0000u)
				max = fr[j].sid;
		size_t bytes = 0;
		for (size_t j = 0; j < k; j++)
			bytes += 9 + fr[i + j].len;
		size_t copies = 2 + rnd() % 200;
		if (bytes * copies > room)
			copies = room / bytes;
		int new_ids = f->sid != 0 && rnd() % 4;
		struct mframe grp[2] = { fr[i], k == 2 ? fr[i + 1] : fr[i] };
		for (size_t c = 0; c < copies && nfr + k <= MAX_MFRAMES; c++) {
			for (size_t j = 0; j < k; j++) {
				struct mframe g = grp[j];
				if (new_ids && g.sid)
					g.sid = (max | 1) + 2 * (uint32_t)(c + 1);
				insert_frame(i + k + c * k + j, g);
			}
		}
		break;
	}
	case 14: {  /* padding on DATA or HEADERS */
		if (f->type > 1 || f->len + 256 > sizeof(scratch[1]))
			return LLVMFuzzerMutate(data, size, max_size);
		uint8_t *s = scratch[1];
		if (f->flags & 0x8) {  /* drop it: keep the rest */
			const uint8_t *frag;
			size_t fl;
			if (frame_fragment(f->type, f->flags, f->p, f->len, &frag, &fl) < 0)
				return LLVMFuzzerMutate(data, size, max_size);
			size_t pre = f->type == 1 && (f->flags & 0x20) ? 5 : 0;
			memcpy(s, f->p + 1, pre);
			memcpy(s + pre, frag, fl);
			f->len = pre + fl;
			f->flags &= (uint8_t)~0x8;
		} else {
			uint8_t pad = (uint8_t)(rnd() % 4 ? rnd() % 16 : rnd());
			s[0] = pad;
			memcpy(s + 1, f->p, f->len);
			memset(s + 1 + f->len, 0, pad);
			f->len += 1 + pad;
			if (rnd() % 8 == 0)
				s[0] = (uint8_t)(pad + 1 + rnd() % 8);  /* padding past the frame */
			f->flags |= 0x8;
		}
		f->p = s;
		break;
	}
	default: {  /* HPACK fields of a HEADERS frame, decoded and re-encoded */
		struct mframe *h = NULL;
		for (size_t k = 0, i = rnd() % nfr; k < nfr; k++, i = (i + 1) % nfr)
			if (fr[i].type == 1 && (fr[i].flags & 0x4)) {
				h = &fr[i];
				break;
			}
		const uint8_t *frag;
		size_t fl;
		if (h == NULL || frame_fragment(h->type, h->flags, h->p, h->len, &frag, &fl) < 0) {
			insert_frame(nfr ? rnd() % (nfr + 1) : 0, new_frame());
			break;
		}
		nghttp2_hd_inflater *inf;
		if (nghttp2_hd_inflate_new(&inf) != 0)
			abort();
		nmf = 0;
		int bad = inflate(inf, frag, fl, 1, mf_collect, NULL) < 0;
		nghttp2_hd_inflate_del(inf);
		if (bad)  /* it refers to the dynamic table, or is broken: plain bytes then */
			return LLVMFuzzerMutate(data, size, max_size);
		for (unsigned k = 1 + (rnd() % 4 == 0 ? rnd() % 3 : 0); k; k--)
			mf_mutate();
		uint8_t *s = scratch[1];
		size_t pre = (size_t)(frag - h->p), pad = h->len - pre - fl;
		memcpy(s, h->p, pre);
		size_t bl = hp_encode(s + pre);
		memcpy(s + pre + bl, frag + fl, pad);
		h->p = s;
		h->len = pre + bl + pad;
		break;
	}
	}
	/* Write it out, lengths from the payloads. */
	size_t k = 0;
	outb[k++] = opt;
	memcpy(outb + k, preface, PREFACE_LEN);
	k += PREFACE_LEN;
	for (size_t i = 0; i < nfr; i++) {
		if (k + 9 + fr[i].len > max_size || fr[i].len >= (1u << 24))
			return LLVMFuzzerMutate(data, size, max_size);
		outb[k] = (uint8_t)(fr[i].len >> 16);
		outb[k + 1] = (uint8_t)(fr[i].len >> 8);
		outb[k + 2] = (uint8_t)fr[i].len;
		outb[k + 3] = fr[i].type;
		outb[k + 4] = fr[i].flags;
		put32(outb + k + 5, fr[i].sid);
		memcpy(outb + k + 9, fr[i].p, fr[i].len);
		k += 9 + fr[i].len;
	}
	if (k + tail_len > max_size)
		tail_len = max_size - k;
	memmove(outb + k, tail, tail_len);
	k += tail_len;
	memcpy(data, outb, k);
	return k;
}
