/* A keyed hash of a request value's bytes, for the CRS engine's memos
 * that remember answers by content (injmemo.c, crscache.c). The key is
 * drawn once per process, so which values share a hash cannot be worked
 * out from the outside; the memos still compare the bytes on a hit and
 * bound their probing, so a collision costs time, never a wrong answer. */
#ifndef SLUICE_VHASH_H
#define SLUICE_VHASH_H

#include <stddef.h>
#include <stdint.h>

/* V's N bytes under domain DOMAIN (memos sharing a key stay apart). */
uint64_t vhash(const char *v, size_t n, unsigned domain);
/* The same over V's length and its first and last VHASH_ENDS bytes only:
 * constant time for a memo whose misses outnumber its hits on long values
 * (values that share their ends then share a hash, and the memo's bounded
 * probing turns a flood of them into misses, not into work). */
#define VHASH_ENDS 32
uint64_t vhash_ends(const char *v, size_t n, unsigned domain);

#endif
