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

/* L's strings joined by SEP (L freed), or "-" when GOT is 0. */
static const char *joined(int got, struct rxlit *l, const char *sep)
{
	static char out[4096];
	if (!got)
		return "-";
	out[0] = 0;
	for (size_t i = 0; i < l->n; i++) {
		if (i)
			strcat(out, sep);
		strncat(out, l->s[i], l->len[i]);
	}
	rxlit_free(l);
	return out;
}

/* The set as "a|b|c" in found order, or "-" when none. */
static const char *lits(const char *pattern)
{
	struct rxlit l;
	return joined(rxlit_required(pattern, strlen(pattern), &l), &l, "|");
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
	/* an exact run, then something whose first bytes are known: longer literals across the junction */
	CHECK(strcmp(lits("(?:a|b)(?:cd|e)+"), "ac|ae|bc|be") == 0);
	CHECK(strcmp(lits("(?:/|\\\\)(?:\\.|%2e){2}"), "/..|/.%2e|/%2e.|/%2e%2e|\\..|\\.%2e|\\%2e.|\\%2e%2e") == 0);
	CHECK(strcmp(lits("ab(?=c)(?:d|e)+"), "abd|abe") == 0);          /* the lookahead is zero-width */
	CHECK(strcmp(lits("[/\\\\](?:[a-c]x|\\w)"), "/|\\") == 0);        /* \\w: no first bytes */
	CHECK(strcmp(lits("x(?:y|z?)w"), "xyw|xzw|xw") == 0);
	CHECK(strcmp(lits("x(?:ab|c)?\\d"), "xab|xc|x") == 0);              /* \\d: no first bytes */
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
		"(?:or|and)\\s*\\d", "\\W", "(?:a|bc)(?:d|ef)", "(?:a|b)(?:cd|e)+", "(?:\\.|\\\\)(?:\\.|%2e){2}",
		"ab(?=c)(?:d|e)+", "(?:a|b)(?:\\b|c)(?:d|e)+", "x(?:ab|c)?d+", "(?:un|se)(?:ion|lect)+\\s", "[ab](?:[cd]|x)+",
		"(?:\\.\\.)(?:/|\\\\)+", NULL,
	};
	for (size_t i = 0; patterns[i]; i++)
		CHECK(sound(patterns[i], subjects));
}

/* The branches as "p1 || p2 || ...", or "-" when the pattern does not split. */
static const char *branches(const char *pattern)
{
	struct rxlit b;
	return joined(rxlit_branches(pattern, strlen(pattern), &b), &b, " || ");
}

static pcre2_code *compile(const char *pattern, size_t n)
{
	int code;
	PCRE2_SIZE off;
	return pcre2_compile((PCRE2_SPTR)pattern, n, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &code, &off, NULL);
}

/* On every subject, the branches give the pattern's answer and its
 * leftmost match: the earliest start, the first branch on a tie. */
static int stands_in(const char *pattern, const char *const *subjects)
{
	struct rxlit b;
	if (!rxlit_branches(pattern, strlen(pattern), &b))
		return 0;
	pcre2_code *whole = compile(pattern, strlen(pattern));
	pcre2_code *part[RXLIT_BRANCHES_MAX];
	int ok = whole != NULL;
	for (size_t i = 0; i < b.n; i++)
		ok &= (part[i] = compile(b.s[i], b.len[i])) != NULL;
	pcre2_match_data *md = pcre2_match_data_create(10, NULL);
	for (size_t k = 0; ok && subjects[k]; k++) {
		const char *s = subjects[k];
		size_t sl = strlen(s);
		int m = pcre2_match(whole, (PCRE2_SPTR)s, sl, 0, 0, md, NULL) >= 0;
		PCRE2_SIZE ws = m ? pcre2_get_ovector_pointer(md)[0] : 0, we = m ? pcre2_get_ovector_pointer(md)[1] : 0;
		int any = 0;
		PCRE2_SIZE bs = 0, be = 0;
		for (size_t i = 0; i < b.n; i++) {
			if (!part[i] || pcre2_match(part[i], (PCRE2_SPTR)s, sl, 0, 0, md, NULL) < 0)
				continue;
			PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
			if (!any || ov[0] < bs) {
				bs = ov[0];
				be = ov[1];
			}
			any = 1;
		}
		if (any != m || (m && (bs != ws || be != we))) {
			fprintf(stderr, "/%s/ on \"%s\": whole %d [%zu,%zu), branches %d [%zu,%zu)\n", pattern, s, m,
				(size_t)ws, (size_t)we, any, (size_t)bs, (size_t)be);
			ok = 0;
		}
	}
	pcre2_match_data_free(md);
	pcre2_code_free(whole);
	for (size_t i = 0; i < b.n; i++)
		pcre2_code_free(part[i]);
	rxlit_free(&b);
	return ok;
}

static void test_branches(void)
{
	CHECK(strcmp(branches("ab|cd"), "ab || cd") == 0);
	CHECK(strcmp(branches("(?i:(?:ab|c[d|]e))"), "(?i:(?:ab)) || (?i:(?:c[d|]e))") == 0);
	CHECK(strcmp(branches("(?i)(?:a(?:b|c)|\\|d)"), "(?i)(?:a(?:b|c)) || (?i)(?:\\|d)") == 0);
	CHECK(strcmp(branches("(?:a\\)|[)|]|b)"), "(?:a\\)) || (?:[)|]) || (?:b)") == 0);
	CHECK(strcmp(branches("(?:ab|cd)e"), "-") == 0);           /* the group does not span the pattern */
	CHECK(strcmp(branches("(?:ab)(?:cd|e)"), "-") == 0);
	CHECK(strcmp(branches("abc"), "-") == 0);                  /* one branch */
	CHECK(strcmp(branches("(a)|b"), "-") == 0);                /* a capturing group */
	CHECK(strcmp(branches("(?<n>a)|b"), "-") == 0);
	CHECK(strcmp(branches("(?:a|b)\\1|c"), "-") == 0);        /* a back reference */
	CHECK(strcmp(branches("a\\Kb|c"), "-") == 0);
	CHECK(strcmp(branches("a(?i)b|c"), "-") == 0);             /* carries into c */
	CHECK(strcmp(branches("(?:a(?i:b)|c)"), "(?:a(?i:b)) || (?:c)") == 0);
	CHECK(strcmp(branches("(?x)a|b"), "-") == 0);
	/* lookarounds and {0}: PCRE2 10.42 mis-optimises some alone ("(?=a).?a" misses "a") */
	CHECK(strcmp(branches("(?=a|b)c|d"), "-") == 0);
	CHECK(strcmp(branches("(?=a).?a|b"), "-") == 0);
	CHECK(strcmp(branches("(?<=c)a|b"), "-") == 0);
	CHECK(strcmp(branches("(?:q|^%){0}a|zz"), "-") == 0);
	CHECK(strcmp(branches("x{0,0}a|b"), "-") == 0);
	CHECK(strcmp(branches("x{0,1}a|b"), "x{0,1}a || b") == 0);
	CHECK(strcmp(branches("(?:a|b"), "-") == 0);
	static const char *const subjects[] = {
		"", "a", "ab", "ba", "abcd", "xcdab", "cde", "AB", "Cde", "select from", "1 or 1=1", "x' or 'a'='a",
		"ababab", "dcba", "aXb", "a\nb", "abc\n", "\"a\"", "b", "bd", "zzzc", "cab", "bca", "cbadcb", NULL,
	};
	static const char *const patterns[] = {
		"ab|cd", "a|ab", "ab|a", "(?i:(?:ab|cd|e))", "b|cd|a", "^a|b$", "\\Ba|b\\b", "a\\b|ab|b",
		"(?i)(?:or\\s+\\d|'\\s*or\\s*'|select\\s+from)", "\\bab\\b|\\bcd", "a.*b|c.*d", "a+?|b", "(?:b|a)+|c",
		"x*|a", "[ab]c|b", NULL,
	};
	for (size_t i = 0; patterns[i]; i++)
		CHECK(stands_in(patterns[i], subjects));
}

int main(void)
{
	test_sets();
	test_soundness();
	test_branches();
	printf("test_rxlit: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
