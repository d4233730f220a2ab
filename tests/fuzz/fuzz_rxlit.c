/* libFuzzer target: the required literals of a regex (src/rxlit.c).
 *
 * Input: a pattern, a NUL byte, a subject (no NUL: the subject is the
 * pattern itself).
 * Oracles beyond "no crash, no leak":
 *   - soundness: when rxlit names a set and PCRE2 (compiled as SecLang's
 *     @rx is: DOTALL, DOLLAR_ENDONLY) matches the subject, the subject
 *     holds one of the literals, compared caseless;
 *   - every literal is non-empty and has no uppercase ASCII letter;
 *   - the same pattern gives the same set twice;
 *   - when rxlit_branches splits the pattern, the branches stand in for it
 *     on the subject: a match if and only if one matches, and the whole
 *     pattern's leftmost match is the earliest-starting branch's (the
 *     first such branch on a tie), the same span. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "rxlit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_rxlit: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static int holds(const char *s, size_t n, const char *lit, size_t ll)
{
	for (size_t i = 0; i + ll <= n; i++)
		if (strncasecmp(s + i, lit, ll) == 0)
			return 1;
	return 0;
}

static pcre2_code *compile(const char *p, size_t n)
{
	int code;
	PCRE2_SIZE off;
	return pcre2_compile((PCRE2_SPTR)p, n, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &code, &off, NULL);
}

/* PCRE2's answer on SUBJ: 1 with the span, 0, or -1 (an error, a limit). */
static int match(pcre2_code *re, const char *subj, size_t sl, pcre2_match_data *md, pcre2_match_context *mc,
		 size_t *from, size_t *to)
{
	int rc = pcre2_match(re, (PCRE2_SPTR)subj, sl, 0, 0, md, mc);
	if (rc == PCRE2_ERROR_NOMATCH)
		return 0;
	if (rc < 0)
		return -1;
	*from = pcre2_get_ovector_pointer(md)[0];
	*to = pcre2_get_ovector_pointer(md)[1];
	return 1;
}

static void check_branches(const char *pat, size_t pl, const char *subj, size_t sl)
{
	struct rxlit b;
	if (!rxlit_branches(pat, pl, &b))
		return;
	if (b.n < 2)
		FAIL("a split into %zu branch", b.n);
	pcre2_code *whole = compile(pat, pl);
	pcre2_match_data *md = pcre2_match_data_create(1, NULL);
	pcre2_match_context *mc = pcre2_match_context_create(NULL);
	pcre2_set_match_limit(mc, 100000);
	pcre2_set_depth_limit(mc, 1000);
	size_t wf = 0, wt = 0;
	int w = whole ? match(whole, subj, sl, md, mc, &wf, &wt) : -1;
	int any = 0, err = 0;
	size_t bf = 0, bt = 0;
	for (size_t i = 0; i < b.n && w >= 0; i++) {
		pcre2_code *re = compile(b.s[i], b.len[i]);
		if (!re)
			FAIL("/%.*s/ compiles and its branch /%.*s/ does not", (int)pl, pat, (int)b.len[i], b.s[i]);
		size_t f, t;
		int m = match(re, subj, sl, md, mc, &f, &t);
		pcre2_code_free(re);
		err |= m < 0;
		if (m == 1 && (!any || f < bf)) {
			bf = f;
			bt = t;
			any = 1;
		}
	}
	if (w >= 0 && !err && (any != w || (w && (bf != wf || bt != wt))))
		FAIL("/%.*s/: whole %d [%zu,%zu), branches %d [%zu,%zu)", (int)pl, pat, w, wf, wt, any, bf, bt);
	pcre2_match_context_free(mc);
	pcre2_match_data_free(md);
	pcre2_code_free(whole);
	rxlit_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *pat = (const char *)data;
	const uint8_t *nul = memchr(data, 0, size);
	size_t pl = nul ? (size_t)(nul - data) : size;
	const char *subj = nul ? (const char *)nul + 1 : pat;
	size_t sl = nul ? size - pl - 1 : size;
	struct rxlit a, b;
	int got = rxlit_required(pat, pl, &a);
	if (rxlit_required(pat, pl, &b) != got || a.n != b.n)
		FAIL("two readings of the same pattern differ");
	for (size_t i = 0; i < a.n; i++) {
		if (a.len[i] != b.len[i] || memcmp(a.s[i], b.s[i], a.len[i]) != 0)
			FAIL("literal %zu differs between two readings", i);
		if (a.len[i] == 0)
			FAIL("an empty literal");
		for (size_t k = 0; k < a.len[i]; k++)
			if (a.s[i][k] >= 'A' && a.s[i][k] <= 'Z')
				FAIL("an uppercase literal");
	}
	rxlit_free(&b);
	check_branches(pat, pl, subj, sl);
	if (!got)
		return 0;
	int code;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, pl, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &code, &off, NULL);
	if (re) {
		pcre2_match_data *md = pcre2_match_data_create(1, NULL);
		pcre2_match_context *mc = pcre2_match_context_create(NULL);
		pcre2_set_match_limit(mc, 100000);
		pcre2_set_depth_limit(mc, 1000);
		if (pcre2_match(re, (PCRE2_SPTR)subj, sl, 0, 0, md, mc) >= 0) {
			int hit = 0;
			for (size_t i = 0; i < a.n && !hit; i++)
				hit = holds(subj, sl, a.s[i], a.len[i]);
			if (!hit)
				FAIL("/%.*s/ matches a subject (%zu bytes) that holds none of its %zu literals", (int)pl, pat, sl, a.n);
		}
		pcre2_match_context_free(mc);
		pcre2_match_data_free(md);
		pcre2_code_free(re);
	}
	rxlit_free(&a);
	return 0;
}
