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

/* The branches of PATTERN's outermost alternation, each a pattern of its
 * own: the options and non-capturing groups around the alternation, then
 * the branch. 1 and OUT filled (at least two) when they can stand in for
 * the pattern: it matches a subject if and only if one of them does, and
 * its leftmost match is the one of the branch whose leftmost match starts
 * first (the earliest such branch on a tie), the same bytes. That needs no
 * capturing group (numbers would move), no back reference, subroutine
 * call or \K, and no option setting in the alternation itself (it would
 * carry into the branches after it), and no lookaround or {0} quantifier
 * (PCRE2 10.42, Debian 12's, reads some of those wrongly in a pattern of
 * their own: "(?=a).?a" misses "a"). 0 otherwise, or when not understood.
 * Used to run only the branches whose literals a value holds; a branch
 * not tried cannot match, but the whole pattern could have given up in it
 * on PCRE2's match limit, as it could before a literal prefilter skips a
 * value (crs.md, "Regex limits"). */
#define RXLIT_BRANCHES_MAX 64
int rxlit_branches(const char *pattern, size_t n, struct rxlit *out);

#endif
