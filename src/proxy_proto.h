/* PROXY protocol v1 and v2 (haproxy.org/download/2.9/doc/proxy-protocol.txt):
 * the encoder for headers sluice sends to servers and the decoder for
 * headers it accepts from trusted load balancers. Pure: no I/O, no
 * allocation; the caller owns every buffer. */
#ifndef SLUICE_PROXY_PROTO_H
#define SLUICE_PROXY_PROTO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "netaddr.h"

#define PP_V2_SIG "\r\n\r\n\0\r\nQUIT\n"
#define PP_V2_SIG_LEN 12
#define PP_V2_HDR_LEN 16          /* signature, ver/cmd, family, length */
#define PP_V1_MAX 107             /* the spec's worst case, CRLF included */
#define PP_V2_MAX 1024            /* what sluice accepts: addresses + a generous set of TLVs */
#define PP_UNIQUE_ID_MAX 128

/* TLV types and SSL client bits from the spec. */
enum {
	PP2_TYPE_ALPN = 0x01,
	PP2_TYPE_AUTHORITY = 0x02,
	PP2_TYPE_CRC32C = 0x03,
	PP2_TYPE_NOOP = 0x04,
	PP2_TYPE_UNIQUE_ID = 0x05,
	PP2_TYPE_SSL = 0x20,
	PP2_SUBTYPE_SSL_VERSION = 0x21,
	PP2_SUBTYPE_SSL_CN = 0x22,
	PP2_SUBTYPE_SSL_CIPHER = 0x23,
	PP2_SUBTYPE_SSL_SIG_ALG = 0x24,
	PP2_SUBTYPE_SSL_KEY_ALG = 0x25,
	PP2_TYPE_NETNS = 0x30,
};
#define PP2_CLIENT_SSL       0x01
#define PP2_CLIENT_CERT_CONN 0x02
#define PP2_CLIENT_CERT_SESS 0x04

/* Which TLVs to emit (the CFG_PP_TLV_* bits of cfg-t.h have the same values). */
#define PP_TLV_ALPN      (1u << 0)
#define PP_TLV_AUTHORITY (1u << 1)
#define PP_TLV_UNIQUE_ID (1u << 2)
#define PP_TLV_CRC32C    (1u << 3)
#define PP_TLV_SSL       (1u << 4)

/* TLS facts for the SSL TLV. NULL or empty strings leave their sub-TLV out. */
struct pp_ssl {
	uint8_t client;            /* PP2_CLIENT_* */
	uint32_t verify;           /* 0 only when a client certificate was presented and verified */
	const char *version;       /* "TLSv1.3" */
	const char *cn;            /* client certificate subject CN */
	const char *cipher;
	const char *sig_alg;       /* of the certificate sluice presented */
	const char *key_alg;
};

/* What one header says. SRC and DST NULL (or of family 0) make a LOCAL
 * header (v2) or "PROXY UNKNOWN" (v1). A TLV is emitted when its bit is in
 * TLVS and its data is present (non-NULL, non-empty; SSL non-NULL). */
struct pp_header {
	const struct netaddr *src, *dst;
	unsigned tlvs;
	const char *alpn;
	size_t alpn_len;
	const char *authority;
	size_t authority_len;
	const char *unique_id;
	size_t unique_id_len;      /* at most PP_UNIQUE_ID_MAX; longer is cut */
	const struct pp_ssl *ssl;
};

/* CRC-32C (Castagnoli), the reflected polynomial 0x82F63B78. Start with
 * CRC = 0; feed pieces by passing the previous result. */
uint32_t pp_crc32c(uint32_t crc, const void *data, size_t len);

/* Write the header into OUT. Returns its length, or 0 when CAP is too small
 * (PP_V1_MAX always suffices for v1). Addresses of different families are
 * both sent as IPv6 (IPv4-mapped); two IPv4 or IPv4-mapped ones as TCP4. */
size_t pp_encode_v1(const struct pp_header *h, char *out, size_t cap);
size_t pp_encode_v2(const struct pp_header *h, uint8_t *out, size_t cap);

/* ---- decoding ---- */

/* 1: the bytes are the start of a PROXY header ("PROXY " or the v2
 * signature seen in full); 0: too few bytes to tell; -1: not a PROXY header. */
int pp_detect(const uint8_t *p, size_t n);

struct pp_decoded {
	int version;               /* 1 or 2 */
	int local;                 /* LOCAL / UNKNOWN / AF_UNSPEC / AF_UNIX: keep the socket's addresses */
	struct netaddr src, dst;   /* when !local */
	int crc_checked;           /* a CRC32C TLV was present and matched */
};

/* Decode the header at the start of P (N bytes so far). Returns the header's
 * length (> 0) when complete and valid, 0 when more bytes are needed, -1
 * when invalid with *WHY set to a static reason for the log. Every TLV is
 * bounds-checked (also the SSL TLV's sub-TLVs) and a CRC32C TLV verified. */
ssize_t pp_decode(const uint8_t *p, size_t n, struct pp_decoded *out, const char **why);

#endif
