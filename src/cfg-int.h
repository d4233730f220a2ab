/* Internal to the cfg module: what cfg.c, cfg_schema.c, cfg_value.c,
 * cfg_listener.c and cfg_backend.c share. Other modules use cfg.h.
 *
 * A function one cfg file defines and another calls has a cfg_ prefix
 * (cfg_err_at, cfg_conv_uint, ...); the key-path builders, tiny and used
 * by most of them, are inline here. The comment on what each function does is
 * on its definition. */
#ifndef SLUICE_CFG_INT_H
#define SLUICE_CFG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cyaml/cyaml.h>

#include "cfg-t.h"

#define CFG_PATH_MAX 256        /* longest dotted key path */

/* ------------------------------------------------------------------------ */
/* Intermediate tree and its libcyaml schema: every leaf is a string, NULL
 * when the key is absent. Sequence counts follow libcyaml's <member>_count
 * naming. */

struct y_health {
	char *path, *interval, *timeout, *expect_status, *rise, *fall;
};

struct y_server {
	char *name, *address, *max_connections, *weight, *backup, *proxy_protocol;
	char *route, *jvmid, *cookie;
	char **proxy_tlvs;
	unsigned proxy_tlvs_count;
};

struct y_forward {
	char *x_forwarded_for, *x_forwarded_proto, *x_forwarded_host, *x_forwarded_port;
	char *forwarded, *x_real_ip, *wl_proxy_ssl, *wl_proxy_client_ip;
	char *wl_proxy_client_port, *wl_proxy_client_cert;
};

struct y_eject {
	char *consecutive_5xx, *consecutive_timeouts, *duration, *max_ejected_percent;
};

struct y_persist {
	char *type, *cookie, *path_parameter, *secure, *http_only, *same_site, *max_age;
	char *domain, *path, *ttl;
};

struct y_backend {
	char *name, *balance, *queue_timeout, *queue_max, *queue_abort_on_close, *idle_max;
	char *idle_timeout, *connect_timeout, *response_timeout, *all_backups, *slow_start;
	struct y_health *health_check;
	struct y_eject *eject;
	struct y_persist *persistence;
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

struct y_kv {
	char *name, *value;
};

struct y_cond {
	char *name, *present, *equals, *regex;
};

struct y_path {
	char *exact, *prefix, *regex, *plain;
};

struct y_match {
	char **host;
	unsigned host_count;
	struct y_path *path;
	char **methods;
	unsigned methods_count;
	struct y_cond *headers;
	unsigned headers_count;
	struct y_cond *cookies;
	unsigned cookies_count;
};

struct y_redirect {
	char *status, *location;
};

struct y_respond {
	char *status, *body, *body_file, *content_type;
};

struct y_rate_limit {
	char *key, *rate, *burst, *store, *on_store_error;
};

struct y_redis {
	char *address, *timeout, *connect_timeout, *password, *db;
};

struct y_route {
	char *name, *backend, *inspect, *response_timeout, *max_body_size;
	struct y_rate_limit *rate_limit;
	struct y_inspect *inspect_override;
	struct y_match *match;
	struct y_redirect *redirect;
	struct y_respond *respond;
	struct y_kv *set_request_headers;
	unsigned set_request_headers_count;
	char **remove_request_headers;
	unsigned remove_request_headers_count;
	struct y_kv *set_response_headers;
	unsigned set_response_headers_count;
	char **remove_response_headers;
	unsigned remove_response_headers_count;
};

struct y_http2 {
	char *max_concurrent_streams, *initial_window_size;
};

struct y_listener {
	char *name, *address, *backlog, *backend, *headers_with_underscores;
	char *h2c, *monitor_uri;
	char **protocols;
	unsigned protocols_count;
	struct y_http2 *http2;
	struct y_tls *tls;
	struct y_inspect *inspect;
	struct y_route *routes;
	unsigned routes_count;
	char **accept_proxy_from;
	unsigned accept_proxy_from_count;
	char **trusted_forwarders;
	unsigned trusted_forwarders_count;
	struct y_rate_limit *rate_limit;
};

struct y_timeouts {
	char *client_header, *client_keepalive, *client_body, *client_send, *drain, *drain_notice;
};

struct y_limits {
	char *max_request_line, *max_header_size, *max_headers;
	char *max_body_size, *max_connections, *rate_limit_entries;
};

struct y_admin {
	char *address, *token;
};

struct y_root {
	char *workers, *instances, *error_log, *access_log, *access_log_format, *pid_file;
	char *syslog_facility;
	char *user, *group;
	char *inspection, *lua_memory_max, *lua_shared_memory;
	struct y_admin *admin;
	struct y_timeouts *timeouts;
	struct y_limits *limits;
	struct y_redis *redis;
	struct y_listener *listeners;
	unsigned listeners_count;
	struct y_backend *backends;
	unsigned backends_count;
};

/* The root of the schema (cfg_schema.c), for cyaml_load_data() and
 * cyaml_free(). */
extern const cyaml_schema_value_t cfg_root_schema;

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

/* The error sink (cfg_value.c). */
__attribute__((format(printf, 4, 5)))
void cfg_err_add(struct cfg_load *ld, unsigned line, unsigned col, const char *fmt, ...);
__attribute__((format(printf, 5, 6)))
void cfg_err_pos(struct cfg_load *ld, unsigned line, unsigned col, const char *key,
		 const char *fmt, ...);
__attribute__((format(printf, 4, 5)))
void cfg_err_at(struct cfg_load *ld, const char *path, int at, const char *fmt, ...);
int cfg_err_flush(struct cfg_load *ld, char *err, size_t errlen);

/* Pass 1's key positions (cfg_value.c; cfg.c records them). */
struct cfg_pos *cfg_pos_find(const struct cfg_load *ld, const char *path);
void cfg_pos_lookup(const struct cfg_load *ld, const char *path, int at,
		    unsigned *line, unsigned *col);

/* Path builders: DST (CFG_PATH_MAX bytes) = PARENT.KEY or PARENT[I].
 * Return -1, leaving DST unspecified, when the result would not fit. */
static inline int path_join(char *dst, const char *parent, const char *sep, const char *tail)
{
	size_t pl = strlen(parent), sl = strlen(sep), tl = strlen(tail);

	if (pl + sl + tl >= CFG_PATH_MAX)
		return -1;
	memmove(dst, parent, pl);
	memcpy(dst + pl, sep, sl);
	memcpy(dst + pl + sl, tail, tl + 1);
	return 0;
}

static inline int path_child(char *dst, const char *parent, const char *key)
{
	return path_join(dst, parent, parent[0] ? "." : "", key);
}

static inline int path_index(char *dst, const char *parent, unsigned i)
{
	char num[16];

	snprintf(num, sizeof(num), "[%u]", i);
	return path_join(dst, parent, "", num);
}

/* Joins a prefix and a key into BUF (CFG_PATH_MAX bytes) and returns it. */
static inline const char *kp(char *buf, const char *prefix, const char *key)
{
	if (path_child(buf, prefix, key) < 0)
		snprintf(buf, CFG_PATH_MAX, "%s", key);
	return buf;
}

/* Pass 3 converters every section shares (cfg_value.c). S is the value at
 * key path PATH, NULL when the key is absent (cfg_conv_nonempty excepted):
 * then the output keeps its default. A bad value is reported at PATH. */
int cfg_conv_nonempty(struct cfg_load *ld, const char *path, const char *s);
void cfg_conv_uint(struct cfg_load *ld, const char *path, const char *s,
		   uint32_t min, uint32_t max, uint32_t *out);
void cfg_conv_duration(struct cfg_load *ld, const char *path, const char *s,
		       uint32_t min, uint32_t *out);
void cfg_conv_size(struct cfg_load *ld, const char *path, const char *s,
		   uint64_t min, uint64_t max, uint64_t *out);
void cfg_conv_size32(struct cfg_load *ld, const char *path, const char *s, uint32_t *out);
void cfg_conv_str(struct cfg_load *ld, const char *path, const char *s, int allow_empty,
		  char *dst, size_t dstlen);
void cfg_conv_name(struct cfg_load *ld, const char *path, const char *s, char *dst);
void cfg_conv_addr(struct cfg_load *ld, const char *path, const char *s,
		   struct cfg_addr *out);
void cfg_conv_bool(struct cfg_load *ld, const char *path, const char *s, int *out);
int cfg_conv_word(struct cfg_load *ld, const char *path, const char *s,
		  const char *const *words);
void cfg_conv_tls_version(struct cfg_load *ld, const char *path, const char *s, int *out);

/* Pass 3 for one entry of a section, at key path PRE: backends[] in
 * cfg_backend.c, listeners[] in cfg_listener.c. Return -1 when out of
 * memory (errors in the values are reported, not returned). */
int cfg_conv_backend(struct cfg_load *ld, const char *pre, const struct y_backend *y,
		     struct cfg_backend *b);
int cfg_conv_listener(struct cfg_load *ld, const char *pre, unsigned idx,
		      const struct y_listener *y, struct cfg_listener *l);
/* cfg_persist.c: a backend's persistence mapping and its servers' keys for
 * it (pass 3, after the servers). */
void cfg_conv_persist(struct cfg_load *ld, const char *pre, const struct y_backend *y,
		      struct cfg_backend *b);
/* cfg_listener.c: an inspect mapping (a listener's, a route's override). */
void cfg_conv_inspect(struct cfg_load *ld, const char *pre, const struct y_inspect *y,
		      struct cfg_inspect *in, uint64_t memory_max);
/* cfg_route.c: a listener's routes (pass 3), their backends (pass 4), and
 * what cfg_free() releases. */
int cfg_conv_routes(struct cfg_load *ld, const char *pre, const struct y_listener *y,
		    struct cfg_listener *l);
void cfg_resolve_routes(struct cfg_load *ld, const char *pre, struct cfg *c, struct cfg_listener *l);
void cfg_free_routes(struct cfg_listener *l);
/* cfg_route.c: a rate_limit mapping (a listener's, a route's), the
 * top-level redis mapping (pass 3), and their cross checks (pass 4). */
void cfg_conv_rate_limit(struct cfg_load *ld, const char *pre, const struct y_rate_limit *y,
			 struct cfg_rate_limit *rl, int route);
void cfg_conv_redis(struct cfg_load *ld, const struct y_redis *y, struct cfg_redis *r);
void cfg_link_rate_limits(struct cfg_load *ld, const char *pre, const struct cfg *c, struct cfg_listener *l);

#endif
