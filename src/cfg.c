/* Configuration loading and validation.
 *
 * cfg_load() works in four passes over one in-memory copy of the file:
 *
 *  1. scan: libyaml's event parser walks the document once and records, for
 *     every key and sequence entry, its dotted path ("backends[0].name") and
 *     the line/column of the key and of the value. This pass also reports
 *     YAML syntax errors, duplicate keys and non-scalar keys, which libcyaml
 *     either reports without a position or not at all.
 *  2. load: libcyaml fills an intermediate tree (struct y_*) in which every
 *     leaf is a string. The schema rejects unknown keys, wrong node types,
 *     missing required keys and bad sequence lengths. libcyaml only logs
 *     those errors; cyaml_log_capture() collects the log and
 *     cyaml_error_report() turns the message and its backtrace into our
 *     "FILE:LINE:COL: KEY: message" form, using the pass 1 positions.
 *  3. convert: strings become numbers, durations, sizes and addresses, with
 *     defaults for absent keys and range checks.
 *  4. link: name uniqueness, listener -> backend references.
 *
 * Passes 3 and 4 report every error they find, not only the first one.
 * Leaves stay strings in pass 2 so that "2s" and "2000" are both durations
 * and every bad value gets the same kind of message, with a position. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netdb.h>

#include <cyaml/cyaml.h>
#include <yaml.h>

#include "cfg.h"
#include "inspect.h"
#include "netaddr.h"
#include "privs.h"

#define CFG_FILE_MAX (4u << 20) /* refuse larger files: surely not a config */
#define CFG_ERRORS_MAX 30       /* report at most this many errors... */
#define CFG_ERRORS_KEEP 512     /* ...chosen (by position) among the first of these */
#define CFG_DEPTH_MAX 32        /* deepest nesting the scanner accepts */
#define CFG_PATH_MAX 256        /* longest dotted key path */
#define CFG_WORKERS_MAX 128
#define CFG_TLS_CERTS_MAX 64    /* certificates per TLS listener */

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
/* Intermediate tree and its libcyaml schema: every leaf is a string, NULL
 * when the key is absent. Sequence counts follow libcyaml's <member>_count
 * naming. */

struct y_health {
	char *path, *interval, *timeout, *expect_status, *rise, *fall;
};

struct y_server {
	char *name, *address, *max_connections, *weight, *proxy_protocol;
	char **proxy_tlvs;
	unsigned proxy_tlvs_count;
};

struct y_forward {
	char *x_forwarded_for, *x_forwarded_proto, *x_forwarded_host, *x_forwarded_port;
	char *forwarded, *x_real_ip, *wl_proxy_ssl, *wl_proxy_client_ip;
	char *wl_proxy_client_port, *wl_proxy_client_cert;
};

struct y_backend {
	char *name, *balance, *queue_timeout, *queue_max, *queue_abort_on_close, *idle_max;
	char *idle_timeout, *connect_timeout, *response_timeout;
	struct y_health *health_check;
	struct y_backend_tls *tls;
	struct y_forward *forward;
	struct y_server *servers;
	unsigned servers_count;
};

struct y_backend_tls {
	char *ca, *verify, *sni, *cert, *key, *min_version, *max_version, *session_reuse;
};

struct y_tls_cert {
	char *cert, *key, *passphrase;
};

struct y_tls {
	struct y_tls_cert *certificates;
	unsigned certificates_count;
	char *min_version, *max_version, *ciphers, *ciphersuites, *curves;
	char *tickets, *ticket_keys, *session_cache, *handshake_timeout;
	char *client_auth, *client_ca, *verify_depth;
};

struct y_budget {
	char *instructions, *time, *wall_time;
};

struct y_inspect {
	char *script, *body, *body_overflow, *on_error, *mode;
	struct y_budget *budget;
};

struct y_listener {
	char *name, *address, *backlog, *backend, *headers_with_underscores;
	struct y_tls *tls;
	struct y_inspect *inspect;
	char **accept_proxy_from;
	unsigned accept_proxy_from_count;
	char **trusted_forwarders;
	unsigned trusted_forwarders_count;
};

struct y_timeouts {
	char *client_header, *client_keepalive, *client_body, *client_send, *drain;
};

struct y_limits {
	char *max_request_line, *max_header_size, *max_headers;
	char *max_body_size, *max_connections;
};

struct y_admin {
	char *address, *token;
};

struct y_root {
	char *workers, *error_log, *access_log, *access_log_format, *pid_file;
	char *syslog_facility;
	char *user, *group;
	char *inspection, *lua_memory_max;
	struct y_admin *admin;
	struct y_timeouts *timeouts;
	struct y_limits *limits;
	struct y_listener *listeners;
	unsigned listeners_count;
	struct y_backend *backends;
	unsigned backends_count;
};

#define OPT CYAML_FLAG_OPTIONAL
#define REQ CYAML_FLAG_DEFAULT
#define F_STR(key, flags, type, member) \
	CYAML_FIELD_STRING_PTR(key, flags, type, member, 0, CYAML_UNLIMITED)

/* An optional list of strings. Any length is accepted here, even 0, so that
 * an empty list and bad entries get pass 3's messages. */
static const cyaml_schema_value_t y_str_schema = {
	CYAML_VALUE_STRING(CYAML_FLAG_POINTER, char, 0, CYAML_UNLIMITED),
};
#define F_STRS(key, type, member) \
	CYAML_FIELD_SEQUENCE(key, CYAML_FLAG_POINTER | OPT, type, member, &y_str_schema, \
			     0, CYAML_UNLIMITED)

static const cyaml_schema_field_t y_health_fields[] = {
	F_STR("path", OPT, struct y_health, path),
	F_STR("interval", OPT, struct y_health, interval),
	F_STR("timeout", OPT, struct y_health, timeout),
	F_STR("expect_status", OPT, struct y_health, expect_status),
	F_STR("rise", OPT, struct y_health, rise),
	F_STR("fall", OPT, struct y_health, fall),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_server_fields[] = {
	F_STR("name", OPT, struct y_server, name),
	F_STR("address", REQ, struct y_server, address),
	F_STR("max_connections", OPT, struct y_server, max_connections),
	F_STR("weight", OPT, struct y_server, weight),
	F_STR("proxy_protocol", OPT, struct y_server, proxy_protocol),
	F_STRS("proxy_tlvs", struct y_server, proxy_tlvs),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_server_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_server, y_server_fields),
};

static const cyaml_schema_field_t y_backend_tls_fields[] = {
	F_STR("ca", OPT, struct y_backend_tls, ca),
	F_STR("verify", OPT, struct y_backend_tls, verify),
	F_STR("sni", OPT, struct y_backend_tls, sni),
	F_STR("cert", OPT, struct y_backend_tls, cert),
	F_STR("key", OPT, struct y_backend_tls, key),
	F_STR("min_version", OPT, struct y_backend_tls, min_version),
	F_STR("max_version", OPT, struct y_backend_tls, max_version),
	F_STR("session_reuse", OPT, struct y_backend_tls, session_reuse),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_forward_fields[] = {
	F_STR("x_forwarded_for", OPT, struct y_forward, x_forwarded_for),
	F_STR("x_forwarded_proto", OPT, struct y_forward, x_forwarded_proto),
	F_STR("x_forwarded_host", OPT, struct y_forward, x_forwarded_host),
	F_STR("x_forwarded_port", OPT, struct y_forward, x_forwarded_port),
	F_STR("forwarded", OPT, struct y_forward, forwarded),
	F_STR("x_real_ip", OPT, struct y_forward, x_real_ip),
	F_STR("wl_proxy_ssl", OPT, struct y_forward, wl_proxy_ssl),
	F_STR("wl_proxy_client_ip", OPT, struct y_forward, wl_proxy_client_ip),
	F_STR("wl_proxy_client_port", OPT, struct y_forward, wl_proxy_client_port),
	F_STR("wl_proxy_client_cert", OPT, struct y_forward, wl_proxy_client_cert),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_backend_fields[] = {
	F_STR("name", REQ, struct y_backend, name),
	F_STR("balance", OPT, struct y_backend, balance),
	F_STR("queue_timeout", OPT, struct y_backend, queue_timeout),
	F_STR("queue_max", OPT, struct y_backend, queue_max),
	F_STR("queue_abort_on_close", OPT, struct y_backend, queue_abort_on_close),
	F_STR("idle_max", OPT, struct y_backend, idle_max),
	F_STR("idle_timeout", OPT, struct y_backend, idle_timeout),
	F_STR("connect_timeout", OPT, struct y_backend, connect_timeout),
	F_STR("response_timeout", OPT, struct y_backend, response_timeout),
	CYAML_FIELD_MAPPING_PTR("health_check", OPT, struct y_backend, health_check,
				y_health_fields),
	CYAML_FIELD_MAPPING_PTR("tls", OPT, struct y_backend, tls, y_backend_tls_fields),
	CYAML_FIELD_MAPPING_PTR("forward", OPT, struct y_backend, forward, y_forward_fields),
	CYAML_FIELD_SEQUENCE("servers", CYAML_FLAG_POINTER, struct y_backend, servers,
			     &y_server_schema, 1, CFG_MAX_SERVERS),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_backend_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_backend, y_backend_fields),
};

static const cyaml_schema_field_t y_tls_cert_fields[] = {
	F_STR("cert", REQ, struct y_tls_cert, cert),
	F_STR("key", OPT, struct y_tls_cert, key),
	F_STR("passphrase", OPT, struct y_tls_cert, passphrase),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_tls_cert_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_tls_cert, y_tls_cert_fields),
};

static const cyaml_schema_field_t y_tls_fields[] = {
	CYAML_FIELD_SEQUENCE("certificates", CYAML_FLAG_POINTER, struct y_tls, certificates,
			     &y_tls_cert_schema, 1, CFG_TLS_CERTS_MAX),
	F_STR("min_version", OPT, struct y_tls, min_version),
	F_STR("max_version", OPT, struct y_tls, max_version),
	F_STR("ciphers", OPT, struct y_tls, ciphers),
	F_STR("ciphersuites", OPT, struct y_tls, ciphersuites),
	F_STR("curves", OPT, struct y_tls, curves),
	F_STR("tickets", OPT, struct y_tls, tickets),
	F_STR("ticket_keys", OPT, struct y_tls, ticket_keys),
	F_STR("session_cache", OPT, struct y_tls, session_cache),
	F_STR("handshake_timeout", OPT, struct y_tls, handshake_timeout),
	F_STR("client_auth", OPT, struct y_tls, client_auth),
	F_STR("client_ca", OPT, struct y_tls, client_ca),
	F_STR("verify_depth", OPT, struct y_tls, verify_depth),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_budget_fields[] = {
	F_STR("instructions", OPT, struct y_budget, instructions),
	F_STR("time", OPT, struct y_budget, time),
	F_STR("wall_time", OPT, struct y_budget, wall_time),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_inspect_fields[] = {
	F_STR("script", REQ, struct y_inspect, script),
	F_STR("body", OPT, struct y_inspect, body),
	F_STR("body_overflow", OPT, struct y_inspect, body_overflow),
	F_STR("on_error", OPT, struct y_inspect, on_error),
	F_STR("mode", OPT, struct y_inspect, mode),
	CYAML_FIELD_MAPPING_PTR("budget", OPT, struct y_inspect, budget, y_budget_fields),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_listener_fields[] = {
	F_STR("name", OPT, struct y_listener, name),
	F_STR("address", REQ, struct y_listener, address),
	F_STR("backlog", OPT, struct y_listener, backlog),
	F_STR("backend", REQ, struct y_listener, backend),
	CYAML_FIELD_MAPPING_PTR("tls", OPT, struct y_listener, tls, y_tls_fields),
	CYAML_FIELD_MAPPING_PTR("inspect", OPT, struct y_listener, inspect, y_inspect_fields),
	F_STRS("accept_proxy_from", struct y_listener, accept_proxy_from),
	F_STRS("trusted_forwarders", struct y_listener, trusted_forwarders),
	F_STR("headers_with_underscores", OPT, struct y_listener, headers_with_underscores),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_listener_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_listener, y_listener_fields),
};

static const cyaml_schema_field_t y_timeouts_fields[] = {
	F_STR("client_header", OPT, struct y_timeouts, client_header),
	F_STR("client_keepalive", OPT, struct y_timeouts, client_keepalive),
	F_STR("client_body", OPT, struct y_timeouts, client_body),
	F_STR("client_send", OPT, struct y_timeouts, client_send),
	F_STR("drain", OPT, struct y_timeouts, drain),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_limits_fields[] = {
	F_STR("max_request_line", OPT, struct y_limits, max_request_line),
	F_STR("max_header_size", OPT, struct y_limits, max_header_size),
	F_STR("max_headers", OPT, struct y_limits, max_headers),
	F_STR("max_body_size", OPT, struct y_limits, max_body_size),
	F_STR("max_connections", OPT, struct y_limits, max_connections),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_admin_fields[] = {
	F_STR("address", OPT, struct y_admin, address),
	F_STR("token", OPT, struct y_admin, token),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_root_fields[] = {
	F_STR("workers", OPT, struct y_root, workers),
	F_STR("error_log", OPT, struct y_root, error_log),
	F_STR("access_log", OPT, struct y_root, access_log),
	F_STR("access_log_format", OPT, struct y_root, access_log_format),
	CYAML_FIELD_MAPPING_PTR("admin", OPT, struct y_root, admin, y_admin_fields),
	F_STR("inspection", OPT, struct y_root, inspection),
	F_STR("lua_memory_max", OPT, struct y_root, lua_memory_max),
	F_STR("pid_file", OPT, struct y_root, pid_file),
	F_STR("syslog_facility", OPT, struct y_root, syslog_facility),
	F_STR("user", OPT, struct y_root, user),
	F_STR("group", OPT, struct y_root, group),
	CYAML_FIELD_MAPPING_PTR("timeouts", OPT, struct y_root, timeouts, y_timeouts_fields),
	CYAML_FIELD_MAPPING_PTR("limits", OPT, struct y_root, limits, y_limits_fields),
	CYAML_FIELD_SEQUENCE("listeners", CYAML_FLAG_POINTER, struct y_root, listeners,
			     &y_listener_schema, 1, CFG_MAX_LISTENERS),
	CYAML_FIELD_SEQUENCE("backends", CYAML_FLAG_POINTER, struct y_root, backends,
			     &y_backend_schema, 1, CFG_MAX_BACKENDS),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_root_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct y_root, y_root_fields),
};

/* ------------------------------------------------------------------------ */
/* Load context: error sink and key positions                                */

/* Where a key path sits in the file; lines and columns are 1-based. */
struct cfg_pos {
	char *path;
	unsigned kline, kcol;   /* the key (for sequence entries: the entry) */
	unsigned vline, vcol;   /* start of the value node */
	int vempty;             /* value is an empty plain scalar ("key:") */
};

/* One error, kept until the end of cfg_load() so that the report can be
 * sorted by position. Line 0 is for errors about the file as a whole. */
struct cfg_err {
	unsigned line, col, seq;
	char *text;             /* "FILE:LINE:COL: KEY: message" */
};

struct cfg_load {
	const char *file;
	struct cfg_err *errs;
	size_t nerrs, caperrs;
	size_t ndropped;        /* counted beyond CFG_ERRORS_KEEP, not recorded */
	int oom;                /* an allocation failed: the load fails */
	struct cfg_pos *pos;    /* pass 1 result, in document order */
	size_t npos, cappos;
	const char *data;       /* the file's bytes */
	size_t datalen;
	uint64_t lua_memory_max; /* for loading scripts as the workers will */
};

enum { AT_KEY, AT_VALUE };

/* A libyaml mark as the 1-based "line, column" argument pair. */
#define MARK(m) (unsigned)(m).line + 1, (unsigned)(m).column + 1

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
static void err_add(struct cfg_load *ld, unsigned line, unsigned col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	err_vadd(ld, line, col, fmt, ap);
	va_end(ap);
}

/* "FILE:LINE:COL: KEY: message". An empty KEY is the document itself. */
__attribute__((format(printf, 5, 6)))
static void err_pos(struct cfg_load *ld, unsigned line, unsigned col, const char *key,
		    const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err_add(ld, line, col, "%s:%u:%u: %s: %s", ld->file, line, col,
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
static int err_flush(struct cfg_load *ld, char *err, size_t errlen)
{
	size_t i, used = 0;
	int w, failed;

	if (errlen > 0)
		err[0] = '\0';
	if (ld->oom)
		err_add(ld, 0, 0, "%s: out of memory", ld->file);
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

static struct cfg_pos *pos_find(const struct cfg_load *ld, const char *path)
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
static void pos_lookup(const struct cfg_load *ld, const char *path, int at,
		       unsigned *line, unsigned *col)
{
	char buf[CFG_PATH_MAX];
	struct cfg_pos *p;
	char *cut;

	snprintf(buf, sizeof(buf), "%s", path);
	for (;;) {
		p = pos_find(ld, buf);
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
	p = pos_find(ld, ""); /* the root node */
	*line = p != NULL ? p->vline : 1;
	*col = p != NULL ? p->vcol : 1;
}

/* Reports "FILE:LINE:COL: PATH: message", positioned at PATH's key or
 * value. An empty PATH is the document itself. */
__attribute__((format(printf, 4, 5)))
static void err_at(struct cfg_load *ld, const char *path, int at, const char *fmt, ...)
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
	pos_lookup(ld, path, at, &line, &col);
	err_pos(ld, line, col, path, "%s", msg);
}

static int pos_add(struct cfg_load *ld, const char *path, const yaml_mark_t *key,
		   const yaml_event_t *val)
{
	struct cfg_pos *p;

	if (ld->npos == ld->cappos) {
		size_t ncap = ld->cappos ? ld->cappos * 2 : 64;
		p = realloc(ld->pos, ncap * sizeof(*p));
		if (p == NULL)
			return -1;
		ld->pos = p;
		ld->cappos = ncap;
	}
	p = &ld->pos[ld->npos];
	p->path = strdup(path);
	if (p->path == NULL)
		return -1;
	p->kline = (unsigned)key->line + 1;
	p->kcol = (unsigned)key->column + 1;
	p->vline = (unsigned)val->start_mark.line + 1;
	p->vcol = (unsigned)val->start_mark.column + 1;
	p->vempty = val->type == YAML_SCALAR_EVENT && val->data.scalar.length == 0 &&
		    val->data.scalar.plain_implicit;
	ld->npos++;
	return 0;
}

static void pos_free(struct cfg_load *ld)
{
	size_t i;

	for (i = 0; i < ld->npos; i++)
		free(ld->pos[i].path);
	free(ld->pos);
	ld->pos = NULL;
	ld->npos = ld->cappos = 0;
}

/* ------------------------------------------------------------------------ */
/* Pass 1: scan events, record positions, catch syntax errors and duplicates */

static int scan_next(struct cfg_load *ld, yaml_parser_t *parser, yaml_event_t *ev,
		     const char *path)
{
	if (yaml_parser_parse(parser, ev))
		return 0;
	if (parser->error == YAML_MEMORY_ERROR) {
		ld->oom = 1;
	} else if (parser->error == YAML_READER_ERROR) {
		/* Bad bytes or encoding: libyaml gives an offset, not a mark. */
		unsigned line = 1, col = 1;
		size_t i;
		for (i = 0; i < parser->problem_offset && i < ld->datalen; i++) {
			if (ld->data[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)ld->data[i] & 0xc0) != 0x80) {
				col++; /* count characters, not UTF-8 continuation bytes */
			}
		}
		err_pos(ld, line, col, path, "bad character: %s (byte 0x%02x)",
			parser->problem ? parser->problem : "unknown",
			(unsigned)parser->problem_value & 0xff);
	} else if (parser->context != NULL)
		err_pos(ld, MARK(parser->problem_mark), path,
			"syntax error: %s (%s at line %u, column %u)",
			parser->problem ? parser->problem : "unknown", parser->context,
			MARK(parser->context_mark));
	else
		err_pos(ld, MARK(parser->problem_mark), path, "syntax error: %s",
			parser->problem ? parser->problem : "unknown");
	return -1;
}

/* Path builders: DST (CFG_PATH_MAX bytes) = PARENT.KEY or PARENT[I].
 * Return -1, leaving DST unspecified, when the result would not fit. */
static int path_join(char *dst, const char *parent, const char *sep, const char *tail)
{
	size_t pl = strlen(parent), sl = strlen(sep), tl = strlen(tail);

	if (pl + sl + tl >= CFG_PATH_MAX)
		return -1;
	memmove(dst, parent, pl);
	memcpy(dst + pl, sep, sl);
	memcpy(dst + pl + sl, tail, tl + 1);
	return 0;
}

static int path_child(char *dst, const char *parent, const char *key)
{
	return path_join(dst, parent, parent[0] ? "." : "", key);
}

static int path_index(char *dst, const char *parent, unsigned i)
{
	char num[16];

	snprintf(num, sizeof(num), "[%u]", i);
	return path_join(dst, parent, "", num);
}

/* Consumes the node that EV starts (EV is deleted here), whose path is PATH.
 * Returns 0, or -1 after reporting an error. */
static int scan_node(struct cfg_load *ld, yaml_parser_t *parser, yaml_event_t *ev,
		     const char *path, unsigned depth)
{
	char child[CFG_PATH_MAX];
	yaml_event_t k, v;
	size_t first, i;
	unsigned idx;
	int type = ev->type;

	if (type != YAML_SEQUENCE_START_EVENT && type != YAML_MAPPING_START_EVENT) {
		yaml_event_delete(ev); /* scalar or alias: a leaf */
		return 0;
	}
	if (depth >= CFG_DEPTH_MAX) {
		err_pos(ld, MARK(ev->start_mark), path, "nested too deeply");
		yaml_event_delete(ev);
		return -1;
	}
	yaml_event_delete(ev);

	if (type == YAML_SEQUENCE_START_EVENT) {
		for (idx = 0;; idx++) {
			if (scan_next(ld, parser, &v, path) < 0)
				return -1;
			if (v.type == YAML_SEQUENCE_END_EVENT) {
				yaml_event_delete(&v);
				return 0;
			}
			if (path_index(child, path, idx) < 0) {
				err_pos(ld, MARK(v.start_mark), path, "nested too deeply");
				yaml_event_delete(&v);
				return -1;
			}
			if (pos_add(ld, child, &v.start_mark, &v) < 0) {
				ld->oom = 1;
				yaml_event_delete(&v);
				return -1;
			}
			if (scan_node(ld, parser, &v, child, depth + 1) < 0)
				return -1;
		}
	}

	/* Mapping: the direct children of this mapping are the entries added
	 * from FIRST on whose path is exactly PATH.key; checking only those
	 * keeps duplicate detection linear in the mapping size. */
	first = ld->npos;
	for (;;) {
		if (scan_next(ld, parser, &k, path) < 0)
			return -1;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			return 0;
		}
		if (k.type != YAML_SCALAR_EVENT) {
			err_pos(ld, MARK(k.start_mark), path, "keys must be plain scalars");
			yaml_event_delete(&k);
			return -1;
		}
		if (path_child(child, path, (const char *)k.data.scalar.value) < 0) {
			err_pos(ld, MARK(k.start_mark), path, "key too long");
			yaml_event_delete(&k);
			return -1;
		}
		for (i = first; i < ld->npos; i++) {
			if (strcmp(ld->pos[i].path, child) == 0) {
				err_pos(ld, MARK(k.start_mark), child,
					"duplicate key (first at line %u)", ld->pos[i].kline);
				yaml_event_delete(&k);
				return -1;
			}
		}
		if (scan_next(ld, parser, &v, child) < 0) {
			yaml_event_delete(&k);
			return -1;
		}
		if (pos_add(ld, child, &k.start_mark, &v) < 0) {
			ld->oom = 1;
			yaml_event_delete(&k);
			yaml_event_delete(&v);
			return -1;
		}
		yaml_event_delete(&k);
		if (scan_node(ld, parser, &v, child, depth + 1) < 0)
			return -1;
	}
}

/* Returns 0 when the file is well-formed YAML with a single document (or
 * none), else -1 after reporting. */
static int scan_file(struct cfg_load *ld, const char *data, size_t len)
{
	yaml_parser_t parser;
	yaml_event_t ev;
	int ndocs = 0, rc = -1;

	if (!yaml_parser_initialize(&parser)) {
		ld->oom = 1;
		return -1;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
	for (;;) {
		if (scan_next(ld, &parser, &ev, "") < 0)
			break;
		if (ev.type == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			rc = 0;
			break;
		}
		if (ev.type == YAML_DOCUMENT_START_EVENT && ++ndocs > 1) {
			err_pos(ld, MARK(ev.start_mark), "",
				"only one YAML document is allowed");
			yaml_event_delete(&ev);
			break;
		}
		if (ev.type == YAML_SEQUENCE_START_EVENT || ev.type == YAML_MAPPING_START_EVENT ||
		    ev.type == YAML_SCALAR_EVENT || ev.type == YAML_ALIAS_EVENT) {
			if (pos_add(ld, "", &ev.start_mark, &ev) < 0) {
				ld->oom = 1;
				yaml_event_delete(&ev);
				break;
			}
			if (scan_node(ld, &parser, &ev, "", 0) < 0)
				break;
			continue;
		}
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&parser);
	return rc;
}

/* ------------------------------------------------------------------------ */
/* Pass 2: libcyaml, with its log captured and translated                    */

struct cyaml_log_buf {
	char text[8192];
	size_t len;
};

static void cyaml_log_capture(cyaml_log_t level, void *ctx, const char *fmt, va_list args)
{
	struct cyaml_log_buf *lb = ctx;
	size_t room = sizeof(lb->text) - lb->len;
	int n;

	if (level < CYAML_LOG_ERROR || room <= 1)
		return;
	n = vsnprintf(lb->text + lb->len, room, fmt, args);
	if (n > 0)
		lb->len += (size_t)n < room ? (size_t)n : room - 1;
}

/* One backtrace line: "in mapping field 'K'", "in mapping" or
 * "in sequence entry 'N'" (N counts entries, so the index is N - 1). */
struct cy_frame {
	enum { FR_FIELD, FR_MAP, FR_SEQ } kind;
	char key[CFG_NAME_MAX];
	unsigned n;
	size_t line, col;
};

#define CY_FRAMES_MAX 16

static const char *cyaml_type_text(const char *t)
{
	if (strcmp(t, "STRING") == 0 || strcmp(t, "SCALAR") == 0)
		return "a scalar value";
	if (strcmp(t, "MAPPING") == 0 || strcmp(t, "MAPPING_START") == 0)
		return "a mapping";
	if (strcmp(t, "SEQUENCE") == 0 || strcmp(t, "SEQUENCE_START") == 0)
		return "a list";
	return t;
}

/* Reports libcyaml's error from its captured log LOG. The first "Load: "
 * line is the message; the backtrace lists the frames innermost first. The
 * dotted path is rebuilt from the frames and positioned with pass 1's
 * index, which is more precise than libcyaml's own marks (those are kept as
 * a fallback when the path is unknown). */
static void cyaml_error_report(struct cfg_load *ld, const char *log, cyaml_err_t rc)
{
	struct cy_frame fr[CY_FRAMES_MAX];
	char msg[256] = "", path[CFG_PATH_MAX] = "", key[CFG_PATH_MAX] = "", a[32], b[32];
	unsigned nfr = 0, skip = 0, u1, u2, i;
	const char *p, *eol;
	const struct cfg_pos *vp;
	int at = AT_VALUE, missing = 0, type_err = 0;

	for (p = log; *p; p = *eol ? eol + 1 : eol) {
		struct cy_frame *f = &fr[nfr];
		eol = strchr(p, '\n');
		if (eol == NULL)
			eol = p + strlen(p);
		if (strncmp(p, "Load: ", 6) == 0 && strncmp(p, "Load: Backtrace:", 16) != 0) {
			if (msg[0] == '\0')
				snprintf(msg, sizeof(msg), "%.*s", (int)(eol - p - 6), p + 6);
			continue;
		}
		if (nfr == CY_FRAMES_MAX)
			continue;
		f->line = f->col = 0;
		f->n = 0;
		if (sscanf(p, "  in mapping field '%63[^']' (line: %zu, column: %zu)", f->key,
			   &f->line, &f->col) >= 1) {
			f->kind = FR_FIELD;
			nfr++;
		} else if (sscanf(p, "  in sequence entry '%u' (line: %zu, column: %zu)", &f->n,
				  &f->line, &f->col) >= 1) {
			f->kind = FR_SEQ;
			nfr++;
		} else if (strncmp(p, "  in mapping", 12) == 0) {
			f->key[0] = '\0';
			if (sscanf(p, "  in mapping (line: %zu, column: %zu)", &f->line, &f->col) != 2)
				f->line = f->col = 0;
			f->kind = FR_MAP;
			nfr++;
		}
	}

	/* Say it our way; decide whether the innermost frame belongs in the
	 * path and whether a key name from the message must be appended. */
	if (sscanf(msg, "Unexpected key: %255[^\n]", key) == 1) {
		snprintf(msg, sizeof(msg), "unknown key");
		at = AT_KEY;
	} else if (sscanf(msg, "Missing required mapping field: %255[^\n]", key) == 1) {
		/* The innermost frame is the mapping being closed, labelled
		 * with whichever field it saw last: not part of the path. */
		snprintf(msg, sizeof(msg), "missing required key");
		skip = nfr > 0 && fr[0].kind != FR_SEQ;
		missing = 1;
	} else if (sscanf(msg, "Mapping field already seen: %255[^\n]", key) == 1) {
		snprintf(msg, sizeof(msg), "duplicate key");
		skip = nfr > 0 && fr[0].kind == FR_FIELD;
		at = AT_KEY;
	} else if (sscanf(msg, "Expecting %31[A-Z_], got event: %31[A-Z_]", a, b) == 2) {
		snprintf(msg, sizeof(msg), "expected %s, got %s", cyaml_type_text(a),
			 cyaml_type_text(b));
		type_err = 1;
	} else if (sscanf(msg, "Insufficient entries (%u of %u min)", &u1, &u2) == 2) {
		snprintf(msg, sizeof(msg), "needs at least %u entr%s", u2, u2 == 1 ? "y" : "ies");
		skip = nfr > 0 && fr[0].kind == FR_SEQ;
	} else if (sscanf(msg, "Excessive entries (%u max)", &u1) == 1) {
		snprintf(msg, sizeof(msg), "too many entries (at most %u)", u1);
		skip = nfr > 0 && fr[0].kind == FR_SEQ;
	} else if (sscanf(msg, "No anchor found for alias: '%200[^']'", key) == 1) {
		snprintf(msg, sizeof(msg), "undefined alias \"*%.200s\"", key);
		key[0] = '\0'; /* a value, not a key to append to the path */
	} else if (msg[0] == '\0') {
		snprintf(msg, sizeof(msg), "%s", cyaml_strerror(rc));
	}

	/* Frames are innermost first: build the path from the last one. */
	for (i = nfr; i > skip; i--) {
		const struct cy_frame *f = &fr[i - 1];
		char num[16];
		if (f->kind == FR_FIELD) {
			path_child(path, path, f->key);
		} else if (f->kind == FR_SEQ && f->n > 0) {
			snprintf(num, sizeof(num), "[%u]", f->n - 1);
			path_join(path, path, "", num);
		}
	}

	if (missing) {
		/* No position of its own: point at the mapping that lacks it. */
		unsigned line, col;
		pos_lookup(ld, path, AT_VALUE, &line, &col);
		path_child(path, path, key);
		err_pos(ld, line, col, path, "%s", msg);
		return;
	}
	if (key[0] != '\0')
		path_child(path, path, key);

	vp = pos_find(ld, path);
	if (type_err && vp != NULL && vp->vempty)
		snprintf(msg, sizeof(msg), "expected %s, got an empty value", cyaml_type_text(a));
	if (vp == NULL && nfr > 0 && fr[0].line > 0) {
		/* Not in the index (inside an alias, say): libcyaml's mark. */
		err_pos(ld, (unsigned)fr[0].line, (unsigned)fr[0].col, path, "%s", msg);
		return;
	}
	err_at(ld, path, at, "%s", msg);
}

/* ------------------------------------------------------------------------ */
/* Pass 3: conversion with defaults and range checks                         */

static int conv_nonempty(struct cfg_load *ld, const char *path, const char *s)
{
	if (s[0] != '\0')
		return 0;
	err_at(ld, path, AT_VALUE, "empty value");
	return -1;
}

static void conv_uint(struct cfg_load *ld, const char *path, const char *s,
		      uint32_t min, uint32_t max, uint32_t *out)
{
	const char *p = s;
	uint64_t v;

	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	if (parse_digits(&p, &v) < 0 || *p != '\0') {
		for (p = s; isdigit((unsigned char)*p); p++)
			;
		if (*p == '\0') /* all digits: overflow */
			err_at(ld, path, AT_VALUE, "too large (at most %" PRIu32 ")", max);
		else
			err_at(ld, path, AT_VALUE, "expected an integer, got \"%.40s\"", s);
		return;
	}
	if (v < min || v > max) {
		if (max == UINT32_MAX)
			err_at(ld, path, AT_VALUE, "must be at least %" PRIu32, min);
		else
			err_at(ld, path, AT_VALUE, "%" PRIu64 " is out of range (%" PRIu32
			       "..%" PRIu32 ")", v, min, max);
		return;
	}
	*out = (uint32_t)v;
}

static void conv_duration(struct cfg_load *ld, const char *path, const char *s,
			  uint32_t min, uint32_t *out)
{
	uint32_t v;

	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	if (cfg_parse_duration(s, &v) < 0) {
		err_at(ld, path, AT_VALUE,
		       "bad duration \"%.40s\" (expected an integer with optional unit "
		       "ms, s, m or h, e.g. 150ms, 2s; at most 49 days)", s);
		return;
	}
	if (v < min) {
		err_at(ld, path, AT_VALUE, "must be at least %" PRIu32 "ms", min);
		return;
	}
	*out = v;
}

static void conv_size(struct cfg_load *ld, const char *path, const char *s,
		      uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v;

	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	if (cfg_parse_size(s, &v) < 0) {
		err_at(ld, path, AT_VALUE,
		       "bad size \"%.40s\" (expected an integer with optional unit "
		       "k, m or g, e.g. 512, 16k, 4m)", s);
		return;
	}
	if (v < min) {
		err_at(ld, path, AT_VALUE, "must be at least %" PRIu64, min);
		return;
	}
	if (v > max) {
		err_at(ld, path, AT_VALUE, "%" PRIu64 " is too large (at most %" PRIu64 ")",
		       v, max);
		return;
	}
	*out = v;
}

static void conv_size32(struct cfg_load *ld, const char *path, const char *s, uint32_t *out)
{
	uint64_t v = *out;

	conv_size(ld, path, s, 1, UINT32_MAX, &v);
	*out = (uint32_t)v;
}

static void conv_str(struct cfg_load *ld, const char *path, const char *s, int allow_empty,
		     char *dst, size_t dstlen)
{
	if (s == NULL)
		return;
	if (!allow_empty && conv_nonempty(ld, path, s) < 0)
		return;
	if (strlen(s) >= dstlen) {
		err_at(ld, path, AT_VALUE, "too long (at most %zu bytes)", dstlen - 1);
		return;
	}
	memcpy(dst, s, strlen(s) + 1);
}

/* Names appear in logs, stats and the admin interface: keep them to one
 * unambiguous token. */
static void conv_name(struct cfg_load *ld, const char *path, const char *s, char *dst)
{
	const char *p;

	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	for (p = s; *p; p++) {
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.') {
			err_at(ld, path, AT_VALUE, "bad name \"%.40s\" (use letters, digits, "
			       "'_', '-' and '.')", s);
			return;
		}
	}
	conv_str(ld, path, s, 0, dst, CFG_NAME_MAX);
}

static int addr_is_any(const struct cfg_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
}

static int addr_equal(const struct cfg_addr *a, const struct cfg_addr *b)
{
	return a->len == b->len && memcmp(&a->ss, &b->ss, a->len) == 0;
}

static void conv_addr(struct cfg_load *ld, const char *path, const char *s,
		      struct cfg_addr *out)
{
	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	switch (addr_parse(s, out)) {
	case 0:
		break;
	case -2:
		err_at(ld, path, AT_VALUE, "cannot resolve host in \"%.80s\"", s);
		break;
	default:
		err_at(ld, path, AT_VALUE, "bad address \"%.80s\" (expected host:port, "
		       "[ipv6]:port or *:port, port 1..65535)", s);
		break;
	}
}

/* Joins a prefix and a key into BUF (CFG_PATH_MAX bytes) and returns it. */
static const char *kp(char *buf, const char *prefix, const char *key)
{
	if (path_child(buf, prefix, key) < 0)
		snprintf(buf, CFG_PATH_MAX, "%s", key);
	return buf;
}

static void conv_health(struct cfg_load *ld, const char *pre, const struct y_health *y,
			struct cfg_health *h)
{
	char k[CFG_PATH_MAX];
	const char *p;
	size_t nerrs;

	h->enabled = 1;
	if (y->path != NULL) {
		kp(k, pre, "path");
		for (p = y->path; *p; p++)
			if ((unsigned char)*p <= ' ' || *p == 0x7f)
				break;
		if (y->path[0] != '/' || *p != '\0')
			err_at(ld, k, AT_VALUE, "must start with '/' and contain no blanks");
		else
			conv_str(ld, k, y->path, 0, h->path, sizeof(h->path));
	}
	nerrs = ld->nerrs + ld->ndropped;
	conv_duration(ld, kp(k, pre, "interval"), y->interval, 1, &h->interval_ms);
	conv_duration(ld, kp(k, pre, "timeout"), y->timeout, 1, &h->timeout_ms);
	/* A check must end before the next one starts. The default timeout
	 * shrinks to a short interval; a written one that is too long is an
	 * error (compared only when both values parsed). */
	if (y->timeout == NULL && h->timeout_ms > h->interval_ms)
		h->timeout_ms = h->interval_ms;
	else if (nerrs == ld->nerrs + ld->ndropped && h->timeout_ms > h->interval_ms)
		err_at(ld, kp(k, pre, "timeout"), AT_VALUE, "timeout (%" PRIu32 "ms) must "
		       "not exceed interval (%" PRIu32 "ms)", h->timeout_ms, h->interval_ms);
	{
		uint32_t st = (uint32_t)h->expect_status;
		conv_uint(ld, kp(k, pre, "expect_status"), y->expect_status, 100, 599, &st);
		h->expect_status = (int)st;
	}
	conv_uint(ld, kp(k, pre, "rise"), y->rise, 1, 1000, &h->rise);
	conv_uint(ld, kp(k, pre, "fall"), y->fall, 1, 1000, &h->fall);
}

static const struct {
	const char *name;
	unsigned bit;
} pp_tlvs[] = {
	{ "alpn", CFG_PP_TLV_ALPN },
	{ "authority", CFG_PP_TLV_AUTHORITY },
	{ "unique_id", CFG_PP_TLV_UNIQUE_ID },
	{ "crc32c", CFG_PP_TLV_CRC32C },
	{ "ssl", CFG_PP_TLV_SSL },
};
#define PP_TLVS_N (sizeof(pp_tlvs) / sizeof(pp_tlvs[0]))

/* proxy_protocol and proxy_tlvs of the server at PRE. TLVs exist only in
 * v2 headers: a list with v1 or off is refused rather than ignored, since
 * whoever wrote it expects the server to receive them. */
static void conv_proxy_protocol(struct cfg_load *ld, const char *pre, const struct y_server *y,
				struct cfg_server *s)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	unsigned first[PP_TLVS_N] = { 0 };
	unsigned i, t;
	int pp_ok = 1;

	if (y->proxy_protocol != NULL) {
		kp(k, pre, "proxy_protocol");
		if (conv_nonempty(ld, k, y->proxy_protocol) < 0)
			pp_ok = 0;
		else if (strcmp(y->proxy_protocol, "off") == 0)
			s->proxy_protocol = CFG_PP_OFF;
		else if (strcmp(y->proxy_protocol, "v1") == 0)
			s->proxy_protocol = CFG_PP_V1;
		else if (strcmp(y->proxy_protocol, "v2") == 0)
			s->proxy_protocol = CFG_PP_V2;
		else {
			err_at(ld, k, AT_VALUE, "unknown proxy_protocol \"%.40s\" (expected off, "
			       "v1 or v2)", y->proxy_protocol);
			pp_ok = 0;
		}
	}
	if (y->proxy_tlvs_count == 0)
		return; /* absent, or [] (none) */

	kp(k, pre, "proxy_tlvs");
	for (i = 0; i < y->proxy_tlvs_count; i++) {
		const char *v = y->proxy_tlvs[i];
		path_index(ep, k, i);
		if (v == NULL || conv_nonempty(ld, ep, v) < 0)
			continue;
		for (t = 0; t < PP_TLVS_N && strcmp(v, pp_tlvs[t].name) != 0; t++)
			;
		if (t == PP_TLVS_N) {
			err_at(ld, ep, AT_VALUE, "unknown TLV \"%.40s\" (expected alpn, authority, "
			       "unique_id, crc32c or ssl)", v);
		} else if (s->proxy_tlvs & pp_tlvs[t].bit) {
			err_at(ld, ep, AT_VALUE, "duplicate TLV \"%s\" (first at proxy_tlvs[%u])",
			       v, first[t]);
		} else {
			s->proxy_tlvs |= pp_tlvs[t].bit;
			first[t] = i;
		}
	}
	/* A bad proxy_protocol was reported already: once is enough. */
	if (pp_ok && s->proxy_protocol != CFG_PP_V2)
		err_at(ld, k, AT_VALUE, "proxy_tlvs needs proxy_protocol: v2");
}

static void conv_server(struct cfg_load *ld, const char *pre, unsigned idx,
			const struct y_server *y, struct cfg_server *s)
{
	char k[CFG_PATH_MAX];

	snprintf(s->name, sizeof(s->name), "s%u", idx + 1);
	s->max_connections = 32;
	s->weight = 1;
	s->proxy_protocol = CFG_PP_OFF;
	s->proxy_tlvs = 0;
	conv_name(ld, kp(k, pre, "name"), y->name, s->name);
	conv_addr(ld, kp(k, pre, "address"), y->address, &s->addr);
	if (s->addr.len != 0 && addr_is_any(&s->addr))
		err_at(ld, k, AT_VALUE, "cannot connect to a wildcard address");
	conv_uint(ld, kp(k, pre, "max_connections"), y->max_connections, 1, UINT32_MAX,
		  &s->max_connections);
	conv_uint(ld, kp(k, pre, "weight"), y->weight, 1, 256, &s->weight);
	conv_proxy_protocol(ld, pre, y, s);
}

static void conv_tls_version(struct cfg_load *ld, const char *path, const char *s, int *out);
static void conv_bool(struct cfg_load *ld, const char *path, const char *s, int *out);

/* Files are only named here; the TLS module opens them and reports errors
 * at the tls mapping's LINE/COL. */
static void conv_backend_tls(struct cfg_load *ld, const char *pre, const struct y_backend_tls *y,
			     struct cfg_backend_tls *t)
{
	char k[CFG_PATH_MAX];
	unsigned line, col;

	t->enabled = 1;
	pos_lookup(ld, pre, AT_VALUE, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	t->verify = 1;
	t->session_reuse = 1;
	t->min_version = 0x0303;
	t->max_version = 0x0304;
	conv_bool(ld, kp(k, pre, "verify"), y->verify, &t->verify);
	conv_bool(ld, kp(k, pre, "session_reuse"), y->session_reuse, &t->session_reuse);
	conv_str(ld, kp(k, pre, "ca"), y->ca, 1, t->ca, sizeof(t->ca));
	conv_str(ld, kp(k, pre, "sni"), y->sni, 1, t->sni, sizeof(t->sni));
	conv_str(ld, kp(k, pre, "cert"), y->cert, 1, t->cert, sizeof(t->cert));
	conv_str(ld, kp(k, pre, "key"), y->key, 1, t->key, sizeof(t->key));
	conv_tls_version(ld, kp(k, pre, "min_version"), y->min_version, &t->min_version);
	conv_tls_version(ld, kp(k, pre, "max_version"), y->max_version, &t->max_version);
	if (t->min_version > t->max_version)
		err_at(ld, kp(k, pre, "min_version"), AT_VALUE, "min_version is above max_version");
	if (t->verify && t->ca[0] == '\0')
		err_at(ld, kp(k, pre, "verify"), AT_KEY, "verify is on (the default) but no ca is "
		       "set: name the CA file the servers' certificates are verified against, or "
		       "set verify: off");
}

/* Defaults are set by the caller, whether or not the mapping is present. */
static void conv_forward(struct cfg_load *ld, const char *pre, const struct y_forward *y,
			 struct cfg_forward *f)
{
	char k[CFG_PATH_MAX];

	if (y->x_forwarded_for != NULL &&
	    conv_nonempty(ld, kp(k, pre, "x_forwarded_for"), y->x_forwarded_for) == 0) {
		if (strcmp(y->x_forwarded_for, "append") == 0)
			f->x_forwarded_for = CFG_XFF_APPEND;
		else if (strcmp(y->x_forwarded_for, "replace") == 0)
			f->x_forwarded_for = CFG_XFF_REPLACE;
		else if (strcmp(y->x_forwarded_for, "off") == 0)
			f->x_forwarded_for = CFG_XFF_OFF;
		else
			err_at(ld, k, AT_VALUE, "unknown x_forwarded_for \"%.40s\" (expected "
			       "append, replace or off)", y->x_forwarded_for);
	}
	conv_bool(ld, kp(k, pre, "x_forwarded_proto"), y->x_forwarded_proto, &f->x_forwarded_proto);
	conv_bool(ld, kp(k, pre, "x_forwarded_host"), y->x_forwarded_host, &f->x_forwarded_host);
	conv_bool(ld, kp(k, pre, "x_forwarded_port"), y->x_forwarded_port, &f->x_forwarded_port);
	conv_bool(ld, kp(k, pre, "forwarded"), y->forwarded, &f->forwarded);
	conv_bool(ld, kp(k, pre, "x_real_ip"), y->x_real_ip, &f->x_real_ip);
	conv_bool(ld, kp(k, pre, "wl_proxy_ssl"), y->wl_proxy_ssl, &f->wl_proxy_ssl);
	conv_bool(ld, kp(k, pre, "wl_proxy_client_ip"), y->wl_proxy_client_ip,
		  &f->wl_proxy_client_ip);
	conv_bool(ld, kp(k, pre, "wl_proxy_client_port"), y->wl_proxy_client_port,
		  &f->wl_proxy_client_port);
	conv_bool(ld, kp(k, pre, "wl_proxy_client_cert"), y->wl_proxy_client_cert,
		  &f->wl_proxy_client_cert);
}

static int conv_backend(struct cfg_load *ld, const char *pre, const struct y_backend *y,
			struct cfg_backend *b)
{
	char k[CFG_PATH_MAX], sp[CFG_PATH_MAX];
	unsigned i;

	b->balance = CFG_BALANCE_ROUNDROBIN;
	b->queue_timeout_ms = 5000;
	b->queue_max = 10000;
	b->queue_abort_on_close = 1;
	b->idle_max = UINT32_MAX;  /* bounded by max_connections only */
	b->idle_timeout_ms = 30000;
	b->connect_timeout_ms = 3000;
	b->response_timeout_ms = 30000;
	snprintf(b->health.path, sizeof(b->health.path), "/");
	b->health.interval_ms = 2000;
	b->health.timeout_ms = 1000;
	b->health.expect_status = 200;
	b->health.rise = 2;
	b->health.fall = 3;
	b->forward = (struct cfg_forward){
		.x_forwarded_for = CFG_XFF_APPEND,
		.x_forwarded_proto = 1,
		/* every other header off */
	};

	conv_name(ld, kp(k, pre, "name"), y->name, b->name);
	if (y->balance != NULL) {
		if (strcmp(y->balance, "roundrobin") == 0)
			b->balance = CFG_BALANCE_ROUNDROBIN;
		else if (strcmp(y->balance, "leastconn") == 0)
			b->balance = CFG_BALANCE_LEASTCONN;
		else
			err_at(ld, kp(k, pre, "balance"), AT_VALUE,
			       "unknown balance \"%.40s\" (expected roundrobin or leastconn)",
			       y->balance);
	}
	conv_duration(ld, kp(k, pre, "queue_timeout"), y->queue_timeout, 1, &b->queue_timeout_ms);
	conv_uint(ld, kp(k, pre, "queue_max"), y->queue_max, 1, UINT32_MAX, &b->queue_max);
	conv_bool(ld, kp(k, pre, "queue_abort_on_close"), y->queue_abort_on_close, &b->queue_abort_on_close);
	conv_uint(ld, kp(k, pre, "idle_max"), y->idle_max, 0, UINT32_MAX, &b->idle_max);
	conv_duration(ld, kp(k, pre, "idle_timeout"), y->idle_timeout, 1, &b->idle_timeout_ms);
	conv_duration(ld, kp(k, pre, "connect_timeout"), y->connect_timeout, 1,
		      &b->connect_timeout_ms);
	conv_duration(ld, kp(k, pre, "response_timeout"), y->response_timeout, 1,
		      &b->response_timeout_ms);
	if (y->health_check != NULL)
		conv_health(ld, kp(k, pre, "health_check"), y->health_check, &b->health);
	if (y->tls != NULL)
		conv_backend_tls(ld, kp(k, pre, "tls"), y->tls, &b->tls);
	if (y->forward != NULL)
		conv_forward(ld, kp(k, pre, "forward"), y->forward, &b->forward);

	b->servers = calloc(y->servers_count, sizeof(*b->servers));
	if (b->servers == NULL)
		return -1;
	b->nservers = y->servers_count;
	for (i = 0; i < b->nservers; i++) {
		path_index(sp, kp(k, pre, "servers"), i);
		conv_server(ld, sp, i, &y->servers[i], &b->servers[i]);
	}
	return 0;
}

static const char *tls_version_str(int v)
{
	return v == 0x0304 ? "TLSv1.3" : "TLSv1.2";
}

static void conv_tls_version(struct cfg_load *ld, const char *path, const char *s, int *out)
{
	if (s == NULL || conv_nonempty(ld, path, s) < 0)
		return;
	if (strcmp(s, "TLSv1.2") == 0)
		*out = 0x0303;
	else if (strcmp(s, "TLSv1.3") == 0)
		*out = 0x0304;
	else
		err_at(ld, path, AT_VALUE, "unknown TLS version \"%.40s\" (expected TLSv1.2 or "
		       "TLSv1.3)", s);
}

/* YAML 1.1 spellings of a boolean, as libyaml hands them over. */
static void conv_bool(struct cfg_load *ld, const char *path, const char *s, int *out)
{
	static const char *const yes[] = { "on", "true", "yes" };
	static const char *const no[] = { "off", "false", "no" };
	size_t i;

	if (s == NULL || conv_nonempty(ld, path, s) < 0)
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
	err_at(ld, path, AT_VALUE, "expected on or off (or true/false, yes/no), got \"%.40s\"", s);
}

static void conv_tls_cert(struct cfg_load *ld, const char *pre, const struct y_tls_cert *y,
			  struct cfg_tls_cert *t)
{
	char k[CFG_PATH_MAX];
	unsigned line, col;

	/* The start of the entry's mapping (or of the alias standing for it). */
	pos_lookup(ld, pre, AT_KEY, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	conv_str(ld, kp(k, pre, "cert"), y->cert, 0, t->cert, sizeof(t->cert));
	conv_str(ld, kp(k, pre, "key"), y->key, 1, t->key, sizeof(t->key));
	conv_str(ld, kp(k, pre, "passphrase"), y->passphrase, 1, t->passphrase,
		 sizeof(t->passphrase));
}

/* Fills T from Y (the tls mapping of the listener at PRE). Certificate and
 * key files are only named here: the TLS module opens and checks them, and
 * points its errors at the LINE/COL recorded here. Returns -1 when out of
 * memory. */
static int conv_tls(struct cfg_load *ld, const char *pre, const struct y_tls *y,
		    struct cfg_tls *t)
{
	char k[CFG_PATH_MAX], cp[CFG_PATH_MAX];
	unsigned i, line, col;
	size_t nerrs;

	t->enabled = 1;
	pos_lookup(ld, pre, AT_VALUE, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	t->min_version = 0x0303;
	t->max_version = 0x0304;
	snprintf(t->curves, sizeof(t->curves), "X25519:P-256:P-384");
	t->tickets = 1;
	t->session_cache = 0;
	t->handshake_timeout_ms = 10000;
	t->client_auth = CFG_CLIENT_AUTH_OFF;
	t->verify_depth = 3;

	t->certs = calloc(y->certificates_count, sizeof(*t->certs));
	if (t->certs == NULL)
		return -1;
	t->ncerts = y->certificates_count;
	for (i = 0; i < t->ncerts; i++) {
		path_index(cp, kp(k, pre, "certificates"), i);
		conv_tls_cert(ld, cp, &y->certificates[i], &t->certs[i]);
	}

	nerrs = ld->nerrs + ld->ndropped;
	conv_tls_version(ld, kp(k, pre, "min_version"), y->min_version, &t->min_version);
	conv_tls_version(ld, kp(k, pre, "max_version"), y->max_version, &t->max_version);
	if (nerrs == ld->nerrs + ld->ndropped && t->min_version > t->max_version)
		err_at(ld, kp(k, pre, "min_version"), AT_VALUE, "min_version (%s) is above "
		       "max_version (%s)", tls_version_str(t->min_version),
		       tls_version_str(t->max_version));
	conv_str(ld, kp(k, pre, "ciphers"), y->ciphers, 1, t->ciphers, sizeof(t->ciphers));
	conv_str(ld, kp(k, pre, "ciphersuites"), y->ciphersuites, 1, t->ciphersuites,
		 sizeof(t->ciphersuites));
	conv_str(ld, kp(k, pre, "curves"), y->curves, 0, t->curves, sizeof(t->curves));
	conv_bool(ld, kp(k, pre, "tickets"), y->tickets, &t->tickets);
	conv_str(ld, kp(k, pre, "ticket_keys"), y->ticket_keys, 1, t->ticket_keys,
		 sizeof(t->ticket_keys));
	conv_uint(ld, kp(k, pre, "session_cache"), y->session_cache, 0, 10000000,
		  &t->session_cache);
	conv_duration(ld, kp(k, pre, "handshake_timeout"), y->handshake_timeout, 1,
		      &t->handshake_timeout_ms);
	if (y->client_auth != NULL && conv_nonempty(ld, kp(k, pre, "client_auth"),
						     y->client_auth) == 0) {
		if (strcmp(y->client_auth, "off") == 0)
			t->client_auth = CFG_CLIENT_AUTH_OFF;
		else if (strcmp(y->client_auth, "optional") == 0)
			t->client_auth = CFG_CLIENT_AUTH_OPTIONAL;
		else if (strcmp(y->client_auth, "required") == 0)
			t->client_auth = CFG_CLIENT_AUTH_REQUIRED;
		else
			err_at(ld, k, AT_VALUE, "unknown client_auth \"%.40s\" (expected off, "
			       "optional or required)", y->client_auth);
	}
	conv_str(ld, kp(k, pre, "client_ca"), y->client_ca, 1, t->client_ca,
		 sizeof(t->client_ca));
	/* Only an absent or empty client_ca: one that is too long was
	 * reported above, once is enough. */
	if (t->client_auth != CFG_CLIENT_AUTH_OFF &&
	    (y->client_ca == NULL || y->client_ca[0] == '\0'))
		err_at(ld, kp(k, pre, "client_auth"), AT_VALUE, "client_auth %s needs client_ca "
		       "(the CA file that client certificates are verified against)",
		       y->client_auth);
	conv_uint(ld, kp(k, pre, "verify_depth"), y->verify_depth, 1, 16, &t->verify_depth);
	return 0;
}

/* A list of networks at PATH (N entries in Y) into a new array in *OUT.
 * Absent and empty both leave *OUT NULL, but a written empty list is an
 * error: "trust nobody" is spelled by leaving the key out, and an empty
 * list is more likely a template whose networks were never filled in.
 * Returns -1 when out of memory. */
static int conv_cidrs(struct cfg_load *ld, const char *path, char *const *y, unsigned n,
		      struct cidr **out, unsigned *nout)
{
	char ep[CFG_PATH_MAX];
	struct cidr *list;
	const char *why;
	unsigned i;

	if (n == 0) {
		/* Inside an aliased listener the key has no position of its
		 * own: then [] passes as "absent", which means the same. */
		if (pos_find(ld, path) != NULL)
			err_at(ld, path, AT_VALUE, "list at least one network or remove the key");
		return 0;
	}
	list = calloc(n, sizeof(*list));
	if (list == NULL)
		return -1;
	*out = list;
	*nout = n;
	for (i = 0; i < n; i++) {
		path_index(ep, path, i);
		if (y[i] == NULL || conv_nonempty(ld, ep, y[i]) < 0)
			continue;
		if (cidr_parse(y[i], &list[i], &why) < 0)
			err_at(ld, ep, AT_VALUE, "bad network \"%.80s\": %s", y[i], why);
	}
	return 0;
}

/* One of WORDS (NULL-terminated) or an error listing them; returns the
 * index, or -1 (absent or bad: *OUT untouched). */
static int conv_word(struct cfg_load *ld, const char *path, const char *s, const char *const *words)
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
	err_at(ld, path, AT_VALUE, "unknown value \"%.40s\" (expected %s)", s, list);
	return -1;
}

/* A per-call budget: a duration, or microseconds as "500us" (finer than a
 * duration's ms); "0" is no limit, and anything above 60 s counts as 60 s. */
static uint32_t conv_budget_us(struct cfg_load *ld, const char *key, const char *text)
{
	size_t tl = strlen(text);
	if (tl > 2 && strcmp(text + tl - 2, "us") == 0) {
		char num[32];
		uint32_t us = 0;
		snprintf(num, sizeof(num), "%.*s", (int)(tl - 2), text);
		conv_uint(ld, key, num, 0, 60000000, &us);
		return us;
	}
	uint32_t ms = 0;
	conv_duration(ld, key, text, 0, &ms);
	return ms > 60000 ? 60000000u : ms * 1000u;
}

static void conv_inspect(struct cfg_load *ld, const char *pre, const struct y_inspect *y,
			 struct cfg_inspect *in, uint64_t memory_max)
{
	static const char *const overflow[] = { "partial", "reject", NULL };
	static const char *const on_error[] = { "allow", "deny", NULL };
	static const char *const modes[] = { "enforce", "shadow", NULL };
	char k[CFG_PATH_MAX];
	unsigned line, col;
	int v;

	in->enabled = 1;
	in->budget_instructions = 1000000;
	in->budget_us = 5000;
	conv_str(ld, kp(k, pre, "script"), y->script, 0, in->script, sizeof(in->script));
	pos_lookup(ld, kp(k, pre, "script"), AT_VALUE, &line, &col);
	in->line = (int)line;
	in->col = (int)col;
	if (y->body != NULL && strcmp(y->body, "off") != 0) {
		uint64_t b = 0;
		conv_size(ld, kp(k, pre, "body"), y->body, 1, INSPECT_BODY_MAX, &b);
		in->body = (uint32_t)b;
	}
	if ((v = conv_word(ld, kp(k, pre, "body_overflow"), y->body_overflow, overflow)) >= 0)
		in->body_reject = v;
	if ((v = conv_word(ld, kp(k, pre, "on_error"), y->on_error, on_error)) >= 0)
		in->on_error_deny = v;
	if ((v = conv_word(ld, kp(k, pre, "mode"), y->mode, modes)) >= 0)
		in->shadow = v;
	if (y->budget != NULL) {
		char bp[CFG_PATH_MAX];
		kp(bp, pre, "budget");
		if (y->budget->instructions != NULL) {
			uint32_t n = 0;
			conv_uint(ld, kp(k, bp, "instructions"), y->budget->instructions, 0, UINT32_MAX, &n);
			in->budget_instructions = n;
		}
		if (y->budget->time != NULL)
			in->budget_us = conv_budget_us(ld, kp(k, bp, "time"), y->budget->time);
		if (y->budget->wall_time != NULL)
			in->budget_wall_us = conv_budget_us(ld, kp(k, bp, "wall_time"), y->budget->wall_time);
		if (in->budget_wall_us && in->budget_wall_us < in->budget_us)
			err_at(ld, kp(k, bp, "wall_time"), AT_VALUE,
			       "the wall-clock ceiling (%u us) is below the CPU time budget (%u us): "
			       "a call on a busy machine would be stopped for time it did not use",
			       in->budget_wall_us, in->budget_us);
	}
	if (y->budget == NULL || y->budget->wall_time == NULL) {
		/* Ten times the CPU budget, at least 1 s: only a call that holds
		 * the worker while it stops using CPU gets there. */
		uint64_t w = (uint64_t)in->budget_us * 10;
		in->budget_wall_us = in->budget_us == 0 ? 0 : w < 1000000 ? 1000000u : w > 60000000 ? 60000000u : (uint32_t)w;
	}
	if (in->script[0] != '\0') {
		char why[512];
		if (inspect_script_check(in->script, memory_max, why, sizeof(why)) < 0)
			err_at(ld, kp(k, pre, "script"), AT_VALUE, "%s", why);
	}
}

static int conv_listener(struct cfg_load *ld, const char *pre, unsigned idx,
			 const struct y_listener *y, struct cfg_listener *l)
{
	char k[CFG_PATH_MAX];

	snprintf(l->name, sizeof(l->name), "l%u", idx + 1);
	l->backlog = 511;
	conv_name(ld, kp(k, pre, "name"), y->name, l->name);
	conv_addr(ld, kp(k, pre, "address"), y->address, &l->addr);
	{
		uint32_t v = (uint32_t)l->backlog;
		conv_uint(ld, kp(k, pre, "backlog"), y->backlog, 1, 65535, &v);
		l->backlog = (int)v;
	}
	/* Resolved in pass 4; only emptiness and length are checked here. */
	conv_str(ld, kp(k, pre, "backend"), y->backend, 0, l->backend_name,
		 sizeof(l->backend_name));
	if (conv_cidrs(ld, kp(k, pre, "accept_proxy_from"), y->accept_proxy_from,
		       y->accept_proxy_from_count, &l->proxy_from, &l->nproxy_from) < 0 ||
	    conv_cidrs(ld, kp(k, pre, "trusted_forwarders"), y->trusted_forwarders,
		       y->trusted_forwarders_count, &l->trusted_forwarders,
		       &l->ntrusted_forwarders) < 0)
		return -1;
	{
		static const char *const underscores[] = { "allow", "drop", "reject", NULL };
		int v = conv_word(ld, kp(k, pre, "headers_with_underscores"), y->headers_with_underscores,
				  underscores);
		if (v >= 0)
			l->underscores = (enum cfg_underscores)v;
	}
	if (y->inspect != NULL)
		conv_inspect(ld, kp(k, pre, "inspect"), y->inspect, &l->inspect, ld->lua_memory_max);
	if (y->tls != NULL)
		return conv_tls(ld, kp(k, pre, "tls"), y->tls, &l->tls);
	return 0;
}

/* user/group are account names, resolved now so that `sluice -t` catches a
 * typo before a reload would start workers that cannot switch. */
static void conv_user(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	if (y->group != NULL && y->user == NULL) {
		err_at(ld, "group", AT_KEY, "needs `user:` (the account workers switch to)");
		return;
	}
	if (y->user == NULL)
		return;
	conv_str(ld, "user", y->user, 0, c->user, sizeof(c->user));
	conv_str(ld, "group", y->group, 0, c->group, sizeof(c->group));
	if (c->user[0] == '\0' || (y->group != NULL && c->group[0] == '\0'))
		return;
	char why[160];
	uid_t uid;
	gid_t gid;
	if (privs_lookup(c->user, NULL, &uid, &gid, why, sizeof(why)) < 0) {
		err_at(ld, "user", AT_VALUE, "%s", why);
		return;
	}
	if (c->group[0] && privs_lookup(c->user, c->group, &uid, &gid, why, sizeof(why)) < 0) {
		err_at(ld, "group", AT_VALUE, "%s", why);
		return;
	}
	if (c->group[0] && uid == 0) {
		/* Root workers switch nothing; a group here would be ignored. */
		err_at(ld, "group", AT_KEY, "applies only with a user other than root");
		return;
	}
	c->uid = uid;
	c->gid = gid;
}

static int conv_root(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	char k[CFG_PATH_MAX];
	unsigned i;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	c->workers = ncpu < 1 ? 1 : ncpu > CFG_WORKERS_MAX ? CFG_WORKERS_MAX : (unsigned)ncpu;
	snprintf(c->error_log, sizeof(c->error_log), "stderr");
	snprintf(c->access_log, sizeof(c->access_log), "stderr");
	c->timeouts.client_header_ms = 10000;
	c->timeouts.client_keepalive_ms = 60000;
	c->timeouts.client_body_ms = 30000;
	c->timeouts.client_send_ms = 60000;
	c->timeouts.drain_ms = 10000;
	c->limits.max_request_line = 8192;
	c->limits.max_header_size = 32768;
	c->limits.max_headers = 100;
	c->limits.max_body_size = 0;
	c->limits.max_connections = 100000;

	{
		uint32_t w = c->workers;
		conv_uint(ld, "workers", y->workers, 1, CFG_WORKERS_MAX, &w);
		c->workers = w;
	}
	conv_str(ld, "error_log", y->error_log, 0, c->error_log, sizeof(c->error_log));
	if (strcmp(c->error_log, "off") == 0)
		err_at(ld, "error_log", AT_VALUE, "cannot be off (use stderr or a file path)");
	conv_str(ld, "access_log", y->access_log, 0, c->access_log, sizeof(c->access_log));
	conv_str(ld, "pid_file", y->pid_file, 1, c->pid_file, sizeof(c->pid_file));
	snprintf(c->syslog_facility, sizeof(c->syslog_facility), "daemon");
	if (y->syslog_facility != NULL) {
		static const char *const facilities[] = { "daemon", "user", "local0", "local1", "local2",
							  "local3", "local4", "local5", "local6", "local7" };
		int ok = 0;
		for (size_t f = 0; f < sizeof(facilities) / sizeof(facilities[0]); f++)
			ok |= strcmp(y->syslog_facility, facilities[f]) == 0;
		if (ok)
			snprintf(c->syslog_facility, sizeof(c->syslog_facility), "%s", y->syslog_facility);
		else
			err_at(ld, "syslog_facility", AT_VALUE,
			       "unknown facility \"%.40s\" (expected daemon, user or local0..local7)",
			       y->syslog_facility);
	}
	conv_user(ld, y, c);
	if (y->access_log_format != NULL) {
		if (strcmp(y->access_log_format, "text") == 0)
			c->access_log_format = CFG_LOG_TEXT;
		else if (strcmp(y->access_log_format, "json") == 0)
			c->access_log_format = CFG_LOG_JSON;
		else
			err_at(ld, "access_log_format", AT_VALUE, "unknown format \"%.40s\" (expected text or json)",
			       y->access_log_format);
	}
	c->inspection = 1;
	if (y->inspection != NULL)
		conv_bool(ld, "inspection", y->inspection, &c->inspection);
	c->lua_memory_max = 64u << 20;
	conv_size(ld, "lua_memory_max", y->lua_memory_max, 1u << 20, 1ull << 40, &c->lua_memory_max);
	ld->lua_memory_max = c->lua_memory_max;
	if (y->admin != NULL) {
		c->admin.enabled = 1;
		if (y->admin->address != NULL)
			conv_addr(ld, "admin.address", y->admin->address, &c->admin.addr);
		else
			addr_parse("127.0.0.1:9901", &c->admin.addr);
		conv_str(ld, "admin.token", y->admin->token, 1, c->admin.token, sizeof(c->admin.token));
	}

	if (y->timeouts != NULL) {
		const struct y_timeouts *t = y->timeouts;
		conv_duration(ld, "timeouts.client_header", t->client_header, 1,
			      &c->timeouts.client_header_ms);
		conv_duration(ld, "timeouts.client_keepalive", t->client_keepalive, 1,
			      &c->timeouts.client_keepalive_ms);
		conv_duration(ld, "timeouts.client_body", t->client_body, 1,
			      &c->timeouts.client_body_ms);
		conv_duration(ld, "timeouts.client_send", t->client_send, 1,
			      &c->timeouts.client_send_ms);
		conv_duration(ld, "timeouts.drain", t->drain, 0, &c->timeouts.drain_ms);
	}
	if (y->limits != NULL) {
		const struct y_limits *m = y->limits;
		conv_size32(ld, "limits.max_request_line", m->max_request_line,
			    &c->limits.max_request_line);
		conv_size32(ld, "limits.max_header_size", m->max_header_size,
			    &c->limits.max_header_size);
		conv_uint(ld, "limits.max_headers", m->max_headers, 1, UINT32_MAX,
			  &c->limits.max_headers);
		conv_size(ld, "limits.max_body_size", m->max_body_size, 0, UINT64_MAX,
			  &c->limits.max_body_size);
		conv_uint(ld, "limits.max_connections", m->max_connections, 1, UINT32_MAX,
			  &c->limits.max_connections);
	}

	c->backends = calloc(y->backends_count, sizeof(*c->backends));
	c->listeners = calloc(y->listeners_count, sizeof(*c->listeners));
	if (c->backends == NULL || c->listeners == NULL)
		return -1;
	c->nbackends = y->backends_count;
	c->nlisteners = y->listeners_count;
	for (i = 0; i < c->nbackends; i++) {
		path_index(k, "backends", i);
		if (conv_backend(ld, k, &y->backends[i], &c->backends[i]) < 0)
			return -1;
	}
	inspect_check_begin();
	for (i = 0; i < c->nlisteners; i++) {
		path_index(k, "listeners", i);
		if (conv_listener(ld, k, i, &y->listeners[i], &c->listeners[i]) < 0) {
			inspect_check_end();
			return -1;
		}
	}
	inspect_check_end();
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Pass 4: cross references                                                  */

/* Path of a name for error messages: the "name" key when it was written,
 * else the entry itself (the name was a default). */
static const char *name_path(char *buf, const char *entry, const char *written)
{
	return written != NULL ? kp(buf, entry, "name") : entry;
}

static unsigned entry_line(const struct cfg_load *ld, const char *entry)
{
	unsigned line, col;

	pos_lookup(ld, entry, AT_KEY, &line, &col);
	return line;
}

static void link_root(struct cfg_load *ld, const struct y_root *y, struct cfg *c)
{
	char e1[CFG_PATH_MAX], e2[CFG_PATH_MAX], k[CFG_PATH_MAX], s1[CFG_PATH_MAX];
	unsigned i, j, n;

	for (i = 0; i < c->nbackends; i++) {
		const struct cfg_backend *b = &c->backends[i];
		path_index(e1, "backends", i);
		for (j = 0; j < i; j++) {
			if (b->name[0] && strcmp(b->name, c->backends[j].name) == 0) {
				path_index(e2, "backends", j);
				err_at(ld, name_path(k, e1, y->backends[i].name), AT_VALUE,
				       "duplicate backend name \"%s\" (first at line %u)",
				       b->name, entry_line(ld, e2));
				break;
			}
		}
		for (n = 0; n < b->nservers; n++) {
			const char *written = y->backends[i].servers[n].name;
			path_index(e2, kp(s1, e1, "servers"), n);
			for (j = 0; j < n; j++) {
				if (strcmp(b->servers[n].name, b->servers[j].name) == 0) {
					char e3[CFG_PATH_MAX];
					path_index(e3, s1, j);
					err_at(ld, name_path(k, e2, written), AT_VALUE,
					       "duplicate server name \"%s\" (first at line %u)",
					       b->servers[n].name, entry_line(ld, e3));
					break;
				}
			}
		}
	}

	for (i = 0; i < c->nlisteners; i++) {
		struct cfg_listener *l = &c->listeners[i];
		path_index(e1, "listeners", i);
		for (j = 0; j < i; j++) {
			path_index(e2, "listeners", j);
			if (strcmp(l->name, c->listeners[j].name) == 0) {
				err_at(ld, name_path(k, e1, y->listeners[i].name), AT_VALUE,
				       "duplicate listener name \"%s\" (first at line %u)",
				       l->name, entry_line(ld, e2));
			}
			if (l->addr.len != 0 && addr_equal(&l->addr, &c->listeners[j].addr)) {
				err_at(ld, kp(k, e1, "address"), AT_VALUE,
				       "same address as %s (line %u)", e2, entry_line(ld, e2));
			}
		}
		if (c->admin.enabled && c->admin.addr.len != 0 && l->addr.len != 0 && addr_equal(&l->addr, &c->admin.addr))
			err_at(ld, "admin.address", AT_VALUE, "same address as %s (line %u)", e1, entry_line(ld, e1));
		if (l->backend_name[0] == '\0')
			continue; /* already reported */
		for (j = 0; j < c->nbackends; j++) {
			if (strcmp(l->backend_name, c->backends[j].name) == 0) {
				l->backend = &c->backends[j];
				break;
			}
		}
		if (l->backend == NULL) {
			char known[256] = "";
			size_t used = 0;
			for (j = 0; j < c->nbackends && used < sizeof(known); j++)
				if (c->backends[j].name[0] != '\0')
					used += (size_t)snprintf(known + used, sizeof(known) - used,
								 "%s%s", used ? ", " : "",
								 c->backends[j].name);
			err_at(ld, kp(k, e1, "backend"), AT_VALUE, "unknown backend \"%s\"%s%s%s",
			       l->backend_name, known[0] ? " (defined: " : "", known,
			       known[0] ? ")" : "");
		}
	}
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                              */

/* Reads PATH whole into a NUL-terminated heap buffer. */
static char *file_read(struct cfg_load *ld, const char *path, size_t *lenp)
{
	char *buf = NULL, *nbuf;
	size_t len = 0, cap = 0;
	ssize_t n;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		err_add(ld, 0, 0, "%s: cannot open: %s", path, strerror(errno));
		return NULL;
	}
	for (;;) {
		if (cap - len < 4096) {
			cap = cap ? cap * 2 : 16384;
			if (cap > CFG_FILE_MAX + 1)
				cap = CFG_FILE_MAX + 1;
			if (len + 1 >= cap) {
				err_add(ld, 0, 0, "%s: cannot read: file larger than %u bytes", path,
					CFG_FILE_MAX);
				goto fail;
			}
			nbuf = realloc(buf, cap);
			if (nbuf == NULL) {
				err_add(ld, 0, 0, "%s: cannot read: %s", path, strerror(ENOMEM));
				goto fail;
			}
			buf = nbuf;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err_add(ld, 0, 0, "%s: cannot read: %s", path, strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = '\0';
	*lenp = len;
	return buf;
fail:
	close(fd);
	free(buf);
	return NULL;
}

struct cfg *cfg_load(const char *path, char *err, size_t errlen)
{
	struct cfg_load ld = { .file = path };
	struct cyaml_log_buf *lb = NULL;
	cyaml_config_t cy = {
		.log_fn = cyaml_log_capture,
		.mem_fn = cyaml_mem,
		.log_level = CYAML_LOG_ERROR,
		.flags = CYAML_CFG_DEFAULT,
	};
	struct y_root *y = NULL;
	struct cfg *c = NULL;
	char *data = NULL;
	size_t len = 0;
	cyaml_err_t rc;

	data = file_read(&ld, path, &len);
	if (data == NULL)
		goto out;
	ld.data = data;
	ld.datalen = len;
	if (scan_file(&ld, data, len) < 0)
		goto out;

	lb = calloc(1, sizeof(*lb));
	if (lb == NULL) {
		ld.oom = 1;
		goto out;
	}
	cy.log_ctx = lb;
	rc = cyaml_load_data((const uint8_t *)data, len, &cy, &y_root_schema,
			     (cyaml_data_t **)&y, NULL);
	if (rc == CYAML_ERR_OOM) {
		ld.oom = 1;
		goto out;
	}
	if (rc != CYAML_OK) {
		/* libcyaml has freed its partial tree and left Y NULL. */
		cyaml_error_report(&ld, lb->text, rc);
		goto out;
	}
	if (y == NULL) {
		/* An empty document, or only comments. */
		err_at(&ld, "listeners", AT_KEY, "missing required key");
		err_at(&ld, "backends", AT_KEY, "missing required key");
		goto out;
	}

	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		ld.oom = 1;
		goto out;
	}
	if (strlen(path) >= sizeof(c->path)) {
		err_add(&ld, 0, 0, "%s: cannot open: %s", path, strerror(ENAMETOOLONG));
		goto out;
	}
	memcpy(c->path, path, strlen(path) + 1);
	if (conv_root(&ld, y, c) < 0)
		ld.oom = 1;
	else
		link_root(&ld, y, c);
out:
	if (err_flush(&ld, err, errlen) > 0) {
		cfg_free(c);
		c = NULL;
	}
	if (y != NULL)
		cyaml_free(&cy, &y_root_schema, y, 0);
	free(lb);
	pos_free(&ld);
	free(data);
	return c;
}

void cfg_free(struct cfg *cfg)
{
	unsigned i;

	if (cfg == NULL)
		return;
	if (cfg->backends != NULL)
		for (i = 0; i < cfg->nbackends; i++)
			free(cfg->backends[i].servers);
	free(cfg->backends);
	if (cfg->listeners != NULL)
		for (i = 0; i < cfg->nlisteners; i++) {
			free(cfg->listeners[i].tls.certs);
			free(cfg->listeners[i].proxy_from);
			free(cfg->listeners[i].trusted_forwarders);
		}
	free(cfg->listeners);
	free(cfg);
}
