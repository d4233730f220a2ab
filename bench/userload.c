/*
 * userload — closed-loop "simulated users" WITHOUT keepalive, plain HTTP or
 * TLS that never resumes a session (bench/offload.py).
 *
 * N users; each one, in a loop with no think time: opens a new TCP
 * connection (bound to one of --sources loopback addresses, see below), with
 * --tls does a FULL TLS handshake, sends one
 *
 *     GET <path> HTTP/1.1 / Host / Connection: close
 *
 * reads the whole response, closes, and starts again at once. A user whose
 * request fails (refused, reset, timed out, TLS failure, non-200, truncated
 * response) counts one error and starts again at once too.
 *
 * TLS: OpenSSL client context with SSL_OP_NO_TICKET and the session cache
 * off, and no session is ever offered back: every connection is a full
 * handshake (the JSON counts resumed handshakes; it must stay 0). The
 * certificate is not verified. --tls-max 1.2 (default) or 1.3.
 *
 * Source addresses: connection of user i binds (IP_BIND_ADDRESS_NO_PORT)
 * to 127.0.(1 + k / 250).(2 + k % 250), k = i % --sources; the kernel then
 * picks the port per (source, destination), so thousands of users making
 * thousands of connections per second do not run out of ephemeral ports.
 * --sources 0: no bind.
 *
 * Phases (timed from when every user has started its first request):
 * --warmup seconds (nothing counted), then --duration seconds
 * measured; at the two boundaries the program prints "phase measure" and
 * "phase end" on stdout (flushed) so the caller can read CPU counters at
 * those points. A request is counted in the measured phase when it
 * completes (or fails) inside it; requests still open at the end are
 * reported apart (open_at_end) and not waited for.
 *
 * Output: the last stdout line is one JSON object: ok, errors by kind,
 * tps_avg (ok / duration), tps_peak (best sliding 1-s window over 100-ms
 * buckets), latency mean/p50/p90/p99/max in ms (connect to end of the
 * response: the time a user waits), per-100-ms completions, handshakes and
 * resumed handshakes, and users_served: how many users completed at least
 * one request in the measured phase (a server that lets some connections
 * wait in SYN retransmits starves those users), ramp_ms (time to start every
 * user) and max_gap_ms (the longest pause of the event loop in the measured
 * phase: over a few ms, the process was not scheduled). One epoll thread;
 * pin it with taskset.
 *
 * --session: every user keeps a cookie jar, one cookie per name (at most
 * JAR_MAX names: JSESSIONID, sluice's SLUICE_SERVER, HAProxy's SRV, ...),
 * filled from the Set-Cookie headers of every response (an empty value
 * deletes the cookie), and sends them all in a Cookie header on its next
 * requests (still one request per new connection, Connection: close). The
 * server names itself in an X-Route response header (bench/offload's JSP:
 * the jvmRoute). Counted in the measured phase, over completed 200
 * responses: session_requests (the request carried a JSESSIONID),
 * session_stayed (of those, X-Route equals the route of the JSESSIONID the
 * request carried: the part after its first '.'), session_new (the response
 * set a JSESSIONID other than the one the user had), routes (responses
 * per X-Route value, the first ROUTES_MAX values seen) and jar_full
 * (cookies not kept: jar full, or name or value too long).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef IP_BIND_ADDRESS_NO_PORT
#define IP_BIND_ADDRESS_NO_PORT 24
#endif

#define HEAD_MAX 8192
#define US10_SLOTS 100000u     /* 10 us buckets up to 1 s */
#define MS_SLOTS 600000u       /* then 1 ms buckets up to 600 s */
#define REQ_MAX 2048           /* a request with its Cookie header */
#define JAR_MAX 4              /* --session: cookies kept per user */
#define CNAME_MAX 32           /* cookie name bytes, with the NUL */
#define CVAL_MAX 128           /* cookie value bytes, with the NUL */
#define ROUTE_MAX 32           /* X-Route value bytes, with the NUL */
#define ROUTES_MAX 8           /* distinct X-Route values counted */

/* One user's current request. */
enum ustate {
	U_IDLE,        /* between requests (only transiently) */
	U_CONNECTING,  /* TCP connect in progress */
	U_HANDSHAKE,   /* TLS handshake in progress */
	U_WRITING,     /* sending the request */
	U_READING,     /* reading the response until complete or EOF */
};

/* --session: one stored cookie; name[0] == 0: a free slot. */
struct cookie {
	char name[CNAME_MAX];
	char value[CVAL_MAX];
};

struct user {
	int fd;
	SSL *ssl;
	enum ustate st;
	uint32_t src;              /* source address, host order; 0: no bind */
	uint64_t t0;               /* request start (before connect), ns */
	size_t woff;               /* request bytes written */
	char head[HEAD_MAX];
	size_t hlen;               /* bytes in head[] (until the blank line) */
	int head_done, status, chunked;
	long long clen;            /* Content-Length, -1 if none */
	long long body;            /* body bytes received */
	char tail[5];              /* last body bytes (chunked terminator check) */
	uint32_t events;           /* registered epoll events */
	uint32_t served;           /* requests completed in the measured phase */
	/* --session */
	struct cookie jar[JAR_MAX];
	int jar_changed;           /* rebuild rq[] before the next request */
	char rq[REQ_MAX];          /* this user's request, with its cookies */
	size_t rq_len;
	char sent_route[ROUTE_MAX]; /* route of the JSESSIONID sent; "" if none */
	int sent_session;          /* the request carried a JSESSIONID */
	int new_session;           /* the response set a different JSESSIONID */
	char route[ROUTE_MAX];     /* the response's X-Route; "" if none */
};

enum ekind { E_REFUSED, E_CONNECT, E_ADDR, E_RESET, E_TIMEOUT_CONNECT, E_TIMEOUT_RESPONSE,
	     E_TLS, E_STATUS, E_CLOSED, E_PARSE, E_NKINDS };
static const char *ekind_name[E_NKINDS] = {
	"refused", "connect", "addr", "reset", "timeout_connect", "timeout_response",
	"tls", "status", "closed", "parse",
};

static struct {
	uint64_t ok, err[E_NKINDS], handshakes, resumed, bytes_in, started;
	uint64_t lat_sum_ns, lat_n, lat_max_ns;
	uint64_t status_seen[6];   /* non-200 responses by class 1xx..5xx (index 1..5) */
	uint64_t session_requests, session_stayed, session_new, jar_full;
	char route_name[ROUTES_MAX][ROUTE_MAX];
	uint64_t route_n[ROUTES_MAX], route_other;
} S;

static uint32_t *h_10us, *h_ms;
static uint32_t *buckets;      /* ok completions per 100 ms of the measured phase */
static unsigned nbuckets;
static struct user *U;
static unsigned n_users;
static int epfd;
static struct sockaddr_in dst;
static char req[1024];          /* the request without cookies */
static size_t req_len, req_head_len; /* req_head_len: up to the Connection line */
static int session;            /* --session */
static uint64_t timeout_ns = 10000000000ull;
static unsigned n_sources = 256;
static SSL_CTX *ctx;
static int measuring;          /* 1 during the measured phase */
static uint64_t t_measure;     /* start of the measured phase, ns */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *msg)
{
	fprintf(stderr, "userload: %s\n", msg);
	exit(2);
}

static void record_latency(uint64_t ns)
{
	uint64_t us = ns / 1000;
	if (us / 10 < US10_SLOTS)
		h_10us[us / 10]++;
	else if (us / 1000 < MS_SLOTS)
		h_ms[us / 1000]++;
	else
		h_ms[MS_SLOTS - 1]++;
	S.lat_sum_ns += ns;
	S.lat_n++;
	if (ns > S.lat_max_ns)
		S.lat_max_ns = ns;
}

/* The latency (ms) below which FRAC of the recorded ones fall; -1 if none. */
static double percentile(double frac)
{
	if (S.lat_n == 0)
		return -1;
	uint64_t want = (uint64_t)((double)S.lat_n * frac + 0.5);
	if (want < 1)
		want = 1;
	uint64_t seen = 0;
	for (uint32_t i = 0; i < US10_SLOTS; i++) {
		seen += h_10us[i];
		if (seen >= want)
			return (i + 0.5) / 100.0;
	}
	for (uint32_t i = 0; i < MS_SLOTS; i++) {
		seen += h_ms[i];
		if (seen >= want)
			return i + 0.5;
	}
	return (double)S.lat_max_ns / 1e6;
}

static void ep_set(struct user *u, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = u };
	if (u->events == ev)
		return;
	if (epoll_ctl(epfd, u->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, u->fd, &e) < 0)
		die("epoll_ctl failed");
	u->events = ev;
}

static void user_close(struct user *u)
{
	if (u->ssl) {
		SSL_free(u->ssl);
		u->ssl = NULL;
	}
	if (u->fd >= 0) {
		close(u->fd);  /* also removes it from the epoll set */
		u->fd = -1;
	}
	u->events = 0;
	u->st = U_IDLE;
}

static void user_start(struct user *u);

static void user_fail(struct user *u, enum ekind k)
{
	if (measuring)
		S.err[k]++;
	user_close(u);
	user_start(u);
}

/* --session: a completed 200 response in the measured phase. */
static void count_session(const struct user *u)
{
	if (u->sent_session) {
		S.session_requests++;
		if (u->route[0] && strcmp(u->route, u->sent_route) == 0)
			S.session_stayed++;
	}
	if (u->new_session)
		S.session_new++;
	if (!u->route[0])
		return;
	for (unsigned i = 0; i < ROUTES_MAX; i++) {
		if (!S.route_name[i][0])
			memcpy(S.route_name[i], u->route, ROUTE_MAX);
		if (strcmp(S.route_name[i], u->route) == 0) {
			S.route_n[i]++;
			return;
		}
	}
	S.route_other++;
}

static void user_done(struct user *u)
{
	uint64_t t = now_ns();
	if (measuring) {
		S.ok++;
		u->served++;
		record_latency(t - u->t0);
		uint64_t b = (t - t_measure) / 100000000u;
		if (b < nbuckets)
			buckets[b]++;
		if (session)
			count_session(u);
	}
	user_close(u);
	user_start(u);
}

/* --session: the cookie NAME of U's jar; NULL if it has none. */
static struct cookie *jar_find(struct user *u, const char *name, size_t nlen)
{
	for (unsigned i = 0; i < JAR_MAX; i++) {
		struct cookie *c = &u->jar[i];
		if (c->name[0] && strlen(c->name) == nlen && memcmp(c->name, name, nlen) == 0)
			return c;
	}
	return NULL;
}

/* --session: store (or with an empty value, delete) one cookie. A changed
 * JSESSIONID marks a new session. */
static void jar_set(struct user *u, const char *name, size_t nlen, const char *val, size_t vlen)
{
	struct cookie *c = jar_find(u, name, nlen);
	if (nlen == 10 && memcmp(name, "JSESSIONID", 10) == 0 && vlen &&
	    (!c || strlen(c->value) != vlen || memcmp(c->value, val, vlen) != 0))
		u->new_session = 1;
	if (vlen == 0) {
		if (c)
			c->name[0] = 0;
		return;
	}
	if (c && strlen(c->value) == vlen && memcmp(c->value, val, vlen) == 0)
		return;
	for (unsigned i = 0; !c && i < JAR_MAX; i++)
		if (!u->jar[i].name[0])
			c = &u->jar[i];
	if (!c || nlen >= CNAME_MAX || vlen >= CVAL_MAX) {
		if (measuring)
			S.jar_full++;
		return;
	}
	memcpy(c->name, name, nlen);
	c->name[nlen] = 0;
	memcpy(c->value, val, vlen);
	c->value[vlen] = 0;
	u->jar_changed = 1;
}

/* --session: "Set-Cookie: NAME=VALUE; attributes" (V: after the colon, up
 * to EOL): the first NAME=VALUE only, attributes ignored. */
static void set_cookie(struct user *u, const char *v, const char *eol)
{
	while (v < eol && (*v == ' ' || *v == '\t'))
		v++;
	const char *eq = memchr(v, '=', (size_t)(eol - v));
	if (!eq || eq == v)
		return;
	const char *n_end = eq;
	while (n_end > v && (n_end[-1] == ' ' || n_end[-1] == '\t'))
		n_end--;
	const char *val = eq + 1, *v_end = val;
	while (v_end < eol && *v_end != ';')
		v_end++;
	while (v_end > val && (v_end[-1] == ' ' || v_end[-1] == '\t'))
		v_end--;
	jar_set(u, v, (size_t)(n_end - v), val, (size_t)(v_end - val));
}

/* Copy the header value V..EOL, trimmed, into OUT (ROUTE_MAX bytes). */
static void copy_value(char *out, const char *v, const char *eol)
{
	while (v < eol && (*v == ' ' || *v == '\t'))
		v++;
	while (eol > v && (eol[-1] == ' ' || eol[-1] == '\t'))
		eol--;
	size_t n = (size_t)(eol - v) < ROUTE_MAX - 1 ? (size_t)(eol - v) : ROUTE_MAX - 1;
	memcpy(out, v, n);
	out[n] = 0;
}

/* --session: this user's request: the common one with a Cookie header of
 * every stored cookie before its Connection line; the common one itself
 * when the jar is empty (rq_len 0). */
static void build_request(struct user *u)
{
	size_t n = 0;
	u->jar_changed = 0;
	u->rq_len = 0;
	for (unsigned i = 0; i < JAR_MAX; i++) {
		const struct cookie *c = &u->jar[i];
		if (!c->name[0])
			continue;
		if (n == 0) {
			memcpy(u->rq, req, req_head_len);
			n = req_head_len;
			memcpy(u->rq + n, "Cookie: ", 8);
			n += 8;
		} else {
			memcpy(u->rq + n, "; ", 2);
			n += 2;
		}
		n += (size_t)sprintf(u->rq + n, "%s=%s", c->name, c->value);
	}
	if (n == 0)
		return;
	memcpy(u->rq + n, "\r\n", 2);
	n += 2;
	memcpy(u->rq + n, req + req_head_len, req_len - req_head_len);
	u->rq_len = n + req_len - req_head_len;
}

/* --session: note the session the next request carries. */
static void session_start(struct user *u)
{
	if (u->jar_changed)
		build_request(u);
	const struct cookie *c = jar_find(u, "JSESSIONID", 10);
	const char *dot = c ? strchr(c->value, '.') : NULL;
	u->sent_session = c != NULL;
	u->sent_route[0] = 0;
	if (dot)
		copy_value(u->sent_route, dot + 1, dot + 1 + strlen(dot + 1));
	u->new_session = 0;
	u->route[0] = 0;
}

/* Start a new request: socket, bind, non-blocking connect. */
static void user_start(struct user *u)
{
	u->t0 = now_ns();
	u->woff = 0;
	u->hlen = 0;
	u->head_done = 0;
	u->status = 0;
	u->chunked = 0;
	u->clen = -1;
	u->body = 0;
	memset(u->tail, 0, sizeof(u->tail));
	if (session)
		session_start(u);
	S.started++;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket() failed (open files limit?)");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (u->src) {
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = 0,
					   .sin_addr.s_addr = htonl(u->src) };
		if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0)
			die("bind() to a 127.x source address failed");
	}
	u->fd = fd;
	u->events = 0;
	u->st = U_CONNECTING;
	if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS) {
		int e = errno;
		/* Failing at once: count it, but do not loop here (stack); the
		 * timer sweep restarts idle users. */
		if (measuring)
			S.err[e == ECONNREFUSED ? E_REFUSED : e == EADDRNOTAVAIL ? E_ADDR : E_CONNECT]++;
		user_close(u);
		return;
	}
	ep_set(u, EPOLLOUT);
}

/* Parse the response head in u->head (complete, ends with CRLFCRLF). */
static int parse_head(struct user *u)
{
	u->head[u->hlen] = 0;
	if (strncmp(u->head, "HTTP/1.", 7) != 0 || u->hlen < 12)
		return -1;
	u->status = atoi(u->head + 9);
	for (char *p = strstr(u->head, "\r\n"); p && p[2] != '\r'; p = strstr(p + 2, "\r\n")) {
		char *l = p + 2;
		if (strncasecmp(l, "content-length:", 15) == 0)
			u->clen = atoll(l + 15);
		else if (strncasecmp(l, "transfer-encoding:", 18) == 0 && strstr(l, "chunked") &&
			 strstr(l, "chunked") < strstr(l, "\r\n"))
			u->chunked = 1;
		else if (session && strncasecmp(l, "set-cookie:", 11) == 0)
			set_cookie(u, l + 11, strstr(l, "\r\n"));
		else if (session && strncasecmp(l, "x-route:", 8) == 0)
			copy_value(u->route, l + 8, strstr(l, "\r\n"));
	}
	return 0;
}

static void body_bytes(struct user *u, const char *p, size_t n)
{
	u->body += (long long)n;
	if (n >= 5) {
		memcpy(u->tail, p + n - 5, 5);
	} else {
		memmove(u->tail, u->tail + n, 5 - n);
		memcpy(u->tail + 5 - n, p, n);
	}
}

static int response_complete(struct user *u)
{
	if (!u->head_done)
		return 0;
	if (u->clen >= 0)
		return u->body >= u->clen;
	if (u->chunked)
		return memcmp(u->tail, "0\r\n\r\n", 5) == 0;
	return 0;              /* delimited by EOF */
}

/* The response has ended (complete, or EOF): success or an error. */
static void response_end(struct user *u, int eof)
{
	if (!u->head_done) {
		user_fail(u, u->hlen ? E_PARSE : E_CLOSED);
		return;
	}
	if (u->status != 200) {
		if (measuring && u->status >= 100 && u->status < 600)
			S.status_seen[u->status / 100]++;
		user_fail(u, E_STATUS);
		return;
	}
	if (eof && ((u->clen >= 0 && u->body < u->clen) ||
		    (u->clen < 0 && u->chunked && memcmp(u->tail, "0\r\n\r\n", 5) != 0))) {
		user_fail(u, E_CLOSED);
		return;
	}
	user_done(u);
}

/* Bytes received: feed the head parser, then count body bytes. */
static void got(struct user *u, const char *p, size_t n)
{
	if (measuring)
		S.bytes_in += n;
	while (n && !u->head_done) {
		if (u->hlen == HEAD_MAX - 1) {
			user_fail(u, E_PARSE);
			return;
		}
		u->head[u->hlen++] = *p++;
		n--;
		if (u->hlen >= 4 && memcmp(u->head + u->hlen - 4, "\r\n\r\n", 4) == 0) {
			if (parse_head(u) < 0) {
				user_fail(u, E_PARSE);
				return;
			}
			u->head_done = 1;
		}
	}
	if (n)
		body_bytes(u, p, n);
	if (response_complete(u))
		response_end(u, 0);
}

static enum ekind io_errno_kind(int e)
{
	return (e == ECONNRESET || e == EPIPE) ? E_RESET : E_CONNECT;
}

static void do_write(struct user *u)
{
	const char *rq = u->rq_len ? u->rq : req;
	size_t rq_len = u->rq_len ? u->rq_len : req_len;
	while (u->woff < rq_len) {
		ssize_t w;
		if (u->ssl) {
			ERR_clear_error();
			int r = SSL_write(u->ssl, rq + u->woff, (int)(rq_len - u->woff));
			if (r <= 0) {
				int e = SSL_get_error(u->ssl, r);
				if (e == SSL_ERROR_WANT_WRITE) { ep_set(u, EPOLLOUT); return; }
				if (e == SSL_ERROR_WANT_READ) { ep_set(u, EPOLLIN); return; }
				user_fail(u, e == SSL_ERROR_SYSCALL ? io_errno_kind(errno) : E_TLS);
				return;
			}
			w = r;
		} else {
			w = send(u->fd, rq + u->woff, rq_len - u->woff, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK) { ep_set(u, EPOLLOUT); return; }
				user_fail(u, io_errno_kind(errno));
				return;
			}
		}
		u->woff += (size_t)w;
	}
	u->st = U_READING;
	ep_set(u, EPOLLIN);
}

static void do_read(struct user *u)
{
	char buf[16384];
	for (;;) {
		ssize_t n;
		if (u->ssl) {
			ERR_clear_error();
			int r = SSL_read(u->ssl, buf, sizeof(buf));
			if (r <= 0) {
				int e = SSL_get_error(u->ssl, r);
				if (e == SSL_ERROR_WANT_READ) { ep_set(u, EPOLLIN); return; }
				if (e == SSL_ERROR_WANT_WRITE) { ep_set(u, EPOLLOUT); return; }
				if (e == SSL_ERROR_ZERO_RETURN ||
				    (e == SSL_ERROR_SYSCALL && errno == 0) ||
				    (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) ==
				     SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
					response_end(u, 1);     /* EOF (with or without close_notify) */
					return;
				}
				if (u->head_done && !u->chunked && u->clen < 0) {
					response_end(u, 1);
					return;
				}
				user_fail(u, e == SSL_ERROR_SYSCALL ? io_errno_kind(errno) : E_TLS);
				return;
			}
			n = r;
		} else {
			n = recv(u->fd, buf, sizeof(buf), 0);
			if (n < 0) {
				if (errno == EAGAIN || errno == EWOULDBLOCK) { ep_set(u, EPOLLIN); return; }
				user_fail(u, io_errno_kind(errno));
				return;
			}
			if (n == 0) {
				response_end(u, 1);
				return;
			}
		}
		struct user *me = u;
		uint64_t t0 = u->t0;
		got(u, buf, (size_t)n);
		/* got() may have finished this request and started the next one
		 * (same struct, new t0 and state): stop reading then. */
		if (me->st != U_READING || me->t0 != t0)
			return;
	}
}

static void do_handshake(struct user *u)
{
	ERR_clear_error();
	int r = SSL_do_handshake(u->ssl);
	if (r == 1) {
		if (measuring) {
			S.handshakes++;
			if (SSL_session_reused(u->ssl))
				S.resumed++;
		}
		u->st = U_WRITING;
		do_write(u);
		return;
	}
	int e = SSL_get_error(u->ssl, r);
	if (e == SSL_ERROR_WANT_READ) { ep_set(u, EPOLLIN); return; }
	if (e == SSL_ERROR_WANT_WRITE) { ep_set(u, EPOLLOUT); return; }
	user_fail(u, e == SSL_ERROR_SYSCALL && errno ? io_errno_kind(errno) : E_TLS);
}

static void on_event(struct user *u, uint32_t ev)
{
	switch (u->st) {
	case U_CONNECTING: {
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(u->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			err = errno;
		if (err) {
			user_fail(u, err == ECONNREFUSED ? E_REFUSED : err == ECONNRESET ? E_RESET : E_CONNECT);
			return;
		}
		if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
			return;
		if (ctx) {
			u->ssl = SSL_new(ctx);
			if (!u->ssl)
				die("SSL_new failed");
			SSL_set_fd(u->ssl, u->fd);
			SSL_set_tlsext_host_name(u->ssl, "localhost");
			SSL_set_connect_state(u->ssl);
			u->st = U_HANDSHAKE;
			do_handshake(u);
		} else {
			u->st = U_WRITING;
			do_write(u);
		}
		return;
	}
	case U_HANDSHAKE:
		do_handshake(u);
		return;
	case U_WRITING:
		do_write(u);
		return;
	case U_READING:
		do_read(u);
		return;
	case U_IDLE:
		return;
	}
}

/* Time out requests older than the timeout; restart users left idle. */
static void sweep(uint64_t now)
{
	for (unsigned i = 0; i < n_users; i++) {
		struct user *u = &U[i];
		if (u->st == U_IDLE) {
			user_start(u);
		} else if (now - u->t0 > timeout_ns) {
			user_fail(u, (u->st == U_CONNECTING || u->st == U_HANDSHAKE)
				  ? E_TIMEOUT_CONNECT : E_TIMEOUT_RESPONSE);
		}
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: userload --port N [options]\n"
		"  --host A          IPv4 address to connect to (127.0.0.1)\n"
		"  --port N          port\n"
		"  --path P          request path (/)\n"
		"  --users N         concurrent users = connections (100)\n"
		"  --warmup S        unmeasured seconds first (1; fractions ok)\n"
		"  --duration S      measured seconds (5; fractions ok)\n"
		"  --timeout MS      per request, connect to last byte (10000)\n"
		"  --sources N       127.x source addresses to spread users over, 0 = no bind (256)\n"
		"  --tls             TLS, full handshake on every connection (no tickets, no cache)\n"
		"  --tls-max V       1.2 or 1.3: highest TLS version offered (1.2)\n"
		"  --session         keep cookies per user, count requests that stayed on their\n"
		"                    session's server (X-Route vs the JSESSIONID's route)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *host = "127.0.0.1", *path = "/";
	int port = 0, tls = 0;
	double warmup = 1, duration = 5;
	const char *tls_max = "1.2";
	static const struct option opts[] = {
		{ "host", required_argument, 0, 'H' }, { "port", required_argument, 0, 'p' },
		{ "path", required_argument, 0, 'P' }, { "users", required_argument, 0, 'u' },
		{ "warmup", required_argument, 0, 'w' }, { "duration", required_argument, 0, 'd' },
		{ "timeout", required_argument, 0, 't' }, { "sources", required_argument, 0, 's' },
		{ "tls", no_argument, 0, 'T' }, { "tls-max", required_argument, 0, 'V' },
		{ "session", no_argument, 0, 'S' }, { 0, 0, 0, 0 },
	};
	n_users = 100;
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (c) {
		case 'H': host = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'P': path = optarg; break;
		case 'u': n_users = (unsigned)atoi(optarg); break;
		case 'w': warmup = atof(optarg); break;
		case 'd': duration = atof(optarg); break;
		case 't': timeout_ns = (uint64_t)atoll(optarg) * 1000000u; break;
		case 's': n_sources = (unsigned)atoi(optarg); break;
		case 'T': tls = 1; break;
		case 'V': tls_max = optarg; break;
		case 'S': session = 1; break;
		default: usage();
		}
	}
	if (port <= 0 || port > 65535 || n_users == 0 || duration <= 0 || warmup < 0 ||
	    timeout_ns == 0 || n_sources > 250 * 250)
		usage();
	dst.sin_family = AF_INET;
	dst.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, host, &dst.sin_addr) != 1)
		die("--host must be an IPv4 address");
	int rl = snprintf(req, sizeof(req),
			  "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: userload\r\n"
			  "Connection: close\r\n\r\n", path, host, port);
	/* Room in a user's rq[] for every cookie of a full jar. */
	if (rl <= 0 || (size_t)rl + 10 + JAR_MAX * (CNAME_MAX + CVAL_MAX + 2) >= REQ_MAX)
		die("request too long");
	req_len = (size_t)rl;
	req_head_len = (size_t)(strstr(req, "Connection: close") - req);

	if (tls) {
		ctx = SSL_CTX_new(TLS_client_method());
		if (!ctx)
			die("SSL_CTX_new failed");
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		if (strcmp(tls_max, "1.2") == 0)
			SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
		else if (strcmp(tls_max, "1.3") == 0)
			SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
		else
			usage();
		SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
	}

	struct rlimit r;
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
		r.rlim_cur = r.rlim_max;
		setrlimit(RLIMIT_NOFILE, &r);
	}
	if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < n_users + 64)
		die("open files limit below --users + 64");
	signal(SIGPIPE, SIG_IGN);

	h_10us = calloc(US10_SLOTS, sizeof(*h_10us));
	h_ms = calloc(MS_SLOTS, sizeof(*h_ms));
	nbuckets = (unsigned)(duration * 10 + 0.5);
	if (nbuckets == 0)
		nbuckets = 1;
	buckets = calloc(nbuckets, sizeof(*buckets));
	U = calloc(n_users, sizeof(*U));
	if (!h_10us || !h_ms || !buckets || !U)
		die("out of memory");
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		die("epoll_create1 failed");

	for (unsigned i = 0; i < n_users; i++) {
		unsigned k = n_sources ? i % n_sources : 0;
		U[i].fd = -1;
		U[i].src = n_sources ? (127u << 24) | ((1 + k / 250) << 8) | (2 + k % 250) : 0;
	}
	/* The phases start once every user has started (opening thousands of
	 * connections takes a moment). */
	uint64_t t_ramp = now_ns();
	for (unsigned i = 0; i < n_users; i++)
		user_start(&U[i]);
	uint64_t t_begin = now_ns();
	t_measure = t_begin + (uint64_t)(warmup * 1e9);
	uint64_t t_end = t_measure + (uint64_t)(duration * 1e9);
	uint64_t last_iter = t_begin, max_gap = 0;

	struct epoll_event evs[512];
	uint64_t last_sweep = 0;
	for (;;) {
		uint64_t now = now_ns();
		/* Longest time between two loop iterations in the measured phase:
		 * a long one means this process was not scheduled (busy machine). */
		if (measuring && now - last_iter > max_gap)
			max_gap = now - last_iter;
		last_iter = now;
		if (!measuring && now >= t_measure) {
			measuring = 1;
			printf("phase measure\n");
			fflush(stdout);
		}
		if (now >= t_end)
			break;
		if (now - last_sweep >= 20000000u) {
			sweep(now);
			last_sweep = now;
		}
		int n = epoll_wait(epfd, evs, 512, 10);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait failed");
		}
		for (int i = 0; i < n; i++)
			on_event(evs[i].data.ptr, evs[i].events);
	}
	measuring = 0;
	printf("phase end\n");
	fflush(stdout);

	unsigned open_at_end = 0, served = 0;
	for (unsigned i = 0; i < n_users; i++) {
		if (U[i].st != U_IDLE)
			open_at_end++;
		if (U[i].served)
			served++;
	}
	uint64_t errs = 0;
	for (int k = 0; k < E_NKINDS; k++)
		errs += S.err[k];
	/* Best sliding 1-s window (10 buckets); shorter runs: scaled to 1 s. */
	double peak = 0;
	unsigned win = nbuckets < 10 ? nbuckets : 10;
	for (unsigned i = 0; i + win <= nbuckets; i++) {
		uint64_t s = 0;
		for (unsigned j = 0; j < win; j++)
			s += buckets[i + j];
		double v = (double)s * 10.0 / win;
		if (v > peak)
			peak = v;
	}
	printf("{\"users\":%u,\"tls\":%d,\"tls_max\":\"%s\",\"warmup\":%.3f,\"duration\":%.3f,"
	       "\"timeout_ms\":%llu,\"sources\":%u,\"ok\":%llu,\"errors\":%llu,\"error_pct\":%.4f,",
	       n_users, tls, tls ? tls_max : "", warmup, duration,
	       (unsigned long long)(timeout_ns / 1000000u), n_sources,
	       (unsigned long long)S.ok, (unsigned long long)errs,
	       S.ok + errs ? 100.0 * (double)errs / (double)(S.ok + errs) : 0.0);
	printf("\"err\":{");
	for (int k = 0; k < E_NKINDS; k++)
		printf("%s\"%s\":%llu", k ? "," : "", ekind_name[k], (unsigned long long)S.err[k]);
	printf("},\"status\":{\"1xx\":%llu,\"2xx\":%llu,\"3xx\":%llu,\"4xx\":%llu,\"5xx\":%llu},",
	       (unsigned long long)S.status_seen[1], (unsigned long long)S.status_seen[2],
	       (unsigned long long)S.status_seen[3], (unsigned long long)S.status_seen[4],
	       (unsigned long long)S.status_seen[5]);
	printf("\"tps_avg\":%.2f,\"tps_peak\":%.2f,\"mean_ms\":%.3f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
	       "\"p99_ms\":%.3f,\"max_ms\":%.3f,\"open_at_end\":%u,\"users_served\":%u,"
	       "\"handshakes\":%llu,\"resumed\":%llu,\"ramp_ms\":%.1f,\"max_gap_ms\":%.1f,"
	       "\"bytes_in\":%llu,\"per_100ms\":[",
	       (double)S.ok / duration, peak,
	       S.lat_n ? (double)S.lat_sum_ns / (double)S.lat_n / 1e6 : -1.0,
	       percentile(0.50), percentile(0.90), percentile(0.99), (double)S.lat_max_ns / 1e6,
	       open_at_end, served, (unsigned long long)S.handshakes, (unsigned long long)S.resumed,
	       (double)(t_begin - t_ramp) / 1e6, (double)max_gap / 1e6,
	       (unsigned long long)S.bytes_in);
	for (unsigned i = 0; i < nbuckets; i++)
		printf("%s%u", i ? "," : "", buckets[i]);
	printf("]");
	if (session) {
		printf(",\"session\":1,\"session_requests\":%llu,\"session_stayed\":%llu,"
		       "\"session_new\":%llu,\"jar_full\":%llu,\"routes\":{",
		       (unsigned long long)S.session_requests, (unsigned long long)S.session_stayed,
		       (unsigned long long)S.session_new, (unsigned long long)S.jar_full);
		for (unsigned i = 0; i < ROUTES_MAX && S.route_name[i][0]; i++) {
			printf("%s\"", i ? "," : "");
			for (const char *c = S.route_name[i]; *c; c++)   /* JSON string: printable ASCII */
				if (*c >= 0x20 && *c < 0x7f && *c != '"' && *c != '\\')
					putchar(*c);
			printf("\":%llu", (unsigned long long)S.route_n[i]);
		}
		printf("},\"routes_other\":%llu", (unsigned long long)S.route_other);
	}
	printf("}\n");
	fflush(stdout);
	return 0;
}
