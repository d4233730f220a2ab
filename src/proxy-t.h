/* Runtime objects of a worker's data path: client connections, the request
 * they carry (txn), backend connections, servers and backends. Structs only. */
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


enum client_state {
	CL_PROXY,     /* first bytes: a PROXY header (trusted peer) or proof there is none */
	CL_IDLE,      /* keepalive: no byte of the next request yet */
	CL_HEAD,      /* receiving a request head */
	CL_WAIT,      /* head accepted; queued for, or connecting to, a backend */
	CL_EXCHANGE,  /* a backend connection carries the request/response */
	CL_ERROR,     /* sending sluice's own error response, then close */
	CL_TUNNEL,    /* after 101: raw bytes both ways */
	CL_CLOSING,   /* handles closing; freed in the last close callback */
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

/* HTTP/1.1 request parsing, per request (it comes and goes with the txn). */
struct h1_rx {
	llhttp_t parser;
	struct head_scan hscan;
	uint8_t head_scanned;      /* head_scan saw the end of this request's head */
	uint8_t parse_error;       /* a parser callback reported txn->reason */
	/* Bounds of the current and previous llhttp_execute input, and the end
	 * of the last header value piece: only compared, never dereferenced
	 * outside the current input (obs-fold detection). */
	const char *exec_start, *exec_end, *prev_exec_end, *val_end;
};

/* The request a client connection is carrying now (responses are in order,
 * so one at a time; pipelined bytes wait unparsed in client->in). Taken
 * from the worker's pool when a request starts and given back when the
 * connection goes idle, so an idle keepalive connection holds none; its
 * buffers keep their capacity in the pool. */
struct txn {
	struct client *cl;         /* the connection it came on */
	struct msg req;            /* request head as received */
	struct msg resp;           /* response head from the backend */
	struct buf head;           /* request head rewritten for the backend; kept for a retry */
	struct buf tobe;           /* request bytes produced before a backend is attached */
	struct bconn *bc;          /* attached backend connection or NULL */
	struct backend *be;
	struct server *srv;        /* server of bc, kept for the log after release */
	struct server *avoid;      /* a connect to it just failed: pick another */
	struct list qlink;         /* in backend->queue while CL_WAIT without bc; in the pool when free */
	uint64_t t_start, t_queue, t_connect_start, t_connected, t_sent, t_first_byte;
	uint64_t req_body, resp_body_in, bytes_out;
	uint64_t ticket;           /* instance-wide queue order while queued */
	uint32_t bconn_req;        /* this request's ordinal on its backend connection */
	uint8_t method;            /* llhttp_method_t */
	uint8_t http_minor;        /* client's HTTP/1.x minor version */
	uint8_t req_chunked, req_done, head_done, queued;
	uint8_t resp_started, resp_head_sent, resp_done, resp_chunked_out, resp_close_delimited;
	uint8_t is_head, upgrade, idempotent, retried, expect_continue, continue_sent;
	uint8_t redispatches;      /* other servers tried after failed connects */
	enum reason reason;
	int status;
	struct txn_insp insp;
	struct h1_rx rx;
};

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
	struct txn *txn;           /* NULL while idle (CL_PROXY, CL_IDLE) and once closed */
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
	uint8_t keepalive;         /* this request allows another after it */
	uint8_t read_stopped;      /* backpressure or pause */
	uint8_t peer_eof;
	uint8_t closing_handles;
	uint8_t trim_pending;      /* idle keepalive: the timer first gives the buffers back */
	uint8_t proxy_required;    /* CL_PROXY: the peer is trusted and must send a header */
	uint8_t trusted_fwd;       /* SRC may send identity headers (trusted_forwarders) */
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
	uv_timer_t timer;
	uv_connect_t creq;
	uv_shutdown_t sreq;
	struct server *srv;
	struct client *cl;         /* owner while BC_BUSY/CONNECTING, else NULL */
	enum bconn_state state;
	llhttp_t parser;
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
	uint8_t reusable;
};

struct stats_block;

struct server {
	struct cfg_server *cfg;
	struct backend *be;
	int slot;                  /* shm slot */
	struct stats_block *st;    /* this worker's stats for it */
	struct list idle;          /* idle bconns, most recent first */
	uint32_t nidle;
	uint32_t local_conns;      /* connections this worker holds open */
	void *tls_session;         /* last TLS session the server issued (resumption) */
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
	struct list queue;         /* txns waiting for a connection, FIFO */
	uint32_t rr;               /* round-robin cursor, per worker */
	uint64_t nrequests;        /* requests sent by this worker */
	uint64_t nreused;          /* ... of which on a connection that had carried one before */
	uint64_t nconnects;        /* connections this worker opened */
	uint32_t nqueued;
};

struct inspect_script;

struct worker_listener {
	uv_tcp_t tcp;
	struct acceptor acc;       /* keeps tcp listening through fd exhaustion */
	struct inspect_script *insp; /* the listener's inspection hook, or NULL */
	struct cfg_listener *cfg;
	struct backend *be;
	struct worker *w;
	struct tls_server *tls;    /* NULL for a plain listener */
	struct stats_block *st;
};

#endif
