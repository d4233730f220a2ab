/* Privilege drop for workers (see privs.h). */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "privs.h"
#include "cfg-t.h"

int privs_lookup(const char *user, const char *group, uid_t *uid, gid_t *gid, char *why, size_t cap)
{
	/* getpwnam/getgrnam, not the _r forms: the master is single-threaded,
	 * and a group with many members outgrows any fixed buffer. */
	errno = 0;
	struct passwd *pw = getpwnam(user);
	if (pw == NULL) {
		snprintf(why, cap, "no such user \"%.64s\"%s%s", user, errno ? ": " : "", errno ? strerror(errno) : "");
		return -1;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	if (group == NULL || group[0] == '\0')
		return 0;
	errno = 0;
	struct group *gr = getgrnam(group);
	if (gr == NULL) {
		snprintf(why, cap, "no such group \"%.64s\"%s%s", group, errno ? ": " : "", errno ? strerror(errno) : "");
		return -1;
	}
	*gid = gr->gr_gid;
	return 0;
}

/* Whether this process may use capability CAP now (1 when it cannot tell:
 * the worker's own attempt is then the judge). */
static int have_cap(unsigned cap)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return 1;
	return (d[cap / 32].effective >> (cap % 32)) & 1;
}

int privs_switching(const struct cfg *cfg)
{
	return geteuid() == 0 && cfg->user[0] != '\0' && cfg->uid != 0;
}

int privs_check(const struct cfg *cfg, char *why, size_t cap)
{
	if (geteuid() != 0)
		return 0;
	if (cfg->user[0] == '\0') {
		snprintf(why, cap, "%s: refusing to run workers as root: set `user:` to an "
			 "unprivileged account (e.g. user: sluice), or `user: root` to insist", cfg->path);
		return -1;
	}
	/* Caught here, a missing capability fails the start with this message,
	 * or rejects a reload while the old workers serve on; caught by the
	 * workers, it would stop the new generation. */
	if (privs_switching(cfg) && (!have_cap(CAP_SETUID) || !have_cap(CAP_SETGID))) {
		snprintf(why, cap, "%s: cannot switch workers to user %s: the master lacks "
			 "CAP_SETUID or CAP_SETGID (a service manager's CapabilityBoundingSet?)",
			 cfg->path, cfg->user);
		return -1;
	}
	return 0;
}

int privs_drop(const struct cfg *cfg, char *why, size_t cap)
{
	if (!privs_switching(cfg))
		return 0;
	/* Supplementary groups first: root's would otherwise stay. */
	if (initgroups(cfg->user, cfg->gid) < 0) {
		snprintf(why, cap, "initgroups(%s): %s", cfg->user, strerror(errno));
		return -1;
	}
	if (setgid(cfg->gid) < 0) {
		snprintf(why, cap, "setgid(%d): %s", (int)cfg->gid, strerror(errno));
		return -1;
	}
	if (setuid(cfg->uid) < 0) {
		snprintf(why, cap, "setuid(%d) for user %s: %s", (int)cfg->uid, cfg->user, strerror(errno));
		return -1;
	}
	/* A worker that could get root back has dropped nothing. */
	if (setuid(0) == 0 || geteuid() == 0 || (cfg->gid != 0 && setgid(0) == 0)) {
		snprintf(why, cap, "still able to regain root after switching to %s", cfg->user);
		return -1;
	}
	/* Nothing it could exec would gain privileges either. */
	prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
#if defined(__SANITIZE_ADDRESS__)
	/* LeakSanitizer's exit check ptraces the process from a helper task,
	 * which a non-dumpable process (the default after setuid) refuses.
	 * Release builds stay non-dumpable: a worker's memory holds keys. */
	prctl(PR_SET_DUMPABLE, 1);
#endif
	return 0;
}
