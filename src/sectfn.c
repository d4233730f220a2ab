/* ModSecurity's transformations (sectfn.h says why they are not
 * transform.c's). Each reads IN[0..N) and writes OUT; "as ModSecurity does"
 * below means ModSecurity 2.9's own definition, odd corners kept. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <openssl/evp.h>
#include <openssl/md5.h>
#include <openssl/sha.h>
#include "sectfn.h"
#include "util.h"

#define NBSP 0xA0

/* 16 bytes at a time (GCC's vector extension: SSE2 on x86-64): values
 * are long, and most of their bytes are plain. */
typedef unsigned char v16 __attribute__((vector_size(16)));
typedef signed char v16s __attribute__((vector_size(16)));

static int v16_any(v16s m)
{
	uint64_t w[2];
	memcpy(w, &m, sizeof(w));
	return (w[0] | w[1]) != 0;
}

static int is_odigit(unsigned char c)
{
	return c >= '0' && c <= '7';
}

/* Two characters as a hex byte, unchecked: ModSecurity's arithmetic, so a
 * non-hex character gives the same byte it gives there. */
static unsigned char x2c(const unsigned char *p)
{
	unsigned char hi = (unsigned char)(p[0] >= 'A' ? ((p[0] & 0xdf) - 'A') + 10 : (p[0] - '0'));
	unsigned char lo = (unsigned char)(p[1] >= 'A' ? ((p[1] & 0xdf) - 'A') + 10 : (p[1] - '0'));
	return (unsigned char)(hi * 16 + lo);
}

static unsigned char x1c(unsigned char c)
{
	return (unsigned char)(c >= 'A' ? ((c & 0xdf) - 'A') + 10 : (c - '0'));
}

/* %uHHHH and \uHHHH keep the low byte; full-width ASCII (U+FF01..U+FF5E)
 * becomes its ASCII letter. */
static unsigned char uni_low(const unsigned char *h4)
{
	unsigned char c = x2c(h4 + 2);
	if (c > 0x00 && c < 0x5f && (h4[0] | 0x20) == 'f' && (h4[1] | 0x20) == 'f')
		c = (unsigned char)(c + 0x20);
	return c;
}

static unsigned char *out_room(struct buf *out, size_t n)
{
	out->len = 0;
	buf_reserve(out, n + 1);
	return (unsigned char *)out->data;
}

static size_t url_decode(const unsigned char *s, size_t n, unsigned char *d, int uni, int *changed)
{
	size_t i = 0, k = 0;
	while (i < n) {
		/* runs with no '%' and no '+', sixteen bytes at a time */
		while (i + 16 <= n) {
			v16 c;
			memcpy(&c, s + i, sizeof(c));
			if (v16_any((v16s)(c == '%') | (v16s)(c == '+')))
				break;
			memcpy(d + k, &c, sizeof(c));
			i += 16;
			k += 16;
		}
		if (i == n)
			break;
		if (s[i] != '%') {
			d[k++] = s[i] == '+' ? ' ' : s[i];
			*changed |= s[i] == '+';
			i++;
		} else if (uni && i + 1 < n && (s[i + 1] | 0x20) == 'u') {
			if (i + 5 < n && hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0 && hex_value(s[i + 4]) >= 0 &&
			    hex_value(s[i + 5]) >= 0) {
				d[k++] = uni_low(s + i + 2);
				i += 6;
				*changed = 1;
			} else {  /* "%u" stays, the rest is looked at again */
				d[k++] = s[i++];
				d[k++] = s[i++];
			}
		} else if (i + 2 < n && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
			d[k++] = x2c(s + i + 1);
			i += 3;
			*changed = 1;
		} else {
			d[k++] = s[i++];
		}
	}
	return k;
}

static size_t js_decode(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t i = 0, k = 0;
	while (i < n) {
		if (s[i] != '\\') {
			d[k++] = s[i++];
		} else if (i + 5 < n && s[i + 1] == 'u' && hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0 &&
			   hex_value(s[i + 4]) >= 0 && hex_value(s[i + 5]) >= 0) {
			d[k++] = uni_low(s + i + 2);
			i += 6;
		} else if (i + 3 < n && s[i + 1] == 'x' && hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0) {
			d[k++] = x2c(s + i + 2);
			i += 4;
		} else if (i + 1 < n && is_odigit(s[i + 1])) {
			/* up to three octal digits, but never above \377 */
			size_t j = 0;
			while (i + 1 + j < n && j < 3) {
				j++;
				if (i + 1 + j >= n || !is_odigit(s[i + 1 + j]))
					break;
			}
			if (j == 3 && s[i + 1] > '3')
				j = 2;
			unsigned v = 0;
			for (size_t q = 0; q < j; q++)
				v = v * 8 + (unsigned)(s[i + 1 + q] - '0');
			d[k++] = (unsigned char)v;
			i += 1 + j;
		} else if (i + 1 < n) {
			unsigned char c = s[i + 1];
			switch (c) {
			case 'a': c = '\a'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'v': c = '\v'; break;
			default: break;  /* \? \\ \' \" and any other: the character itself */
			}
			d[k++] = c;
			i += 2;
		} else {
			d[k++] = s[i++];  /* a backslash at the end stays */
		}
	}
	return k;
}

static size_t css_decode(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t i = 0, k = 0;
	while (i < n) {
		if (s[i] != '\\') {
			d[k++] = s[i++];
			continue;
		}
		if (i + 1 >= n) {  /* a final backslash continues to nothing */
			i++;
			continue;
		}
		i++;
		size_t j = 0;
		while (j < 6 && i + j < n && hex_value(s[i + j]) >= 0)
			j++;
		if (j == 0) {
			if (s[i] == '\n')
				i++;  /* an escaped newline is a line continuation */
			else
				d[k++] = s[i++];
			continue;
		}
		/* only the last two digits count; four digits (or five or six
		 * with leading zeros) may be full-width ASCII */
		int fullcheck = 0;
		unsigned char c = j == 1 ? x1c(s[i]) : x2c(s + i + j - 2);
		if (j == 4 || (j == 5 && s[i] == '0') || (j == 6 && s[i] == '0' && s[i + 1] == '0'))
			fullcheck = 1;
		if (fullcheck && c > 0x00 && c < 0x5f && (s[i + j - 3] | 0x20) == 'f' && (s[i + j - 4] | 0x20) == 'f')
			c = (unsigned char)(c + 0x20);
		d[k++] = c;
		if (i + j < n && c_isspace(s[i + j]))  /* one whitespace after a hex escape ends it */
			j++;
		i += j;
	}
	return k;
}

/* strtol's value of a digit run, saturated as strtol saturates, as a byte. */
static unsigned char entity_byte(const unsigned char *p, size_t len, int base)
{
	unsigned long long v = 0;
	int sat = 0;
	for (size_t q = 0; q < len; q++) {
		unsigned dg = p[q] <= '9' ? (unsigned)(p[q] - '0') : (unsigned)((p[q] | 0x20) - 'a' + 10);
		if (!sat) {
			v = v * (unsigned)base + dg;
			if (v > 0x7fffffffffffffffULL)
				sat = 1;
		}
	}
	return sat ? 0xff : (unsigned char)v;
}

static int is_alnum(unsigned char c)
{
	return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z');
}

static size_t html_decode(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t i = 0, k = 0;
	while (i < n) {
		size_t copy = 1;
		if (s[i] == '&' && i + 1 < n) {
			size_t j = i + 1;
			if (s[j] == '#') {
				copy++;
				if (j + 1 >= n)
					goto raw;
				j++;
				int base = 10;
				if (s[j] == 'x' || s[j] == 'X') {
					copy++;
					if (j + 1 >= n)
						goto raw;
					j++;
					base = 16;
				}
				size_t from = j;
				while (j < n && (base == 16 ? hex_value(s[j]) >= 0 : (s[j] >= '0' && s[j] <= '9')))
					j++;
				if (j == from)
					goto raw;
				d[k++] = entity_byte(s + from, j - from, base);
				i = j < n && s[j] == ';' ? j + 1 : j;
				continue;
			}
			size_t from = j;
			while (j < n && is_alnum(s[j]))
				j++;
			if (j > from) {
				size_t len = j - from;
				const char *name = (const char *)s + from;
				int c = -1;
				if (len == 4 && strncasecmp(name, "quot", 4) == 0)
					c = '"';
				else if (len == 3 && strncasecmp(name, "amp", 3) == 0)
					c = '&';
				else if (len == 2 && strncasecmp(name, "lt", 2) == 0)
					c = '<';
				else if (len == 2 && strncasecmp(name, "gt", 2) == 0)
					c = '>';
				else if (len == 4 && strncasecmp(name, "nbsp", 4) == 0)
					c = NBSP;
				if (c < 0) {
					copy = len + 1;  /* unknown: '&' and the name stay */
					goto raw;
				}
				d[k++] = (unsigned char)c;
				i = j < n && s[j] == ';' ? j + 1 : j;
				continue;
			}
		}
raw:
		for (size_t z = 0; z < copy && i < n; z++)
			d[k++] = s[i++];
	}
	return k;
}

static size_t escape_seq_decode(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t i = 0, k = 0;
	while (i < n) {
		if (s[i] != '\\' || i + 1 >= n) {
			d[k++] = s[i++];
			continue;
		}
		int c = -1;
		switch (s[i + 1]) {
		case 'a': c = '\a'; break;
		case 'b': c = '\b'; break;
		case 'f': c = '\f'; break;
		case 'n': c = '\n'; break;
		case 'r': c = '\r'; break;
		case 't': c = '\t'; break;
		case 'v': c = '\v'; break;
		case '\\': c = '\\'; break;
		case '?': c = '?'; break;
		case '\'': c = '\''; break;
		case '"': c = '"'; break;
		default: break;
		}
		if (c != -1) {
			i += 2;
		} else if ((s[i + 1] | 0x20) == 'x') {
			if (i + 3 < n && hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0) {
				c = x2c(s + i + 2);
				i += 4;
			}
		} else if (is_odigit(s[i + 1])) {
			size_t j = 0;
			unsigned v = 0;
			while (i + 1 + j < n && j < 3) {
				v = v * 8 + (unsigned)(s[i + 1 + j] - '0');
				j++;
				if (i + 1 + j >= n || !is_odigit(s[i + 1 + j]))
					break;
			}
			c = (int)(v & 0xff);
			i += 1 + j;
		}
		if (c == -1) {  /* unknown escape: the character after the backslash */
			d[k++] = s[i + 1];
			i += 2;
		} else {
			d[k++] = (unsigned char)c;
		}
	}
	return k;
}

/* Path normalisation as ModSecurity walks it: empty segments, "." and
 * ".." go (never above the root of an absolute path; a relative path
 * keeps the ".." it cannot resolve); WIN turns backslashes into slashes
 * first. The trailing slash stays only if there was one. */
static size_t normalize_path(unsigned char *p, size_t n, int win, int *changed)
{
	if (n == 0)
		return 0;
	size_t src = 0, dst = 0, end = n - 1;
	int hitroot = 0, done = 0;
	int relative = !(p[0] == '/' || (win && p[0] == '\\'));
	int trailing = p[end] == '/' || (win && p[end] == '\\');
	while (!done && src <= end && dst <= end) {
		if (win) {
			if (p[src] == '\\')
				p[src] = '/', *changed = 1;
			if (src < end && p[src + 1] == '\\')
				p[src + 1] = '/', *changed = 1;
		}
		if (src == end)
			done = 1;
		else if (p[src + 1] != '/')
			goto copy;
		if (src != end && p[src] == '/') {
			*changed = 1;
			goto copy;
		} else if (p[src] == '.') {
			if (dst > 0 && p[dst - 1] == '.') {  /* a back reference */
				if (relative && (hitroot || dst <= 2)) {
					hitroot = 1;
					goto copy;
				}
				/* drop it and the segment before */
				dst = dst >= 3 ? dst - 3 : 0;
				while (dst > 0 && p[dst] != '/')
					dst--;
				if (dst == 0) {
					hitroot = 1;
					if (!relative && src == end)
						dst++;
				}
				*changed = 1;
				if (done)
					break;
				src++;
			} else if (dst == 0) {  /* "./" at the start of a relative path */
				*changed = 1;
				if (done)
					break;
				src++;
			} else if (p[dst - 1] == '/') {  /* "/./" */
				*changed = 1;
				if (done)
					break;
				dst--;
				src++;
			}
		} else if (dst > 0) {
			hitroot = 0;
		}
copy:
		if (p[src] == '/') {
			size_t from = src;
			while (src < end && (p[src + 1] == '/' || (win && p[src + 1] == '\\')))
				src++;
			if (from != src)
				*changed = 1;
			if (relative && dst == 0) {  /* a relative path does not begin with a slash */
				src++;
				continue;
			}
		}
		p[dst++] = p[src++];
	}
	if (!trailing && dst > 0 && p[dst - 1] == '/')
		dst--;
	return dst;
}

static size_t cmd_line(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t k = 0;
	int space = 0;
	for (size_t i = 0; i < n && s[i]; i++) {  /* ModSecurity stops at a NUL */
		unsigned char c = s[i];
		switch (c) {
		case '"': case '\'': case '\\': case '^':
			continue;
		case ' ': case ',': case ';': case '\t': case '\r': case '\n':
			if (!space) {
				d[k++] = ' ';
				space = 1;
			}
			break;
		case '/': case '(':
			if (space)
				k--;
			space = 0;
			d[k++] = c;
			break;
		default:
			d[k++] = c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
			space = 0;
		}
	}
	return k;
}

static const signed char b64_std[256] = {
	['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8, ['I'] = 9,
	['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17,
	['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25,
	['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33,
	['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41,
	['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
	['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56, ['4'] = 57,
	['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};  /* value + 1; 0 = not in the alphabet */

/* APR's decoder: the run of alphabet characters from the start, in
 * groups of four; a last group of one character gives nothing. */
static size_t b64_decode(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t run = 0, k = 0;
	while (run < n && b64_std[s[run]])
		run++;
	unsigned v = 0;
	size_t q = 0;
	for (size_t i = 0; i < run; i++) {
		v = v << 6 | (unsigned)(b64_std[s[i]] - 1);
		if (++q == 4) {
			d[k++] = (unsigned char)(v >> 16);
			d[k++] = (unsigned char)(v >> 8);
			d[k++] = (unsigned char)v;
			v = 0;
			q = 0;
		}
	}
	if (q >= 2)
		d[k++] = (unsigned char)(v >> (q == 2 ? 4 : 10));
	if (q == 3)
		d[k++] = (unsigned char)(v >> 2);
	return k;
}

/* base64DecodeExt: characters outside the alphabet are skipped; a '='
 * after one character of a group, not followed by another '=', gives an
 * empty result. */
static size_t b64_decode_ext(const unsigned char *s, size_t n, unsigned char *d)
{
	size_t i = 0, k = 0;
	unsigned v = 0;
	for (size_t p = 0; p < n && s[p]; p++) {
		if (s[p] == '=') {
			if ((p + 1 >= n || s[p + 1] != '=') && i % 4 == 1)
				return 0;
			continue;
		}
		if (!b64_std[s[p]])
			continue;
		v = v << 6 | (unsigned)(b64_std[s[p]] - 1);
		switch (i % 4) {
		case 1: d[k++] = (unsigned char)(v >> 4); break;
		case 2: d[k++] = (unsigned char)(v >> 2); break;
		case 3: d[k++] = (unsigned char)v; break;
		default: break;
		}
		i++;
	}
	return k;
}

static void hex_encode(const unsigned char *s, size_t n, struct buf *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char *d = out_room(out, n * 2);
	for (size_t i = 0; i < n; i++) {
		d[2 * i] = (unsigned char)hex[s[i] >> 4];
		d[2 * i + 1] = (unsigned char)hex[s[i] & 15];
	}
	out->len = n * 2;
}

/* utf8toUnicode: each valid multi-byte UTF-8 sequence becomes %uHHHH
 * (lowercase hex, at least four digits); other bytes stay. ModSecurity's
 * own corners are kept: a four-byte sequence's third byte enters the code
 * point as a comparison, not a shift; and a surrogate or overlong code
 * point is followed by its first byte again. */
static void utf8_to_unicode(const unsigned char *s, size_t n, struct buf *out, int *changed)
{
	unsigned char *d = out_room(out, n * 7);
	size_t k = 0, i = 0;
	while (i < n) {
		unsigned char c = s[i];
		unsigned cp = 0;
		size_t len = 0;
		if (c < 0x80) {
			d[k++] = c;
		} else if ((c & 0xE0) == 0xC0) {
			if (n - i >= 2 && (s[i + 1] & 0xC0) == 0x80) {
				len = 2;
				cp = (unsigned)(c & 0x1F) << 6 | (s[i + 1] & 0x3F);
			}
		} else if ((c & 0xF0) == 0xE0) {
			if (n - i >= 3 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
				len = 3;
				cp = (unsigned)(c & 0x0F) << 12 | (unsigned)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
			}
		} else if ((c & 0xF8) == 0xF0) {
			if (c >= 0xF5)
				d[k++] = c;
			if (n - i >= 4 && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
				len = 4;
				cp = (unsigned)(c & 0x07) << 18 | (unsigned)(s[i + 1] & 0x3F) << 12 |
				     (unsigned)((s[i + 2] & 0x3F) < 6) | (s[i + 3] & 0x3F);
			}
		} else {
			d[k++] = c;
		}
		if (len) {
			char hex[16];
			int h = snprintf(hex, sizeof(hex), "%x", cp);
			d[k++] = '%';
			d[k++] = 'u';
			for (int z = h; z < 4; z++)
				d[k++] = '0';
			memcpy(d + k, hex, (size_t)h);
			k += (size_t)h;
			*changed = 1;
		}
		if (cp >= 0xD800 && cp <= 0xDFFF)
			d[k++] = c;
		if ((len == 4 && cp < 0x10000) || (len == 3 && cp < 0x800) || (len == 2 && cp < 0x80))
			d[k++] = c;
		i += len ? len : 1;
	}
	out->len = k;
}

int sectfn_supported(enum sl_tfn t)
{
	if (t == SL_TFN_MD5) {
		/* a FIPS-restricted OpenSSL 3 may have no MD5: then t:md5 is an
		 * error at load, never a digest of zeros per value */
		static int md5_ok = -1;
		unsigned char dg[MD5_DIGEST_LENGTH];
		if (md5_ok < 0)
			md5_ok = EVP_Digest("", 0, dg, NULL, EVP_md5(), NULL) == 1;
		return md5_ok;
	}
	return t != SL_TFN_REMOVE_COMMENTS && t < SL_TFN__COUNT;
}

static int parity_bit(unsigned char c)
{
	c ^= (unsigned char)(c >> 4);
	c &= 0xf;
	return (0x6996 >> c) & 1;
}

static int is_ws(unsigned char c)
{
	return c_isspace(c) || c == NBSP;
}

int sectfn_unchanged(enum sl_tfn t, const char *in, size_t n)
{
	const unsigned char *s = (const unsigned char *)in;
	switch (t) {
	case SL_TFN_LOWERCASE:
		for (size_t i = 0; i < n; i++)
			if (s[i] >= 'A' && s[i] <= 'Z')
				return 0;
		return 1;
	case SL_TFN_URL_DECODE:
	case SL_TFN_URL_DECODE_UNI:
		return !memchr(s, '%', n) && !memchr(s, '+', n);
	case SL_TFN_HTML_ENTITY_DECODE:
		return !memchr(s, '&', n);
	case SL_TFN_JS_DECODE:
	case SL_TFN_CSS_DECODE:
		return !memchr(s, '\\', n);
	case SL_TFN_REMOVE_NULLS:
	case SL_TFN_REPLACE_NULLS:
		return !memchr(s, 0, n);
	case SL_TFN_REPLACE_COMMENTS:
		return !memmem(s, n, "/*", 2);
	case SL_TFN_UTF8_TO_UNICODE:
		for (size_t i = 0; i < n; i++)
			if (s[i] >= 0x80)
				return 0;
		return 1;
	case SL_TFN_REMOVE_WHITESPACE:
		for (size_t i = 0; i < n; i++)
			if (is_ws(s[i]))
				return 0;
		return 1;
	case SL_TFN_COMPRESS_WHITESPACE:  /* unchanged when every run of whitespace is one ' ' */
		for (size_t i = 0; i < n; i++)
			if (s[i] == ' ' ? i + 1 < n && is_ws(s[i + 1]) : is_ws(s[i]))
				return 0;
		return 1;
	case SL_TFN_TRIM:
		return n == 0 || (!c_isspace(s[0]) && !c_isspace(s[n - 1]));
	case SL_TFN_TRIM_LEFT:
		return n == 0 || !c_isspace(s[0]);
	case SL_TFN_TRIM_RIGHT:
		return n == 0 || !c_isspace(s[n - 1]);
	case SL_TFN_NORMALISE_PATH_WIN:
	case SL_TFN_NORMALIZE_PATH_WIN:
		if (memchr(s, '\\', n))
			return 0;
		/* fall through */
	case SL_TFN_NORMALISE_PATH:
	case SL_TFN_NORMALIZE_PATH:
		/* with no separator, only a value that is "." or ends with ".."
		 * has a segment to resolve */
		return !memchr(s, '/', n) && !(n && s[n - 1] == '.' && (n == 1 || s[n - 2] == '.'));
	default:
		return 0;
	}
}

/* Per byte, the features it gives a value (F_SLASH: a comment may start). */
enum { F_SLASH = 1u << 16 };
static const uint32_t byte_features[256] = {
	[0] = SECTFN_F_NUL,
	['\t'] = SECTFN_F_WS, ['\n'] = SECTFN_F_WS, ['\v'] = SECTFN_F_WS, ['\f'] = SECTFN_F_WS, ['\r'] = SECTFN_F_WS,
	[' '] = SECTFN_F_WS,
	['%'] = SECTFN_F_PCT_PLUS, ['+'] = SECTFN_F_PCT_PLUS, ['&'] = SECTFN_F_AMP, ['\\'] = SECTFN_F_BSLASH,
	['/'] = F_SLASH | SECTFN_F_PATH,
	['A' ... 'Z'] = SECTFN_F_UPPER,
	[0x80 ... 0x9f] = SECTFN_F_HIGH, [NBSP] = SECTFN_F_HIGH | SECTFN_F_WS, [0xa1 ... 0xff] = SECTFN_F_HIGH,
};

static v16s v16_ws(v16 c)
{
	return (v16s)(c == ' ') | (v16s)(c - (unsigned char)'\t' < 5) | (v16s)(c == NBSP);
}

uint32_t sectfn_features(const char *in, size_t n)
{
	const unsigned char *s = (const unsigned char *)in;
	uint32_t f = 0;
	size_t i = 0;
	if (n >= 17) {
		v16s up = { 0 }, pp = { 0 }, amp = { 0 }, bs = { 0 }, nul = { 0 }, hi = { 0 }, ws = { 0 }, com = { 0 }, cmp = { 0 },
		     sl = { 0 };
		for (; i + 17 <= n; i += 16) {
			v16 c, d;  /* d: the bytes that follow c's */
			memcpy(&c, s + i, sizeof(c));
			memcpy(&d, s + i + 1, sizeof(d));
			v16s w = v16_ws(c), sp = (v16s)(c == ' ');
			up |= (v16s)(c - (unsigned char)'A' < 26);
			pp |= (v16s)(c == '%') | (v16s)(c == '+');
			amp |= (v16s)(c == '&');
			bs |= (v16s)(c == '\\');
			nul |= (v16s)(c == 0);
			hi |= (v16s)(c >= 0x80);
			ws |= w;
			sl |= (v16s)(c == '/');
			com |= (v16s)(c == '/') & (v16s)(d == '*');
			cmp |= (w & ~sp) | (sp & v16_ws(d));
		}
		f |= (v16_any(up) ? SECTFN_F_UPPER : 0) | (v16_any(pp) ? SECTFN_F_PCT_PLUS : 0) |
		     (v16_any(amp) ? SECTFN_F_AMP : 0) | (v16_any(bs) ? SECTFN_F_BSLASH : 0) | (v16_any(nul) ? SECTFN_F_NUL : 0) |
		     (v16_any(hi) ? SECTFN_F_HIGH : 0) | (v16_any(ws) ? SECTFN_F_WS : 0) |
		     (v16_any(com) ? SECTFN_F_COMMENT : 0) | (v16_any(cmp) ? SECTFN_F_COMPRESS : 0) |
		     (v16_any(sl) ? SECTFN_F_PATH : 0);
	}
	for (; i < n; i++) {
		uint32_t b = byte_features[s[i]];
		f |= b;
		if (!(b & (F_SLASH | SECTFN_F_WS)))
			continue;
		if (s[i] == '/' && i + 1 < n && s[i + 1] == '*')
			f |= SECTFN_F_COMMENT;
		if ((b & SECTFN_F_WS) && (s[i] != ' ' || (i + 1 < n && is_ws(s[i + 1]))))
			f |= SECTFN_F_COMPRESS;
	}
	if (n && c_isspace(s[0]))
		f |= SECTFN_F_TRIM_L;
	if (n && c_isspace(s[n - 1]))
		f |= SECTFN_F_TRIM_R;
	if (n && s[n - 1] == '.' && (n == 1 || s[n - 2] == '.'))
		f |= SECTFN_F_PATH;
	return f & ~(uint32_t)F_SLASH;
}

int sectfn_unchanged_f(enum sl_tfn t, uint32_t f)
{
	switch (t) {
	case SL_TFN_LOWERCASE: return !(f & SECTFN_F_UPPER);
	case SL_TFN_URL_DECODE:
	case SL_TFN_URL_DECODE_UNI: return !(f & SECTFN_F_PCT_PLUS);
	case SL_TFN_HTML_ENTITY_DECODE: return !(f & SECTFN_F_AMP);
	case SL_TFN_JS_DECODE:
	case SL_TFN_CSS_DECODE: return !(f & SECTFN_F_BSLASH);
	case SL_TFN_REMOVE_NULLS:
	case SL_TFN_REPLACE_NULLS: return !(f & SECTFN_F_NUL);
	case SL_TFN_REPLACE_COMMENTS: return !(f & SECTFN_F_COMMENT);
	case SL_TFN_UTF8_TO_UNICODE: return !(f & SECTFN_F_HIGH);
	case SL_TFN_REMOVE_WHITESPACE: return !(f & SECTFN_F_WS);
	case SL_TFN_COMPRESS_WHITESPACE: return !(f & SECTFN_F_COMPRESS);
	case SL_TFN_TRIM: return !(f & (SECTFN_F_TRIM_L | SECTFN_F_TRIM_R));
	case SL_TFN_TRIM_LEFT: return !(f & SECTFN_F_TRIM_L);
	case SL_TFN_TRIM_RIGHT: return !(f & SECTFN_F_TRIM_R);
	case SL_TFN_NORMALISE_PATH:
	case SL_TFN_NORMALIZE_PATH: return !(f & SECTFN_F_PATH);
	case SL_TFN_NORMALISE_PATH_WIN:
	case SL_TFN_NORMALIZE_PATH_WIN: return !(f & (SECTFN_F_PATH | SECTFN_F_BSLASH));
	default: return 0;
	}
}

/* S's N bytes into D with ASCII capitals lowered (UPPER: small letters
 * raised), sixteen at a time; whether any changed. */
static int change_case(const unsigned char *s, size_t n, unsigned char *d, int upper)
{
	const unsigned char from = upper ? 'a' : 'A';
	v16s any = { 0 };
	size_t i = 0;
	for (; i + 16 <= n; i += 16) {
		v16 c;
		memcpy(&c, s + i, sizeof(c));
		v16s m = (v16s)(c - from < 26);
		any |= m;
		c = upper ? c - ((v16)m & 32) : c + ((v16)m & 32);
		memcpy(d + i, &c, sizeof(c));
	}
	int changed = v16_any(any);
	for (; i < n; i++) {
		unsigned char c = s[i];
		if ((unsigned char)(c - from) < 26) {
			c = upper ? (unsigned char)(c - 32) : (unsigned char)(c + 32);
			changed = 1;
		}
		d[i] = c;
	}
	return changed;
}

int sectfn_apply(enum sl_tfn t, const char *in, size_t n, struct buf *out)
{
	const unsigned char *s = (const unsigned char *)in;
	unsigned char *d;
	size_t k = 0;
	int changed = 0;
	switch (t) {
	case SL_TFN_NONE:
		out->len = 0;
		buf_append(out, in, n);
		return 0;
	case SL_TFN_LOWERCASE:
	case SL_TFN_UPPERCASE:
		changed = change_case(s, n, out_room(out, n), t == SL_TFN_UPPERCASE);
		k = n;
		break;
	case SL_TFN_TRIM:
	case SL_TFN_TRIM_LEFT:
	case SL_TFN_TRIM_RIGHT: {
		size_t a = 0, b = n;
		if (t != SL_TFN_TRIM_RIGHT)
			while (a < b && c_isspace(s[a]))
				a++;
		if (t != SL_TFN_TRIM_LEFT)
			while (b > a && c_isspace(s[b - 1]))
				b--;
		d = out_room(out, b - a);
		memcpy(d, s + a, b - a);
		k = b - a;
		changed = k != n;
		break;
	}
	case SL_TFN_REMOVE_NULLS:
	case SL_TFN_REPLACE_NULLS:
		d = out_room(out, n);
		for (size_t i = 0; i < n; i++) {
			if (s[i] == 0) {
				changed = 1;
				if (t == SL_TFN_REPLACE_NULLS)
					d[k++] = ' ';
			} else {
				d[k++] = s[i];
			}
		}
		break;
	case SL_TFN_COMPRESS_WHITESPACE: {
		d = out_room(out, n);
		int inws = 0;
		size_t count = 0;
		for (size_t i = 0; i < n; i++) {
			if (c_isspace(s[i]) || s[i] == NBSP) {
				changed |= inws;
				inws = 1;
				count++;
			} else {
				inws = 0;
				if (count) {
					d[k++] = ' ';
					count = 0;
				}
				d[k++] = s[i];
			}
		}
		if (count)
			d[k++] = ' ';
		break;
	}
	case SL_TFN_REMOVE_WHITESPACE:
		d = out_room(out, n);
		for (size_t i = 0; i < n; i++) {
			if (c_isspace(s[i]) || s[i] == NBSP)
				changed = 1;
			else
				d[k++] = s[i];
		}
		break;
	case SL_TFN_REPLACE_COMMENTS: {
		d = out_room(out, n);
		int incomment = 0;
		size_t i = 0;
		while (i < n) {
			if (!incomment) {
				if (s[i] == '/' && i + 1 < n && s[i + 1] == '*') {
					changed = 1;
					incomment = 1;
					i += 2;
				} else {
					d[k++] = s[i++];
				}
			} else if (s[i] == '*' && i + 1 < n && s[i + 1] == '/') {
				incomment = 0;
				i += 2;
				d[k++] = ' ';
			} else {
				i++;
			}
		}
		if (incomment)
			d[k++] = ' ';
		break;
	}
	case SL_TFN_REMOVE_COMMENTS_CHAR: {
		d = out_room(out, n);
		size_t i = 0;
		while (i < n) {
			if (s[i] == '/' && i + 1 < n && s[i + 1] == '*')
				i += 2;
			else if (s[i] == '*' && i + 1 < n && s[i + 1] == '/')
				i += 2;
			else if (s[i] == '<' && i + 3 < n && s[i + 1] == '!' && s[i + 2] == '-' && s[i + 3] == '-')
				i += 4;
			else if (s[i] == '-' && i + 2 < n && s[i + 1] == '-' && s[i + 2] == '>')
				i += 3;
			else if (s[i] == '-' && i + 1 < n && s[i + 1] == '-')
				i += 2;
			else if (s[i] == '#')
				i++;
			else
				d[k++] = s[i++];
		}
		changed = k != n;
		break;
	}
	case SL_TFN_URL_DECODE:
	case SL_TFN_URL_DECODE_UNI:
		k = url_decode(s, n, out_room(out, n), t == SL_TFN_URL_DECODE_UNI, &changed);
		break;
	case SL_TFN_JS_DECODE:
		k = js_decode(s, n, out_room(out, n));
		changed = k != n;
		break;
	case SL_TFN_CSS_DECODE:
		k = css_decode(s, n, out_room(out, n));
		changed = k != n;
		break;
	case SL_TFN_HTML_ENTITY_DECODE:
		k = html_decode(s, n, out_room(out, n));
		changed = k != n;
		break;
	case SL_TFN_ESCAPE_SEQ_DECODE:
		k = escape_seq_decode(s, n, out_room(out, n));
		changed = k != n;
		break;
	case SL_TFN_NORMALISE_PATH:
	case SL_TFN_NORMALIZE_PATH:
	case SL_TFN_NORMALISE_PATH_WIN:
	case SL_TFN_NORMALIZE_PATH_WIN:
		d = out_room(out, n);
		memcpy(d, s, n);
		k = normalize_path(d, n, t == SL_TFN_NORMALISE_PATH_WIN || t == SL_TFN_NORMALIZE_PATH_WIN, &changed);
		break;
	case SL_TFN_CMD_LINE:
		k = cmd_line(s, n, d = out_room(out, n));
		changed = 1;  /* ModSecurity reports every cmdLine as a change */
		break;
	case SL_TFN_HEX_DECODE:
		d = out_room(out, n / 2);
		for (size_t i = 0; i + 2 <= n; i += 2)
			d[k++] = x2c(s + i);
		changed = 1;
		break;
	case SL_TFN_SQL_HEX_DECODE: {
		d = out_room(out, n);
		size_t i = 0;
		while (i < n && s[i]) {
			if (s[i] == '0' && i + 3 < n && (s[i + 1] | 0x20) == 'x' && hex_value(s[i + 2]) >= 0 && hex_value(s[i + 3]) >= 0) {
				i += 2;
				while (i + 1 < n && hex_value(s[i]) >= 0 && hex_value(s[i + 1]) >= 0) {
					d[k++] = x2c(s + i);
					i += 2;
				}
				/* the byte after the run is copied as it is, even
				 * a '0' that starts another 0x (ModSecurity's walk) */
				if (i < n)
					d[k++] = s[i++];
				continue;
			}
			d[k++] = s[i++];
		}
		/* ModSecurity measures the result with strlen */
		void *nul = memchr(d, 0, k);
		if (nul)
			k = (size_t)((unsigned char *)nul - d);
		changed = 1;  /* as ModSecurity reports it */
		break;
	}
	case SL_TFN_BASE64_DECODE:
		k = b64_decode(s, n, out_room(out, n));
		changed = k != 0;
		break;
	case SL_TFN_BASE64_DECODE_EXT:
		k = b64_decode_ext(s, n, out_room(out, n));
		changed = k != 0;
		break;
	case SL_TFN_BASE64_ENCODE:
		out->len = 0;
		buf_append_base64(out, in, n);
		return out->len != 0;
	case SL_TFN_HEX_ENCODE:
		hex_encode(s, n, out);
		return 1;
	case SL_TFN_URL_ENCODE: {
		static const char hex[] = "0123456789abcdef";
		d = out_room(out, n * 3);
		for (size_t i = 0; i < n && s[i]; i++) {
			unsigned char c = s[i];
			if (c == ' ') {
				d[k++] = '+';
				changed = 1;
			} else if (c == '*' || (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')) {
				d[k++] = c;
			} else {
				d[k++] = '%';
				d[k++] = (unsigned char)hex[c >> 4];
				d[k++] = (unsigned char)hex[c & 15];
				changed = 1;
			}
		}
		break;
	}
	case SL_TFN_UTF8_TO_UNICODE:
		utf8_to_unicode(s, n, out, &changed);
		return changed;
	case SL_TFN_LENGTH:
		out->len = 0;
		buf_appendf(out, "%zu", n);
		return 1;
	/* the TLS library's digests: assembly where the CPU has the
	 * instructions (t:sha1 runs on every User-Agent in CRS's setup) */
	case SL_TFN_SHA1: {
		unsigned char dg[SHA_DIGEST_LENGTH];
		SHA1((const unsigned char *)s, n, dg);
		out->len = 0;
		buf_append(out, dg, sizeof(dg));
		return 1;
	}
	case SL_TFN_MD5: {
		unsigned char dg[MD5_DIGEST_LENGTH];  /* MD5() is deprecated in OpenSSL 3 */
		if (!EVP_Digest(s, n, dg, NULL, EVP_md5(), NULL))
			memset(dg, 0, sizeof(dg));
		out->len = 0;
		buf_append(out, dg, sizeof(dg));
		return 1;
	}
	case SL_TFN_PARITY_EVEN_7BIT:
	case SL_TFN_PARITY_ODD_7BIT:
	case SL_TFN_PARITY_ZERO_7BIT:
		d = out_room(out, n);
		for (size_t i = 0; i < n; i++) {
			unsigned char c = s[i];
			if (t == SL_TFN_PARITY_ZERO_7BIT)
				c &= 0x7f;
			else if (parity_bit(c) == (t == SL_TFN_PARITY_EVEN_7BIT))
				c |= 0x80;
			else
				c &= 0x7f;
			changed |= c != s[i];
			d[i] = c;
		}
		k = n;
		break;
	default:  /* not supported: sectfn_supported says which */
		out->len = 0;
		buf_append(out, in, n);
		return 0;
	}
	out->len = k;
	return changed;
}
