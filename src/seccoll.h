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
 * ARGS but not in ARGS_POST (that is the urlencoded and multipart body's).
 * From a multipart body: SC_FILES (part name, file name), SC_FILES_SIZES
 * (part name, size in decimal), SC_PART_HEADERS (part name, one header
 * line as sent, without its line end). From an XML body: SC_XML (the
 * XPath expression, a matching node's text content). */
enum sc_list_id {
	SC_ARGS_GET, SC_ARGS_POST, SC_ARGS_JSON, SC_COOKIES, SC_HEADERS,
	SC_FILES, SC_FILES_SIZES, SC_PART_HEADERS, SC_XML, SC__LISTS
};

/* What the multipart processor saw (ModSecurity's MULTIPART_* flags). */
enum sc_mp_flag {
	SC_MP_ERROR = 1 << 0,                /* it could not parse the body */
	SC_MP_BOUNDARY_QUOTED = 1 << 1,
	SC_MP_BOUNDARY_WHITESPACE = 1 << 2,
	SC_MP_DATA_BEFORE = 1 << 3,
	SC_MP_DATA_AFTER = 1 << 4,
	SC_MP_HEADER_FOLDING = 1 << 5,
	SC_MP_LF_LINE = 1 << 6,
	SC_MP_CRLF_LINE = 1 << 7,
	SC_MP_MISSING_SEMICOLON = 1 << 8,
	SC_MP_INVALID_QUOTING = 1 << 9,
	SC_MP_INVALID_PART = 1 << 10,
	SC_MP_INVALID_HEADER_FOLDING = 1 << 11,
	SC_MP_FILE_LIMIT_EXCEEDED = 1 << 12,
	SC_MP_UNMATCHED_BOUNDARY = 1 << 13,
};

struct seccoll {
	struct buf arena;
	struct sc_list list[SC__LISTS];
	/* scalars: offsets into the arena */
	uint32_t method, method_len, uri, uri_len, protocol, protocol_len;
	uint32_t filename, filename_len, basename, basename_len, query, query_len;
	uint32_t line, line_len, body, body_len;
	unsigned urlencoded_invalid;   /* bad %-escapes in arguments (URLENCODED_ERROR) */
	unsigned mp_flags;             /* enum sc_mp_flag */
	const char *mp_error;          /* why the multipart body was refused (static text) */
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

/* The path as Apache httpd hands it to ModSecurity from phase 2 on (its
 * request-target normalisation runs between ModSecurity's phases 1 and
 * 2): escapes of unreserved characters decoded, slashes merged, dot
 * segments resolved into REQUEST_FILENAME and REQUEST_BASENAME, and that
 * path %-decoded (an encoded '/' kept) plus the raw query into
 * REQUEST_URI. Returns 0, or -1 where httpd would refuse the request (a
 * path above the root, a bad or NUL escape); the variables are set anyway. */
int seccoll_server_path(struct seccoll *c);

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

/* A multipart/form-data body (ModSecurity's multipart processor, 2.9):
 * form fields into ARGS_POST, file parts into SC_FILES / SC_FILES_SIZES,
 * every part's header lines into SC_PART_HEADERS, and mp_flags. CT is the
 * request's Content-Type value. Returns 0, or -1 (mp_error says why) for a
 * body ModSecurity refuses; then no field reaches ARGS_POST. */
#define SC_MULTIPART_LINE 4096
int seccoll_multipart_body(struct seccoll *c, const char *ct, size_t ctlen, const char *body, size_t len);

/* An XML body (ModSecurity's XML processor, secxml.c): parsed without
 * network access, external DTDs or entity expansion; each of the NXPATHS
 * expressions evaluated, every node's text content into SC_XML under the
 * expression. Returns 0, or -1 for a body that is not well-formed XML. */
int seccoll_xml_body(struct seccoll *c, const char *body, size_t len, const char *const *xpaths, size_t nxpaths);

/* A multipart variable (enum sl_var MULTIPART_*) as ModSecurity reports
 * it: 0 or 1. MULTIPART_STRICT_ERROR is any of the strict flags. */
int seccoll_multipart_flag(const struct seccoll *c, int sl_var);

/* Append a NAME=VALUE pair to list INTO (both copied into the arena). */
void seccoll_add(struct seccoll *c, enum sc_list_id into, const char *name, size_t nlen, const char *value, size_t vlen);

/* ModSecurity's argument splitter: SEP-separated name=value pairs, each
 * half URL-decoded ('+' is a space, bad escapes stay and are counted);
 * a pair without '=' has an empty value, empty names are kept. */
void seccoll_parse_args(struct seccoll *c, enum sc_list_id into, const char *s, size_t len, char sep);

static inline const char *sc_str(const struct seccoll *c, uint32_t off)
{
	return c->arena.data + off;
}

#endif
