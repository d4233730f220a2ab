#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "notify.h"

int notify_send(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	if (path == NULL || path[0] == '\0')
		return 1;
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t plen = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || plen >= sizeof(sa.sun_path)) {
		errno = EINVAL;
		return -1;
	}
	memcpy(sa.sun_path, path, plen);
	if (path[0] == '@')
		sa.sun_path[0] = '\0';
	socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
	/* A socket per message: notifications are rare, and nothing stays
	 * open for a worker to inherit. */
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen);
	int e = errno;
	close(fd);
	errno = e;
	return n < 0 ? -1 : 0;
}

int notify_sendf(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return notify_send(msg);
}

static int parent_fd = -1;

void notify_parent_set(int fd) { parent_fd = fd; }
int notify_parent_waiting(void) { return parent_fd >= 0; }

void notify_parent_ready(void)
{
	if (parent_fd < 0)
		return;
	char ok = 0;
	ssize_t n;
	do
		n = write(parent_fd, &ok, 1);
	while (n < 0 && errno == EINTR);
	close(parent_fd);
	parent_fd = -1;
}

void notify_parent_forget(void)
{
	if (parent_fd >= 0)
		close(parent_fd);
	parent_fd = -1;
}
