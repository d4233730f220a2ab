/* The interface through which upstream (upstream.c and its response
 * parser, upstream_h1.c) reports to streams. Types only. */
#ifndef SLUICE_UPSTREAM_T_H
#define SLUICE_UPSTREAM_T_H

#include "proxy-t.h"

/* How upstream reports to the stream it serves. The stream layer
 * registers these once; upstream calls up only through them. */
struct upstream_events {
	/* A connection is attached (s->bc) and established: send the request. */
	void (*ready)(struct stream *s);
	/* No connection could be had (s->bc is NULL): answer with R. */
	void (*error)(struct stream *s, enum reason r);
	/* Response bytes from the attached connection. */
	void (*data)(struct stream *s, const char *data, size_t len);
	/* The attached connection ended (EOF, reset, response timeout). */
	void (*eof)(struct stream *s, enum reason r);
	/* The attached connection's output fell below the low-water mark. */
	void (*writable)(struct stream *s);
	/* The response as the parser reads it (upstream_h1.c), in s->resp:
	 * an interim 1xx, the final head (RESP_* flags), body bytes (de-framed),
	 * the end. */
	void (*resp_interim)(struct stream *s, int status);
	void (*resp_head)(struct stream *s, int status, unsigned flags);
	void (*resp_body)(struct stream *s, const char *data, size_t len);
	void (*resp_end)(struct stream *s);
};

#endif
