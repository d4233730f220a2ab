#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include "outq.h"
#include "tls.h"
#include "util.h"

/* Write requests not in flight, chained through their data field. Each
 * worker process has its own list; it holds as many as were ever in
 * flight at once. */
static uv_write_t *wreq_free;

static uv_write_t *wreq_get(void)
{
	uv_write_t *r = wreq_free;
	if (r != NULL) {
		wreq_free = r->data;
		return r;
	}
	r = malloc(sizeof(*r));
	AN(r);
	return r;
}

void outq_written(struct outq *q)
{
	q->writing = 0;
	q->inflight.len = 0;
	if (q->req != NULL) {
		q->req->data = wreq_free;
		wreq_free = q->req;
		q->req = NULL;
	}
}

static int flush(struct outq *q, uv_stream_t *s, uv_write_cb cb, void *data, int last);

static int flush_via(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
		     uv_write_cb cb, void *data, int last)
{
	if (tls == NULL)
		return flush(plain, s, cb, data, last);
	if (outq_seal(plain, wire, tls) < 0)
		return OUTQ_ERR_TLS;
	return flush(wire, s, cb, data, last);
}

int outq_flush_via(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
		   uv_write_cb cb, void *data)
{
	return flush_via(plain, wire, tls, s, cb, data, 0);
}

int outq_flush_via_last(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
			uv_write_cb cb, void *data)
{
	return flush_via(plain, wire, tls, s, cb, data, 1);
}

int outq_seal(struct outq *plain, struct outq *wire, struct tls_conn *tls)
{
	if (plain->pending.len == 0)
		return 0;
	int rc = tls_conn_encrypt(tls, plain->pending.data, plain->pending.len, &wire->pending);
	plain->pending.len = 0;
	return rc < 0 ? OUTQ_ERR_TLS : 0;
}

/* A send, not libuv's write(2): on a socket the kernel's write path
 * (the VFS layer's position lock, permission hooks, fsnotify) costs more
 * than sendto's, twice per proxied request. The checks are uv_try_write's.
 * The last bytes before a close are sent with MSG_MORE: the kernel holds
 * them, and the close's FIN then leaves in the same segment, which saves
 * the peer (and, on loopback, us) one segment and its ACK. */
static size_t try_write(uv_stream_t *s, const struct buf *b, int last)
{
	uv_os_fd_t fd;
	if (s->connect_req != NULL || uv_stream_get_write_queue_size(s) != 0
	    || uv_fileno((uv_handle_t *)s, &fd) != 0)
		return 0;
	ssize_t n;
	do
		n = send(fd, b->data, b->len, (last ? MSG_MORE : 0) | MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	/* An error other than a full buffer comes back from uv_write. */
	return n > 0 ? (size_t)n : 0;
}

int outq_flush(struct outq *q, uv_stream_t *s, uv_write_cb cb, void *data)
{
	return flush(q, s, cb, data, 0);
}

static int flush(struct outq *q, uv_stream_t *s, uv_write_cb cb, void *data, int last)
{
	if (q->writing || q->pending.len == 0)
		return 0;
	size_t done = try_write(s, &q->pending, last);
	if (done == q->pending.len) {
		q->pending.len = 0;
		return 0;
	}
	/* The rest goes out asynchronously, from where the kernel stopped. */
	buf_swap(&q->pending, &q->inflight);
	uv_buf_t b = uv_buf_init(q->inflight.data + done, (unsigned)(q->inflight.len - done));
	q->req = wreq_get();
	q->req->data = data;
	q->writing = 1;
	int rc = uv_write(q->req, s, &b, 1, cb);
	if (rc < 0)
		outq_written(q);
	return rc;
}
