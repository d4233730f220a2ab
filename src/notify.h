/* The systemd service notification protocol (sd_notify), without
 * libsystemd: one datagram per state change to the AF_UNIX socket named by
 * $NOTIFY_SOCKET ('@' = abstract namespace). Does nothing when the variable
 * is unset, so the master calls it unconditionally. Master only: workers
 * never notify (systemd would ignore them under NotifyAccess=main). */
#ifndef SLUICE_NOTIFY_H
#define SLUICE_NOTIFY_H

/* Sends MSG ("READY=1\nSTATUS=..."), as is. Returns 0 when sent, 1 when
 * there is no $NOTIFY_SOCKET, -1 on error (errno set). */
int notify_send(const char *msg);
/* printf-style notify_send. */
int notify_sendf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* -d: the write end of a pipe the starting process waits on. Whoever
 * holds it must be the master; forked workers call notify_parent_forget().
 * notify_parent_ready() writes one byte (the parent then exits 0) and closes
 * it; if the master dies first the parent sees EOF and exits 1. */
void notify_parent_set(int fd);
int notify_parent_waiting(void);
void notify_parent_ready(void);
void notify_parent_forget(void);

#endif
