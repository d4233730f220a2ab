/* A keyed hash of a request value's bytes, for what remembers values by
 * content: libinjection's answers (injmemo.c) and a JSON body's strings,
 * stored once (seccoll.c). The key is drawn once per process, so which
 * values share a hash cannot be worked out from the outside; the users
 * still compare the bytes on a hit and bound their probing, so a collision
 * costs time, never a wrong answer. */
#ifndef SLUICE_VHASH_H
#define SLUICE_VHASH_H

#include <stddef.h>
#include <stdint.h>

/* V's N bytes under domain DOMAIN (users sharing the key stay apart). */
uint64_t vhash(const char *v, size_t n, unsigned domain);

#endif
