/* An in-process sluice for the fuzz targets that drive the data path
 * (fuzz_request, fuzz_response, fuzz_lua_req, fuzz_h2): one worker, set up with
 * worker_start() the way the master would, whose loop the rig runs itself,
 * with the rig's own client and backend sockets on the same loop (uv_poll),
 * so one thread and no sleeps.
 *
 * Listeners (both plain TCP on 127.0.0.1):
 *   RIG_LI_PLAIN  backend "app": server on the rig's port A, sluice's
 *                 default identity headers; the target's extra YAML goes here.
 *   RIG_LI_PROXY  accept_proxy_from and trusted_forwarders 127.0.0.0/8,
 *                 backend "pp": server on port B with a PROXY v2 header
 *                 (unique_id, crc32c TLVs) and every identity header on;
 *                 rig_init2's extra YAML goes here.
 *
 * Oracles the rig applies to every exchange (rig_exchange), aborting with a
 * description on the first violation:
 *   - every backend connection carries a sequence of well-formed HTTP/1.1
 *     requests (strict: rig_parse_request), after a valid PROXY v2 header
 *     on port B;
 *   - what the client receives is a sequence of well-formed responses
 *     (rig_parse_response);
 *   - afterwards the worker holds no client, no backend connection, no
 *     queued request and no reserved connection slot;
 *   - codecs report events (struct stream_events) only about streams they
 *     opened and have not released, and release every stream they open:
 *     none is left after the exchange; the listeners' connection and
 *     HTTP/2 gauges are back to 0. */
#ifndef SLUICE_FUZZ_RIG_H
#define SLUICE_FUZZ_RIG_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

enum { RIG_LI_PLAIN, RIG_LI_PROXY };

/* What the rig's backend does with a request it parsed. */
enum rig_backend_mode {
	RIG_ANSWER_EACH,   /* a fixed 200 with a 2-byte body (none for HEAD) to each */
	RIG_ANSWER_FUZZ,   /* the exchange's response bytes to the first, then FIN */
	RIG_ANSWER_FIXED,  /* the exchange's response bytes to each (for HEAD, up to
			    * and including the empty line that ends the head) */
};

/* rig_exchange2's FLAGS. */
#define RIG_HOLD_OPEN  1u  /* shut the client's write side down only once the worker
			    * is quiet (nothing readable, no callback pending, no timer
			    * due), not right after the input: for HTTP/2, whose codec
			    * closes the connection at the client's EOF */
#define RIG_CLIENT_RAW 2u  /* the client's bytes are not HTTP/1.1: not parsed (the
			    * target checks them); nresp stays 0 */
#define RIG_WAIT_CLOSE 4u  /* shut the write side down only once sluice has closed
			    * (or half-closed) the connection of its own accord, by
			    * its timeouts. Whenever the worker is quiet the rig moves the
			    * monotonic clock on to its next timer (a virtual clock:
			    * see rig.c), so this costs no real time. Fails if sluice
			    * keeps the connection with no timer armed, or past 120
			    * virtual seconds */
#define RIG_CLIENT_STALL 8u /* a client that does not read, with a tiny receive buffer,
			    * so sluice's output backs up: it reads what it got only
			    * once sluice has closed the connection (implies
			    * RIG_WAIT_CLOSE). Its bytes may end inside a message */

#define RIG_MAX_REQS 1024  /* a 4 KiB input holds at most ~250 requests */

/* One request as the backend saw it. */
struct rig_req {
	char method[24];
	int framing;          /* 0 none, 1 Content-Length, 2 chunked */
	uint64_t body_len;    /* body bytes (de-chunked) */
	size_t body_off;      /* where its de-chunked body starts in rig_result.bodies */
};

struct rig_result {
	struct buf client;    /* every byte the client received */
	int client_eof;       /* sluice closed the connection */
	struct rig_req reqs[RIG_MAX_REQS];
	unsigned nreqs;       /* complete requests the backend received (all connections) */
	unsigned nconns;      /* backend connections accepted */
	struct buf bodies;    /* de-chunked request bodies, one after the other */
	unsigned nresp;       /* final responses the client received */
	unsigned nown;        /* of them, read as sluice's own answers to requests the
			       * backend never saw (check_client in rig.c) */
	int resp_status[RIG_MAX_REQS];
	int resp_chunked;     /* some response to the client was chunked */
	int tunnel;           /* the client got a 101: what followed was not parsed */
	int truncated;        /* the last response's body was cut short (the connection closed) */
	unsigned nreqs_held;  /* RIG_HOLD_OPEN: nreqs when the write side was shut down */
	unsigned nstreams;    /* streams the codec opened (stream_events.open) */
};

/* Once per process. LISTENER_EXTRA: YAML lines (indented by 4) added to
 * the plain listener, or NULL; "$DIR" in them becomes the rig's private
 * directory. TOP_EXTRA: top-level YAML lines, or NULL. FILES: NULL or a
 * NULL-terminated list of name, content pairs written to that directory
 * first. The working directory is left alone (libFuzzer reads its corpus
 * by relative paths). */
void rig_init(const char *listener_extra, const char *top_extra, const char *const *files);
/* The same, with PROXIED_EXTRA: YAML lines (indented by 4) added to the
 * proxied listener, or NULL. */
void rig_init2(const char *listener_extra, const char *proxied_extra, const char *top_extra,
	       const char *const *files);

/* Connect to LISTENER, send IN, then shut down the write side, run the
 * loop until sluice closed the connection and the worker is idle, applying
 * every oracle. In RIG_ANSWER_FUZZ and RIG_ANSWER_FIXED modes the backend
 * answers with RESP. The result stays valid until the next call. */
const struct rig_result *rig_exchange(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				      const uint8_t *resp, size_t resp_len);
/* The same with FLAGS (RIG_HOLD_OPEN, RIG_CLIENT_RAW, RIG_WAIT_CLOSE,
 * RIG_CLIENT_STALL) and the split points in rig_split. */
const struct rig_result *rig_exchange2(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				       const uint8_t *resp, size_t resp_len, unsigned flags);

/* If set, called with every request the backend parsed (strictly, as
 * rig_parse_request): its bytes P..P+N (head and framed body), what the
 * parser read, and its body de-chunked (RQ->body_len bytes). For a
 * target's own checks of what reached the backend. */
extern void (*rig_on_request)(const char *p, size_t n, const struct rig_req *rq, const char *body);

/* Offsets into the next exchange's IN, ascending: the client writes up to
 * each, then waits until the worker is quiet before it writes on, so the
 * input arrives in that many reads. Set before rig_exchange2 (none by
 * default); the rig does not keep the array. */
extern const size_t *rig_split;
extern size_t rig_nsplit;

/* Milliseconds the RIG_HOLD_OPEN quiet check waits for more events before
 * it takes the worker for quiet (default 0: it only looks). A target may
 * raise it to re-run an input whose outcome depends on timing. */
extern int rig_settle_ms;

/* Set when the backend always answers in full: a response to the client
 * may then not be read as cut short, and every request the backend saw
 * must have its response (default 0: the last may be cut short). */
extern int rig_whole_answers;

/* Strict parsers used as oracles (exposed for the targets' own checks).
 * Return the length of one complete message at P, 0 if more bytes are
 * needed, -1 if malformed (*WHY set). */
long rig_parse_request(const char *p, size_t n, struct rig_req *out, struct buf *body, const char **why);
/* IS_HEAD: the response answers a HEAD. AT_EOF: no byte will follow (a
 * response without framing ends here). *STATUS gets the status code,
 * *CHUNKED whether its body is chunked. */
long rig_parse_response(const char *p, size_t n, int is_head, int at_eof, int *status, int *chunked,
			const char **why);

#define RIG_FAIL(...) rig_fail(__FILE__, __LINE__, __VA_ARGS__)
void rig_fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));

#endif
