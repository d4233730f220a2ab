/* Listening with a back-off on descriptor exhaustion (why: acceptor.h). */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include "acceptor.h"
#include "log.h"
#include "util.h"

#define ACCEPT_BACKOFF_MIN_MS 20
#define ACCEPT_BACKOFF_MAX_MS 500

static int acceptor_listen(struct acceptor *a, int fd)
{
	uv_tcp_init(a->timer.loop, a->tcp);
	a->tcp->data = a->data;
	int rc = uv_tcp_open(a->tcp, fd);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)a->tcp, a->backlog, a->on_conn);
	return rc;
}

int acceptor_open(uv_loop_t *loop, struct acceptor *a, uv_tcp_t *tcp, int fd, int backlog,
		  const char *name, uv_connection_cb on_conn, void *data)
{
	a->tcp = tcp;
	a->on_conn = on_conn;
	a->data = data;
	a->name = name;
	a->backlog = backlog;
	a->stopped = 0;
	a->since_us = 0;
	uv_timer_init(loop, &a->timer);
	uv_unref((uv_handle_t *)&a->timer);
	a->timer.data = a;
	a->spare = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (a->spare < 0)
		return uv_translate_sys_error(errno);
	return acceptor_listen(a, fd);
}

static void retry_cb(uv_timer_t *t)
{
	struct acceptor *a = t->data;
	if (a->stopped)
		return;
	/* The handle takes the spare; a new spare needs a free descriptor,
	 * which is also the sign that accepting can work again. */
	int spare = fcntl(a->spare, F_DUPFD_CLOEXEC, 0);
	if (spare < 0) {
		a->backoff_ms = a->backoff_ms * 2 > ACCEPT_BACKOFF_MAX_MS ? ACCEPT_BACKOFF_MAX_MS
									 : a->backoff_ms * 2;
		uv_timer_start(&a->timer, retry_cb, a->backoff_ms, 0);
		return;
	}
	int fd = a->spare;
	a->spare = spare;
	int rc = acceptor_listen(a, fd);
	if (rc < 0) {
		log_error("listener %s: cannot listen again: %s", a->name, uv_strerror(rc));
		uv_close((uv_handle_t *)a->tcp, NULL);
	}
}

static void paused_cb(uv_handle_t *h)
{
	struct acceptor *a = h->data;
	a->tcp->data = a->data;
	if (!a->stopped)
		uv_timer_start(&a->timer, retry_cb, a->backoff_ms, 0);
}

int acceptor_ready(struct acceptor *a, int status)
{
	uint64_t now = now_us();
	if (status >= 0) {
		if (a->since_us) {
			log_warn("accept on %s: accepting again after %llu ms", a->name,
				 (unsigned long long)((now - a->since_us) / 1000));
			a->since_us = 0;
		}
		return 1;
	}
	int exhausted = status == UV_EMFILE || status == UV_ENFILE || status == UV_ENOBUFS ||
			status == UV_ENOMEM;
	if (!exhausted) {
		/* Per-connection failures: libuv goes on with the next one. */
		if (now - a->last_log_us >= 1000000) {
			a->last_log_us = now;
			log_error("accept on %s: %s", a->name, uv_strerror(status));
		}
		return 0;
	}
	if (a->since_us == 0) {
		a->since_us = now;
		a->backoff_ms = ACCEPT_BACKOFF_MIN_MS;
		log_error("accept on %s: %s: new connections wait until descriptors are free", a->name,
			  uv_strerror(status));
	}
	if (!uv_is_closing((uv_handle_t *)a->tcp)) {
		a->tcp->data = a;  /* for paused_cb; the owner's is restored there */
		uv_close((uv_handle_t *)a->tcp, paused_cb);
	}
	return 0;
}

void acceptor_stop(struct acceptor *a, uv_close_cb closed)
{
	a->stopped = 1;
	uv_timer_stop(&a->timer);
	if (a->spare >= 0)
		close(a->spare);
	a->spare = -1;
	if (!uv_is_closing((uv_handle_t *)a->tcp))
		uv_close((uv_handle_t *)a->tcp, closed);
}
