/* Required literals of a regular expression (issue 22): a set of strings
 * one of which every subject the pattern matches contains. The CRS engine
 * scans a value once for the literals of all the regexes it will try
 * (Hyperscan) and runs PCRE2 only for those whose literals occur; most
 * values of ordinary traffic then run no regex at all.
 *
 * Sound by construction: whatever the analysis does not understand makes
 * the node "anything", never a guess. All literals are lowercase and meant
 * to be compared caseless (a superset of any case-sensitive match), so
 * inline case options need no tracking. The pattern is read as PCRE2
 * compiles it for SecLang (DOTALL, DOLLAR_ENDONLY, not extended). */
#ifndef SLUICE_RXLIT_H
#define SLUICE_RXLIT_H

#include <stddef.h>

struct rxlit {
	char **s;              /* lowercase, not NUL-terminated (may hold NULs) */
	size_t *len;           /* each >= 1 */
	size_t n;
};

/* 1 and OUT filled when a set was found; 0 (OUT empty) when the pattern
 * can match without any literal we can name, or is not understood. */
int rxlit_required(const char *pattern, size_t n, struct rxlit *out);
void rxlit_free(struct rxlit *l);

#endif
