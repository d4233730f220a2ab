#ifndef SLUICE_H1HEAD_H
#define SLUICE_H1HEAD_H
/* The common shape of an HTTP/1.1 request head, recognised in one pass
 * (pure: no state, no allocation). The codec hands such a head straight to
 * its request callbacks and leaves everything else to llhttp. */
#include <stddef.h>
#include <stdint.h>

/* More header lines than this is unusual enough for llhttp. */
#define H1HEAD_MAX_HDRS 64

struct h1head_span {
	uint32_t off, len;   /* from the start of the head */
};

struct h1head {
	uint8_t method;      /* llhttp_method_t */
	uint8_t http_minor;  /* 0 or 1 */
	uint16_t nhdrs;
	struct h1head_span url;
	struct h1head_span name[H1HEAD_MAX_HDRS], value[H1HEAD_MAX_HDRS];
};

/* When DATA starts with a complete request head (through its empty line) in
 * the strict common form, fills OUT and returns the head's length; 0 for
 * anything else: incomplete, unusual or invalid heads are llhttp's. The
 * form: method GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH or TRACE; one SP;
 * an origin-form target of RFC 3986 characters (no fragment); one SP;
 * HTTP/1.0 or HTTP/1.1; then header lines "token:" SP* value CRLF whose
 * value is visible ASCII with inner spaces only, neither empty nor ending in
 * a space; no Content-Length, Transfer-Encoding or Upgrade header (framing
 * and protocol changes stay llhttp's); every line ends in CRLF. llhttp
 * (strict mode) reads such a head the same way: fuzz_h1head checks it. */
size_t h1head_parse(const char *data, size_t len, struct h1head *out);

#endif
