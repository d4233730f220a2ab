/* A parsed HTTP/1 message head, collected from llhttp callbacks into one
 * arena, plus the pure helpers that classify and rewrite header fields.
 * No I/O here. The arena and header array keep their capacity across
 * messages, so a warm connection parses without allocating. */
#ifndef SLUICE_HTTPMSG_H
#define SLUICE_HTTPMSG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>
#include "buf.h"

/* Header roles sluice cares about; everything else is HDR_OTHER. */
enum hdr_kind {
	HDR_OTHER,
	HDR_HOST,
	HDR_CONTENT_LENGTH,
	HDR_TRANSFER_ENCODING,
	HDR_CONNECTION,
	HDR_KEEP_ALIVE,
	HDR_PROXY_CONNECTION,
	HDR_TE,
	HDR_TRAILER,
	HDR_UPGRADE,
	HDR_EXPECT,
	HDR_X_FORWARDED_FOR,
	HDR_FORWARDED,
	HDR_IDENTITY,   /* other client-identity headers: X-Forwarded-*, X-Real-IP,
			 * Proxy-Client-IP, WL-Proxy-*, X-WebLogic-* */
	HDR_KINDS
};

struct hdr {
	uint32_t name_off, name_len;
	uint32_t val_off, val_len;
	uint8_t kind;   /* enum hdr_kind */
	uint8_t drop;   /* 1: hop-by-hop, not forwarded */
};

struct msg {
	struct buf raw;          /* url or status text, then names and values */
	struct hdr *hdrs;
	uint32_t nhdrs, hdrs_cap;
	uint32_t max_hdrs;       /* limit; exceeding it makes msg_* return -1 */
	uint32_t url_off, url_len;    /* request target or reason phrase */
	uint32_t head_bytes;     /* approximate size of the head on the wire */
	uint8_t in_field;        /* a field name is being received */
	uint8_t in_value;        /* a value is being received */
	uint16_t nkind[HDR_KINDS]; /* headers of each kind, dropped ones included (msg_count) */
};

void msg_reset(struct msg *m, uint32_t max_hdrs);
void msg_free(struct msg *m);
/* llhttp callback bodies. Return 0, or -1 when max_hdrs is exceeded. */
void msg_on_url(struct msg *m, const char *at, size_t len);
int msg_on_field(struct msg *m, const char *at, size_t len);
int msg_on_value(struct msg *m, const char *at, size_t len);
/* Called on value complete: trims trailing whitespace, classifies. Returns
 * NULL when there is no valid header (no name, or an empty one). */
struct hdr *msg_finish_header(struct msg *m);
/* A whole head read in one piece, copied into the arena at once; START_OFF
 * and START_LEN (within HEAD) are its target or reason phrase, recorded as
 * msg_on_url would. Returns where HEAD begins in the arena. */
uint32_t msg_take_head(struct msg *m, const char *head, size_t len, uint32_t start_off, uint32_t start_len);
/* A header line whose name and value are already in the arena (at most
 * one piece each, the value trimmed): what msg_on_field, msg_on_value and
 * msg_finish_header do for it. NULL when max_hdrs is reached. */
struct hdr *msg_add_parsed(struct msg *m, uint32_t name_off, uint32_t name_len, uint32_t val_off, uint32_t val_len);
/* Forget the last header (a trailer field, checked, not kept), its bytes
 * included. */
void msg_drop_last(struct msg *m);

static inline const char *msg_str(const struct msg *m, uint32_t off) { return m->raw.data + off; }

/* The role of header NAME; *HOP = 1 for hop-by-hop headers. */
enum hdr_kind hdr_classify(const char *name, size_t len, int *hop);

/* Whether a header of KIND may be edited by a route or the Lua hook: in a
 * response, anything but framing; in a request, only what sluice does not
 * own (framing, Host, hop-by-hop, client identity). */
static inline int hdr_editable(enum hdr_kind k, int resp)
{
	if (resp)
		return !(k == HDR_CONTENT_LENGTH || k == HDR_TRANSFER_ENCODING || k == HDR_CONNECTION ||
			 k == HDR_UPGRADE || k == HDR_KEEP_ALIVE || k == HDR_TRAILER);
	return k == HDR_OTHER;
}

/* RFC 9110 5.6.2 token characters (header names, codings, tags). */
static inline int tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* Case-insensitive token comparison (RFC 9110 tokens are ASCII). */
static inline int tok_eq(const char *a, size_t alen, const char *lit)
{
	size_t n = strlen(lit);  /* folded for a literal */
	return alen == n && strncasecmp(a, lit, n) == 0;
}

/* Iterate over comma-separated list elements of a header value, trimming
 * OWS; empty elements are skipped. Returns 0 when done. */
int list_next(const char **p, const char *end, const char **tok, size_t *toklen);

/* Mark headers named by Connection tokens (RFC 9110 7.6.1) as dropped and
 * return flags seen in Connection: bit0 close, bit1 keep-alive, bit2 upgrade. */
#define CONN_CLOSE     1u
#define CONN_KEEPALIVE 2u
#define CONN_UPGRADE   4u
unsigned msg_apply_connection(struct msg *m);

/* Append "Name: value\r\n" for every header not marked drop. */
void msg_write_headers(const struct msg *m, struct buf *out);

/* Point H's value at a copy of V (the old bytes stay unused in the arena). */
void msg_set_value(struct msg *m, struct hdr *h, const char *v, size_t len);

/* The largest Content-Length sluice accepts, either way: what a signed
 * 64-bit length holds, as nginx (off_t) and Go. Beyond it a peer would
 * wrap, saturate or refuse: the two sides of us would disagree. */
#define CONTENT_LENGTH_MAX ((uint64_t)INT64_MAX)
/* Every Content-Length of M becomes CLEN in decimal, as sluice parsed it:
 * "010" or "005" mean 10 and 5 here, and the next hop must not get the
 * chance to read them another way (octal, or refusing what we accepted). */
void msg_canonical_length(struct msg *m, uint64_t clen);
/* Append a header (classified like a received one), past max_hdrs if need
 * be: sluice's own additions are not the client's to limit. */
struct hdr *msg_add(struct msg *m, const char *name, const char *value, size_t vlen);

/* 1 when NAME is not Content-Length or Transfer-Encoding but reads as one
 * once '_' is taken for '-' (CGI-style servers map both to the same
 * variable): a second framing header the proxy would not see. */
int hdr_framing_alias(const char *name, size_t len);

/* 1 when V is a valid Host value (RFC 9110 7.2): uri-host [":" port], with
 * uri-host an IP-literal in brackets or a reg-name (empty allowed). A
 * comma is refused too: a Host that reads as a list gets two readings. */
int host_valid(const char *v, size_t n);

/* Absolute-form request target (RFC 9112 3.2.2): for "http://" and
 * "https://" targets, returns 1 and sets the authority (*AUTH, *ALEN) and
 * the origin-form rest (*PATH, *PLEN; may be empty or start with '?').
 * Returns 0 for any target that does not start with a scheme, -1 for an
 * absolute target sluice does not accept: another scheme, an empty
 * authority, or userinfo ('@', which RFC 9110 4.2.4 says to treat as an
 * error). */
int url_absolute_split(const char *u, size_t n, const char **auth, size_t *alen,
		       const char **path, size_t *plen);

/* Cookies (RFC 6265 5.4): the next NAME=value pair of one Cookie field
 * value [*POS, END) named NAME (case-sensitive), its value unquoted and
 * trimmed. Returns 1 and advances *POS past it, 0 when there is no more. */
int cookie_next(const char **pos, const char *end, const char *name, size_t nl,
		const char **v, size_t *vl);
/* The first value of cookie NAME in M's Cookie fields: 1 found, 0 not. */
int msg_cookie(const struct msg *m, const char *name, size_t nl, const char **v, size_t *vl);
/* The name and value of a Set-Cookie field value ("n=v; Path=/"), trimmed:
 * 0, or -1 when it has no '='. */
int set_cookie_split(const char *p, size_t n, const char **name, size_t *nl,
		     const char **v, size_t *vl);

/* Find the first header of KIND; NULL if none. */
const struct hdr *msg_find(const struct msg *m, enum hdr_kind kind);
int msg_count(const struct msg *m, enum hdr_kind kind);

/* Line-ending check over a message head, fed in pieces before the parser:
 * every line must end in CRLF and no NUL may appear (llhttp accepts a bare
 * LF after the request line, which a proxy must not). */
enum { HS_TEXT, HS_CR, HS_CRLF, HS_CRLF_CR };
struct head_scan {
	uint8_t state;
	uint8_t seen_text;   /* leading empty lines are not the end of the head */
};
/* Returns -1 on a bare CR/LF or NUL, 0 when all N bytes belong to the head,
 * or the number of bytes up to and including the head's final CRLFCRLF. */
int head_scan(struct head_scan *hs, const char *p, size_t n);

#endif
