#include "outq.h"

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
	q->req.data = data;
	q->writing = 1;
	int rc = uv_write(&q->req, s, &b, 1, cb);
	if (rc < 0)
		outq_written(q);
	return rc;
}
