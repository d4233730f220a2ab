#include <stdio.h>
#include <string.h>
#include "health.h"
#include "forward.h"
#include "upstream.h"
#include "log.h"
#include "shm.h"
#include "tls.h"
#include "worker.h"

/* One check in flight per server; it owns its handles and frees itself in
 * the last close callback. */
struct hcheck {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_connect_t creq;
	struct outq out;         /* bytes to the server (ciphertext under TLS) */
	struct tls_conn *tls;    /* backends with tls: the check speaks TLS too */
	struct buf plain;        /* decrypted bytes */
	int sent;                /* the request has been queued */
	struct server *srv;      /* NULL once the server stopped caring */
	char req[512];
	char rbuf[4096];
	char resp[64];
	size_t resp_len;
	int closing;
	int pending_close;
};

static void check_closed(uv_handle_t *h)
{
	struct hcheck *c = h->data;
	if (--c->pending_close > 0)
		return;
	tls_conn_free(c->tls);
	buf_free(&c->out.pending);
	buf_free(&c->out.inflight);
	buf_free(&c->plain);
	free(c);
}

static void check_done(struct hcheck *c, int ok, const char *why)
{
	if (c->closing)
		return;
	c->closing = 1;
	c->pending_close = 2;
	uv_close((uv_handle_t *)&c->tcp, check_closed);
	uv_close((uv_handle_t *)&c->timer, check_closed);
	struct server *srv = c->srv;
	if (srv == NULL)
		return;
	srv->hc = NULL;
	struct cfg_health *h = &srv->be->cfg->health;
	_Atomic int *up = &shm->slots[srv->slot].up;
	if (ok) {
		srv->hc_fail = 0;
		if (++srv->hc_ok >= (int)h->rise && !atomic_load(up)) {
			atomic_store(&shm->slots[srv->slot].back_since_ms, now_us() / 1000);
			atomic_store(up, 1);
			log_warn("backend %s server %s is UP (health check passed %d times)",
				 srv->be->cfg->name, srv->cfg->name, srv->hc_ok);
			shm_kick_others(W->slot);
			upstream_on_kick();
		}
	} else {
		srv->hc_ok = 0;
		if (++srv->hc_fail >= (int)h->fall && atomic_load(up)) {
			atomic_store(up, 0);
			log_warn("backend %s server %s is DOWN (health check: %s)",
				 srv->be->cfg->name, srv->cfg->name, why);
		}
	}
}

static void check_timeout(uv_timer_t *t)
{
	check_done(t->data, 0, "timeout");
}

static void check_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
	struct hcheck *c = h->data;
	(void)sz;
	b->base = c->rbuf;
	b->len = sizeof(c->rbuf);
}

static void check_written(uv_write_t *w, int status);

static void check_flush(struct hcheck *c)
{
	if (outq_flush(&c->out, (uv_stream_t *)&c->tcp, check_written, c) < 0)
		check_done(c, 0, "write failed");
}

static void check_written(uv_write_t *w, int status)
{
	struct hcheck *c = w->data;
	outq_written(&c->out);
	if (c->closing)
		return;
	if (status < 0)
		check_done(c, 0, uv_strerror(status));
	else
		check_flush(c);
}

/* Judge the status line once 12 bytes of it (or the end) are in. */
static void check_status(struct hcheck *c, int eof)
{
	if (c->resp_len < 12 && !eof && c->resp_len < sizeof(c->resp) - 1)
		return;
	if (c->resp_len < 12) {
		check_done(c, 0, "closed before status line");
		return;
	}
	c->resp[c->resp_len] = '\0';
	int status = 0;
	if (strncmp(c->resp, "HTTP/1.", 7) != 0 || sscanf(c->resp + 9, "%3d", &status) != 1) {
		check_done(c, 0, "not an HTTP response");
		return;
	}
	char why[48];
	snprintf(why, sizeof(why), "status %d", status);
	check_done(c, c->srv && status == c->srv->be->cfg->health.expect_status, why);
}

static void check_take(struct hcheck *c, const char *p, size_t n)
{
	size_t room = sizeof(c->resp) - 1 - c->resp_len;
	if (n > room)
		n = room;
	if (n == 0)
		return;
	memcpy(c->resp + c->resp_len, p, n);
	c->resp_len += n;
}

static void check_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct hcheck *c = s->data;
	if (n == 0 || c->closing)
		return;
	if (n < 0) {
		if (c->resp_len < 12)
			check_done(c, 0, n == UV_EOF ? "closed before status line" : uv_strerror((int)n));
		else
			check_status(c, 1);
		return;
	}
	if (c->tls == NULL) {
		check_take(c, b->base, (size_t)n);
		check_status(c, 0);
		return;
	}
	c->plain.len = 0;
	enum tls_status st = tls_conn_feed(c->tls, b->base, (size_t)n, &c->plain, &c->out.pending);
	if (st == TLS_ERROR) {
		check_done(c, 0, tls_conn_error(c->tls));
		return;
	}
	if (!c->sent && tls_conn_handshake_done(c->tls)) {
		if (tls_conn_encrypt(c->tls, c->req, strlen(c->req), &c->out.pending) < 0) {
			check_done(c, 0, tls_conn_error(c->tls));
			return;
		}
		c->sent = 1;
	}
	check_flush(c);
	if (c->closing)
		return;
	check_take(c, c->plain.data, c->plain.len);
	check_status(c, st == TLS_CLOSED);
}

static void check_connected(uv_connect_t *r, int status)
{
	struct hcheck *c = r->data;
	if (c->closing)
		return;
	if (status < 0) {
		check_done(c, 0, uv_strerror(status));
		return;
	}
	struct backend *be = c->srv->be;
	/* A server that expects the PROXY protocol gets it from checks too:
	 * LOCAL, "this connection is the proxy's own". */
	forward_proxy_local(c->srv->cfg, &c->out.pending);
	if (be->tls) {
		c->tls = tls_conn_new_client(be->tls, NULL);
		if (tls_conn_feed(c->tls, NULL, 0, &c->plain, &c->out.pending) == TLS_ERROR) {
			check_done(c, 0, tls_conn_error(c->tls));
			return;
		}
	} else {
		buf_append_str(&c->out.pending, c->req);
		c->sent = 1;
	}
	uv_read_start((uv_stream_t *)&c->tcp, check_alloc, check_read);
	check_flush(c);
}

static void check_start(uv_timer_t *t)
{
	struct server *srv = t->data;
	if (srv->hc)
		return;  /* previous one still running (its own timeout ends it) */
	if (atomic_load(&shm->slots[srv->slot].admin) == SHM_ADMIN_DISABLED)
		return;  /* the operator took it out: its state is theirs, not the checks' */
	struct hcheck *c = calloc(1, sizeof(*c));
	AN(c);
	c->srv = srv;
	srv->hc = c;
	struct cfg_health *h = &srv->be->cfg->health;
	snprintf(c->req, sizeof(c->req),
		 "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: sluice-health\r\nConnection: close\r\n\r\n",
		 h->path, srv->cfg->addr.text);
	uv_tcp_init(&W->loop, &c->tcp);
	uv_timer_init(&W->loop, &c->timer);
	c->tcp.data = c->timer.data = c->creq.data = c;
	uv_timer_start(&c->timer, check_timeout, h->timeout_ms, 0);
	if (uv_tcp_connect(&c->creq, &c->tcp, (const struct sockaddr *)&srv->cfg->addr.ss,
			   check_connected) < 0)
		check_done(c, 0, "connect failed");
}

static int started;

void health_start(struct worker *w)
{
	started = 1;
	for (unsigned b = 0; b < w->nbackends; b++) {
		struct backend *be = &w->backends[b];
		if (!be->cfg->health.enabled)
			continue;
		for (unsigned s = 0; s < be->nservers; s++) {
			struct server *srv = &be->servers[s];
			uv_timer_init(&w->loop, &srv->hc_timer);
			srv->hc_timer.data = srv;
			/* First check at once so a dead server is found early. */
			uv_timer_start(&srv->hc_timer, check_start, 0, be->cfg->health.interval_ms);
		}
	}
}

void health_stop(void)
{
	if (!started)
		return;
	started = 0;
	for (unsigned b = 0; b < W->nbackends; b++) {
		struct backend *be = &W->backends[b];
		if (!be->cfg->health.enabled)
			continue;
		for (unsigned s = 0; s < be->nservers; s++) {
			struct server *srv = &be->servers[s];
			if (!uv_is_closing((uv_handle_t *)&srv->hc_timer))
				uv_close((uv_handle_t *)&srv->hc_timer, NULL);
			if (srv->hc) {
				srv->hc->srv = NULL;
				check_done(srv->hc, 0, "stopping");
				srv->hc = NULL;
			}
		}
	}
}
