#include <string.h>
#include <stdio.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "proxy_proto.h"

/* ---- CRC-32C ---- */

static uint32_t crc_table[256];

static void crc_table_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
		crc_table[i] = c;
	}
}

uint32_t pp_crc32c(uint32_t crc, const void *data, size_t len)
{
	if (crc_table[1] == 0)
		crc_table_init();
	const uint8_t *p = data;
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- encoding ---- */

static int addr_known(const struct netaddr *a)
{
	return a && (a->family == AF_INET || a->family == AF_INET6);
}

/* Both as IPv4 when both are (or map to) IPv4, else both as IPv6. */
static int addrs_normalise(const struct pp_header *h, struct netaddr *src, struct netaddr *dst)
{
	if (!addr_known(h->src) || !addr_known(h->dst))
		return 0;
	netaddr_unmap(src, h->src);
	netaddr_unmap(dst, h->dst);
	if (src->family == dst->family)
		return src->family;
	struct netaddr *v4 = src->family == AF_INET ? src : dst;
	uint8_t ip4[4];
	memcpy(ip4, v4->ip, 4);
	memset(v4->ip, 0, 16);
	v4->ip[10] = v4->ip[11] = 0xff;
	memcpy(v4->ip + 12, ip4, 4);
	v4->family = AF_INET6;
	return AF_INET6;
}

size_t pp_encode_v1(const struct pp_header *h, char *out, size_t cap)
{
	struct netaddr s, d;
	int fam = addrs_normalise(h, &s, &d);
	char line[PP_V1_MAX + 1];  /* snprintf's NUL is not part of the header */
	int n;
	if (!fam) {
		n = snprintf(line, sizeof(line), "PROXY UNKNOWN\r\n");
	} else {
		char sip[NETADDR_IP_MAX], dip[NETADDR_IP_MAX];
		netaddr_ip_text(&s, sip, sizeof(sip));
		netaddr_ip_text(&d, dip, sizeof(dip));
		n = snprintf(line, sizeof(line), "PROXY %s %s %s %u %u\r\n", fam == AF_INET ? "TCP4" : "TCP6", sip,
			     dip, netaddr_port(&s), netaddr_port(&d));
	}
	if (n <= 0 || (size_t)n >= sizeof(line) || (size_t)n > cap)
		return 0;
	memcpy(out, line, (size_t)n);
	return (size_t)n;
}

struct wr {
	uint8_t *p;
	size_t len, cap;
	int overflow;
};

static void wr_bytes(struct wr *w, const void *data, size_t n)
{
	if (w->overflow || w->len + n > w->cap) {
		w->overflow = 1;
		return;
	}
	memcpy(w->p + w->len, data, n);
	w->len += n;
}

static void wr_u8(struct wr *w, uint8_t v) { wr_bytes(w, &v, 1); }

static void wr_u16(struct wr *w, uint16_t v)
{
	uint8_t b[2] = { (uint8_t)(v >> 8), (uint8_t)v };
	wr_bytes(w, b, 2);
}

static void wr_u32(struct wr *w, uint32_t v)
{
	uint8_t b[4] = { (uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v };
	wr_bytes(w, b, 4);
}

static void wr_tlv(struct wr *w, uint8_t type, const void *val, size_t len)
{
	wr_u8(w, type);
	wr_u16(w, (uint16_t)len);
	wr_bytes(w, val, len);
}

static void wr_tlv_str(struct wr *w, uint8_t type, const char *s)
{
	if (s && s[0])
		wr_tlv(w, type, s, strlen(s));
}

/* TLV order: ALPN, AUTHORITY, UNIQUE_ID, SSL, then CRC32C last so a reader
 * can find it without parsing everything before. */
size_t pp_encode_v2(const struct pp_header *h, uint8_t *out, size_t cap)
{
	struct wr w = { out, 0, cap, 0 };
	struct netaddr s, d;
	int fam = addrs_normalise(h, &s, &d);
	wr_bytes(&w, PP_V2_SIG, PP_V2_SIG_LEN);
	wr_u8(&w, fam ? 0x21 : 0x20);  /* version 2, PROXY or LOCAL */
	wr_u8(&w, fam == AF_INET ? 0x11 : fam == AF_INET6 ? 0x21 : 0x00);
	wr_u16(&w, 0);  /* length, patched below */
	if (fam == AF_INET) {
		wr_bytes(&w, s.ip, 4);
		wr_bytes(&w, d.ip, 4);
	} else if (fam == AF_INET6) {
		wr_bytes(&w, s.ip, 16);
		wr_bytes(&w, d.ip, 16);
	}
	if (fam) {
		wr_bytes(&w, &s.port, 2);  /* already network order */
		wr_bytes(&w, &d.port, 2);
	}
	if ((h->tlvs & PP_TLV_ALPN) && h->alpn && h->alpn_len)
		wr_tlv(&w, PP2_TYPE_ALPN, h->alpn, h->alpn_len);
	if ((h->tlvs & PP_TLV_AUTHORITY) && h->authority && h->authority_len)
		wr_tlv(&w, PP2_TYPE_AUTHORITY, h->authority, h->authority_len);
	if ((h->tlvs & PP_TLV_UNIQUE_ID) && h->unique_id && h->unique_id_len)
		wr_tlv(&w, PP2_TYPE_UNIQUE_ID, h->unique_id,
		       h->unique_id_len > PP_UNIQUE_ID_MAX ? PP_UNIQUE_ID_MAX : h->unique_id_len);
	if ((h->tlvs & PP_TLV_SSL) && h->ssl) {
		const struct pp_ssl *ssl = h->ssl;
		wr_u8(&w, PP2_TYPE_SSL);
		size_t len_at = w.len;
		wr_u16(&w, 0);
		wr_u8(&w, ssl->client);
		wr_u32(&w, ssl->verify);
		wr_tlv_str(&w, PP2_SUBTYPE_SSL_VERSION, ssl->version);
		wr_tlv_str(&w, PP2_SUBTYPE_SSL_CN, ssl->cn);
		wr_tlv_str(&w, PP2_SUBTYPE_SSL_CIPHER, ssl->cipher);
		wr_tlv_str(&w, PP2_SUBTYPE_SSL_SIG_ALG, ssl->sig_alg);
		wr_tlv_str(&w, PP2_SUBTYPE_SSL_KEY_ALG, ssl->key_alg);
		if (!w.overflow) {
			size_t vlen = w.len - len_at - 2;
			out[len_at] = (uint8_t)(vlen >> 8);
			out[len_at + 1] = (uint8_t)vlen;
		}
	}
	size_t crc_at = 0;
	if (h->tlvs & PP_TLV_CRC32C) {
		static const uint8_t zero[4];
		wr_tlv(&w, PP2_TYPE_CRC32C, zero, 4);
		crc_at = w.len - 4;
	}
	if (w.overflow || w.len - PP_V2_HDR_LEN > 0xffff)
		return 0;
	size_t body = w.len - PP_V2_HDR_LEN;
	out[14] = (uint8_t)(body >> 8);
	out[15] = (uint8_t)body;
	if (crc_at) {
		uint32_t crc = pp_crc32c(0, out, w.len);
		out[crc_at] = (uint8_t)(crc >> 24);
		out[crc_at + 1] = (uint8_t)(crc >> 16);
		out[crc_at + 2] = (uint8_t)(crc >> 8);
		out[crc_at + 3] = (uint8_t)crc;
	}
	return w.len;
}

/* ---- decoding ---- */

static const char v1_prefix[] = "PROXY ";

int pp_detect(const uint8_t *p, size_t n)
{
	size_t k1 = n < 6 ? n : 6, k2 = n < PP_V2_SIG_LEN ? n : PP_V2_SIG_LEN;
	int v1 = memcmp(p, v1_prefix, k1) == 0;
	int v2 = memcmp(p, PP_V2_SIG, k2) == 0;
	if ((v1 && n >= 6) || (v2 && n >= PP_V2_SIG_LEN))
		return 1;
	if (n == 0 || v1 || v2)
		return 0;
	return -1;
}

#define BAD(msg) do { *why = (msg); return -1; } while (0)

/* A decimal port: 1-5 digits, no leading zero (except "0"), <= 65535. */
static int v1_port(const char *s, size_t n, uint16_t *port)
{
	if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
		return -1;
	uint32_t v = 0;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (uint32_t)(s[i] - '0');
	}
	if (v > 65535)
		return -1;
	*port = htons((uint16_t)v);
	return 0;
}

/* Split LINE (without CRLF) on single spaces into at most MAX fields. */
static int v1_fields(const char *line, size_t len, const char **f, size_t *fl, int max)
{
	int n = 0;
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		if (i == len || line[i] == ' ') {
			if (i == start || n == max)
				return -1;  /* empty field (double space) or too many */
			f[n] = line + start;
			fl[n] = i - start;
			n++;
			start = i + 1;
		}
	}
	return n;
}

static ssize_t decode_v1(const uint8_t *p, size_t n, struct pp_decoded *out, const char **why)
{
	const uint8_t *lf = memchr(p, '\n', n < PP_V1_MAX ? n : PP_V1_MAX);
	if (lf == NULL) {
		if (n >= PP_V1_MAX)
			BAD("PROXY v1 header without CRLF within 107 bytes");
		return 0;
	}
	size_t total = (size_t)(lf - p) + 1;
	if (total < 8 || lf[-1] != '\r')
		BAD("PROXY v1 header not ended by CRLF");
	const char *line = (const char *)p + 6;
	size_t len = total - 8;
	for (size_t i = 0; i < len; i++)
		if (line[i] == '\r' || line[i] == '\0')
			BAD("PROXY v1 header with a stray control byte");
	memset(out, 0, sizeof(*out));
	out->version = 1;
	if (len >= 7 && memcmp(line, "UNKNOWN", 7) == 0 && (len == 7 || line[7] == ' ')) {
		out->local = 1;
		return (ssize_t)total;
	}
	const char *f[5];
	size_t fl[5];
	if (v1_fields(line, len, f, fl, 5) != 5)
		BAD("PROXY v1 header needs protocol, two addresses and two ports");
	int fam;
	if (fl[0] == 4 && memcmp(f[0], "TCP4", 4) == 0)
		fam = AF_INET;
	else if (fl[0] == 4 && memcmp(f[0], "TCP6", 4) == 0)
		fam = AF_INET6;
	else
		BAD("PROXY v1 protocol is not TCP4, TCP6 or UNKNOWN");
	struct netaddr *a[2] = { &out->src, &out->dst };
	for (int i = 0; i < 2; i++) {
		char ip[NETADDR_IP_MAX];
		if (fl[1 + i] >= sizeof(ip))
			BAD("PROXY v1 address too long");
		memcpy(ip, f[1 + i], fl[1 + i]);
		ip[fl[1 + i]] = '\0';
		if (inet_pton(fam, ip, a[i]->ip) != 1)
			BAD(fam == AF_INET ? "PROXY v1 TCP4 address is not IPv4" : "PROXY v1 TCP6 address is not IPv6");
		a[i]->family = (uint8_t)fam;
		if (v1_port(f[3 + i], fl[3 + i], &a[i]->port) < 0)
			BAD("PROXY v1 port is not a number 0-65535");
	}
	return (ssize_t)total;
}

/* Walk TLVs in [P, P+N); SSL TLVs are walked into. CRC_OFF gets the offset
 * (relative to P) of a CRC32C value, or stays -1. */
static int walk_tlvs(const uint8_t *p, size_t n, int nested, long *crc_off, const char **why)
{
	size_t i = 0;
	while (i < n) {
		if (n - i < 3)
			BAD("PROXY v2 TLV header truncated");
		uint8_t type = p[i];
		size_t len = (size_t)p[i + 1] << 8 | p[i + 2];
		if (len > n - i - 3)
			BAD("PROXY v2 TLV overflows its container");
		const uint8_t *v = p + i + 3;
		if (!nested && type == PP2_TYPE_CRC32C) {
			if (len != 4)
				BAD("PROXY v2 CRC32C TLV is not 4 bytes");
			if (*crc_off >= 0)
				BAD("PROXY v2 header has two CRC32C TLVs");
			*crc_off = (long)(i + 3);
		} else if (!nested && type == PP2_TYPE_SSL) {
			if (len < 5)
				BAD("PROXY v2 SSL TLV shorter than its fixed part");
			if (walk_tlvs(v + 5, len - 5, 1, crc_off, why) < 0)
				return -1;
		} else if (!nested && type == PP2_TYPE_UNIQUE_ID && len > PP_UNIQUE_ID_MAX) {
			BAD("PROXY v2 UNIQUE_ID longer than 128 bytes");
		}
		i += 3 + len;
	}
	return 0;
}

static ssize_t decode_v2(const uint8_t *p, size_t n, struct pp_decoded *out, const char **why)
{
	if (n < PP_V2_HDR_LEN)
		return 0;
	uint8_t ver = p[12] >> 4, cmd = p[12] & 0x0f, fam = p[13];
	size_t len = (size_t)p[14] << 8 | p[15];
	if (ver != 2)
		BAD("PROXY v2 header with a version other than 2");
	if (cmd > 1)
		BAD("PROXY v2 command is neither LOCAL nor PROXY");
	if (PP_V2_HDR_LEN + len > PP_V2_MAX)
		BAD("PROXY v2 header longer than sluice accepts (1024 bytes)");
	uint8_t af = fam >> 4, proto = fam & 0x0f;
	if (af > 3 || proto > 2)
		BAD("PROXY v2 unknown address family or protocol");
	if (proto == 2)
		BAD("PROXY v2 header for a datagram (UDP) connection");
	size_t need = af == 1 ? 12 : af == 2 ? 36 : af == 3 ? 216 : 0;
	if (len < need)
		BAD("PROXY v2 address block shorter than its family needs");
	if (n < PP_V2_HDR_LEN + len)
		return 0;
	long crc_off = -1;
	if (walk_tlvs(p + PP_V2_HDR_LEN + need, len - need, 0, &crc_off, why) < 0)
		return -1;
	memset(out, 0, sizeof(*out));
	out->version = 2;
	if (crc_off >= 0) {
		size_t at = PP_V2_HDR_LEN + need + (size_t)crc_off;
		uint32_t want = (uint32_t)p[at] << 24 | (uint32_t)p[at + 1] << 16 | (uint32_t)p[at + 2] << 8 | p[at + 3];
		static const uint8_t zero[4];
		uint32_t crc = pp_crc32c(0, p, at);
		crc = pp_crc32c(crc, zero, 4);
		crc = pp_crc32c(crc, p + at + 4, PP_V2_HDR_LEN + len - at - 4);
		if (crc != want)
			BAD("PROXY v2 CRC32C mismatch");
		out->crc_checked = 1;
	}
	/* LOCAL, UNSPEC and UNIX carry no address to use: the receiver keeps
	 * the socket's own (spec 2.2). Protocol UNSPEC with PROXY likewise. */
	if (cmd == 0 || af == 0 || af == 3 || proto == 0) {
		out->local = 1;
		return (ssize_t)(PP_V2_HDR_LEN + len);
	}
	const uint8_t *a = p + PP_V2_HDR_LEN;
	size_t alen = af == 1 ? 4 : 16;
	out->src.family = out->dst.family = af == 1 ? AF_INET : AF_INET6;
	memcpy(out->src.ip, a, alen);
	memcpy(out->dst.ip, a + alen, alen);
	memcpy(&out->src.port, a + 2 * alen, 2);
	memcpy(&out->dst.port, a + 2 * alen + 2, 2);
	return (ssize_t)(PP_V2_HDR_LEN + len);
}

ssize_t pp_decode(const uint8_t *p, size_t n, struct pp_decoded *out, const char **why)
{
	int d = pp_detect(p, n);
	if (d == 0)
		return 0;
	if (d < 0)
		BAD("connection did not start with a PROXY protocol header");
	if (p[0] == 'P')
		return decode_v1(p, n, out, why);
	return decode_v2(p, n, out, why);
}
