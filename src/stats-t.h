/* Statistics kept in shared memory: counters, gauges and log-linear latency
 * histograms per listener, backend and server (per shm slot). Types only. */
#ifndef SLUICE_STATS_T_H
#define SLUICE_STATS_T_H

#include <stdatomic.h>
#include <stdint.h>
#include "reason-t.h"

/* HDR-style log-linear buckets over whole microseconds: values below 64
 * exactly, then 32 buckets per power of two (at most 1/32 = 3.1% wide), up
 * to 2^26 us (67 s); longer observations land in the last bucket. */
#define STATS_SUB_BITS 5
#define STATS_SUB (1u << STATS_SUB_BITS)
#define STATS_TOP_BITS 26
#define STATS_NBUCKETS ((STATS_TOP_BITS - STATS_SUB_BITS) * STATS_SUB + STATS_SUB)

/* Counters: name (Prometheus, without sluice_ prefix), help. */
#define STATS_COUNTERS(X) \
	X(REQUESTS,        "requests_total",            "Requests (listener: received; backend/server: sent)") \
	X(RESP_1XX,        "responses_1xx_total",       "Responses with a 1xx final status (101)") \
	X(RESP_2XX,        "responses_2xx_total",       "Responses with a 2xx status") \
	X(RESP_3XX,        "responses_3xx_total",       "Responses with a 3xx status") \
	X(RESP_4XX,        "responses_4xx_total",       "Responses with a 4xx status") \
	X(RESP_5XX,        "responses_5xx_total",       "Responses with a 5xx status") \
	X(RESP_NONE,       "responses_none_total",      "Requests that ended without a response") \
	X(BYTES_IN,        "request_body_bytes_total",  "Request body bytes received from clients") \
	X(BYTES_OUT,       "response_bytes_total",      "Response bytes sent to clients") \
	X(CONN_ACCEPTED,   "connections_accepted_total","Client connections accepted (listener)") \
	X(BCONN_NEW,       "backend_requests_new_connection_total",    "Requests sent on a new backend connection") \
	X(BCONN_REUSED,    "backend_requests_reused_connection_total", "Requests sent on a reused backend connection") \
	X(TLS_FULL_ECDSA,  "tls_handshakes_full_ecdsa_total",  "Full TLS handshakes with the ECDSA certificate") \
	X(TLS_FULL_RSA,    "tls_handshakes_full_rsa_total",    "Full TLS handshakes with the RSA certificate") \
	X(TLS_RESUMED,     "tls_handshakes_resumed_total",     "Resumed TLS handshakes") \
	X(TLS_FAILED,      "tls_handshakes_failed_total",      "Failed TLS handshakes") \
	X(INSPECT_ALLOW,   "inspect_allow_total",       "Requests the inspection hook allowed") \
	X(INSPECT_DENY,    "inspect_deny_total",        "Requests the inspection hook denied") \
	X(INSPECT_ERROR,   "inspect_error_total",       "Inspection hook errors (on_error applied)") \
	X(EJECTIONS,       "server_ejections_total",    "Times passive outlier detection took the server out (server)") \
	X(PERSIST_MISS,    "persistence_misses_total",  "Requests with no session key, or one naming no server: balanced (backend)") \
	X(PERSIST_HIT,     "persistence_hits_total",    "Requests sent to the server their session key names (backend)") \
	X(PERSIST_FAILOVER,"persistence_failovers_total","Requests whose session's server could not take them, sent elsewhere (backend)") \
	X(H2_REQUESTS,     "h2_requests_total",         "Requests received over HTTP/2 (listener; the rest of requests_total came over HTTP/1.x)") \
	X(H2_CONNS,        "h2_connections_total",      "Client connections that spoke HTTP/2 (listener)")

enum stats_counter {
#define STATS_ENUM(id, name, help) STAT_##id,
	STATS_COUNTERS(STATS_ENUM)
#undef STATS_ENUM
	STAT_NCOUNTERS
};

/* Gauges: a worker's own current value; the total is the sum over live workers. */
#define STATS_GAUGES(X) \
	X(CLIENTS,     "client_connections",       "Open client connections (listener)") \
	X(BCONN_IDLE,  "backend_connections_idle", "Idle pooled backend connections (server)") \
	X(BCONN_BUSY,  "backend_connections_busy", "Backend connections carrying a request (server)") \
	X(QUEUED,      "queued_requests",          "Requests waiting for a backend connection (backend)") \
	X(H2_CONNS,    "h2_client_connections",    "Open HTTP/2 client connections (listener)") \
	X(H2_STREAMS,  "h2_streams",               "Open HTTP/2 streams (listener)")

enum stats_gauge {
#define STATS_ENUM(id, name, help) GAUGE_##id,
	STATS_GAUGES(STATS_ENUM)
#undef STATS_ENUM
	GAUGE_N
};

#define STATS_HISTS(X) \
	X(QUEUE,   "queue_seconds",            "Time waiting for a backend connection") \
	X(CONNECT, "backend_connect_seconds",  "Backend connect (and TLS handshake) time") \
	X(BACKEND, "backend_response_seconds", "Request sent to first response byte") \
	X(TOTAL,   "request_seconds",          "First request byte to last response byte") \
	X(INSPECT, "inspect_seconds",          "Inspection hook time")

enum stats_hist {
#define STATS_ENUM(id, name, help) HIST_##id,
	STATS_HISTS(STATS_ENUM)
#undef STATS_ENUM
	HIST_N
};

/* Every field has one writer (the worker owning the row) and is updated
 * with relaxed load+store, not a locked read-modify-write: the data path
 * pays a plain add, and readers never see a torn 64-bit value. */
struct stats_hist_data {
	_Atomic uint64_t count, sum_us;
	_Atomic uint64_t b[STATS_NBUCKETS];
};

struct stats_block {
	_Atomic uint64_t c[STAT_NCOUNTERS];
	_Atomic uint64_t reason[REASON__COUNT];
	_Atomic int64_t gauge[GAUGE_N];
	struct stats_hist_data h[HIST_N];
};

#endif
