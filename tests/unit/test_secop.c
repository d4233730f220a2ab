/* Unit tests for ModSecurity's string and validation operators (src/secop.c). */
#include <stdio.h>
#include <string.h>
#include "secop.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)
#define S(x) x, sizeof(x) - 1

int main(void)
{
	/* an empty parameter matches anything, an empty value only an empty parameter */
	CHECK(secop_contains(S("abc"), S("")) && secop_contains(S(""), S("")) && !secop_contains(S(""), S("a")));
	CHECK(secop_contains(S("xxabcxx"), S("abc")) && !secop_contains(S("ab"), S("abc")) && !secop_contains(S("ABC"), S("abc")));
	CHECK(secop_contains(S("a\0b"), S("\0b")));
	CHECK(secop_contains_word(S("select x from"), S("from")) && secop_contains_word(S("from"), S("from")));
	CHECK(!secop_contains_word(S("fromage"), S("from")) && !secop_contains_word(S("_from"), S("from")));
	CHECK(secop_contains_word(S("xfrom from"), S("from")) && secop_contains_word(S("(from)"), S("from")));
	CHECK(secop_contains_word(S("a"), S("")));
	CHECK(secop_begins_with(S("/admin/x"), S("/admin")) && !secop_begins_with(S("/adm"), S("/admin")) &&
	      secop_begins_with(S(""), S("")));
	CHECK(secop_ends_with(S("x.php"), S(".php")) && !secop_ends_with(S("x.php5"), S(".php")) &&
	      secop_ends_with(S("x"), S("")));
	CHECK(secop_streq(S("GET"), S("GET")) && !secop_streq(S("GET "), S("GET")) && secop_streq(S(""), S("")));
	/* @within: the value inside the parameter; an empty value matches */
	CHECK(secop_within(S("GET"), S("GET HEAD POST OPTIONS")) && !secop_within(S("PUT"), S("GET HEAD POST")));
	CHECK(secop_within(S(""), S("GET")) && secop_within(S("ET H"), S("GET HEAD")) && !secop_within(S("x"), S("")));
	/* atoi */
	CHECK(secop_atoi(S("42")) == 42 && secop_atoi(S("  -7x")) == -7 && secop_atoi(S("+3")) == 3);
	CHECK(secop_atoi(S("abc")) == 0 && secop_atoi(S("")) == 0 && secop_atoi(S("- 1")) == 0);
	CHECK(secop_atoi(S("2147483648")) == -2147483648 && secop_atoi(S("99999999999")) == 1215752191);
	CHECK(secop_atoi(S("99999999999999999999")) == -1);   /* LONG_MAX, then int */
	CHECK(secop_atoi(S("-99999999999999999999")) == 0);   /* LONG_MIN, then int */
	CHECK(secop_atoi("12", 1) == 1);
	/* byte ranges */
	uint8_t ok[32] = { 0 };
	for (int c = 32; c <= 126; c++)
		ok[c >> 3] |= (uint8_t)(1u << (c & 7));
	CHECK(!secop_validate_byte_range(ok, S("hello world")) && secop_validate_byte_range(ok, S("tab\there")));
	CHECK(secop_validate_byte_range(ok, S("\x7f")) && secop_validate_byte_range(ok, S("\0")) &&
	      !secop_validate_byte_range(ok, S("")));
	/* URL encoding */
	CHECK(!secop_validate_url_encoding(S("a%20b%7e")) && !secop_validate_url_encoding(S("plain")));
	CHECK(secop_validate_url_encoding(S("%zz")) && secop_validate_url_encoding(S("ab%2")) &&
	      secop_validate_url_encoding(S("%")) && secop_validate_url_encoding(S("%g0")));
	CHECK(!secop_validate_url_encoding(S("%41")));
	/* UTF-8 */
	CHECK(!secop_validate_utf8(S("ascii")) && !secop_validate_utf8(S("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")));
	CHECK(secop_validate_utf8(S("\xc3")) && secop_validate_utf8(S("\xc3(")) && secop_validate_utf8(S("\x80")));
	CHECK(secop_validate_utf8(S("\xc0\xaf")) && secop_validate_utf8(S("\xe0\x80\xaf")) &&
	      secop_validate_utf8(S("\xf0\x80\x80\xaf")));                          /* overlong */
	CHECK(secop_validate_utf8(S("\xed\xa0\x80")) && secop_validate_utf8(S("\xf5\x80\x80\x80")) &&
	      secop_validate_utf8(S("\xff")));
	/* phrases */
	char *ph[] = { (char *)"union", (char *)"select", (char *)"=" };
	size_t w = 99;
	CHECK(secop_pm(ph, 3, S("1 UNION SeLeCt"), &w) && w == 0);
	CHECK(secop_pm(ph, 3, S("a=b"), &w) && w == 2);
	CHECK(!secop_pm(ph, 3, S("unio selec"), &w) && !secop_pm(ph, 3, S(""), &w));
	printf("test_secop: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
