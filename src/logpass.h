/* Log files handed from the master to its workers. On SIGUSR1 the master
 * reopens the logs (it may create files where workers, no longer root, may
 * not) and sends the new descriptors down each worker's channel, a
 * SOCK_SEQPACKET socketpair made at fork; a worker adopts them in place of
 * its own. Workers never open a log by path, so a worker that gave up root
 * needs no access to the log directory and the master never has to give
 * files away (chown, and the symlink games that invites). */
#ifndef SLUICE_LOGPASS_H
#define SLUICE_LOGPASS_H

/* Master: a channel pair for a new worker (both ends close-on-exec, the
 * master's non-blocking). Returns 0, or -1 with errno. */
int logpass_pair(int fds[2]);
/* Master: send the logs open now down SOCK. Returns 0, or -1 with errno
 * (EAGAIN: the worker has not read the previous ones). */
int logpass_send(int sock);
/* Worker: adopt what arrived on SOCK. Returns 1 when logs were adopted, 0
 * when nothing was pending, -1 when the master's end is closed or on error. */
int logpass_recv(int sock);

#endif
