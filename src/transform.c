/* Rule transformations, each in place: a reader index R and a writer index
 * W <= R walk the string once. */
#include <string.h>
#include "transform.h"
#include "util.h"

static const char *const step_names[] = {
#define XFORM_NAME(id, name) name,
	XFORM_STEPS(XFORM_NAME)
#undef XFORM_NAME
};

int xform_parse(const char *spec, size_t len, uint8_t *steps, int max, const char **bad, size_t *badlen)
{
	int n = 0;
	size_t i = 0;
	while (i <= len) {
		size_t j = i;
		while (j < len && spec[j] != ',')
			j++;
		size_t a = i, b = j;
		while (a < b && (spec[a] == ' ' || spec[a] == '\t'))
			a++;
		while (b > a && (spec[b - 1] == ' ' || spec[b - 1] == '\t'))
			b--;
		int found = -1;
		for (int s = 0; s < XF__COUNT && b > a; s++)
			if (strlen(step_names[s]) == b - a && memcmp(step_names[s], spec + a, b - a) == 0)
				found = s;
		if (found < 0 || n == max) {
			*bad = spec + a;
			*badlen = b - a;
			return -1;
		}
		steps[n++] = (uint8_t)found;
		i = j + 1;
	}
	return n;
}

static size_t urldecode(char *p, size_t n, int uni)
{
	size_t r = 0, w = 0;
	while (r < n) {
		unsigned char c = (unsigned char)p[r];
		if (c == '%' && r + 2 < n && hex_value((unsigned char)p[r + 1]) >= 0 &&
		    hex_value((unsigned char)p[r + 2]) >= 0) {
			p[w++] = (char)(hex_value((unsigned char)p[r + 1]) * 16 + hex_value((unsigned char)p[r + 2]));
			r += 3;
		} else if (uni && c == '%' && r + 5 < n && (p[r + 1] == 'u' || p[r + 1] == 'U') &&
			   hex_value((unsigned char)p[r + 2]) >= 0 && hex_value((unsigned char)p[r + 3]) >= 0 &&
			   hex_value((unsigned char)p[r + 4]) >= 0 && hex_value((unsigned char)p[r + 5]) >= 0) {
			unsigned long cp = 0;
			for (int k = 2; k < 6; k++)
				cp = cp * 16 + (unsigned long)hex_value((unsigned char)p[r + k]);
			/* Full-width ASCII (U+FF01..FF5E) is what IIS maps %uFF0E to '.'. */
			if (cp >= 0xFF01 && cp <= 0xFF5E)
				cp -= 0xFEE0;
			w += utf8_encode(p + w, cp);
			r += 6;
		} else {
			p[w++] = uni && c == '+' ? ' ' : (char)c;
			r++;
		}
	}
	return w;
}

/* Bytes R.. of P (N in all) start with LIT (lowercase), case-insensitively. */
static int starts_ci(const char *p, size_t r, size_t n, const char *lit)
{
	size_t l = strlen(lit);
	if (n - r < l)
		return 0;
	for (size_t i = 0; i < l; i++) {
		char c = p[r + i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c + 32);
		if (c != lit[i])
			return 0;
	}
	return 1;
}

static size_t htmldecode(char *p, size_t n)
{
	static const struct { const char *name; char c; } named[] = {
		{ "&lt;", '<' }, { "&gt;", '>' }, { "&amp;", '&' }, { "&quot;", '"' },
		{ "&apos;", '\'' }, { "&nbsp;", ' ' },
	};
	size_t r = 0, w = 0;
	while (r < n) {
		if (p[r] != '&') {
			p[w++] = p[r++];
			continue;
		}
		size_t k;
		for (k = 0; k < sizeof(named) / sizeof(named[0]); k++)
			if (starts_ci(p, r, n, named[k].name))
				break;
		if (k < sizeof(named) / sizeof(named[0])) {
			r += strlen(named[k].name);
			p[w++] = named[k].c;
			continue;
		}
		/* &#NN; or &#xHH; -- the ';' is optional, as browsers allow. */
		if (r + 2 < n && p[r + 1] == '#') {
			size_t q = r + 2;
			int hex = q < n && (p[q] == 'x' || p[q] == 'X');
			if (hex)
				q++;
			unsigned long cp = 0;
			size_t digits = 0;
			while (q < n && digits < 8) {
				int v = hex ? hex_value((unsigned char)p[q]) : (p[q] >= '0' && p[q] <= '9' ? p[q] - '0' : -1);
				if (v < 0)
					break;
				cp = cp * (hex ? 16 : 10) + (unsigned long)v;
				q++;
				digits++;
			}
			if (digits) {
				while (q < n && digits >= 8 && (hex ? hex_value((unsigned char)p[q]) >= 0 : p[q] >= '0' && p[q] <= '9')) {
					q++;  /* absurdly long: swallow the rest */
					cp = 0x110000;
				}
				if (q < n && p[q] == ';')
					q++;
				/* The encoding is at least as long as its UTF-8 ("&#9" is 3
				 * bytes for 1; "&#128" 5 for 2; ...), so W stays <= R. */
				w += utf8_encode(p + w, cp);
				r = q;
				continue;
			}
		}
		p[w++] = p[r++];
	}
	return w;
}

static int is_ws(unsigned char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static size_t compress_ws(char *p, size_t n)
{
	size_t w = 0;
	int in_ws = 0;
	for (size_t r = 0; r < n; r++) {
		if (is_ws((unsigned char)p[r])) {
			if (!in_ws)
				p[w++] = ' ';
			in_ws = 1;
		} else {
			p[w++] = p[r];
			in_ws = 0;
		}
	}
	return w;
}

static size_t remove_if(char *p, size_t n, int ws)
{
	size_t w = 0;
	for (size_t r = 0; r < n; r++)
		if (ws ? !is_ws((unsigned char)p[r]) : p[r] != '\0')
			p[w++] = p[r];
	return w;
}

static int b64val(unsigned char c)
{
	if (c >= 'A' && c <= 'Z') return c - 'A';
	if (c >= 'a' && c <= 'z') return c - 'a' + 26;
	if (c >= '0' && c <= '9') return c - '0' + 52;
	if (c == '+' || c == '-') return 62;
	if (c == '/' || c == '_') return 63;
	return -1;
}

static size_t b64decode(char *p, size_t n)
{
	size_t w = 0;
	unsigned acc = 0;
	int bits = 0;
	for (size_t r = 0; r < n; r++) {
		int v = b64val((unsigned char)p[r]);
		if (v < 0)
			break;  /* '=' padding or garbage: what came before is the result */
		acc = (acc << 6) | (unsigned)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			p[w++] = (char)((acc >> bits) & 0xFF);
		}
	}
	return w;
}

static size_t normalize_path(char *p, size_t n)
{
	size_t r = 0, w = 0;
	while (r < n) {
		if (p[r] == '/') {
			if (r + 1 < n && p[r + 1] == '/') {        /* "//" */
				r++;
				continue;
			}
			if (r + 1 < n && p[r + 1] == '.' && (r + 2 == n || p[r + 2] == '/')) {  /* "/." */
				r += 2;
				if (r == n)
					p[w++] = '/';
				continue;
			}
			if (r + 2 < n && p[r + 1] == '.' && p[r + 2] == '.' && (r + 3 == n || p[r + 3] == '/')) {
				/* "/.." : back to the previous '/', never before the start */
				while (w > 0 && p[w - 1] != '/')
					w--;
				if (w > 0)
					w--;
				r += 3;
				if (r == n)
					p[w++] = '/';
				continue;
			}
		}
		p[w++] = p[r++];
	}
	return w;
}

static size_t trim(char *p, size_t n)
{
	size_t a = 0;
	while (a < n && is_ws((unsigned char)p[a]))
		a++;
	while (n > a && is_ws((unsigned char)p[n - 1]))
		n--;
	if (a)
		memmove(p, p + a, n - a);
	return n - a;
}

/* Four hex digits at P[R..R+3] (the caller checked they are there): their
 * value, or -1. */
static long hex4(const char *p, size_t r)
{
	long v = 0;
	for (size_t k = 0; k < 4; k++) {
		int h = hex_value((unsigned char)p[r + k]);
		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

/* JSON string escapes, as a JSON parser reads them. A surrogate pair
 * (\uD83D\uDE00) becomes one code point; a lone surrogate becomes U+FFFD.
 * Anything else after a backslash (\x, \u12, a trailing \) stays as it is.
 * "\uXXXX" is 6 bytes for at most 3 of UTF-8, a pair 12 for 4: W stays <= R. */
static size_t jsondecode(char *p, size_t n)
{
	static const char simple[] = "\"\"\\\\//b\bf\fn\nr\rt\t";
	size_t r = 0, w = 0;
	while (r < n) {
		if (p[r] != '\\' || r + 1 == n) {
			p[w++] = p[r++];
			continue;
		}
		char e = p[r + 1];
		const char *m = NULL;
		for (size_t k = 0; simple[k]; k += 2)
			if (simple[k] == e) {
				m = simple + k;
				break;
			}
		if (m) {
			p[w++] = m[1];
			r += 2;
			continue;
		}
		long cp = e == 'u' && n - r >= 6 ? hex4(p, r + 2) : -1;
		if (cp < 0) {
			p[w++] = p[r++];  /* not an escape: the backslash stays */
			continue;
		}
		r += 6;
		if (cp >= 0xD800 && cp <= 0xDBFF && n - r >= 6 && p[r] == '\\' && p[r + 1] == 'u') {
			long lo = hex4(p, r + 2);
			if (lo >= 0xDC00 && lo <= 0xDFFF) {
				cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
				r += 6;
			}
		}
		w += utf8_encode(p + w, (unsigned long)cp);  /* a lone surrogate: U+FFFD */
	}
	return w;
}

size_t xform_step(enum xform_step s, char *p, size_t n)
{
	switch (s) {
	case XF_URLDECODE:      return urldecode(p, n, 0);
	case XF_URLDECODE_UNI:  return urldecode(p, n, 1);
	case XF_HTMLDECODE:     return htmldecode(p, n);
	case XF_LOWER:
		for (size_t i = 0; i < n; i++)
			if (p[i] >= 'A' && p[i] <= 'Z')
				p[i] = (char)(p[i] + 32);
		return n;
	case XF_COMPRESS_WS:    return compress_ws(p, n);
	case XF_REMOVE_WS:      return remove_if(p, n, 1);
	case XF_REMOVE_NULLS:   return remove_if(p, n, 0);
	case XF_B64DECODE:      return b64decode(p, n);
	case XF_NORMALIZE_PATH: return normalize_path(p, n);
	case XF_TRIM:           return trim(p, n);
	case XF_JSONDECODE:     return jsondecode(p, n);
	case XF__COUNT:         break;
	}
	return n;
}

size_t xform_apply(const uint8_t *steps, int nsteps, char *p, size_t n)
{
	for (int i = 0; i < nsteps; i++)
		n = xform_step((enum xform_step)steps[i], p, n);
	return n;
}
