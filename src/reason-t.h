/* Why a request ended or a connection closed. One table generates the enum,
 * the HTTP status sluice answers with (0 = no response can be sent), the
 * snake_case name used in logs and counters, and the response body text
 * (Varnish include/tbl/sess_close.h). */
#ifndef SLUICE_REASON_T_H
#define SLUICE_REASON_T_H

#define REASON_TABLE(X) \
	X(OK,                    0, "ok",                      "") \
	X(BAD_REQUEST,         400, "bad_request",             "malformed request") \
	X(MISSING_HOST,        400, "missing_host",            "missing, duplicate or invalid Host header") \
	X(UNDERSCORE_HEADER,   400, "underscore_in_header_name", "header name with an underscore") \
	X(BAD_TE,              400, "bad_transfer_encoding",   "invalid Transfer-Encoding") \
	X(BAD_CHUNK,           400, "bad_chunk",               "malformed chunked body") \
	X(HEADER_TIMEOUT,      408, "client_header_timeout",   "request header timeout") \
	X(BODY_TIMEOUT,        408, "client_body_timeout",     "request body timeout") \
	X(BODY_TOO_LARGE,      413, "body_too_large",          "request body too large") \
	X(URI_TOO_LONG,        414, "request_line_too_long",   "request line too long") \
	X(EXPECT_FAILED,       417, "expectation_failed",      "unsupported Expect value") \
	X(HEADERS_TOO_LARGE,   431, "headers_too_large",       "request header fields too large") \
	X(INSPECT_DENIED,      403, "inspect_denied",          "request denied") \
	X(INSPECT_ERROR,       500, "inspect_error",           "request inspection failed") \
	X(INSPECT_BODY_TOO_LARGE, 413, "inspect_body_too_large", "request body larger than inspection allows") \
	X(PATH_REFUSED,        400, "path_refused",            "request path with a bad or refused %-escape") \
	X(ROUTE_REDIRECT,      302, "route_redirect",          "see Location") \
	X(ROUTE_RESPOND,       200, "route_respond",           "") \
	X(RATE_LIMITED,        429, "rate_limited",            "too many requests") \
	X(RATE_LIMIT_STORE,    503, "rate_limit_store_error",  "rate limit store unavailable") \
	X(MONITOR,             200, "monitor",                 "") \
	X(TLS_PLAIN_HTTP,      400, "plain_http_on_tls_port",  "plain HTTP request sent to a TLS port; use https://") \
	X(PROXY_BAD,             0, "proxy_header_invalid",    "") \
	X(PROXY_UNTRUSTED,       0, "proxy_header_untrusted",  "") \
	X(PROXY_TIMEOUT,         0, "proxy_header_timeout",    "") \
	X(TLS_HANDSHAKE,         0, "tls_handshake_failed",    "") \
	X(TLS_ERROR,             0, "tls_error",               "") \
	X(TE_UNSUPPORTED,      501, "unsupported_transfer_encoding", "transfer coding not implemented") \
	X(METHOD_UNSUPPORTED,  501, "method_not_implemented",  "method not implemented") \
	X(BACKEND_REFUSED,     502, "backend_refused",         "backend connection failed") \
	X(BACKEND_CLOSED,      502, "backend_closed",          "backend closed the connection") \
	X(BACKEND_RESET,       502, "backend_reset",           "backend connection failed") \
	X(BACKEND_BAD_RESPONSE,502, "backend_bad_response",    "invalid response from backend") \
	X(BACKEND_TLS,         502, "backend_tls_failed",      "TLS to the backend failed") \
	X(QUEUE_TIMEOUT,       503, "queue_timeout",           "no backend connection available in time") \
	X(QUEUE_FULL,          503, "queue_full",              "backend queue full") \
	X(NO_SERVER,           503, "no_server_available",     "no backend server available") \
	X(SHUTTING_DOWN,       503, "shutting_down",           "server shutting down") \
	X(CONNECT_TIMEOUT,     504, "backend_connect_timeout", "backend connect timeout") \
	X(BACKEND_TIMEOUT,     504, "backend_timeout",         "backend response timeout") \
	X(CLIENT_ABORT,          0, "client_aborted",          "") \
	X(CLIENT_WRITE_ERROR,    0, "client_write_error",      "") \
	X(CLIENT_SEND_TIMEOUT,   0, "client_send_timeout",     "") \
	X(BACKEND_ABORT,         0, "backend_aborted_response", "")

enum reason {
#define REASON_ENUM(id, status, name, text) REASON_##id,
	REASON_TABLE(REASON_ENUM)
#undef REASON_ENUM
	REASON__COUNT
};

#endif
