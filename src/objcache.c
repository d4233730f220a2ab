/* Compiled objects kept for forked workers (objcache.h says what and why). */
#include <stdlib.h>
#include <string.h>
#include "objcache.h"

struct objcache_entry *objcache_get(struct objcache *c, const void *key, size_t keylen)
{
	for (unsigned k = 0; k < c->n; k++) {
		struct objcache_entry *e = c->v[k];
		if (e->keylen == keylen && memcmp(e->key, key, keylen) == 0) {
			e->refs++;
			e->mark = c->mark;
			return e;
		}
	}
	return NULL;
}

struct objcache_entry *objcache_put(struct objcache *c, const void *key, size_t keylen, void *obj)
{
	if (!c->checking)
		return NULL;
	struct objcache_entry **grown = realloc(c->v, (c->n + 1) * sizeof(*c->v));
	struct objcache_entry *e = malloc(sizeof(*e));
	char *k = malloc(keylen ? keylen : 1);
	if (grown)
		c->v = grown;
	if (!grown || !e || !k) {
		free(e);
		free(k);
		return NULL;  /* not cached: the caller's object owns OBJ */
	}
	memcpy(k, key, keylen);
	*e = (struct objcache_entry){ k, keylen, obj, 1, c->mark };
	c->v[c->n++] = e;
	return e;
}

void objcache_release(struct objcache_entry *e)
{
	e->refs--;
}

void objcache_begin(struct objcache *c)
{
	c->mark++;
	c->checking = 1;
}

void objcache_end(struct objcache *c)
{
	unsigned w = 0;
	c->checking = 0;
	for (unsigned k = 0; k < c->n; k++) {
		struct objcache_entry *e = c->v[k];
		if (e->refs == 0 && e->mark != c->mark) {
			c->free_obj(e->obj);
			free(e->key);
			free(e);
		} else {
			c->v[w++] = e;
		}
	}
	c->n = w;
}
