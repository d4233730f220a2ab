#ifndef SLUICE_H1HEAD_H
#define SLUICE_H1HEAD_H
/* The common shape of an HTTP/1.1 request or response head, recognised in
 * one pass (pure: no state, no allocation). The codec and the backend side
 * take such a head straight and leave everything else to llhttp. */
#include <stddef.h>
#include <stdint.h>

/* More header lines than this is unusual enough for llhttp. */
#define H1HEAD_MAX_HDRS 64

struct h1head_span {
	uint32_t off, len;   /* from the start of the head */
};

enum h1head_conn { H1HEAD_CONN_NONE, H1HEAD_CONN_KEEP_ALIVE, H1HEAD_CONN_CLOSE };

struct h1head {
	uint8_t method;      /* request: llhttp_method_t */
	uint8_t http_minor;  /* 0 or 1 (a response: 1) */
	uint16_t status;     /* response */
	uint16_t nhdrs;
	uint8_t has_length;  /* response: its one Content-Length */
	uint8_t connection;  /* response: enum h1head_conn, its one Connection header */
	uint64_t content_length;
	struct h1head_span start;   /* request target, or reason phrase */
	struct h1head_span name[H1HEAD_MAX_HDRS], value[H1HEAD_MAX_HDRS];
};

/* When DATA starts with a complete request head (through its empty line) in
 * the strict common form, fills OUT and returns the head's length; 0 for
 * anything else: incomplete, unusual or invalid heads are llhttp's. The
 * form: method GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH or TRACE; one SP;
 * an origin-form target of RFC 3986 characters (no fragment); one SP;
 * HTTP/1.0 or HTTP/1.1; then at most H1HEAD_MAX_HDRS header lines
 * "token:" SP* value CRLF whose value is visible ASCII with inner spaces
 * only, neither empty nor ending in a space; no Content-Length,
 * Transfer-Encoding, Upgrade or Proxy-Connection header (framing and
 * protocol changes stay llhttp's); every line ends in CRLF. llhttp (strict
 * mode) reads such a head the same way: fuzz_h1head checks it. */
size_t h1head_parse(const char *data, size_t len, struct h1head *out);

/* The same for a response head: "HTTP/1.1", a status 200-599 other than 204
 * and 304, a reason phrase of visible ASCII with inner spaces (not empty, no
 * trailing space), the same header lines with exactly one Content-Length of
 * 1 to 15 digits, at most one Connection whose value is "keep-alive" or
 * "close", no Transfer-Encoding, Upgrade or Proxy-Connection. The body (of
 * content_length bytes unless the request was HEAD) follows the head. */
size_t h1head_parse_response(const char *data, size_t len, struct h1head *out);

#endif
