/* A listening socket that survives descriptor exhaustion.
 *
 * On EMFILE/ENFILE libuv closes a reserved descriptor, accepts and closes
 * the pending connections, and opens the reserve again. When that cannot
 * help (the limit is below the reserve, or the reserve could not be
 * reopened) it reports the error to the connection callback and calls
 * accept() again at once, in a loop that does not return to the event loop
 * while the listening fd is open: the process spins, logs every attempt and
 * serves no one. Closing the handle is the only way out of that loop, so an
 * acceptor keeps a duplicate of its socket: the handle is closed, the
 * socket stays open (the kernel keeps queueing its connections), and a
 * timer opens a handle on it again once a descriptor is free. */
#ifndef SLUICE_ACCEPTOR_H
#define SLUICE_ACCEPTOR_H

#include <stdint.h>
#include <uv.h>

struct acceptor {
	uv_tcp_t *tcp;              /* the owner's listening handle; tcp->data is DATA */
	uv_timer_t timer;
	uv_connection_cb on_conn;
	void *data;                 /* copied to tcp.data on every (re)open */
	const char *name;           /* for the log: the address */
	int backlog;
	int spare;                  /* dup of the listening socket; -1 once stopped */
	int stopped;
	uint64_t since_us;          /* start of the current exhaustion episode, 0 = accepting */
	uint64_t last_log_us;       /* rate limit for other accept errors */
	unsigned backoff_ms;
};

/* Listen on FD (already bound) through TCP, whose data becomes DATA.
 * Returns 0 or a libuv error. */
int acceptor_open(uv_loop_t *loop, struct acceptor *a, uv_tcp_t *tcp, int fd, int backlog,
		  const char *name, uv_connection_cb on_conn, void *data);

/* The first thing a connection callback does: returns 1 when a connection
 * is waiting to be accepted, 0 when STATUS was an error it handled (logged,
 * and on exhaustion the handle paused). */
int acceptor_ready(struct acceptor *a, int status);

/* Stop listening for good (drain): closes the handle and the spare. */
void acceptor_stop(struct acceptor *a, uv_close_cb closed);

#endif
