/* Backends, servers and their connection pools.
 *
 * A request asks for a connection with upstream_request(); it gets a pooled
 * idle one, a new one (when the server's instance-wide max_connections
 * allows), or waits in the backend's FIFO queue. Connections come back with
 * upstream_release() (clean end of an exchange) or upstream_abort(). */
#ifndef SLUICE_UPSTREAM_H
#define SLUICE_UPSTREAM_H

#include "proxy-t.h"
#include "upstream-t.h"

struct worker;

void upstream_events_set(const struct upstream_events *ev);

struct tls_set;
int upstream_init(struct worker *w, struct tls_set *tls);
void upstream_destroy(void);
struct backend *upstream_backend(const char *name);

/* Ask for a connection for stream S (s->be set). Returns REASON_OK when the
 * request is attached (s->bc set; the ready event follows, possibly before
 * this returns) or queued; otherwise the reason to answer with. */
enum reason upstream_request(struct stream *s);
/* The stream gives up (timeout, close) while queued or connecting. */
void upstream_cancel(struct stream *s);
/* The exchange on BC ended cleanly; REUSABLE says the connection may carry
 * another request. Hands it to a queued request, pools it or closes it. */
void upstream_release(struct bconn *bc, int reusable);
/* This instance's max_connections now: its share (instances) of the
 * tier's total, the operator's override or the config's, on its slow-start
 * ramp. */
uint32_t upstream_server_max_conns(const struct server *srv);
/* The tier's total for the server: the operator's override or the config's. */
uint32_t upstream_server_tier_max_conns(const struct server *srv);
/* The operator's or the config's weight; and the one balancing uses now
 * (scaled by LB_SCALE, on its slow-start ramp). */
uint32_t upstream_server_weight(const struct server *srv);
uint32_t upstream_server_eweight(const struct server *srv);
/* CL is closing: its PROXY-keyed idle connections can serve no one else. */
void upstream_client_gone(struct client *cl);
void upstream_abort(struct bconn *bc);
/* Queue request bytes in bc->out.pending, then flush. */
void bconn_flush(struct bconn *bc);
size_t bconn_queued(const struct bconn *bc);
void bconn_read_pause(struct bconn *bc, int pause);
/* Tunnel half-close: send our FIN once queued bytes are out; keep reading. */
void bconn_shutdown_write(struct bconn *bc);
/* (Re)arm the response timeout of a busy connection; 0 stops it. */
void bconn_timeout(struct bconn *bc, uint64_t ms);

/* Another worker kicked us, or the retry timer fired. */
void upstream_on_kick(void);
/* Drain: close idle pooled connections. */
void upstream_close_idle(void);
/* Whether BE has a server other than SRV that is up and enabled. */
int upstream_other_server_up(const struct backend *be, const struct server *srv);
/* Passive health: a connect to SRV failed. */
void upstream_server_failed(struct server *srv, const char *why);
/* Passive outlier ejection (backends[].eject): what an exchange with SRV
 * came to. Enough 5xx or timeouts in a row, instance-wide, take it out. */
enum srv_outcome { SRV_OK, SRV_5XX, SRV_TIMEOUT };
void upstream_server_outcome(struct server *srv, enum srv_outcome o);
int upstream_server_ejected(const struct server *srv);
/* Healthy, enabled and not ejected: balancing may send it requests. */
int upstream_server_usable(const struct server *srv);
/* Usable, or draining: may still serve the sessions it holds. */
int upstream_server_keeps_sessions(const struct server *srv);

#endif
