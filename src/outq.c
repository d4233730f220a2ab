#include <stdlib.h>
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

int outq_flush_via(struct outq *plain, struct outq *wire, struct tls_conn *tls, uv_stream_t *s,
		   uv_write_cb cb, void *data)
{
	if (tls == NULL)
		return outq_flush(plain, s, cb, data);
	if (outq_seal(plain, wire, tls) < 0)
		return OUTQ_ERR_TLS;
	return outq_flush(wire, s, cb, data);
}

int outq_seal(struct outq *plain, struct outq *wire, struct tls_conn *tls)
{
	if (plain->pending.len == 0)
		return 0;
	int rc = tls_conn_encrypt(tls, plain->pending.data, plain->pending.len, &wire->pending);
	plain->pending.len = 0;
	return rc < 0 ? OUTQ_ERR_TLS : 0;
}

int outq_flush(struct outq *q, uv_stream_t *s, uv_write_cb cb, void *data)
{
	if (q->writing || q->pending.len == 0)
		return 0;
	uv_buf_t tb = uv_buf_init(q->pending.data, (unsigned)q->pending.len);
	int n = uv_try_write(s, &tb, 1);
	size_t done = n > 0 ? (size_t)n : 0;
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
