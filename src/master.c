/* Process model.
 *
 * Listening sockets: one SO_REUSEPORT socket per (listener, worker index),
 * created and kept open by the master. A reload forks new workers on the same
 * sockets before the old ones stop accepting, so a connection waiting in an
 * accept queue is never lost. If a reload lowers the worker count, the
 * surplus sockets are shared out (socket i goes to worker i mod N) instead of
 * being closed with connections in them. */
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
#include "logpass.h"
#include "notify.h"
#include "privs.h"
#include "shm.h"
#include "routestats.h"
#include "stats.h"
#include "tls.h"
#include "util.h"
#include "worker.h"

#define MAX_LSOCKS (CFG_MAX_LISTENERS * 2)
#define RESTART_BURST 10   /* crashes within RESTART_WINDOW_S before backing off */
#define RESTART_WINDOW_S 10
#define QUIESCE_MAX_MS 2000  /* how long a closing socket's queue may take to be accepted */

struct lsock {
	struct cfg_addr addr;
	int fds[SHM_MAX_WORKERS];
	unsigned nfds;
	int in_use;
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
} prev;

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
		}
		ls->in_use = 1;
		while (ls->nfds < cfg->workers) {
			int fd = lsock_open_one(li);
			if (fd < 0) {
				log_error("cannot listen on %s: %s", li->addr.text, strerror(errno));
				return -1;
			}
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
		for (unsigned k = 0; k < lsocks[i].nfds; k++, nsocks++)
			if (setsockopt(lsocks[i].fds[k], SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof(prog)) < 0)
				log_warn("listening socket: cannot stop new connections: %s", strerror(errno));
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
				if (getsockopt(lsocks[i].fds[k], IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
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
		close(ready_pipe[0]);
		/* worker_run(), with the readiness report in between. */
		worker_start(cur, index, slot, fds, nfds, cur_tls);
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
		if (i == SHM_MAX_WORKERS)
			continue;
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
		if (announce == ANNOUNCE_START && !pr.ready && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
			log_error("worker %d (pid %d) exited with status %d before serving; not starting",
				  pr.index, pid, WEXITSTATUS(status));
			start_failed = 1;
			continue;
		}
		if (pr.gen != generation || stopping) {
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
	if (announce == ANNOUNCE_START) {
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
	return 0;
}

int master_run(struct cfg *cfg)
{
	cur = cfg;
	log_set_role("master");
	if (shm_init() < 0 || stats_init() < 0 || routestats_init() < 0) {
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
	if (register_slots(cfg) < 0 || lsocks_prepare(cfg) < 0)
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
			if (cfg->pid_file[0])
				unlink(cfg->pid_file);
			return 1;
		}
	announce = ANNOUNCE_START;
	int stopping = 0;
	struct timespec deadline = { 0, 0 };
	for (;;) {
		/* Shorter while a generation is coming up: readiness arrives
		 * on a pipe, which sigtimedwait cannot wait for. */
		struct timespec tick = { 0, (announce != ANNOUNCE_NONE || prev.cfg ? 10 : 200) * 1000 * 1000 };
		siginfo_t info;
		int sig = sigtimedwait(&set, &info, &tick);
		if (sig < 0 && atomic_exchange(&shm->reload_requested, 0))
			sig = SIGHUP;
		switch (sig) {
		case SIGHUP:
			if (!stopping) {
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
			if (!stopping) {
				stopping = 1;
				announce = ANNOUNCE_NONE;
				/* Stop accepting now: new connections are refused
				 * instead of queueing where no worker will look;
				 * those already queued are served first. The
				 * announcement follows the filter so that whoever
				 * reads it can rely on new connections not landing. */
				for (int i = 0; i < MAX_LSOCKS; i++)
					lsocks[i].in_use = 0;
				unsigned closing = lsocks_ignore_syns(1);
				notify_send("STOPPING=1\nSTATUS=stopping: draining workers");
				log_info("stopping: draining workers (up to %u ms)", cur->timeouts.drain_ms);
				if (closing)
					lsocks_wait_accepted(1);
				lsocks_close_unused();
				signal_generation(0, SIGTERM, 0);
				signal_generation(0, SIGTERM, 1);
				clock_gettime(CLOCK_MONOTONIC, &deadline);
				deadline.tv_sec += cur->timeouts.drain_ms / 1000 + 2;
			}
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
		default:
			break;
		}
		ready_collect();
		reap(stopping);
		if (prev.cfg && prev.failed && !stopping) {
			reload_abort();
			if (announce == ANNOUNCE_RELOAD) {
				notify_sendf("READY=1\nSTATUS=reload failed (%s); still serving the previous configuration",
					     reload_error);
				announce = ANNOUNCE_NONE;
			}
		} else if (prev.cfg && generation_ready()) {
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
			if (live_workers() == 0)
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
	if (cur->pid_file[0])
		unlink(cur->pid_file);
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
