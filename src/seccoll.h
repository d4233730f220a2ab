/* The request as ModSecurity's variables see it (issue 22): the request
 * line's parts, ARGS_GET from the query string, ARGS_POST from an
 * urlencoded body, REQUEST_COOKIES (version 0 cookies, SecCookieFormat 0)
 * and REQUEST_HEADERS, each split and decoded as ModSecurity 2.9 does.
 * Pure: the caller hands in the request's bytes; every name and value
 * lives in the collection's own arena until seccoll_reset. */
#ifndef SLUICE_SECCOLL_H
#define SLUICE_SECCOLL_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

struct sc_pair {
	uint32_t name, nlen;     /* offsets into the arena */
	uint32_t value, vlen;
};

struct sc_list {
	struct sc_pair *v;
	uint32_t n, cap;
};

/* SC_ARGS_JSON: arguments from a JSON body, which ModSecurity counts in
 * ARGS but not in ARGS_POST (that is the urlencoded body's). */
enum sc_list_id { SC_ARGS_GET, SC_ARGS_POST, SC_ARGS_JSON, SC_COOKIES, SC_HEADERS, SC__LISTS };

struct seccoll {
	struct buf arena;
	struct sc_list list[SC__LISTS];
	/* scalars: offsets into the arena */
	uint32_t method, method_len, uri, uri_len, protocol, protocol_len;
	uint32_t filename, filename_len, basename, basename_len, query, query_len;
	uint32_t line, line_len, body, body_len;
	unsigned urlencoded_invalid;   /* bad %-escapes in arguments (URLENCODED_ERROR) */
};

struct sc_header {
	const char *name, *value;
	size_t nlen, vlen;
};

/* Empty, keeping the memory. */
void seccoll_reset(struct seccoll *c);
void seccoll_free(struct seccoll *c);

/* The request line's parts and the headers (as received: a Cookie header
 * also fills REQUEST_COOKIES). TARGET is the request-target as sent. */
void seccoll_request(struct seccoll *c, const char *method, size_t mlen, const char *target, size_t tlen,
		     const char *protocol, size_t plen, const struct sc_header *h, size_t nh);

/* An application/x-www-form-urlencoded body: REQUEST_BODY and ARGS_POST. */
void seccoll_urlencoded_body(struct seccoll *c, const char *body, size_t len);

/* A JSON body (the JSON processor, which ModSecurity turns on with
 * ctl:requestBodyProcessor=JSON): REQUEST_BODY and SC_ARGS_JSON, one
 * argument per scalar, named as ModSecurity 2.9 names them: object keys
 * joined by '.', an array's elements named by the array's own key again
 * ("a.c.c" for {"a":{"c":[..]}}), a top-level array's "array"; strings
 * unescaped (\uXXXX and surrogate pairs to UTF-8), numbers as written,
 * true/false as words, null as "". Returns 0, or -1 for a body that is not
 * JSON or nests deeper than SC_JSON_DEPTH (ModSecurity answers 400). */
#define SC_JSON_DEPTH 256
int seccoll_json_body(struct seccoll *c, const char *body, size_t len);

/* ModSecurity's argument splitter: SEP-separated name=value pairs, each
 * half URL-decoded ('+' is a space, bad escapes stay and are counted);
 * a pair without '=' has an empty value, empty names are kept. */
void seccoll_parse_args(struct seccoll *c, enum sc_list_id into, const char *s, size_t len, char sep);

static inline const char *sc_str(const struct seccoll *c, uint32_t off)
{
	return c->arena.data + off;
}

#endif
