/*
 * connhold: hold many client connections open against one HTTP/1.1 server
 * on 127.0.0.1, for bench/memory.py. One process, one epoll loop.
 *
 *   connhold PORT MODE [INTERVAL_MS]
 *
 * MODE:
 *   plain   TCP connect, one keepalive GET /, read the whole answer, then idle
 *   tls     the same over TLS (TLS 1.2-1.3, no certificate verification,
 *           SNI "localhost"): handshake, one GET, then idle
 *   active  plain TCP; every connection sends a keepalive GET / every
 *           INTERVAL_MS (default 1000) for as long as it is open: the first
 *           one at once, the second after a random part of the interval (so
 *           the connections do not move in lock-step), then one interval
 *           after each answer
 *
 * Commands on stdin, one per line:
 *   N       open connections until N are established (and answered once);
 *           at most 256 (plain) or 64 (tls) are being opened at a time. Prints
 *           one status line when N are up, or after 120 s, whichever is first.
 *   s       print a status line now
 *   q       close everything (RST, no TIME_WAIT left behind) and exit
 * Status line:
 *   open <n> target <N> errors <e> closed <c> reqs <r> ms <t>
 * errors: connects/handshakes/requests that failed; closed: established
 * connections the server closed (an idle timeout shows up here); reqs:
 * answers received in all; ms: time the last N command took.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum cstate {
	C_FREE,       /* slot unused */
	C_CONNECTING, /* connect() in progress */
	C_HANDSHAKE,  /* TLS handshake in progress */
	C_SENDING,    /* request partly written */
	C_READING,    /* waiting for (the rest of) the answer */
	C_IDLE,       /* answered; idle (plain, tls) or waiting for next_at (active) */
};

struct conn {
	int fd;
	enum cstate st;
	int established; /* answered at least once: counts as open */
	SSL *ssl;
	uint32_t ev;     /* events registered with epoll */
	size_t sent;
	size_t got;      /* bytes of the answer in buf */
	size_t need;     /* total answer length once the header is parsed; 0 = unknown */
	int64_t next_at; /* active: when to send the next request (ms) */
	char buf[1024];
};

static const char REQ[] = "GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: connhold\r\n\r\n";

static struct conn *conns;
static int nslots, epfd, port, mode_tls, mode_active, interval_ms = 1000;
static int target, nopen, nopening, conns_hwm;
static long long errors, closed_by_peer, reqs;
static int64_t cmd_started;
static int cmd_pending;
static SSL_CTX *ctx;
static unsigned rng = 12345;

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void status(void)
{
	printf("open %d target %d errors %lld closed %lld reqs %lld ms %lld\n", nopen, target, errors,
	       closed_by_peer, reqs, (long long)(cmd_pending || cmd_started ? now_ms() - cmd_started : 0));
	fflush(stdout);
}

static void set_events(struct conn *c, uint32_t ev)
{
	if (c->ev == ev)
		return;
	struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)(c - conns)};
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e) < 0) {
		perror("epoll_ctl mod");
		exit(2);
	}
	c->ev = ev;
}

/* Drop a connection. failed: count it as an error (not yet established) or as
 * closed by the server (established). */
static void conn_drop(struct conn *c, int failed, int rst)
{
	if (c->st == C_FREE)
		return;
	if (rst) {
		struct linger l = {1, 0};
		setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
	}
	if (c->ssl) {
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	close(c->fd);
	if (c->established) {
		nopen--;
		if (failed)
			closed_by_peer++;
	} else {
		nopening--;
		if (failed)
			errors++;
	}
	c->st = C_FREE;
	c->established = 0;
}

static void conn_open(void)
{
	int i;
	for (i = 0; i < nslots && conns[i].st != C_FREE; i++)
		;
	if (i == nslots)
		return;
	struct conn *c = &conns[i];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		errors++;
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(c, 0, sizeof *c);
	c->fd = fd;
	c->st = C_CONNECTING;
	nopening++;
	if (i >= conns_hwm)
		conns_hwm = i + 1;
	c->ev = EPOLLOUT;
	struct epoll_event e = {.events = EPOLLOUT, .data.u32 = (uint32_t)i};
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &e) < 0) {
		perror("epoll_ctl add");
		exit(2);
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS)
		conn_drop(c, 1, 0);
}

static void start_request(struct conn *c)
{
	c->st = C_SENDING;
	c->sent = 0;
	c->got = 0;
	c->need = 0;
}

/* Write/read through TLS or the plain socket. Returns bytes, 0 on EOF, -1 on
 * "try again" (events updated), -2 on error. */
static ssize_t io(struct conn *c, int wr, void *p, size_t n)
{
	if (!c->ssl) {
		ssize_t r = wr ? send(c->fd, p, n, MSG_NOSIGNAL) : recv(c->fd, p, n, 0);
		if (r < 0)
			return (errno == EAGAIN || errno == EINTR) ? -1 : -2;
		return r;
	}
	int r = wr ? SSL_write(c->ssl, p, (int)n) : SSL_read(c->ssl, p, (int)n);
	if (r > 0)
		return r;
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		set_events(c, EPOLLIN);
		return -1;
	case SSL_ERROR_WANT_WRITE:
		set_events(c, EPOLLOUT);
		return -1;
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	default:
		ERR_clear_error();
		return -2;
	}
}

/* Parse the answer header in buf: sets c->need (header + Content-Length). */
static int parse_head(struct conn *c)
{
	char *end = memmem(c->buf, c->got, "\r\n\r\n", 4);
	if (!end)
		return c->got < sizeof c->buf ? 0 : -1;
	if (c->got < 12 || memcmp(c->buf, "HTTP/1.1 200", 12) != 0)
		return -1;
	size_t hlen = (size_t)(end - c->buf) + 4;
	long cl = -1;
	for (char *p = c->buf; p < end; p++) {
		if ((p == c->buf || p[-1] == '\n') && strncasecmp(p, "content-length:", 15) == 0) {
			cl = strtol(p + 15, NULL, 10);
			break;
		}
	}
	if (cl < 0)
		return -1;
	c->need = hlen + (size_t)cl;
	return 0;
}

static void step(struct conn *c, uint32_t revents)
{
	for (;;) {
		switch (c->st) {
		case C_FREE:
			return;
		case C_CONNECTING: {
			int err = 0;
			socklen_t len = sizeof err;
			if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
				conn_drop(c, 1, 0);
				return;
			}
			if (mode_tls) {
				c->ssl = SSL_new(ctx);
				SSL_set_fd(c->ssl, c->fd);
				SSL_set_tlsext_host_name(c->ssl, "localhost");
				SSL_set_connect_state(c->ssl);
				c->st = C_HANDSHAKE;
			} else {
				start_request(c);
			}
			break;
		}
		case C_HANDSHAKE: {
			int r = SSL_do_handshake(c->ssl);
			if (r == 1) {
				start_request(c);
				break;
			}
			int e = SSL_get_error(c->ssl, r);
			if (e == SSL_ERROR_WANT_READ) {
				set_events(c, EPOLLIN);
				return;
			}
			if (e == SSL_ERROR_WANT_WRITE) {
				set_events(c, EPOLLOUT);
				return;
			}
			ERR_clear_error();
			conn_drop(c, 1, 0);
			return;
		}
		case C_SENDING: {
			ssize_t r = io(c, 1, (char *)REQ + c->sent, sizeof REQ - 1 - c->sent);
			if (r == -1) {
				if (!c->ssl)
					set_events(c, EPOLLOUT);
				return;
			}
			if (r <= 0) {
				conn_drop(c, 1, 0);
				return;
			}
			c->sent += (size_t)r;
			if (c->sent == sizeof REQ - 1) {
				c->st = C_READING;
				set_events(c, EPOLLIN);
			}
			break;
		}
		case C_READING: {
			/* The header goes into buf; once it is parsed, the body is read
			 * into a scratch buffer and only counted. */
			char tmp[4096];
			char *dst = c->need ? tmp : c->buf + c->got;
			size_t want = c->need ? c->need - c->got : sizeof c->buf - c->got;
			if (c->need && want > sizeof tmp)
				want = sizeof tmp;
			ssize_t r = io(c, 0, dst, want);
			if (r == -1) {
				if (!c->ssl)
					set_events(c, EPOLLIN);
				return;
			}
			if (r <= 0) {
				conn_drop(c, 1, 0);
				return;
			}
			c->got += (size_t)r;
			if (!c->need && parse_head(c) < 0) {
				conn_drop(c, 1, 0);
				return;
			}
			if (!c->need || c->got < c->need)
				break;
			reqs++;
			c->st = C_IDLE;
			if (!c->established) {
				c->established = 1;
				nopening--;
				nopen++;
				c->next_at = now_ms() + (interval_ms > 0 ? (int64_t)(rand_r(&rng) % (unsigned)interval_ms) : 0);
			} else {
				c->next_at = now_ms() + interval_ms;
			}
			set_events(c, EPOLLIN);
			return;
		}
		case C_IDLE: {
			if (!(revents & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				return;
			/* Idle: anything readable is a TLS ticket, an EOF or an error. */
			char tmp[512];
			ssize_t r = io(c, 0, tmp, sizeof tmp);
			if (r == -1) {
				set_events(c, EPOLLIN);
				return;
			}
			if (r <= 0) {
				conn_drop(c, 1, 0);
				return;
			}
			/* unexpected bytes: treat as a protocol error */
			conn_drop(c, 1, 0);
			return;
		}
		}
		revents = 0;
	}
}

static void handle_stdin(void)
{
	static char line[256];
	static size_t len;
	ssize_t r = read(0, line + len, sizeof line - 1 - len);
	if (r <= 0)
		exit(0); /* parent gone */
	len += (size_t)r;
	char *nl;
	while ((nl = memchr(line, '\n', len)) != NULL) {
		*nl = 0;
		if (line[0] == 'q') {
			for (int i = 0; i < conns_hwm; i++)
				conn_drop(&conns[i], 0, 1);
			printf("bye\n");
			fflush(stdout);
			exit(0);
		} else if (line[0] == 's') {
			status();
		} else if (line[0] >= '0' && line[0] <= '9') {
			target = atoi(line);
			if (target > nslots)
				target = nslots;
			cmd_started = now_ms();
			cmd_pending = 1;
		}
		size_t used = (size_t)(nl - line) + 1;
		memmove(line, nl + 1, len - used);
		len -= used;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: connhold PORT plain|tls|active [INTERVAL_MS]\n");
		return 2;
	}
	port = atoi(argv[1]);
	mode_tls = strcmp(argv[2], "tls") == 0;
	mode_active = strcmp(argv[2], "active") == 0;
	if (!mode_tls && !mode_active && strcmp(argv[2], "plain") != 0) {
		fprintf(stderr, "connhold: unknown mode %s\n", argv[2]);
		return 2;
	}
	if (argc > 3)
		interval_ms = atoi(argv[3]);
	if (interval_ms < 1)
		interval_ms = 1;
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	nslots = (int)(rl.rlim_cur > 100 ? rl.rlim_cur - 64 : 16);
	if (nslots > 200000)
		nslots = 200000;
	conns = calloc((size_t)nslots, sizeof *conns);
	if (!conns)
		return 2;
	if (mode_tls) {
		ctx = SSL_CTX_new(TLS_client_method());
		SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	}
	epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event e = {.events = EPOLLIN, .data.u32 = UINT32_MAX};
	fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);
	epoll_ctl(epfd, EPOLL_CTL_ADD, 0, &e);
	int max_opening = mode_tls ? 64 : 256;
	struct epoll_event evs[512];
	int64_t last_scan = 0;
	for (;;) {
		while (nopen + nopening < target && nopening < max_opening) {
			int before = nopening;
			conn_open();
			if (nopening == before && errors > (long long)target + 1000)
				break;
			if (nopening == before)
				break;
		}
		if (cmd_pending && (nopen >= target || now_ms() - cmd_started > 120000 ||
				    errors > (long long)target + 1000)) {
			cmd_pending = 0;
			status();
		}
		int n = epoll_wait(epfd, evs, 512, mode_active ? 5 : (cmd_pending ? 5 : 1000));
		for (int i = 0; i < n; i++) {
			if (evs[i].data.u32 == UINT32_MAX) {
				handle_stdin();
				continue;
			}
			step(&conns[evs[i].data.u32], evs[i].events);
		}
		if (mode_active) {
			int64_t t = now_ms();
			if (t != last_scan) {
				last_scan = t;
				for (int i = 0; i < conns_hwm; i++) {
					struct conn *c = &conns[i];
					if (c->st == C_IDLE && c->next_at <= t) {
						start_request(c);
						step(c, EPOLLOUT);
					}
				}
			}
		}
	}
}
