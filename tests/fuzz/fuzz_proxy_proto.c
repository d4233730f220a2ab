/* libFuzzer target: the PROXY protocol decoder and the encode -> decode
 * round trip (src/proxy_proto.c).
 *
 * The first byte chooses the mode:
 *   even: pp_decode on the rest (v1 or v2, whatever it is), with oracles
 *         beyond "no crash": a complete header's prefixes only ever ask
 *         for more bytes, decoding exactly the header's bytes gives the
 *         same answer as decoding it with trailing bytes, and what it says
 *         is coherent (a non-local header has two addresses of one family);
 *   odd:  addresses, ports, TLV selection and TLV bytes are taken from
 *         the rest; the header is encoded as v1 and as v2, decoded again,
 *         and the decoded addresses must be the ones encoded.
 * Every buffer handed to the decoder is a heap copy of exactly the bytes
 * it may read, so ASan sees any read past the end. */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "proxy_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_proxy_proto: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static ssize_t decode_copy(const uint8_t *p, size_t n, struct pp_decoded *out, const char **why)
{
	uint8_t *copy = malloc(n ? n : 1);
	if (copy == NULL)
		abort();
	memcpy(copy, p, n);
	*why = NULL;
	ssize_t r = pp_decode(copy, n, out, why);
	free(copy);
	if (r < 0 && *why == NULL)
		FAIL("pp_decode returned -1 without a reason");
	return r;
}

static int addr_eq(const struct netaddr *a, const struct netaddr *b)
{
	size_t n = a->family == AF_INET ? 4 : 16;
	return a->family == b->family && a->port == b->port && memcmp(a->ip, b->ip, n) == 0;
}

static void check_decoded(const struct pp_decoded *d)
{
	if (d->version != 1 && d->version != 2)
		FAIL("decoded version %d", d->version);
	if (d->local)
		return;
	if (d->src.family != d->dst.family || (d->src.family != AF_INET && d->src.family != AF_INET6))
		FAIL("non-local header with families %u and %u", d->src.family, d->dst.family);
}

static void decode_mode(const uint8_t *p, size_t n)
{
	struct pp_decoded d, d2;
	const char *why;
	int det = pp_detect(p, n);
	if (det < -1 || det > 1)
		FAIL("pp_detect returned %d", det);
	ssize_t r = decode_copy(p, n, &d, &why);
	if (r > (ssize_t)n)
		FAIL("header length %zd beyond the %zu bytes given", r, n);
	if (r <= 0)
		return;
	if (r > PP_V2_MAX)
		FAIL("header of %zd bytes accepted (max %d)", r, PP_V2_MAX);
	check_decoded(&d);
	/* The header alone decodes the same. */
	ssize_t r2 = decode_copy(p, (size_t)r, &d2, &why);
	if (r2 != r)
		FAIL("header of %zd bytes decodes as %zd on its own", r, r2);
	if (d2.version != d.version || d2.local != d.local || d2.crc_checked != d.crc_checked ||
	    (!d.local && (!addr_eq(&d.src, &d2.src) || !addr_eq(&d.dst, &d2.dst))))
		FAIL("the header decodes differently on its own");
	/* Every shorter prefix only asks for more (a reader waiting for the
	 * rest must never reject, or accept, a header that is still coming). */
	size_t step = r > 64 ? (size_t)r / 32 : 1;
	for (size_t k = 0; k < (size_t)r; k += step) {
		ssize_t rk = decode_copy(p, k, &d2, &why);
		if (rk != 0)
			FAIL("prefix of %zu of a %zd-byte header decodes as %zd (%s)", k, r, rk, rk < 0 ? why : "");
	}
}

/* Input reader for the round trip: runs dry into zeros. */
struct rd {
	const uint8_t *p;
	size_t n;
};

static uint8_t rd_u8(struct rd *r)
{
	if (r->n == 0)
		return 0;
	r->n--;
	return *r->p++;
}

/* A string of up to MAX bytes; NUL-free when CSTR (the SSL sub-TLVs are C strings). */
static size_t rd_str(struct rd *r, char *out, size_t max, int cstr)
{
	size_t len = rd_u8(r);
	if (len > max)
		len = max;
	size_t k = 0;
	for (size_t i = 0; i < len; i++) {
		char c = (char)rd_u8(r);
		if (cstr && c == '\0')
			continue;
		out[k++] = c;
	}
	out[k] = '\0';
	return k;
}

static void rd_addr(struct rd *r, struct netaddr *a)
{
	memset(a, 0, sizeof(*a));
	uint8_t kind = rd_u8(r) % 4;
	a->family = kind == 0 ? 0 : kind == 1 ? AF_INET : AF_INET6;
	for (int i = 0; i < 16; i++)
		a->ip[i] = rd_u8(r);
	if (kind == 1)
		memset(a->ip + 4, 0, 12);
	if (kind == 3) {  /* IPv4-mapped IPv6 */
		memset(a->ip, 0, 10);
		a->ip[10] = a->ip[11] = 0xff;
	}
	a->port = (uint16_t)(rd_u8(r) << 8 | rd_u8(r));
}

/* What the encoder promises to send for A, given the other address B. */
static void expected(const struct netaddr *a, const struct netaddr *b, struct netaddr *out)
{
	struct netaddr ua, ub;
	netaddr_unmap(&ua, a);
	netaddr_unmap(&ub, b);
	*out = ua;
	if (ua.family != ub.family && ua.family == AF_INET) {
		memset(out->ip, 0, 16);
		out->ip[10] = out->ip[11] = 0xff;
		memcpy(out->ip + 12, ua.ip, 4);
		out->family = AF_INET6;
	}
}

static void roundtrip_mode(const uint8_t *p, size_t n)
{
	struct rd r = { p, n };
	struct netaddr src, dst;
	rd_addr(&r, &src);
	rd_addr(&r, &dst);
	static char alpn[256], authority[256], uid[256], ver[256], cn[256], cipher[256], sig[256], key[256];
	struct pp_ssl ssl = { 0 };
	struct pp_header h = { 0 };
	uint8_t sel = rd_u8(&r);
	h.src = sel & 0x80 ? NULL : &src;
	h.dst = sel & 0x40 ? NULL : &dst;
	h.tlvs = sel & 0x1f;
	h.alpn_len = rd_str(&r, alpn, 255, 0);
	h.alpn = alpn;
	h.authority_len = rd_str(&r, authority, 255, 0);
	h.authority = authority;
	h.unique_id_len = rd_str(&r, uid, 255, 0);
	h.unique_id = uid;
	ssl.client = rd_u8(&r);
	ssl.verify = (uint32_t)rd_u8(&r) << 24 | rd_u8(&r);
	rd_str(&r, ver, 255, 1);
	rd_str(&r, cn, 255, 1);
	rd_str(&r, cipher, 255, 1);
	rd_str(&r, sig, 255, 1);
	rd_str(&r, key, 255, 1);
	ssl.version = ver;
	ssl.cn = cn;
	ssl.cipher = cipher;
	ssl.sig_alg = sig;
	ssl.key_alg = key;
	h.ssl = rd_u8(&r) & 1 ? NULL : &ssl;

	int known = h.src && h.dst && (src.family == AF_INET || src.family == AF_INET6) &&
		    (dst.family == AF_INET || dst.family == AF_INET6);
	struct netaddr want_src, want_dst;
	if (known) {
		expected(&src, &dst, &want_src);
		expected(&dst, &src, &want_dst);
	}
	struct pp_decoded d;
	const char *why;

	char v1[PP_V1_MAX];
	size_t n1 = pp_encode_v1(&h, v1, sizeof(v1));
	if (n1 == 0)
		FAIL("pp_encode_v1 failed with PP_V1_MAX bytes of room");
	ssize_t r1 = decode_copy((const uint8_t *)v1, n1, &d, &why);
	if (r1 != (ssize_t)n1)
		FAIL("v1 header \"%.*s\" (%zu bytes) decodes as %zd (%s)", (int)n1, v1, n1, r1, r1 < 0 ? why : "");
	if (d.version != 1 || d.local != !known)
		FAIL("v1 round trip: version %d local %d, want local %d", d.version, d.local, !known);
	if (known && (!addr_eq(&d.src, &want_src) || !addr_eq(&d.dst, &want_dst)))
		FAIL("v1 round trip changed the addresses: \"%.*s\"", (int)n1, v1);
	/* Too little room is refused, never overrun. */
	char small[PP_V1_MAX];
	if (pp_encode_v1(&h, small, n1 - 1) != 0)
		FAIL("pp_encode_v1 wrote %zu bytes into %zu", n1, n1 - 1);

	static uint8_t v2[4096];
	size_t n2 = pp_encode_v2(&h, v2, sizeof(v2));
	if (n2 == 0)
		FAIL("pp_encode_v2 failed with 4096 bytes of room");
	if (n2 > PP_V2_MAX)
		return;  /* more TLV bytes than sluice itself accepts: not a round trip */
	ssize_t r2 = decode_copy(v2, n2, &d, &why);
	if (r2 != (ssize_t)n2)
		FAIL("v2 header of %zu bytes decodes as %zd (%s)", n2, r2, r2 < 0 ? why : "");
	if (d.version != 2 || d.local != !known)
		FAIL("v2 round trip: version %d local %d, want local %d", d.version, d.local, !known);
	if (known && (!addr_eq(&d.src, &want_src) || !addr_eq(&d.dst, &want_dst)))
		FAIL("v2 round trip changed the addresses");
	if (d.crc_checked != !!(h.tlvs & PP_TLV_CRC32C))
		FAIL("v2 CRC32C TLV requested %d, checked %d", !!(h.tlvs & PP_TLV_CRC32C), d.crc_checked);
	uint8_t *exact = malloc(n2 - 1 ? n2 - 1 : 1);
	if (exact == NULL)
		abort();
	if (pp_encode_v2(&h, exact, n2 - 1) != 0)
		FAIL("pp_encode_v2 wrote %zu bytes into %zu", n2, n2 - 1);
	free(exact);
	/* A flipped bit in a CRC-protected header is caught. */
	if ((h.tlvs & PP_TLV_CRC32C) && n2 > PP_V2_HDR_LEN) {
		size_t at = PP_V2_HDR_LEN + rd_u8(&r) % (n2 - PP_V2_HDR_LEN);
		v2[at] ^= (uint8_t)(1u << (rd_u8(&r) % 8));
		ssize_t rb = decode_copy(v2, n2, &d, &why);
		if (rb == (ssize_t)n2 && d.crc_checked)
			FAIL("v2 header with a flipped bit at %zu passed its CRC32C", at);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size == 0)
		return 0;
	if (data[0] & 1)
		roundtrip_mode(data + 1, size - 1);
	else
		decode_mode(data + 1, size - 1);
	return 0;
}
