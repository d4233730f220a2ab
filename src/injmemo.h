/* libinjection's checks (libinjection.h), remembered by content for one
 * CRS evaluation: a request repeats values (a JSON body's enums, flags and
 * numbers; a header in every cookie name), and @detectSQLi/@detectXSS run
 * on every argument name and value. The answer is a pure function of the
 * bytes, so a value seen before costs a hash and a compare, not a scan. */
#ifndef SLUICE_INJMEMO_H
#define SLUICE_INJMEMO_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

struct injmemo_entry;

struct injmemo {
	struct injmemo_entry *e;
	size_t cap, n;
	uint32_t epoch;            /* entries of other epochs are empty */
	struct buf data;           /* the remembered values' bytes */
};

/* Forget everything (O(1)); the memory stays for the next evaluation. */
void injmemo_clear(struct injmemo *m);
void injmemo_free(struct injmemo *m);
/* 1 when V looks like SQL injection; FP (8 bytes) then holds the
 * fingerprint, NUL-ended. */
int injmemo_sqli(struct injmemo *m, const char *v, size_t vl, char fp[8]);
/* 1 when V looks like cross-site scripting. */
int injmemo_xss(struct injmemo *m, const char *v, size_t vl);

#endif
