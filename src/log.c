#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <syslog.h>
/* <syslog.h>'s LOG_ERR and LOG_INFO are also enum log_level's names: keep
 * the syslog priorities, indexed by enum log_level, then drop the macros. */
static const int syslog_prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO };
#undef LOG_ERR
#undef LOG_INFO
#include "log.h"
#include "util.h"

#define FD_SYSLOG (-1)  /* a log "fd" that means syslog(3) */

static int error_fd = 2;
static int access_fd = 2;
static int access_on = 1;
static int errors_to_stderr;
static int syslog_facility = LOG_DAEMON;
static int syslog_open;
static char role[32] = "master";
static struct buf access_buf;

static const struct { int status; const char *name, *text; } reasons[] = {
#define REASON_ROW(id, status, name, text) { status, name, text },
	REASON_TABLE(REASON_ROW)
#undef REASON_ROW
};

const char *reason_name(enum reason r) { return reasons[r].name; }
int reason_status(enum reason r) { return reasons[r].status; }
const char *reason_text(enum reason r) { return reasons[r].text; }

void log_syslog_facility(const char *name)
{
	static const struct { const char *name; int fac; } facs[] = {
		{ "daemon", LOG_DAEMON }, { "user", LOG_USER },
		{ "local0", LOG_LOCAL0 }, { "local1", LOG_LOCAL1 }, { "local2", LOG_LOCAL2 },
		{ "local3", LOG_LOCAL3 }, { "local4", LOG_LOCAL4 }, { "local5", LOG_LOCAL5 },
		{ "local6", LOG_LOCAL6 }, { "local7", LOG_LOCAL7 },
	};
	for (size_t i = 0; i < ARRAY_SIZE(facs); i++)
		if (strcmp(name, facs[i].name) == 0)
			syslog_facility = facs[i].fac;
}

static int open_one(const char *path, int *fd)
{
	if (strcmp(path, "syslog") == 0) {
		if (*fd > 2)
			close(*fd);
		*fd = FD_SYSLOG;
		/* No LOG_NDELAY: each process connects on its first line; with
		 * LOG_PID glibc stamps the pid of the caller, a worker's own. */
		if (syslog_open)
			closelog();
		openlog("sluice", LOG_PID, syslog_facility);
		syslog_open = 1;
		return 0;
	}
	if (strcmp(path, "stderr") == 0 || path[0] == '\0') {
		if (*fd > 2)
			close(*fd);
		*fd = 2;
		return 0;
	}
	int nfd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (nfd < 0) {
		fprintf(stderr, "sluice: cannot open log %s: %s\n", path, strerror(errno));
		return -1;
	}
	if (*fd > 2)
		close(*fd);
	*fd = nfd;
	return 0;
}

int log_open(const char *error_path, const char *access_path)
{
	if (open_one(error_path, &error_fd) < 0)
		return -1;
	access_on = strcmp(access_path, "off") != 0;
	if (access_on && open_one(access_path, &access_fd) < 0)
		return -1;
	return 0;
}

void log_files(int *efd, int *afd)
{
	*efd = error_fd > 2 ? error_fd : -1;
	*afd = access_on && access_fd > 2 ? access_fd : -1;
}

void log_adopt(int efd, int afd)
{
	if (efd >= 0) {
		if (error_fd > 2)
			close(error_fd);
		error_fd = efd;
	}
	if (afd >= 0) {
		if (access_fd > 2)
			close(access_fd);
		access_fd = afd;
	}
}

void log_close(void)
{
	log_flush();
	if (error_fd > 2)
		close(error_fd);
	if (access_fd > 2 && access_fd != error_fd)
		close(access_fd);
	if (syslog_open)
		closelog();
	syslog_open = 0;
	error_fd = access_fd = 2;
	buf_free(&access_buf);
}

void log_errors_to_stderr(int on)
{
	errors_to_stderr = on;
}

void log_set_role(const char *r)
{
	snprintf(role, sizeof(role), "%s", r);
}

void log_timestamp(struct buf *b)
{
	static time_t cached_sec = -1;
	static char cached[32];
	struct timeval tv;
	gettimeofday(&tv, NULL);
	if (tv.tv_sec != cached_sec) {
		struct tm tm;
		gmtime_r(&tv.tv_sec, &tm);
		strftime(cached, sizeof(cached), "%Y-%m-%dT%H:%M:%S", &tm);
		cached_sec = tv.tv_sec;
	}
	buf_appendf(b, "%s.%06ldZ", cached, (long)tv.tv_usec);
}

/* One syslog message per line of P (without its newline). */
static void syslog_lines(int prio, const char *p, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(p, '\n', n);
		size_t len = nl ? (size_t)(nl - p) : n;
		if (len > 0)
			syslog(prio, "%.*s", (int)len, p);
		len += nl != NULL;
		p += len;
		n -= len;
	}
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return; /* a log we cannot write must not stop the proxy */
		}
		p += w;
		n -= (size_t)w;
	}
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	static const char *names[] = { "error", "warn", "info" };
	char line[2048];
	struct buf b = { 0 };
	log_timestamp(&b);
	int off = snprintf(line, sizeof(line), "%.*s [%s] %s: ", (int)b.len, b.data, names[lvl], role);
	buf_free(&b);
	if (error_fd == FD_SYSLOG)  /* syslog stamps the time itself */
		off = snprintf(line, sizeof(line), "[%s] %s: ", names[lvl], role);
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line + off, sizeof(line) - (size_t)off - 1, fmt, ap);
	va_end(ap);
	size_t len = (size_t)off + ((size_t)n < sizeof(line) - (size_t)off - 1 ? (size_t)n : sizeof(line) - (size_t)off - 2);
	line[len++] = '\n';
	if (error_fd == FD_SYSLOG)
		syslog_lines(syslog_facility | syslog_prio[lvl], line, len);
	else
		write_all(error_fd, line, len);
	if (errors_to_stderr && lvl == LOG_ERR && error_fd != 2)
		write_all(2, line, len);
}

int log_access_enabled(void) { return access_on; }

struct buf *log_access_begin(void)
{
	log_timestamp(&access_buf);
	buf_append(&access_buf, " ", 1);
	return &access_buf;
}

struct buf *log_access_begin_raw(void)
{
	return &access_buf;
}

void log_access_commit(void)
{
	buf_append(&access_buf, "\n", 1);
	if (access_buf.len >= 32768)
		log_flush();
}

void log_flush(void)
{
	if (access_buf.len == 0)
		return;
	if (access_fd == FD_SYSLOG)
		syslog_lines(syslog_facility | syslog_prio[LOG_INFO], access_buf.data, access_buf.len);
	else
		write_all(access_fd, access_buf.data, access_buf.len);
	access_buf.len = 0;
}
