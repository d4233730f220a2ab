/* The in-process proxy rig of the data-path fuzz targets (rig.h). */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <uv.h>
#include "rig.h"
#include "cfg.h"
#include "codec.h"
#include "log.h"
#include "master.h"
#include "proxy_proto.h"
#include "shm.h"
#include "stats.h"
#include "tls.h"
#include "worker.h"

#define RIG_PEERS 256           /* rig-side sockets open at once (an HTTP/2 input may
				 * carry hundreds of requests, on as many connections) */
#define RIG_CLIENT_MAX (4u << 20)
#define RIG_DEADLINE_US 8000000 /* one exchange; the config's timeouts are far shorter */

static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
static const char answer_head[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";

void (*rig_on_request)(const char *p, size_t n, const struct rig_req *rq, const char *body);
int rig_settle_ms;
const size_t *rig_split;
size_t rig_nsplit;

/* ---------------------------------------------------------------------- */
/* A virtual monotonic clock                                              */

/* Every timer of the worker runs on libuv's loop time (uv_now: deadlines,
 * the connection heap, the backend and queue timers), which libuv reads
 * from CLOCK_MONOTONIC(_COARSE). This definition takes the place of libc's
 * for the whole process (libuv's calls included) and adds VT_OFFSET_NS to
 * those clocks, so RIG_WAIT_CLOSE can move time on to the worker's next
 * timer instead of sleeping. libFuzzer times runs on the realtime clock,
 * and the rig its own deadlines on CLOCK_MONOTONIC_RAW: neither moves. */
static int64_t vt_offset_ns;
static int (*libc_clock_gettime)(clockid_t, struct timespec *);

int clock_gettime(clockid_t id, struct timespec *ts)
{
	if (libc_clock_gettime == NULL) {
		libc_clock_gettime = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
		AN(libc_clock_gettime);
	}
	int r = libc_clock_gettime(id, ts);
	if (r == 0 && vt_offset_ns && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_COARSE)) {
		int64_t ns = ts->tv_nsec + vt_offset_ns % 1000000000;
		ts->tv_sec += (time_t)(vt_offset_ns / 1000000000 + ns / 1000000000);
		ts->tv_nsec = ns % 1000000000;
	}
	return r;
}

/* The rig's own deadlines: real time. */
static uint64_t real_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void rig_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%s:%d: oracle failed: ", file, line);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	abort();
}

/* ---------------------------------------------------------------------- */
/* Strict HTTP/1.1 parsers: what no backend or client could read two ways */

#define BAD(msg) do { *why = (msg); return -1; } while (0)

static int is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Length of the line at P with its CRLF, 0 when its LF has not arrived,
 * -1 for a bare CR, a bare LF or a NUL (also in an incomplete line). */
static long line_len(const char *p, size_t n, const char **why)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			if (i == 0 || p[i - 1] != '\r')
				BAD("bare LF");
			return (long)i + 1;
		}
		if (p[i] == '\0')
			BAD("NUL byte in a head line");
		if (p[i] == '\r' && i + 1 < n && p[i + 1] != '\n')
			BAD("bare CR");
	}
	return 0;
}

struct framing {
	int ncl, nte, nhost;
	uint64_t cl;
	int te_chunked;
};

/* One header line (without CRLF) of length LEN. */
static int header_line(const char *p, size_t len, struct framing *f, const char **why)
{
	if (p[0] == ' ' || p[0] == '\t')
		BAD("obs-fold (a header line starting with whitespace)");
	size_t i = 0;
	while (i < len && is_tchar((unsigned char)p[i]))
		i++;
	if (i == 0 || i == len || p[i] != ':')
		BAD("header name is not a token followed by ':'");
	size_t nl = i;
	const char *v = p + i + 1;
	size_t vl = len - i - 1;
	while (vl && (v[0] == ' ' || v[0] == '\t'))
		v++, vl--;
	while (vl && (v[vl - 1] == ' ' || v[vl - 1] == '\t'))
		vl--;
	if (nl == 14 && strncasecmp(p, "content-length", 14) == 0) {
		f->ncl++;
		if (vl == 0)
			BAD("Content-Length value empty");
		/* sluice re-emits every length it forwards in canonical decimal
		 * (no leading zero) and refuses those past INT64_MAX. */
		if (vl > 1 && v[0] == '0')
			BAD("Content-Length value not canonical (leading zero)");
		uint64_t x = 0;
		for (size_t k = 0; k < vl; k++) {
			if (v[k] < '0' || v[k] > '9')
				BAD("Content-Length value is not digits");
			uint64_t d = (uint64_t)(v[k] - '0');
			if (x > ((uint64_t)INT64_MAX - d) / 10)
				BAD("Content-Length value beyond INT64_MAX");
			x = x * 10 + d;
		}
		f->cl = x;
	} else if (nl == 17 && strncasecmp(p, "transfer-encoding", 17) == 0) {
		f->nte++;
		f->te_chunked = vl == 7 && strncasecmp(v, "chunked", 7) == 0;
	} else if (nl == 4 && strncasecmp(p, "host", 4) == 0) {
		f->nhost++;
	}
	return 0;
}

/* Header lines from P up to and including the empty line. Returns the
 * bytes used, 0 for more, -1 bad. */
static long header_block(const char *p, size_t n, struct framing *f, const char **why)
{
	size_t pos = 0;
	for (;;) {
		long ll = line_len(p + pos, n - pos, why);
		if (ll <= 0)
			return ll;
		if (ll == 2)
			return (long)(pos + 2);
		if (header_line(p + pos, (size_t)ll - 2, f, why) < 0)
			return -1;
		pos += (size_t)ll;
	}
}

/* A chunked body at P. TRAILERS: trailer fields allowed after the last
 * chunk. Appends the data to BODY (if not NULL). */
static long chunked_body(const char *p, size_t n, int trailers, struct buf *body, uint64_t *blen, const char **why)
{
	size_t pos = 0;
	*blen = 0;
	for (;;) {
		long ll = line_len(p + pos, n - pos, why);
		if (ll <= 0)
			return ll;
		size_t dl = (size_t)ll - 2;
		if (dl == 0 || dl > 15)
			BAD("chunk size line empty or too long");
		uint64_t sz = 0;
		for (size_t k = 0; k < dl; k++) {
			char c = p[pos + k];
			int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
							   : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
			if (d < 0)
				BAD("chunk size line with something else than hex digits (extension or junk)");
			sz = sz * 16 + (uint64_t)d;
		}
		pos += (size_t)ll;
		if (sz == 0) {
			if (trailers) {
				struct framing tf = { 0 };
				long tl = header_block(p + pos, n - pos, &tf, why);
				if (tl <= 0)
					return tl;
				if (tf.ncl || tf.nte)
					BAD("framing header in a trailer");
				return (long)(pos + (size_t)tl);
			}
			if (n - pos < 2) {
				if (n - pos == 1 && p[pos] != '\r')
					BAD("trailer or junk after the last chunk");
				return 0;
			}
			if (p[pos] != '\r' || p[pos + 1] != '\n')
				BAD("trailer or junk after the last chunk");
			return (long)(pos + 2);
		}
		if (n - pos < sz + 2)
			return 0;
		if (body)
			buf_append(body, p + pos, sz);
		*blen += sz;
		pos += sz;
		if (p[pos] != '\r' || p[pos + 1] != '\n')
			BAD("chunk data not followed by CRLF");
		pos += 2;
	}
}

long rig_parse_request(const char *p, size_t n, struct rig_req *out, struct buf *body, const char **why)
{
	memset(out, 0, sizeof(*out));
	long ll = line_len(p, n, why);
	if (ll <= 0)
		return ll;
	size_t len = (size_t)ll - 2, i = 0;
	while (i < len && is_tchar((unsigned char)p[i]))
		i++;
	if (i == 0 || i >= sizeof(out->method) || i == len || p[i] != ' ')
		BAD("request method is not a token followed by one space");
	memcpy(out->method, p, i);
	size_t t = ++i;
	while (i < len && (unsigned char)p[i] > 0x20 && (unsigned char)p[i] != 0x7f)
		i++;
	if (i == t || i == len || p[i] != ' ')
		BAD("request target empty, with a control byte or not followed by one space");
	if (len - i - 1 != 8 || memcmp(p + i + 1, "HTTP/1.1", 8) != 0)
		BAD("request line does not end in HTTP/1.1");
	struct framing f = { 0 };
	long hl = header_block(p + ll, n - (size_t)ll, &f, why);
	if (hl <= 0)
		return hl;
	size_t pos = (size_t)ll + (size_t)hl;
	if (f.nhost > 1)
		BAD("more than one Host header");
	if (f.ncl && f.nte)
		BAD("both Content-Length and Transfer-Encoding");
	if (f.ncl > 1)
		BAD("more than one Content-Length");
	if (f.nte > 1 || (f.nte && !f.te_chunked))
		BAD("Transfer-Encoding other than one \"chunked\"");
	size_t boff = body ? body->len : 0;
	out->body_off = boff;
	if (f.nte) {
		out->framing = 2;
		long bl = chunked_body(p + pos, n - pos, 0, body, &out->body_len, why);
		if (bl <= 0) {
			if (body)
				body->len = boff;
			return bl;
		}
		return (long)(pos + (size_t)bl);
	}
	if (f.ncl) {
		out->framing = 1;
		out->body_len = f.cl;
		if (n - pos < f.cl)
			return 0;
		if (body)
			buf_append(body, p + pos, f.cl);
		return (long)(pos + f.cl);
	}
	return (long)pos;
}

long rig_parse_response(const char *p, size_t n, int is_head, int at_eof, int *status, int *chunked,
			const char **why)
{
	*chunked = 0;
	long ll = line_len(p, n, why);
	if (ll <= 0)
		return ll;
	size_t len = (size_t)ll - 2;
	if (len < 12 || (memcmp(p, "HTTP/1.1 ", 9) != 0 && memcmp(p, "HTTP/1.0 ", 9) != 0))
		BAD("status line does not start with HTTP/1.x and a status");
	for (int k = 9; k < 12; k++)
		if (p[k] < '0' || p[k] > '9')
			BAD("status code is not 3 digits");
	if (len > 12 && p[12] != ' ')
		BAD("status code not followed by a space");
	*status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	if (*status < 100)
		BAD("status below 100");
	struct framing f = { 0 };
	long hl = header_block(p + ll, n - (size_t)ll, &f, why);
	if (hl <= 0)
		return hl;
	size_t pos = (size_t)ll + (size_t)hl;
	if (f.ncl && f.nte)
		BAD("response with both Content-Length and Transfer-Encoding");
	if (f.ncl > 1)
		BAD("response with more than one Content-Length");
	if (f.nte > 1 || (f.nte && !f.te_chunked))
		BAD("response Transfer-Encoding other than one \"chunked\"");
	if ((*status >= 100 && *status < 200) || *status == 204 || *status == 304 || is_head) {
		if (f.nte && (*status < 200 || *status == 204))
			BAD("Transfer-Encoding on a 1xx or 204");
		return (long)pos;
	}
	if (f.nte) {
		uint64_t bl;
		*chunked = 1;
		long cl = chunked_body(p + pos, n - pos, 1, NULL, &bl, why);
		if (cl <= 0)
			return cl;
		return (long)(pos + (size_t)cl);
	}
	if (f.ncl)
		return n - pos < f.cl ? 0 : (long)(pos + f.cl);
	return at_eof ? (long)n : 0;  /* close-delimited */
}

/* ---------------------------------------------------------------------- */
/* Sockets the rig owns, on the worker's loop                             */

struct peer {
	uv_poll_t poll;
	int fd;
	int kind;             /* PEER_* */
	int pp;               /* backend port B: a PROXY v2 header comes first */
	int used, closing;
	int eof;
	int stalled;          /* RIG_CLIENT_STALL: not read (not polled) */
	int answered;         /* RIG_ANSWER_FUZZ: the response went out */
	struct buf in;
	size_t off;           /* parsed up to */
};

enum { PEER_CLIENT, PEER_BACKEND, PEER_BLISTEN };

static struct peer peers[RIG_PEERS];
static struct peer *client, *blisten[2];
static int lfd[2], bfd[2];
static uint16_t lport[2], bport[2];
static struct rig_result res;
static enum rig_backend_mode cur_mode;
static const uint8_t *cur_resp;
static size_t cur_resp_len;
static unsigned serial;
static char dir[] = "/tmp/fuzz_rig.XXXXXX";
static struct cfg *cfg;
static struct tls_set *tls;  /* kept for the worker (and reachable for LSan) */

static void peer_closed(uv_handle_t *h)
{
	struct peer *pe = h->data;
	pe->used = pe->closing = 0;
}

/* Close abortively (RST): no TIME_WAIT, whatever state the socket is in. */
static void peer_close(struct peer *pe)
{
	if (!pe->used || pe->closing)
		return;
	pe->closing = 1;
	struct linger lg = { 1, 0 };
	setsockopt(pe->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	uv_poll_stop(&pe->poll);
	close(pe->fd);
	pe->fd = -1;
	uv_close((uv_handle_t *)&pe->poll, peer_closed);
}

static void on_peer(uv_poll_t *h, int status, int events);

static struct peer *peer_new(int fd, int kind)
{
	for (int i = 0; i < RIG_PEERS; i++) {
		struct peer *pe = &peers[i];
		if (pe->used)
			continue;
		struct buf keep = pe->in;
		memset(pe, 0, sizeof(*pe));
		pe->in = keep;
		pe->in.len = 0;
		pe->used = 1;
		pe->fd = fd;
		pe->kind = kind;
		/* No Nagle: a small write must not wait for the ACK of the last
		 * one (a delayed ACK: tens of ms) when an input is written in
		 * pieces or a backend answers twice on one connection. */
		int one = 1;
		if (kind != PEER_BLISTEN)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		AZ(uv_poll_init(&W->loop, &pe->poll, fd));
		pe->poll.data = pe;
		AZ(uv_poll_start(&pe->poll, UV_READABLE, on_peer));
		return pe;
	}
	RIG_FAIL("more than %d rig sockets open (sluice opens backend connections without end?)", RIG_PEERS);
}

static void wait_writable(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	uint64_t deadline = real_us() + RIG_DEADLINE_US;
	while (poll(&pfd, 1, 100) <= 0)
		if (real_us() > deadline)
			RIG_FAIL("a rig socket stayed unwritable for %d s", RIG_DEADLINE_US / 1000000);
}

/* Every socket of the rig is non-blocking: wait for room (sluice reads
 * what it is sent; the kernel's loopback buffers hold far more than one
 * input). */
static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			wait_writable(fd);
			continue;
		}
		if (w < 0)
			return;  /* sluice reset the connection: its business */
		c += w;
		n -= (size_t)w;
	}
}

/* The backend parses what arrived and answers each complete request. */
static void backend_input(struct peer *pe)
{
	const char *why = NULL;
	if (pe->pp && pe->off == 0) {
		struct pp_decoded d;
		ssize_t r = pp_decode((const uint8_t *)pe->in.data, pe->in.len, &d, &why);
		if (r < 0)
			RIG_FAIL("backend B: bad PROXY header from sluice: %s", why);
		if (r == 0)
			return;
		if (d.version != 2 || !d.crc_checked)
			RIG_FAIL("backend B: PROXY header v%d, crc_checked %d", d.version, d.crc_checked);
		pe->off = (size_t)r;
	}
	for (;;) {
		struct rig_req rq;
		long r = rig_parse_request(pe->in.data + pe->off, pe->in.len - pe->off, &rq, &res.bodies, &why);
		if (r < 0)
			RIG_FAIL("the backend received a malformed request (%s) at offset %zu of:\n%.*s", why, pe->off,
				 (int)(pe->in.len > 4000 ? 4000 : pe->in.len), pe->in.data);
		if (r == 0)
			return;
		if (rig_on_request)
			rig_on_request(pe->in.data + pe->off, (size_t)r, &rq,
				       rq.body_len ? res.bodies.data + rq.body_off : "");
		pe->off += (size_t)r;
		if (res.nreqs >= RIG_MAX_REQS)
			RIG_FAIL("more than %d requests in one exchange", RIG_MAX_REQS);
		res.reqs[res.nreqs++] = rq;
		if (cur_mode == RIG_ANSWER_EACH) {
			if (strcmp(rq.method, "HEAD") == 0)
				write_all(pe->fd, answer_head, sizeof(answer_head) - 1);
			else
				write_all(pe->fd, answer, sizeof(answer) - 1);
		} else if (cur_mode == RIG_ANSWER_FIXED) {
			/* To a HEAD: the heads only, interim ones included. */
			size_t len = cur_resp_len, at = 0;
			while (strcmp(rq.method, "HEAD") == 0) {
				const uint8_t *e = memmem(cur_resp + at, cur_resp_len - at, "\r\n\r\n", 4);
				if (e == NULL)
					break;
				int interim = cur_resp_len - at > 10 && cur_resp[at + 9] == '1';
				at = len = (size_t)(e + 4 - cur_resp);
				if (!interim)
					break;
			}
			write_all(pe->fd, cur_resp, len);
		} else if (!pe->answered) {
			pe->answered = 1;
			write_all(pe->fd, cur_resp, cur_resp_len);
			shutdown(pe->fd, SHUT_WR);
		}
	}
}

static void on_peer(uv_poll_t *h, int status, int events)
{
	(void)events;
	struct peer *pe = h->data;
	if (pe->kind == PEER_BLISTEN) {
		int fd;
		while ((fd = accept4(pe->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
			struct peer *b = peer_new(fd, PEER_BACKEND);
			b->pp = pe == blisten[1];
			res.nconns++;
		}
		return;
	}
	if (status < 0) {
		pe->eof = 1;
		uv_poll_stop(&pe->poll);
		return;
	}
	for (;;) {
		buf_reserve(&pe->in, 16384);
		ssize_t r = recv(pe->fd, pe->in.data + pe->in.len, pe->in.cap - pe->in.len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		if (r <= 0) {
			pe->eof = 1;
			uv_poll_stop(&pe->poll);
			break;
		}
		pe->in.len += (size_t)r;
		if (pe->kind == PEER_CLIENT && pe->in.len > RIG_CLIENT_MAX)
			RIG_FAIL("the client received more than %u bytes", RIG_CLIENT_MAX);
	}
	if (pe->kind == PEER_BACKEND) {
		backend_input(pe);
		if (pe->eof)  /* sluice closed it: its slot is free for the next one */
			peer_close(pe);
	}
}

/* ---------------------------------------------------------------------- */
/* The codecs' reports to the stream layer, watched                       */

/* Streams a codec opened and has not released: a stream is pooled, so a
 * report about one already released would reach a stream that may serve
 * another request by then, with no sanitizer to notice. */
static const struct stream_events *real_ev;
static struct stream **live;
static size_t nlive, live_cap;

static size_t live_find(const struct stream *s)
{
	for (size_t i = 0; i < nlive; i++)
		if (live[i] == s)
			return i;
	return (size_t)-1;
}

static void live_check(const struct stream *s, const char *ev)
{
	if (s == NULL || live_find(s) == (size_t)-1)
		RIG_FAIL("a codec reported %s about a stream %s", ev, s ? "it had released (or never opened)" : "NULL");
}

static struct stream *w_open(struct client *cl, void *ctx)
{
	struct stream *s = real_ev->open(cl, ctx);
	if (s == NULL || live_find(s) != (size_t)-1)
		RIG_FAIL("stream_events.open gave a stream that is already open");
	if (nlive == live_cap) {
		live_cap = live_cap ? 2 * live_cap : 64;
		live = realloc(live, live_cap * sizeof(*live));
		AN(live);
	}
	live[nlive++] = s;
	res.nstreams++;
	return s;
}

static void w_release(struct stream *s)
{
	size_t i = live_find(s);
	if (i == (size_t)-1)
		RIG_FAIL("a codec released a stream %s", s ? "twice (or one it never opened)" : "NULL");
	live[i] = live[--nlive];
	real_ev->release(s);
}

#define W_EV(name, ret, decl, args) \
	static ret w_##name decl { live_check(s, #name); return real_ev->name args; }
#define W_EV_VOID(name, decl, args) \
	static void w_##name decl { live_check(s, #name); real_ev->name args; }
W_EV(head, enum reason, (struct stream *s), (s))
W_EV(body, enum reason, (struct stream *s, const char *d, size_t n), (s, d, n))
W_EV(chunk, enum reason, (struct stream *s, uint64_t n), (s, n))
W_EV(end, enum reason, (struct stream *s), (s))
W_EV(pushed, int, (struct stream *s), (s))
W_EV(tunnel_in, int, (struct stream *s, const char *d, size_t n), (s, d, n))
W_EV(peer_eof, int, (struct stream *s), (s))
W_EV_VOID(timeout, (struct stream *s), (s))
W_EV_VOID(fail, (struct stream *s, enum reason r), (s, r))
W_EV_VOID(writable, (struct stream *s), (s))
W_EV_VOID(abort, (struct stream *s), (s))

static const struct stream_events watched_ev = {
	.open = w_open, .head = w_head, .body = w_body, .chunk = w_chunk, .end = w_end, .pushed = w_pushed,
	.tunnel_in = w_tunnel_in, .peer_eof = w_peer_eof, .timeout = w_timeout, .fail = w_fail,
	.writable = w_writable, .abort = w_abort, .release = w_release,
};

/* ---------------------------------------------------------------------- */
/* Set-up                                                                 */

static int listen_any(uint16_t *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1024) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
		RIG_FAIL("listening socket: %s", strerror(errno));
	*port = ntohs(sa.sin_port);
	return fd;
}

static void write_file(const char *name, const char *text)
{
	FILE *f = fopen(name, "w");
	if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0)
		RIG_FAIL("cannot write %s", name);
}

static void cleanup(void)
{
	char path[256];
	snprintf(path, sizeof(path), "rm -rf '%s'", dir);
	if (system(path) != 0)
		fprintf(stderr, "rig: cannot remove %s\n", dir);
}

void rig_init(const char *listener_extra, const char *top_extra, const char *const *files)
{
	rig_init2(listener_extra, NULL, top_extra, files);
}

void rig_init2(const char *listener_extra, const char *proxied_extra, const char *top_extra,
	       const char *const *files)
{
	/* No chdir: libFuzzer reads its corpus by relative paths. */
	if (mkdtemp(dir) == NULL)
		RIG_FAIL("temporary directory: %s", strerror(errno));
	atexit(cleanup);
	char path[512];
	for (size_t i = 0; files && files[i]; i += 2) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		write_file(path, files[i + 1]);
	}
	/* $DIR in the listener's extra lines names the rig's directory. */
	struct buf li = { 0 };
	for (const char *p = listener_extra; p && *p;) {
		const char *d = strstr(p, "$DIR");
		size_t n = d ? (size_t)(d - p) : strlen(p);
		buf_append(&li, p, n);
		p += n;
		if (d) {
			buf_append_str(&li, dir);
			p += 4;
		}
	}
	buf_append(&li, "", 1);
	for (int i = 0; i < 2; i++) {
		lfd[i] = listen_any(&lport[i]);
		bfd[i] = listen_any(&bport[i]);
	}
	/* Short timeouts: an exchange that waits on one (a request sluice holds
	 * open, a backend that never answers) costs little; the usual exchange
	 * ends on EOF long before. Lua's budget is in instructions only, so the
	 * outcome does not depend on the machine's load. */
	struct buf y = { 0 };
	buf_appendf(&y,
		    "workers: 1\nerror_log: /dev/null\naccess_log: \"off\"\ninspection: on\n"
		    "lua_memory_max: 16m\n%s"
		    "timeouts:\n  client_header: 300ms\n  client_keepalive: 300ms\n  client_body: 300ms\n"
		    "  client_send: 300ms\n  drain: 1s\n"
		    "limits:\n  max_request_line: 2k\n  max_header_size: 4k\n  max_headers: 40\n  max_body_size: 64k\n"
		    "listeners:\n"
		    "  - name: plain\n    address: 127.0.0.1:%u\n    backend: app\n%s"
		    "  - name: proxied\n    address: 127.0.0.1:%u\n    backend: pp\n"
		    "    accept_proxy_from: [127.0.0.0/8]\n    trusted_forwarders: [127.0.0.0/8]\n"
		    "    monitor_uri: /ready\n%s"
		    "backends:\n"
		    "  - name: app\n    queue_timeout: 300ms\n    connect_timeout: 300ms\n    response_timeout: 300ms\n"
		    "    idle_timeout: 300ms\n"
		    "    servers:\n      - name: a\n        address: 127.0.0.1:%u\n        max_connections: 8\n"
		    "  - name: pp\n    queue_timeout: 300ms\n    connect_timeout: 300ms\n    response_timeout: 300ms\n"
		    "    idle_timeout: 300ms\n"
		    "    forward:\n      x_forwarded_for: append\n      x_forwarded_proto: true\n"
		    "      x_forwarded_host: true\n      x_forwarded_port: true\n      forwarded: true\n"
		    "      x_real_ip: true\n      wl_proxy_ssl: true\n      wl_proxy_client_ip: true\n"
		    "      wl_proxy_client_port: true\n"
		    "    servers:\n      - name: b\n        address: 127.0.0.1:%u\n        max_connections: 8\n"
		    "        proxy_protocol: v2\n        proxy_tlvs: [unique_id, crc32c]\n",
		    top_extra ? top_extra : "", lport[0], li.data, lport[1], proxied_extra ? proxied_extra : "",
		    bport[0], bport[1]);
	buf_append(&y, "", 1);
	snprintf(path, sizeof(path), "%s/rig.yaml", dir);
	write_file(path, y.data);
	buf_free(&y);
	buf_free(&li);
	char err[8192];
	cfg = cfg_load(path, err, sizeof(err));
	if (cfg == NULL)
		RIG_FAIL("rig config refused:\n%s", err);
	if (log_open(cfg->error_log, cfg->access_log) < 0)
		RIG_FAIL("log_open");
	/* What master_run prepares before it forks a worker. */
	if (shm_init() < 0 || stats_init() < 0)
		RIG_FAIL("shared memory: %s", strerror(errno));
	tls = master_tls_load(cfg, err, sizeof(err));
	if (tls == NULL)
		RIG_FAIL("TLS set: %s", err);
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		char name[SHM_NAME_MAX];
		stats_listener_slot_name(&cfg->listeners[l], name, sizeof(name));
		AN(shm_slot_get(name) >= 0);
	}
	for (unsigned b = 0; b < cfg->nbackends; b++) {
		AN(shm_slot_get(cfg->backends[b].name) >= 0);
		for (unsigned s = 0; s < cfg->backends[b].nservers; s++) {
			char name[SHM_NAME_MAX];
			snprintf(name, sizeof(name), "%s/%s", cfg->backends[b].name, cfg->backends[b].servers[s].name);
			AN(shm_slot_get(name) >= 0);
		}
	}
	atomic_store(&shm->inspect_on, cfg->inspection);
	int slot = shm_worker_alloc();
	AN(slot >= 0);
	atomic_store(&shm->workers[slot].pid, getpid());
	struct worker_fd fds[2] = { { 0, lfd[0] }, { 1, lfd[1] } };
	/* A worker whose parent is PID 1 takes it for a master that went away
	 * and drains (exits) at once: say so rather than "fuzz target exited". */
	if (getppid() == 1)
		RIG_FAIL("the parent of this process is PID 1, so worker_start() would drain and exit at once; "
			 "run the fuzzer from a shell or make that waits for it");
	worker_start(cfg, 0, slot, fds, 2, tls);
	AZ(W->draining);
	real_ev = codec_ev;
	codec_events_set(&watched_ev);
	for (int i = 0; i < 2; i++)
		blisten[i] = peer_new(bfd[i], PEER_BLISTEN);
}

/* ---------------------------------------------------------------------- */
/* One exchange                                                           */

static void run_until(int (*done)(void), const char *what)
{
	uint64_t deadline = real_us() + RIG_DEADLINE_US;
	while (!done()) {
		uv_run(&W->loop, UV_RUN_ONCE);
		if (real_us() > deadline)
			RIG_FAIL("stuck: %s after %d s (clients %u, backend connections %u, client eof %d)", what,
				 RIG_DEADLINE_US / 1000000, W->nclients, W->nbconns, client ? client->eof : -1);
	}
}

static int client_done(void)
{
	return client->eof && W->nclients == 0;
}

/* Sluice has closed or half-closed the client connection (a stalled
 * client sees only the full close, once sluice has taken it at all). */
static uint64_t serial0;  /* W->conn_serial before the client connected */

static int client_gone(void)
{
	return client->eof || (client->stalled && W->conn_serial > serial0 && W->nclients == 0);
}

/* A stalled client reads what it got at last. */
static void client_drain(void)
{
	for (;;) {
		buf_reserve(&client->in, 16384);
		ssize_t r = recv(client->fd, client->in.data + client->in.len, client->in.cap - client->in.len, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r > 0) {
			client->in.len += (size_t)r;
			if (client->in.len > RIG_CLIENT_MAX)
				RIG_FAIL("the client received more than %u bytes", RIG_CLIENT_MAX);
			continue;
		}
		break;  /* EOF, a reset (what it had not read is lost), or nothing more */
	}
	client->eof = 1;
	client->stalled = 0;
}

static int all_closed(void)
{
	for (int i = 0; i < RIG_PEERS; i++)
		if (peers[i].closing)
			return 0;
	return W->nbconns == 0;
}

static void check_idle(void)
{
	if (W->nclients || W->nbconns || !list_empty(&W->clients) || !list_empty(&W->bconns))
		RIG_FAIL("worker not idle after the exchange: %u clients, %u backend connections", W->nclients,
			 W->nbconns);
	if (nlive)
		RIG_FAIL("%zu stream(s) opened by a codec were never released", nlive);
	for (unsigned l = 0; l < W->nlisteners; l++) {
		const struct stats_block *st = W->listeners[l].st;
		int64_t g[] = { atomic_load(&st->gauge[GAUGE_CLIENTS]), atomic_load(&st->gauge[GAUGE_H2_CONNS]),
				atomic_load(&st->gauge[GAUGE_H2_STREAMS]) };
		if (g[0] || g[1] || g[2])
			RIG_FAIL("listener %s after the exchange: gauges client_connections %lld, "
				 "h2_client_connections %lld, h2_streams %lld (all should be 0)",
				 W->listeners[l].cfg->name, (long long)g[0], (long long)g[1], (long long)g[2]);
	}
	for (unsigned b = 0; b < W->nbackends; b++) {
		const struct backend *be = &W->backends[b];
		if (be->q.n || !list_empty(&be->q.list) || shm_get(be->slot, SHM_WAITING))
			RIG_FAIL("backend %s: %u requests still queued", be->cfg->name, be->q.n);
		for (unsigned s = 0; s < be->nservers; s++) {
			const struct server *sv = &be->servers[s];
			if (sv->q.n || !list_empty(&sv->q.list) || shm_get(sv->slot, SHM_WAITING))
				RIG_FAIL("server %s: %u session requests still queued", sv->cfg->name, sv->q.n);
			if (sv->local_conns || sv->nidle || shm_get(sv->slot, SHM_CONNS) || shm_get(sv->slot, SHM_BUSY))
				RIG_FAIL("server %s: %u connections still counted (%u idle, shm %u)", sv->cfg->name,
					 sv->local_conns, sv->nidle, shm_get(sv->slot, SHM_CONNS));
		}
	}
}

/* The client's bytes: responses in order. Each final response answers
 * either the next request the backend saw (read as that request's method:
 * no body after HEAD, whoever made the response), or a request the backend
 * never saw, which sluice answered itself (an error, monitor_uri): its
 * method is not known here, so either reading goes. The first framing
 * found wins, trying at each response the backend's request first, then
 * sluice's own answer; readings that frame every byte before one that
 * needs the last body cut short, which a backend answering every request
 * in full (RIG_ANSWER_EACH, rig_whole_answers) rules out. With
 * rig_whole_answers every request the backend saw must be answered too.
 * Failed (offset,
 * backend requests answered) states are remembered. A forwarded HEAD
 * response with a body frames only as an answer of sluice's own:
 * res.nown tells the targets that know there was none. */
int rig_whole_answers;

enum { READ_SET = 1, READ_HEAD = 2, READ_OWN = 4 };

struct client_frames {
	const char *s;
	size_t len;
	unsigned char *reading;  /* per byte offset: READ_* of the framing found */
	uint64_t *failed;        /* open addressing: (offset, answered) + 1 */
	size_t nfailed, cap;
	size_t worst_pos;        /* the furthest offset a reading failed at */
	const char *worst_why;
	int whole;               /* no body may be cut short */
};

static size_t client_slot(uint64_t st, size_t cap)
{
	return (size_t)(st * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1);
}

static int client_failed(const struct client_frames *cf, uint64_t st)
{
	for (size_t i = cf->cap ? client_slot(st, cf->cap) : 0; cf->cap && cf->failed[i]; i = (i + 1) & (cf->cap - 1))
		if (cf->failed[i] == st)
			return 1;
	return 0;
}

static void client_fail(struct client_frames *cf, uint64_t st)
{
	if ((cf->nfailed + 1) * 2 > cf->cap) {
		size_t ncap = cf->cap ? cf->cap * 2 : 1024;
		uint64_t *old = cf->failed;
		cf->failed = calloc(ncap, sizeof(*cf->failed));
		if (!cf->failed)
			RIG_FAIL("out of memory");
		for (size_t k = 0; k < cf->cap; k++)
			if (old[k]) {
				size_t i = client_slot(old[k], ncap);
				while (cf->failed[i])
					i = (i + 1) & (ncap - 1);
				cf->failed[i] = old[k];
			}
		free(old);
		cf->cap = ncap;
	}
	size_t i = client_slot(st, cf->cap);
	while (cf->failed[i])
		i = (i + 1) & (cf->cap - 1);
	cf->failed[i] = st;
	cf->nfailed++;
}

static void client_why(struct client_frames *cf, size_t pos, const char *why)
{
	if (pos >= cf->worst_pos) {
		cf->worst_pos = pos;
		cf->worst_why = why;
	}
}

static int client_frames_from(struct client_frames *cf, size_t pos, unsigned answered);

/* The response at POS read one way; ANSWERED: backend requests answered
 * before it. */
static int client_reading_fits(struct client_frames *cf, size_t pos, unsigned answered, int head, int own, int may_cut)
{
	int status = 0, chunked = 0;
	const char *why = NULL;
	long r = rig_parse_response(cf->s + pos, cf->len - pos, head, 1, &status, &chunked, &why);
	if (r < 0) {
		client_why(cf, pos, why);
		return 0;
	}
	if (r == 0) {
		/* A body cut short can only be signalled by closing: fine, but
		 * only for the last response, and only once its head is whole. */
		if (may_cut && memmem(cf->s + pos, cf->len - pos, "\r\n\r\n", 4) != NULL)
			return 1;
		client_why(cf, pos, may_cut ? "truncated response head" : "response body cut short");
		return 0;
	}
	if (status == 101)
		return 1;  /* a tunnel: what follows is not HTTP */
	return client_frames_from(cf, pos + (size_t)r, status >= 200 && !own ? answered + 1 : answered);
}

struct client_way {
	int head, own, cut;
};

static int client_frames_from(struct client_frames *cf, size_t pos, unsigned answered)
{
	if (pos == cf->len) {
		if (!rig_whole_answers || answered == res.nreqs)
			return 1;
		client_why(cf, pos, "a request the backend answered got no response");
		return 0;
	}
	uint64_t st = ((uint64_t)pos << 20 | (answered & 0xfffff)) + 1;
	if (client_failed(cf, st))
		return 0;
	/* what may be read here, in order of preference */
	struct client_way way[8];
	int n = 0;
	if (answered < res.nreqs) {
		int known = answered < RIG_MAX_REQS, head = known && strcmp(res.reqs[answered].method, "HEAD") == 0;
		for (int cut = 0; cut <= !cf->whole; cut++) {
			way[n++] = (struct client_way){ head, 0, cut };
			if (!known)
				way[n++] = (struct client_way){ !head, 0, cut };
		}
	}
	for (int cut = 0; cut <= !cf->whole; cut++)
		for (int head = 0; head < 2; head++)
			way[n++] = (struct client_way){ head, 1, cut };
	for (int w = 0; w < n; w++)
		if (client_reading_fits(cf, pos, answered, way[w].head, way[w].own, way[w].cut)) {
			cf->reading[pos] = (unsigned char)(READ_SET | (way[w].head ? READ_HEAD : 0) | (way[w].own ? READ_OWN : 0));
			return 1;
		}
	client_fail(cf, st);
	return 0;
}

static void check_client(void)
{
	const char *s = res.client.data;
	size_t len = res.client.len;
	struct client_frames cf = { .s = s, .len = len, .reading = calloc(len + 1, 1),
				    .whole = rig_whole_answers || cur_mode == RIG_ANSWER_EACH };
	if (cf.reading == NULL)
		RIG_FAIL("out of memory");
	int framed = client_frames_from(&cf, 0, 0);
	free(cf.failed);
	if (!framed) {
		free(cf.reading);
		RIG_FAIL("the client received a malformed response (%s) at offset %zu of:\n%.*s",
			 cf.worst_why ? cf.worst_why : "?", cf.worst_pos, (int)(len > 4000 ? 4000 : len), s);
	}
	/* Walk the framing found, recording what the checks after this read. */
	size_t pos = 0;
	while (pos < len) {
		int status = 0, chunked = 0;
		const char *why = NULL;
		long r = rig_parse_response(s + pos, len - pos, (cf.reading[pos] & READ_HEAD) != 0, 1, &status, &chunked, &why);
		if (r == 0) {
			res.truncated = 1;
			r = (long)(len - pos);
			status = status ? status : 200;
		}
		pos += (size_t)r;
		res.resp_chunked |= chunked;
		if (status == 101) {
			res.tunnel = 1;
			break;
		}
		if (status >= 200) {
			if (res.nresp < RIG_MAX_REQS)
				res.resp_status[res.nresp] = status;
			res.nresp++;
			res.nown += (cf.reading[pos - (size_t)r] & READ_OWN) != 0;
		}
	}
	free(cf.reading);
}

/* Nothing to do now: no callback pending, no timer due, no watched
 * descriptor ready (the loop's epoll descriptor polls readable when one
 * is), after waiting rig_settle_ms for one. Loopback delivers a write to
 * its reader within the send call, so what sluice and the rig's peers sent
 * each other is visible here. */
static int loop_quiet(void)
{
	if (uv_backend_timeout(&W->loop) == 0)
		return 0;
	struct pollfd pfd = { .fd = uv_backend_fd(&W->loop), .events = POLLIN };
	return poll(&pfd, 1, rig_settle_ms) == 0;
}

/* Run the loop until the worker has nothing left to do but wait for a
 * timer or the client: twice quiet in a row (the first turn after a
 * watcher starts is when libuv hands it to epoll), or sluice closed. */
static void run_until_quiet(void)
{
	uint64_t deadline = real_us() + RIG_DEADLINE_US;
	for (int quiet = 0; quiet < 2 && !client_gone();) {
		uv_run(&W->loop, UV_RUN_NOWAIT);
		quiet = loop_quiet() ? quiet + 1 : 0;
		if (real_us() > deadline)
			RIG_FAIL("stuck: the worker was never quiet within %d s (clients %u, backend connections %u)",
				 RIG_DEADLINE_US / 1000000, W->nclients, W->nbconns);
	}
}

/* RIG_WAIT_CLOSE: whenever the worker is quiet, on to its next timer,
 * until sluice closes (or half-closes) the client connection. */
#define RIG_VIRTUAL_MAX_MS 120000

static void wait_close(void)
{
	int64_t waited = 0;
	for (;;) {
		run_until_quiet();
		if (client_gone())
			return;
		int t = uv_backend_timeout(&W->loop);
		if (t < 0)
			RIG_FAIL("the client waits, and sluice holds its connection open with no timer armed: "
				 "it would never close it (clients %u, backend connections %u)", W->nclients, W->nbconns);
		if (t == 0)
			continue;
		waited += t;
		if (waited > RIG_VIRTUAL_MAX_MS)
			RIG_FAIL("the client waits, and sluice has not closed its connection after %d virtual seconds",
				 RIG_VIRTUAL_MAX_MS / 1000);
		vt_offset_ns += (int64_t)t * 1000000;
	}
}

const struct rig_result *rig_exchange(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				      const uint8_t *resp, size_t resp_len)
{
	return rig_exchange2(listener, in, n, mode, resp, resp_len, 0);
}

const struct rig_result *rig_exchange2(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				       const uint8_t *resp, size_t resp_len, unsigned flags)
{
	res.client.len = res.bodies.len = 0;
	res.client_eof = 0;
	res.nreqs_held = res.nstreams = 0;
	res.nreqs = res.nconns = res.nresp = 0;
	if (flags & RIG_CLIENT_STALL)
		flags |= RIG_WAIT_CLOSE;
	res.resp_chunked = res.tunnel = res.truncated = 0;
	res.nown = 0;
	cur_mode = mode;
	cur_resp = resp;
	cur_resp_len = resp_len;

	/* A different 127/8 source address each time: no 4-tuple is reused. */
	serial++;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_in src = { .sin_family = AF_INET };
	src.sin_addr.s_addr = htonl(0x7f000000u | ((serial % 250 + 1) << 16) | ((serial / 250 % 250 + 1) << 8) | 1);
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(lport[listener]),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	if (fd < 0 || bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0)
		RIG_FAIL("client socket: %s", strerror(errno));
	if (flags & RIG_CLIENT_STALL) {
		int small = 1;  /* the kernel's minimum: a few KiB, set before the window is */
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	}
	/* Non-blocking: libFuzzer's timers interrupt a blocking connect. On
	 * loopback the handshake completes without sluice's help (backlog). */
	if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0) {
		if (errno != EINPROGRESS && errno != EINTR)
			RIG_FAIL("client connect: %s", strerror(errno));
		wait_writable(fd);
		int err = 0;
		socklen_t el = sizeof(err);
		getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
		if (err)
			RIG_FAIL("client connect: %s", strerror(err));
	}
	client = peer_new(fd, PEER_CLIENT);
	serial0 = W->conn_serial;
	if (flags & RIG_CLIENT_STALL) {
		client->stalled = 1;
		uv_poll_stop(&client->poll);
	}
	size_t at = 0;
	for (size_t i = 0; i < rig_nsplit; i++) {
		if (rig_split[i] <= at || rig_split[i] >= n)
			continue;
		write_all(fd, in + at, rig_split[i] - at);
		at = rig_split[i];
		run_until_quiet();
	}
	if (n > at)
		write_all(fd, in + at, n - at);
	if (flags & (RIG_HOLD_OPEN | RIG_WAIT_CLOSE))
		run_until_quiet();
	res.nreqs_held = res.nreqs;
	if (flags & RIG_WAIT_CLOSE)
		wait_close();  /* then close as any client does once the server has */
	if (client->stalled)
		client_drain();
	shutdown(fd, SHUT_WR);

	run_until(client_done, "waiting for sluice to close the client connection");
	buf_append(&res.client, client->in.data, client->in.len);
	res.client_eof = 1;
	peer_close(client);
	for (int i = 0; i < RIG_PEERS; i++)
		if (peers[i].used && peers[i].kind == PEER_BACKEND)
			peer_close(&peers[i]);
	run_until(all_closed, "waiting for sluice to close its backend connections");
	/* Close callbacks and anything sluice left for the next turn. */
	uv_run(&W->loop, UV_RUN_NOWAIT);
	check_idle();
	if (!(flags & RIG_CLIENT_RAW))
		check_client();
	client = NULL;
	static int verbose = -1;
	if (verbose < 0)
		verbose = getenv("RIG_VERBOSE") != NULL;
	if (verbose)
		fprintf(stderr, "rig: %u backend connection(s), %u request(s) received, %u response(s) sent; "
			"the client got %zu bytes:\n%.*s\n", res.nconns, res.nreqs, res.nresp, res.client.len,
			(int)(res.client.len > 2000 ? 2000 : res.client.len), res.client.data);
	return &res;
}
