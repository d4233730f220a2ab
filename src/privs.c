/* Privilege drop for workers (see privs.h). */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>
#include "privs.h"
#include "cfg.h"

int privs_lookup(const char *user, const char *group, uid_t *uid, gid_t *gid, char *why, size_t cap)
{
	char buf[4096];
	struct passwd pw, *pwp = NULL;
	int rc = getpwnam_r(user, &pw, buf, sizeof(buf), &pwp);
	if (pwp == NULL) {
		snprintf(why, cap, "no such user \"%.64s\"%s%s", user, rc ? ": " : "", rc ? strerror(rc) : "");
		return -1;
	}
	*uid = pw.pw_uid;
	*gid = pw.pw_gid;
	if (group == NULL || group[0] == '\0')
		return 0;
	struct group gr, *grp = NULL;
	rc = getgrnam_r(group, &gr, buf, sizeof(buf), &grp);
	if (grp == NULL) {
		snprintf(why, cap, "no such group \"%.64s\"%s%s", group, rc ? ": " : "", rc ? strerror(rc) : "");
		return -1;
	}
	*gid = gr.gr_gid;
	return 0;
}

int privs_switching(const struct cfg *cfg)
{
	return geteuid() == 0 && cfg->user[0] != '\0' && cfg->uid != 0;
}

int privs_check(const struct cfg *cfg, char *why, size_t cap)
{
	if (geteuid() == 0) {
		if (cfg->user[0] == '\0') {
			snprintf(why, cap, "%s: refusing to run workers as root: set `user:` to an "
				 "unprivileged account (e.g. user: sluice), or `user: root` to insist", cfg->path);
			return -1;
		}
		return 0;
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
	if (setuid(0) == 0 || geteuid() == 0) {
		snprintf(why, cap, "still able to regain root after switching to %s", cfg->user);
		return -1;
	}
#if defined(__SANITIZE_ADDRESS__)
	/* LeakSanitizer's exit check ptraces the process from a helper task,
	 * which a non-dumpable process (the default after setuid) refuses.
	 * Release builds stay non-dumpable: a worker's memory holds keys. */
	prctl(PR_SET_DUMPABLE, 1);
#endif
	return 0;
}
