/*
 * demo_backend: a small HTTP/1.1 origin that behaves like a thread-per-
 * connection application server (WebLogic, Tomcat's BIO connector).
 *
 * A fixed pool of worker threads all block in accept() on one listening
 * socket. A thread that wins a connection serves it, request after request
 * (keepalive), until the client closes, the idle timeout expires or a request
 * asks for a close; only then does it accept again. While every thread is
 * busy, new connections wait in the kernel's accept backlog (small by
 * default) and clients time out there, which is exactly the failure sluice
 * exists to hide.
 *
 * It serves three masters: `make run` (default backend behind sluice),
 * the end-to-end tests (connection/request counters, X-Conn-Id and X-Req-Num
 * on every response, /headers shows the bytes the proxy sent) and bench/
 * (no malloc per request once warm, one sendmsg per response).
 *
 * Ownership: each worker owns its read buffer, head copy and body buffer for
 * its whole life; a connection borrows them. The only state shared between
 * threads is the atomic counters, the health switch, the stop flag and each
 * worker's current fd (guarded by the worker's mutex, so the shutdown path
 * in main() can wake a worker blocked in recv()).
 *
 * See bench/README-demo-backend.md for the CLI and the routes.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEAD     16384u          /* request line + headers + blank line */
#define RBUF_SIZE    65536u          /* per-worker read buffer; > MAX_HEAD */
#define CHUNK_LINE   4096u           /* longest chunk-size line accepted */
#define ECHO_MAX     (64u << 20)     /* largest body /echo will hold */
#define BODY_KEEP    (1u << 20)      /* body buffer kept across requests */
#define MAX_SIZE     (1ull << 30)    /* cap for size= and chunk= */
#define MAX_DELAY_MS 600000u         /* cap for sleep_ms= and cpu_ms= */
#define PAT_PERIOD   64u             /* body pattern repeats every 64 bytes */
#define PAT_BUF      65536u          /* largest pattern slice per iovec */
#define OUT_IOV      128             /* iovecs gathered per sendmsg */
#define LINGER_MS    2000            /* drain time after an error close */
#define LINGER_BYTES (1u << 20)
#define STACK_SIZE   (1u << 20)

struct config {
	const char *listen;
	unsigned threads;
	unsigned backlog;
	unsigned service_ms;         /* sleep per request */
	unsigned cpu_ms;             /* thread CPU burnt per request */
	unsigned long long size;     /* default body size for / */
	unsigned keepalive_ms;       /* idle/read timeout; 0 = none */
	unsigned max_requests;       /* per connection; 0 = unlimited */
	bool quiet;
};

static struct config g_cfg = {
	.listen = "127.0.0.1:9000",
	.threads = 16,
	.backlog = 16,
	.size = 128,
	.keepalive_ms = 5000,
};

/* Process-wide counters, reported by /stats. g_conn_seq never resets: it
 * numbers connections for X-Conn-Id. */
static atomic_ullong g_accepted;
static atomic_ullong g_requests;
static atomic_ullong g_active;
static atomic_ullong g_max_active;
static atomic_ullong g_conn_seq;
static atomic_bool g_health_down;
static atomic_bool g_stop;

static int g_lfd = -1;
/* Body bytes: byte i of every generated body is g_pattern[i % PAT_PERIOD].
 * PAT_PERIOD extra bytes let a slice start at any phase. */
static char g_pattern[PAT_BUF + PAT_PERIOD];

struct worker {
	pthread_t tid;
	pthread_mutex_t lock;        /* guards fd against main's shutdown pass */
	int fd;                      /* connection being served, -1 when idle */
	char *rbuf;                  /* RBUF_SIZE bytes */
	char *head;                  /* MAX_HEAD + 1 bytes: copy of current head */
	char *body;                  /* decoded request body (only for /echo) */
	size_t body_cap;
};

/* One accepted connection; borrows its worker's buffers. Unparsed input is
 * rbuf[off, len). */
struct conn {
	struct worker *w;
	int fd;
	unsigned long long id;       /* X-Conn-Id */
	unsigned nreq;               /* X-Req-Num of the current request */
	size_t off, len;
	size_t scan;                 /* head_find() progress, relative to off */
	size_t body_len;
};

enum route {
	R_DEFAULT,                   /* / and anything unknown: pattern body */
	R_HEALTH,
	R_HEALTH_DOWN,
	R_HEALTH_UP,
	R_ECHO,
	R_HEADERS,
	R_CHUNKED,
	R_STATUS,
	R_CLOSE,
	R_STATS,
	R_STATS_RESET,
};

static const struct {
	const char *path;
	enum route route;
} g_routes[] = {
	{ "/health", R_HEALTH },
	{ "/admin/health/down", R_HEALTH_DOWN },
	{ "/admin/health/up", R_HEALTH_UP },
	{ "/echo", R_ECHO },
	{ "/headers", R_HEADERS },
	{ "/chunked", R_CHUNKED },
	{ "/close", R_CLOSE },
	{ "/stats", R_STATS },
	{ "/stats/reset", R_STATS_RESET },
};

/* A parsed request. Pointers refer into the worker's head copy, which stays
 * valid until the next request is read. */
struct req {
	const char *head;
	size_t head_len;
	const char *method;
	size_t method_len;
	const char *path;
	size_t path_len;
	const char *query;           /* after '?', NULL if none */
	size_t query_len;
	int minor;                   /* HTTP/1.<minor>: 0 or 1 */
	bool is_head, is_post;
	bool conn_close, conn_keepalive, expect_continue;
	bool chunked, has_host, has_te;
	long long clen;              /* Content-Length, -1 if absent */
	enum route route;
	int status;                  /* for R_STATUS */
	unsigned long long size, chunk;
	unsigned sleep_ms, cpu_ms;
};

__attribute__((format(printf, 1, 2)))
static void log_info(const char *fmt, ...)
{
	va_list ap;

	if (g_cfg.quiet)
		return;
	va_start(ap, fmt);
	fputs("demo_backend: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static const char *reason_phrase(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 102: return "Processing";
	case 103: return "Early Hints";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 205: return "Reset Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 303: return "See Other";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 411: return "Length Required";
	case 413: return "Content Too Large";
	case 414: return "URI Too Long";
	case 417: return "Expectation Failed";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	default: return "Unknown";
	}
}

/* ---- small helpers -------------------------------------------------- */

static bool is_tchar(unsigned char ch)
{
	if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'))
		return true;
	return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static bool is_ows(char ch)
{
	return ch == ' ' || ch == '\t';
}

/* Case-insensitive compare of a counted string with a literal. */
static bool str_ieq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && strncasecmp(s, lit, n) == 0;
}

static bool str_eq(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* Parse a decimal number made only of digits, no larger than max.
 * Returns false on an empty string, a non-digit or overflow. */
static bool parse_u64(const char *s, size_t n, unsigned long long max, unsigned long long *out)
{
	unsigned long long v = 0;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return false;
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > max)
			return false;
	}
	*out = v;
	return true;
}

static uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sleep ms of wall time, in slices so that a stop request is noticed. */
static void delay_sleep(unsigned ms)
{
	uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + (uint64_t)ms * 1000000u;

	while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
		uint64_t now = clock_ns(CLOCK_MONOTONIC), until;
		struct timespec ts;

		if (now >= deadline)
			break;
		until = deadline - now > 50000000u ? now + 50000000u : deadline;
		ts.tv_sec = (time_t)(until / 1000000000u);
		ts.tv_nsec = (long)(until % 1000000000u);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
	}
}

/* Burn ms of this thread's CPU time (not wall time: on a loaded machine a
 * CPU-bound request takes longer, as it would in a real app server). */
static void delay_cpu(unsigned ms)
{
	uint64_t start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
	uint64_t budget = (uint64_t)ms * 1000000u;
	volatile uint64_t x = start;

	while (!atomic_load_explicit(&g_stop, memory_order_relaxed)) {
		for (int i = 0; i < 20000; i++)
			x = x * 6364136223846793005ull + 1442695040888963407ull;
		if (clock_ns(CLOCK_THREAD_CPUTIME_ID) - start >= budget)
			break;
	}
}

/* ---- output: gather iovecs, one sendmsg per response ----------------- */

struct out {
	int fd;
	int n;
	bool failed;
	struct iovec iov[OUT_IOV];
};

/* Send all of iov[0..n). Returns 0, or -1 on error or send timeout.
 * Modifies iov. */
static int sock_sendv(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		struct msghdr m;
		ssize_t wr;

		memset(&m, 0, sizeof(m));
		m.msg_iov = iov;
		m.msg_iovlen = (size_t)n;
		wr = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (wr < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		while (n > 0 && (size_t)wr >= iov->iov_len) {
			wr -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + wr;
			iov->iov_len -= (size_t)wr;
		}
	}
	return 0;
}

static int out_flush(struct out *o)
{
	if (!o->failed && o->n > 0 && sock_sendv(o->fd, o->iov, o->n) < 0)
		o->failed = true;
	o->n = 0;
	return o->failed ? -1 : 0;
}

/* Queue p[0..len). p must stay valid until the next out_flush(). */
static void out_add(struct out *o, const void *p, size_t len)
{
	if (len == 0 || o->failed)
		return;
	if (o->n == OUT_IOV)
		out_flush(o);
	o->iov[o->n].iov_base = (void *)(uintptr_t)p;
	o->iov[o->n].iov_len = len;
	o->n++;
}

/* Queue body bytes [pos, pos + len) of the repeating pattern. */
static void out_pattern(struct out *o, unsigned long long pos, unsigned long long len)
{
	while (len > 0) {
		size_t seg = len > PAT_BUF ? PAT_BUF : (size_t)len;

		out_add(o, g_pattern + pos % PAT_PERIOD, seg);
		pos += seg;
		len -= seg;
	}
}

/* A bounded string builder for response heads. */
struct sbuf {
	char *p;
	size_t len, cap;
};

__attribute__((format(printf, 2, 3)))
static void sb_printf(struct sbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(sb->p + sb->len, sb->cap - sb->len, fmt, ap);
	va_end(ap);
	assert(n >= 0 && (size_t)n < sb->cap - sb->len);
	if (n > 0 && (size_t)n < sb->cap - sb->len)
		sb->len += (size_t)n;
}

#define CLEN_NONE (-1LL)

/* Build a response head into dst. clen CLEN_NONE omits Content-Length
 * (chunked, close-delimited, 204/304); extra is zero or more complete header
 * lines. keep selects the Connection / Keep-Alive headers. */
static size_t resp_head(char *dst, size_t cap, const struct conn *c, int minor, int status,
			const char *ctype, long long clen, const char *extra, bool keep)
{
	struct sbuf sb = { dst, 0, cap };

	sb_printf(&sb, "HTTP/1.1 %d %s\r\nServer: demo_backend\r\n", status, reason_phrase(status));
	if (ctype)
		sb_printf(&sb, "Content-Type: %s\r\n", ctype);
	if (clen != CLEN_NONE)
		sb_printf(&sb, "Content-Length: %lld\r\n", clen);
	sb_printf(&sb, "X-Conn-Id: %llu\r\nX-Req-Num: %u\r\n", c->id, c->nreq);
	if (extra)
		sb_printf(&sb, "%s", extra);
	if (!keep) {
		sb_printf(&sb, "Connection: close\r\n");
	} else {
		if (minor == 0)
			sb_printf(&sb, "Connection: keep-alive\r\n");
		/* Tell the client (sluice) how long an idle connection lives here,
		 * as Apache and recent Tomcat do; rounded down to be safe. */
		if (g_cfg.keepalive_ms >= 1000 && g_cfg.max_requests)
			sb_printf(&sb, "Keep-Alive: timeout=%u, max=%u\r\n", g_cfg.keepalive_ms / 1000,
				  g_cfg.max_requests - c->nreq);
		else if (g_cfg.keepalive_ms >= 1000)
			sb_printf(&sb, "Keep-Alive: timeout=%u\r\n", g_cfg.keepalive_ms / 1000);
		else if (g_cfg.max_requests)
			sb_printf(&sb, "Keep-Alive: max=%u\r\n", g_cfg.max_requests - c->nreq);
	}
	sb_printf(&sb, "\r\n");
	return sb.len;
}

/* Send a complete response whose body is a short text (suppressed for
 * HEAD). Returns 0 or -1 on I/O error. */
static int resp_simple(struct conn *c, const struct req *r, int status, const char *body,
		       const char *extra, bool keep)
{
	char head[1024];
	size_t blen = strlen(body);
	int minor = r ? r->minor : 1;
	struct out o = { .fd = c->fd };

	out_add(&o, head, resp_head(head, sizeof(head), c, minor, status, "text/plain", (long long)blen,
				    extra, keep));
	if (!r || !r->is_head)
		out_add(&o, body, blen);
	return out_flush(&o);
}

/* ---- input ----------------------------------------------------------- */

/* Read more bytes into rbuf[len..]. Unparsed bytes are moved to the front
 * first, so a head of up to MAX_HEAD bytes always fits. Returns the byte
 * count, 0 on EOF, -1 on error or timeout (SO_RCVTIMEO). */
static ssize_t conn_fill(struct conn *c)
{
	ssize_t n;

	if (c->off == c->len) {
		c->off = c->len = 0;
	} else if (c->off > 0) {
		memmove(c->w->rbuf, c->w->rbuf + c->off, c->len - c->off);
		c->len -= c->off;
		c->off = 0;
	}
	if (c->len == RBUF_SIZE)
		return -1;
	do
		n = recv(c->fd, c->w->rbuf + c->len, RBUF_SIZE - c->len, 0);
	while (n < 0 && errno == EINTR);
	if (n > 0)
		c->len += (size_t)n;
	return n;
}

/* Length of the request head at b[0..len) through its blank line, or 0 if
 * incomplete. Lines may end in CRLF or bare LF. *scan keeps the progress of
 * earlier calls so a head trickling in is scanned once. */
static size_t head_find(const char *b, size_t len, size_t *scan)
{
	size_t i = *scan;

	while (i < len) {
		const char *lf = memchr(b + i, '\n', len - i);
		size_t at;

		if (!lf)
			break;
		at = (size_t)(lf - b);
		if (at + 1 < len && b[at + 1] == '\n')
			return at + 2;
		if (at + 2 < len && b[at + 1] == '\r' && b[at + 2] == '\n')
			return at + 3;
		if (at + 2 >= len) {
			*scan = at;     /* can't tell yet: rescan from this LF */
			return 0;
		}
		i = at + 1;
	}
	*scan = len;
	return 0;
}

/* Wait until a complete request head is buffered at rbuf[off..].
 * Returns its length, 0 if the connection ended first (EOF, idle timeout,
 * error, stop) or -431 if the head exceeds MAX_HEAD. */
static long conn_head_wait(struct conn *c)
{
	char *b = c->w->rbuf;

	c->scan = 0;
	for (;;) {
		size_t hlen;

		/* RFC 9112 2.2: ignore empty lines before a request line. */
		while (c->off < c->len) {
			if (b[c->off] == '\n')
				c->off++;
			else if (b[c->off] == '\r' && c->off + 1 < c->len && b[c->off + 1] == '\n')
				c->off += 2;
			else
				break;
		}
		if (c->off < c->len && !(b[c->off] == '\r' && c->off + 1 == c->len)) {
			hlen = head_find(b + c->off, c->len - c->off, &c->scan);
			if (hlen > MAX_HEAD || (hlen == 0 && c->len - c->off >= MAX_HEAD))
				return -431;
			if (hlen)
				return (long)hlen;
		}
		if (atomic_load(&g_stop) || conn_fill(c) <= 0)
			return 0;
	}
}

/* Get one line (up to LF) from the input; *line and *llen exclude the CR LF and
 * stay valid until the next read. Returns 1, -1 on EOF/error, -2 if the
 * line is longer than max. */
static int conn_line(struct conn *c, size_t max, const char **line, size_t *llen)
{
	for (;;) {
		const char *b = c->w->rbuf + c->off;
		const char *lf = memchr(b, '\n', c->len - c->off);

		if (lf) {
			size_t n = (size_t)(lf - b);

			c->off += n + 1;
			if (n > 0 && b[n - 1] == '\r')
				n--;
			if (n > max)
				return -2;
			*line = b;
			*llen = n;
			return 1;
		}
		if (c->len - c->off > max)
			return -2;
		if (conn_fill(c) <= 0)
			return -1;
	}
}

/* ---- request parsing (pure: no I/O) ---------------------------------- */

/* Handle one header field. Returns 0 or an HTTP error status. */
static int req_header(struct req *r, const char *name, size_t nlen, const char *val, size_t vlen,
		      const char **why)
{
	if (str_ieq(name, nlen, "content-length")) {
		unsigned long long v;

		if (!parse_u64(val, vlen, 1ull << 62, &v)) {
			*why = "bad Content-Length";
			return 400;
		}
		if (r->clen >= 0 && (unsigned long long)r->clen != v) {
			*why = "conflicting Content-Length";
			return 400;
		}
		r->clen = (long long)v;
	} else if (str_ieq(name, nlen, "transfer-encoding")) {
		const char *last = val;
		size_t llen = vlen;
		const char *comma = memrchr(val, ',', vlen);

		if (r->has_te) {
			*why = "repeated Transfer-Encoding";
			return 400;
		}
		r->has_te = true;
		if (str_ieq(val, vlen, "chunked")) {
			r->chunked = true;
			return 0;
		}
		if (comma) {
			last = comma + 1;
			llen = vlen - (size_t)(last - val);
			while (llen > 0 && is_ows(*last)) {
				last++;
				llen--;
			}
		}
		/* chunked last but other codings first: valid, not supported
		 * here; chunked not last: length undeterminable (RFC 9112 6.3). */
		*why = "unsupported Transfer-Encoding";
		return str_ieq(last, llen, "chunked") ? 501 : 400;
	} else if (str_ieq(name, nlen, "connection")) {
		size_t i = 0;

		while (i < vlen) {
			size_t s, e;

			while (i < vlen && (is_ows(val[i]) || val[i] == ','))
				i++;
			s = i;
			while (i < vlen && val[i] != ',')
				i++;
			e = i;
			while (e > s && is_ows(val[e - 1]))
				e--;
			if (str_ieq(val + s, e - s, "close"))
				r->conn_close = true;
			else if (str_ieq(val + s, e - s, "keep-alive"))
				r->conn_keepalive = true;
		}
	} else if (str_ieq(name, nlen, "expect")) {
		if (str_ieq(val, vlen, "100-continue"))
			r->expect_continue = true;
	} else if (str_ieq(name, nlen, "host")) {
		if (r->has_host) {
			*why = "repeated Host";
			return 400;
		}
		r->has_host = true;
	}
	return 0;
}

/* Split the request target into path and query. Origin form, absolute form
 * (what a proxy may send) and "*" for OPTIONS. */
static int req_target(struct req *r, const char *t, size_t tlen, const char **why)
{
	const char *end = t + tlen, *p = t, *q;

	if (tlen == 1 && t[0] == '*') {
		if (!str_eq(r->method, r->method_len, "OPTIONS")) {
			*why = "'*' target without OPTIONS";
			return 400;
		}
		r->path = t;
		r->path_len = 1;
		return 0;
	}
	if (t[0] != '/') {
		size_t skip = 0;

		if (tlen > 7 && strncasecmp(t, "http://", 7) == 0)
			skip = 7;
		else if (tlen > 8 && strncasecmp(t, "https://", 8) == 0)
			skip = 8;
		if (!skip) {
			*why = "bad request target";
			return 400;
		}
		p = t + skip;
		while (p < end && *p != '/' && *p != '?')
			p++;
		if (p == end || *p == '?') {
			/* "http://host" or "http://host?q": the path is "/". */
			r->path = "/";
			r->path_len = 1;
			if (p < end) {
				r->query = p + 1;
				r->query_len = (size_t)(end - p - 1);
			}
			return 0;
		}
	}
	for (q = p; q < end && *q != '?' && *q != '#'; q++)
		;
	r->path = p;
	r->path_len = (size_t)(q - p);
	if (q < end && *q == '?') {
		const char *f = memchr(q + 1, '#', (size_t)(end - q - 1));

		r->query = q + 1;
		r->query_len = (size_t)((f ? f : end) - q - 1);
	}
	return 0;
}

/* Parse the request head h[0..hlen) (which ends with its blank line) into r.
 * Returns 0 or an HTTP error status, with *why set for the log. */
static int req_parse(struct req *r, const char *h, size_t hlen, const char **why)
{
	const char *end = h + hlen, *eol, *le, *p, *t, *v;
	int rc;

	eol = memchr(h, '\n', hlen);
	le = eol > h && eol[-1] == '\r' ? eol - 1 : eol;

	/* request-line = method SP request-target SP HTTP-version */
	for (p = h; p < le && is_tchar((unsigned char)*p); p++)
		;
	if (p == h || p == le || *p != ' ') {
		*why = "bad method";
		return 400;
	}
	r->method = h;
	r->method_len = (size_t)(p - h);
	r->is_head = str_eq(h, r->method_len, "HEAD");
	r->is_post = str_eq(h, r->method_len, "POST");
	for (t = ++p; p < le && *p != ' '; p++) {
		unsigned char ch = (unsigned char)*p;

		if (ch < 0x21 || ch == 0x7f) {
			*why = "bad byte in request target";
			return 400;
		}
	}
	if (p == t || p == le) {
		*why = "bad request line";
		return 400;
	}
	v = p + 1;
	if (le - v != 8 || memcmp(v, "HTTP/", 5) != 0 || v[6] != '.' || v[5] < '0' || v[5] > '9' ||
	    v[7] < '0' || v[7] > '9') {
		*why = "bad HTTP version";
		return 400;
	}
	if (v[5] != '1') {
		*why = "unsupported HTTP version";
		return 505;
	}
	r->minor = v[7] == '0' ? 0 : 1;
	rc = req_target(r, t, (size_t)(p - t), why);
	if (rc)
		return rc;

	/* header fields, up to the blank line */
	for (p = eol + 1; p < end; p = eol + 1) {
		const char *n, *val, *vend;

		eol = memchr(p, '\n', (size_t)(end - p));
		le = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
		if (le == p)
			break;
		if (is_ows(*p)) {
			*why = "obsolete line folding";
			return 400;
		}
		for (n = p; p < le && is_tchar((unsigned char)*p); p++)
			;
		if (p == n || p == le || *p != ':') {
			*why = "bad header name";
			return 400;
		}
		for (val = p + 1; val < le && is_ows(*val); val++)
			;
		for (vend = le; vend > val && is_ows(vend[-1]); vend--)
			;
		for (const char *x = val; x < vend; x++) {
			unsigned char ch = (unsigned char)*x;

			if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
				*why = "bad byte in header value";
				return 400;
			}
		}
		rc = req_header(r, n, (size_t)(p - n), val, (size_t)(vend - val), why);
		if (rc)
			return rc;
	}
	if (r->has_te && r->clen >= 0) {
		/* RFC 9112 6.1 allows rejecting this; a strict origin shows a
		 * proxy that forwards both (request smuggling). */
		*why = "both Transfer-Encoding and Content-Length";
		return 400;
	}
	if (r->minor == 1 && !r->has_host) {
		*why = "HTTP/1.1 request without Host";
		return 400;
	}
	return 0;
}

/* Query parameters that override the defaults for this request. Unknown
 * keys are ignored; a bad value for a known key is a 400. */
static int req_query(struct req *r, const char **why)
{
	const char *p = r->query, *end = r->query + r->query_len;

	while (p && p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *pe = amp ? amp : end;
		const char *eq = memchr(p, '=', (size_t)(pe - p));
		const char *k = p, *v = eq ? eq + 1 : pe;
		size_t klen = (size_t)((eq ? eq : pe) - p), vlen = (size_t)(pe - v);
		unsigned long long x;
		bool ok = true;

		if (str_eq(k, klen, "size"))
			ok = parse_u64(v, vlen, MAX_SIZE, &r->size);
		else if (str_eq(k, klen, "chunk"))
			ok = parse_u64(v, vlen, MAX_SIZE, &r->chunk) && r->chunk > 0;
		else if (str_eq(k, klen, "sleep_ms"))
			ok = parse_u64(v, vlen, MAX_DELAY_MS, &x) && ((r->sleep_ms = (unsigned)x), true);
		else if (str_eq(k, klen, "cpu_ms"))
			ok = parse_u64(v, vlen, MAX_DELAY_MS, &x) && ((r->cpu_ms = (unsigned)x), true);
		if (!ok) {
			*why = "bad query parameter";
			return 400;
		}
		p = amp ? amp + 1 : end;
	}
	return 0;
}

static int req_route(struct req *r, const char **why)
{
	r->route = R_DEFAULT;
	for (size_t i = 0; i < sizeof(g_routes) / sizeof(g_routes[0]); i++) {
		if (str_eq(r->path, r->path_len, g_routes[i].path)) {
			r->route = g_routes[i].route;
			return 0;
		}
	}
	if (r->path_len >= 8 && memcmp(r->path, "/status/", 8) == 0) {
		unsigned long long code;

		if (!parse_u64(r->path + 8, r->path_len - 8, 999, &code) || r->path_len != 11 ||
		    code < 100 || code > 599 || code == 101) {
			*why = "bad /status/NNN (100-599, not 101)";
			return 400;
		}
		r->route = R_STATUS;
		r->status = (int)code;
	}
	return 0;
}

/* ---- request body ---------------------------------------------------- */

/* Make room for need bytes of body. need <= ECHO_MAX. */
static int body_reserve(struct conn *c, size_t need)
{
	struct worker *w = c->w;
	size_t cap = w->body_cap ? w->body_cap : 65536;
	char *nb;

	if (need <= w->body_cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (cap > ECHO_MAX)
		cap = ECHO_MAX;
	nb = realloc(w->body, cap);
	if (!nb)
		return -1;
	w->body = nb;
	w->body_cap = cap;
	return 0;
}

/* Move n buffered bytes to the body (keep) or drop them. */
static void body_take(struct conn *c, size_t n, bool keep)
{
	if (keep) {
		memcpy(c->w->body + c->body_len, c->w->rbuf + c->off, n);
		c->body_len += n;
	}
	c->off += n;
}

/* Decode a chunked body from the input. Returns 0, -1 on I/O error or an
 * HTTP error status. */
static int body_chunked(struct conn *c, bool keep, const char **why)
{
	const char *line;
	size_t llen, trailer = 0;
	int rc;

	for (;;) {
		unsigned long long size = 0;
		size_t i = 0;

		rc = conn_line(c, CHUNK_LINE, &line, &llen);
		if (rc == -1)
			return -1;
		if (rc == -2) {
			*why = "chunk-size line too long";
			return 400;
		}
		for (; i < llen; i++) {
			int d;
			char ch = line[i];

			if (ch >= '0' && ch <= '9')
				d = ch - '0';
			else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f')
				d = (ch | 0x20) - 'a' + 10;
			else
				break;
			if (i >= 15) {
				*why = "chunk size too large";
				return 400;
			}
			size = size * 16 + (unsigned)d;
		}
		/* after the digits: nothing, or OWS and a chunk extension */
		if (i == 0 || (i < llen && !is_ows(line[i]) && line[i] != ';')) {
			*why = "bad chunk size";
			return 400;
		}
		if (size == 0)
			break;
		if (keep) {
			if (size > ECHO_MAX - c->body_len) {
				*why = "body too large for /echo";
				return 413;
			}
			if (body_reserve(c, c->body_len + (size_t)size) < 0) {
				*why = "out of memory";
				return 413;
			}
		}
		while (size > 0) {
			size_t n = c->len - c->off;

			if (n == 0) {
				if (conn_fill(c) <= 0)
					return -1;
				n = c->len - c->off;
			}
			if (n > size)
				n = (size_t)size;
			body_take(c, n, keep);
			size -= n;
		}
		rc = conn_line(c, CHUNK_LINE, &line, &llen);
		if (rc == -1)
			return -1;
		if (rc == -2 || llen != 0) {
			*why = "missing CRLF after chunk data";
			return 400;
		}
	}
	/* trailer section: header lines up to a blank line, ignored */
	for (;;) {
		rc = conn_line(c, MAX_HEAD, &line, &llen);
		if (rc == -1)
			return -1;
		trailer += llen + 2;
		if (rc == -2 || trailer > MAX_HEAD) {
			*why = "trailer section too large";
			return 431;
		}
		if (llen == 0)
			return 0;
	}
}

/* Consume the request body; keep it in the worker's body buffer if keep.
 * Returns 0, -1 on I/O error (close quietly) or an HTTP error status. */
static int body_read(struct conn *c, const struct req *r, bool keep, const char **why)
{
	unsigned long long left;

	c->body_len = 0;
	if (!r->chunked && r->clen <= 0)
		return 0;
	if (keep && !r->chunked) {
		if ((unsigned long long)r->clen > ECHO_MAX) {
			*why = "body too large for /echo";
			return 413;
		}
		if (body_reserve(c, (size_t)r->clen) < 0) {
			*why = "out of memory";
			return 413;
		}
	}
	if (r->expect_continue && r->minor == 1 && c->off == c->len) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		struct iovec iov = { (void *)(uintptr_t)cont, sizeof(cont) - 1 };

		if (sock_sendv(c->fd, &iov, 1) < 0)
			return -1;
	}
	if (r->chunked)
		return body_chunked(c, keep, why);

	left = (unsigned long long)r->clen;
	while (left > 0) {
		size_t n = c->len - c->off;
		ssize_t got;

		if (n > 0) {
			if (n > left)
				n = (size_t)left;
			body_take(c, n, keep);
			left -= n;
			continue;
		}
		/* Buffer empty: read straight into the body, or into rbuf to
		 * drop it; never past the body, so a pipelined request stays
		 * in the socket for the next head read. */
		c->off = c->len = 0;
		n = left > RBUF_SIZE ? RBUF_SIZE : (size_t)left;
		do
			got = recv(c->fd, keep ? c->w->body + c->body_len : c->w->rbuf, n, 0);
		while (got < 0 && errno == EINTR);
		if (got <= 0)
			return -1;
		if (keep)
			c->body_len += (size_t)got;
		left -= (unsigned long long)got;
	}
	return 0;
}

/* ---- routes ---------------------------------------------------------- */

static size_t stats_json(char *dst, size_t cap)
{
	int n = snprintf(dst, cap,
			 "{\"accepted\":%llu,\"requests\":%llu,\"active\":%llu,\"max_active\":%llu,"
			 "\"threads\":%u}\n",
			 atomic_load(&g_accepted), atomic_load(&g_requests), atomic_load(&g_active),
			 atomic_load(&g_max_active), g_cfg.threads);

	assert(n > 0 && (size_t)n < cap);
	return (size_t)n;
}

/* Produce the response for a parsed request whose body has been read.
 * *keep comes in as what the request allows and may be cleared.
 * Returns 0 or -1 on I/O error. */
static int route_run(struct conn *c, const struct req *r, bool *keep)
{
	char head[1024], extra[128], text[256];
	struct out o = { .fd = c->fd };
	const char *ctype = "text/plain";
	long long clen = 0;
	int status = 200;
	size_t hl;

	switch (r->route) {
	case R_STATS:
		stats_json(text, sizeof(text));
		return resp_simple(c, r, 200, text, NULL, *keep);
	case R_STATS_RESET:
		if (!r->is_post)
			return resp_simple(c, r, 405, "use POST\n", "Allow: POST\r\n", *keep);
		atomic_store(&g_accepted, 0);
		atomic_store(&g_requests, 0);
		/* The high-water mark restarts from what is active now
		 * (at least this connection), never from below it. */
		atomic_store(&g_max_active, atomic_load(&g_active));
		stats_json(text, sizeof(text));
		return resp_simple(c, r, 200, text, NULL, *keep);
	case R_HEALTH_DOWN:
	case R_HEALTH_UP:
		if (!r->is_post)
			return resp_simple(c, r, 405, "use POST\n", "Allow: POST\r\n", *keep);
		atomic_store(&g_health_down, r->route == R_HEALTH_DOWN);
		return resp_simple(c, r, 200, r->route == R_HEALTH_DOWN ? "health down\n" : "health up\n",
				   NULL, *keep);
	default:
		break;
	}

	/* Application routes cost what an application request costs. */
	if (r->sleep_ms)
		delay_sleep(r->sleep_ms);
	if (r->cpu_ms)
		delay_cpu(r->cpu_ms);
	if (atomic_load(&g_stop))
		*keep = false;

	switch (r->route) {
	case R_HEALTH:
		if (atomic_load(&g_health_down))
			return resp_simple(c, r, 503, "down\n", NULL, *keep);
		return resp_simple(c, r, 200, "ok\n", NULL, *keep);
	case R_CLOSE:
		*keep = false;
		return resp_simple(c, r, 200, "closing\n", NULL, false);
	case R_ECHO:
		snprintf(extra, sizeof(extra), "X-Body-Len: %zu\r\n", c->body_len);
		hl = resp_head(head, sizeof(head), c, r->minor, 200, "application/octet-stream",
			       (long long)c->body_len, extra, *keep);
		out_add(&o, head, hl);
		if (!r->is_head)
			out_add(&o, c->w->body, c->body_len);
		return out_flush(&o);
	case R_HEADERS:
		hl = resp_head(head, sizeof(head), c, r->minor, 200, "text/plain", (long long)r->head_len,
			       NULL, *keep);
		out_add(&o, head, hl);
		if (!r->is_head)
			out_add(&o, r->head, r->head_len);
		return out_flush(&o);
	case R_CHUNKED: {
		char full[24], last[24];
		unsigned long long chunk = r->chunk ? r->chunk : 1024, pos = 0;

		if (r->minor == 0) {
			/* No chunked coding for HTTP/1.0: close-delimited. */
			*keep = false;
			out_add(&o, head, resp_head(head, sizeof(head), c, 0, 200, ctype, CLEN_NONE,
						    NULL, false));
			if (!r->is_head)
				out_pattern(&o, 0, r->size);
			return out_flush(&o);
		}
		out_add(&o, head, resp_head(head, sizeof(head), c, 1, 200, ctype, CLEN_NONE,
					    "Transfer-Encoding: chunked\r\n", *keep));
		if (r->is_head)
			return out_flush(&o);
		snprintf(full, sizeof(full), "%llx\r\n", chunk);
		while (pos < r->size) {
			unsigned long long m = r->size - pos < chunk ? r->size - pos : chunk;

			if (m == chunk) {
				out_add(&o, full, strlen(full));
			} else {
				snprintf(last, sizeof(last), "%llx\r\n", m);
				out_add(&o, last, strlen(last));
			}
			out_pattern(&o, pos, m);
			out_add(&o, "\r\n", 2);
			pos += m;
		}
		out_add(&o, "0\r\n\r\n", 5);
		return out_flush(&o);
	}
	case R_STATUS:
		status = r->status;
		if (status < 200) {
			/* A 1xx is interim: send it, then a final 200 (never
			 * to an HTTP/1.0 client, RFC 9110 15.2). */
			if (r->minor == 1) {
				hl = (size_t)snprintf(head, sizeof(head),
						      "HTTP/1.1 %d %s\r\nX-Conn-Id: %llu\r\nX-Req-Num: %u\r\n\r\n",
						      status, reason_phrase(status), c->id, c->nreq);
				out_add(&o, head, hl);
				if (out_flush(&o) < 0)
					return -1;
			}
			snprintf(text, sizeof(text), "200 after interim %d\n", status);
			return resp_simple(c, r, 200, text, NULL, *keep);
		}
		if (status == 204 || status == 304) {
			out_add(&o, head, resp_head(head, sizeof(head), c, r->minor, status, NULL,
						    CLEN_NONE, NULL, *keep));
			return out_flush(&o);
		}
		if (status == 205) {
			out_add(&o, head, resp_head(head, sizeof(head), c, r->minor, status, NULL, 0,
						    NULL, *keep));
			return out_flush(&o);
		}
		snprintf(text, sizeof(text), "%d %s\n", status, reason_phrase(status));
		return resp_simple(c, r, status, text, NULL, *keep);
	default:
		clen = (long long)r->size;
		out_add(&o, head, resp_head(head, sizeof(head), c, r->minor, status, ctype, clen, NULL,
					    *keep));
		if (!r->is_head)
			out_pattern(&o, 0, r->size);
		return out_flush(&o);
	}
}

/* ---- connection loop ------------------------------------------------- */

/* Serve requests on c until it should close. Returns true if the close
 * should linger (unread input may remain after an error response: closing
 * at once would send an RST that can destroy the response in flight). */
static bool conn_serve(struct conn *c)
{
	for (;;) {
		struct req r;
		const char *why = "";
		long hl = conn_head_wait(c);
		bool keep;
		int rc;

		if (hl == 0)
			return false;
		c->nreq++;
		if (hl < 0) {
			atomic_fetch_add_explicit(&g_requests, 1, memory_order_relaxed);
			log_info("conn %llu req %u: 431 request head over %u bytes", c->id, c->nreq,
				 MAX_HEAD);
			resp_simple(c, NULL, 431, "request head too large\n", NULL, false);
			return true;
		}
		memcpy(c->w->head, c->w->rbuf + c->off, (size_t)hl);
		c->w->head[hl] = '\0';
		c->off += (size_t)hl;

		memset(&r, 0, sizeof(r));
		r.head = c->w->head;
		r.head_len = (size_t)hl;
		r.clen = -1;
		r.minor = 1;
		r.size = g_cfg.size;
		r.sleep_ms = g_cfg.service_ms;
		r.cpu_ms = g_cfg.cpu_ms;
		rc = req_parse(&r, r.head, r.head_len, &why);
		if (!rc)
			rc = req_route(&r, &why);
		if (!rc)
			rc = req_query(&r, &why);
		if (!rc)
			rc = body_read(c, &r, r.route == R_ECHO, &why);
		if (rc == -1)
			return false;
		if (r.route != R_STATS && r.route != R_STATS_RESET)
			atomic_fetch_add_explicit(&g_requests, 1, memory_order_relaxed);
		if (rc) {
			char text[256];

			log_info("conn %llu req %u: %d %s", c->id, c->nreq, rc, why);
			snprintf(text, sizeof(text), "%d %s: %s\n", rc, reason_phrase(rc), why);
			resp_simple(c, &r, rc, text, NULL, false);
			return true;
		}

		keep = !r.conn_close && (r.minor == 1 || r.conn_keepalive) &&
		       !(r.chunked && r.minor == 0) &&
		       !(g_cfg.max_requests && c->nreq >= g_cfg.max_requests) &&
		       !atomic_load(&g_stop);
		if (route_run(c, &r, &keep) < 0 || !keep)
			return false;
	}
}

/* Half-close, then read and drop what the client still sends for a while,
 * so that our last response is not destroyed by an RST. */
static void conn_linger(struct conn *c)
{
	uint64_t deadline = clock_ns(CLOCK_MONOTONIC) + (uint64_t)LINGER_MS * 1000000u;
	size_t total = 0;

	shutdown(c->fd, SHUT_WR);
	while (total < LINGER_BYTES && !atomic_load(&g_stop)) {
		uint64_t now = clock_ns(CLOCK_MONOTONIC);
		struct pollfd pfd = { .fd = c->fd, .events = POLLIN };
		ssize_t n;

		if (now >= deadline || poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1) <= 0)
			break;
		n = recv(c->fd, c->w->rbuf, RBUF_SIZE, MSG_DONTWAIT);
		if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN)))
			break;
		if (n > 0)
			total += (size_t)n;
	}
}

static void conn_setup(int fd)
{
	int one = 1;

	/* Responses go out in one sendmsg, but a 100-continue or an interim
	 * 1xx before them must not wait for a delayed ACK. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (g_cfg.keepalive_ms) {
		struct timeval tv = {
			.tv_sec = (time_t)(g_cfg.keepalive_ms / 1000),
			.tv_usec = (suseconds_t)(g_cfg.keepalive_ms % 1000) * 1000,
		};

		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	}
}

static void worker_fd_set(struct worker *w, int fd)
{
	pthread_mutex_lock(&w->lock);
	w->fd = fd;
	pthread_mutex_unlock(&w->lock);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (;;) {
		struct conn c;
		unsigned long long act, max;
		int fd = accept4(g_lfd, NULL, NULL, SOCK_CLOEXEC);

		if (fd < 0) {
			if (atomic_load(&g_stop))
				break;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
				log_info("accept: %s", strerror(errno));
				delay_sleep(50);
			}
			continue;       /* EINTR, ECONNABORTED, EPROTO, ... */
		}
		/* Register before checking g_stop: main sets g_stop, then
		 * shuts down every registered fd under the same lock. */
		worker_fd_set(w, fd);
		if (atomic_load(&g_stop)) {
			worker_fd_set(w, -1);
			close(fd);
			break;
		}
		atomic_fetch_add_explicit(&g_accepted, 1, memory_order_relaxed);
		act = atomic_fetch_add(&g_active, 1) + 1;
		max = atomic_load(&g_max_active);
		while (act > max && !atomic_compare_exchange_weak(&g_max_active, &max, act))
			;

		memset(&c, 0, sizeof(c));
		c.w = w;
		c.fd = fd;
		c.id = atomic_fetch_add(&g_conn_seq, 1) + 1;
		conn_setup(fd);
		if (conn_serve(&c))
			conn_linger(&c);

		worker_fd_set(w, -1);
		close(fd);
		atomic_fetch_sub(&g_active, 1);
		if (w->body_cap > BODY_KEEP) {
			free(w->body);
			w->body = NULL;
			w->body_cap = 0;
		}
	}
	return NULL;
}

/* ---- startup --------------------------------------------------------- */

/* Open the listening socket for "host:port", "[v6]:port" or "port" and
 * write the bound address (real port if 0 was asked) to name. */
static int listen_open(const char *spec, unsigned backlog, char *name, size_t namecap)
{
	char host[256], port[16], addr[INET6_ADDRSTRLEN];
	const char *colon;
	struct addrinfo hints, *res = NULL, *ai;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = -1, rc, one = 1;
	in_port_t pnum;

	if (spec[0] == '[') {
		const char *rb = strchr(spec, ']');

		if (!rb || rb[1] != ':' || (size_t)(rb - spec - 1) >= sizeof(host))
			return -1;
		memcpy(host, spec + 1, (size_t)(rb - spec - 1));
		host[rb - spec - 1] = '\0';
		colon = rb + 1;
	} else if ((colon = strrchr(spec, ':')) != NULL) {
		if ((size_t)(colon - spec) >= sizeof(host))
			return -1;
		memcpy(host, spec, (size_t)(colon - spec));
		host[colon - spec] = '\0';
	} else {
		strcpy(host, "127.0.0.1");
		colon = spec - 1;
	}
	if (strlen(colon + 1) == 0 || strlen(colon + 1) >= sizeof(port))
		return -1;
	strcpy(port, colon + 1);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
	if (rc != 0) {
		fprintf(stderr, "demo_backend: %s: %s\n", spec, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, (int)backlog) == 0)
			break;
		close(fd);
		fd = -1;
	}
	if (fd < 0) {
		fprintf(stderr, "demo_backend: cannot listen on %s: %s\n", spec, strerror(errno));
		freeaddrinfo(res);
		return -1;
	}
	freeaddrinfo(res);

	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

		inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof(addr));
		pnum = ntohs(s6->sin6_port);
		snprintf(name, namecap, "[%s]:%u", addr, (unsigned)pnum);
	} else {
		struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

		inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof(addr));
		pnum = ntohs(s4->sin_port);
		snprintf(name, namecap, "%s:%u", addr, (unsigned)pnum);
	}
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: demo_backend [options]\n"
		"  --listen ADDR        127.0.0.1:9000, [::1]:9000 or PORT; port 0 = any\n"
		"                       (default 127.0.0.1:9000)\n"
		"  --threads N          worker threads = max connections served (16)\n"
		"  --backlog N          kernel accept backlog (16)\n"
		"  --service-ms MS      sleep per request (0)\n"
		"  --cpu-ms MS          CPU burnt per request (0)\n"
		"  --size BYTES         default body size for / (128)\n"
		"  --keepalive-ms MS    idle/read timeout per connection, 0 = none (5000)\n"
		"  --max-requests N     close after N requests per connection, 0 = unlimited (0)\n"
		"  --quiet              no log lines on stderr\n"
		"Prints 'demo_backend listening on ADDR threads=N' on stdout when ready.\n");
}

static bool opt_num(const char *name, const char *s, unsigned long long min, unsigned long long max,
		    unsigned long long *out)
{
	if (parse_u64(s, strlen(s), max, out) && *out >= min)
		return true;
	fprintf(stderr, "demo_backend: --%s: expected a number in %llu..%llu, got '%s'\n", name, min,
		max, s);
	return false;
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "threads", required_argument, NULL, 't' },
		{ "backlog", required_argument, NULL, 'b' },
		{ "service-ms", required_argument, NULL, 's' },
		{ "cpu-ms", required_argument, NULL, 'c' },
		{ "size", required_argument, NULL, 'z' },
		{ "keepalive-ms", required_argument, NULL, 'k' },
		{ "max-requests", required_argument, NULL, 'm' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int ch, idx;
	unsigned long long v;

	while ((ch = getopt_long(argc, argv, "qh", opts, &idx)) != -1) {
		switch (ch) {
		case 'l':
			g_cfg.listen = optarg;
			break;
		case 't':
			if (!opt_num("threads", optarg, 1, 10000, &v))
				return 2;
			g_cfg.threads = (unsigned)v;
			break;
		case 'b':
			if (!opt_num("backlog", optarg, 1, 65535, &v))
				return 2;
			g_cfg.backlog = (unsigned)v;
			break;
		case 's':
			if (!opt_num("service-ms", optarg, 0, MAX_DELAY_MS, &v))
				return 2;
			g_cfg.service_ms = (unsigned)v;
			break;
		case 'c':
			if (!opt_num("cpu-ms", optarg, 0, MAX_DELAY_MS, &v))
				return 2;
			g_cfg.cpu_ms = (unsigned)v;
			break;
		case 'z':
			if (!opt_num("size", optarg, 0, MAX_SIZE, &v))
				return 2;
			g_cfg.size = v;
			break;
		case 'k':
			if (!opt_num("keepalive-ms", optarg, 0, 86400000, &v))
				return 2;
			g_cfg.keepalive_ms = (unsigned)v;
			break;
		case 'm':
			if (!opt_num("max-requests", optarg, 0, 1000000000, &v))
				return 2;
			g_cfg.max_requests = (unsigned)v;
			break;
		case 'q':
			g_cfg.quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "demo_backend: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct worker *ws;
	pthread_attr_t attr;
	sigset_t sigs;
	char name[INET6_ADDRSTRLEN + 16];
	unsigned started = 0;
	int rc, sig = 0, status = 1;

	rc = parse_args(argc, argv);
	if (rc)
		return rc == 1 ? 0 : rc;
	for (size_t i = 0; i < sizeof(g_pattern); i++)
		g_pattern[i] = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-\n"
			[i % PAT_PERIOD];

	/* Signals are taken synchronously by main (sigwait); every thread
	 * inherits the blocked mask. */
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);

	g_lfd = listen_open(g_cfg.listen, g_cfg.backlog, name, sizeof(name));
	if (g_lfd < 0)
		return 1;

	ws = calloc(g_cfg.threads, sizeof(*ws));
	if (!ws)
		goto out_close;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, STACK_SIZE);
	for (; started < g_cfg.threads; started++) {
		struct worker *w = &ws[started];

		pthread_mutex_init(&w->lock, NULL);
		w->fd = -1;
		w->rbuf = malloc(RBUF_SIZE);
		w->head = malloc(MAX_HEAD + 1);
		if (!w->rbuf || !w->head || pthread_create(&w->tid, &attr, worker_main, w) != 0) {
			fprintf(stderr, "demo_backend: cannot start thread %u\n", started);
			free(w->rbuf);
			free(w->head);
			pthread_mutex_destroy(&w->lock);
			goto out_stop;
		}
	}
	printf("demo_backend listening on %s threads=%u\n", name, g_cfg.threads);
	fflush(stdout);

	while (sigwait(&sigs, &sig) != 0)
		;
	log_info("signal %d, stopping", sig);
	status = 0;

out_stop:
	pthread_attr_destroy(&attr);
	/* Wake every worker: accept() fails once the listener is shut down
	 * (Linux), recv()/send() return once their connection is. */
	atomic_store(&g_stop, true);
	shutdown(g_lfd, SHUT_RDWR);
	for (unsigned i = 0; i < started; i++) {
		pthread_mutex_lock(&ws[i].lock);
		if (ws[i].fd >= 0)
			shutdown(ws[i].fd, SHUT_RDWR);
		pthread_mutex_unlock(&ws[i].lock);
	}
	for (unsigned i = 0; i < started; i++) {
		pthread_join(ws[i].tid, NULL);
		pthread_mutex_destroy(&ws[i].lock);
		free(ws[i].rbuf);
		free(ws[i].head);
		free(ws[i].body);
	}
	log_info("stopped: %llu connections, %llu requests since start/reset",
		 atomic_load(&g_accepted), atomic_load(&g_requests));
	free(ws);
out_close:
	close(g_lfd);
	return status;
}
