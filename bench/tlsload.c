/* tlsload: a TLS handshake load client cheaper than the server (issue 21).
 *
 * wrk spends 2-3x more CPU per TLS connection than the proxy it measures, so
 * on a 2-core machine the proxies never saturate and CPU per connection
 * depends on how busy each one was. This client is one thread, epoll and
 * non-blocking sockets, N concurrent connections, linked against the same
 * AWS-LC as sluice. Each connection: connect, full TLS handshake (or
 * resumption with -r), one "GET / HTTP/1.1 ... Connection: close", read
 * until the peer closes, close, start the next one. No chain verification
 * (like wrk); -x also skips checking the server's handshake signature, for
 * benchmarks only (the server does the same work either way).
 *
 * Output: wrk-compatible summary lines (bench/benchlib.parse_wrk reads
 * them), then its own: errors by kind, resumed handshakes, and the client's
 * own CPU (getrusage user+sys) per completed connection.
 *
 * -R CPS makes it open loop: connections start on a fixed schedule (CPS per
 * second), each on a free slot of the -c; a start whose time has come while
 * every slot is busy waits for one, and how late starts ran is reported. The
 * offered rate then does not bend to the server's speed, so a rising -R
 * finds the server's knee (bench/churn.py's ramp; h2load, which it replaces
 * there, saturated before the proxies on 2 cores).
 *
 * An http:// target drops TLS: the same loop over plain TCP, so a plain
 * Connection: close baseline is measured with the same client as the TLS
 * cases.
 *
 * Build: make build/tlsload (not part of `make all`); bench/tls.py and
 * bench/churn.py use it for every Connection: close case (CLIENT=wrk there
 * goes back to wrk).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
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

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>

enum state { ST_IDLE, ST_CONNECTING, ST_HANDSHAKE, ST_WRITE, ST_READ };
enum err { E_CONNECT, E_HANDSHAKE, E_WRITE, E_READ, E_TIMEOUT, E_STATUS, E_NKINDS };
static const char *err_name[E_NKINDS] = {"connect", "handshake", "write", "read", "timeout", "status"};

struct conn {
	int fd;
	enum state st;
	uint32_t events;     /* current epoll interest */
	SSL *ssl;
	SSL_SESSION *sess;   /* -r: the last session this slot received */
	size_t wpos;         /* bytes of the request written */
	char head[16];       /* first bytes of the response (status line) */
	size_t hlen;
	uint64_t t_start;    /* connect() */
	uint64_t t_req;      /* handshake done, request write started */
	uint64_t t_deadline;
};

/* options */
static int nconns = 50;
static double duration = 10;      /* seconds; 0 when -n */
static long total;                /* -n: stop after this many completed connections */
static int resume;                /* -r */
static int tls_ver = TLS1_3_VERSION;
static const char *sni;
static const char *host_hdr;
static const char *path = "/";
static const char *groups = "X25519:P-256"; /* P-256 listed for TLS 1.2 servers with a P-256 certificate (RFC 4492: cert curve must be in supported_groups); 1.3 key share: X25519 only */
static const char *sigalgs = "ecdsa_secp256r1_sha256,rsa_pss_rsae_sha256,rsa_pkcs1_sha256";
static int timeout_ms = 5000;
static int quiet_shutdown = 1;    /* -C: send close_notify before closing */
static int skip_verify;           /* -x: accept the server's handshake signature unchecked */
static int plain;                 /* http:// target: no TLS */
static double rate;               /* -R: connections started per second (open loop); 0: closed loop */

/* Linked with -Wl,--wrap=EVP_DigestVerify: libssl's ssl_public_key_verify
 * (the check of the server's CertificateVerify / ServerKeyExchange
 * signature) calls EVP_DigestVerify across object files, so the call comes
 * here. With -x it is skipped: benchmark-only, the server's work is
 * unchanged, the client saves the ECDSA verify (about a third of its CPU). */
int __real_EVP_DigestVerify(EVP_MD_CTX *c, const uint8_t *sig, size_t sig_len, const uint8_t *data, size_t len);
int __wrap_EVP_DigestVerify(EVP_MD_CTX *c, const uint8_t *sig, size_t sig_len, const uint8_t *data, size_t len);
int __wrap_EVP_DigestVerify(EVP_MD_CTX *c, const uint8_t *sig, size_t sig_len, const uint8_t *data, size_t len)
{
	if (skip_verify)
		return 1;
	return __real_EVP_DigestVerify(c, sig, sig_len, data, len);
}

static struct sockaddr_storage addr;
static socklen_t addrlen;
static SSL_CTX *ctx;
static int ep;
static char req[512];
static size_t reqlen;

/* results */
static long completed, started, resumed, non2xx, active;
static long errs[E_NKINDS];
static uint32_t *lat_req, *lat_conn, *lat_hs; /* µs per completed connection */
static uint64_t first_end, last_end;          /* when the first and the last response ended */
static size_t nlat, caplat;
static int stopping;
/* -R */
static struct conn **freelist;    /* idle slots */
static int nfree;
static long scheduled, late;      /* starts whose time came; of them, started over 1 ms late */
static uint64_t max_late;         /* µs */

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void die(const char *msg)
{
	fprintf(stderr, "tlsload: %s\n", msg);
	ERR_print_errors_fp(stderr);
	exit(2);
}

static void set_events(struct conn *c, uint32_t ev)
{
	if (c->events == ev)
		return;
	struct epoll_event e = {.events = ev, .data.ptr = c};
	if (epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &e) < 0)
		die("epoll_ctl MOD");
	c->events = ev;
}

static void conn_close(struct conn *c)
{
	if (c->ssl) {
		if (!quiet_shutdown && c->st == ST_READ)
			SSL_shutdown(c->ssl);
		SSL_free(c->ssl);
		c->ssl = NULL;
	}
	if (c->fd >= 0) {
		close(c->fd); /* also removes it from the epoll set */
		c->fd = -1;
		active--;
	}
	c->st = ST_IDLE;
}

static void conn_start(struct conn *c);

/* A slot whose connection ended: closed loop, its next connection now; open
 * loop, back to the free slots for the schedule. */
static void slot_next(struct conn *c)
{
	if (rate)
		freelist[nfree++] = c;
	else if (!stopping)
		conn_start(c);
}

static void conn_fail(struct conn *c, enum err kind)
{
	if (!errs[kind]++) { /* the first of each kind, for diagnosis */
		unsigned long e = ERR_peek_error();
		char b[256] = "";
		if (e)
			ERR_error_string_n(e, b, sizeof(b));
		fprintf(stderr, "tlsload: first %s error: %s%s%s\n", err_name[kind], b, e ? "" : strerror(errno),
			"");
	}
	ERR_clear_error();
	conn_close(c);
	slot_next(c);
}

static void record(uint32_t **a, uint64_t v)
{
	(*a)[nlat] = v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void conn_done(struct conn *c)
{
	uint64_t t = now_us();
	int ok = c->hlen >= 12 && memcmp(c->head, "HTTP/1.", 7) == 0;
	int status = ok ? atoi(c->head + 9) : 0;
	if (!ok) {
		conn_fail(c, E_STATUS);
		return;
	}
	if (status < 200 || status > 399)
		non2xx++;
	completed++;
	if (nlat == caplat) {
		caplat = caplat ? caplat * 2 : 65536;
		lat_req = realloc(lat_req, caplat * sizeof(*lat_req));
		lat_conn = realloc(lat_conn, caplat * sizeof(*lat_conn));
		lat_hs = realloc(lat_hs, caplat * sizeof(*lat_hs));
		if (!lat_req || !lat_conn || !lat_hs)
			die("out of memory");
	}
	record(&lat_req, t - c->t_req);
	record(&lat_conn, t - c->t_start);
	record(&lat_hs, c->t_req - c->t_start);
	if (!first_end)
		first_end = t;
	last_end = t;
	nlat++;
	conn_close(c);
	if (total && completed >= total)
		stopping = 1;
	slot_next(c);
}

static void conn_start(struct conn *c)
{
	if (total && started >= total)
		return;
	started++;
	c->hlen = 0;
	c->wpos = 0;
	c->t_start = now_us();
	c->t_deadline = c->t_start + (uint64_t)timeout_ms * 1000u;
	c->fd = socket(addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		errs[E_CONNECT]++;
		c->st = ST_IDLE; /* closed loop: retried by the timeout scan */
		if (rate)
			freelist[nfree++] = c;
		return;
	}
	active++;
	int one = 1;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	c->st = ST_CONNECTING;
	c->events = EPOLLOUT;
	struct epoll_event e = {.events = EPOLLOUT, .data.ptr = c};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &e) < 0)
		die("epoll_ctl ADD");
	if (connect(c->fd, (struct sockaddr *)&addr, addrlen) < 0 && errno != EINPROGRESS) {
		errs[E_CONNECT]++;
		conn_close(c); /* idle: the 100 ms scan starts it again (no recursion) */
		if (rate)
			freelist[nfree++] = c;
	}
}

/* -r: keep the newest session of this slot for its next connection. */
static int new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
	struct conn *c = SSL_get_app_data(ssl);
	if (c->sess)
		SSL_SESSION_free(c->sess);
	c->sess = sess;
	return 1; /* we own the reference */
}

/* SSL wants to read or write: set the epoll interest; 0 on a real error. */
static int want(struct conn *c, int r)
{
	switch (SSL_get_error(c->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		set_events(c, EPOLLIN);
		return 1;
	case SSL_ERROR_WANT_WRITE:
		set_events(c, EPOLLOUT);
		return 1;
	default:
		return 0;
	}
}

static void keep_head(struct conn *c, const char *buf, size_t n)
{
	if (c->hlen < sizeof(c->head)) {
		size_t k = sizeof(c->head) - c->hlen;
		if (k > n)
			k = n;
		memcpy(c->head + c->hlen, buf, k);
		c->hlen += k;
	}
}

static void conn_read_plain(struct conn *c)
{
	static char buf[16384];
	for (;;) {
		ssize_t r = read(c->fd, buf, sizeof(buf));
		if (r > 0) {
			keep_head(c, buf, (size_t)r);
			continue;
		}
		if (r == 0 || (errno == ECONNRESET && c->hlen))
			conn_done(c);
		else if (errno == EAGAIN || errno == EWOULDBLOCK)
			set_events(c, EPOLLIN);
		else if (errno != EINTR)
			conn_fail(c, E_READ);
		else
			continue;
		return;
	}
}

static void conn_read(struct conn *c)
{
	static char buf[16384];
	if (plain) {
		conn_read_plain(c);
		return;
	}
	for (;;) {
		int r = SSL_read(c->ssl, buf, sizeof(buf));
		if (r > 0) {
			keep_head(c, buf, (size_t)r);
			continue;
		}
		int e = SSL_get_error(c->ssl, r);
		if (e == SSL_ERROR_ZERO_RETURN) {
			conn_done(c); /* close_notify */
			return;
		}
		if (e == SSL_ERROR_SYSCALL && r == 0 && ERR_peek_error() == 0) {
			conn_done(c); /* TCP EOF without close_notify: accepted, as wrk does */
			return;
		}
		if (e == SSL_ERROR_SYSCALL && errno == ECONNRESET && c->hlen) {
			conn_done(c); /* reset after the response (server closed with unread data) */
			return;
		}
		if (!want(c, r))
			conn_fail(c, E_READ);
		return;
	}
}

static void conn_write(struct conn *c)
{
	int r;
	if (plain) {
		ssize_t w = write(c->fd, req + c->wpos, reqlen - c->wpos);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				set_events(c, EPOLLOUT);
			else
				conn_fail(c, E_WRITE);
			return;
		}
		r = (int)w;
	} else {
		r = SSL_write(c->ssl, req + c->wpos, (int)(reqlen - c->wpos));
	}
	if (r > 0) {
		c->wpos += (size_t)r;
		if (c->wpos == reqlen) {
			c->st = ST_READ;
			set_events(c, EPOLLIN);
			conn_read(c);
		}
		return;
	}
	if (!want(c, r))
		conn_fail(c, E_WRITE);
}

static void conn_handshake(struct conn *c)
{
	int r = SSL_do_handshake(c->ssl);
	if (r == 1) {
		if (SSL_session_reused(c->ssl))
			resumed++;
		c->st = ST_WRITE;
		c->t_req = now_us();
		conn_write(c);
		return;
	}
	if (!want(c, r))
		conn_fail(c, E_HANDSHAKE);
}

static void conn_connected(struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
		conn_fail(c, E_CONNECT);
		return;
	}
	if (plain) {
		c->st = ST_WRITE;
		c->t_req = now_us();
		conn_write(c);
		return;
	}
	c->ssl = SSL_new(ctx);
	if (!c->ssl)
		die("SSL_new");
	SSL_set_app_data(c->ssl, c);
	SSL_set_fd(c->ssl, c->fd);
	SSL_set_connect_state(c->ssl);
	if (sni)
		SSL_set_tlsext_host_name(c->ssl, sni);
	if (resume && c->sess)
		SSL_set_session(c->ssl, c->sess);
	c->st = ST_HANDSHAKE;
	conn_handshake(c);
}

/* -R: start the connections whose time has come, as far as slots are free. */
static void rate_starts(uint64_t t0, uint64_t t)
{
	long due = (long)((double)(t - t0) * rate / 1e6) + 1;
	if (total && due > total)
		due = total;
	while (scheduled < due && nfree && !stopping) {
		uint64_t when = t0 + (uint64_t)((double)scheduled * 1e6 / rate);
		uint64_t lateness = t > when ? t - when : 0;
		if (lateness > max_late)
			max_late = lateness;
		if (lateness > 1000)
			late++;
		scheduled++;
		conn_start(freelist[--nfree]);
	}
}

static void conn_event(struct conn *c)
{
	switch (c->st) {
	case ST_CONNECTING: conn_connected(c); break;
	case ST_HANDSHAKE: conn_handshake(c); break;
	case ST_WRITE: conn_write(c); break;
	case ST_READ: conn_read(c); break;
	case ST_IDLE: break;
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void fmt_us(char *out, size_t n, double us)
{
	if (us < 1000)
		snprintf(out, n, "%.2fus", us);
	else if (us < 1e6)
		snprintf(out, n, "%.2fms", us / 1e3);
	else
		snprintf(out, n, "%.2fs", us / 1e6);
}

static void print_dist(const char *title, uint32_t *a, size_t n)
{
	if (!n)
		return;
	qsort(a, n, sizeof(*a), cmp_u32);
	double sum = 0;
	for (size_t i = 0; i < n; i++)
		sum += a[i];
	char m[32];
	fmt_us(m, sizeof(m), sum / n);
	printf("  %s (mean %s)\n", title, m);
	static const int q[] = {50, 75, 90, 99};
	for (size_t i = 0; i < sizeof(q) / sizeof(q[0]); i++) {
		size_t k = (size_t)((double)q[i] / 100 * (double)(n - 1));
		fmt_us(m, sizeof(m), a[k]);
		printf("  %7d%% %9s\n", q[i], m);
	}
	fmt_us(m, sizeof(m), a[n - 1]);
	printf("  %8s %9s\n", "max", m);
}

static int parse_sigalg(const char *s, uint16_t *out)
{
	static const struct { const char *name; uint16_t v; } t[] = {
		{"ecdsa_secp256r1_sha256", SSL_SIGN_ECDSA_SECP256R1_SHA256},
		{"ecdsa_secp384r1_sha384", SSL_SIGN_ECDSA_SECP384R1_SHA384},
		{"ecdsa_secp521r1_sha512", SSL_SIGN_ECDSA_SECP521R1_SHA512},
		{"rsa_pss_rsae_sha256", SSL_SIGN_RSA_PSS_RSAE_SHA256},
		{"rsa_pss_rsae_sha384", SSL_SIGN_RSA_PSS_RSAE_SHA384},
		{"rsa_pss_rsae_sha512", SSL_SIGN_RSA_PSS_RSAE_SHA512},
		{"rsa_pkcs1_sha256", SSL_SIGN_RSA_PKCS1_SHA256},
		{"rsa_pkcs1_sha384", SSL_SIGN_RSA_PKCS1_SHA384},
		{"rsa_pkcs1_sha512", SSL_SIGN_RSA_PKCS1_SHA512},
		{"ed25519", SSL_SIGN_ED25519},
	};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (strcmp(s, t[i].name) == 0) {
			*out = t[i].v;
			return 1;
		}
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: tlsload [options] host:port | https://host:port/path | http://host:port/path\n"
		"  -c N       concurrent connections (50)\n"
		"  -d SEC     duration in seconds (10)\n"
		"  -n COUNT   stop after COUNT completed connections instead\n"
		"  -R CPS     open loop: start CPS connections per second on a fixed schedule\n"
		"             (at most -c at once; a start with no free slot waits for one)\n"
		"  -r         resume: offer each slot's previous session (ticket/ID)\n"
		"  -V 1.2|1.3 TLS version (1.3)\n"
		"  -s NAME    SNI name (none)\n"
		"  -H NAME    Host header (default: SNI name, else the target host)\n"
		"  -g LIST    groups, colon-separated (X25519:P-256; the first gets the 1.3 key share)\n"
		"  -S LIST    signature algorithms offered, comma-separated\n"
		"             (ecdsa_secp256r1_sha256,rsa_pss_rsae_sha256,rsa_pkcs1_sha256)\n"
		"  -t MS      per-connection timeout (5000)\n"
		"  -C         send close_notify before closing (default: just close, as wrk)\n"
		"  -x         do not verify the server's handshake signature (INSECURE, benchmark only)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int o;
	while ((o = getopt(argc, argv, "c:d:n:R:rV:s:H:g:S:t:Cxh")) != -1) {
		switch (o) {
		case 'c': nconns = atoi(optarg); break;
		case 'd': duration = atof(optarg); break;
		case 'n': total = atol(optarg); duration = 0; break;
		case 'r': resume = 1; break;
		case 'R': rate = atof(optarg); if (rate <= 0) usage(); break;
		case 'V':
			if (strcmp(optarg, "1.2") == 0) tls_ver = TLS1_2_VERSION;
			else if (strcmp(optarg, "1.3") == 0) tls_ver = TLS1_3_VERSION;
			else usage();
			break;
		case 's': sni = optarg; break;
		case 'H': host_hdr = optarg; break;
		case 'g': groups = optarg; break;
		case 'S': sigalgs = optarg; break;
		case 't': timeout_ms = atoi(optarg); break;
		case 'C': quiet_shutdown = 0; break;
		case 'x': skip_verify = 1; break;
		default: usage();
		}
	}
	if (optind != argc - 1 || nconns < 1 || (duration <= 0 && total <= 0))
		usage();

	/* target: [https://]host:port[/path] ([v6]:port works too) */
	char target[256];
	const char *tg = argv[optind];
	if (strncmp(tg, "https://", 8) == 0) {
		tg += 8;
	} else if (strncmp(tg, "http://", 7) == 0) {
		tg += 7;
		plain = 1;
	}
	snprintf(target, sizeof(target), "%s", tg);
	char *slash = strchr(target, '/');
	if (slash) {
		path = strdup(slash);
		*slash = 0;
	}
	char *host = target, *colon = strrchr(target, ':');
	if (!colon)
		usage();
	*colon = 0;
	const char *port = colon + 1;
	if (host[0] == '[') {
		host++;
		char *rb = strchr(host, ']');
		if (rb)
			*rb = 0;
	}
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	int gr = getaddrinfo(host, port, &hints, &ai);
	if (gr)
		die(gai_strerror(gr));
	memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
	addrlen = ai->ai_addrlen;
	freeaddrinfo(ai);
	if (!host_hdr)
		host_hdr = sni ? sni : host;
	reqlen = (size_t)snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n",
				  path, host_hdr);

	/* TLS context */
	ctx = SSL_CTX_new(TLS_method());
	if (!ctx)
		die("SSL_CTX_new");
	SSL_CTX_set_min_proto_version(ctx, (uint16_t)tls_ver);
	SSL_CTX_set_max_proto_version(ctx, (uint16_t)tls_ver);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL); /* like wrk: no chain check; the
							   handshake signature is still verified */
	if (!SSL_CTX_set1_groups_list(ctx, groups))
		die("bad -g group list");
	uint16_t prefs[16];
	size_t np = 0;
	char *sa = strdup(sigalgs), *save = NULL;
	for (char *tok = strtok_r(sa, ",:", &save); tok; tok = strtok_r(NULL, ",:", &save)) {
		if (np == 16 || !parse_sigalg(tok, &prefs[np++])) {
			fprintf(stderr, "tlsload: unknown signature algorithm %s\n", tok);
			exit(2);
		}
	}
	free(sa);
	if (!np || !SSL_CTX_set_verify_algorithm_prefs(ctx, prefs, np))
		die("bad -S list");
	if (resume) {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
		SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
	} else {
		SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	}

	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)nconns + 64) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	struct conn *conns = calloc((size_t)nconns, sizeof(*conns));
	struct epoll_event *evs = calloc((size_t)nconns, sizeof(*evs));
	freelist = calloc((size_t)nconns, sizeof(*freelist));
	if (!conns || !evs || !freelist)
		die("out of memory");

	printf("Running %s test @ http%s://%s:%s%s\n", duration > 0 ? "timed" : "counted", plain ? "" : "s", host,
	       port, path);
	if (plain)
		printf("  tlsload, 1 thread, %d connections, plain HTTP\n", nconns);
	else
		printf("  tlsload, 1 thread, %d connections, TLS %s%s, groups %s%s\n", nconns,
		       tls_ver == TLS1_3_VERSION ? "1.3" : "1.2", resume ? " (resumption on)" : " (full handshakes)",
		       groups, skip_verify ? ", server signature NOT verified (-x)" : "");
	fflush(stdout);

	double c0 = cpu_s();
	uint64_t t0 = now_us(), end = duration > 0 ? t0 + (uint64_t)(duration * 1e6) : UINT64_MAX;
	uint64_t next_scan = t0 + 100000;
	for (int i = 0; i < nconns; i++) {
		conns[i].fd = -1;
		if (rate)
			freelist[nfree++] = &conns[nconns - 1 - i];
		else
			conn_start(&conns[i]);
	}
	for (;;) {
		uint64_t t = now_us();
		if (t >= end || (total && started >= total && active == 0))
			stopping = 1;
		if (stopping)
			break;
		uint64_t next = next_scan;
		if (rate) {
			rate_starts(t0, t);
			uint64_t due = t0 + (uint64_t)((double)scheduled * 1e6 / rate);
			if (nfree && due < next)
				next = due;  /* else a slot freed by an event comes first */
		}
		uint64_t wait_us = next > t ? next - t : 0;
		struct timespec ts = {(time_t)(wait_us / 1000000u), (long)(wait_us % 1000000u) * 1000};
		int n = epoll_pwait2(ep, evs, nconns, &ts, NULL);
		if (n < 0 && errno != EINTR)
			die("epoll_pwait2");
		for (int i = 0; i < n && !stopping; i++)
			conn_event(evs[i].data.ptr);
		t = now_us();
		if (t >= next_scan) {
			next_scan = t + 100000;
			for (int i = 0; i < nconns && !stopping; i++) {
				struct conn *c = &conns[i];
				if (c->st != ST_IDLE && t > c->t_deadline)
					conn_fail(c, E_TIMEOUT);
				else if (!rate && c->st == ST_IDLE && !(total && started >= total))
					conn_start(c); /* socket() had failed */
			}
		}
	}
	uint64_t t1 = now_us();
	double c1 = cpu_s();
	double secs = (t1 - t0) / 1e6, cpu = c1 - c0;
	for (int i = 0; i < nconns; i++) {
		conn_close(&conns[i]);
		if (conns[i].sess)
			SSL_SESSION_free(conns[i].sess);
	}

	/* wrk-compatible part (bench/benchlib.parse_wrk) */
	print_dist("Latency Distribution", lat_req, nlat);
	printf("  %ld requests in %.2fs\n", completed, secs);
	long sockerr = errs[E_CONNECT] + errs[E_HANDSHAKE] + errs[E_WRITE] + errs[E_READ] + errs[E_TIMEOUT];
	if (sockerr)
		printf("  Socket errors: connect %ld, read %ld, write %ld, timeout %ld\n",
		       errs[E_CONNECT] + errs[E_HANDSHAKE], errs[E_READ], errs[E_WRITE], errs[E_TIMEOUT]);
	if (non2xx)
		printf("  Non-2xx or 3xx responses: %ld\n", non2xx);
	printf("Requests/sec: %9.2f\n", completed / secs);
	/* tlsload's own */
	print_dist("Connection time, connect() to EOF", lat_conn, nlat);
	print_dist(plain ? "Handshake time, connect() to connected" : "Handshake time, connect() to handshake done",
		   lat_hs, nlat);
	printf("tlsload: connections %ld, resumed %ld, errors", completed, resumed);
	for (int k = 0; k < E_NKINDS; k++)
		printf(" %s %ld", err_name[k], errs[k]);
	printf("\n");
	printf("tlsload: conn/s %.1f, client cpu %.3f s (%.1f%% of a core), %.1f us/conn\n", completed / secs, cpu,
	       cpu / secs * 100, completed ? cpu * 1e6 / completed : 0.0);
	if (rate)
		printf("tlsload: offered %.1f/s, started %ld, late %ld (started over 1 ms after their time), max lateness %.2f ms\n",
		       rate, scheduled, late, max_late / 1e3);
	if (completed > 1 && last_end > first_end)
		printf("tlsload: completions %.1f/s (first to last response end)\n",
		       (double)(completed - 1) * 1e6 / (double)(last_end - first_end));
	SSL_CTX_free(ctx);
	return completed ? 0 : 1;
}
