/*
 * srcload — keepalive HTTP/1.1 load from many distinct source addresses.
 *
 * wrk cannot choose its source addresses, so a bench that needs every client
 * to look like a different machine (bench/identity.py: PROXY protocol and
 * X-Forwarded-For identity) uses this instead. N keepalive connections, each
 * bound (before connect) to its own loopback address
 *
 *     connection i  ->  127.0.(1 + i / 250).(2 + i % 250)
 *
 * (127.0.1.2, 127.0.1.3, ... 127.0.1.251, 127.0.2.2, ...; Linux routes all of
 * 127.0.0.0/8 to lo, so nothing needs configuring). Each connection sends
 * GET requests back to back, one in flight, and reconnects from the same
 * source address when the server closes it or something fails.
 *
 * Phases: warm-up (connect everything, requests not counted), a barrier
 * (no new requests until every connection is idle), the measured run of
 * --duration seconds, then a drain (requests still in flight at the end
 * are waited for, up to --drain seconds, and counted apart: they are not in
 * req/s but they did reach the server). With --sync the program prints
 * "sync measure" / "sync end" on stdout at the two barriers and waits for
 * one line on stdin before going on, so the caller can read server-side
 * counters (CPU time, nginx stub_status) at exactly the points where no
 * request is in flight.
 *
 * Output: one JSON line on stdout (last line) with completed requests,
 * req/s, latency percentiles (1 us resolution up to 1 s, 1 ms beyond),
 * errors by kind, reconnects and non-2xx responses.
 *
 * Responses must carry Content-Length (chunked ones count as parse errors:
 * the bench's backends never send them). One epoll thread; pin it with
 * taskset.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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

#define RBUF 16384
#define US_SLOTS 1000000u      /* 1 us buckets up to 1 s */
#define MS_SLOTS 600000u       /* then 1 ms buckets up to 600 s */

enum cstate { C_IDLE, C_CONNECTING, C_WRITING, C_READING, C_CLOSED };

struct conn {
	int fd;
	enum cstate st;
	uint32_t src;              /* host order */
	size_t woff;               /* request bytes written */
	char *rbuf;
	size_t rlen;
	long long want;            /* body bytes still expected, -1: head not complete */
	int status, close_after;
	uint64_t t_sent;           /* ns */
	int counted;               /* request sent in the measured phase */
	uint32_t events;           /* registered epoll events */
	uint64_t nresp;            /* responses on this connection since it opened */
};

static struct {
	uint64_t completed, completed_late, non2xx, reconnects, connects;
	uint64_t e_connect, e_read, e_write, e_timeout, e_parse, e_eof, e_bind;
	uint64_t eof_idle;         /* server closed an idle connection (not an error) */
	uint64_t resp_close;       /* responses with Connection: close */
	uint64_t bytes_in;
	uint64_t lat_sum_ns, lat_n, lat_max_ns;
} S;

static uint32_t *h_us, *h_ms;
static struct conn *C;
static unsigned n_conns;
static int epfd;
static struct sockaddr_in dst;
static char req[1024];
static size_t req_len;
static double timeout_s = 5.0;
static int no_bind;

enum phase { P_WARMUP, P_MEASURE, P_DRAIN, P_DONE };
static enum phase phase;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *msg)
{
	fprintf(stderr, "srcload: %s\n", msg);
	exit(2);
}

static void record_latency(uint64_t ns)
{
	uint64_t us = ns / 1000;
	if (us < US_SLOTS)
		h_us[us]++;
	else if (us / 1000 < MS_SLOTS)
		h_ms[us / 1000]++;
	else
		h_ms[MS_SLOTS - 1]++;
	S.lat_sum_ns += ns;
	S.lat_n++;
	if (ns > S.lat_max_ns)
		S.lat_max_ns = ns;
}

/* The value (in ms) below which FRAC of the recorded latencies fall. */
static double percentile(double frac)
{
	if (S.lat_n == 0)
		return -1;
	uint64_t want = (uint64_t)((double)S.lat_n * frac + 0.5);
	if (want < 1)
		want = 1;
	uint64_t seen = 0;
	for (uint32_t i = 0; i < US_SLOTS; i++) {
		seen += h_us[i];
		if (seen >= want)
			return (i + 0.5) / 1000.0;
	}
	for (uint32_t i = 0; i < MS_SLOTS; i++) {
		seen += h_ms[i];
		if (seen >= want)
			return i + 0.5;
	}
	return (double)S.lat_max_ns / 1e6;
}

static void ep_set(struct conn *c, uint32_t ev)
{
	struct epoll_event e = { .events = ev, .data.ptr = c };
	if (c->events == ev)
		return;
	if (epoll_ctl(epfd, c->events ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, c->fd, &e) < 0)
		die("epoll_ctl failed");
	c->events = ev;
}

static void conn_close(struct conn *c)
{
	if (c->fd >= 0) {
		close(c->fd);  /* also removes it from the epoll set */
		c->fd = -1;
	}
	c->events = 0;
	c->st = C_CLOSED;
	c->rlen = 0;
	c->want = -1;
}

static void send_request(struct conn *c);

static void conn_open(struct conn *c)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		S.e_connect++;
		c->st = C_CLOSED;
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (!no_bind) {
		/* The port is picked at connect() time, per destination, so many
		 * connections can share one source address without running out. */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = 0,
					   .sin_addr.s_addr = htonl(c->src) };
		if (bind(fd, (struct sockaddr *)&src, sizeof(src)) < 0) {
			S.e_bind++;
			close(fd);
			c->st = C_CLOSED;
			return;
		}
	}
	c->fd = fd;
	c->events = 0;
	c->nresp = 0;
	c->rlen = 0;
	c->want = -1;
	S.connects++;
	if (connect(fd, (struct sockaddr *)&dst, sizeof(dst)) < 0 && errno != EINPROGRESS) {
		S.e_connect++;
		conn_close(c);
		return;
	}
	c->st = C_CONNECTING;
	ep_set(c, EPOLLOUT);
}

/* Something went wrong or the server closed: reconnect from the same
 * source address unless the run is over. A connection that never got a
 * response (a failed connect, a server that closes at once) is retried by
 * check_timeouts() (every 100 ms), not at once, so that a refusing server
 * does not turn the loop into a busy one. */
static void conn_reset(struct conn *c)
{
	int retry_now = c->st != C_CONNECTING && c->nresp > 0;
	conn_close(c);
	if (phase == P_WARMUP || phase == P_MEASURE) {
		S.reconnects++;
		if (retry_now)
			conn_open(c);
	}
}

static void send_request(struct conn *c)
{
	c->woff = 0;
	c->rlen = 0;
	c->want = -1;
	c->status = 0;
	c->close_after = 0;
	c->t_sent = now_ns();
	c->counted = phase == P_MEASURE;
	c->st = C_WRITING;
	ssize_t n = write(c->fd, req, req_len);
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
		S.e_write++;
		conn_reset(c);
		return;
	}
	if (n > 0)
		c->woff = (size_t)n;
	if (c->woff < req_len) {
		ep_set(c, EPOLLOUT);
		return;
	}
	c->st = C_READING;
	ep_set(c, EPOLLIN);
}

/* Parse the response head in c->rbuf; returns 1 when complete (c->want
 * set), 0 when more is needed, -1 on a parse error. */
static int parse_head(struct conn *c)
{
	char *end = memmem(c->rbuf, c->rlen, "\r\n\r\n", 4);
	if (!end)
		return c->rlen >= RBUF ? -1 : 0;
	size_t head_len = (size_t)(end - c->rbuf) + 4;
	if (c->rlen < 12 || memcmp(c->rbuf, "HTTP/1.", 7) != 0)
		return -1;
	c->status = atoi(c->rbuf + 9);
	int http10 = c->rbuf[7] == '0';
	long long clen = -1;
	int keepalive10 = 0;
	char *line = memchr(c->rbuf, '\n', head_len) + 1;
	while (line < end) {
		char *eol = memchr(line, '\n', (size_t)(end + 2 - line));
		if (!eol)
			break;
		size_t ll = (size_t)(eol - line);
		if (ll >= 15 && strncasecmp(line, "content-length:", 15) == 0) {
			clen = strtoll(line + 15, NULL, 10);
		} else if (ll >= 18 && strncasecmp(line, "transfer-encoding:", 18) == 0) {
			return -1;  /* chunked: not supported (see the top of the file) */
		} else if (ll >= 11 && strncasecmp(line, "connection:", 11) == 0) {
			char *v = line + 11;
			while (*v == ' ' || *v == '\t')
				v++;
			if (strncasecmp(v, "close", 5) == 0)
				c->close_after = 1;
			else if (strncasecmp(v, "keep-alive", 10) == 0)
				keepalive10 = 1;
		}
		line = eol + 1;
	}
	if (http10 && !keepalive10)
		c->close_after = 1;
	int bodyless = (c->status >= 100 && c->status < 200) || c->status == 204 || c->status == 304;
	if (clen < 0 && !bodyless)
		return -1;
	if (bodyless)
		clen = 0;
	/* Keep only the body bytes already read. */
	memmove(c->rbuf, c->rbuf + head_len, c->rlen - head_len);
	c->rlen -= head_len;
	c->want = clen;
	return 1;
}

static void response_done(struct conn *c)
{
	uint64_t t = now_ns();
	c->nresp++;
	if (c->counted) {
		if (phase == P_MEASURE) {
			S.completed++;
			record_latency(t - c->t_sent);
		} else {
			S.completed_late++;
		}
		if (c->status < 200 || c->status > 399)
			S.non2xx++;
		if (c->close_after)
			S.resp_close++;
	}
	c->st = C_IDLE;
	if (c->close_after) {
		conn_reset(c);
		return;
	}
	if (phase == P_WARMUP || phase == P_MEASURE)
		send_request(c);
}

static void on_readable(struct conn *c)
{
	for (;;) {
		ssize_t n = read(c->fd, c->rbuf + c->rlen, RBUF - c->rlen);
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (c->st == C_READING)
				S.e_read++;
			else
				S.eof_idle++;
			conn_reset(c);
			return;
		}
		if (n == 0) {
			if (c->st == C_READING)
				S.e_eof++;   /* closed before the response was complete */
			else
				S.eof_idle++;
			conn_reset(c);
			return;
		}
		S.bytes_in += (uint64_t)n;
		if (c->st != C_READING) {  /* bytes nobody asked for */
			S.e_parse++;
			conn_reset(c);
			return;
		}
		c->rlen += (size_t)n;
		if (c->want < 0) {
			int r = parse_head(c);
			if (r < 0) {
				S.e_parse++;
				conn_reset(c);
				return;
			}
			if (r == 0)
				continue;
		}
		if ((long long)c->rlen > c->want) {  /* more than the response */
			S.e_parse++;
			conn_reset(c);
			return;
		}
		if ((long long)c->rlen == c->want) {
			response_done(c);
			return;
		}
		/* Body bytes are not kept: only counted. */
		c->want -= (long long)c->rlen;
		c->rlen = 0;
	}
}

static void on_event(struct conn *c, uint32_t ev)
{
	if (c->st == C_CONNECTING) {
		int err = 0;
		socklen_t len = sizeof(err);
		getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
		if (err || (ev & (EPOLLERR | EPOLLHUP))) {
			S.e_connect++;
			conn_reset(c);
			return;
		}
		c->st = C_IDLE;
		ep_set(c, EPOLLIN);  /* see the server closing an idle connection */
		if (phase == P_WARMUP || phase == P_MEASURE)
			send_request(c);
		return;
	}
	if (c->st == C_WRITING && (ev & EPOLLOUT)) {
		ssize_t n = write(c->fd, req + c->woff, req_len - c->woff);
		if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
			S.e_write++;
			conn_reset(c);
			return;
		}
		if (n > 0)
			c->woff += (size_t)n;
		if (c->woff == req_len) {
			c->st = C_READING;
			ep_set(c, EPOLLIN);
		}
		return;
	}
	if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP))
		on_readable(c);
}

/* Requests that waited longer than --timeout: abandoned, reconnected. */
static void check_timeouts(uint64_t t)
{
	uint64_t lim = (uint64_t)(timeout_s * 1e9);
	for (unsigned i = 0; i < n_conns; i++) {
		struct conn *c = &C[i];
		if ((c->st == C_READING || c->st == C_WRITING) && t - c->t_sent > lim) {
			S.e_timeout++;
			conn_reset(c);
		} else if (c->st == C_CLOSED && (phase == P_WARMUP || phase == P_MEASURE)) {
			conn_open(c);  /* a reconnect that failed outright: try again */
		}
	}
}

static unsigned busy_count(void)
{
	unsigned n = 0;
	for (unsigned i = 0; i < n_conns; i++)
		if (C[i].st == C_READING || C[i].st == C_WRITING || C[i].st == C_CONNECTING)
			n++;
	return n;
}

/* Run the loop until DEADLINE (ns), or, with until_idle, until no request
 * is in flight. */
static void run_loop(uint64_t deadline, int until_idle)
{
	struct epoll_event evs[256];
	uint64_t next_check = now_ns() + 100000000u;
	for (;;) {
		uint64_t t = now_ns();
		if (t >= deadline)
			return;
		if (until_idle && busy_count() == 0)
			return;
		int ms = (int)((deadline - t) / 1000000u) + 1;
		if (ms > 50)
			ms = 50;
		int n = epoll_wait(epfd, evs, 256, ms);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait failed");
		}
		for (int i = 0; i < n; i++)
			on_event(evs[i].data.ptr, evs[i].events);
		t = now_ns();
		if (t >= next_check) {
			check_timeouts(t);
			next_check = t + 100000000u;
		}
	}
}

static void sync_point(const char *name, int sync)
{
	if (!sync)
		return;
	printf("sync %s\n", name);
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof(line), stdin))
		die("stdin closed at a sync point");
}

static void start_requests(void)
{
	for (unsigned i = 0; i < n_conns; i++) {
		if (C[i].st == C_IDLE)
			send_request(&C[i]);
		else if (C[i].st == C_CLOSED)
			conn_open(&C[i]);
	}
}

static void usage(void)
{
	fprintf(stderr,
		"usage: srcload -a HOST:PORT [-c CONNS] [-d SECONDS] [-w SECONDS] [-p PATH]\n"
		"               [-H HOSTHEADER] [--drain SECONDS] [--timeout SECONDS] [--sync]\n"
		"               [--no-bind] [--first-src A.B.C.D]\n"
		"  -a  server address (IPv4)            -c  connections (1000)\n"
		"  -d  measured seconds (10)            -w  warm-up seconds, not measured (2)\n"
		"  -p  request path (/)                 -H  Host header (the server address)\n"
		"  --drain    max seconds to wait for in-flight requests after the run (3)\n"
		"  --timeout  seconds before a request is abandoned and its connection redone (5)\n"
		"  --sync     print \"sync measure\"/\"sync end\" at the barriers and wait for a stdin line\n"
		"  --no-bind  do not bind source addresses (all connections from the kernel's choice)\n"
		"  --first-src  address block start: connection i uses A.B.(C+i/250).(D+i%%250) (127.0.1.2)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *addr = NULL, *path = "/", *host = NULL, *first_src = "127.0.1.2";
	double duration = 10, warmup = 2, drain = 3;
	int sync = 0;
	n_conns = 1000;
	static const struct option lopts[] = {
		{ "drain", required_argument, NULL, 'D' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "sync", no_argument, NULL, 'S' },
		{ "no-bind", no_argument, NULL, 'N' },
		{ "first-src", required_argument, NULL, 'F' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int o;
	while ((o = getopt_long(argc, argv, "a:c:d:w:p:H:h", lopts, NULL)) != -1) {
		switch (o) {
		case 'a': addr = optarg; break;
		case 'c': n_conns = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'd': duration = strtod(optarg, NULL); break;
		case 'w': warmup = strtod(optarg, NULL); break;
		case 'p': path = optarg; break;
		case 'H': host = optarg; break;
		case 'D': drain = strtod(optarg, NULL); break;
		case 'T': timeout_s = strtod(optarg, NULL); break;
		case 'S': sync = 1; break;
		case 'N': no_bind = 1; break;
		case 'F': first_src = optarg; break;
		default: usage();
		}
	}
	if (!addr || n_conns == 0 || n_conns > 250u * 250u || duration <= 0 || warmup < 0)
		usage();
	char hostpart[64];
	const char *colon = strrchr(addr, ':');
	if (!colon || (size_t)(colon - addr) >= sizeof(hostpart))
		usage();
	memcpy(hostpart, addr, (size_t)(colon - addr));
	hostpart[colon - addr] = 0;
	dst.sin_family = AF_INET;
	dst.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, hostpart, &dst.sin_addr) != 1)
		die("bad -a address (IPv4 HOST:PORT)");
	struct in_addr fs;
	if (inet_pton(AF_INET, first_src, &fs) != 1)
		die("bad --first-src address");
	uint32_t base = ntohl(fs.s_addr);
	if ((base & 0xff) + 249 > 255 || ((base >> 8) & 0xff) + (n_conns - 1) / 250 > 255)
		die("--first-src leaves no room for 250 addresses per /24 and the connections asked for");
	req_len = (size_t)snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: srcload\r\n\r\n",
				   path, host ? host : addr);
	if (req_len >= sizeof(req))
		die("path/host too long");

	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < n_conns + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
		if (rl.rlim_cur < n_conns + 64)
			die("open-files limit (ulimit -n) below connections + 64");
	}
	signal(SIGPIPE, SIG_IGN);
	h_us = calloc(US_SLOTS, sizeof(*h_us));
	h_ms = calloc(MS_SLOTS, sizeof(*h_ms));
	C = calloc(n_conns, sizeof(*C));
	if (!h_us || !h_ms || !C)
		die("out of memory");
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		die("epoll_create1 failed");
	for (unsigned i = 0; i < n_conns; i++) {
		C[i].fd = -1;
		C[i].rbuf = malloc(RBUF);
		if (!C[i].rbuf)
			die("out of memory");
		C[i].src = base + ((i / 250) << 8) + (i % 250);
		C[i].want = -1;
	}

	/* Warm-up: connect everything and load it, nothing counted. */
	phase = P_WARMUP;
	for (unsigned i = 0; i < n_conns; i++)
		conn_open(&C[i]);
	run_loop(now_ns() + (uint64_t)(warmup * 1e9), 0);

	/* Barrier: finish what is in flight, then the caller reads its counters. */
	phase = P_DRAIN;
	run_loop(now_ns() + (uint64_t)(drain * 1e9), 1);
	unsigned stuck_start = busy_count();
	memset(&S, 0, sizeof(S));
	sync_point("measure", sync);

	phase = P_MEASURE;
	uint64_t t0 = now_ns();
	start_requests();
	run_loop(t0 + (uint64_t)(duration * 1e9), 0);
	uint64_t t1 = now_ns();

	phase = P_DRAIN;
	run_loop(t1 + (uint64_t)(drain * 1e9), 1);
	unsigned stuck_end = busy_count();
	sync_point("end", sync);
	phase = P_DONE;
	unsigned open_at_end = 0;
	for (unsigned i = 0; i < n_conns; i++)
		if (C[i].fd >= 0)
			open_at_end++;

	double secs = (double)(t1 - t0) / 1e9;
	struct in_addr a0 = { htonl(C[0].src) }, a1 = { htonl(C[n_conns - 1].src) };
	char s0[INET_ADDRSTRLEN], s1[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a0, s0, sizeof(s0));
	inet_ntop(AF_INET, &a1, s1, sizeof(s1));
	uint64_t errors = S.e_connect + S.e_read + S.e_write + S.e_timeout + S.e_parse + S.e_eof + S.e_bind;
	printf("{\"connections\": %u, \"src_first\": \"%s\", \"src_last\": \"%s\", \"bound\": %s, "
	       "\"seconds\": %.3f, \"requests\": %llu, \"rps\": %.1f, \"requests_late\": %llu, "
	       "\"p50_ms\": %.3f, \"p90_ms\": %.3f, \"p99_ms\": %.3f, \"p999_ms\": %.3f, "
	       "\"mean_ms\": %.3f, \"max_ms\": %.3f, \"non2xx\": %llu, \"errors\": %llu, "
	       "\"e_connect\": %llu, \"e_bind\": %llu, \"e_read\": %llu, \"e_write\": %llu, "
	       "\"e_timeout\": %llu, \"e_parse\": %llu, \"e_eof\": %llu, \"eof_idle\": %llu, "
	       "\"resp_close\": %llu, \"reconnects\": %llu, \"connects\": %llu, \"bytes_in\": %llu, "
	       "\"in_flight_at_start\": %u, \"in_flight_at_end\": %u, \"open_at_end\": %u}\n",
	       n_conns, no_bind ? "-" : s0, no_bind ? "-" : s1, no_bind ? "false" : "true",
	       secs, (unsigned long long)S.completed, (double)S.completed / secs,
	       (unsigned long long)S.completed_late,
	       percentile(0.50), percentile(0.90), percentile(0.99), percentile(0.999),
	       S.lat_n ? (double)S.lat_sum_ns / (double)S.lat_n / 1e6 : -1.0, (double)S.lat_max_ns / 1e6,
	       (unsigned long long)S.non2xx, (unsigned long long)errors,
	       (unsigned long long)S.e_connect, (unsigned long long)S.e_bind, (unsigned long long)S.e_read,
	       (unsigned long long)S.e_write, (unsigned long long)S.e_timeout, (unsigned long long)S.e_parse,
	       (unsigned long long)S.e_eof, (unsigned long long)S.eof_idle, (unsigned long long)S.resp_close,
	       (unsigned long long)S.reconnects, (unsigned long long)S.connects,
	       (unsigned long long)S.bytes_in, stuck_start, stuck_end, open_at_end);
	fflush(stdout);
	for (unsigned i = 0; i < n_conns; i++)
		conn_close(&C[i]);
	return 0;
}
