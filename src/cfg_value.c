/* Config values: the pure value parsers (durations, sizes, addresses), the
 * load's error sink with its key positions, and the pass 3 converters every
 * config section shares (integers, durations, sizes, strings, names,
 * addresses, booleans, words, TLS versions). The passes themselves are
 * described in cfg.c; the declarations shared by the cfg files are in
 * cfg-int.h. */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <arpa/inet.h>
#include <netdb.h>

#include "cfg.h"
#include "cfg-int.h"

#define CFG_ERRORS_MAX 30       /* report at most this many errors... */
#define CFG_ERRORS_KEEP 512     /* ...chosen (by position) among the first of these */

/* ------------------------------------------------------------------------ */
/* Pure value parsers                                                        */

/* Parses a run of decimal digits at *S into *V, advancing *S. Returns -1 when
 * there is no digit or the value overflows uint64_t. */
static int parse_digits(const char **s, uint64_t *v)
{
	const char *p = *s;
	uint64_t n = 0;

	if (!isdigit((unsigned char)*p))
		return -1;
	for (; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (n > (UINT64_MAX - d) / 10)
			return -1;
		n = n * 10 + d;
	}
	*s = p;
	*v = n;
	return 0;
}

int cfg_parse_duration(const char *s, uint32_t *ms)
{
	uint64_t n, mult;

	if (s == NULL || parse_digits(&s, &n) < 0)
		return -1;
	if (strcmp(s, "") == 0 || strcmp(s, "ms") == 0)
		mult = 1;
	else if (strcmp(s, "s") == 0)
		mult = 1000;
	else if (strcmp(s, "m") == 0)
		mult = 60 * 1000;
	else if (strcmp(s, "h") == 0)
		mult = 60 * 60 * 1000;
	else
		return -1;
	if (n > UINT32_MAX / mult)
		return -1;
	*ms = (uint32_t)(n * mult);
	return 0;
}

int cfg_parse_size(const char *s, uint64_t *bytes)
{
	uint64_t n;
	unsigned shift;

	if (s == NULL || parse_digits(&s, &n) < 0)
		return -1;
	switch (*s) {
	case '\0': shift = 0; break;
	case 'k': case 'K': shift = 10; break;
	case 'm': case 'M': shift = 20; break;
	case 'g': case 'G': shift = 30; break;
	default: return -1;
	}
	if (shift != 0 && s[1] != '\0')
		return -1;
	if (n > (UINT64_MAX >> shift))
		return -1;
	*bytes = n << shift;
	return 0;
}

/* Resolves HOST (no brackets, no port) into SS. Numeric forms are tried
 * first; only names that cannot be numeric go to the resolver. When a name
 * resolves to several addresses the first IPv4 one wins, so "localhost"
 * means 127.0.0.1 regardless of /etc/hosts ordering. */
static int addr_resolve(const char *host, int v6only, struct sockaddr_storage *ss,
			socklen_t *len)
{
	struct addrinfo hints, *res = NULL, *ai, *pick = NULL;
	struct sockaddr_in *sin = (struct sockaddr_in *)ss;
	const char *p;

	if (!v6only && strcmp(host, "*") == 0) {
		sin->sin_family = AF_INET;
		sin->sin_addr.s_addr = htonl(INADDR_ANY);
		*len = sizeof(*sin);
		return 0;
	}
	if (!v6only && inet_pton(AF_INET, host, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		*len = sizeof(*sin);
		return 0;
	}
	/* "1.2.3" or "010.1.1.1" would be accepted by getaddrinfo's inet_aton
	 * rules with a surprising meaning: refuse digits-and-dots that
	 * inet_pton rejected, and anything with blanks. */
	for (p = host; *p && (isdigit((unsigned char)*p) || *p == '.'); p++)
		;
	if (*p == '\0')
		return -1;
	for (p = host; *p; p++)
		if (isspace((unsigned char)*p) || iscntrl((unsigned char)*p))
			return -1;

	memset(&hints, 0, sizeof(hints));
	hints.ai_socktype = SOCK_STREAM;
	if (v6only) {
		/* Bracketed: a numeric IPv6 address (scope ids allowed). */
		hints.ai_family = AF_INET6;
		hints.ai_flags = AI_NUMERICHOST;
	} else {
		hints.ai_family = AF_UNSPEC;
	}
	if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
		return v6only ? -1 : -2;
	for (ai = res; ai != NULL; ai = ai->ai_next) {
		if (ai->ai_family == AF_INET) {
			pick = ai;
			break;
		}
		if (ai->ai_family == AF_INET6 && pick == NULL)
			pick = ai;
	}
	if (pick == NULL || pick->ai_addrlen > sizeof(*ss)) {
		freeaddrinfo(res);
		return -1;
	}
	memcpy(ss, pick->ai_addr, pick->ai_addrlen);
	*len = pick->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

/* cfg_parse_addr() with a reason: -1 malformed, -2 host did not resolve. */
static int addr_parse(const char *s, struct cfg_addr *out)
{
	char host[256];
	const char *port, *end;
	size_t hlen, slen;
	uint64_t pnum;
	int v6 = 0, rc;

	if (s == NULL)
		return -1;
	slen = strlen(s);
	if (slen == 0 || slen >= sizeof(out->text))
		return -1;
	if (s[0] == '[') {
		end = strchr(s, ']');
		if (end == NULL || end[1] != ':')
			return -1;
		hlen = (size_t)(end - s - 1);
		memcpy(host, s + 1, hlen); /* hlen < slen < sizeof(host) */
		port = end + 2;
		v6 = 1;
	} else {
		end = strrchr(s, ':');
		if (end == NULL)
			return -1;
		hlen = (size_t)(end - s);
		if (memchr(s, ':', hlen) != NULL)
			return -1; /* IPv6 without brackets: port is ambiguous */
		memcpy(host, s, hlen);
		port = end + 1;
	}
	host[hlen] = '\0';
	if (hlen == 0)
		return -1;
	if (parse_digits(&port, &pnum) < 0 || *port != '\0' || pnum < 1 || pnum > 65535)
		return -1;

	memset(out, 0, sizeof(*out));
	rc = addr_resolve(host, v6, &out->ss, &out->len);
	if (rc < 0) {
		memset(out, 0, sizeof(*out));
		return rc;
	}
	if (out->ss.ss_family == AF_INET)
		((struct sockaddr_in *)&out->ss)->sin_port = htons((uint16_t)pnum);
	else
		((struct sockaddr_in6 *)&out->ss)->sin6_port = htons((uint16_t)pnum);
	memcpy(out->text, s, slen + 1);
	return 0;
}

int cfg_parse_addr(const char *s, struct cfg_addr *out)
{
	return addr_parse(s, out) < 0 ? -1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Error sink and key positions                                              */

/* One error is one line: control bytes a message quotes from the file (a
 * value or key with a newline) are escaped, so they cannot start lines
 * of their own in `sluice -t` output or the reload log, which splits the
 * report on newlines. */
static void err_escape(const char *in, char *out, size_t cap)
{
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < cap; p++) {
		if (*p == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else if (*p == '\r') {
			out[o++] = '\\';
			out[o++] = 'r';
		} else if (*p < 0x20 || *p == 0x7f) {
			o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
		} else {
			out[o++] = (char)*p;
		}
	}
	out[o] = '\0';
}

static void err_vadd(struct cfg_load *ld, unsigned line, unsigned col, const char *fmt,
		     va_list ap)
{
	char raw[1024], text[1024];
	struct cfg_err *e;

	if (ld->nerrs >= CFG_ERRORS_KEEP) {
		ld->ndropped++;
		return;
	}
	vsnprintf(raw, sizeof(raw), fmt, ap);
	err_escape(raw, text, sizeof(text));
	if (ld->nerrs == ld->caperrs) {
		size_t ncap = ld->caperrs ? ld->caperrs * 2 : 16;
		e = realloc(ld->errs, ncap * sizeof(*e));
		if (e == NULL) {
			ld->oom = 1;
			return;
		}
		ld->errs = e;
		ld->caperrs = ncap;
	}
	e = &ld->errs[ld->nerrs];
	e->text = strdup(text);
	if (e->text == NULL) {
		ld->oom = 1;
		return;
	}
	e->line = line;
	e->col = col;
	e->seq = (unsigned)ld->nerrs++;
}

__attribute__((format(printf, 4, 5)))
void cfg_err_add(struct cfg_load *ld, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vadd(ld, line, col, fmt, ap);
	va_end(ap);
}

/* "FILE:LINE:COL: KEY: message". An empty KEY is the document itself. */
__attribute__((format(printf, 5, 6)))
void cfg_err_pos(struct cfg_load *ld, unsigned line, unsigned col, const char *key,
		 const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cfg_err_add(ld, line, col, "%s:%u:%u: %s: %s", ld->file, line, col,
		    key[0] != '\0' ? key : "(root)", msg);
}

static int err_cmp(const void *a, const void *b)
{
	const struct cfg_err *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Writes the recorded errors, in file order, into ERR and frees them.
 * Returns 1 when anything went wrong, 0 on success. */
int cfg_err_flush(struct cfg_load *ld, char *err, size_t errlen)
{
	size_t i, used = 0;
	int w, failed;

	if (errlen > 0)
		err[0] = '\0';
	if (ld->oom)
		cfg_err_add(ld, 0, 0, "%s: out of memory", ld->file);
	failed = ld->oom || ld->nerrs > 0;
	if (ld->nerrs > 0)
		qsort(ld->errs, ld->nerrs, sizeof(*ld->errs), err_cmp);
	for (i = 0; i < ld->nerrs; i++) {
		if (i < CFG_ERRORS_MAX && used + 1 < errlen) {
			w = snprintf(err + used, errlen - used, "%s%s", i ? "\n" : "",
				     ld->errs[i].text);
			if (w > 0)
				used += (size_t)w < errlen - used ? (size_t)w : errlen - used - 1;
		} else if (i == CFG_ERRORS_MAX && used + 1 < errlen) {
			w = snprintf(err + used, errlen - used, "\n%s: %zu more errors not shown",
				     ld->file, ld->nerrs - i + ld->ndropped);
			if (w > 0)
				used += (size_t)w < errlen - used ? (size_t)w : errlen - used - 1;
		}
		free(ld->errs[i].text);
	}
	free(ld->errs);
	ld->errs = NULL;
	ld->nerrs = ld->caperrs = 0;
	return failed;
}

struct cfg_pos *cfg_pos_find(const struct cfg_load *ld, const char *path)
{
	size_t i;

	for (i = 0; i < ld->npos; i++)
		if (strcmp(ld->pos[i].path, path) == 0)
			return &ld->pos[i];
	return NULL;
}

/* Position of PATH, or of its nearest recorded ancestor (a key inside an
 * aliased node has no position of its own: the alias is the best answer).
 * Falls back to 1:1. */
void cfg_pos_lookup(const struct cfg_load *ld, const char *path, int at,
		    unsigned *line, unsigned *col)
{
	char buf[CFG_PATH_MAX];
	struct cfg_pos *p;
	char *cut;

	snprintf(buf, sizeof(buf), "%s", path);
	for (;;) {
		p = cfg_pos_find(ld, buf);
		if (p != NULL) {
			*line = at == AT_KEY ? p->kline : p->vline;
			*col = at == AT_KEY ? p->kcol : p->vcol;
			return;
		}
		at = AT_VALUE; /* an ancestor: point into its value */
		cut = buf + strlen(buf);
		while (cut > buf && cut[-1] != '.' && cut[-1] != '[')
			cut--;
		if (cut == buf)
			break;
		cut[-1] = '\0';
	}
	p = cfg_pos_find(ld, ""); /* the root node */
	*line = p != NULL ? p->vline : 1;
	*col = p != NULL ? p->vcol : 1;
}

/* Reports "FILE:LINE:COL: PATH: message", positioned at PATH's key or
 * value. An empty PATH is the document itself. */
__attribute__((format(printf, 4, 5)))
void cfg_err_at(struct cfg_load *ld, const char *path, int at, const char *fmt, ...)
{
	char msg[512];
	unsigned line, col;
	va_list ap;

	if (ld->nerrs >= CFG_ERRORS_KEEP) {
		ld->ndropped++; /* spare the position lookup */
		return;
	}
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	cfg_pos_lookup(ld, path, at, &line, &col);
	cfg_err_pos(ld, line, col, path, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* Pass 3: conversion with defaults and range checks                         */

int cfg_conv_nonempty(struct cfg_load *ld, const char *path, const char *s)
{
	if (s[0] != '\0')
		return 0;
	cfg_err_at(ld, path, AT_VALUE, "empty value");
	return -1;
}

void cfg_conv_uint(struct cfg_load *ld, const char *path, const char *s,
		   uint32_t min, uint32_t max, uint32_t *out)
{
	const char *p = s;
	uint64_t v;

	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (parse_digits(&p, &v) < 0 || *p != '\0') {
		for (p = s; isdigit((unsigned char)*p); p++)
			;
		if (*p == '\0') /* all digits: overflow */
			cfg_err_at(ld, path, AT_VALUE, "too large (at most %" PRIu32 ")", max);
		else
			cfg_err_at(ld, path, AT_VALUE, "expected an integer, got \"%.40s\"", s);
		return;
	}
	if (v < min || v > max) {
		if (max == UINT32_MAX)
			cfg_err_at(ld, path, AT_VALUE, "must be at least %" PRIu32, min);
		else
			cfg_err_at(ld, path, AT_VALUE, "%" PRIu64 " is out of range (%" PRIu32
				   "..%" PRIu32 ")", v, min, max);
		return;
	}
	*out = (uint32_t)v;
}

void cfg_conv_duration(struct cfg_load *ld, const char *path, const char *s,
		       uint32_t min, uint32_t *out)
{
	uint32_t v;

	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (cfg_parse_duration(s, &v) < 0) {
		cfg_err_at(ld, path, AT_VALUE,
			   "bad duration \"%.40s\" (expected an integer with optional unit "
			   "ms, s, m or h, e.g. 150ms, 2s; at most 49 days)", s);
		return;
	}
	if (v < min) {
		cfg_err_at(ld, path, AT_VALUE, "must be at least %" PRIu32 "ms", min);
		return;
	}
	*out = v;
}

void cfg_conv_size(struct cfg_load *ld, const char *path, const char *s,
		   uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (cfg_parse_size(s, &v) < 0) {
		cfg_err_at(ld, path, AT_VALUE,
			   "bad size \"%.40s\" (expected an integer with optional unit "
			   "k, m or g, e.g. 512, 16k, 4m)", s);
		return;
	}
	if (v < min) {
		cfg_err_at(ld, path, AT_VALUE, "must be at least %" PRIu64, min);
		return;
	}
	if (v > max) {
		cfg_err_at(ld, path, AT_VALUE, "%" PRIu64 " is too large (at most %" PRIu64 ")",
			   v, max);
		return;
	}
	*out = v;
}

void cfg_conv_size32(struct cfg_load *ld, const char *path, const char *s, uint32_t *out)
{
	uint64_t v = *out;

	cfg_conv_size(ld, path, s, 1, UINT32_MAX, &v);
	*out = (uint32_t)v;
}

void cfg_conv_str(struct cfg_load *ld, const char *path, const char *s, int allow_empty,
		  char *dst, size_t dstlen)
{
	if (s == NULL)
		return;
	if (!allow_empty && cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (strlen(s) >= dstlen) {
		cfg_err_at(ld, path, AT_VALUE, "too long (at most %zu bytes)", dstlen - 1);
		return;
	}
	memcpy(dst, s, strlen(s) + 1);
}

/* Names appear in logs, stats and the admin interface: keep them to one
 * unambiguous token. */
void cfg_conv_name(struct cfg_load *ld, const char *path, const char *s, char *dst)
{
	const char *p;

	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	for (p = s; *p; p++) {
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') {
			cfg_err_at(ld, path, AT_VALUE, "bad name \"%.40s\" (use letters, digits, "
				   "'_', '-' and '.')", s);
			return;
		}
	}
	cfg_conv_str(ld, path, s, 0, dst, CFG_NAME_MAX);
}

void cfg_conv_addr(struct cfg_load *ld, const char *path, const char *s,
		   struct cfg_addr *out)
{
	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	switch (addr_parse(s, out)) {
	case 0:
		break;
	case -2:
		cfg_err_at(ld, path, AT_VALUE, "cannot resolve host in \"%.80s\"", s);
		break;
	default:
		cfg_err_at(ld, path, AT_VALUE, "bad address \"%.80s\" (expected host:port, "
			   "[ipv6]:port or *:port, port 1..65535)", s);
		break;
	}
}

/* YAML 1.1 spellings of a boolean, as libyaml hands them over. */
void cfg_conv_bool(struct cfg_load *ld, const char *path, const char *s, int *out)
{
	static const char *const yes[] = { "on", "true", "yes" };
	static const char *const no[] = { "off", "false", "no" };
	size_t i;

	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return;
		}
	}
	cfg_err_at(ld, path, AT_VALUE, "expected on or off (or true/false, yes/no), got \"%.40s\"", s);
}

/* One of WORDS (NULL-terminated) or an error listing them; returns the
 * index, or -1 (absent or bad: *OUT untouched). */
int cfg_conv_word(struct cfg_load *ld, const char *path, const char *s, const char *const *words)
{
	char list[160] = "";
	if (s == NULL)
		return -1;
	for (int i = 0; words[i]; i++) {
		if (strcmp(s, words[i]) == 0)
			return i;
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
			 i ? (words[i + 1] ? ", " : " or ") : "", words[i]);
	}
	cfg_err_at(ld, path, AT_VALUE, "unknown value \"%.40s\" (expected %s)", s, list);
	return -1;
}

void cfg_conv_tls_version(struct cfg_load *ld, const char *path, const char *s, int *out)
{
	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (strcmp(s, "TLSv1.2") == 0)
		*out = 0x0303;
	else if (strcmp(s, "TLSv1.3") == 0)
		*out = 0x0304;
	else
		cfg_err_at(ld, path, AT_VALUE, "unknown TLS version \"%.40s\" (expected TLSv1.2 or "
			   "TLSv1.3)", s);
}
