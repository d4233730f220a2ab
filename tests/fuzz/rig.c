/* The in-process proxy rig of the data-path fuzz targets (rig.h). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <poll.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <uv.h>
#include "rig.h"
#include "cfg.h"
#include "log.h"
#include "master.h"
#include "proxy_proto.h"
#include "shm.h"
#include "stats.h"
#include "tls.h"
#include "worker.h"

#define RIG_PEERS 64            /* rig-side sockets open at once */
#define RIG_CLIENT_MAX (4u << 20)
#define RIG_DEADLINE_US 8000000 /* one exchange; the config's timeouts are far shorter */

static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
static const char answer_head[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";

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
	uint64_t deadline = now_us() + RIG_DEADLINE_US;
	while (poll(&pfd, 1, 100) <= 0)
		if (now_us() > deadline)
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
		pe->off += (size_t)r;
		if (res.nreqs >= RIG_MAX_REQS)
			RIG_FAIL("more than %d requests in one exchange", RIG_MAX_REQS);
		res.reqs[res.nreqs++] = rq;
		if (cur_mode == RIG_ANSWER_EACH) {
			if (strcmp(rq.method, "HEAD") == 0)
				write_all(pe->fd, answer_head, sizeof(answer_head) - 1);
			else
				write_all(pe->fd, answer, sizeof(answer) - 1);
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
	if (pe->kind == PEER_BACKEND)
		backend_input(pe);
}

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
		    top_extra ? top_extra : "", lport[0], li.data, lport[1], bport[0], bport[1]);
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
	for (int i = 0; i < 2; i++)
		blisten[i] = peer_new(bfd[i], PEER_BLISTEN);
}

/* ---------------------------------------------------------------------- */
/* One exchange                                                           */

static void run_until(int (*done)(void), const char *what)
{
	uint64_t deadline = now_us() + RIG_DEADLINE_US;
	while (!done()) {
		uv_run(&W->loop, UV_RUN_ONCE);
		if (now_us() > deadline)
			RIG_FAIL("stuck: %s after %d s (clients %u, backend connections %u, client eof %d)", what,
				 RIG_DEADLINE_US / 1000000, W->nclients, W->nbconns, client ? client->eof : -1);
	}
}

static int client_done(void)
{
	return client->eof && W->nclients == 0;
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

/* The client's bytes: responses in order. A final response to a request
 * the backend saw as HEAD has no body; for sluice's own answers the
 * method is not known here, so either reading must work. */
static void check_client(void)
{
	size_t pos = 0;
	unsigned k = 0;
	const char *s = res.client.data;
	while (pos < res.client.len) {
		int status = 0, chunked = 0;
		int head = k < res.nreqs && k < RIG_MAX_REQS && strcmp(res.reqs[k].method, "HEAD") == 0;
		const char *why = NULL;
		long r = rig_parse_response(s + pos, res.client.len - pos, head, 1, &status, &chunked, &why);
		if (r <= 0 && k >= res.nreqs) {
			const char *why2 = NULL;
			long r2 = rig_parse_response(s + pos, res.client.len - pos, !head, 1, &status, &chunked, &why2);
			if (r2 > 0)
				r = r2;
		}
		if (r < 0)
			RIG_FAIL("the client received a malformed response (%s) at offset %zu of:\n%.*s", why, pos,
				 (int)(res.client.len > 4000 ? 4000 : res.client.len), s);
		if (r == 0) {
			/* A body cut short by the backend can only be signalled by
			 * closing: fine, but only for the last response, and only
			 * once its head is whole. */
			if (memmem(s + pos, res.client.len - pos, "\r\n\r\n", 4) == NULL)
				RIG_FAIL("the client received a truncated response head at offset %zu of:\n%.*s", pos,
					 (int)(res.client.len > 4000 ? 4000 : res.client.len), s);
			res.truncated = 1;
			r = (long)(res.client.len - pos);
			status = status ? status : 200;
		}
		pos += (size_t)r;
		res.resp_chunked |= chunked;
		if (status == 101) {
			res.tunnel = 1;
			return;  /* a tunnel: what follows is not HTTP */
		}
		if (status >= 200) {
			if (res.nresp < RIG_MAX_REQS)
				res.resp_status[res.nresp] = status;
			res.nresp++;
			k++;
		}
	}
}

const struct rig_result *rig_exchange(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				      const uint8_t *resp, size_t resp_len)
{
	res.client.len = res.bodies.len = 0;
	res.client_eof = 0;
	res.nreqs = res.nconns = res.nresp = 0;
	res.resp_chunked = res.tunnel = res.truncated = 0;
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
	write_all(fd, in, n);
	shutdown(fd, SHUT_WR);
	client = peer_new(fd, PEER_CLIENT);

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
