/* Configuration types: the in-memory form of sluice.yaml after loading and
 * validation. Only structs, enums and defines live here (see conventions).
 *
 * Ownership: one struct cfg owns everything reachable from it; cfg_free()
 * releases the whole tree. Durations are stored in milliseconds, sizes in
 * bytes, already converted from "2s"/"150ms"/"16k" by the loader. */
#ifndef SLUICE_CFG_T_H
#define SLUICE_CFG_T_H

#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include "netaddr.h"

#define CFG_NAME_MAX 64
#define CFG_MAX_LISTENERS 32
#define CFG_MONITOR_URI_MAX 256
#define CFG_DRAIN_NOTICE_MAX_MS 600000u
#define CFG_MAX_BACKENDS 64
#define CFG_MAX_SERVERS 256 /* per backend */

enum cfg_balance {
	CFG_BALANCE_ROUNDROBIN, /* rotate over up servers */
	CFG_BALANCE_LEASTCONN,  /* fewest active connections, instance-wide */
};

/* A socket address parsed from "host:port" or "[v6]:port". */
struct cfg_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	char text[80]; /* as written, for logs */
};

struct cfg_health {
	int enabled;             /* 1 when the health_check mapping is present */
	char path[256];          /* GET target, default "/" */
	uint32_t interval_ms;    /* default 2000 */
	uint32_t timeout_ms;     /* default 1000 */
	int expect_status;       /* default 200 */
	uint32_t rise;           /* successes to come back up, default 2 */
	uint32_t fall;           /* failures to go down, default 3 */
};

/* TLS towards the servers of a backend (re-encryption). */
struct cfg_backend_tls {
	int enabled;               /* 1 when the tls mapping is present */
	int verify;                /* verify the server certificate (default on) */
	char ca[512];              /* CA file to verify against; required when verify is on */
	char sni[256];             /* server_name sent, and the name verified; "" = none */
	char cert[512];            /* client certificate for mutual TLS; "" = none */
	char key[512];             /* its key; "" = in cert */
	int min_version, max_version; /* as for listeners; default TLSv1.2..TLSv1.3 */
	int session_reuse;         /* resume sessions on new connections (default on) */
	int line, col;             /* of the tls mapping */
};

enum cfg_proxy_protocol {
	CFG_PP_OFF,  /* default */
	CFG_PP_V1,   /* text header */
	CFG_PP_V2,   /* binary header, optionally with TLVs */
};

/* PROXY v2 TLVs a server may be sent (cfg_server.proxy_tlvs bits). */
#define CFG_PP_TLV_ALPN      (1u << 0)  /* ALPN of the client's TLS connection */
#define CFG_PP_TLV_AUTHORITY (1u << 1)  /* SNI the client sent */
#define CFG_PP_TLV_UNIQUE_ID (1u << 2)  /* sluice's id of the client connection */
#define CFG_PP_TLV_CRC32C    (1u << 3)  /* checksum of the whole header */
#define CFG_PP_TLV_SSL       (1u << 4)  /* TLS facts with VERSION, CN, CIPHER, SIG_ALG, KEY_ALG */

struct cfg_server {
	char name[CFG_NAME_MAX];
	struct cfg_addr addr;
	uint32_t max_connections; /* instance-wide cap on open conns, default 32 */
	uint32_t weight;          /* share of new requests, 0..256, default 1; 0 = none */
	int backup;               /* only when no primary server can be used, default 0 */
	enum cfg_proxy_protocol proxy_protocol; /* PROXY header on each new connection */
	unsigned proxy_tlvs;      /* CFG_PP_TLV_* (v2 only), default none */
	/* Session persistence (the backend's persistence.type): */
	char route[CFG_NAME_MAX];  /* jvm_route: Tomcat's jvmRoute, default the server's name */
	char jvmid[CFG_NAME_MAX];  /* weblogic: a JVMID to start from before one is learned, "" = none */
	char cookie[CFG_NAME_MAX]; /* cookie: the value naming it, default derived from the names */
};

enum cfg_xff {
	CFG_XFF_OFF,
	CFG_XFF_APPEND,   /* default: trusted chains keep theirs, then the client's IP */
	CFG_XFF_REPLACE,  /* only the client's IP, even from trusted forwarders */
};

/* Headers that tell a backend's servers who the client was. Incoming
 * identity headers are removed unless the client is a trusted forwarder
 * (cfg_listener.trusted_forwarders), whatever is switched on here. */
struct cfg_forward {
	enum cfg_xff x_forwarded_for;  /* default append */
	int x_forwarded_proto;         /* http|https, default on */
	int x_forwarded_host;          /* the Host header, default off */
	int x_forwarded_port;          /* port the client connected to, default off */
	int forwarded;                 /* RFC 7239 for=;proto=;host=, default off */
	int x_real_ip;                 /* default off */
	int wl_proxy_ssl;              /* WL-Proxy-SSL: true|false, default off */
	int wl_proxy_client_ip;        /* default off */
	int wl_proxy_client_port;      /* default off */
	int wl_proxy_client_cert;      /* base64 DER of the client certificate, default off */
};

/* Passive outlier ejection: a server whose responses keep failing is taken
 * out for a while, even without active health checks. */
struct cfg_eject {
	int enabled;                    /* 1 when the eject mapping is present */
	uint32_t consecutive_5xx;       /* 5xx answers (the server's or sluice's 502) in a row, default 5; 0 = off */
	uint32_t consecutive_timeouts;  /* connect or response timeouts in a row, default 3; 0 = off */
	uint32_t duration_ms;           /* how long it stays out, default 30000 */
	uint32_t max_ejected_percent;   /* of the backend's servers out at once, default 50 */
};

/* Session persistence: how a request finds the server holding its session. */
enum cfg_persist_type {
	CFG_PERSIST_NONE,
	CFG_PERSIST_COOKIE,      /* sluice inserts its own cookie naming the server */
	CFG_PERSIST_JVM_ROUTE,   /* Tomcat: JSESSIONID=<id>.<jvmRoute> */
	CFG_PERSIST_WEBLOGIC,    /* WebLogic: JSESSIONID=<id>!<primary>!<secondary> */
	CFG_PERSIST_APP_COOKIE,  /* a cookie the application sets, learned from responses */
	CFG_PERSIST_SOURCE,      /* consistent hashing of the client address */
};

enum cfg_same_site { CFG_SAMESITE_OFF, CFG_SAMESITE_LAX, CFG_SAMESITE_STRICT, CFG_SAMESITE_NONE };

struct cfg_persist {
	enum cfg_persist_type type;
	char cookie[CFG_NAME_MAX];      /* cookie name: sluice's (cookie, default SLUICE_SERVER), the
					 * session's (jvm_route, weblogic: default JSESSIONID), the
					 * application's (app_cookie: required) */
	char path_parameter[CFG_NAME_MAX]; /* jvm_route, weblogic: ";name=" in the path, default
					 * jsessionid; "" = cookie only */
	/* type cookie: the attributes of the cookie sluice sets */
	int secure;                     /* -1 = when the client connection is TLS (default) */
	int http_only;                  /* default 1 */
	enum cfg_same_site same_site;   /* default lax */
	uint32_t max_age_s;             /* 0 = a browser-session cookie (default) */
	char domain[256], path[256];    /* "" = none; path default "/" */
	uint32_t ttl_ms;                /* app_cookie: an entry unused this long is forgotten, default 30 min */
};

struct cfg_backend {
	char name[CFG_NAME_MAX];
	enum cfg_balance balance;       /* default roundrobin */
	uint32_t queue_timeout_ms;      /* wait for a free connection, default 5000 */
	uint32_t queue_max;             /* per worker queued requests, default 10000 */
	int queue_abort_on_close;       /* drop a queued request whose client closed, default 1 */
	uint32_t idle_max;              /* idle keepalive conns kept per worker per server; default
					 * UINT32_MAX: no limit beyond max_connections */
	uint32_t idle_timeout_ms;       /* default 30000 */
	uint32_t connect_timeout_ms;    /* default 3000 */
	uint32_t response_timeout_ms;   /* first byte and between reads, default 30000 */
	int all_backups;                /* no primary usable: all backups share, else the first (default) */
	uint32_t slow_start_ms;         /* ramp of a server that comes back, 0 = off (default) */
	struct cfg_health health;
	struct cfg_eject eject;
	struct cfg_persist persist;
	struct cfg_backend_tls tls;
	struct cfg_forward forward;
	struct cfg_server *servers;
	unsigned nservers;
};

enum cfg_client_auth {
	CFG_CLIENT_AUTH_OFF,       /* no certificate requested (default) */
	CFG_CLIENT_AUTH_OPTIONAL,  /* requested; verified if sent; result recorded, never fatal */
	CFG_CLIENT_AUTH_REQUIRED,  /* handshake fails without a certificate that verifies */
};

/* One certificate of a TLS listener. CERT may hold the chain after the leaf
 * and the key too (then KEY is ""). LINE/COL locate the entry in the config
 * file so TLS loading errors can point at it. */
struct cfg_tls_cert {
	char cert[512];
	char key[512];
	char passphrase[256];      /* for an encrypted key; "" = none */
	int line, col;
};

struct cfg_tls {
	int enabled;               /* 1 when the tls mapping is present */
	struct cfg_tls_cert *certs;
	unsigned ncerts;           /* >= 1 when enabled */
	int min_version;           /* 0x0303 (TLSv1.2, default) or 0x0304 */
	int max_version;           /* 0x0304 (TLSv1.3, default) or 0x0303 */
	char ciphers[1024];        /* TLS 1.2 cipher list; "" = sluice's modern default */
	char ciphersuites[512];    /* TLS 1.3 suites (OpenSSL builds only); "" = library default */
	char curves[256];          /* default "X25519:P-256:P-384" */
	int tickets;               /* session tickets on (1, default) or off */
	char ticket_keys[512];     /* key file; "" = random keys made by the master at start */
	uint32_t session_cache;    /* per-worker session cache entries for TLS 1.2, 0 = off (default) */
	uint32_t handshake_timeout_ms; /* default 10000 */
	enum cfg_client_auth client_auth;
	char client_ca[512];       /* CA file; required unless client_auth is off */
	uint32_t verify_depth;     /* default 3 */
	int line, col;             /* of the tls mapping */
};

/* The Lua inspection hook of a listener (docs/lua-api.md). */
struct cfg_inspect {
	int enabled;               /* 1 when the inspect mapping is present */
	char script[512];          /* path, relative to the working directory */
	uint32_t body;             /* request body bytes to hold and inspect, 0 = off (default) */
	int body_reject;           /* a longer body: 1 = 413, 0 = inspect its first bytes (default) */
	int on_error_deny;         /* script error or budget overrun: 1 = 500, 0 = allow (default) */
	uint64_t budget_instructions; /* per call, default 1,000,000; 0 = none */
	uint32_t budget_us;        /* worker CPU time per call, default 5000; 0 = none */
	uint32_t budget_wall_us;   /* wall-clock ceiling per call, default 1 s; 0 = none */
	int shadow;                /* mode: shadow: run, decide, apply nothing */
	int line, col;             /* of the script key, for load errors */
};

/* What a listener does with a request header whose name has an underscore
 * (Transfer_Encoding and Content_Length are always refused, and identity
 * headers so spelled are removed like the dashed ones). */
enum cfg_underscores {
	CFG_US_ALLOW,   /* forward it (default) */
	CFG_US_DROP,    /* forward the request without it (nginx's default) */
	CFG_US_REJECT,  /* answer 400 */
};

/* Content routing (docs/config.md "listeners[].routes"). Compiled regexes
 * are pcre2_code pointers, owned by the cfg. */
enum cfg_path_match {
	CFG_PATH_ANY,
	CFG_PATH_EXACT,
	CFG_PATH_PREFIX,        /* on segment boundaries: /app matches /app and /app/x, not /apps */
	CFG_PATH_PLAIN_PREFIX,  /* plain: /app matches /apps too */
	CFG_PATH_REGEX,
};

enum cfg_cond_op {
	CFG_COND_PRESENT,
	CFG_COND_ABSENT,
	CFG_COND_EQUALS,
	CFG_COND_REGEX,         /* headers only */
};

/* One header or cookie condition. */
struct cfg_cond {
	char name[128];
	enum cfg_cond_op op;
	char *value;            /* equals: the value; regex: the pattern */
	size_t value_len;
	void *re;               /* regex: compiled */
};

enum cfg_route_action {
	CFG_ROUTE_BACKEND,      /* forward (to `backend`, or the listener's) */
	CFG_ROUTE_REDIRECT,
	CFG_ROUTE_RESPOND,
};

/* A native rate limit (docs/config.md "rate_limit"): GCRA, i.e. a token
 * bucket of BURST requests refilled at one per INTERVAL_US. */
enum cfg_rl_key {
	CFG_RL_CLIENT,          /* the client's address (after PROXY protocol) */
	CFG_RL_HEADER,          /* a request header's first value */
	CFG_RL_COOKIE,          /* a cookie's first value */
};

enum cfg_rl_store {
	CFG_RL_LOCAL,           /* shared memory: exact across this instance's workers */
	CFG_RL_REDIS,           /* the top-level redis: one Redis for every instance */
};

struct cfg_rate_limit {
	int mode;                       /* CFG_RL_INHERIT (a route without one), _OFF, _ON */
	enum cfg_rl_key key;
	char key_name[128];             /* header or cookie name */
	uint64_t interval_us;           /* 1 / rate */
	uint32_t burst;                 /* requests at once, >= 1 */
	enum cfg_rl_store store;
	int on_store_error_deny;        /* redis unreachable or late: 1 = 503, 0 = allow (default) */
	char scope[2 * CFG_NAME_MAX];   /* "listener" or "listener/route": whose counters (set at link) */
	uint64_t scope_hash;            /* of scope: seeds the key hashes, so limits never share state */
	int line, col;                  /* of the mapping */
};
#define CFG_RL_INHERIT 0
#define CFG_RL_OFF     1
#define CFG_RL_ON      2

/* The Redis that `store: redis` limits share (top-level `redis:`). */
struct cfg_redis {
	int enabled;                    /* 1 when the mapping is present */
	char address[256];              /* "host:port" as written, or a unix socket path */
	int unix_socket;                /* address is a path */
	struct cfg_addr addr;           /* host:port, resolved at load */
	uint32_t timeout_ms;            /* per decision, default 50 */
	uint32_t connect_timeout_ms;    /* default 1000 */
	char password[256];             /* AUTH; "" = none */
	uint32_t db;                    /* SELECT, default 0 */
};

struct cfg_route {
	char name[CFG_NAME_MAX];
	int line, col;                  /* of the entry, for messages */
	int stats_slot;                 /* its routestats slot (the master sets it), -1 = none */
	/* match: every condition given must hold */
	char (*hosts)[256];             /* lowercase; "*.example.com" = any subdomain */
	unsigned nhosts;
	enum cfg_path_match path_kind;
	char *path;                     /* exact/prefix text, or the regex */
	void *path_re;
	uint64_t methods;               /* bit per llhttp method; 0 = any */
	struct cfg_cond *headers;
	unsigned nheaders;
	struct cfg_cond *cookies;
	unsigned ncookies;
	/* action */
	enum cfg_route_action action;
	char backend_name[CFG_NAME_MAX]; /* "" = the listener's */
	struct cfg_backend *backend;    /* resolved by the loader; NULL = the listener's */
	int status;                     /* redirect / respond */
	char *location;                 /* redirect template: {scheme} {host} {path} {query} */
	char *body;                     /* respond */
	size_t body_len;
	char content_type[128];
	/* header edits, as the backend/client will see them */
	char *req_add;                  /* "Name: value\r\n"... */
	size_t req_add_len;
	char *req_del;                  /* "name\0"... */
	size_t req_del_len;
	char *resp_add;
	size_t resp_add_len;
	char *resp_del;
	size_t resp_del_len;
	/* per-route policy */
	int inspect;                    /* run the listener's hook (default 1) */
	struct cfg_inspect *inspect_override; /* another script or mode for this route, or NULL */
	uint32_t response_timeout_ms;   /* 0 = the backend's */
	uint64_t max_body_size;         /* UINT64_MAX = limits.max_body_size; 0 = unlimited */
	struct cfg_rate_limit rate_limit; /* mode CFG_RL_INHERIT: the listener's */
};

struct cfg_listener {
	char name[CFG_NAME_MAX];
	struct cfg_addr addr;
	int backlog;                    /* listen(2) backlog, default 511 */
	char backend_name[CFG_NAME_MAX];
	struct cfg_backend *backend;    /* resolved by the loader, never NULL */
	struct cfg_tls tls;
	/* PROXY protocol in: peers in these networks must open with a v1 or v2
	 * header; from anyone else a header closes the connection. */
	struct cidr *proxy_from;
	unsigned nproxy_from;           /* 0 = PROXY protocol not accepted */
	/* Clients whose identity headers (X-Forwarded-*, Forwarded, WL-Proxy-*,
	 * X-Real-IP, ...) are kept and appended to: a chain of proxies. */
	struct cidr *trusted_forwarders;
	unsigned ntrusted_forwarders;
	enum cfg_underscores underscores;
	/* HTTP/2 (h2.c). TLS listeners offer by ALPN what PROTOCOLS lists
	 * (h2 first when both); a plain one speaks h2 with prior knowledge
	 * only with h2c on. */
	uint8_t alpn_h2, alpn_h1;       /* protocols: [h2, http/1.1] (TLS default both) */
	uint8_t h2c;                    /* h2c: off (default) */
	uint32_t h2_max_streams;        /* http2.max_concurrent_streams, default 100 */
	uint32_t h2_window;             /* http2.initial_window_size: per-stream receive window, default 65535 */
	struct cfg_inspect inspect;
	/* A request whose path is this is answered by sluice itself, 200 or 503
	 * by readiness (HAProxy's monitor-uri); "" = none. */
	char monitor_uri[CFG_MONITOR_URI_MAX];
	struct cfg_route *routes;       /* in order: the first that matches wins */
	unsigned nroutes;
	struct cfg_rate_limit rate_limit; /* mode CFG_RL_INHERIT: none */
};

struct cfg_timeouts {
	uint32_t client_header_ms;      /* whole header must arrive, default 10000 */
	uint32_t client_keepalive_ms;   /* idle between requests, default 60000 */
	uint32_t client_body_ms;        /* between body reads, default 30000 */
	uint32_t client_send_ms;        /* client must accept response bytes within, default 60000 */
	uint32_t drain_ms;              /* graceful stop/reload budget, default 10000 */
	/* Not ready (GET /ready, monitor_uri: 503) but still accepting, before a
	 * stop or a reload that removes a listener closes sockets; default 0 */
	uint32_t drain_notice_ms;
};

struct cfg_limits {
	uint32_t max_request_line;      /* bytes, default 8192 -> 414 */
	uint32_t max_header_size;       /* all header bytes, default 32768 -> 431 */
	uint32_t max_headers;           /* count, default 100 -> 431 */
	uint64_t max_body_size;         /* 0 = unlimited, else 413 */
	uint32_t max_connections;       /* client conns per worker, default 100000 */
	uint32_t rate_limit_entries;    /* keys the instance-wide rate limit table holds, default 65536 */
};

enum cfg_log_format {
	CFG_LOG_TEXT,   /* one line of key=value fields (default) */
	CFG_LOG_JSON,   /* one JSON object per line */
};

/* The admin listener: metrics, status, dashboard and controls. Served by
 * worker 0 on its own socket. */
struct cfg_admin {
	int enabled;               /* 1 when the admin mapping is present */
	struct cfg_addr addr;      /* default 127.0.0.1:9901 */
	char token[256];           /* "" = none; else "Authorization: Bearer <token>" required */
};

struct cfg {
	char path[512];                 /* file it was read from */
	unsigned workers;               /* default: number of online CPUs */
	/* sluice instances in the tier that share these backends: each
	 * server's max_connections is the tier's total, divided by this */
	uint32_t instances;
	char error_log[512];            /* "stderr" or a file path, default stderr */
	char access_log[512];           /* "stderr", "off" or a file path, default stderr */
	enum cfg_log_format access_log_format;
	struct cfg_admin admin;
	int inspection;                 /* the live inspection switch at start/reload, default on */
	uint64_t lua_memory_max;        /* bytes per worker Lua state, default 64 MiB */
	uint64_t lua_shared_memory;     /* bytes of sluice.shared, instance-wide (shdict.h) */
	char pid_file[512];             /* "" = none */
	char syslog_facility[16];       /* for logs set to "syslog": daemon (default), user, local0..7 */
	char user[CFG_NAME_MAX];        /* workers' account; "" = unset (a root master refuses) */
	char group[CFG_NAME_MAX];       /* "" = the user's primary group */
	uid_t uid;                      /* resolved from user/group at load */
	gid_t gid;
	struct cfg_timeouts timeouts;
	struct cfg_limits limits;
	struct cfg_redis redis;
	struct cfg_listener *listeners;
	unsigned nlisteners;
	struct cfg_backend *backends;
	unsigned nbackends;
};

#endif
