/* Runtime objects of a worker's data path: client connections, the streams
 * they carry, backend connections, servers and backends. Structs only. */
#ifndef SLUICE_PROXY_T_H
#define SLUICE_PROXY_T_H

#include <stdint.h>
#include <uv.h>
#include <llhttp.h>
#include "acceptor.h"
#include "buf.h"
#include "cfg-t.h"
#include "deadline.h"
#include "httpmsg.h"
#include "netaddr.h"
#include "outq.h"
#include "reason-t.h"
#include "util.h"


/* The connection's own state. What a request is doing is its stream's
 * (enum stream_state); a connection between requests holds none. */
enum client_state {
	CL_PROXY,     /* first bytes: a PROXY header (trusted peer) or proof there is none */
	CL_OPEN,      /* its codec has it: requests come and go */
	CL_LINGER,    /* its last response goes out, then half-close, read and discard */
	CL_CLOSING,   /* handles closing; freed in the last close callback */
};

/* One request/response exchange, whatever the protocol it came in. */
enum stream_state {
	ST_HEAD,      /* receiving a request head */
	ST_LIMIT,     /* head accepted; waiting for the rate limit store's verdict (Redis) */
	ST_WAIT,      /* head accepted; held for inspection, queued for, or connecting to, a backend */
	ST_EXCHANGE,  /* a backend connection carries the request/response */
	ST_TUNNEL,    /* after 101: raw bytes both ways */
};

/* What the inspection hook decided about a request (access log, counters,
 * req:decision()). */
#define INSPECT_DECISIONS(X) \
	X(OFF,            "off")            /* not inspected */ \
	X(ALLOW,          "allow") \
	X(DENY,           "deny") \
	X(REDIRECT,       "redirect") \
	X(ERROR,          "error")          /* script failed; on_error applied */ \
	X(WOULD_DENY,     "would_deny")     /* shadow mode */ \
	X(WOULD_REDIRECT, "would_redirect")

enum inspect_decision {
#define INSPECT_ENUM(id, name) INSPECT_##id,
	INSPECT_DECISIONS(INSPECT_ENUM)
#undef INSPECT_ENUM
};

#define INSPECT_MAX_TAGS 8

/* A request's inspection: the hook's edits and verdict. The buffers keep
 * their capacity across the requests of a connection. */
struct txn_insp {
	struct buf req_hdrs;       /* header lines the hook added, for the backend */
	struct buf req_del;        /* names (each NUL-terminated) of headers not to forward */
	struct buf resp_hdrs;      /* ... for the client (inspect_response) */
	struct buf resp_del;
	struct buf local;          /* deny body, or redirect Location */
	struct buf tags;           /* "tag1,tag2" */
	uint64_t us;               /* wall time inspect() took */
	uint16_t status;           /* deny/redirect status */
	uint8_t decision;          /* enum inspect_decision */
	uint8_t ran;               /* inspect() was called */
	uint8_t waiting;           /* holding the request until its body is in */
	uint8_t reply_pending;     /* answer locally once the request is read */
	uint8_t ntags;
	uint8_t body_truncated;
	uint8_t deny_body;         /* deny() was given a body (LOCAL holds it, maybe empty) */
};

struct inspect_script;

/* A stream: one request and its response, protocol-neutral. Taken from the
 * worker's pool when a request starts and given back when it ends, so an
 * idle connection holds none; its buffers keep their capacity in the pool.
 * Its codec finds it (a connection never names it): HTTP/1.1 carries one
 * at a time, HTTP/2 many. */
struct stream {
	struct client *cl;         /* the connection it came on: its identity (addresses, listener, TLS) */
	void *codec_ctx;           /* the codec's own state for this stream */
	struct msg req;            /* request head as received */
	struct msg resp;           /* response head from the backend */
	struct buf head;           /* request head rewritten for the backend; kept for a retry */
	struct buf tobe;           /* request bytes produced before a backend is attached */
	struct bconn *bc;          /* attached backend connection or NULL */
	struct backend *be;
	struct server *srv;        /* server of bc, kept for the log after release */
	struct server *avoid;      /* a connect to it just failed: pick another */
	const struct cfg_route *route; /* the listener's route it matched, or NULL */
	const struct cfg_inspect *ic;  /* the inspection that applies: the listener's or its route's */
	struct inspect_script *isc;    /* ... its loaded script, NULL = not inspected */
	struct list qlink;         /* in a waitq while waiting without bc; in the pool when free */
	struct waitq *wq;          /* the queue it waits in: its backend's, or its session's server's */
	struct server *sticky[2];  /* servers its session names (weblogic: primary, secondary) */
	uint64_t sticky_key;       /* app_cookie: the value's hash; source: the client's */
	uint64_t t_start, t_queue, t_connect_start, t_connected, t_sent, t_first_byte;
	uint64_t req_body, resp_body_in, bytes_out;
	uint64_t req_clen;         /* the request's declared body length (0: none) */
	uint64_t ticket;           /* instance-wide queue order while queued */
	uint32_t bconn_req;        /* this request's ordinal on its backend connection */
	uint32_t resp_timeout_ms;  /* its backend's response_timeout, or its route's */
	uint64_t rl_seq;           /* ST_LIMIT: its pending rate limit decision (ratelimit.h), 0 = none */
	uint32_t rl_retry_s;       /* rate limited: the Retry-After it gets */
	enum stream_state state;
	uint8_t method;            /* llhttp_method_t, or STREAM_METHOD_UNKNOWN */
	uint8_t http_minor;        /* the client's HTTP/1.x minor version (1 for later protocols) */
	uint8_t http_major;        /* 1, or 2 for HTTP/2 */
	uint8_t req_chunked;       /* the body's length is unknown: chunked to the backend */
	uint8_t req_done, head_done, queued;
	uint8_t resp_started, resp_head_sent, resp_done;
	uint8_t is_head, upgrade, idempotent, retried, expect_continue, continue_sent;
	uint8_t redispatches;      /* other servers tried after failed connects */
	uint8_t persist_key;       /* the request carried a persistence key (cookie, path parameter) */
	uint8_t persist;           /* enum persist_result of the last server choice */
	enum reason reason;
	int status;
	struct txn_insp insp;
};

/* A method llhttp has no id for (HTTP/2 carries any token): never forwarded. */
#define STREAM_METHOD_UNKNOWN 0xff

/* How the backend framed a response (upstream_h1 -> stream -> codec). */
#define RESP_BODYLESS 1u  /* no body whatever the headers say (HEAD, 204, 304) */
#define RESP_CHUNKED  2u  /* the backend sent it chunked */
#define RESP_LENGTH   4u  /* the backend sent a Content-Length */
#define RESP_UPGRADE  8u  /* a 101: the connection becomes a tunnel */

struct codec_ops;
struct tls_conn;
struct tls_server;
struct tls_client;

/* What only a TLS connection needs, so plain ones do not pay for it;
 * pooled per worker, buffers warm. */
struct client_tls {
	struct client *cl;
	struct outq wire;          /* ciphertext to the socket */
	struct buf hs_in;          /* handshake bytes waiting for budget */
	struct list hs_link;       /* in worker->hs_deferred while they wait; in the pool when free */
};

struct client {
	uv_tcp_t tcp;
	struct deadline dl;        /* its one timeout (see client_timer) */
	struct worker_listener *li;
	struct tls_conn *tls;      /* NULL for plain TCP */
	struct client_tls *tx;     /* TLS listeners only: the TLS side's queues */
	const struct codec_ops *codec; /* the protocol spoken on it */
	void *codec_ctx;           /* the codec's state; HTTP/1.1: the current stream's, NULL between requests */
	struct list link;          /* worker's client list */
	struct list parked;        /* idle bconns keyed to this client's PROXY header */
	struct buf in;             /* unparsed input (pipelining, paused parser) */
	struct outq out;           /* plaintext; on TLS connections only `pending` is used */
	uint64_t serial;           /* worker-unique connection number (PROXY UNIQUE_ID) */
	uint64_t nrequests;
	struct netaddr src;        /* the client: socket peer, or what a PROXY header said */
	struct netaddr dst;        /* the address it connected to (likewise) */
	char peer[56];             /* "ip:port" of SRC, for logs ("[v6]:port" fits) */
	enum client_state state;
	uint8_t read_stopped;      /* backpressure or pause */
	uint8_t peer_eof;
	uint8_t closing_handles;
	uint8_t trim_pending;      /* idle keepalive: the timer first gives the buffers back */
	uint8_t proxy_required;    /* CL_PROXY: the peer is trusted and must send a header */
	uint8_t trusted_fwd;       /* SRC may send identity headers (trusted_forwarders) */
	uint8_t codec_chosen;      /* its first plaintext bytes chose the codec */
	uint8_t input_done;        /* the client said it sends no more (RFC 9112 9.6) and all it sent
				    * was read: its close needs no lingering */
};

enum bconn_state {
	BC_CONNECTING,  /* TCP connect in progress */
	BC_BUSY,        /* carrying a client's request/response */
	BC_IDLE,        /* in the server's idle pool, watched for EOF */
	BC_RETIRING,    /* half-closed by us; slot held until the backend closes */
	BC_CLOSING,     /* handles closing */
};

struct bconn {
	uv_tcp_t tcp;
	struct deadline dl;        /* its one timeout (connect, response, idle, retire) */
	uv_connect_t creq;
	uv_shutdown_t sreq;
	struct server *srv;
	struct stream *strm;       /* owner while BC_BUSY/CONNECTING, else NULL */
	enum bconn_state state;
	llhttp_t parser;           /* the response (upstream_h1.c) */
	struct outq out;           /* plaintext; under TLS only `pending` is used */
	struct tls_conn *tls;      /* NULL for plain TCP */
	struct outq wire;          /* TLS: ciphertext to the server */
	struct list link;          /* server idle list or worker's bconn list */
	uint32_t nreq;             /* requests started on this connection */
	struct buf pp;             /* PROXY header it carried; empty = none */
	uint64_t owner;            /* with pp: serial of the client connection it speaks for */
	struct list park_link;     /* in the keying client's `parked` list while idle */
	uint8_t closing_handles;
	uint8_t read_stopped;
	uint8_t got_bytes;         /* any response byte for the current request */
	uint8_t resp_fed;          /* llhttp has seen bytes of the current response */
	uint8_t reusable;
};

struct stats_block;

/* Requests waiting for a connection: FIFO per worker, ordered by ticket
 * across workers (the shm slot's counter and head_ticket row). */
struct waitq {
	struct list list;
	uint32_t n;
	int slot;
};

struct server {
	struct cfg_server *cfg;
	struct backend *be;
	int slot;                  /* shm slot */
	struct stats_block *st;    /* this worker's stats for it */
	struct list idle;          /* idle bconns, most recent first */
	uint32_t nidle;
	uint32_t local_conns;      /* connections this worker holds open */
	void *tls_session;         /* last TLS session the server issued (resumption) */
	struct waitq q;            /* requests whose session is here, waiting for a connection */
	uint64_t name_hash;        /* source persistence: its place on the hash ring */
	uint64_t jvmid_seed;       /* weblogic: hash of servers[].jvmid, 0 = none */
	/* active health check (worker 0 only) */
	uv_timer_t hc_timer;
	int hc_ok, hc_fail;
	struct hcheck *hc;
};

struct backend {
	struct cfg_backend *cfg;
	struct server *servers;
	unsigned nservers;
	int slot;                  /* shm slot (waiting counter, rr cursor) */
	struct stats_block *st;
	struct tls_client *tls;    /* TLS to the servers, or NULL */
	struct waitq q;            /* requests waiting for a connection to any server */
	int64_t *cw;               /* smooth weighted round-robin state, per server, per worker */
	uint32_t *w;               /* scratch: each server's weight in the pick under way */
	uint64_t nrequests;        /* requests sent by this worker */
	uint64_t nreused;          /* ... of which on a connection that had carried one before */
	uint64_t nconnects;        /* connections this worker opened */
};

struct inspect_script;
struct route_table;

struct worker_listener {
	uv_tcp_t tcp;
	struct acceptor acc;       /* keeps tcp listening through fd exhaustion */
	struct inspect_script *insp; /* the listener's inspection hook, or NULL */
	struct route_table *routes;  /* its routes, or NULL */
	struct cfg_listener *cfg;
	struct backend *be;
	struct worker *w;
	struct tls_server *tls;    /* NULL for a plain listener */
	struct stats_block *st;
};

#endif
