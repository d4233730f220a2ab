/* The connection layer: one client socket from accept to close. It owns the
 * socket, the PROXY header in, TLS (through tls.c), the input buffer, the
 * output queues with backpressure, the one deadline, lingering close and the
 * connection's counters. It knows no HTTP: bytes and events go up to the
 * connection's codec (codec.h); codecs call the functions below. */
#ifndef SLUICE_CONN_H
#define SLUICE_CONN_H

#include "proxy-t.h"

#define OUT_HIGH_WATER (256 * 1024)
#define OUT_LOW_WATER  (64 * 1024)
#define PIPELINE_MAX   (64 * 1024)   /* unparsed bytes held while a response is pending */

/* Worker start: the deadline heap. */
void conn_init(void);
void conn_accept(struct worker_listener *li);
/* Drain: each connection's codec is told; idle ones then close. */
void conn_drain_all(void);

/* (Re)arm the connection's timeout; 0 stops it. */
void conn_timer(struct client *cl, uint64_t ms);
/* Push cl->out.pending (through TLS when on) to the socket. */
void conn_flush(struct client *cl);
/* Bytes queued and not yet written, plaintext-equivalent. */
size_t conn_queued(const struct client *cl);
/* A write is in flight. */
int conn_writing(const struct client *cl);
void conn_read_pause(struct client *cl, int pause);
void conn_close(struct client *cl);
/* The last response is queued: send it, then half-close, read and discard
 * (CL_LINGER). SEND_TIMER: bound the sending by client_send. */
void conn_end(struct client *cl, int send_timer);
/* Between requests: the timer first trims the buffers, then expires the
 * keepalive (shorter when draining). */
void conn_keepalive_wait(struct client *cl);

#endif
