/* The libcyaml schema of sluice.yaml (pass 2 of cfg_load(), see cfg.c): the
 * keys each mapping accepts, which are required, and the list lengths. Its
 * tree, struct y_root and below, is declared in cfg-int.h.
 * tests/e2e/test_docs.py reads these tables as C text to check that
 * docs/config.md documents every key: keep each one a
 * `static const cyaml_schema_field_t NAME[] = { ... };`. */
#include <cyaml/cyaml.h>

#include "cfg.h"
#include "cfg-int.h"

#define CFG_TLS_CERTS_MAX 64    /* certificates per TLS listener */

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

static const cyaml_schema_field_t y_eject_fields[] = {
	F_STR("consecutive_5xx", OPT, struct y_eject, consecutive_5xx),
	F_STR("consecutive_timeouts", OPT, struct y_eject, consecutive_timeouts),
	F_STR("duration", OPT, struct y_eject, duration),
	F_STR("max_ejected_percent", OPT, struct y_eject, max_ejected_percent),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_persist_fields[] = {
	F_STR("type", REQ, struct y_persist, type),
	F_STR("cookie", OPT, struct y_persist, cookie),
	F_STR("path_parameter", OPT, struct y_persist, path_parameter),
	F_STR("secure", OPT, struct y_persist, secure),
	F_STR("http_only", OPT, struct y_persist, http_only),
	F_STR("same_site", OPT, struct y_persist, same_site),
	F_STR("max_age", OPT, struct y_persist, max_age),
	F_STR("domain", OPT, struct y_persist, domain),
	F_STR("path", OPT, struct y_persist, path),
	F_STR("ttl", OPT, struct y_persist, ttl),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_server_fields[] = {
	F_STR("name", OPT, struct y_server, name),
	F_STR("address", REQ, struct y_server, address),
	F_STR("max_connections", OPT, struct y_server, max_connections),
	F_STR("weight", OPT, struct y_server, weight),
	F_STR("backup", OPT, struct y_server, backup),
	F_STR("proxy_protocol", OPT, struct y_server, proxy_protocol),
	F_STR("route", OPT, struct y_server, route),
	F_STR("jvmid", OPT, struct y_server, jvmid),
	F_STR("cookie", OPT, struct y_server, cookie),
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
	F_STR("all_backups", OPT, struct y_backend, all_backups),
	F_STR("slow_start", OPT, struct y_backend, slow_start),
	CYAML_FIELD_MAPPING_PTR("health_check", OPT, struct y_backend, health_check,
				y_health_fields),
	CYAML_FIELD_MAPPING_PTR("eject", OPT, struct y_backend, eject, y_eject_fields),
	CYAML_FIELD_MAPPING_PTR("persistence", OPT, struct y_backend, persistence, y_persist_fields),
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

#define CFG_ROUTES_MAX 10000  /* per listener */

static const cyaml_schema_field_t y_kv_fields[] = {
	F_STR("name", REQ, struct y_kv, name),
	F_STR("value", REQ, struct y_kv, value),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_kv_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_kv, y_kv_fields),
};

static const cyaml_schema_field_t y_header_cond_fields[] = {
	F_STR("name", REQ, struct y_cond, name),
	F_STR("present", OPT, struct y_cond, present),
	F_STR("equals", OPT, struct y_cond, equals),
	F_STR("regex", OPT, struct y_cond, regex),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_header_cond_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_cond, y_header_cond_fields),
};

static const cyaml_schema_field_t y_cookie_cond_fields[] = {
	F_STR("name", REQ, struct y_cond, name),
	F_STR("present", OPT, struct y_cond, present),
	F_STR("equals", OPT, struct y_cond, equals),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_cookie_cond_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_cond, y_cookie_cond_fields),
};

static const cyaml_schema_field_t y_path_fields[] = {
	F_STR("exact", OPT, struct y_path, exact),
	F_STR("prefix", OPT, struct y_path, prefix),
	F_STR("regex", OPT, struct y_path, regex),
	F_STR("plain", OPT, struct y_path, plain),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_match_fields[] = {
	F_STRS("host", struct y_match, host),
	CYAML_FIELD_MAPPING_PTR("path", OPT, struct y_match, path, y_path_fields),
	F_STRS("methods", struct y_match, methods),
	CYAML_FIELD_SEQUENCE("headers", CYAML_FLAG_POINTER | OPT, struct y_match, headers,
			     &y_header_cond_schema, 0, CYAML_UNLIMITED),
	CYAML_FIELD_SEQUENCE("cookies", CYAML_FLAG_POINTER | OPT, struct y_match, cookies,
			     &y_cookie_cond_schema, 0, CYAML_UNLIMITED),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_redirect_fields[] = {
	F_STR("status", OPT, struct y_redirect, status),
	F_STR("location", REQ, struct y_redirect, location),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_respond_fields[] = {
	F_STR("status", OPT, struct y_respond, status),
	F_STR("body", OPT, struct y_respond, body),
	F_STR("body_file", OPT, struct y_respond, body_file),
	F_STR("content_type", OPT, struct y_respond, content_type),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_rate_limit_fields[] = {
	F_STR("key", OPT, struct y_rate_limit, key),
	F_STR("rate", OPT, struct y_rate_limit, rate),
	F_STR("burst", OPT, struct y_rate_limit, burst),
	F_STR("store", OPT, struct y_rate_limit, store),
	F_STR("on_store_error", OPT, struct y_rate_limit, on_store_error),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_redis_fields[] = {
	F_STR("address", REQ, struct y_redis, address),
	F_STR("timeout", OPT, struct y_redis, timeout),
	F_STR("connect_timeout", OPT, struct y_redis, connect_timeout),
	F_STR("password", OPT, struct y_redis, password),
	F_STR("db", OPT, struct y_redis, db),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_route_fields[] = {
	F_STR("name", OPT, struct y_route, name),
	CYAML_FIELD_MAPPING_PTR("match", OPT, struct y_route, match, y_match_fields),
	F_STR("backend", OPT, struct y_route, backend),
	CYAML_FIELD_MAPPING_PTR("inspect_override", OPT, struct y_route, inspect_override, y_inspect_fields),
	CYAML_FIELD_MAPPING_PTR("redirect", OPT, struct y_route, redirect, y_redirect_fields),
	CYAML_FIELD_MAPPING_PTR("respond", OPT, struct y_route, respond, y_respond_fields),
	CYAML_FIELD_SEQUENCE("set_request_headers", CYAML_FLAG_POINTER | OPT, struct y_route,
			     set_request_headers, &y_kv_schema, 0, CYAML_UNLIMITED),
	F_STRS("remove_request_headers", struct y_route, remove_request_headers),
	CYAML_FIELD_SEQUENCE("set_response_headers", CYAML_FLAG_POINTER | OPT, struct y_route,
			     set_response_headers, &y_kv_schema, 0, CYAML_UNLIMITED),
	F_STRS("remove_response_headers", struct y_route, remove_response_headers),
	F_STR("inspect", OPT, struct y_route, inspect),
	F_STR("response_timeout", OPT, struct y_route, response_timeout),
	F_STR("max_body_size", OPT, struct y_route, max_body_size),
	CYAML_FIELD_MAPPING_PTR("rate_limit", OPT, struct y_route, rate_limit, y_rate_limit_fields),
	CYAML_FIELD_END
};

static const cyaml_schema_value_t y_route_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_DEFAULT, struct y_route, y_route_fields),
};

static const cyaml_schema_field_t y_http2_fields[] = {
	F_STR("max_concurrent_streams", OPT, struct y_http2, max_concurrent_streams),
	F_STR("initial_window_size", OPT, struct y_http2, initial_window_size),
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
	F_STRS("protocols", struct y_listener, protocols),
	F_STR("h2c", OPT, struct y_listener, h2c),
	F_STR("monitor_uri", OPT, struct y_listener, monitor_uri),
	CYAML_FIELD_MAPPING_PTR("http2", OPT, struct y_listener, http2, y_http2_fields),
	CYAML_FIELD_SEQUENCE("routes", CYAML_FLAG_POINTER | OPT, struct y_listener, routes,
			     &y_route_schema, 0, CFG_ROUTES_MAX),
	CYAML_FIELD_MAPPING_PTR("rate_limit", OPT, struct y_listener, rate_limit, y_rate_limit_fields),
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
	F_STR("drain_notice", OPT, struct y_timeouts, drain_notice),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_limits_fields[] = {
	F_STR("max_request_line", OPT, struct y_limits, max_request_line),
	F_STR("max_header_size", OPT, struct y_limits, max_header_size),
	F_STR("max_headers", OPT, struct y_limits, max_headers),
	F_STR("max_body_size", OPT, struct y_limits, max_body_size),
	F_STR("max_connections", OPT, struct y_limits, max_connections),
	F_STR("rate_limit_entries", OPT, struct y_limits, rate_limit_entries),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_admin_fields[] = {
	F_STR("address", OPT, struct y_admin, address),
	F_STR("token", OPT, struct y_admin, token),
	CYAML_FIELD_END
};

static const cyaml_schema_field_t y_root_fields[] = {
	F_STR("workers", OPT, struct y_root, workers),
	F_STR("instances", OPT, struct y_root, instances),
	F_STR("error_log", OPT, struct y_root, error_log),
	F_STR("access_log", OPT, struct y_root, access_log),
	F_STR("access_log_format", OPT, struct y_root, access_log_format),
	CYAML_FIELD_MAPPING_PTR("admin", OPT, struct y_root, admin, y_admin_fields),
	F_STR("inspection", OPT, struct y_root, inspection),
	F_STR("lua_memory_max", OPT, struct y_root, lua_memory_max),
	F_STR("lua_shared_memory", OPT, struct y_root, lua_shared_memory),
	F_STR("pid_file", OPT, struct y_root, pid_file),
	F_STR("syslog_facility", OPT, struct y_root, syslog_facility),
	F_STR("user", OPT, struct y_root, user),
	F_STR("group", OPT, struct y_root, group),
	CYAML_FIELD_MAPPING_PTR("timeouts", OPT, struct y_root, timeouts, y_timeouts_fields),
	CYAML_FIELD_MAPPING_PTR("limits", OPT, struct y_root, limits, y_limits_fields),
	CYAML_FIELD_MAPPING_PTR("redis", OPT, struct y_root, redis, y_redis_fields),
	CYAML_FIELD_SEQUENCE("listeners", CYAML_FLAG_POINTER, struct y_root, listeners,
			     &y_listener_schema, 1, CFG_MAX_LISTENERS),
	CYAML_FIELD_SEQUENCE("backends", CYAML_FLAG_POINTER, struct y_root, backends,
			     &y_backend_schema, 1, CFG_MAX_BACKENDS),
	CYAML_FIELD_END
};

const cyaml_schema_value_t cfg_root_schema = {
	CYAML_VALUE_MAPPING(CYAML_FLAG_POINTER, struct y_root, y_root_fields),
};
