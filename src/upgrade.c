/* The old master's side of a binary upgrade (upgrade.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "upgrade.h"
#include "cfg.h"
#include "handover.h"
#include "log.h"
#include "notify.h"
#include "util.h"

/* The new master is started through a short-lived intermediate process
 * (the launcher), so that it is the service manager's child, not ours, from
 * the start: systemd then watches it as its own child once MAINPID= names
 * it (a main process that is not its child is one it cannot wait for, and
 * on a stop it would SIGKILL the whole service at once). We learn its end
 * from its report pipe (EOF), not from waitpid. */
static struct {
	pid_t launcher;            /* the intermediate; 0: reaped (or none) */
	int launcher_pid;          /* read end of the pipe it names the new master on */
	pid_t pid;                 /* the new master; 0: none (-1: not known yet) */
	pid_t last;                /* the last new master started, for the pid files at exit */
	int report;                /* read end of its report pipe, -1 once closed */
	char buf[HANDOVER_REPORT_MAX];
	size_t len;
	struct timespec deadline;
	int told_to_stop;          /* SIGTERM sent: no report is taken from here on */
	const char *why;           /* ... why, for the log: "" when we stop */
	int cancelled;             /* we stop: no report is taken, the pid file stays ours */
	int handed_over;           /* it reported serving: final */
	int detached;              /* -d: our stderr (and the new master's) is /dev/null */
	uint32_t stop_ms;          /* from SIGTERM to SIGKILL */
	char pid_file[sizeof(((struct cfg *)0)->pid_file)];
	char oldbin[sizeof(((struct cfg *)0)->pid_file) + 8];  /* "" when no pid_file */
} upgrade = { .launcher_pid = -1, .report = -1 };

static int pid_running(pid_t pid)
{
	char path[64], st[256];
	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	size_t n = fread(st, 1, sizeof(st) - 1, f);
	fclose(f);
	st[n] = '\0';
	const char *rp = strrchr(st, ')');
	return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

int upgrade_in_progress(void)
{
	return upgrade.pid != 0 && !upgrade.handed_over;
}

/* `EXE -t -c PATH`, its output (stdout and stderr) in OUT. Synchronous:
 * the master has no clients of its own, and its workers serve meanwhile;
 * signals wait (blocked) until the master's loop takes them. Returns 0 when
 * the check passed, -1 with WHY set otherwise. */
static int upgrade_check(const char *exe, const char *path, char *out, size_t outlen, char *why, size_t whylen)
{
	int p[2];
	out[0] = '\0';
	/* Only our end is non-blocking: the checker's output is not to be
	 * cut short by a full pipe. */
	if (pipe2(p, O_CLOEXEC) < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) < 0) {
		snprintf(why, whylen, "pipe: %s", strerror(errno));
		return -1;
	}
	log_flush();
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(why, whylen, "fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (null >= 0)
			dup2(null, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		execl(exe, exe, "-t", "-c", path, (char *)NULL);
		dprintf(2, "cannot run %s: %s\n", exe, strerror(errno));
		_exit(127);
	}
	close(p[1]);
	struct timespec end;
	ts_after_ms(&end, UPGRADE_CHECK_S * 1000);
	size_t len = 0;
	int timed_out = 0;
	for (;;) {
		char chunk[1024];
		ssize_t r = read(p[0], chunk, sizeof(chunk));
		if (r > 0) {
			size_t take = (size_t)r < outlen - 1 - len ? (size_t)r : outlen - 1 - len;
			memcpy(out + len, chunk, take);
			len += take;
			continue;
		}
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			break;
		if (ts_passed(&end)) {
			timed_out = 1;
			break;
		}
		struct pollfd pfd = { p[0], POLLIN, 0 };
		poll(&pfd, 1, 100);
	}
	out[len] = '\0';
	close(p[0]);
	if (timed_out)
		kill(pid, SIGKILL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (timed_out) {
		snprintf(why, whylen, "did not finish within %d s", UPGRADE_CHECK_S);
		return -1;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (WIFEXITED(status))
		snprintf(why, whylen, "exited with status %d", WEXITSTATUS(status));
	else
		snprintf(why, whylen, "killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
	return -1;
}

#define CHECK_LINES_MAX 20   /* of the checker's output, in the error log */

int upgrade_start(const struct cfg *cfg, struct handover_env *he, int detached)
{
	const char *exe = handover_exe();
	if (upgrade.pid > 0 && !upgrade.handed_over) {
		log_warn("upgrade refused (SIGUSR2): an upgrade is in progress (new master pid %d)", (int)upgrade.pid);
		return -1;
	}
	if (upgrade.pid < 0) {
		log_warn("upgrade refused (SIGUSR2): an upgrade is in progress (new master starting)");
		return -1;
	}
	/* In a container, PID 1's children die with it: the new master, its
	 * child through the launcher (orphans are reparented to PID 1), would
	 * be killed when this master exits after the handover. */
	if (getpid() == 1) {
		log_warn("upgrade refused (SIGUSR2): this master is PID 1 (a container's init), whose exit "
			 "ends the new master too; restart the container instead");
		return -1;
	}
	if (exe == NULL || access(exe, X_OK) < 0) {
		log_error("upgrade refused (SIGUSR2): cannot run %s: %s", exe ? exe : "/proc/self/exe",
			  exe ? strerror(errno) : "unreadable at start");
		return -1;
	}
	/* A new binary or configuration that does not load is caught here,
	 * with its error in our log: the new master's own stderr is ours,
	 * which -d made /dev/null. */
	static char out[8192];
	char why[128];
	log_info("upgrade: checking the configuration with the new binary (%s -t -c %s)", exe, cfg->path);
	if (upgrade_check(exe, cfg->path, out, sizeof(out), why, sizeof(why)) < 0) {
		unsigned lines = 0;
		for (char *save = NULL, *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
			if (lines++ < CHECK_LINES_MAX)
				log_error("upgrade refused (SIGUSR2): %s -t: %s", exe, line);
		if (lines > CHECK_LINES_MAX)
			log_error("upgrade refused (SIGUSR2): %s -t: ... %u more line%s", exe, lines - CHECK_LINES_MAX,
				  lines - CHECK_LINES_MAX == 1 ? "" : "s");
		log_error("upgrade refused (SIGUSR2): %s -t -c %s %s; this master keeps serving", exe, cfg->path, why);
		notify_sendf("STATUS=upgrade refused (the new binary's check of %s failed); still serving", cfg->path);
		return -1;
	}
	int p[2], q[2];
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		log_error("upgrade refused (SIGUSR2): pipe: %s", strerror(errno));
		return -1;
	}
	if (pipe2(q, O_CLOEXEC) < 0) {
		log_error("upgrade refused (SIGUSR2): pipe: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	he->report_fd = p[1];
	char env[HANDOVER_ENV_MAX];
	AZ(handover_env_format(he, env, sizeof(env)));
	snprintf(upgrade.pid_file, sizeof(upgrade.pid_file), "%s", cfg->pid_file);
	upgrade.oldbin[0] = '\0';
	if (cfg->pid_file[0]) {
		snprintf(upgrade.oldbin, sizeof(upgrade.oldbin), "%s.oldbin", cfg->pid_file);
		if (rename(cfg->pid_file, upgrade.oldbin) < 0)
			log_warn("upgrade: cannot rename %s to %s: %s", cfg->pid_file, upgrade.oldbin, strerror(errno));
	}
	log_info("upgrade: starting %s as the new master, handing over %u listening socket%s", exe, he->nfds,
		 he->nfds == 1 ? "" : "s");
	log_flush();
	pid_t pid = fork();
	if (pid == 0) {
		/* The launcher: it names the new master on Q and exits. */
		pid_t b = fork();
		if (b == 0) {
			/* Only this process's descriptors lose FD_CLOEXEC (it
			 * is per descriptor, not per socket). The signal mask
			 * stays blocked across exec, so a signal cannot kill the
			 * new master before it waits for signals itself. */
			for (unsigned i = 0; i < he->nfds; i++)
				fcntl(he->fds[i].fd, F_SETFD, 0);
			fcntl(p[1], F_SETFD, 0);
			handover_exec(env);
			dprintf(2, "sluice: upgrade: cannot run %s: %s\n", exe, strerror(errno));
			_exit(127);
		}
		_exit(b > 0 && write(q[1], &b, sizeof(b)) == sizeof(b) ? 0 : 1);
	}
	close(p[1]);
	close(q[1]);
	if (pid < 0) {
		log_error("upgrade failed: fork: %s", strerror(errno));
		close(p[0]);
		close(q[0]);
		if (upgrade.oldbin[0])
			rename(upgrade.oldbin, cfg->pid_file);
		return -1;
	}
	upgrade.launcher = pid;
	upgrade.launcher_pid = q[0];
	upgrade.pid = -1;
	upgrade.report = p[0];
	upgrade.len = 0;
	upgrade.told_to_stop = 0;
	upgrade.why = "";
	upgrade.cancelled = 0;
	upgrade.detached = detached;
	upgrade.stop_ms = UPGRADE_KILL_S * 1000 + cfg->timeouts.drain_notice_ms + cfg->timeouts.drain_ms;
	ts_after_ms(&upgrade.deadline, UPGRADE_TIMEOUT_S * 1000);
	return 0;
}

/* The new master ended, or will, without taking over: ours again (unless
 * we stop: the pid files are then settled at exit). */
static void upgrade_failed(const char *why)
{
	if (upgrade.cancelled)
		log_info("upgrade: the new master (pid %d) %s", (int)upgrade.pid, why);
	else
		log_error("upgrade failed: the new master (pid %d) %s; this master (pid %d) keeps serving",
			  (int)upgrade.pid, why, (int)getpid());
	if (!upgrade.cancelled && upgrade.oldbin[0] && rename(upgrade.oldbin, upgrade.pid_file) < 0)
		log_warn("upgrade: cannot rename %s back to %s: %s", upgrade.oldbin, upgrade.pid_file,
			 strerror(errno));
	if (upgrade.report >= 0)
		close(upgrade.report);
	upgrade.report = -1;
	upgrade.pid = 0;
	if (!upgrade.cancelled)
		notify_sendf("STATUS=upgrade failed (new master %s); still serving", why);
}

/* SIGTERM now, SIGKILL at the deadline; the upgrade fails when its
 * report pipe ends (it is gone) or at the SIGKILL. */
static void upgrade_tell_to_stop(const char *why)
{
	upgrade.why = why;
	if (pid_running(upgrade.pid))
		kill(upgrade.pid, SIGTERM);
	upgrade.told_to_stop = 1;
	ts_after_ms(&upgrade.deadline, upgrade.stop_ms);
}

/* Reads the new master's report. Returns 1 when it is well formed
 * (DROPPED, *N filled), -1 when the new master is gone (the pipe's end:
 * the new master and its workers closed their copies), -2 when its report
 * is malformed, 0 while it is starting. Once it is told to stop, what it
 * writes is discarded: only the pipe's end matters. */
static int upgrade_read_report(int *dropped, unsigned *n)
{
	if (upgrade.report < 0)
		return 0;
	if (upgrade.told_to_stop)
		upgrade.len = 0;
	ssize_t r = read(upgrade.report, upgrade.buf + upgrade.len, sizeof(upgrade.buf) - upgrade.len);
	if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
		close(upgrade.report);
		upgrade.report = -1;
		return -1;
	}
	if (r < 0 || upgrade.told_to_stop)
		return 0;
	upgrade.len += (size_t)r;
	if (memchr(upgrade.buf, '\n', upgrade.len) == NULL && upgrade.len < sizeof(upgrade.buf))
		return 0;
	pid_t pid;
	if (handover_report_parse(upgrade.buf, upgrade.len, &pid, dropped, HANDOVER_MAX_FDS, n) < 0
	    || pid != upgrade.pid)
		return -2;
	return 1;
}

int upgrade_poll(pid_t *pid, int *dropped, unsigned *n)
{
	if (upgrade.pid <= 0 || upgrade.handed_over)
		return 0;
	int r = upgrade_read_report(dropped, n);
	if (r == 1) {
		upgrade.handed_over = 1;
		*pid = upgrade.pid;
		close(upgrade.report);
		upgrade.report = -1;
		return 1;
	}
	if (r == -2) {
		log_error("upgrade: malformed report from the new master (pid %d); stopping it", (int)upgrade.pid);
		upgrade_tell_to_stop("sent a malformed report");
		return 0;
	}
	if (r == -1) {
		char why[160];
		/* Not our child: no exit status. It may also be alive with
		 * the pipe closed (not a sluice that reports): stop it. */
		if (pid_running(upgrade.pid))
			kill(upgrade.pid, SIGTERM);
		if (upgrade.told_to_stop)
			snprintf(why, sizeof(why), "%s%sstopped", upgrade.why, upgrade.why[0] ? "; " : "");
		else if (upgrade.detached)
			snprintf(why, sizeof(why), "exited before serving (its error is in the error log above, if "
				 "it got that far; its standard error is /dev/null under -d)");
		else
			snprintf(why, sizeof(why), "exited before serving (its error is on the standard error it "
				 "shares with this master)");
		upgrade_failed(why);
		return 0;
	}
	if (!ts_passed(&upgrade.deadline))
		return 0;
	if (!upgrade.told_to_stop) {
		log_error("upgrade: the new master (pid %d) did not serve within %d s; stopping it",
			  (int)upgrade.pid, UPGRADE_TIMEOUT_S);
		upgrade_tell_to_stop("did not serve in time");
		return 0;
	}
	/* It ignored SIGTERM: kill it and forget it (its pid may be reused
	 * any time after it dies: no signal goes to it again). */
	log_error("upgrade: the new master (pid %d) did not stop within %u ms; killing it", (int)upgrade.pid,
		  upgrade.stop_ms);
	if (pid_running(upgrade.pid))
		kill(upgrade.pid, SIGKILL);
	char why[160];
	snprintf(why, sizeof(why), "%s%skilled", upgrade.why, upgrade.why[0] ? "; " : "");
	upgrade_failed(why);
	return 0;
}

void upgrade_cancel(void)
{
	if (upgrade.pid == 0 || upgrade.handed_over || upgrade.cancelled)
		return;
	upgrade.cancelled = 1;
	if (upgrade.pid < 0) {
		/* Forked, not named yet: the launcher's end tells us whom to
		 * stop (upgrade_child_exited). */
		log_warn("upgrade: cancelled, this master stops; the new master is stopped once it has started");
		return;
	}
	log_warn("upgrade: cancelled, this master stops; stopping the new master (pid %d)", (int)upgrade.pid);
	if (!upgrade.told_to_stop)
		upgrade_tell_to_stop("");
}

int upgrade_child_exited(pid_t pid, int status)
{
	if (pid != upgrade.launcher || upgrade.launcher == 0)
		return 0;
	upgrade.launcher = 0;
	pid_t b = 0;
	ssize_t n = read(upgrade.launcher_pid, &b, sizeof(b));
	close(upgrade.launcher_pid);
	upgrade.launcher_pid = -1;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || n != sizeof(b) || b <= 0) {
		log_error("upgrade failed: cannot start the new master (fork in the launcher); this master keeps serving");
		upgrade.pid = 0;
		if (upgrade.report >= 0)
			close(upgrade.report);
		upgrade.report = -1;
		if (!upgrade.cancelled && upgrade.oldbin[0] && rename(upgrade.oldbin, upgrade.pid_file) < 0)
			log_warn("upgrade: cannot rename %s back to %s: %s", upgrade.oldbin, upgrade.pid_file,
				 strerror(errno));
		return 1;
	}
	upgrade.pid = b;
	upgrade.last = b;
	log_info("upgrade: new master pid %d starting", (int)b);
	if (upgrade.cancelled) {
		log_warn("upgrade: cancelled, this master stops; stopping the new master (pid %d)", (int)b);
		upgrade_tell_to_stop("");
		return 1;
	}
	notify_sendf("STATUS=upgrading: new master pid %d starting", (int)b);
	return 1;
}

static pid_t pid_file_read(const char *path)
{
	FILE *f = fopen(path, "re");
	if (f == NULL)
		return 0;
	int pid = 0;
	if (fscanf(f, "%d", &pid) != 1)
		pid = 0;
	fclose(f);
	return (pid_t)pid;
}

static void pid_file_remove_stale(const char *path)
{
	if (!path[0])
		return;
	pid_t pid = pid_file_read(path);
	if (pid == getpid() || (pid > 0 && pid == upgrade.last && !pid_running(pid)))
		unlink(path);
}

void upgrade_exit_pid_files(const char *pid_file)
{
	pid_file_remove_stale(pid_file);
	if (upgrade.oldbin[0])
		pid_file_remove_stale(upgrade.oldbin);
}
