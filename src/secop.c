/* ModSecurity's string and validation operators (secop.h says what). */
#include <limits.h>
#include <string.h>
#include "secop.h"
#include "util.h"

int secop_contains(const char *v, size_t vl, const char *p, size_t pl)
{
	if (pl == 0)
		return 1;
	return pl <= vl && memmem(v, vl, p, pl) != NULL;
}

static int word_char(unsigned char c)
{
	return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
}

int secop_contains_word(const char *v, size_t vl, const char *p, size_t pl)
{
	if (pl == 0)
		return 1;
	if (pl > vl)
		return 0;
	for (size_t i = 0; i + pl <= vl; i++) {
		if (i > 0 && word_char((unsigned char)v[i - 1]))
			continue;
		if (memcmp(v + i, p, pl) == 0 && (i + pl == vl || !word_char((unsigned char)v[i + pl])))
			return 1;
	}
	return 0;
}

int secop_begins_with(const char *v, size_t vl, const char *p, size_t pl)
{
	return pl == 0 || (pl <= vl && memcmp(v, p, pl) == 0);
}

int secop_ends_with(const char *v, size_t vl, const char *p, size_t pl)
{
	return pl == 0 || (pl <= vl && memcmp(v + vl - pl, p, pl) == 0);
}

int secop_streq(const char *v, size_t vl, const char *p, size_t pl)
{
	return vl == pl && memcmp(v, p, pl) == 0;
}

int secop_within(const char *v, size_t vl, const char *p, size_t pl)
{
	if (vl == 0)
		return 1;
	return vl <= pl && memmem(p, pl, v, vl) != NULL;
}

int secop_atoi(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n && c_isspace((unsigned char)s[i]))
		i++;
	int neg = 0;
	if (i < n && (s[i] == '+' || s[i] == '-'))
		neg = s[i++] == '-';
	unsigned long long v = 0;
	int sat = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		v = v * 10 + (unsigned)(s[i] - '0');
		if (v > (unsigned long long)LONG_MAX + (unsigned)neg) {
			sat = 1;
			break;
		}
	}
	long l = sat ? (neg ? LONG_MIN : LONG_MAX) : neg ? (long)(0 - v) : (long)v;
	return (int)(unsigned int)(unsigned long)l;  /* the conversion atoi makes, two's complement */
}

int secop_validate_byte_range(const uint8_t allowed[32], const char *v, size_t vl)
{
	for (size_t i = 0; i < vl; i++) {
		unsigned char c = (unsigned char)v[i];
		if (!(allowed[c >> 3] & (1u << (c & 7))))
			return 1;
	}
	return 0;
}

int secop_validate_url_encoding(const char *v, size_t vl)
{
	for (size_t i = 0; i < vl;) {
		if (v[i] != '%') {
			i++;
			continue;
		}
		if (i + 2 >= vl || hex_value((unsigned char)v[i + 1]) < 0 || hex_value((unsigned char)v[i + 2]) < 0)
			return 1;
		i += 3;
	}
	return 0;
}

int secop_validate_utf8(const char *v, size_t vl)
{
	const unsigned char *s = (const unsigned char *)v;
	size_t i = 0;
	while (i < vl) {
		unsigned char c = s[i];
		size_t n;
		unsigned cp;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			n = 2;
			cp = c & 0x1F;
		} else if ((c & 0xF0) == 0xE0) {
			n = 3;
			cp = c & 0x0F;
		} else if ((c & 0xF8) == 0xF0) {
			if (c >= 0xF5)
				return 1;
			n = 4;
			cp = c & 0x07;
		} else {
			return 1;
		}
		if (vl - i < n)
			return 1;
		for (size_t k = 1; k < n; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 1;
			cp = cp << 6 | (s[i + k] & 0x3F);
		}
		if ((cp >= 0xD800 && cp <= 0xDFFF) || (n == 4 && cp < 0x10000) || (n == 3 && cp < 0x800) ||
		    (n == 2 && cp < 0x80))
			return 1;
		i += n;
	}
	return 0;
}

static int ci_at(const char *v, const char *p, size_t pl)
{
	for (size_t k = 0; k < pl; k++) {
		unsigned char a = (unsigned char)v[k];
		if (a >= 'A' && a <= 'Z')
			a = (unsigned char)(a + 32);
		if (a != (unsigned char)p[k])
			return 0;
	}
	return 1;
}

int secop_pm(char *const *phrases, size_t n, const char *v, size_t vl, size_t *which)
{
	for (size_t i = 0; i < vl; i++)
		for (size_t k = 0; k < n; k++) {
			size_t pl = strlen(phrases[k]);
			if (pl && pl <= vl - i && ci_at(v + i, phrases[k], pl)) {
				*which = k;
				return 1;
			}
		}
	return 0;
}
