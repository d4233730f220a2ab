/* Process model.
 *
 * Listening sockets: one SO_REUSEPORT socket per (listener, worker index),
 * created and kept open by the master. A reload forks new workers on the same
 * sockets before the old ones stop accepting, so a connection waiting in an
 * accept queue is never lost. If a reload lowers the worker count, the
 * surplus sockets are shared out (socket i goes to worker i mod N) instead of
 * being closed with connections in them.
 *
 * Binary upgrade (SIGUSR2) hands the same sockets to a new master, which
 * adopts them by address; systemd's sockets (LISTEN_FDS) are adopted the
 * same way (handover.h). A socket someone else also holds is never given a
 * drop filter (HELD_*). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>
#include "master.h"
#include "cfg.h"
#include "log.h"
#include "handover.h"
#include "logpass.h"
#include "notify.h"
#include "privs.h"
#include "ratelimit.h"
#include "shm.h"
#include "routestats.h"
#include "shdict.h"
#include "stats.h"
#include "tls.h"
#include "upgrade.h"
#include "util.h"
#include "worker.h"

#define MAX_LSOCKS (CFG_MAX_LISTENERS * 2)
#define RESTART_BURST 10   /* crashes within RESTART_WINDOW_S before backing off */
#define RESTART_WINDOW_S 10
#define QUIESCE_MAX_MS 2000  /* how long a closing socket's queue may take to be accepted */

/* Who else holds a listening socket of ours. Closing our copy of such a
 * socket does not close it, so no drop filter goes on it and nobody waits
 * for its queue: whoever still holds it serves that queue. */
#define HELD_SYSTEMD 1  /* systemd (socket activation): queues for our next start */
#define HELD_PREV    2  /* the master we upgrade from, until we report serving */
#define HELD_NEXT    4  /* the master we upgraded to, which serves on it */

struct lsock {
	struct cfg_addr addr;
	int fds[SHM_MAX_WORKERS];
	unsigned char held[SHM_MAX_WORKERS];  /* HELD_* */
	unsigned nfds;
	int in_use;
	int fixed;  /* inherited without SO_REUSEPORT (systemd's): we cannot add
		       sockets beside it, so every worker accepts on it */
};

struct wproc {
	pid_t pid;
	int index;
	int slot;
	unsigned gen;
	int ready;      /* its loop is set up and accepting (said so on ready_pipe) */
	int logs;       /* our end of its log channel (logpass.h) */
};

static struct lsock lsocks[MAX_LSOCKS];
static struct wproc procs[SHM_MAX_WORKERS];
static struct cfg *cur;
static struct tls_set *cur_tls;
/* Made once per instance, so tickets survive reloads; a listener with a
 * ticket_keys file uses that instead (shared with other instances). */
static struct tls_ticket_keys instance_keys;
static int instance_keys_ready;
static unsigned generation;
static time_t restart_times[RESTART_BURST];
static unsigned restart_pos;
/* Workers write their pid here once worker_start() is done; the master
 * reads it to know when a generation serves (READY=1, -d's parent). */
static int ready_pipe[2] = { -1, -1 };
/* What the master still has to announce once the current generation
 * serves: nothing, the first start, or a reload. */
static enum { ANNOUNCE_NONE, ANNOUNCE_START, ANNOUNCE_RELOAD } announce;
/* The first line of why the last reload failed, for STATUS=. */
static char reload_error[256];
/* A reload's new generation runs while the previous one still serves, until
 * every new worker is ready: only then does the previous one stop (commit).
 * If a new worker exits with an error before it is ready, the previous
 * configuration and generation stay (abort). */
static struct {
	struct cfg *cfg;           /* the previous configuration; NULL: none pending */
	struct tls_set *tls;
	unsigned gen;
	int failed;                /* a new worker exited with an error before ready */
	int notice;                /* the drain notice of removed listeners has begun */
	struct timespec notice_end; /* ... and ends then ({0, 0}: no notice) */
} prev;
/* Stopping with timeouts.drain_notice: not ready (GET /ready, monitor_uri:
 * 503) while still accepting, until stop_notice_end; then the stop proper.
 * A second SIGTERM/SIGINT cuts the notice short. */
static int stop_notice;
static struct timespec stop_notice_end;
/* Next entry of shm->closing_addrs to use: a ring, the oldest goes. */
static unsigned closing_next;

static int lsock_open_one(const struct cfg_listener *l)
{
	int fd = socket(l->addr.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
	if (l->addr.ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	/* Accepted sockets inherit it: no setsockopt per connection. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&l->addr.ss, l->addr.len) < 0 || listen(fd, l->backlog) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static struct lsock *lsock_find(const struct cfg_addr *a)
{
	for (int i = 0; i < MAX_LSOCKS; i++)
		if (lsocks[i].nfds && lsocks[i].addr.len == a->len && memcmp(&lsocks[i].addr.ss, &a->ss, a->len) == 0)
			return &lsocks[i];
	return NULL;
}

static unsigned lsocks_saved_nfds[MAX_LSOCKS];

/* Undo what a failed lsocks_prepare() opened: extra SO_REUSEPORT sockets
 * that no worker accepts on would swallow a share of new connections. */
static void lsocks_rollback(void)
{
	for (int i = 0; i < MAX_LSOCKS; i++) {
		while (lsocks[i].nfds > lsocks_saved_nfds[i])
			close(lsocks[i].fds[--lsocks[i].nfds]);
	}
}

/* Make sure every listener of CFG has at least cfg->workers sockets. */
static int lsocks_prepare(struct cfg *cfg)
{
	for (int i = 0; i < MAX_LSOCKS; i++) {
		lsocks[i].in_use = 0;
		lsocks_saved_nfds[i] = lsocks[i].nfds;
	}
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		struct cfg_listener *li = &cfg->listeners[l];
		struct lsock *ls = lsock_find(&li->addr);
		if (ls == NULL) {
			for (int i = 0; i < MAX_LSOCKS && !ls; i++)
				if (lsocks[i].nfds == 0)
					ls = &lsocks[i];
			if (ls == NULL) {
				log_error("too many listening addresses");
				return -1;
			}
			ls->addr = li->addr;
			ls->fixed = 0;
		}
		ls->in_use = 1;
		while (ls->nfds < cfg->workers && !ls->fixed) {
			int fd = lsock_open_one(li);
			if (fd < 0) {
				log_error("cannot listen on %s: %s", li->addr.text, strerror(errno));
				return -1;
			}
			ls->held[ls->nfds] = 0;
			ls->fds[ls->nfds++] = fd;
		}
	}
	return 0;
}

/* Sockets of listeners the current config dropped. */
static void lsocks_close_unused(void)
{
	for (int i = 0; i < MAX_LSOCKS; i++) {
		if (lsocks[i].in_use || lsocks[i].nfds == 0)
			continue;
		for (unsigned k = 0; k < lsocks[i].nfds; k++)
			close(lsocks[i].fds[k]);
		lsocks[i].nfds = 0;
	}
}

/* Connections still in a listening socket's accept queue when its last
 * descriptor closes are reset, although their clients' connect() succeeded
 * and their requests may be on the wire. Before the master lets go of
 * sockets that are about to close (all of them on stop, those of dropped
 * listeners on reload), a drop-everything socket filter makes the kernel
 * ignore new SYNs (the client retries, and once the socket is gone it is
 * refused), and the workers, not yet told to drain, accept what is queued.
 * Gives up after QUIESCE_MAX_MS (a stopped or stuck worker). */
static unsigned lsocks_ignore_syns(int all)
{
	static struct sock_filter drop_all[] = { BPF_STMT(BPF_RET | BPF_K, 0) };
	struct sock_fprog prog = { ARRAY_SIZE(drop_all), drop_all };
	unsigned nsocks = 0;
	for (int i = 0; i < MAX_LSOCKS; i++) {
		if (lsocks[i].in_use && !all)
			continue;
		for (unsigned k = 0; k < lsocks[i].nfds; k++) {
			if (lsocks[i].held[k])
				continue;
			nsocks++;
			if (setsockopt(lsocks[i].fds[k], SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0)
				log_warn("listening socket: cannot stop new connections: %s", strerror(errno));
		}
	}
	return nsocks;
}

static void lsocks_wait_accepted(int all)
{
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		/* On a listening socket tcpi_unacked is the accept queue length. */
		unsigned queued = 0;
		for (int i = 0; i < MAX_LSOCKS; i++) {
			if (lsocks[i].in_use && !all)
				continue;
			for (unsigned k = 0; k < lsocks[i].nfds; k++) {
				struct tcp_info ti;
				socklen_t len = sizeof(ti);
				if (!lsocks[i].held[k]
				    && getsockopt(lsocks[i].fds[k], IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
					queued += ti.tcpi_unacked;
			}
		}
		clock_gettime(CLOCK_MONOTONIC, &now);
		long ms = (now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000;
		if (queued == 0)
			return;
		if (ms >= QUIESCE_MAX_MS) {
			log_warn("%u connection(s) still waiting to be accepted on closing sockets after %ld ms",
				 queued, ms);
			return;
		}
		struct timespec nap = { 0, 1000 * 1000 };
		nanosleep(&nap, NULL);
	}
}

/* The listening addresses a reload removed (sockets open, no longer in
 * use) go into shm->closing_addrs: their monitor_uri answers 503 in the
 * old workers, through the drain notice and the drain. An address is
 * taken out again when a configuration uses it again. Returns how many
 * addresses are closing. */
static unsigned closing_addrs_mark(void)
{
	unsigned n = 0;
	for (int i = 0; i < MAX_LSOCKS; i++) {
		if (lsocks[i].in_use || lsocks[i].nfds == 0)
			continue;
		uint64_t key = shm_addr_key(&lsocks[i].addr.ss, lsocks[i].addr.len);
		int known = 0;
		for (unsigned k = 0; k < SHM_MAX_CLOSING; k++)
			known |= atomic_load(&shm->closing_addrs[k]) == key;
		if (!known) {
			atomic_store(&shm->closing_addrs[closing_next], key);
			closing_next = (closing_next + 1) % SHM_MAX_CLOSING;
		}
		n++;
	}
	return n;
}

static void closing_addrs_unmark_used(void)
{
	for (int i = 0; i < MAX_LSOCKS; i++) {
		if (!lsocks[i].in_use)
			continue;
		uint64_t key = shm_addr_key(&lsocks[i].addr.ss, lsocks[i].addr.len);
		for (unsigned k = 0; k < SHM_MAX_CLOSING; k++)
			if (atomic_load(&shm->closing_addrs[k]) == key)
				atomic_store(&shm->closing_addrs[k], 0);
	}
}

struct tls_set *master_tls_load(const struct cfg *cfg, char *err, size_t errlen)
{
	if (!instance_keys_ready) {
		tls_ticket_keys_random(&instance_keys);
		instance_keys_ready = 1;
	}
	struct tls_set *tls = calloc(1, sizeof(*tls));
	AN(tls);
	tls->listeners = calloc(cfg->nlisteners, sizeof(*tls->listeners));
	tls->backends = calloc(cfg->nbackends, sizeof(*tls->backends));
	AN(tls->listeners && tls->backends);
	err[0] = '\0';
	int failed = 0;
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		if (!cfg->listeners[l].tls.enabled)
			continue;
		tls->listeners[l] = tls_server_new(cfg, &cfg->listeners[l], &instance_keys, err, errlen);
		failed |= tls->listeners[l] == NULL;
	}
	for (unsigned b = 0; b < cfg->nbackends; b++) {
		if (!cfg->backends[b].tls.enabled)
			continue;
		tls->backends[b] = tls_client_new(cfg, &cfg->backends[b], err, errlen);
		failed |= tls->backends[b] == NULL;
	}
	if (failed) {
		master_tls_free(cfg, tls);
		return NULL;
	}
	return tls;
}

void master_tls_free(const struct cfg *cfg, struct tls_set *tls)
{
	if (tls == NULL)
		return;
	for (unsigned l = 0; l < cfg->nlisteners; l++)
		tls_server_free(tls->listeners[l]);
	for (unsigned b = 0; b < cfg->nbackends; b++)
		tls_client_free(tls->backends[b]);
	free(tls->listeners);
	free(tls->backends);
	free(tls);
}

static int register_slots(struct cfg *cfg)
{
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		char name[SHM_NAME_MAX];
		stats_listener_slot_name(&cfg->listeners[l], name, sizeof(name));
		if (shm_slot_get(name) < 0)
			return -1;
		for (unsigned r = 0; r < cfg->listeners[l].nroutes; r++) {
			struct cfg_route *rt = &cfg->listeners[l].routes[r];
			snprintf(name, sizeof(name), "%s/%s", cfg->listeners[l].name, rt->name);
			rt->stats_slot = routestats_slot_get(name);
		}
	}
	for (unsigned b = 0; b < cfg->nbackends; b++) {
		struct cfg_backend *be = &cfg->backends[b];
		if (shm_slot_get(be->name) < 0)
			return -1;
		for (unsigned s = 0; s < be->nservers; s++) {
			char name[SHM_NAME_MAX];
			snprintf(name, sizeof(name), "%s/%s", be->name, be->servers[s].name);
			if (shm_slot_get(name) < 0)
				return -1;
		}
	}
	return 0;
}

/* Binary upgrade: the sockets' side below (lsocks_adopt, upgrade_commit),
 * the process side in upgrade.c. handed_over: the new master
 * serves; this one drains and exits, and no longer speaks for the service
 * (no STOPPING=1; the pid file is the new master's). */
static int handed_over;
/* When handed_over: the end of this master's drain. */
static struct timespec handover_deadline;
/* -d: stdio is /dev/null (detach_stdio). */
static int detached;
static int report_fd;
static void upgrade_report(void);

static int spawn(int index)
{
	int slot = shm_worker_alloc();
	int p;
	if (slot < 0) {
		log_error("no free worker slot");
		return -1;
	}
	for (p = 0; p < SHM_MAX_WORKERS && procs[p].pid; p++)
		;
	if (p == SHM_MAX_WORKERS)
		return -1;
	struct worker_fd fds[CFG_MAX_LISTENERS * 8];
	unsigned nfds = 0;
	for (unsigned l = 0; l < cur->nlisteners; l++) {
		struct lsock *ls = lsock_find(&cur->listeners[l].addr);
		AN(ls);
		if (ls->fixed && ls->nfds < cur->workers && nfds < ARRAY_SIZE(fds))
			fds[nfds++] = (struct worker_fd){ l, ls->fds[(unsigned)index % ls->nfds] };
		else
			for (unsigned k = (unsigned)index; k < ls->nfds && nfds < ARRAY_SIZE(fds); k += cur->workers)
				fds[nfds++] = (struct worker_fd){ l, ls->fds[k] };
	}
	int logs[2];
	if (logpass_pair(logs) < 0) {
		log_error("socketpair: %s", strerror(errno));
		return -1;
	}
	log_flush();
	pid_t pid = fork();
	if (pid < 0) {
		log_error("fork: %s", strerror(errno));
		close(logs[0]);
		close(logs[1]);
		return -1;
	}
	if (pid == 0) {
		close(logs[0]);
		for (int i = 0; i < SHM_MAX_WORKERS; i++)
			if (procs[i].pid)
				close(procs[i].logs);
		/* Keep only our own accept sockets: a socket a worker holds but
		 * never accepts on would take connections nobody serves. */
		for (int i = 0; i < MAX_LSOCKS; i++) {
			for (unsigned k = 0; k < lsocks[i].nfds; k++) {
				int mine = 0;
				for (unsigned f = 0; f < nfds; f++)
					mine |= fds[f].fd == lsocks[i].fds[k];
				if (!mine)
					close(lsocks[i].fds[k]);
			}
		}
		atomic_store(&shm->workers[slot].pid, getpid());
		notify_parent_forget();
		if (report_fd >= 0)
			close(report_fd);
		close(ready_pipe[0]);
		/* worker_run(), with the readiness report in between. */
		worker_start(cur, index, slot, fds, nfds, cur_tls);
		tls_worker_seed();
		worker_take_logs(logs[1]);
		char why[256];
		if (privs_drop(cur, why, sizeof(why)) < 0) {
			log_error("cannot switch to user %s: %s", cur->user, why);
			log_flush();
			exit(2);
		}
		/* Changing credentials cleared it. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (worker_orphaned())
			exit(0);
		pid_t me = getpid();
		if (write(ready_pipe[1], &me, sizeof(me)) != sizeof(me))
			log_warn("cannot report readiness to the master: %s", strerror(errno));
		close(ready_pipe[1]);
		uv_run(&W->loop, UV_RUN_DEFAULT);
		log_flush();
		exit(0);
	}
	atomic_store(&shm->workers[slot].pid, pid);
	shm->workers[slot].generation = generation;
	close(logs[1]);
	procs[p] = (struct wproc){ pid, index, slot, generation, 0, logs[0] };
	return 0;
}

static void signal_generation(unsigned gen, int sig, int match)
{
	for (int i = 0; i < SHM_MAX_WORKERS; i++)
		if (procs[i].pid && ((procs[i].gen == gen) == match))
			kill(procs[i].pid, sig);
}

static unsigned live_workers(void)
{
	unsigned n = 0;
	for (int i = 0; i < SHM_MAX_WORKERS; i++)
		n += procs[i].pid != 0;
	return n;
}

static int restart_allowed(void)
{
	time_t now = time(NULL);
	time_t oldest = restart_times[restart_pos];
	if (oldest && now - oldest < RESTART_WINDOW_S)
		return 0;
	restart_times[restart_pos] = now;
	restart_pos = (restart_pos + 1) % RESTART_BURST;
	return 1;
}

/* Set when a first-generation worker exits with an error before it
 * serves (it could not set up or switch user): the start has failed, and
 * restarting it would only repeat that. */
static int start_failed;

static void reap(int stopping)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		int i;
		for (i = 0; i < SHM_MAX_WORKERS && procs[i].pid != pid; i++)
			;
		if (i == SHM_MAX_WORKERS) {
			upgrade_child_exited(pid, status);
			continue;
		}
		struct wproc pr = procs[i];
		procs[i].pid = 0;
		close(pr.logs);
		stats_worker_retire(pr.slot);
		routestats_worker_retire(pr.slot);
		shm_worker_reclaim(pr.slot);
		int crashed = WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0);
		if (prev.cfg && pr.gen == generation && !pr.ready && !stopping && WIFEXITED(status)
		    && WEXITSTATUS(status) != 0) {
			log_error("worker %d (pid %d) of the new generation exited with status %d before serving",
				  pr.index, pid, WEXITSTATUS(status));
			prev.failed = 1;
			continue;
		}
		/* Only the starting generation's: a worker of a reload that
		 * failed before the start was announced is a straggler. */
		if (announce == ANNOUNCE_START && pr.gen == generation && !pr.ready && WIFEXITED(status)
		    && WEXITSTATUS(status) != 0) {
			log_error("worker %d (pid %d) exited with status %d before serving; not starting",
				  pr.index, pid, WEXITSTATUS(status));
			start_failed = 1;
			continue;
		}
		if (pr.gen != generation || stopping || handed_over) {
			if (crashed)
				log_warn("worker %d (pid %d) of generation %u ended abnormally", pr.index, pid, pr.gen);
			continue;
		}
		if (WIFSIGNALED(status))
			log_error("worker %d (pid %d) killed by signal %d; starting a new one",
				  pr.index, pid, WTERMSIG(status));
		else
			log_error("worker %d (pid %d) exited with status %d; starting a new one",
				  pr.index, pid, WEXITSTATUS(status));
		if (!restart_allowed()) {
			/* Never served yet: crashing like this, they never will
			 * (and -d's parent is waiting for a verdict). */
			if (announce == ANNOUNCE_START && !pr.ready) {
				log_error("workers crash too often before serving; not starting");
				start_failed = 1;
				continue;
			}
			log_error("workers crash too often; waiting before restarting worker %d", pr.index);
			sleep(1);
		}
		spawn(pr.index);
	}
}

static void log_summary(const struct cfg *cfg)
{
	if (privs_switching(cfg))
		log_info("workers run as user %s (uid %d, gid %d)", cfg->user, (int)cfg->uid, (int)cfg->gid);
	else if (geteuid() == 0)
		log_info("workers run as root (user: root)");
	else if (cfg->user[0] && cfg->uid != geteuid())
		log_warn("user: %s ignored: the master is not root (uid %d), and neither are its workers",
			 cfg->user, (int)geteuid());
	else
		log_info("workers run as uid %d, the master's", (int)geteuid());
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		const struct cfg_listener *li = &cfg->listeners[l];
		char pin[48] = "off";
		if (li->nproxy_from)
			snprintf(pin, sizeof(pin), "from %u network%s", li->nproxy_from,
				 li->nproxy_from == 1 ? "" : "s");
		log_info("listening on %s (listener %s -> backend %s), %u workers, %s, PROXY in %s",
			 li->addr.text, li->name, li->backend_name, cfg->workers,
			 li->tls.enabled ? "tls" : "plain", pin);
	}
}

static void reload_failed(const char *why)
{
	if (!reload_error[0])
		snprintf(reload_error, sizeof(reload_error), "%s", why);
	log_error("reload rejected: keeping the running configuration");
}

static void reload_log_errors(char *err)
{
	char *line = strtok(err, "\n");
	while (line) {
		if (!reload_error[0])
			snprintf(reload_error, sizeof(reload_error), "%s", line);
		log_error("reload rejected: %s", line);
		line = strtok(NULL, "\n");
	}
}

/* Returns 0 when a new generation was started, -1 when the old one keeps
 * running (reload_error says why). */
static int reload(void)
{
	reload_error[0] = '\0';
	char err[4096];
	log_info("reloading %s", cur->path);
	struct cfg *next = cfg_load(cur->path, err, sizeof(err));
	if (next == NULL) {
		reload_log_errors(err);
		reload_failed("invalid configuration");
		return -1;
	}
	if (privs_check(next, err, sizeof(err)) < 0) {
		reload_log_errors(err);
		reload_failed("workers would run as root");
		cfg_free(next);
		return -1;
	}
	shdict_init(next->lua_shared_memory);  /* keeps the region; warns if the size changed */
	struct tls_set *next_tls = master_tls_load(next, err, sizeof(err));
	if (next_tls == NULL) {
		reload_log_errors(err);
		reload_failed("TLS setup failed");
		cfg_free(next);
		return -1;
	}
	if (register_slots(next) < 0 || lsocks_prepare(next) < 0) {
		reload_failed("cannot listen or register counters (see the error log)");
		master_tls_free(next, next_tls);
		lsocks_rollback();
		lsocks_prepare(cur);  /* restores in_use marks; opens nothing */
		cfg_free(next);
		return -1;
	}
	log_syslog_facility(next->syslog_facility);
	if (log_open(next->error_log, next->access_log) < 0)
		log_error("reload: cannot open the new logs; keeping the old ones");
	/* A changed `inspection:` wins; an unchanged one keeps what an operator
	 * switched live. */
	if (next->inspection != cur->inspection)
		atomic_store(&shm->inspect_on, next->inspection);
	prev.cfg = cur;
	prev.tls = cur_tls;
	prev.gen = generation;
	prev.failed = 0;
	prev.notice = 0;
	prev.notice_end = (struct timespec){ 0, 0 };
	/* A listener back on an address a reload had removed is ready again. */
	closing_addrs_unmark_used();
	cur = next;
	cur_tls = next_tls;
	generation++;
	log_info("reloading: generation %u starting, %u workers", generation, cur->workers);
	for (unsigned i = 0; i < cur->workers; i++)
		spawn((int)i);
	return 0;
}

static int generation_ready(void)
{
	unsigned n = 0;
	for (int i = 0; i < SHM_MAX_WORKERS; i++)
		n += procs[i].pid && procs[i].gen == generation && procs[i].ready;
	return n >= cur->workers;
}

/* The new generation serves: stop the previous ones. */
static void reload_commit(void)
{
	/* The old generation stops accepting only now that the new one is up
	 * (on the same sockets, so nothing queued is lost), and only after
	 * it has taken what waits on the sockets of dropped listeners. */
	if (lsocks_ignore_syns(0))
		lsocks_wait_accepted(0);
	signal_generation(generation, SIGTERM, 0);
	lsocks_close_unused();
	/* Old workers keep their own copy of the configuration. */
	master_tls_free(prev.cfg, prev.tls);
	cfg_free(prev.cfg);
	prev.cfg = NULL;
	log_info("reloaded: generation %u, %u workers", generation, cur->workers);
	log_summary(cur);
}

/* The new generation is ready. A reload that removes listeners gives the
 * balancers in front timeouts.drain_notice first: the removed listeners'
 * monitor_uri answers 503 while they go on accepting. Returns 1 while that
 * notice runs (reload_commit waits). */
static int reload_notice(void)
{
	if (prev.notice)
		return !ts_passed(&prev.notice_end);
	prev.notice = 1;
	unsigned n = closing_addrs_mark();
	if (n == 0 || cur->timeouts.drain_notice_ms == 0)
		return 0;
	ts_after_ms(&prev.notice_end, cur->timeouts.drain_notice_ms);
	log_info("reload: %u removed listening address%s not ready; closing in %u ms (timeouts.drain_notice)", n,
		 n == 1 ? "" : "es", cur->timeouts.drain_notice_ms);
	return 1;
}

/* A new worker could not set up: back to the previous configuration, whose
 * workers never stopped serving. */
static void reload_abort(void)
{
	struct cfg *failed = cur;
	struct tls_set *failed_tls = cur_tls;
	unsigned failed_gen = generation;
	signal_generation(failed_gen, SIGTERM, 1);
	cur = prev.cfg;
	cur_tls = prev.tls;
	prev.cfg = NULL;
	/* A fresh number: the failing generation's stragglers must not pass
	 * for the current one when they are reaped. */
	generation++;
	for (int i = 0; i < SHM_MAX_WORKERS; i++)
		if (procs[i].pid && procs[i].gen == prev.gen) {
			procs[i].gen = generation;
			shm->workers[procs[i].slot].generation = generation;
		}
	lsocks_rollback();
	lsocks_prepare(cur);  /* restores in_use marks; opens nothing */
	closing_addrs_unmark_used();
	if (failed->inspection != cur->inspection)
		atomic_store(&shm->inspect_on, cur->inspection);
	log_syslog_facility(cur->syslog_facility);
	if (log_open(cur->error_log, cur->access_log) < 0)
		log_error("reload: cannot reopen the previous logs");
	master_tls_free(failed, failed_tls);
	cfg_free(failed);
	snprintf(reload_error, sizeof(reload_error), "a new worker could not set up");
	log_error("reload failed: a worker of generation %u could not set up (see above); the previous "
		  "configuration keeps serving as generation %u", failed_gen, generation);
}

/* Collect the readiness reports of workers, then announce a generation
 * once all of its workers serve. */
static void ready_collect(void)
{
	pid_t pid;
	while (read(ready_pipe[0], &pid, sizeof(pid)) == sizeof(pid))
		for (int i = 0; i < SHM_MAX_WORKERS; i++)
			if (procs[i].pid == pid)
				procs[i].ready = 1;
}

static void ready_poll(void)
{
	ready_collect();
	if (announce == ANNOUNCE_NONE || !generation_ready())
		return;
	if (announce == ANNOUNCE_START && report_fd >= 0) {
		upgrade_report();
	} else if (announce == ANNOUNCE_START) {
		notify_sendf("READY=1\nMAINPID=%d\nSTATUS=serving: %u listener%s, %u workers",
			     (int)getpid(), cur->nlisteners, cur->nlisteners == 1 ? "" : "s", cur->workers);
		notify_parent_ready();
	} else {
		notify_sendf("READY=1\nSTATUS=serving: %u listener%s, %u workers (reloaded, generation %u)",
			     cur->nlisteners, cur->nlisteners == 1 ? "" : "s", cur->workers, generation);
	}
	announce = ANNOUNCE_NONE;
}

static void notify_reloading(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	/* MONOTONIC_USEC: systemd (Type=notify-reload) matches this reload to
	 * the signal it sent. */
	notify_sendf("RELOADING=1\nMONOTONIC_USEC=%llu\nSTATUS=reloading",
		     (unsigned long long)now.tv_sec * 1000000ull + (unsigned long long)now.tv_nsec / 1000u);
}

static void write_pid_file(const char *path)
{
	if (!path[0])
		return;
	FILE *f = fopen(path, "w");
	if (!f) {
		log_warn("cannot write pid file %s: %s", path, strerror(errno));
		return;
	}
	fprintf(f, "%d\n", getpid());
	fclose(f);
}

/* ---- Sockets not opened here: systemd's (LISTEN_FDS) and those of the
 * master we upgrade from (SIGUSR2, handover.h). */

/* Inherited sockets the configuration no longer uses, closed: named in
 * the upgrade report so the old master lets their queues drain. */
static int dropped_fds[HANDOVER_MAX_FDS];
static unsigned ndropped;
/* Write end of the pipe the old master waits on; -1: not an upgrade, or
 * reported already. */
static int report_fd = -1;

/* Adopt the inherited sockets into lsocks[] by address, before
 * lsocks_prepare() opens what is still missing. A socket from systemd that
 * matches no listener is an error (it would queue connections nobody
 * accepts); one from an upgrade is closed (its listener was removed). */
static int lsocks_adopt(const struct cfg *cfg)
{
	const struct handover_env *he = handover_inherited();
	if (he == NULL)
		return 0;
	int upgrade_mode = handover_is_upgrade();
	const char *from = upgrade_mode ? "the previous master (binary upgrade)" : "systemd (LISTEN_FDS)";
	for (unsigned i = 0; i < he->nfds; i++) {
		int fd = he->fds[i].fd;
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		char text[NETADDR_TEXT_MAX + 16];
		memset(&ss, 0, sizeof(ss));
		getsockname(fd, (struct sockaddr *)&ss, &sl);
		handover_addr_text(&ss, text, sizeof(text));
		const struct cfg_listener *li = NULL;
		for (unsigned l = 0; l < cfg->nlisteners && !li; l++)
			if (handover_addr_same(&ss, &cfg->listeners[l].addr.ss))
				li = &cfg->listeners[l];
		if (li == NULL && !upgrade_mode) {
			log_error("LISTEN_FDS: inherited socket (descriptor %d) listens on %s, which is no "
				  "listener's address in %s; not starting (configure that address, or remove it "
				  "from the .socket unit)", fd, text, cfg->path);
			return -1;
		}
		if (li == NULL) {
			log_info("upgrade: inherited socket on %s is no longer configured; closing it", text);
			close(fd);
			dropped_fds[ndropped++] = fd;
			continue;
		}
		struct lsock *ls = lsock_find(&li->addr);
		for (int k = 0; k < MAX_LSOCKS && !ls; k++)
			if (lsocks[k].nfds == 0) {
				ls = &lsocks[k];
				ls->addr = li->addr;
				ls->fixed = 0;
			}
		if (ls == NULL || ls->nfds == SHM_MAX_WORKERS) {
			log_error("%s: too many inherited sockets on %s", from, text);
			return -1;
		}
		int rp = 0, one = 1;
		socklen_t rl = sizeof(rp);
		if (getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &rp, &rl) < 0 || !rp)
			ls->fixed = 1;
		/* What lsock_open_one() sets, for a socket systemd made. The
		 * backlog is the configuration's, unless systemd owns it. */
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!he->fds[i].systemd)
			listen(fd, li->backlog);
		ls->held[ls->nfds] = (unsigned char)((he->fds[i].systemd ? HELD_SYSTEMD : 0)
						     | (upgrade_mode ? HELD_PREV : 0));
		ls->fds[ls->nfds++] = fd;
	}
	for (int k = 0; k < MAX_LSOCKS; k++)
		if (lsocks[k].nfds)
			log_info("listening on %s: %u socket%s inherited from %s%s", lsocks[k].addr.text,
				 lsocks[k].nfds, lsocks[k].nfds == 1 ? "" : "s", from,
				 lsocks[k].fixed ? ", shared by every worker" : "");
	if (upgrade_mode)
		report_fd = he->report_fd;
	return 0;
}

/* New master: every worker serves; tell the old master, which hands
 * systemd our pid (MAINPID=, sent by the main process it still is, so
 * NotifyAccess=main will do) and drains. */
static void upgrade_report(void)
{
	char msg[HANDOVER_REPORT_MAX];
	AZ(handover_report_format(getpid(), dropped_fds, ndropped, msg, sizeof(msg)));
	size_t len = strlen(msg);
	if (write(report_fd, msg, len) != (ssize_t)len)
		log_warn("upgrade: cannot report to the old master: %s; serving anyway", strerror(errno));
	else  /* no pid: our parent was the launcher, gone by now; the old master logs its own */
		log_info("upgrade: serving; the old master drains and exits");
	close(report_fd);
	report_fd = -1;
	for (int i = 0; i < MAX_LSOCKS; i++)
		for (unsigned k = 0; k < lsocks[i].nfds; k++)
			lsocks[i].held[k] &= (unsigned char)~HELD_PREV;
}

/* The new master serves on our sockets: let the queues of the sockets it
 * dropped be accepted, then drain like a stop, without stopping new
 * connections on the sockets it now serves. */
static void upgrade_commit(pid_t pid, const int *dropped, unsigned n)
{
	handed_over = 1;
	announce = ANNOUNCE_NONE;
	notify_sendf("MAINPID=%d\nSTATUS=upgraded: master pid %d serves", (int)pid, (int)pid);
	log_info("upgrade: the new master (pid %d) serves; this master (pid %d) drains and exits",
		 (int)pid, (int)getpid());
	for (int i = 0; i < MAX_LSOCKS; i++) {
		lsocks[i].in_use = 0;
		for (unsigned k = 0; k < lsocks[i].nfds; k++) {
			int kept = 1;
			for (unsigned d = 0; d < n; d++)
				kept &= dropped[d] != lsocks[i].fds[k];
			if (kept)
				lsocks[i].held[k] |= HELD_NEXT;
		}
	}
	if (lsocks_ignore_syns(1))
		lsocks_wait_accepted(1);
	lsocks_close_unused();
	signal_generation(0, SIGTERM, 0);
	signal_generation(0, SIGTERM, 1);
	clock_gettime(CLOCK_MONOTONIC, &handover_deadline);
	handover_deadline.tv_sec += cur->timeouts.drain_ms / 1000 + 2;
}

/* SIGUSR2. What the master's own state forbids is refused here; the
 * upgrade module refuses the rest (upgrade.h). */
static void master_upgrade_start(int stopping)
{
	if (stopping || stop_notice) {
		log_warn("upgrade refused (SIGUSR2): stopping");
		return;
	}
	if (!upgrade_in_progress() && prev.cfg) {
		log_warn("upgrade refused (SIGUSR2): a reload is in progress (generation %u starting)", generation);
		return;
	}
	if (!upgrade_in_progress() && announce == ANNOUNCE_START) {
		log_warn("upgrade refused (SIGUSR2): still starting");
		return;
	}
	static struct handover_env he;
	he.nfds = 0;
	for (int i = 0; i < MAX_LSOCKS; i++)
		for (unsigned k = 0; k < lsocks[i].nfds && he.nfds < HANDOVER_MAX_FDS; k++)
			he.fds[he.nfds++] = (struct handover_fd){ lsocks[i].fds[k],
								  (lsocks[i].held[k] & HELD_SYSTEMD) != 0 };
	_Static_assert(MAX_LSOCKS * SHM_MAX_WORKERS <= HANDOVER_MAX_FDS, "a socket left out of an upgrade");
	upgrade_start(cur, &he, detached);
}

/* -d: everything that can fail at start and be told on the terminal has
 * been tried; from here on the error log is the only channel. Done before
 * the workers fork so none of them holds the terminal. */
static int detach_stdio(void)
{
	if (strcmp(cur->error_log, "stderr") == 0)
		fprintf(stderr, "sluice: warning: error_log is stderr, which -d discards; use a file or syslog\n");
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		log_error("/dev/null: %s", strerror(errno));
		return -1;
	}
	for (int i = 0; i <= 2; i++)
		if (dup2(fd, i) < 0) {
			log_error("dup2: %s", strerror(errno));
			close(fd);
			return -1;
		}
	close(fd);
	log_errors_to_stderr(0);
	detached = 1;
	return 0;
}

/* Stop now: new connections are refused instead of queueing where no
 * worker will look; those already queued are served first. Sets DEADLINE
 * for the workers' drain. */
static void stop_begin(struct timespec *deadline)
{
	announce = ANNOUNCE_NONE;
	atomic_fetch_or(&shm->drain, SHM_DRAIN_STOP);
	for (int i = 0; i < MAX_LSOCKS; i++)
		lsocks[i].in_use = 0;
	unsigned closing = lsocks_ignore_syns(1);
	/* The announcement follows the filter so that whoever reads it can
	 * rely on new connections not landing. */
	notify_send("STOPPING=1\nSTATUS=stopping: draining workers");
	log_info("stopping: draining workers (up to %u ms)", cur->timeouts.drain_ms);
	if (closing)
		lsocks_wait_accepted(1);
	lsocks_close_unused();
	signal_generation(0, SIGTERM, 0);
	signal_generation(0, SIGTERM, 1);
	clock_gettime(CLOCK_MONOTONIC, deadline);
	deadline->tv_sec += cur->timeouts.drain_ms / 1000 + 2;
}

int master_run(struct cfg *cfg)
{
	cur = cfg;
	log_set_role("master");
	if (shm_init() < 0 || stats_init() < 0 || routestats_init() < 0 ||
	    shdict_init(cfg->lua_shared_memory) < 0 || ratelimit_init(cfg->limits.rate_limit_entries) < 0) {
		log_error("shared memory: %s", strerror(errno));
		return 1;
	}
	char err[8192];
	cur_tls = master_tls_load(cfg, err, sizeof(err));
	if (cur_tls == NULL) {
		fprintf(stderr, "%s", err);
		log_error("TLS configuration failed; not starting");
		return 1;
	}
	if (register_slots(cfg) < 0 || lsocks_adopt(cfg) < 0 || lsocks_prepare(cfg) < 0)
		return 1;
	if (notify_parent_waiting() && detach_stdio() < 0)
		return 1;
	atomic_store(&shm->inspect_on, cfg->inspection);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGUSR1);
	sigaddset(&set, SIGUSR2);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (pipe2(ready_pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
		log_error("pipe: %s", strerror(errno));
		return 1;
	}
	write_pid_file(cfg->pid_file);
	/* Before the first worker exists: once the port answers, the log
	 * already says what serves it. */
	log_summary(cfg);
	for (unsigned i = 0; i < cfg->workers; i++)
		if (spawn((int)i) < 0) {
			upgrade_exit_pid_files(cfg->pid_file);
			return 1;
		}
	announce = ANNOUNCE_START;
	int stopping = 0;
	struct timespec deadline = { 0, 0 };
	for (;;) {
		/* Shorter while a generation is coming up: readiness arrives
		 * on a pipe, which sigtimedwait cannot wait for. */
		struct timespec tick = { 0, (announce != ANNOUNCE_NONE || prev.cfg || stop_notice || upgrade_in_progress() ? 10 : 200) * 1000 * 1000 };
		siginfo_t info;
		int sig = sigtimedwait(&set, &info, &tick);
		if (sig < 0 && atomic_exchange(&shm->reload_requested, 0))
			sig = SIGHUP;
		switch (sig) {
		case SIGHUP:
			/* Under Type=notify-reload systemd waits for RELOADING=1
			 * then READY=1 after its SIGHUP: a refused reload answers
			 * like a failed one, or `systemctl reload` hangs. */
			if (upgrade_in_progress() && !stopping && !stop_notice) {
				log_warn("reload refused: a binary upgrade is in progress");
				notify_reloading();
				notify_send("READY=1\nSTATUS=reload refused: a binary upgrade is in progress; still serving");
				break;
			}
			if (stop_notice && !stopping) {
				log_warn("reload ignored: stopping (drain notice)");
				notify_reloading();
				notify_send("READY=1\nSTATUS=stopping: not ready (drain notice); reload ignored");
			} else if (stopping) {
				/* STOPPING=1 is sent: READY=1 would contradict it. */
				log_warn("reload ignored: stopping");
			}
			if (!stopping && !stop_notice) {
				/* A reload before the first generation was announced
				 * folds into the start's READY=1. */
				int starting = announce == ANNOUNCE_START;
				if (!starting)
					notify_reloading();
				/* The reload before this one has not settled: its
				 * generation is replaced anyway. */
				if (prev.cfg)
					reload_commit();
				if (reload() == 0) {
					if (!starting)
						announce = ANNOUNCE_RELOAD;
				} else if (!starting) {
					notify_sendf("READY=1\nSTATUS=reload failed (%s); still serving the previous configuration",
						     reload_error);
				}
			}
			break;
		case SIGTERM:
		case SIGINT:
			if (stopping)
				break;
			upgrade_cancel();
			if (!stop_notice && cur->timeouts.drain_notice_ms) {
				/* Not ready first, still accepting: the balancer's
				 * checks see 503 and take the instance out before
				 * a connection is refused. */
				stop_notice = 1;
				atomic_fetch_or(&shm->drain, SHM_DRAIN_STOP);
				ts_after_ms(&stop_notice_end, cur->timeouts.drain_notice_ms);
				notify_send("STATUS=stopping: not ready (drain notice)");
				log_info("stopping: not ready; listeners close in %u ms (timeouts.drain_notice; "
					 "a second SIGTERM closes them now)", cur->timeouts.drain_notice_ms);
				break;
			}
			if (stop_notice)
				log_info("stopping: second signal, drain notice cut short");
			stopping = 1;
			stop_begin(&deadline);
			break;
		case SIGUSR1:
			/* On a failure, what did reopen is handed over all the same
			 * (the other log stays as it was). */
			if (log_open(cur->error_log, cur->access_log) < 0)
				log_error("SIGUSR1: cannot reopen every log; see the messages above");
			/* Workers get the new files from us: they may no longer be
			 * allowed to open them. */
			for (int i = 0; i < SHM_MAX_WORKERS; i++)
				if (procs[i].pid && logpass_send(procs[i].logs) < 0)
					log_warn("cannot hand the reopened logs to worker %d (pid %d): %s",
						 procs[i].index, (int)procs[i].pid, strerror(errno));
			break;
		case SIGUSR2:
			master_upgrade_start(stopping);
			break;
		default:
			break;
		}
		{
			static int dropped[HANDOVER_MAX_FDS];
			unsigned ndrop;
			pid_t next;
			if (upgrade_poll(&next, dropped, &ndrop))
				upgrade_commit(next, dropped, ndrop);
		}
		if (stop_notice && !stopping && ts_passed(&stop_notice_end)) {
			stopping = 1;
			stop_begin(&deadline);
		}
		ready_collect();
		reap(stopping);
		if (handed_over && !stopping) {
			stopping = 1;
			deadline = handover_deadline;
		}
		if (prev.cfg && prev.failed && !stopping) {
			reload_abort();
			if (announce == ANNOUNCE_RELOAD) {
				notify_sendf("READY=1\nSTATUS=reload failed (%s); still serving the previous configuration",
					     reload_error);
				announce = ANNOUNCE_NONE;
			}
		} else if (prev.cfg && generation_ready() && !reload_notice()) {
			reload_commit();
		}
		if (start_failed && !stopping) {
			stopping = 1;
			announce = ANNOUNCE_NONE;
			signal_generation(0, SIGTERM, 0);
			signal_generation(0, SIGTERM, 1);
			clock_gettime(CLOCK_MONOTONIC, &deadline);
			deadline.tv_sec += 2;
		}
		ready_poll();
		if (stopping) {
			/* A cancelled upgrade's new master is gone first: it
			 * would otherwise serve alone, or hold the pid file. */
			if (live_workers() == 0 && !upgrade_in_progress())
				break;
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec > deadline.tv_sec) {
				log_warn("workers did not drain in time; killing them");
				signal_generation(0, SIGKILL, 0);
				signal_generation(0, SIGKILL, 1);
			}
		}
	}
	upgrade_exit_pid_files(cur->pid_file);
	if (start_failed)
		log_error("start failed: workers could not set up (see above)");
	else
		log_info("stopped");
	log_close();
	if (prev.cfg) {
		master_tls_free(prev.cfg, prev.tls);
		cfg_free(prev.cfg);
	}
	master_tls_free(cur, cur_tls);
	cfg_free(cur);
	return start_failed ? 1 : 0;
}
