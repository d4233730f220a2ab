/* Listening sockets a master did not open itself: handed over by the master
 * it replaces (binary upgrade, SIGUSR2) or by systemd (socket activation,
 * the sd_listen_fds protocol), and the exec that starts the replacement.
 *
 * Upgrade: the running master forks, clears FD_CLOEXEC on every listening
 * socket and on the write end of a report pipe, and execs the binary at the
 * path it was started from with its own arguments, describing the sockets in
 * $SLUICE_UPGRADE (handover_env_format). The new master adopts the sockets
 * (by address, getsockname), starts its workers on them and, once they all
 * serve, writes its report on the pipe; the old master then drains and
 * exits. Descriptor numbers are the same on both sides of an exec, so the
 * report names the sockets the new configuration dropped by number. */
#ifndef SLUICE_HANDOVER_H
#define SLUICE_HANDOVER_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#define HANDOVER_ENV "SLUICE_UPGRADE"
/* Every socket a master can hold: CFG_MAX_LISTENERS * 2 addresses (a
 * reload in between) x SHM_MAX_WORKERS, with room to spare. */
#define HANDOVER_MAX_FDS 8192
/* The longest $SLUICE_UPGRADE handover_env_format writes. */
#define HANDOVER_ENV_MAX (16 + HANDOVER_MAX_FDS * 12)

struct handover_fd {
	int fd;
	int systemd;   /* systemd holds it too: never filtered, never reset */
};

/* $SLUICE_UPGRADE = "<report fd>;<fd>[s],<fd>[s],..." (decimal; "s": the
 * socket came from systemd and systemd still holds it). */
struct handover_env {
	int report_fd;
	unsigned nfds;
	struct handover_fd fds[HANDOVER_MAX_FDS];
};

/* Pure. 0 and *HE filled when S is well formed (every fd >= 3, no
 * duplicate, at most HANDOVER_MAX_FDS), -1 otherwise. */
int handover_env_parse(const char *s, struct handover_env *he);
/* Writes S for HE into OUT. 0, or -1 when it does not fit. */
int handover_env_format(const struct handover_env *he, char *out, size_t len);

/* Called once in main() before anything forks (LISTEN_PID names the
 * process systemd started): takes the sockets of $SLUICE_UPGRADE or of
 * $LISTEN_FDS/$LISTEN_PID, removes those variables from the environment,
 * checks each is a listening TCP socket and marks it close-on-exec.
 * 0 (none is fine), or -1 with the reason in ERR. */
int handover_collect(char *err, size_t errlen);
/* What handover_collect took: NULL when nothing was inherited. */
const struct handover_env *handover_inherited(void);
/* 1: the sockets came from a master being upgraded (report to it when
 * serving); 0: from systemd or none. */
int handover_is_upgrade(void);

/* The new master's report, once every worker of its first generation
 * serves: "<pid>[ <fd>...]\n", the fds being inherited sockets it closed
 * (their addresses are no longer configured: the old master lets their
 * queues be accepted before it closes them). Pure. Format: 0, or -1 when it
 * does not fit. Parse: 0 and *PID, FDS, *N filled when S (LEN bytes,
 * newline included) is well formed with at most MAX fds, -1 otherwise. */
#define HANDOVER_REPORT_MAX (24 + HANDOVER_MAX_FDS * 12)
int handover_report_format(pid_t pid, const int *fds, unsigned n, char *out, size_t len);
int handover_report_parse(const char *s, size_t len, pid_t *pid, int *fds, unsigned max, unsigned *n);

/* "127.0.0.1:80", "[::1]:443": for logs. */
void handover_addr_text(const struct sockaddr_storage *ss, char *out, size_t len);

/* Same family, address, port (and IPv6 scope). */
int handover_addr_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b);

/* Remembers how this process was started: argv (kept, not copied: main's
 * argv lives as long as the process) and the binary's path, resolved now
 * from /proc/self/exe so that a file replaced later at that path is what an
 * upgrade runs. */
void handover_save_argv(char **argv);
const char *handover_exe(void);
/* In the forked child: exports ENV as $SLUICE_UPGRADE, drops the
 * socket-activation variables and execs the saved binary and argv. Returns
 * only on failure (errno set). */
int handover_exec(const char *env);

#endif
