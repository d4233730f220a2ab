/* Objects the inspection hook's primitives compile (sluice.multi's
 * Hyperscan databases, sluice.crs's programs), kept by their exact source.
 * The master compiles every script's objects when it checks the config;
 * the workers it forks then find them here instead of compiling again (a
 * ruleset compiles in seconds, which would otherwise delay every worker
 * start and reload). Only a check adds entries: what a worker compiles
 * while it serves belongs to its object and is freed with it — cached, it
 * would stay until the next check, which a worker never runs. */
#ifndef SLUICE_OBJCACHE_H
#define SLUICE_OBJCACHE_H

#include <stddef.h>

struct objcache_entry {
	char *key;
	size_t keylen;
	void *obj;
	unsigned refs;             /* live script objects using it */
	unsigned mark;             /* the last check that used it */
};

struct objcache {
	struct objcache_entry **v; /* entries never move: objects point at them */
	unsigned n, mark;
	int checking;
	void (*free_obj)(void *obj);
};

/* The entry for KEY, referenced, or NULL. */
struct objcache_entry *objcache_get(struct objcache *c, const void *key, size_t keylen);
/* OBJ, just compiled from KEY: cached and referenced while a check runs
 * (returns its entry); otherwise NULL, and the caller keeps owning OBJ. */
struct objcache_entry *objcache_put(struct objcache *c, const void *key, size_t keylen, void *obj);
/* A script object using E is gone. */
void objcache_release(struct objcache_entry *e);
/* A config check starts / ends: at the end, entries no object holds and
 * that check did not use are freed. */
void objcache_begin(struct objcache *c);
void objcache_end(struct objcache *c);

#endif
