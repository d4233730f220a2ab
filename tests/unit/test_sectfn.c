/* Unit tests for ModSecurity's transformations (src/sectfn.c): each
 * expected value follows ModSecurity 2.9's definition of the step. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "sectfn.h"

static int passed, failed;

/* T(IN) must be WANT (both with explicit lengths). */
static void tf(int line, enum sl_tfn t, const char *in, size_t inlen, const char *want, size_t wlen)
{
	struct buf out = { 0 };
	sectfn_apply(t, in, inlen, &out);
	if (out.len == wlen && memcmp(out.data, want, wlen) == 0) {
		passed++;
	} else {
		failed++;
		fprintf(stderr, "%s:%d: t:%s(\"%.*s\") = \"", __FILE__, line, seclang_tfn_name(t), (int)inlen, in);
		for (size_t i = 0; i < out.len; i++)
			fprintf(stderr, (unsigned char)out.data[i] < 32 || (unsigned char)out.data[i] > 126 ? "\\x%02x" : "%c",
				(unsigned char)out.data[i]);
		fprintf(stderr, "\", want \"%.*s\"\n", (int)wlen, want);
	}
	buf_free(&out);
}
#define T(t, in, want) tf(__LINE__, SL_TFN_##t, in, sizeof(in) - 1, want, sizeof(want) - 1)

/* lowercase and uppercase, which go sixteen bytes at a time, against a
 * byte at a time: every length to 100, every byte value, both sides of 'A',
 * 'Z', 'a', 'z' at every position of a vector */
static void case_change_check(void)
{
	static const unsigned char pick[] = { 'A', 'Z', 'a', 'z', '@', '[', '`', '{', '0', ' ', 0, 0x80, 0xc1, 0xe1, 0xff, 'm', 'M' };
	unsigned seed = 7;
	size_t wrong = 0;
	for (int round = 0; round < 4000; round++) {
		unsigned char in[100];
		size_t n = (size_t)round % 101;
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			in[i] = round & 1 ? pick[(seed >> 16) % sizeof(pick)] : (unsigned char)(seed >> 16);
		}
		for (int up = 0; up < 2; up++) {
			unsigned char want[100];
			int want_changed = 0;
			for (size_t i = 0; i < n; i++) {
				unsigned char c = in[i];
				if (!up && c >= 'A' && c <= 'Z')
					c = (unsigned char)(c + 32);
				if (up && c >= 'a' && c <= 'z')
					c = (unsigned char)(c - 32);
				want_changed |= c != in[i];
				want[i] = c;
			}
			struct buf out = { 0 };
			int changed = sectfn_apply(up ? SL_TFN_UPPERCASE : SL_TFN_LOWERCASE, (const char *)in, n, &out);
			if (out.len != n || (n && memcmp(out.data, want, n) != 0) || changed != want_changed)
				wrong++;
			buf_free(&out);
		}
	}
	if (wrong) {
		failed++;
		fprintf(stderr, "lowercase/uppercase: %zu wrong\n", wrong);
	} else {
		passed++;
	}
}

/* urlDecode(Uni) copies runs with no '%' and no '+' sixteen bytes at a
 * time: a plain prefix P of any length changes nothing else, so
 * decode(P + S) is P + decode(S), with S full of escapes, bad escapes and
 * plain runs around the sixteen-byte boundaries */
static void url_decode_check(void)
{
	static const char pick[] = "%%%++2041uUfFgGz. abcdefghijklmnopqrstuv";
	unsigned seed = 99;
	size_t wrong = 0;
	for (int round = 0; round < 6000; round++) {
		char p[48], s[96], ps[144];
		size_t np = (size_t)round % 48, ns = (size_t)(round / 48) % 96;
		for (size_t i = 0; i < np; i++)
			p[i] = (char)('a' + (round + i) % 26);
		for (size_t i = 0; i < ns; i++) {
			seed = seed * 1103515245u + 12345u;
			/* every fourth round plain runs between escapes */
			s[i] = round % 4 == 0 && (seed >> 20) % 8 ? 'q' : pick[(seed >> 16) % (sizeof(pick) - 1)];
		}
		memcpy(ps, p, np);
		memcpy(ps + np, s, ns);
		for (int uni = 0; uni < 2; uni++) {
			enum sl_tfn t = uni ? SL_TFN_URL_DECODE_UNI : SL_TFN_URL_DECODE;
			struct buf a = { 0 }, b = { 0 };
			int ca = sectfn_apply(t, ps, np + ns, &a), cb = sectfn_apply(t, s, ns, &b);
			if (ca != cb || a.len != np + b.len || (np && memcmp(a.data, p, np) != 0) ||
			    (b.len && memcmp(a.data + np, b.data, b.len) != 0))
				wrong++;
			buf_free(&a);
			buf_free(&b);
		}
	}
	if (wrong) {
		failed++;
		fprintf(stderr, "urlDecode with a plain prefix: %zu wrong\n", wrong);
	} else {
		passed++;
	}
}

int main(void)
{
	case_change_check();
	url_decode_check();
	T(NONE, "AbC", "AbC");
	T(LOWERCASE, "AbC\xc4", "abc\xc4");
	T(UPPERCASE, "aBc", "ABC");
	T(TRIM, " \t a b \r\n", "a b");
	T(TRIM_LEFT, " \va ", "a ");
	T(TRIM_RIGHT, " a\f", " a");
	T(REMOVE_NULLS, "a\0b\0", "ab");
	T(REPLACE_NULLS, "a\0b", "a b");
	T(COMPRESS_WHITESPACE, "a \t\xa0 b  ", "a b ");
	T(REMOVE_WHITESPACE, " a\xa0 b\n", "ab");
	T(REPLACE_COMMENTS, "Before /* TestCase */ After", "Before   After");
	T(REPLACE_COMMENTS, "Before/* Test", "Before ");
	T(REMOVE_COMMENTS_CHAR, "a/*b*/c--d#e<!--f-->g", "abcdefg");

	/* urlDecode: '+' is a space; an invalid or cut %-escape stays */
	T(URL_DECODE, "a%20b+c%2", "a b c%2");
	T(URL_DECODE, "%zz%41%u0041", "%zzA%u0041");
	/* urlDecodeUni: %uHHHH keeps its low byte; full-width ASCII folds */
	T(URL_DECODE_UNI, "%u0041%uff01%U003c%u12", "A!<%u12");
	T(URL_DECODE_UNI, "%u00zz%41+", "%u00zzA ");
	T(JS_DECODE, "\\x41\\u0042\\uff0e\\101\\477\\n\\q\\", "AB.A'7\nq\\");
	T(JS_DECODE, "\\x4\\u004", "x4u004");
	/* six digits at most: "\0000041" is \000004 (0x04), then "1" */
	T(CSS_DECODE, "\\41 b\\0000041\\ff0e\\\nx\\z\\", "Ab\x04" "1.xz");
	T(CSS_DECODE, "\\4\\000041", "\x04" "A");
	T(HTML_ENTITY_DECODE, "&lt;&GT;&quot&amp;&nbsp;&#65;&#x42;&#X43&foo;&#;&#x;&", "<>\"&\xa0" "ABC&foo;&#;&#x;&");
	T(HTML_ENTITY_DECODE, "&#", "&#");
	T(HTML_ENTITY_DECODE, "&#321;&#99999999999999999999999;", "A\xff");
	T(ESCAPE_SEQ_DECODE, "\\n\\x41\\101\\777\\q\\xZ", "\nAA\xffqx" "Z");
	T(HEX_DECODE, "414243f", "ABC");
	T(SQL_HEX_DECODE, "select 0x414243,0x41 0xZZ", "select ABC,A 0xZZ");
	T(SQL_HEX_DECODE, "0x41420x43", "AB0x43");
	T(CMD_LINE, "C^OMMAND /C DIR", "command/c dir");
	T(CMD_LINE, "\"cmd\",;\t\r\n/c (x) \v", "cmd/c(x) \v");
	T(CMD_LINE, "a\0b", "a");

	/* paths */
	T(NORMALIZE_PATH, "/foo/./bar/../baz", "/foo/baz");
	T(NORMALIZE_PATH, "//a///b/", "/a/b/");
	T(NORMALIZE_PATH, "/../etc/passwd", "/etc/passwd");
	T(NORMALIZE_PATH, "/a/b/..", "/a");
	T(NORMALIZE_PATH, "a/./b", "a/b");
	T(NORMALIZE_PATH, "./a", "a");
	T(NORMALIZE_PATH, "../../etc/passwd", "../../etc/passwd");
	T(NORMALIZE_PATH, "a\\..\\b", "a\\..\\b");
	T(NORMALIZE_PATH_WIN, "c:\\windows\\..\\boot.ini", "c:/boot.ini");
	T(NORMALISE_PATH_WIN, "\\a\\\\b\\", "/a/b/");

	/* base64 */
	T(BASE64_DECODE, "VGVzdENhc2U=", "TestCase");
	T(BASE64_DECODE, "VGVzdENhc2", "TestCas");
	T(BASE64_DECODE, "VGVz.dENh", "Tes");
	T(BASE64_DECODE, "VGVzd", "Tes");
	T(BASE64_DECODE_EXT, "P.HNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==", "<script>alert(1)</script>");
	T(BASE64_DECODE_EXT, "VG=Vz", "Tes");
	T(BASE64_DECODE_EXT, "V=Gz", "");
	T(BASE64_ENCODE, "TestCase12", "VGVzdENhc2UxMg==");
	T(HEX_ENCODE, "A\xff", "41ff");
	T(URL_ENCODE, "a b*/", "a+b*%2f");
	T(LENGTH, "12345", "5");
	T(LENGTH, "", "0");

	/* utf8toUnicode, ModSecurity's corners included */
	T(UTF8_TO_UNICODE, "a\xc3\xa9", "a%u00e9");
	T(UTF8_TO_UNICODE, "\xe2\x82\xac", "%u20ac");
	T(UTF8_TO_UNICODE, "\xc3(", "(");             /* a bad sequence's lead byte goes */
	T(UTF8_TO_UNICODE, "\x80z", "\x80z");         /* a stray continuation byte stays */
	T(UTF8_TO_UNICODE, "\xc1\x81", "%u0041\xc1"); /* overlong: the lead byte again */
	T(UTF8_TO_UNICODE, "\xed\xa0\x80", "%ud800\xed");
	T(UTF8_TO_UNICODE, "\xf0\x9f\x98\x80", "%u1f000"); /* the third byte compared, not shifted */

	/* SHA-1 test vectors (FIPS 180-2) */
	T(SHA1, "abc", "\xa9\x99\x3e\x36\x47\x06\x81\x6a\xba\x3e\x25\x71\x78\x50\xc2\x6c\x9c\xd0\xd8\x9d");
	T(SHA1, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	  "\x84\x98\x3e\x44\x1c\x3b\xd2\x6e\xba\xae\x4a\xa1\xf9\x51\x29\xe5\xe5\x46\x70\xf1");
	T(MD5, "", "\xd4\x1d\x8c\xd9\x8f\x00\xb2\x04\xe9\x80\x09\x98\xec\xf8\x42\x7e");
	T(MD5, "abc", "\x90\x01\x50\x98\x3c\xd2\x4f\xb0\xd6\x96\x3f\x7d\x28\xe1\x7f\x72");
	T(SHA1, "", "\xda\x39\xa3\xee\x5e\x6b\x4b\x0d\x32\x55\xbf\xef\x95\x60\x18\x90\xaf\xd8\x07\x09");

	T(PARITY_ZERO_7BIT, "\xc1" "a", "Aa");
	T(PARITY_EVEN_7BIT, "\x01\x03", "\x81\x03");
	T(PARITY_ODD_7BIT, "\x01\x03", "\x01\x83");

	/* every transformation but the unsupported ones runs on odd input without harm */
	for (int t = 0; t < SL_TFN__COUNT; t++) {
		struct buf out = { 0 };
		static const char odd[] = "\\\\%u%%\\x&#x;\0\xf0\x80\xff/../..\\";
		sectfn_apply((enum sl_tfn)t, odd, sizeof(odd) - 1, &out);
		if (sectfn_supported((enum sl_tfn)t))
			passed++;
		buf_free(&out);
	}
	if (sectfn_supported(SL_TFN_REMOVE_COMMENTS))
		failed++;

	/* sectfn_unchanged: whenever it says a step leaves a value as it is,
	 * the step does (over every step and many small values); and it does
	 * say so for ordinary ones */
	static const char alpha[] = "aZ %+&\\/*\t\xa0\xc3\0#;x1.";
	size_t na = sizeof(alpha) - 1, wrong = 0, said = 0;
	for (int t = 0; t < SL_TFN__COUNT; t++) {
		if (!sectfn_supported((enum sl_tfn)t))
			continue;
		for (size_t code = 0; code < na * na * na * na; code++) {
			char in[4];
			size_t n = 0;
			for (size_t c = code; n < 4 && (n == 0 || c); c /= na)
				in[n++] = alpha[c % na];
			if (!sectfn_unchanged((enum sl_tfn)t, in, n))
				continue;
			said++;
			struct buf out = { 0 };
			sectfn_apply((enum sl_tfn)t, in, n, &out);
			if (out.len != n || memcmp(out.data, in, n) != 0) {
				if (!wrong++)
					fprintf(stderr, "t:%s(\"%.*s\"): sectfn_unchanged says unchanged; it is not\n",
						seclang_tfn_name((enum sl_tfn)t), (int)n, in);
			}
			buf_free(&out);
		}
	}
	if (wrong)
		failed++;
	else
		passed++;
	if (said > 1000)
		passed++;
	else
		failed++;
	static const char plain[] = "ordinary value 42";
	for (int t = 0; t < SL_TFN__COUNT; t++) {
		enum sl_tfn tt = (enum sl_tfn)t;
		int expect = tt == SL_TFN_URL_DECODE_UNI || tt == SL_TFN_HTML_ENTITY_DECODE || tt == SL_TFN_JS_DECODE ||
			     tt == SL_TFN_CSS_DECODE || tt == SL_TFN_REMOVE_NULLS || tt == SL_TFN_LOWERCASE ||
			     tt == SL_TFN_UTF8_TO_UNICODE || tt == SL_TFN_COMPRESS_WHITESPACE || tt == SL_TFN_REPLACE_COMMENTS ||
			     tt == SL_TFN_NORMALIZE_PATH || tt == SL_TFN_NORMALIZE_PATH_WIN;
		if (expect && !sectfn_unchanged(tt, plain, sizeof(plain) - 1)) {
			failed++;
			fprintf(stderr, "t:%s: an ordinary value not seen as unchanged\n", seclang_tfn_name(tt));
		}
	}
	printf("test_sectfn: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
