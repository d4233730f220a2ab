/* Log descriptors from master to worker (see logpass.h). */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "logpass.h"
#include "log.h"

/* The one byte of each message: which descriptors ride along, in order. */
enum { HAS_ERROR = 1, HAS_ACCESS = 2 };

int logpass_pair(int fds[2])
{
	return socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds);
}

int logpass_send(int sock)
{
	int efd, afd;
	log_files(&efd, &afd);
	unsigned char what = (unsigned char)((efd >= 0 ? HAS_ERROR : 0) | (afd >= 0 ? HAS_ACCESS : 0));
	int fds[2];
	unsigned n = 0;
	if (efd >= 0)
		fds[n++] = efd;
	if (afd >= 0)
		fds[n++] = afd;
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(fds))];
	} c;
	memset(&c, 0, sizeof(c));
	struct iovec iov = { &what, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (n) {
		msg.msg_control = c.space;
		msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(n * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	}
	/* MSG_DONTWAIT: the master never blocks on a worker that stopped
	 * reading (a stuck one keeps its old files). */
	return sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 ? 0 : -1;
}

int logpass_recv(int sock)
{
	unsigned char what;
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(2 * sizeof(int))];
	} c;
	struct iovec iov = { &what, 1 };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.space,
			      .msg_controllen = sizeof(c.space) };
	ssize_t r = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (r == 0)
		return -1;
	int fds[2] = { -1, -1 };
	unsigned n = 0;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t got = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < got; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (n < 2)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	unsigned want = (unsigned)!!(what & HAS_ERROR) + (unsigned)!!(what & HAS_ACCESS);
	if (n != want || (msg.msg_flags & MSG_CTRUNC)) {
		for (unsigned i = 0; i < n; i++)
			close(fds[i]);
		log_warn("log files from the master: expected %u descriptor(s), got %u; keeping the old ones",
			 want, n);
		return 0;
	}
	unsigned k = 0;
	int efd = what & HAS_ERROR ? fds[k++] : -1;
	int afd = what & HAS_ACCESS ? fds[k++] : -1;
	log_flush();
	log_adopt(efd, afd);
	return 1;
}
