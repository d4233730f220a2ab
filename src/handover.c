#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "handover.h"

/* Above any descriptor a process of ours can have (LimitNOFILE=1048576). */
#define FD_LIMIT (1 << 20)

static const char *parse_fd(const char *p, int *out)
{
	long v = 0;
	const char *start = p;
	while (*p >= '0' && *p <= '9' && p - start < 8)
		v = v * 10 + (*p++ - '0');
	if (p == start || (*p >= '0' && *p <= '9') || v < 3 || v >= FD_LIMIT)
		return NULL;
	*out = (int)v;
	return p;
}

int handover_env_parse(const char *s, struct handover_env *he)
{
	he->nfds = 0;
	const char *p = parse_fd(s, &he->report_fd);
	if (p == NULL || *p++ != ';')
		return -1;
	while (*p) {
		if (he->nfds == HANDOVER_MAX_FDS)
			return -1;
		struct handover_fd *h = &he->fds[he->nfds];
		p = parse_fd(p, &h->fd);
		if (p == NULL)
			return -1;
		h->systemd = *p == 's';
		p += h->systemd;
		if (h->fd == he->report_fd)
			return -1;
		for (unsigned i = 0; i < he->nfds; i++)
			if (he->fds[i].fd == h->fd)
				return -1;
		he->nfds++;
		if (*p == ',' && p[1] != '\0')
			p++;
		else if (*p != '\0')
			return -1;
	}
	return 0;
}

int handover_env_format(const struct handover_env *he, char *out, size_t len)
{
	size_t off = 0;
	int n = snprintf(out, len, "%d;", he->report_fd);
	if (n < 0 || (size_t)n >= len)
		return -1;
	off = (size_t)n;
	for (unsigned i = 0; i < he->nfds; i++) {
		n = snprintf(out + off, len - off, "%s%d%s", i ? "," : "", he->fds[i].fd,
			     he->fds[i].systemd ? "s" : "");
		if (n < 0 || (size_t)n >= len - off)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

int handover_report_format(pid_t pid, const int *fds, unsigned n, char *out, size_t len)
{
	int w = snprintf(out, len, "%d", (int)pid);
	if (w < 0 || (size_t)w >= len)
		return -1;
	size_t off = (size_t)w;
	for (unsigned i = 0; i < n; i++) {
		w = snprintf(out + off, len - off, " %d", fds[i]);
		if (w < 0 || (size_t)w >= len - off)
			return -1;
		off += (size_t)w;
	}
	if (off + 1 >= len)
		return -1;
	out[off] = '\n';
	out[off + 1] = '\0';
	return 0;
}

int handover_report_parse(const char *s, size_t len, pid_t *pid, int *fds, unsigned max, unsigned *n)
{
	const char *p = s, *end = s + len;
	long v = 0;
	*n = 0;
	if (p == end || *p < '1' || *p > '9')
		return -1;
	while (p < end && *p >= '0' && *p <= '9' && v < 100000000)
		v = v * 10 + (*p++ - '0');
	if (p == end || v >= 100000000)
		return -1;
	*pid = (pid_t)v;
	while (p < end && *p == ' ') {
		p++;
		const char *start = p;
		v = 0;
		while (p < end && *p >= '0' && *p <= '9' && v < FD_LIMIT)
			v = v * 10 + (*p++ - '0');
		if (p == start || v < 3 || v >= FD_LIMIT || *n == max)
			return -1;
		fds[(*n)++] = (int)v;
	}
	return p + 1 == end && *p == '\n' ? 0 : -1;
}

void handover_addr_text(const struct sockaddr_storage *ss, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN] = "?";
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *a = (const void *)ss;
		inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
		snprintf(out, len, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *a = (const void *)ss;
		inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
		snprintf(out, len, "[%s]:%u", ip, (unsigned)ntohs(a->sin6_port));
	} else {
		snprintf(out, len, "(family %d)", (int)ss->ss_family);
	}
}

int handover_addr_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return 0;
	if (a->ss_family == AF_INET) {
		const struct sockaddr_in *x = (const void *)a, *y = (const void *)b;
		return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
	}
	if (a->ss_family == AF_INET6) {
		const struct sockaddr_in6 *x = (const void *)a, *y = (const void *)b;
		return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id
		       && memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0;
	}
	return 0;
}

static struct handover_env inherited;
static int have_inherited, from_upgrade;

const struct handover_env *handover_inherited(void) { return have_inherited ? &inherited : NULL; }
int handover_is_upgrade(void) { return have_inherited && from_upgrade; }

static int is_listening_tcp(int fd)
{
	struct stat st;
	int type = 0, acc = 0;
	socklen_t len = sizeof(type);
	struct sockaddr_storage ss;
	socklen_t slen = sizeof(ss);
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0 || type != SOCK_STREAM)
		return 0;
	len = sizeof(acc);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &len) < 0 || !acc)
		return 0;
	if (getsockname(fd, (struct sockaddr *)&ss, &slen) < 0)
		return 0;
	return ss.ss_family == AF_INET || ss.ss_family == AF_INET6;
}

int handover_collect(char *err, size_t errlen)
{
	const char *up = getenv(HANDOVER_ENV);
	const char *what;
	if (up != NULL) {
		what = HANDOVER_ENV;
		if (handover_env_parse(up, &inherited) < 0) {
			snprintf(err, errlen, "%s=%.64s: malformed (expected \"<fd>;<fd>,<fd>...\")", HANDOVER_ENV, up);
			return -1;
		}
		if (fcntl(inherited.report_fd, F_SETFD, FD_CLOEXEC) < 0) {
			snprintf(err, errlen, "%s: report descriptor %d: %s", HANDOVER_ENV, inherited.report_fd,
				 strerror(errno));
			return -1;
		}
		from_upgrade = 1;
	} else {
		/* sd_listen_fds(): the variables are for the process systemd
		 * started, not for one that inherited its environment. */
		const char *n = getenv("LISTEN_FDS"), *pid = getenv("LISTEN_PID");
		if (n == NULL || pid == NULL)
			return 0;
		char *end;
		long lp = strtol(pid, &end, 10);
		if (*end != '\0' || lp != (long)getpid())
			return 0;
		what = "LISTEN_FDS";
		long nf = strtol(n, &end, 10);
		if (*end != '\0' || nf < 0 || nf > HANDOVER_MAX_FDS) {
			snprintf(err, errlen, "LISTEN_FDS=%.32s: not a number of descriptors (0..%d)", n,
				 HANDOVER_MAX_FDS);
			return -1;
		}
		inherited.report_fd = -1;
		inherited.nfds = (unsigned)nf;
		for (unsigned i = 0; i < inherited.nfds; i++)
			inherited.fds[i] = (struct handover_fd){ 3 + (int)i, 1 };
		from_upgrade = 0;
	}
	unsetenv(HANDOVER_ENV);
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDNAMES");
	for (unsigned i = 0; i < inherited.nfds; i++) {
		int fd = inherited.fds[i].fd;
		if (!is_listening_tcp(fd)) {
			snprintf(err, errlen, "%s: descriptor %d is not a listening TCP socket", what, fd);
			return -1;
		}
		/* Workers are forked, not exec'd: they still get it. */
		if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
			snprintf(err, errlen, "%s: descriptor %d: %s", what, fd, strerror(errno));
			return -1;
		}
	}
	have_inherited = 1;
	return 0;
}

static char **saved_argv;
static char exe_path[PATH_MAX];

void handover_save_argv(char **argv)
{
	saved_argv = argv;
	ssize_t n = readlink("/proc/self/exe", exe_path, sizeof(exe_path) - 1);
	if (n <= 0) {
		exe_path[0] = '\0';
		return;
	}
	exe_path[n] = '\0';
	/* Replaced before we got here: the path is still the one to run. */
	static const char deleted[] = " (deleted)";
	size_t dl = sizeof(deleted) - 1;
	if ((size_t)n > dl && strcmp(exe_path + n - dl, deleted) == 0)
		exe_path[n - dl] = '\0';
}

const char *handover_exe(void) { return exe_path[0] ? exe_path : NULL; }

int handover_exec(const char *env)
{
	if (!exe_path[0] || saved_argv == NULL) {
		errno = ENOENT;
		return -1;
	}
	if (setenv(HANDOVER_ENV, env, 1) < 0)
		return -1;
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDNAMES");
	execv(exe_path, saved_argv);
	return -1;
}
