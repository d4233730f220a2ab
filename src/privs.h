/* Who the workers run as. The master keeps root (when started as root): it
 * binds the listeners, reads private keys that only root may read, and does
 * both again on every reload. Each worker gives up root for the configured
 * `user:` before it accepts its first connection. */
#ifndef SLUICE_PRIVS_H
#define SLUICE_PRIVS_H

#include <stddef.h>
#include <sys/types.h>

struct cfg;

/* USER's uid and, with GROUP empty, USER's primary group. Returns 0, or -1
 * with WHY. */
int privs_lookup(const char *user, const char *group, uid_t *uid, gid_t *gid, char *why, size_t cap);

/* Whether this master may start workers under CFG: a root master refuses to
 * keep root in its workers unless `user: root` says so. Returns 0, or -1
 * with WHY. A master that is not root runs its workers as itself. */
int privs_check(const struct cfg *cfg, char *why, size_t cap);

/* Whether workers of CFG change user: files the master opens for them
 * (logs reopened on SIGUSR1) must then be theirs. */
int privs_switching(const struct cfg *cfg);

/* In a new worker, once it is set up and before it serves: become
 * cfg->user. Returns 0, or -1 with WHY (the worker must then exit). */
int privs_drop(const struct cfg *cfg, char *why, size_t cap);

#endif
