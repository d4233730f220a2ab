#include <ctype.h>
#include <string.h>
#include <strings.h>
#include "tlshello.h"

static unsigned u16(const uint8_t *p) { return (unsigned)p[0] << 8 | p[1]; }

int hello_sni(const uint8_t *ext, size_t len, char *out, size_t outlen)
{
	if (ext == NULL || len == 0)
		return 0;
	if (len < 2 || u16(ext) != len - 2)
		return -1;
	const uint8_t *p = ext + 2, *end = ext + len;
	while (p + 3 <= end) {
		unsigned type = p[0], n = u16(p + 1);
		p += 3;
		if (p + n > end)
			return -1;
		if (type == 0) {  /* host_name */
			if (n == 0 || n >= outlen)
				return -1;
			for (unsigned i = 0; i < n; i++) {
				if (p[i] == 0)
					return -1;
				out[i] = (char)tolower(p[i]);
			}
			out[n] = '\0';
			return (int)n;
		}
		p += n;
	}
	return p == end ? 0 : -1;
}

int hello_ecdsa_sigalg(const uint8_t *ext, size_t len, int curve_bits)
{
	if (ext == NULL || len == 0)
		return 0;  /* no extension: RFC 5246 defaults to SHA-1/RSA */
	if (len < 2 || u16(ext) != len - 2 || (len & 1))
		return -1;
	unsigned want = curve_bits == 384 ? 0x0503 : 0x0403;
	for (size_t i = 2; i + 1 < len; i += 2)
		if (u16(ext + i) == want)
			return 1;
	return 0;
}

int hello_offers_tls13(const uint8_t *ext, size_t len)
{
	if (ext == NULL || len == 0)
		return 0;
	if (ext[0] != len - 1 || (ext[0] & 1))
		return -1;
	for (size_t i = 1; i + 1 < len; i += 2)
		if (u16(ext + i) == 0x0304)
			return 1;
	return 0;
}

int hello_any_suite(const uint8_t *suites, size_t len, const uint16_t *ids, size_t n)
{
	for (size_t i = 0; i + 1 < len; i += 2) {
		unsigned s = u16(suites + i);
		for (size_t k = 0; k < n; k++)
			if (s == ids[k])
				return 1;
	}
	return 0;
}

int hello_name_match(const char *pattern, const char *host)
{
	if (pattern[0] == '*' && pattern[1] == '.') {
		const char *dot = strchr(host, '.');
		return dot && dot != host && strcasecmp(dot + 1, pattern + 2) == 0;
	}
	return strcasecmp(pattern, host) == 0;
}
