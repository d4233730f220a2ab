/* Unit tests for src/injmemo.c: the remembered answers are libinjection's
 * own, for every value, repeated or not, across clears and past the byte
 * cap; values equal but for one byte or their length are told apart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "injmemo.h"
#include "libinjection.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static const char *const values[] = {
	"", "1", "USD", "true", "1' OR '1'='1", "1' OR '1'='2", "1' OR '1'='1'", "<script>alert(1)</script>",
	"<script>alert(1)</script", "admin'--", "admin'-", "hello world", "SELECT * FROM users WHERE id=1",
	"javascript:alert(1)", "<img src=x onerror=alert(1)>", "\x00\x01\xff", "1 union select 1,2,3", "a\x00b",
};

static void same_as_direct(struct injmemo *m, const char *v, size_t vl)
{
	uint8_t want_fp[8] = { 0 };
	int want = sluice_detect_sqli((const uint8_t *)v, vl, want_fp);
	char fp[8];
	int got = injmemo_sqli(m, v, vl, fp);
	CHECK(got == want);
	if (got && want)
		CHECK(strncmp(fp, (const char *)want_fp, 8) == 0);
	CHECK(injmemo_xss(m, v, vl) == sluice_detect_xss((const uint8_t *)v, vl));
}

/* injmemo_xss answers "no" without libinjection for a value holding no
 * '<' and no '=': libinjection must agree on every such value, however
 * its pieces (event handlers, URL schemes, quotes, comment and doctype
 * words, entities) are put together. */
static void xss_needs_lt_or_eq(void)
{
	static const char *const piece[] = {
		"onerror", "onload", "javascript:", "vbscript:", "data:", "style", "xmlns", "href", "src", "[if",
		"import", "entity", "xml", "--", "`", "'", "\"", "/", ">", " ", "\t", "\n", "!", "?", "&", "#", ";",
		":", "(", ")", "alert(1)", "script", "svg", "\\", "&lt;", "&#60;", "%3c", "DOCTYPE", "!DOCTYPE",
		"formaction", "attributename", "expression", "\x00", "x",
	};
	unsigned seed = 22;
	size_t flagged = 0, memo_said_yes = 0, np = sizeof(piece) / sizeof(piece[0]);
	char buf[256];
	struct injmemo m = { 0 };
	for (int i = 0; i < 200000; i++) {
		size_t len = 0;
		for (int j = 1 + rand_r(&seed) % 12; j > 0; j--) {
			const char *p = piece[(size_t)rand_r(&seed) % np];
			size_t pl = p[0] ? strlen(p) : 1;
			if (len + pl > sizeof(buf))
				break;
			memcpy(buf + len, p, pl);
			len += pl;
		}
		flagged += sluice_detect_xss((const uint8_t *)buf, len);
		memo_said_yes += injmemo_xss(&m, buf, len) != 0;
		injmemo_clear(&m);
	}
	CHECK(flagged == 0);
	CHECK(memo_said_yes == 0);
	injmemo_free(&m);
}

/* injmemo_sqli answers any all-digit value as "1": libinjection must
 * agree, answer and fingerprint, at every length and with any digits
 * (a leading 0 included: no 0x or 0b without a letter). */
static void digits_are_one_number(void)
{
	uint8_t one_fp[8] = { 0 };
	int one = sluice_detect_sqli((const uint8_t *)"1", 1, one_fp);
	unsigned seed = 7;
	char buf[300];
	size_t wrong = 0;
	struct injmemo m = { 0 };
	for (int i = 0; i < 20000; i++) {
		size_t len = 1 + (size_t)(i < 300 ? i : rand_r(&seed) % 299);
		for (size_t k = 0; k < len; k++)
			buf[k] = (char)('0' + (i < 300 ? (int)(k * 7 + (size_t)i) % 10 : rand_r(&seed) % 10));
		uint8_t fp[8] = { 0 };
		char got_fp[8];
		int want = sluice_detect_sqli((const uint8_t *)buf, len, fp);
		wrong += want != one || memcmp(fp, one_fp, 8) != 0;
		wrong += injmemo_sqli(&m, buf, len, got_fp) != want || memcmp(got_fp, fp, 8) != 0;
	}
	CHECK(wrong == 0);
	CHECK(m.n == 0);
	injmemo_free(&m);
}

/* injmemo_sqli answers "no" for one word (a letter or '_', then letters,
 * digits, '_') without libinjection: libinjection must agree on every
 * word of up to three characters, on SQL's keywords and functions in
 * both cases, and on long random words. */
static void words_are_not_sqli(void)
{
	static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789";
	const size_t nfirst = 53, nall = sizeof(alpha) - 1;
	size_t wrong = 0, asked = 0;
	struct injmemo m = { 0 };
	char w[48];
	uint8_t fp[8];
	char got_fp[8];
	for (size_t a = 0; a < nfirst; a++)
		for (size_t b = 0; b <= nall; b++)
			for (size_t c = 0; c <= (b < nall ? nall : 0); c++) {
				size_t n = 0;
				w[n++] = alpha[a];
				if (b < nall)
					w[n++] = alpha[b];
				if (b < nall && c < nall)
					w[n++] = alpha[c];
				wrong += sluice_detect_sqli((const uint8_t *)w, n, fp) != 0;
				wrong += injmemo_sqli(&m, w, n, got_fp) != 0;
				asked++;
			}
	static const char *const keywords[] = {
		"union", "select", "sleep", "benchmark", "or", "and", "xor", "not", "null", "true", "false", "having",
		"where", "exec", "execute", "waitfor", "delay", "shutdown", "drop", "insert", "update", "delete", "from",
		"like", "rlike", "regexp", "is", "in", "between", "case", "when", "then", "else", "end", "char", "concat",
		"ascii", "substring", "information_schema", "pg_sleep", "load_file", "outfile", "dumpfile", "version",
		"user", "database", "xp_cmdshell", "sp_password", "declare", "cast", "convert", "group_concat", "order",
		"group", "limit", "offset", "div", "mod", "binary", "collate", "utl_inaddr", "dbms_pipe", "sysdate",
		"current_user", "session_user", "sql_variant", "nvarchar", "varchar", "procedure", "analyse", "into",
		"values", "table", "column", "schema", "md5", "sha1", "hex", "unhex", "bin", "ord", "mid", "if", "ifnull",
		"isnull", "nullif", "coalesce", "iif", "x", "n", "q", "e", "b", "u", "X", "N", "Q", "E", "B", "U", "_",
	};
	for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
		for (int upper = 0; upper < 2; upper++) {
			size_t n = strlen(keywords[i]);
			for (size_t k = 0; k < n; k++)
				w[k] = upper && keywords[i][k] >= 'a' && keywords[i][k] <= 'z' ? (char)(keywords[i][k] - 32)
												: keywords[i][k];
			wrong += sluice_detect_sqli((const uint8_t *)w, n, fp) != 0;
			wrong += injmemo_sqli(&m, w, n, got_fp) != 0;
		}
	unsigned seed = 11;
	for (int i = 0; i < 20000; i++) {
		size_t n = 1 + (size_t)rand_r(&seed) % 40;
		w[0] = alpha[rand_r(&seed) % nfirst];
		for (size_t k = 1; k < n; k++)
			w[k] = alpha[rand_r(&seed) % nall];
		wrong += sluice_detect_sqli((const uint8_t *)w, n, fp) != 0;
		wrong += injmemo_sqli(&m, w, n, got_fp) != 0;
	}
	CHECK(asked == 53 + 53 * 63 + 53 * 63 * 63);
	CHECK(wrong == 0);
	CHECK(m.n == 0);  /* answered without libinjection */
	/* not words: libinjection is asked */
	CHECK(injmemo_sqli(&m, "1abc", 4, got_fp) == sluice_detect_sqli((const uint8_t *)"1abc", 4, fp));
	CHECK(injmemo_sqli(&m, "a.b", 3, got_fp) == sluice_detect_sqli((const uint8_t *)"a.b", 3, fp));
	CHECK(injmemo_sqli(&m, "x'1'", 4, got_fp) == sluice_detect_sqli((const uint8_t *)"x'1'", 4, fp));
	CHECK(m.n == 3);
	injmemo_free(&m);
}

int main(void)
{
	struct injmemo m = { 0 };
	size_t nv = sizeof(values) / sizeof(values[0]);
	/* three passes: the first fills the memo, the others read it */
	for (int pass = 0; pass < 3; pass++)
		for (size_t i = 0; i < nv; i++)
			same_as_direct(&m, values[i], i == 15 ? 3 : i == 17 ? 3 : strlen(values[i]));
	/* kept: every SQLi answer, and the XSS answers libinjection was asked
	 * for (values with a '<' or a '=') */
	size_t asked = 0, digits = 0, words = 0;
	for (size_t i = 0; i < nv; i++) {
		size_t vl = i == 15 ? 3 : i == 17 ? 3 : strlen(values[i]);
		asked += memchr(values[i], '<', vl) || memchr(values[i], '=', vl);
		/* answered without a memo entry */
		digits += vl && strspn(values[i], "0123456789") == vl;
		words += vl && strspn(values[i], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789") == vl &&
			 (values[i][0] < '0' || values[i][0] > '9');
	}
	CHECK(digits == 1 && words == 2);
	CHECK(m.n == nv - digits - words + asked);
	/* a prefix of a remembered value is a value of its own */
	same_as_direct(&m, "1' OR '1'='1", 5);
	/* cleared: nothing remembered, answers unchanged */
	injmemo_clear(&m);
	CHECK(m.n == 0 && m.data.len == 0);
	for (size_t i = 0; i < nv; i++)
		same_as_direct(&m, values[i], i == 15 ? 3 : i == 17 ? 3 : strlen(values[i]));
	/* many distinct values (the table grows) and past the byte cap (values
	 * checked, not kept) */
	injmemo_clear(&m);
	static char big[4096];
	for (int k = 0; k < 600; k++) {
		int n = snprintf(big, sizeof(big), "%d' OR %d=%d -- %*s", k, k, k % 3 ? k : k + 1, 2000, "x");
		same_as_direct(&m, big, (size_t)n);
	}
	CHECK(m.data.len <= (1u << 20));
	for (int k = 0; k < 600; k += 7) {
		int n = snprintf(big, sizeof(big), "%d' OR %d=%d -- %*s", k, k, k % 3 ? k : k + 1, 2000, "x");
		same_as_direct(&m, big, (size_t)n);
	}
	/* more distinct values than it keeps entries: the rest are checked,
	 * answers unchanged, the table bounded */
	injmemo_clear(&m);
	size_t wrong = 0;
	for (int k = 0; k < 70000; k++) {
		char small[16];
		int n = snprintf(small, sizeof(small), k % 5 ? "v%d" : "%d' or 1=1", k);
		uint8_t fp[8];
		char got_fp[8];
		wrong += injmemo_sqli(&m, small, (size_t)n, got_fp) != sluice_detect_sqli((const uint8_t *)small, (size_t)n, fp);
	}
	CHECK(wrong == 0);
	CHECK(m.n <= 65536 && m.cap <= 2 * 65536 * 2);
	/* the epoch wraps: entries of the old epochs must not come back */
	injmemo_clear(&m);
	same_as_direct(&m, "1' OR '1'='1", 12);
	m.epoch = UINT32_MAX;
	injmemo_clear(&m);
	CHECK(m.epoch == 1);
	same_as_direct(&m, "hello world", 11);
	same_as_direct(&m, "1' OR '1'='1", 12);
	injmemo_free(&m);
	digits_are_one_number();
	words_are_not_sqli();
	xss_needs_lt_or_eq();
	printf("test_injmemo: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
