/* The old master's side of a binary upgrade (SIGUSR2): checks the new
 * binary with -t, renames the pid file, starts the new master through a
 * short-lived launcher, reads its report, and stops it when it does not
 * serve in time or when this master stops first. The master keeps what
 * touches its sockets and workers (which sockets to hand over, the drain
 * after the handover); the new master's side is in master.c too
 * (lsocks_adopt, upgrade_report). Protocol: handover.h.
 *
 * States: idle (no upgrade) -> launching (the launcher has not named the new
 * master yet) -> starting (new master known, no report yet) -> idle again
 * (failed, or stopped when cancelled) or handed over (it reported serving;
 * final: this master drains and exits). */
#ifndef SLUICE_UPGRADE_H
#define SLUICE_UPGRADE_H

#include <sys/types.h>

struct cfg;
struct handover_env;

#define UPGRADE_TIMEOUT_S 60   /* for the new master to serve */
#define UPGRADE_KILL_S 10      /* after being told to stop, before SIGKILL */
#define UPGRADE_CHECK_S 30     /* for `<new binary> -t` */

/* Launching or starting: a SIGHUP or another SIGUSR2 is refused, and a
 * stopping master waits for the new one to be gone before it exits. */
int upgrade_in_progress(void);

/* Starts an upgrade to the binary at handover_exe() with CFG's
 * configuration, handing over the sockets in HE (report_fd is set here).
 * The master has checked its own state (not stopping, no reload under
 * way). Runs `<binary> -t -c <cfg->path>` first, synchronously (at most
 * UPGRADE_CHECK_S; the workers serve meanwhile), and refuses the upgrade
 * with its output in the error log when it fails. DETACHED: stderr is
 * /dev/null (-d), for the failure message. 0 when started, -1 refused
 * (logged). */
int upgrade_start(const struct cfg *cfg, struct handover_env *he, int detached);

/* Each turn of the master's loop. 1 when the new master reported serving:
 * *PID, DROPPED and *N (the inherited sockets it closed, at most
 * HANDOVER_MAX_FDS) are filled and the upgrade is handed over; 0 otherwise
 * (failures and time-outs are handled and logged here). */
int upgrade_poll(pid_t *pid, int *dropped, unsigned *n);

/* This master stops: a new master still starting would serve alone,
 * unasked; it is told to stop (as soon as its pid is known) and its report
 * is ignored. */
void upgrade_cancel(void);

/* reap(): a child that is not a worker. 1 when it was the launcher. */
int upgrade_child_exited(pid_t pid, int status);

/* At exit: the pid file and <pid_file>.oldbin. Each is removed when it
 * holds this master's pid, or that of a new master that no longer runs;
 * a pid file naming a live master is left to it. */
void upgrade_exit_pid_files(const char *pid_file);

#endif
