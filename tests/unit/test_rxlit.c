/* Unit tests for the required literals of a regex (rxlit). Besides the
 * sets themselves, every pattern is checked for soundness: each subject
 * PCRE2 matches (compiled as SecLang compiles @rx) contains one of the
 * literals, caseless. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "rxlit.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

/* The set as "a|b|c" in found order, or "-" when none. */
static const char *lits(const char *pattern)
{
	static char out[4096];
	struct rxlit l;
	if (!rxlit_required(pattern, strlen(pattern), &l))
		return "-";
	out[0] = 0;
	for (size_t i = 0; i < l.n; i++) {
		if (i)
			strcat(out, "|");
		strncat(out, l.s[i], l.len[i]);
	}
	rxlit_free(&l);
	return out;
}

static int contains_caseless(const char *s, size_t n, const char *lit, size_t ll)
{
	for (size_t i = 0; i + ll <= n; i++)
		if (strncasecmp(s + i, lit, ll) == 0)
			return 1;
	return 0;
}

/* Every subject the pattern matches holds one of its literals. */
static int sound(const char *pattern, const char *const *subjects)
{
	struct rxlit l;
	if (!rxlit_required(pattern, strlen(pattern), &l))
		return 1;
	int code;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY,
				       &code, &off, NULL);
	pcre2_match_data *md = pcre2_match_data_create(10, NULL);
	int ok = re != NULL;
	for (size_t k = 0; ok && subjects[k]; k++) {
		const char *s = subjects[k];
		if (pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL) < 0)
			continue;
		int hit = 0;
		for (size_t i = 0; i < l.n && !hit; i++)
			hit = contains_caseless(s, strlen(s), l.s[i], l.len[i]);
		if (!hit) {
			fprintf(stderr, "  /%s/ matches \"%s\", which holds none of %s\n", pattern, s, lits(pattern));
			ok = 0;
		}
	}
	pcre2_match_data_free(md);
	pcre2_code_free(re);
	rxlit_free(&l);
	return ok;
}

static void test_sets(void)
{
	CHECK(strcmp(lits("abc"), "abc") == 0);
	CHECK(strcmp(lits("(?i)SeLeCt"), "select") == 0);
	CHECK(strcmp(lits("(?:union|select)\\s+from"), "union|select") == 0);  /* the longer strings */
	CHECK(strcmp(lits("(?:or|and)\\s+from"), "from") == 0);
	CHECK(strcmp(lits("\\b(?:union|select)\\b"), "union|select") == 0);
	CHECK(strcmp(lits("a[bc]d"), "abd|acd") == 0);
	CHECK(strcmp(lits("<script[^>]*>"), "<script") == 0);
	CHECK(strcmp(lits("java\\.lang\\.(?:runtime|processbuilder)"), "java.lang.runtime|java.lang.processbuilder") == 0);
	CHECK(strcmp(lits("ab?c"), "abc|ac") == 0);
	CHECK(strcmp(lits("x(?=abc)y"), "xy") == 0);                        /* lookahead: zero width */
	CHECK(strcmp(lits("\\x41\\x{42}c"), "abc") == 0);
	CHECK(strcmp(lits("(?:ab)+cd"), "ab") == 0);
	CHECK(strcmp(lits("[\"'`]"), "\"|'|`") == 0);
	CHECK(strcmp(lits("(a|b){2}"), "aa|ab|ba|bb") == 0);
	/* nothing every match must hold */
	CHECK(strcmp(lits("a|"), "-") == 0);
	CHECK(strcmp(lits("a*"), "-") == 0);
	CHECK(strcmp(lits("^\\d+$"), "-") == 0);
	CHECK(strcmp(lits("[a-z]+"), "-") == 0);
	CHECK(strcmp(lits("[^a]"), "-") == 0);
	CHECK(strcmp(lits("(a)\\1"), "a") == 0);
	CHECK(strcmp(lits("abc|.x"), "abc|x") == 0);
	CHECK(strcmp(lits("abc|.*"), "-") == 0);
	/* not understood: no set rather than a guess */
	CHECK(strcmp(lits("(?x) a b"), "-") == 0);
	CHECK(strcmp(lits("(*UTF)abc"), "-") == 0);
	CHECK(strcmp(lits("\\Qa.b\\E"), "-") == 0);
	CHECK(strcmp(lits("(?(1)a|b)"), "-") == 0);
	CHECK(strcmp(lits("(?R)"), "-") == 0);
	CHECK(strcmp(lits("abc("), "-") == 0);
	CHECK(strcmp(lits("x{,3}"), "-") == 0);
	CHECK(strcmp(lits("a{2,}b"), "a") == 0);
	CHECK(strcmp(lits("a{x}"), "a{x}") == 0);                           /* not a quantifier */
}

static void test_soundness(void)
{
	static const char *const subjects[] = {
		"", "a", "abc", "ABC", "xabcx", "select * from t", "SELECT 1 UNION SELECT 2", "<ScRiPt>alert(1)</script>",
		"java.lang.Runtime", "ac", "abd", "acd", "xy", "xabcy", "AB", "abab cd", "aa", "ba", "a{x}", "aab", "aaab",
		"union", "' or 1=1--", "\"", "`id`", "\n", "a\nb", "$(id)", "${jndi:ldap://x}", "..\\..\\", "../../etc/passwd",
		"AbD", "x", "cd", "abcd", NULL,
	};
	static const char *const patterns[] = {
		"abc", "(?i)SeLeCt", "(?:union|select)\\s+from", "\\b(?:union|select)\\b", "a[bc]d", "<script[^>]*>",
		"java\\.lang\\.(?:runtime|processbuilder)", "ab?c", "x(?=abc)y", "(?:ab)+cd", "[\"'`]", "(a|b){2}",
		"(a)\\1", "a{2,}b", "a{x}", "(?i:a)B", "a(?-i)b", "(?<n>ab)\\k<n>", "(?|a|b)c", "(?>ab|a)b", "[A-C]d",
		"\\$\\(", "\\$\\{jndi", "(?:\\.\\.[/\\\\])+", "\\.\\./", "(?s)a.b", "a$", "^a", "[[:alpha:]]b", "a\\nb",
		"(?:or|and)\\s*\\d", "\\W", "(?:a|bc)(?:d|ef)", NULL,
	};
	for (size_t i = 0; patterns[i]; i++)
		CHECK(sound(patterns[i], subjects));
}

int main(void)
{
	test_sets();
	test_soundness();
	printf("test_rxlit: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
