#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>
#include <llhttp.h>
#include <lua.h>
#include <cyaml/cyaml.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <hs/hs.h>
#include "cfg.h"
#include "handover.h"
#include "log.h"
#include "master.h"
#include "notify.h"
#include "privs.h"
#include "version.h"
#include "tls.h"


static void usage(FILE *f)
{
	fprintf(f, "usage: sluice [-c FILE] [-t] [-d] [-V]\n"
		   "  -c FILE  configuration file (default conf/sluice.yaml, else /etc/sluice/sluice.yaml)\n"
		   "  -t       check the configuration and exit (0 valid, 1 invalid)\n"
		   "  -d       run in the background once serving (exit 0), or exit 1 with the error\n"
		   "  -V       print version and build facts\n");
}

/* One "name value" line per fact, so scripts can grep for one. */
static void print_version(void)
{
	char pcre[64] = "?";
	pcre2_config(PCRE2_CONFIG_VERSION, pcre);
	printf("sluice %s\n", SLUICE_VERSION);
#ifdef SLUICE_GIT
	printf("git %s\n", SLUICE_GIT);
#endif
	printf("tls %s\n", tls_library());
	printf("lua %s\n", LUA_RELEASE);
	printf("libuv %s\n", uv_version_string());
	printf("llhttp %d.%d.%d\n", LLHTTP_VERSION_MAJOR, LLHTTP_VERSION_MINOR, LLHTTP_VERSION_PATCH);
	printf("libcyaml %s\n", cyaml_version_str);
	printf("pcre2 %s\n", pcre);
	printf("hyperscan %s\n", hs_version());
#ifdef HAVE_JEMALLOC
	printf("jemalloc yes\n");
#else
	printf("jemalloc no\n");
#endif
	printf("compiler %s\n", __VERSION__);
	printf("build%s%s%s%s\n",
#ifdef __OPTIMIZE__
	       " optimized",
#else
	       " unoptimized",
#endif
#if defined(__SANITIZE_ADDRESS__)
	       " asan",
#else
	       "",
#endif
#ifdef SLUICE_NO_STATS
	       " no-stats",
#else
	       " stats",
#endif
#ifdef LLHTTP_STRICT_MODE
	       " llhttp-strict"
#else
	       ""
#endif
	       );
}

/* -d. The calling process stays until the master says it serves (exit 0)
 * or dies (exit 1; the master has printed why on our shared stderr). The
 * master is a grandchild in its own session, so it has no controlling
 * terminal and is not our child for the shell to wait on. The working
 * directory is kept: paths in the config are relative to it, at start and
 * at every reload. Returns only in the master. */
static void daemonize(const char *error_log)
{
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0) {
		fprintf(stderr, "sluice: pipe: %s\n", strerror(errno));
		_exit(1);
	}
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "sluice: fork: %s\n", strerror(errno));
		_exit(1);
	}
	if (pid > 0) {
		close(p[1]);
		char ok;
		ssize_t n;
		do
			n = read(p[0], &ok, 1);
		while (n < 0 && errno == EINTR);
		waitpid(pid, NULL, 0);
		/* _exit: the configuration is the master's now; nothing here is
		 * to be freed or flushed (a leak check would only see it as lost). */
		if (n == 1)
			_exit(0);
		fprintf(stderr, "sluice: the master exited before serving; see %s\n",
			strcmp(error_log, "syslog") == 0 ? "syslog" : error_log);
		_exit(1);
	}
	close(p[0]);
	if (setsid() < 0)
		_exit(1);
	pid = fork();
	if (pid < 0)
		_exit(1);
	if (pid > 0)
		_exit(0);
	notify_parent_set(p[1]);
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	int test_only = 0, background = 0, opt;
	while ((opt = getopt(argc, argv, "c:tdVh")) != -1) {
		switch (opt) {
		case 'c': path = optarg; break;
		case 't': test_only = 1; break;
		case 'd': background = 1; break;
		case 'V': print_version(); return 0;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 1;
		}
	}
	handover_save_argv(argv);
	if (path == NULL)
		path = access("conf/sluice.yaml", R_OK) == 0 ? "conf/sluice.yaml" : "/etc/sluice/sluice.yaml";
	char err[8192];
	struct cfg *cfg = cfg_load(path, err, sizeof(err));
	if (cfg == NULL) {
		fprintf(stderr, "%s%s", err, err[0] && err[strlen(err) - 1] == '\n' ? "" : "\n");
		fprintf(stderr, "sluice: configuration %s is invalid\n", path);
		return 1;
	}
	if (test_only) {
		struct tls_set *tls = master_tls_load(cfg, err, sizeof(err));
		if (tls == NULL) {
			fprintf(stderr, "%ssluice: configuration %s is invalid\n", err, path);
			cfg_free(cfg);
			return 1;
		}
		master_tls_free(cfg, tls);
		/* The file is fine; who starts it decides the rest. Said here so
		 * that a check before a reload or start run as root shows it. */
		if (privs_check(cfg, err, sizeof(err)) < 0)
			fprintf(stderr, "sluice: warning: %s (when started as root, as now)\n", err);
		fprintf(stderr, "sluice: configuration %s is ok\n", path);
		cfg_free(cfg);
		return 0;
	}
	if (privs_check(cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "sluice: %s\n", err);
		cfg_free(cfg);
		return 1;
	}
	/* Before -d forks: LISTEN_PID names this process. */
	if (handover_collect(err, sizeof(err)) < 0) {
		fprintf(stderr, "sluice: %s\n", err);
		cfg_free(cfg);
		return 1;
	}
	log_syslog_facility(cfg->syslog_facility);
	if (log_open(cfg->error_log, cfg->access_log) < 0) {
		cfg_free(cfg);
		return 1;
	}
	/* An upgrade's new master is already detached: the old one was, or
	 * it runs in the foreground where the old one did (-d is in the argv
	 * it inherits). */
	if (background && !handover_is_upgrade()) {
		log_errors_to_stderr(1);
		daemonize(cfg->error_log);
	}
	return master_run(cfg);
}
