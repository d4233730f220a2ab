/* Output queue of one stream: at most one uv_write in flight. Bytes produced
 * while it runs go to `pending`; when it completes the two buffers swap.
 * `inflight` belongs to libuv between uv_write and its callback. */
#ifndef SLUICE_OUTQ_H
#define SLUICE_OUTQ_H

#include <uv.h>
#include "buf.h"

struct outq {
	struct buf pending;
	struct buf inflight;
	uv_write_t *req;           /* from the worker's pool while writing, else NULL */
	unsigned char writing;
};

/* Write what is pending: synchronously when the socket takes it all (no
 * write request, so no epoll_ctl on completion), else the rest with one
 * uv_write whose callback CB gets req->data = DATA. Returns the uv_write
 * error when it failed synchronously (the queue is then empty). */
int outq_flush(struct outq *q, uv_stream_t *s, uv_write_cb cb, void *data);
/* First thing in the write callback, once it has read req->data: the
 * request goes back to the pool (a queue at rest holds none, so an idle
 * connection does not pay for one). */
void outq_written(struct outq *q);
static inline size_t outq_queued(const struct outq *q)
{
	return q->pending.len + q->inflight.len;
}

/* A connection's two queues: PLAIN gets the protocol bytes; under TLS
 * (TLS non-NULL) they are encrypted onto WIRE, which goes to the socket,
 * and without TLS PLAIN is itself the wire. Both sides of the proxy use
 * these three, so TLS and plain TCP share one write path. */
struct tls_conn;
#define OUTQ_ERR_TLS (-10000)
static inline struct outq *outq_wire(struct outq *plain, struct outq *wire, const struct tls_conn *tls)
{
	return tls ? wire : plain;
}
static inline size_t outq_queued_via(const struct outq *plain, const struct outq *wire,
				     const struct tls_conn *tls)
{
	return tls ? plain->pending.len + outq_queued(wire) : outq_queued(plain);
}
/* Returns 0, OUTQ_ERR_TLS when encryption failed, or uv_write's error. */
/* TLS: encrypt PLAIN's pending bytes onto WIRE's pending, writing nothing
 * (so that what is added to WIRE next, a close_notify, shares the write). */
int outq_seal(struct outq *plain, struct outq *wire, struct tls_conn *tls);
int outq_flush_via(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
		   uv_write_cb cb, void *data);
/* The same for the last bytes before the caller closes the socket, at once
 * when they all went (nothing queued for a uv_write): the kernel may hold
 * them until that close. */
int outq_flush_via_last(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
			uv_write_cb cb, void *data);

#endif
