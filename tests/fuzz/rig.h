/* An in-process sluice for the fuzz targets that drive the data path
 * (fuzz_request, fuzz_response, fuzz_lua_req): one worker, set up with
 * worker_start() the way the master would, whose loop the rig runs itself,
 * with the rig's own client and backend sockets on the same loop (uv_poll),
 * so one thread and no sleeps.
 *
 * Listeners (both plain TCP on 127.0.0.1):
 *   RIG_LI_PLAIN  backend "app": server on the rig's port A, sluice's
 *                 default identity headers; the target's extra YAML goes here.
 *   RIG_LI_PROXY  accept_proxy_from and trusted_forwarders 127.0.0.0/8,
 *                 backend "pp": server on port B with a PROXY v2 header
 *                 (unique_id, crc32c TLVs) and every identity header on.
 *
 * Oracles the rig applies to every exchange (rig_exchange), aborting with a
 * description on the first violation:
 *   - every backend connection carries a sequence of well-formed HTTP/1.1
 *     requests (strict: rig_parse_request), after a valid PROXY v2 header
 *     on port B;
 *   - what the client receives is a sequence of well-formed responses
 *     (rig_parse_response);
 *   - afterwards the worker holds no client, no backend connection, no
 *     queued request and no reserved connection slot. */
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
};

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
	int resp_status[RIG_MAX_REQS];
	int resp_chunked;     /* some response to the client was chunked */
	int tunnel;           /* the client got a 101: what followed was not parsed */
	int truncated;        /* the last response's body was cut short (the connection closed) */
};

/* Once per process. LISTENER_EXTRA: YAML lines (indented by 4) added to
 * the plain listener, or NULL; "$DIR" in them becomes the rig's private
 * directory. TOP_EXTRA: top-level YAML lines, or NULL. FILES: NULL or a
 * NULL-terminated list of name, content pairs written to that directory
 * first. The working directory is left alone (libFuzzer reads its corpus
 * by relative paths). */
void rig_init(const char *listener_extra, const char *top_extra, const char *const *files);

/* Connect to LISTENER, send IN (then shut down the write side, unless
 * KEEP_OPEN), run the loop until sluice closed the connection and the
 * worker is idle, applying every oracle. In RIG_ANSWER_FUZZ mode the
 * backend answers with RESP. The result stays valid until the next call. */
const struct rig_result *rig_exchange(int listener, const uint8_t *in, size_t n, enum rig_backend_mode mode,
				      const uint8_t *resp, size_t resp_len);

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
