/* The two interfaces around a protocol codec (docs/architecture.md, "Layers").
 *
 * struct codec_ops: what a codec (HTTP/1.1 in h1.c; HTTP/2 next) offers.
 * The connection layer (conn.c) calls its upper half with the bytes and
 * events of the transport; the stream layer (stream.c) calls its lower half
 * to answer one stream. Neither names a codec: a connection carries a
 * pointer to its ops, and a stream reaches them through its connection.
 *
 * struct stream_events: how a codec reports a stream's request upwards.
 * The stream layer registers them once (codec_events_set); codecs call up
 * only through them. A codec may fill the request facts of a stream it
 * reports (s->req, method, version, framing, declared length); everything
 * else in the stream is the stream layer's. */
#ifndef SLUICE_CODEC_H
#define SLUICE_CODEC_H

#include "proxy-t.h"

struct codec_ops {
	const char *name;

	/* ---- from the connection layer ---- */
	/* Plaintext bytes read from the client. */
	void (*data)(struct client *cl, const char *data, size_t len);
	/* The client half-closed (or reset, or its TLS session ended). */
	void (*eof)(struct client *cl);
	/* The connection's deadline fired while CL_OPEN with a stream open. */
	void (*timeout)(struct client *cl);
	/* A write completed; MORE: bytes are still on their way. */
	void (*sent)(struct client *cl, int more);
	/* The connection must end with R before (or without) a request, e.g.
	 * plain HTTP on a TLS port: answer R if the protocol can. */
	void (*fail)(struct client *cl, enum reason r);
	/* The transport failed (R): the reason its open streams end with. */
	void (*error)(struct client *cl, enum reason r);
	/* The connection is closing: end its streams. */
	void (*close)(struct client *cl);
	/* Its handles are closed: give the streams back. */
	void (*closed)(struct client *cl);
	/* The worker drains: no new request after the ones under way. */
	void (*drain)(struct client *cl);
	/* No stream is open: the connection waits for a request. */
	int (*idle)(const struct client *cl);

	/* ---- from the stream layer, about one stream ---- */
	/* (Re)arm the stream's client-side timeout; 0 stops it. */
	void (*timer)(struct stream *s, uint64_t ms);
	/* Where the stream's output ends now, and taking back what was added
	 * after that mark (nothing of it was flushed in between). */
	size_t (*out_mark)(const struct stream *s);
	void (*out_rewind)(struct stream *s, size_t mark);
	/* Push queued output to the client. */
	void (*flush)(struct stream *s);
	/* Its output not yet written to the client. */
	size_t (*queued)(const struct stream *s);
	/* The backend side took what it was given: read the client again. */
	void (*resume)(struct stream *s);
	/* The request expects 100-continue and a body will be read. */
	void (*send_continue)(struct stream *s);
	/* An interim (1xx, not 101) response of the backend, in s->resp. */
	void (*send_interim)(struct stream *s, int status);
	/* The response head: s->resp with inspection's edits (s->insp). */
	void (*send_head)(struct stream *s, int status, unsigned flags);
	void (*send_data)(struct stream *s, const char *data, size_t len);
	void (*send_end)(struct stream *s);
	/* sluice's own response (an error, the hook's deny or redirect) with
	 * s->status; CLOSE: the connection ends after it. */
	void (*send_local)(struct stream *s, enum reason r, int close);
	/* After a 101: the bytes that followed it, then raw both ways. */
	void (*tunnel)(struct stream *s, const char *data, size_t len);
	/* The exchange is over and logged. CLOSE: no request may follow on
	 * this connection (HTTP/1.1 closes it once the response is out). */
	void (*done)(struct stream *s, int close);
	/* Tunnel over: deliver what is queued, then close. */
	void (*tunnel_end)(struct stream *s);
	/* No response can be given any more: abort the stream (HTTP/1.1 closes
	 * the connection). */
	void (*abort)(struct stream *s);
};

struct stream_events {
	/* A request starts on CL; CODEC_CTX is the codec's state for it. */
	struct stream *(*open)(struct client *cl, void *codec_ctx);
	/* The head is complete and valid for the codec: check it, inspect it,
	 * dispatch it. Returns REASON_OK or the reason to answer with. */
	enum reason (*head)(struct stream *s);
	/* Body bytes (de-framed), and a chunk of LEN announced. */
	enum reason (*body)(struct stream *s, const char *data, size_t len);
	enum reason (*chunk)(struct stream *s, uint64_t len);
	/* The request is complete. */
	enum reason (*end)(struct stream *s);
	/* Request bytes were produced: push them on. Returns 1 when the
	 * backend side holds enough that the client must wait. */
	int (*pushed)(struct stream *s);
	/* Raw bytes from the client in a tunnel; 1: the client must wait. */
	int (*tunnel_in)(struct stream *s, const char *data, size_t len);
	/* The client half-closed: 1 keeps the connection (a full request
	 * waits for its answer, a tunnel passes the half-close on). */
	int (*peer_eof)(struct stream *s);
	/* The stream's client-side timeout fired. */
	void (*timeout)(struct stream *s);
	/* The codec failed the request with R (a parse error, a bad head). */
	void (*fail)(struct stream *s, enum reason r);
	/* The client's output drained. */
	void (*writable)(struct stream *s);
	/* The connection is closing under the stream. */
	void (*abort)(struct stream *s);
	/* Back to the pool (the codec has forgotten it). */
	void (*release)(struct stream *s);
};

void codec_events_set(const struct stream_events *ev);
extern const struct stream_events *codec_ev;

/* The protocol every connection starts with, and HTTP/2 (registered at
 * worker start). */
void codec_default_set(const struct codec_ops *ops);
void codec_h2_set(const struct codec_ops *ops);
extern const struct codec_ops *codec_default;

/* The codec for a connection whose first plaintext bytes are DATA: h2 when
 * TLS chose it by ALPN, or when a plain listener with h2c on sees the
 * HTTP/2 connection preface; else the default. NULL: DATA is a strict
 * beginning of the preface on such a listener, more bytes decide. */
const struct codec_ops *codec_choose(const struct client *cl, const char *data, size_t len);

/* What sluice's own answer (an error, the hook's deny or redirect, a
 * route's response) says, whatever protocol carries it: the body, its
 * type, whether a Location (s->insp.local) and the route's response
 * headers (s->insp.resp_hdrs) go with it. BODY may point into TEXT. */
struct local_answer {
	const char *body, *ctype;
	size_t blen;
	int redirect, route;
	char text[200];
};
void local_answer(const struct stream *s, enum reason r, struct local_answer *a);
/* The reason phrase of STATUS ("Error" for one sluice does not name). */
const char *http_status_text(int status);

#endif
