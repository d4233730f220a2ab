/* libFuzzer target: the required literals of a regex (src/rxlit.c).
 *
 * Input: a pattern, a NUL byte, a subject (no NUL: the subject is the
 * pattern itself).
 * Oracles beyond "no crash, no leak":
 *   - soundness: when rxlit names a set and PCRE2 (compiled as SecLang's
 *     @rx is: DOTALL, DOLLAR_ENDONLY) matches the subject, the subject
 *     holds one of the literals, compared caseless;
 *   - every literal is non-empty and has no uppercase ASCII letter;
 *   - the same pattern gives the same set twice. */
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
