/* Unit tests for the rule transformations and the CIDR set. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cidrset.h"
#include "transform.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

/* Apply SPEC to IN; compare with WANT (WLEN bytes, -1 = strlen). */
static int xf(const char *spec, const char *in, size_t inlen, const char *want, long wlen)
{
	uint8_t steps[XFORM_MAX_STEPS];
	const char *bad;
	size_t badlen;
	int n = xform_parse(spec, strlen(spec), steps, XFORM_MAX_STEPS, &bad, &badlen);
	if (n < 0)
		return 0;
	char *buf = malloc(inlen + 1);
	memcpy(buf, in, inlen);
	size_t out = xform_apply(steps, n, buf, inlen);
	size_t wl = wlen < 0 ? strlen(want) : (size_t)wlen;
	int ok = out == wl && memcmp(buf, want, wl) == 0;
	if (!ok)
		fprintf(stderr, "  %s(%.*s) = [%.*s]\n", spec, (int)inlen, in, (int)out, buf);
	free(buf);
	return ok;
}
#define XF(spec, in, want) xf(spec, in, strlen(in), want, -1)

static void test_parse(void)
{
	uint8_t steps[XFORM_MAX_STEPS];
	const char *bad;
	size_t badlen;
	CHECK(xform_parse("lower", 5, steps, XFORM_MAX_STEPS, &bad, &badlen) == 1 && steps[0] == XF_LOWER);
	CHECK(xform_parse("urldecode_uni, htmldecode ,lower", 32, steps, XFORM_MAX_STEPS, &bad, &badlen) == 3 &&
	      steps[0] == XF_URLDECODE_UNI && steps[1] == XF_HTMLDECODE && steps[2] == XF_LOWER);
	CHECK(xform_parse("lower,nope", 10, steps, XFORM_MAX_STEPS, &bad, &badlen) == -1 && badlen == 4 &&
	      memcmp(bad, "nope", 4) == 0);
	CHECK(xform_parse("", 0, steps, XFORM_MAX_STEPS, &bad, &badlen) == -1);
	CHECK(xform_parse("lower,,trim", 11, steps, XFORM_MAX_STEPS, &bad, &badlen) == -1);
	CHECK(xform_parse("lower,lower,lower", 17, steps, 2, &bad, &badlen) == -1);  /* over MAX */
	CHECK(xform_parse("urldecodex", 10, steps, XFORM_MAX_STEPS, &bad, &badlen) == -1);
}

static void test_urldecode(void)
{
	CHECK(XF("urldecode", "a%20b%2Fc", "a b/c"));
	CHECK(XF("urldecode", "a+b", "a+b"));              /* path semantics */
	CHECK(XF("urldecode_uni", "a+b", "a b"));          /* form semantics */
	CHECK(XF("urldecode", "%", "%"));
	CHECK(XF("urldecode", "%4", "%4"));
	CHECK(XF("urldecode", "%zz%41", "%zzA"));
	CHECK(XF("urldecode", "%2e%2E%2f", "../"));
	CHECK(xf("urldecode", "a%00b", 5, "a\0b", 3));
	CHECK(XF("urldecode", "%u0041", "%u0041"));        /* only _uni knows %u */
	CHECK(XF("urldecode_uni", "%u0041%U0042", "AB"));
	CHECK(XF("urldecode_uni", "%u00e9", "\xc3\xa9"));
	CHECK(XF("urldecode_uni", "%uff0e%uff0e%u2215", "..\xe2\x88\x95"));  /* full-width dots -> '.' */
	CHECK(XF("urldecode_uni", "%u12", "%u12"));
	CHECK(XF("urldecode_uni", "%u12zz", "%u12zz"));
	CHECK(XF("urldecode_uni", "%uD800", "\xef\xbf\xbd"));  /* surrogate -> U+FFFD */
	CHECK(XF("urldecode,urldecode", "%252e", "."));     /* double encoding, two passes */
}

static void test_htmldecode(void)
{
	CHECK(XF("htmldecode", "&lt;script&gt;", "<script>"));
	CHECK(XF("htmldecode", "&LT;&Amp;&quot;&apos;&nbsp;", "<&\"' "));
	CHECK(XF("htmldecode", "&#60;&#x3c;&#X3C;&#0060", "<<<<"));
	CHECK(XF("htmldecode", "&#xe9;", "\xc3\xa9"));
	CHECK(XF("htmldecode", "&#128512;", "\xf0\x9f\x98\x80"));
	CHECK(XF("htmldecode", "&#x110000;", "\xef\xbf\xbd"));
	CHECK(XF("htmldecode", "&#99999999999999;", "\xef\xbf\xbd"));
	CHECK(XF("htmldecode", "&#;&#x;&unknown;&", "&#;&#x;&unknown;&"));
	CHECK(XF("htmldecode", "a&amp;lt;b", "a&lt;b"));    /* one level per pass */
	CHECK(XF("htmldecode", "&#9", "\t"));
}

static void test_simple(void)
{
	CHECK(XF("lower", "SeLeCt ÄB", "select Äb"));  /* ASCII only */
	CHECK(XF("compress_ws", "a \t\n b  c", "a b c"));
	CHECK(XF("compress_ws", "  a  ", " a "));
	CHECK(XF("remove_ws", " u n\tion\r\n", "union"));
	CHECK(xf("remove_nulls", "a\0b\0", 4, "ab", 2));
	CHECK(XF("trim", " \t x y \n", "x y"));
	CHECK(XF("trim", "   ", ""));
	CHECK(XF("b64decode", "aGVsbG8gd29ybGQ=", "hello world"));
	CHECK(XF("b64decode", "aGVsbG8", "hello"));         /* unpadded: the whole bytes */
	CHECK(XF("b64decode", "PHNjcmlwdD4*garbage", "<script>"));
	CHECK(XF("b64decode", "-_-_", "\xfb\xff\xbf"));       /* URL-safe alphabet */
	CHECK(XF("b64decode", "", ""));
}

static void test_jsondecode(void)
{
	CHECK(XF("jsondecode", "a\\\"b\\\\c\\/d", "a\"b\\c/d"));
	CHECK(XF("jsondecode", "\\b\\f\\n\\r\\t", "\b\f\n\r\t"));
	CHECK(XF("jsondecode", "\\u0073\\u0059stem", "sYstem"));
	CHECK(XF("jsondecode", "\\u00E9\\u20ac", "\xc3\xa9\xe2\x82\xac"));
	CHECK(XF("jsondecode", "\\ud83d\\ude00!", "\xf0\x9f\x98\x80!"));       /* surrogate pair */
	CHECK(XF("jsondecode", "\\uD800x", "\xef\xbf\xbdx"));                  /* lone high surrogate */
	CHECK(XF("jsondecode", "\\uD800\\u0041", "\xef\xbf\xbd" "A"));         /* high, then not a low one */
	CHECK(XF("jsondecode", "\\uDC00", "\xef\xbf\xbd"));                    /* lone low surrogate */
	CHECK(xf("jsondecode", "\\u0000", 6, "\0", 1));
	/* invalid escapes stay as they are */
	CHECK(XF("jsondecode", "\\x41\\u12\\u12zz\\q\\", "\\x41\\u12\\u12zz\\q\\"));
	CHECK(XF("jsondecode", "\\\\u0041", "\\u0041"));                      /* an escaped backslash */
	CHECK(XF("jsondecode,lower", "\\u003CSCRIPT\\u003e", "<script>"));
	CHECK(XF("jsondecode", "", ""));
}

static void test_normalize_path(void)
{
	CHECK(XF("normalize_path", "/a//b/./c", "/a/b/c"));
	CHECK(XF("normalize_path", "/a/b/../c", "/a/c"));
	CHECK(XF("normalize_path", "/a/b/..", "/a/"));
	CHECK(XF("normalize_path", "/../../etc/passwd", "/etc/passwd"));
	CHECK(XF("normalize_path", "/a/.", "/a/"));
	CHECK(XF("normalize_path", "/a/..b/c", "/a/..b/c"));
	CHECK(XF("normalize_path", "/a/.b", "/a/.b"));
	CHECK(XF("normalize_path", "a/../../b", "/b"));
	CHECK(XF("urldecode,normalize_path", "/x/%2e%2e/%2e%2e/etc/passwd", "/etc/passwd"));
}

/* Every step, over every byte string of length <= 3 from a small
 * alphabet: output never longer than input (the in-place contract). */
static void test_never_grows(void)
{
	static const char alpha[] = "%&#;xu0a+/. \\\xff";
	size_t na = sizeof(alpha) - 1;
	int ok = 1;
	char in[8], buf[8];
	for (int s = 0; s < XF__COUNT; s++)
		for (size_t len = 0; len <= 4; len++) {
			size_t total = 1;
			for (size_t i = 0; i < len; i++)
				total *= na;
			for (size_t k = 0; k < total; k++) {
				size_t v = k;
				for (size_t i = 0; i < len; i++, v /= na)
					in[i] = alpha[v % na];
				memcpy(buf, in, len);
				if (xform_step((enum xform_step)s, buf, len) > len)
					ok = 0;
			}
		}
	CHECK(ok);
	/* Long numeric entities and %u escapes, the worst expansion cases. */
	char big[64];
	strcpy(big, "&#x10FFFF;&#65;%u20AC");
	size_t n = strlen(big);
	CHECK(xform_step(XF_HTMLDECODE, big, n) <= n);
	CHECK(xform_step(XF_URLDECODE_UNI, big, n) <= n);
	strcpy(big, "\\u20AC\\uD83D\\uDE00\\uFFFF\\uD800");
	n = strlen(big);
	CHECK(xform_step(XF_JSONDECODE, big, n) <= n);
}

static struct netaddr ip(const char *text)
{
	struct netaddr a = { 0 };
	if (inet_pton(AF_INET, text, a.ip) == 1)
		a.family = AF_INET;
	else if (inet_pton(AF_INET6, text, a.ip) == 1)
		a.family = AF_INET6;
	return a;
}

static void test_cidrset(void)
{
	const char *nets[] = { "10.0.0.0/8", "192.0.2.1", "192.0.2.2", "192.0.2.3", "2001:db8::/32",
			       "10.1.0.0/16", "198.51.100.0/25", "198.51.100.128/25", "0.0.0.0/32" };
	struct cidr c[9];
	const char *why;
	for (int i = 0; i < 9; i++)
		CHECK(cidr_parse(nets[i], &c[i], &why) == 0);
	struct cidrset s;
	CHECK(cidrset_build(&s, c, 9) == 0);
	/* 10/8 swallows 10.1/16; 192.0.2.1-3 and the two /25s merge: 5 ranges */
	CHECK(s.n == 5);
	struct netaddr a;
	a = ip("10.255.255.255"); CHECK(cidrset_contains(&s, &a));
	a = ip("11.0.0.0");       CHECK(!cidrset_contains(&s, &a));
	a = ip("9.255.255.255");  CHECK(!cidrset_contains(&s, &a));
	a = ip("192.0.2.2");      CHECK(cidrset_contains(&s, &a));
	a = ip("192.0.2.4");      CHECK(!cidrset_contains(&s, &a));
	a = ip("192.0.2.0");      CHECK(!cidrset_contains(&s, &a));
	a = ip("198.51.100.200"); CHECK(cidrset_contains(&s, &a));
	a = ip("2001:db8:ffff::1"); CHECK(cidrset_contains(&s, &a));
	a = ip("2001:db9::");     CHECK(!cidrset_contains(&s, &a));
	a = ip("::ffff:10.2.3.4"); CHECK(cidrset_contains(&s, &a));   /* mapped v4 matches v4 nets */
	a = ip("::ffff:11.2.3.4"); CHECK(!cidrset_contains(&s, &a));
	a = ip("::a02:304");      CHECK(!cidrset_contains(&s, &a));   /* v4-compatible is not v4 */
	a = ip("0.0.0.0");        CHECK(cidrset_contains(&s, &a));
	struct netaddr none = { 0 };
	CHECK(!cidrset_contains(&s, &none));
	cidrset_free(&s);

	/* Everything, and nothing. */
	CHECK(cidr_parse("::/0", &c[0], &why) == 0 && cidr_parse("0.0.0.0/0", &c[1], &why) == 0);
	CHECK(cidrset_build(&s, c, 2) == 0 && s.n == 1);
	a = ip("255.255.255.255"); CHECK(cidrset_contains(&s, &a));
	a = ip("ffff::");         CHECK(cidrset_contains(&s, &a));
	cidrset_free(&s);
	CHECK(cidrset_build(&s, c, 0) == 0 && s.n == 0);
	a = ip("1.2.3.4");        CHECK(!cidrset_contains(&s, &a));

	/* Against a linear scan, over random /8../32 v4 networks. */
	srand(7);
	struct cidr r[200];
	for (int i = 0; i < 200; i++) {
		char t[40];
		int bits = 8 + rand() % 25;
		uint32_t v = ((uint32_t)rand() << 1) ^ (uint32_t)rand();
		v &= bits == 32 ? 0xffffffffu : ~(0xffffffffu >> bits);
		snprintf(t, sizeof(t), "%u.%u.%u.%u/%d", v >> 24, (v >> 16) & 255, (v >> 8) & 255, v & 255, bits);
		cidr_parse(t, &r[i], &why);
	}
	CHECK(cidrset_build(&s, r, 200) == 0);
	int agree = 1;
	for (int k = 0; k < 20000; k++) {
		struct netaddr q = { .family = AF_INET };
		uint32_t v = ((uint32_t)rand() << 1) ^ (uint32_t)rand();
		if (k % 2) {  /* half of the probes inside some network */
			const struct cidr *n = &r[rand() % 200];
			uint32_t base = ((uint32_t)n->ip[0] << 24) | ((uint32_t)n->ip[1] << 16) | ((uint32_t)n->ip[2] << 8) | n->ip[3];
			v = base | (n->bits == 32 ? 0 : (v & (0xffffffffu >> n->bits)));
		}
		q.ip[0] = (uint8_t)(v >> 24), q.ip[1] = (uint8_t)(v >> 16), q.ip[2] = (uint8_t)(v >> 8), q.ip[3] = (uint8_t)v;
		if (cidrset_contains(&s, &q) != cidr_list_match(r, 200, &q))
			agree = 0;
	}
	CHECK(agree);
	cidrset_free(&s);
}

int main(void)
{
	test_parse();
	test_urldecode();
	test_htmldecode();
	test_simple();
	test_jsondecode();
	test_normalize_path();
	test_never_grows();
	test_cidrset();
	printf("test_transform: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
