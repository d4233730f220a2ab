/* Unit tests for the PROXY protocol module (src/proxy_proto.h).
 *
 * Written from the specification (haproxy.org/download/2.9/doc/proxy-protocol.txt,
 * "the spec" below) and the contract in proxy_proto.h, not from proxy_proto.c.
 * The golden bytes come from two sources that are independent of sluice:
 *   g_*    the spec, through the small encoder in gen_pp_golden.py --spec;
 *          that encoder is itself checked by reproducing HAProxy's headers
 *          byte for byte when asked for HAProxy's TLV order;
 *   hap_*  real headers HAProxy 2.6.12 (Debian) sent to a socket, captured by
 *          tests/unit/gen_pp_golden.py (not run by make; rerun to refresh).
 *
 * TLV order in sluice's v2 output (the spec imposes none; the encoder
 * follows this one and the golden bytes depend on it):
 *   ALPN, AUTHORITY, UNIQUE_ID, SSL, and CRC32C last.
 *   Inside SSL: client (1 byte), verify (4 bytes, big-endian), then the
 *   sub-TLVs VERSION, CN, CIPHER, SIG_ALG, KEY_ALG.
 * The CRC32C value is big-endian, computed over the whole header with its
 * own 4 bytes zero (spec 2.2.3).
 *
 * What HAProxy 2.6 does differently (order only; it sent no NOOP/padding):
 * CRC32C comes first, and the SSL sub-TLVs come as VERSION, CN, KEY_ALG,
 * SIG_ALG, CIPHER. So its headers are compared with ours TLV by TLV, its
 * CRC32C is verified with pp_crc32c, pp_decode must accept them, and
 * hap_*_sluice hold the same inputs in sluice's order (CRC recomputed by
 * the generator), which pp_encode_v2 must reproduce exactly. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include "proxy_proto.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)
/* The same, naming the table case that failed. */
#define CHECKC(name, c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: [%s] CHECK(%s) failed\n", __FILE__, __LINE__, (name), #c); } } while (0)

#define PP2_SIG_BYTES 0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a
#define ALL_TLVS (PP_TLV_ALPN | PP_TLV_AUTHORITY | PP_TLV_UNIQUE_ID | PP_TLV_SSL | PP_TLV_CRC32C)

/* ------------------------------------------------------------------ */
/* Golden v2 headers from the spec (gen_pp_golden.py --spec).
 * Inputs: 192.0.2.1:56324 -> 198.51.100.2:443, 2001:db8::1:56324 ->
 * [2001:db8:0:1::a]:443, ALPN "http/1.1", AUTHORITY "example.com",
 * UNIQUE_ID "uid\0\xfe\xff42" (opaque bytes: a NUL, so lengths not strlen),
 * SSL as ssl_full / ssl_partial / ssl_bare below. */

static const uint8_t g_tcp4[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x0c,                                                                 /* 12 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
};

static const uint8_t g_tcp6[] = {
	PP2_SIG_BYTES,
	0x21, 0x21,                                                                 /* v2 PROXY, TCP over IPv6 */
	0x00, 0x24,                                                                 /* 36 bytes follow */
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* src 2001:db8::1 */
	0x00, 0x00, 0x00, 0x01,
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,     /* dst 2001:db8:0:1::a */
	0x00, 0x00, 0x00, 0x0a,
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
};

static const uint8_t g_mixed[] = {
	PP2_SIG_BYTES,
	0x21, 0x21,                                                                 /* v2 PROXY, TCP over IPv6 */
	0x00, 0x24,                                                                 /* 36 bytes follow */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,     /* src 192.0.2.1 as ::ffff:192.0.2.1 */
	0xc0, 0x00, 0x02, 0x01,
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,     /* dst 2001:db8:0:1::a */
	0x00, 0x00, 0x00, 0x0a,
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
};

static const uint8_t g_mapped4[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x0c,                                                                 /* 12 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src ::ffff:192.0.2.1 as 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
};

static const uint8_t g_local[] = {
	PP2_SIG_BYTES,
	0x20, 0x00,                                                                 /* v2 LOCAL, UNSPEC */
	0x00, 0x00,                                                                 /* 0 bytes follow */
};

static const uint8_t g_local_crc[] = {
	PP2_SIG_BYTES,
	0x20, 0x00,                                                                 /* v2 LOCAL, UNSPEC */
	0x00, 0x07,                                                                 /* 7 bytes follow */
	0x03, 0x00, 0x04, 0xa9, 0xb8, 0x7e, 0x8f,                                   /* CRC32C 0xa9b87e8f */
};

static const uint8_t g_alpn[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x17,                                                                 /* 23 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x01, 0x00, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31,           /* ALPN "http/1.1" */
};

static const uint8_t g_authority[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x1a,                                                                 /* 26 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x02, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63,     /* AUTHORITY "example.com" */
	0x6f, 0x6d,
};

static const uint8_t g_unique_id[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x17,                                                                 /* 23 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x05, 0x00, 0x08, 0x75, 0x69, 0x64, 0x00, 0xfe, 0xff, 0x34, 0x32,           /* UNIQUE_ID "uid\x00\xfe\xff42" */
};

static const uint8_t g_ssl_full[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x5f,                                                                 /* 95 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x20, 0x00, 0x50,                                                           /* SSL, 80 bytes */
	0x07, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x07, verify 0 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x33,                 /*   SSL VERSION "TLSv1.3" */
	0x22, 0x00, 0x0e, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2e, 0x65, 0x78,     /*   SSL CN "client.example" */
	0x61, 0x6d, 0x70, 0x6c, 0x65,
	0x23, 0x00, 0x16, 0x54, 0x4c, 0x53, 0x5f, 0x41, 0x45, 0x53, 0x5f, 0x31,     /*   SSL CIPHER "TLS_AES_128_GCM_SHA256" */
	0x32, 0x38, 0x5f, 0x47, 0x43, 0x4d, 0x5f, 0x53, 0x48, 0x41, 0x32, 0x35,
	0x36,
	0x24, 0x00, 0x0c, 0x45, 0x43, 0x44, 0x53, 0x41, 0x2d, 0x53, 0x48, 0x41,     /*   SSL SIG_ALG "ECDSA-SHA256" */
	0x32, 0x35, 0x36,
	0x25, 0x00, 0x05, 0x45, 0x43, 0x32, 0x35, 0x36,                             /*   SSL KEY_ALG "EC256" */
};

static const uint8_t g_ssl_partial[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x41,                                                                 /* 65 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x20, 0x00, 0x32,                                                           /* SSL, 50 bytes */
	0x01, 0x01, 0x02, 0x03, 0x04,                                               /*   client 0x01, verify 16909060 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x33,                 /*   SSL VERSION "TLSv1.3" */
	0x23, 0x00, 0x16, 0x54, 0x4c, 0x53, 0x5f, 0x41, 0x45, 0x53, 0x5f, 0x32,     /*   SSL CIPHER "TLS_AES_256_GCM_SHA384" */
	0x35, 0x36, 0x5f, 0x47, 0x43, 0x4d, 0x5f, 0x53, 0x48, 0x41, 0x33, 0x38,
	0x34,
	0x25, 0x00, 0x07, 0x52, 0x53, 0x41, 0x32, 0x30, 0x34, 0x38,                 /*   SSL KEY_ALG "RSA2048" */
};

static const uint8_t g_ssl_bare[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x14,                                                                 /* 20 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x20, 0x00, 0x05,                                                           /* SSL, 5 bytes */
	0x00, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x00, verify 0 */
};

static const uint8_t g_crc32c[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x13,                                                                 /* 19 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x03, 0x00, 0x04, 0x20, 0xec, 0x95, 0x49,                                   /* CRC32C 0x20ec9549 */
};

static const uint8_t g_all4[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x8a,                                                                 /* 138 bytes follow */
	0xc0, 0x00, 0x02, 0x01,                                                     /* src 192.0.2.1 */
	0xc6, 0x33, 0x64, 0x02,                                                     /* dst 198.51.100.2 */
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x01, 0x00, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31,           /* ALPN "http/1.1" */
	0x02, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63,     /* AUTHORITY "example.com" */
	0x6f, 0x6d,
	0x05, 0x00, 0x08, 0x75, 0x69, 0x64, 0x00, 0xfe, 0xff, 0x34, 0x32,           /* UNIQUE_ID "uid\x00\xfe\xff42" */
	0x20, 0x00, 0x50,                                                           /* SSL, 80 bytes */
	0x07, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x07, verify 0 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x33,                 /*   SSL VERSION "TLSv1.3" */
	0x22, 0x00, 0x0e, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2e, 0x65, 0x78,     /*   SSL CN "client.example" */
	0x61, 0x6d, 0x70, 0x6c, 0x65,
	0x23, 0x00, 0x16, 0x54, 0x4c, 0x53, 0x5f, 0x41, 0x45, 0x53, 0x5f, 0x31,     /*   SSL CIPHER "TLS_AES_128_GCM_SHA256" */
	0x32, 0x38, 0x5f, 0x47, 0x43, 0x4d, 0x5f, 0x53, 0x48, 0x41, 0x32, 0x35,
	0x36,
	0x24, 0x00, 0x0c, 0x45, 0x43, 0x44, 0x53, 0x41, 0x2d, 0x53, 0x48, 0x41,     /*   SSL SIG_ALG "ECDSA-SHA256" */
	0x32, 0x35, 0x36,
	0x25, 0x00, 0x05, 0x45, 0x43, 0x32, 0x35, 0x36,                             /*   SSL KEY_ALG "EC256" */
	0x03, 0x00, 0x04, 0x68, 0xbd, 0xe2, 0xe7,                                   /* CRC32C 0x68bde2e7 */
};

static const uint8_t g_all6[] = {
	PP2_SIG_BYTES,
	0x21, 0x21,                                                                 /* v2 PROXY, TCP over IPv6 */
	0x00, 0xa2,                                                                 /* 162 bytes follow */
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* src 2001:db8::1 */
	0x00, 0x00, 0x00, 0x01,
	0x20, 0x01, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,     /* dst 2001:db8:0:1::a */
	0x00, 0x00, 0x00, 0x0a,
	0xdc, 0x04,                                                                 /* src port 56324 */
	0x01, 0xbb,                                                                 /* dst port 443 */
	0x01, 0x00, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31,           /* ALPN "http/1.1" */
	0x02, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63,     /* AUTHORITY "example.com" */
	0x6f, 0x6d,
	0x05, 0x00, 0x08, 0x75, 0x69, 0x64, 0x00, 0xfe, 0xff, 0x34, 0x32,           /* UNIQUE_ID "uid\x00\xfe\xff42" */
	0x20, 0x00, 0x50,                                                           /* SSL, 80 bytes */
	0x07, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x07, verify 0 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x33,                 /*   SSL VERSION "TLSv1.3" */
	0x22, 0x00, 0x0e, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2e, 0x65, 0x78,     /*   SSL CN "client.example" */
	0x61, 0x6d, 0x70, 0x6c, 0x65,
	0x23, 0x00, 0x16, 0x54, 0x4c, 0x53, 0x5f, 0x41, 0x45, 0x53, 0x5f, 0x31,     /*   SSL CIPHER "TLS_AES_128_GCM_SHA256" */
	0x32, 0x38, 0x5f, 0x47, 0x43, 0x4d, 0x5f, 0x53, 0x48, 0x41, 0x32, 0x35,
	0x36,
	0x24, 0x00, 0x0c, 0x45, 0x43, 0x44, 0x53, 0x41, 0x2d, 0x53, 0x48, 0x41,     /*   SSL SIG_ALG "ECDSA-SHA256" */
	0x32, 0x35, 0x36,
	0x25, 0x00, 0x05, 0x45, 0x43, 0x32, 0x35, 0x36,                             /*   SSL KEY_ALG "EC256" */
	0x03, 0x00, 0x04, 0x61, 0x0b, 0xf3, 0x13,                                   /* CRC32C 0x610bf313 */
};

/* ------------------------------------------------------------------ */
/* Real headers from HAProxy 2.6.12 (gen_pp_golden.py). Frontends in mode
 * tcp with `unique-id-format sluice-golden-0001`; backends
 *   server s 127.0.0.1:<py> send-proxy-v2 proxy-v2-options crc32c,unique-id
 *   server s 127.0.0.1:<py> send-proxy
 *   server s 127.0.0.1:<py> send-proxy-v2 proxy-v2-options
 *       ssl,cert-cn,ssl-cipher,cert-sig,cert-key,authority,crc32c,unique-id
 * the last behind `bind ... ssl crt srv.pem ca-file ca.pem verify optional
 * alpn http/1.1`, reached with SNI example.com, ALPN http/1.1, TLS 1.2,
 * ECDHE-RSA-AES128-GCM-SHA256 and a client certificate with CN
 * client.example (RSA 2048, SHA-256 certificates). The addresses are the
 * ones observed on the connections. */

/* hap_v2_tcp4: client 127.0.0.1 port 52808 -> haproxy 127.0.0.1 port 52579 */
/* as received (commented by the spec encoder, which reproduces it) */
static const uint8_t hap_v2_tcp4[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x28,                                                                 /* 40 bytes follow */
	0x7f, 0x00, 0x00, 0x01,                                                     /* src 127.0.0.1 */
	0x7f, 0x00, 0x00, 0x01,                                                     /* dst 127.0.0.1 */
	0xce, 0x48,                                                                 /* src port 52808 */
	0xcd, 0x63,                                                                 /* dst port 52579 */
	0x03, 0x00, 0x04, 0xaf, 0x9f, 0xc5, 0x52,                                   /* CRC32C 0xaf9fc552 */
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
};
/* the same inputs in sluice's TLV order (spec encoder above, CRC recomputed) */
static const uint8_t hap_v2_tcp4_sluice[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x28,                                                                 /* 40 bytes follow */
	0x7f, 0x00, 0x00, 0x01,                                                     /* src 127.0.0.1 */
	0x7f, 0x00, 0x00, 0x01,                                                     /* dst 127.0.0.1 */
	0xce, 0x48,                                                                 /* src port 52808 */
	0xcd, 0x63,                                                                 /* dst port 52579 */
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
	0x03, 0x00, 0x04, 0x15, 0x7b, 0x34, 0xfe,                                   /* CRC32C 0x157b34fe */
};

/* hap_v2_tcp6: client ::1 port 40238 -> haproxy ::1 port 33209 */
/* as received (commented by the spec encoder, which reproduces it) */
static const uint8_t hap_v2_tcp6[] = {
	PP2_SIG_BYTES,
	0x21, 0x21,                                                                 /* v2 PROXY, TCP over IPv6 */
	0x00, 0x40,                                                                 /* 64 bytes follow */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* src ::1 */
	0x00, 0x00, 0x00, 0x01,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* dst ::1 */
	0x00, 0x00, 0x00, 0x01,
	0x9d, 0x2e,                                                                 /* src port 40238 */
	0x81, 0xb9,                                                                 /* dst port 33209 */
	0x03, 0x00, 0x04, 0xf8, 0x00, 0x5b, 0x00,                                   /* CRC32C 0xf8005b00 */
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
};
/* the same inputs in sluice's TLV order (spec encoder above, CRC recomputed) */
static const uint8_t hap_v2_tcp6_sluice[] = {
	PP2_SIG_BYTES,
	0x21, 0x21,                                                                 /* v2 PROXY, TCP over IPv6 */
	0x00, 0x40,                                                                 /* 64 bytes follow */
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* src ::1 */
	0x00, 0x00, 0x00, 0x01,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,     /* dst ::1 */
	0x00, 0x00, 0x00, 0x01,
	0x9d, 0x2e,                                                                 /* src port 40238 */
	0x81, 0xb9,                                                                 /* dst port 33209 */
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
	0x03, 0x00, 0x04, 0x42, 0xe4, 0xaa, 0xac,                                   /* CRC32C 0x42e4aaac */
};



/* hap_v2_tls: client 127.0.0.1 port 54558 -> haproxy 127.0.0.1 port 44511 */
/* as received (commented by the spec encoder, which reproduces it) */
static const uint8_t hap_v2_tls[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x99,                                                                 /* 153 bytes follow */
	0x7f, 0x00, 0x00, 0x01,                                                     /* src 127.0.0.1 */
	0x7f, 0x00, 0x00, 0x01,                                                     /* dst 127.0.0.1 */
	0xd5, 0x1e,                                                                 /* src port 54558 */
	0xad, 0xdf,                                                                 /* dst port 44511 */
	0x03, 0x00, 0x04, 0x4f, 0x30, 0xf4, 0x34,                                   /* CRC32C 0x4f30f434 */
	0x01, 0x00, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31,           /* ALPN "http/1.1" */
	0x02, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63,     /* AUTHORITY "example.com" */
	0x6f, 0x6d,
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
	0x20, 0x00, 0x55,                                                           /* SSL, 85 bytes */
	0x07, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x07, verify 0 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x32,                 /*   SSL VERSION "TLSv1.2" */
	0x22, 0x00, 0x0e, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2e, 0x65, 0x78,     /*   SSL CN "client.example" */
	0x61, 0x6d, 0x70, 0x6c, 0x65,
	0x25, 0x00, 0x07, 0x52, 0x53, 0x41, 0x32, 0x30, 0x34, 0x38,                 /*   SSL KEY_ALG "RSA2048" */
	0x24, 0x00, 0x0a, 0x52, 0x53, 0x41, 0x2d, 0x53, 0x48, 0x41, 0x32, 0x35,     /*   SSL SIG_ALG "RSA-SHA256" */
	0x36,
	0x23, 0x00, 0x1b, 0x45, 0x43, 0x44, 0x48, 0x45, 0x2d, 0x52, 0x53, 0x41,     /*   SSL CIPHER "ECDHE-RSA-AES128-GCM-SHA256" */
	0x2d, 0x41, 0x45, 0x53, 0x31, 0x32, 0x38, 0x2d, 0x47, 0x43, 0x4d, 0x2d,
	0x53, 0x48, 0x41, 0x32, 0x35, 0x36,
};
/* the same inputs in sluice's TLV order (spec encoder above, CRC recomputed) */
static const uint8_t hap_v2_tls_sluice[] = {
	PP2_SIG_BYTES,
	0x21, 0x11,                                                                 /* v2 PROXY, TCP over IPv4 */
	0x00, 0x99,                                                                 /* 153 bytes follow */
	0x7f, 0x00, 0x00, 0x01,                                                     /* src 127.0.0.1 */
	0x7f, 0x00, 0x00, 0x01,                                                     /* dst 127.0.0.1 */
	0xd5, 0x1e,                                                                 /* src port 54558 */
	0xad, 0xdf,                                                                 /* dst port 44511 */
	0x01, 0x00, 0x08, 0x68, 0x74, 0x74, 0x70, 0x2f, 0x31, 0x2e, 0x31,           /* ALPN "http/1.1" */
	0x02, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63,     /* AUTHORITY "example.com" */
	0x6f, 0x6d,
	0x05, 0x00, 0x12, 0x73, 0x6c, 0x75, 0x69, 0x63, 0x65, 0x2d, 0x67, 0x6f,     /* UNIQUE_ID "sluice-golden-0001" */
	0x6c, 0x64, 0x65, 0x6e, 0x2d, 0x30, 0x30, 0x30, 0x31,
	0x20, 0x00, 0x55,                                                           /* SSL, 85 bytes */
	0x07, 0x00, 0x00, 0x00, 0x00,                                               /*   client 0x07, verify 0 */
	0x21, 0x00, 0x07, 0x54, 0x4c, 0x53, 0x76, 0x31, 0x2e, 0x32,                 /*   SSL VERSION "TLSv1.2" */
	0x22, 0x00, 0x0e, 0x63, 0x6c, 0x69, 0x65, 0x6e, 0x74, 0x2e, 0x65, 0x78,     /*   SSL CN "client.example" */
	0x61, 0x6d, 0x70, 0x6c, 0x65,
	0x23, 0x00, 0x1b, 0x45, 0x43, 0x44, 0x48, 0x45, 0x2d, 0x52, 0x53, 0x41,     /*   SSL CIPHER "ECDHE-RSA-AES128-GCM-SHA256" */
	0x2d, 0x41, 0x45, 0x53, 0x31, 0x32, 0x38, 0x2d, 0x47, 0x43, 0x4d, 0x2d,
	0x53, 0x48, 0x41, 0x32, 0x35, 0x36,
	0x24, 0x00, 0x0a, 0x52, 0x53, 0x41, 0x2d, 0x53, 0x48, 0x41, 0x32, 0x35,     /*   SSL SIG_ALG "RSA-SHA256" */
	0x36,
	0x25, 0x00, 0x07, 0x52, 0x53, 0x41, 0x32, 0x30, 0x34, 0x38,                 /*   SSL KEY_ALG "RSA2048" */
	0x03, 0x00, 0x04, 0x4f, 0x03, 0xa1, 0xd5,                                   /* CRC32C 0x4f03a1d5 */
};

/* hap_v1_tcp4: client 127.0.0.1 port 48986 -> haproxy 127.0.0.1 port 49511 */
static const char hap_v1_tcp4[] = "PROXY TCP4 127.0.0.1 127.0.0.1 48986 49511\r\n";
/* hap_v1_tcp6: client ::1 port 35776 -> haproxy ::1 port 51179 */
static const char hap_v1_tcp6[] = "PROXY TCP6 ::1 ::1 35776 51179\r\n";

/* ------------------------------------------------------------------ */
/* Helpers */

/* An endpoint in a table. Family 0: none (a NULL address in pp_header). */
struct ep {
	int family;
	const char *ip;
	unsigned port;
};
#define NONE { 0, NULL, 0 }
#define S4 { AF_INET, "192.0.2.1", 56324 }
#define D4 { AF_INET, "198.51.100.2", 443 }
#define S6 { AF_INET6, "2001:db8::1", 56324 }
#define D6 { AF_INET6, "2001:db8:0:1::a", 443 }
#define M4 { AF_INET6, "::ffff:192.0.2.1", 56324 }   /* S4, IPv4-mapped */

static void ep_addr(struct netaddr *a, const struct ep *e)
{
	memset(a, 0, sizeof(*a));
	a->family = (uint8_t)e->family;
	if (e->family && inet_pton(e->family, e->ip, a->ip) != 1) {
		fprintf(stderr, "test bug: bad address %s\n", e->ip);
		exit(2);
	}
	a->port = htons((uint16_t)e->port);
}

/* ::ffff:a.b.c.d -> a.b.c.d, so that an IPv4 address reads the same whether a
 * decoder returns it mapped or not (the contract does not say which). */
static void canon(uint8_t *family, uint8_t ip[16])
{
	static const uint8_t pfx[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (*family == AF_INET6 && memcmp(ip, pfx, 12) == 0) {
		memmove(ip, ip + 12, 4);
		*family = AF_INET;
	}
	if (*family == AF_INET)
		memset(ip + 4, 0, 12);
}

/* Whether decoded address A is endpoint E: same IP (mapped or not), same port. */
static int addr_is(const struct netaddr *a, const struct ep *e)
{
	struct netaddr want;
	ep_addr(&want, e);
	uint8_t gf = a->family, wf = want.family, gip[16], wip[16];
	memcpy(gip, a->ip, 16);
	memcpy(wip, want.ip, 16);
	canon(&gf, gip);
	canon(&wf, wip);
	if (gf != wf || memcmp(gip, wip, 16) != 0 || a->port != want.port) {
		char t[INET6_ADDRSTRLEN] = "?";
		if (a->family == AF_INET || a->family == AF_INET6)
			inet_ntop(a->family, a->ip, t, sizeof(t));
		fprintf(stderr, "  address: got family %d %s port %u, want %s port %u\n",
			a->family, t, ntohs(a->port), e->ip, e->port);
		return 0;
	}
	return 1;
}

static void hex(const char *label, const uint8_t *p, size_t n)
{
	fprintf(stderr, "  %s (%zu):", label, n);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "%s%02x", i % 32 ? " " : "\n    ", p[i]);
	fprintf(stderr, "\n");
}

/* Byte equality; on a mismatch, show where and both dumps. */
static int bytes_eq(const char *name, const void *got, size_t glen, const void *want, size_t wlen)
{
	if (glen == wlen && memcmp(got, want, wlen) == 0)
		return 1;
	size_t i = 0;
	while (i < glen && i < wlen && ((const uint8_t *)got)[i] == ((const uint8_t *)want)[i])
		i++;
	fprintf(stderr, "  [%s] got %zu bytes, want %zu; first difference at offset %zu\n",
		name, glen, wlen, i);
	hex("got ", got, glen);
	hex("want", want, wlen);
	return 0;
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The v2 address block length for a family byte (0 when LOCAL or unknown). */
static size_t addr_len(const uint8_t *hdr)
{
	if ((hdr[12] & 0x0f) == 0)
		return 0;
	return hdr[13] == 0x11 ? 12 : hdr[13] == 0x21 ? 36 : 0;
}

/* The TLV of TYPE in [P+START, P+END): its offset, its total size in *SZ;
 * -1 when absent. The test's own walker (headers here are well formed). */
static long tlv_find(const uint8_t *p, size_t start, size_t end, uint8_t type, size_t *sz)
{
	for (size_t off = start; off + 3 <= end; ) {
		size_t len = (size_t)p[off + 1] << 8 | p[off + 2];
		if (off + 3 + len > end)
			return -1;
		if (p[off] == type) {
			*sz = 3 + len;
			return (long)off;
		}
		off += 3 + len;
	}
	return -1;
}

/* The CRC32C check of the spec done by hand with pp_crc32c: zero the value,
 * CRC the whole header, compare with the big-endian value sent. */
static int crc_verifies(const uint8_t *hdr, size_t n)
{
	uint8_t copy[PP_V2_MAX + 64];
	size_t sz;
	long at = tlv_find(hdr, PP_V2_HDR_LEN + addr_len(hdr), n, PP2_TYPE_CRC32C, &sz);
	if (at < 0 || sz != 7 || n > sizeof(copy))
		return 0;
	memcpy(copy, hdr, n);
	memset(copy + at + 3, 0, 4);
	return pp_crc32c(0, copy, n) == rd32(hdr + at + 3);
}

/* ------------------------------------------------------------------ */
/* CRC32C */

static void test_crc32c(void)
{
	uint8_t zeros[32], ones[32], inc[32], dec[32];
	for (int i = 0; i < 32; i++) {
		zeros[i] = 0;
		ones[i] = 0xff;
		inc[i] = (uint8_t)i;
		dec[i] = (uint8_t)(31 - i);
	}
	/* The check value of CRC-32C (the brief, and every CRC catalogue). */
	CHECK(pp_crc32c(0, "123456789", 9) == 0xE3069283u);
	/* RFC 3720 (iSCSI) appendix B.4, as 32-bit values. */
	CHECK(pp_crc32c(0, zeros, 32) == 0x8A9136AAu);
	CHECK(pp_crc32c(0, ones, 32) == 0x62A8AB43u);
	CHECK(pp_crc32c(0, inc, 32) == 0x46DD794Eu);
	CHECK(pp_crc32c(0, dec, 32) == 0x113FDB5Cu);
	CHECK(pp_crc32c(0, "", 0) == 0);
	/* Fed in pieces, passing the previous result on. */
	CHECK(pp_crc32c(pp_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u);
	uint32_t c = 0;
	for (int i = 0; i < 9; i++)
		c = pp_crc32c(c, "123456789" + i, 1);
	CHECK(c == 0xE3069283u);
	CHECK(pp_crc32c(pp_crc32c(0, inc, 0), inc, 32) == 0x46DD794Eu);
}

/* ------------------------------------------------------------------ */
/* Encoder: golden bytes */

static const char ALPN[] = "http/1.1";
static const char AUTHORITY[] = "example.com";
static const char UID[] = "uid\0\xfe\xff" "42";
#define UID_LEN (sizeof(UID) - 1)

static const struct pp_ssl ssl_full = {
	.client = PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS,
	.verify = 0,
	.version = "TLSv1.3", .cn = "client.example", .cipher = "TLS_AES_128_GCM_SHA256",
	.sig_alg = "ECDSA-SHA256", .key_alg = "EC256",
};
/* No client certificate (verify non-zero, big-endian on the wire); NULL and
 * empty strings leave their sub-TLV out. */
static const struct pp_ssl ssl_partial = {
	.client = PP2_CLIENT_SSL,
	.verify = 0x01020304,
	.version = "TLSv1.3", .cn = NULL, .cipher = "TLS_AES_256_GCM_SHA384",
	.sig_alg = "", .key_alg = "RSA2048",
};
/* What HAProxy sends for a plain-TCP client: client 0, verify 0, no sub-TLV. */
static const struct pp_ssl ssl_bare = { 0 };

struct enc_case {
	const char *name;
	struct ep src, dst;
	unsigned tlvs;
	const struct pp_ssl *ssl;
	const uint8_t *v2;
	size_t v2_len;
	const char *v1;          /* TLVs do not exist in v1 */
	struct ep wsrc, wdst;    /* what decoding the v2 bytes gives (family 0: local) */
};
#define G(a) a, sizeof(a)
#define V1_TCP4 "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n"

/* Every case carries all the TLV data; TLVS alone decides what is sent. */
static const struct enc_case enc_cases[] = {
	{ "tcp4", S4, D4, 0, &ssl_full, G(g_tcp4), V1_TCP4, S4, D4 },
	{ "tcp6", S6, D6, 0, &ssl_full, G(g_tcp6),
	  "PROXY TCP6 2001:db8::1 2001:db8:0:1::a 56324 443\r\n", S6, D6 },
	/* different families: both as IPv6, the IPv4 one mapped */
	{ "mixed v4 src v6 dst", S4, D6, 0, &ssl_full, G(g_mixed),
	  "PROXY TCP6 ::ffff:192.0.2.1 2001:db8:0:1::a 56324 443\r\n", M4, D6 },
	/* an IPv4-mapped and an IPv4 one: TCP4 */
	{ "mapped src v4 dst", M4, D4, 0, &ssl_full, G(g_mapped4), V1_TCP4, S4, D4 },
	{ "local", NONE, NONE, 0, &ssl_full, G(g_local), "PROXY UNKNOWN\r\n", NONE, NONE },
	/* "A TLV is emitted when its bit is in TLVS and its data is present":
	 * the CRC32C has no data, so LOCAL carries it too (as HAProxy does). */
	{ "local + crc32c", NONE, NONE, PP_TLV_CRC32C, &ssl_full, G(g_local_crc),
	  "PROXY UNKNOWN\r\n", NONE, NONE },
	{ "alpn", S4, D4, PP_TLV_ALPN, &ssl_full, G(g_alpn), V1_TCP4, S4, D4 },
	{ "authority", S4, D4, PP_TLV_AUTHORITY, &ssl_full, G(g_authority), V1_TCP4, S4, D4 },
	{ "unique_id", S4, D4, PP_TLV_UNIQUE_ID, &ssl_full, G(g_unique_id), V1_TCP4, S4, D4 },
	{ "ssl full", S4, D4, PP_TLV_SSL, &ssl_full, G(g_ssl_full), V1_TCP4, S4, D4 },
	{ "ssl partial", S4, D4, PP_TLV_SSL, &ssl_partial, G(g_ssl_partial), V1_TCP4, S4, D4 },
	{ "ssl bare", S4, D4, PP_TLV_SSL, &ssl_bare, G(g_ssl_bare), V1_TCP4, S4, D4 },
	{ "crc32c", S4, D4, PP_TLV_CRC32C, &ssl_full, G(g_crc32c), V1_TCP4, S4, D4 },
	{ "all tlvs tcp4", S4, D4, ALL_TLVS, &ssl_full, G(g_all4), V1_TCP4, S4, D4 },
	{ "all tlvs tcp6", S6, D6, ALL_TLVS, &ssl_full, G(g_all6),
	  "PROXY TCP6 2001:db8::1 2001:db8:0:1::a 56324 443\r\n", S6, D6 },
};

/* v1 lines at the edges of the format (spec 2.1's maximum lengths). */
static const struct {
	const char *name;
	struct ep src, dst;
	const char *v1;
} v1_cases[] = {
	{ "v1 tcp4 max", { AF_INET, "255.255.255.255", 65535 }, { AF_INET, "255.255.255.255", 65535 },
	  "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n" },
	{ "v1 tcp4 zeros", { AF_INET, "0.0.0.0", 0 }, { AF_INET, "0.0.0.0", 0 },
	  "PROXY TCP4 0.0.0.0 0.0.0.0 0 0\r\n" },
	{ "v1 tcp6 max", { AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535 },
	  { AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535 },
	  "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
	  "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n" },
	{ "v1 tcp6 short", { AF_INET6, "::1", 1 }, { AF_INET6, "::", 2 }, "PROXY TCP6 ::1 :: 1 2\r\n" },
};

struct hdr_store {
	struct netaddr s, d;
	struct pp_header h;
};

static struct pp_header *hdr_make(struct hdr_store *st, const struct ep *src,
	const struct ep *dst, unsigned tlvs, const struct pp_ssl *ssl)
{
	memset(st, 0, sizeof(*st));
	if (src->family) {
		ep_addr(&st->s, src);
		st->h.src = &st->s;
	}
	if (dst->family) {
		ep_addr(&st->d, dst);
		st->h.dst = &st->d;
	}
	st->h.tlvs = tlvs;
	st->h.alpn = ALPN;
	st->h.alpn_len = strlen(ALPN);
	st->h.authority = AUTHORITY;
	st->h.authority_len = strlen(AUTHORITY);
	st->h.unique_id = UID;
	st->h.unique_id_len = UID_LEN;
	st->h.ssl = ssl;
	return &st->h;
}

/* The v2 encoder gives WANT exactly; with CAP one byte short, or any CAP
 * below, it returns 0 and writes nothing past CAP; CAP == length is enough. */
static void check_encode_v2(const char *name, const struct pp_header *h, const uint8_t *want, size_t wlen)
{
	uint8_t out[PP_V2_MAX + 64];
	memset(out, 0xAA, sizeof(out));
	size_t n = pp_encode_v2(h, out, sizeof(out));
	CHECKC(name, bytes_eq(name, out, n, want, wlen));
	memset(out, 0xAA, sizeof(out));
	n = pp_encode_v2(h, out, wlen);
	CHECKC(name, n == wlen && memcmp(out, want, wlen) == 0);
	int all_zero = 1, overrun = 0;
	for (size_t cap = 0; cap < wlen; cap++) {
		memset(out, 0xAA, sizeof(out));
		if (pp_encode_v2(h, out, cap) != 0)
			all_zero = 0;
		for (size_t i = cap; i < sizeof(out); i++)
			overrun |= out[i] != 0xAA;
	}
	CHECKC(name, all_zero);      /* "0 when CAP is too small" */
	CHECKC(name, !overrun);
}

/* The same for v1: the header is its bytes, no terminating NUL promised,
 * so CAP == length must be enough. */
static void check_encode_v1(const char *name, const struct pp_header *h, const char *want)
{
	char out[PP_V1_MAX + 64];
	size_t wlen = strlen(want);
	memset(out, 'Z', sizeof(out));
	size_t n = pp_encode_v1(h, out, PP_V1_MAX);
	CHECKC(name, bytes_eq(name, out, n, want, wlen));
	memset(out, 'Z', sizeof(out));
	n = pp_encode_v1(h, out, wlen);
	CHECKC(name, n == wlen && memcmp(out, want, wlen) == 0);
	if (n != wlen)
		fprintf(stderr, "  [%s] pp_encode_v1 with CAP == the line's length %zu returned %zu\n",
			name, wlen, n);
	int all_zero = 1, overrun = 0;
	for (size_t cap = 0; cap < wlen; cap++) {
		memset(out, 'Z', sizeof(out));
		if (pp_encode_v1(h, out, cap) != 0)
			all_zero = 0;
		for (size_t i = cap; i < sizeof(out); i++)
			overrun |= out[i] != 'Z';
	}
	CHECKC(name, all_zero);
	CHECKC(name, !overrun);
}

static void test_encode_golden(void)
{
	struct hdr_store st;
	for (size_t i = 0; i < sizeof(enc_cases) / sizeof(enc_cases[0]); i++) {
		const struct enc_case *c = &enc_cases[i];
		const struct pp_header *h = hdr_make(&st, &c->src, &c->dst, c->tlvs, c->ssl);
		check_encode_v2(c->name, h, c->v2, c->v2_len);
		check_encode_v1(c->name, h, c->v1);
		/* v1 ignores TLV bits: the same line with all of them set */
		h = hdr_make(&st, &c->src, &c->dst, ALL_TLVS, c->ssl);
		check_encode_v1(c->name, h, c->v1);
	}
	for (size_t i = 0; i < sizeof(v1_cases) / sizeof(v1_cases[0]); i++) {
		const struct pp_header *h = hdr_make(&st, &v1_cases[i].src, &v1_cases[i].dst, 0, NULL);
		check_encode_v1(v1_cases[i].name, h, v1_cases[i].v1);
	}
}

/* Addresses of family 0 count as absent: LOCAL / UNKNOWN. */
static void test_encode_family0_is_local(void)
{
	struct netaddr z;
	memset(&z, 0, sizeof(z));
	struct pp_header h = { .src = &z, .dst = &z };
	check_encode_v2("family 0", &h, g_local, sizeof(g_local));
	check_encode_v1("family 0", &h, "PROXY UNKNOWN\r\n");
}

/* A TLV bit without its data sends nothing for it. */
static void test_encode_absent_data(void)
{
	static const struct ep s4 = S4, d4 = D4;
	struct hdr_store st;
	unsigned bits = PP_TLV_ALPN | PP_TLV_AUTHORITY | PP_TLV_UNIQUE_ID | PP_TLV_SSL;
	struct pp_header *h = hdr_make(&st, &s4, &d4, bits, NULL);
	h->alpn = NULL;
	h->alpn_len = 0;
	h->authority = NULL;
	h->authority_len = 0;
	h->unique_id = NULL;
	h->unique_id_len = 0;
	check_encode_v2("bits without data (NULL)", h, g_tcp4, sizeof(g_tcp4));
	h = hdr_make(&st, &s4, &d4, bits, NULL);
	h->alpn_len = 0;
	h->authority_len = 0;
	h->unique_id_len = 0;
	check_encode_v2("bits without data (length 0)", h, g_tcp4, sizeof(g_tcp4));
}

/* UNIQUE_ID is at most 128 bytes (spec 2.2.5); a longer one is cut. */
static void test_encode_unique_id_cut(void)
{
	static const struct ep s4 = S4, d4 = D4;
	static const size_t lens[] = { 127, 128, 129, 200 };
	char id[200];
	for (size_t i = 0; i < sizeof(id); i++)
		id[i] = (char)(i * 7 + 1);
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		struct hdr_store st;
		struct pp_header *h = hdr_make(&st, &s4, &d4, PP_TLV_UNIQUE_ID, NULL);
		h->unique_id = id;
		h->unique_id_len = lens[k];
		size_t sent = lens[k] < PP_UNIQUE_ID_MAX ? lens[k] : PP_UNIQUE_ID_MAX;
		uint8_t out[PP_V2_MAX];
		size_t n = pp_encode_v2(h, out, sizeof(out));
		char name[32];
		snprintf(name, sizeof(name), "unique_id %zu", lens[k]);
		CHECKC(name, n == 16 + 12 + 3 + sent);
		CHECKC(name, n >= 31 && memcmp(out, g_tcp4, 14) == 0 &&
			((size_t)out[14] << 8 | out[15]) == 12 + 3 + sent &&
			memcmp(out + 16, g_tcp4 + 16, 12) == 0);
		CHECKC(name, n >= 31 && out[28] == PP2_TYPE_UNIQUE_ID &&
			((size_t)out[29] << 8 | out[30]) == sent && memcmp(out + 31, id, sent) == 0);
	}
}

/* ------------------------------------------------------------------ */
/* HAProxy's real bytes */

/* Our TLVs against HAProxy's, one by one, ignoring order: every TLV but the
 * CRC32C is byte-identical to HAProxy's of the same type; inside SSL, the
 * client/verify prefix and every sub-TLV likewise. */
static int same_tlvs_as_haproxy(const char *name, const uint8_t *ours, size_t on,
	const uint8_t *hap, size_t hn)
{
	size_t start = PP_V2_HDR_LEN + addr_len(ours);
	int ok = 1, count_ours = 0, count_hap = 0;
	for (size_t off = start; off + 3 <= on; ) {
		size_t len = 3 + ((size_t)ours[off + 1] << 8 | ours[off + 2]), hsz;
		long h = tlv_find(hap, start, hn, ours[off], &hsz);
		count_ours++;
		if (h < 0) {
			fprintf(stderr, "  [%s] TLV 0x%02x absent from HAProxy's header\n", name, ours[off]);
			ok = 0;
		} else if (ours[off] == PP2_TYPE_SSL) {
			/* type, length, client, verify */
			if (hsz != len || memcmp(ours + off, hap + h, 8) != 0)
				ok = 0;
			for (size_t so = off + 8; so + 3 <= off + len; ) {
				size_t slen = 3 + ((size_t)ours[so + 1] << 8 | ours[so + 2]), ssz;
				long hs = tlv_find(hap, (size_t)h + 8, (size_t)h + hsz, ours[so], &ssz);
				if (hs < 0 || ssz != slen || memcmp(ours + so, hap + hs, slen) != 0) {
					fprintf(stderr, "  [%s] SSL sub-TLV 0x%02x differs from HAProxy's\n", name, ours[so]);
					ok = 0;
				}
				so += slen;
			}
		} else if (ours[off] != PP2_TYPE_CRC32C &&
			   (hsz != len || memcmp(ours + off, hap + h, len) != 0)) {
			fprintf(stderr, "  [%s] TLV 0x%02x differs from HAProxy's\n", name, ours[off]);
			ok = 0;
		}
		off += len;
	}
	for (size_t off = start; off + 3 <= hn; off += 3 + ((size_t)hap[off + 1] << 8 | hap[off + 2]))
		count_hap++;
	return ok && count_ours == count_hap;
}

static const struct pp_ssl hap_ssl = {
	.client = PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS,
	.verify = 0,
	.version = "TLSv1.2", .cn = "client.example", .cipher = "ECDHE-RSA-AES128-GCM-SHA256",
	.sig_alg = "RSA-SHA256", .key_alg = "RSA2048",
};

static const struct hap_case {
	const char *name;
	const uint8_t *hap;
	size_t hap_len;
	const uint8_t *ours;     /* the same inputs in sluice's TLV order */
	size_t ours_len;
	struct ep src, dst;
	int tls;
} hap_cases[] = {
	{ "haproxy v2 tcp4", G(hap_v2_tcp4), G(hap_v2_tcp4_sluice),
	  { AF_INET, "127.0.0.1", 52808 }, { AF_INET, "127.0.0.1", 52579 }, 0 },
	{ "haproxy v2 tcp6", G(hap_v2_tcp6), G(hap_v2_tcp6_sluice),
	  { AF_INET6, "::1", 40238 }, { AF_INET6, "::1", 33209 }, 0 },
	{ "haproxy v2 tls", G(hap_v2_tls), G(hap_v2_tls_sluice),
	  { AF_INET, "127.0.0.1", 54558 }, { AF_INET, "127.0.0.1", 44511 }, 1 },
};

static void test_haproxy_v2(void)
{
	static const char uid[] = "sluice-golden-0001";
	for (size_t i = 0; i < sizeof(hap_cases) / sizeof(hap_cases[0]); i++) {
		const struct hap_case *c = &hap_cases[i];
		/* HAProxy's CRC32C verifies with ours (and so does the generator's) */
		CHECKC(c->name, crc_verifies(c->hap, c->hap_len));
		CHECKC(c->name, crc_verifies(c->ours, c->ours_len));
		/* pp_decode accepts HAProxy's header */
		struct pp_decoded d;
		const char *why = NULL;
		memset(&d, 0x55, sizeof(d));
		ssize_t r = pp_decode(c->hap, c->hap_len, &d, &why);
		CHECKC(c->name, r == (ssize_t)c->hap_len);
		if (why && r < 0)
			fprintf(stderr, "  [%s] pp_decode: %s\n", c->name, why);
		CHECKC(c->name, d.version == 2 && d.local == 0 && d.crc_checked == 1);
		CHECKC(c->name, addr_is(&d.src, &c->src) && addr_is(&d.dst, &c->dst));
		/* our encoder, same inputs */
		struct hdr_store st;
		struct pp_header *h = hdr_make(&st, &c->src, &c->dst,
			c->tls ? ALL_TLVS : PP_TLV_UNIQUE_ID | PP_TLV_CRC32C, &hap_ssl);
		h->unique_id = uid;
		h->unique_id_len = strlen(uid);
		uint8_t out[PP_V2_MAX];
		size_t n = pp_encode_v2(h, out, sizeof(out));
		CHECKC(c->name, bytes_eq(c->name, out, n, c->ours, c->ours_len));
		/* what is comparable with HAProxy's bytes directly: the 16-byte
		 * header and address block, and every TLV but the CRC's value */
		size_t fixed = PP_V2_HDR_LEN + addr_len(c->hap);
		CHECKC(c->name, n == c->hap_len && memcmp(out, c->hap, fixed) == 0);
		CHECKC(c->name, same_tlvs_as_haproxy(c->name, out, n, c->hap, c->hap_len));
	}
}

static void test_haproxy_v1(void)
{
	static const struct {
		const char *name, *line;
		struct ep src, dst;
	} cases[] = {
		{ "haproxy v1 tcp4", hap_v1_tcp4, { AF_INET, "127.0.0.1", 48986 }, { AF_INET, "127.0.0.1", 49511 } },
		{ "haproxy v1 tcp6", hap_v1_tcp6, { AF_INET6, "::1", 35776 }, { AF_INET6, "::1", 51179 } },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct hdr_store st;
		const struct pp_header *h = hdr_make(&st, &cases[i].src, &cases[i].dst, 0, NULL);
		check_encode_v1(cases[i].name, h, cases[i].line);
		struct pp_decoded d;
		const char *why = NULL;
		size_t len = strlen(cases[i].line);
		CHECKC(cases[i].name, pp_decode((const uint8_t *)cases[i].line, len, &d, &why) == (ssize_t)len);
		CHECKC(cases[i].name, d.version == 1 && d.local == 0 && d.crc_checked == 0);
		CHECKC(cases[i].name, addr_is(&d.src, &cases[i].src) && addr_is(&d.dst, &cases[i].dst));
	}
}

/* ------------------------------------------------------------------ */
/* pp_detect */

static void test_detect(void)
{
	static const struct {
		const char *name;
		const char *p;
		size_t n;
		int want;
	} cases[] = {
		{ "empty", "", 0, 0 },
		{ "P", "P", 1, 0 },
		{ "PRO", "PRO", 3, 0 },
		{ "PROXY", "PROXY", 5, 0 },
		{ "PROXY + space", "PROXY ", 6, 1 },
		{ "v1 line", "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\r\n", 45, 1 },
		{ "PROXYX", "PROXYX", 6, -1 },
		{ "lower case proxy", "proxy ", 6, -1 },
		{ "GET", "GET ", 4, -1 },
		{ "G", "G", 1, -1 },
		{ "TLS record", "\x16\x03\x01\x02\x00", 5, -1 },
		{ "TLS 0x16 0x03", "\x16\x03", 2, -1 },
		{ "v2 signature, 1 byte", "\r", 1, 0 },
		{ "v2 signature, 5 bytes", PP_V2_SIG, 5, 0 },
		{ "v2 signature, 11 bytes", PP_V2_SIG, 11, 0 },
		{ "v2 signature, complete", PP_V2_SIG, 12, 1 },
		{ "v2 signature + header", PP_V2_SIG "\x21\x11\x00\x0c", 16, 1 },
		{ "CRLFCRLF then not a signature", "\r\n\r\nX", 5, -1 },
		{ "last signature byte wrong", "\r\n\r\n\0\r\nQUIT\r", 12, -1 },
		{ "HTTP/2 preface", "PRI * HTTP/2.0\r\n", 16, -1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int r = pp_detect((const uint8_t *)cases[i].p, cases[i].n);
		CHECKC(cases[i].name, r == cases[i].want);
		if (r != cases[i].want)
			fprintf(stderr, "  [%s] got %d, want %d\n", cases[i].name, r, cases[i].want);
	}
}

/* ------------------------------------------------------------------ */
/* pp_decode: valid headers */

static const uint8_t TRAILER[] = "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n";

/* P[0..N) is a complete valid header: decoded alone and with request bytes
 * after it, it gives N and the fields; every shorter prefix gives 0. */
static void check_decode_ok(const char *name, const uint8_t *p, size_t n, int version,
	int local, int crc, const struct ep *src, const struct ep *dst)
{
	static uint8_t buf[PP_V2_MAX + sizeof(TRAILER)];
	struct pp_decoded d;
	const char *why = NULL;
	memcpy(buf, p, n);
	memcpy(buf + n, TRAILER, sizeof(TRAILER) - 1);
	for (int with_trailer = 0; with_trailer < 2; with_trailer++) {
		memset(&d, 0x55, sizeof(d));
		why = NULL;
		ssize_t r = pp_decode(buf, n + (with_trailer ? sizeof(TRAILER) - 1 : 0), &d, &why);
		CHECKC(name, r == (ssize_t)n);
		if (r != (ssize_t)n)
			fprintf(stderr, "  [%s] got %zd (%s), want %zu\n", name, r, r < 0 && why ? why : "-", n);
		CHECKC(name, d.version == version);
		CHECKC(name, d.local == local);
		CHECKC(name, d.crc_checked == crc);
		if (!local)
			CHECKC(name, addr_is(&d.src, src) && addr_is(&d.dst, dst));
	}
	/* every prefix: need more */
	int bad = -1;
	for (size_t k = 0; k < n && bad < 0; k++) {
		if (pp_decode(buf, k, &d, &why) != 0)
			bad = (int)k;
	}
	CHECKC(name, bad < 0);
	if (bad >= 0)
		fprintf(stderr, "  [%s] a %d-byte prefix of the %zu-byte header did not give 0\n", name, bad, n);
}

#define A4 "\xc0\x00\x02\x01" "\xc6\x33\x64\x02" "\xdc\x04" "\x01\xbb"
#define A6 "\x20\x01\x0d\xb8" "\x00\x00\x00\x00" "\x00\x00\x00\x00" "\x00\x00\x00\x01" \
	   "\x20\x01\x0d\xb8" "\x00\x00\x00\x01" "\x00\x00\x00\x00" "\x00\x00\x00\x0a" \
	   "\xdc\x04" "\x01\xbb"
#define BYTES(s) (const uint8_t *)(s), sizeof(s) - 1

static const struct dec_ok {
	const char *name;
	const uint8_t *p;
	size_t n;
	int version, local, crc;
	struct ep src, dst;
} dec_ok_cases[] = {
	/* v1 (spec 2.1) */
	{ "v1 tcp4", BYTES(V1_TCP4), 1, 0, 0, S4, D4 },
	{ "v1 tcp4 spec example", BYTES("PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"), 1, 0, 0,
	  { AF_INET, "192.168.0.1", 56324 }, { AF_INET, "192.168.0.11", 443 } },
	{ "v1 tcp4 extremes", BYTES("PROXY TCP4 255.255.255.255 0.0.0.0 65535 0\r\n"), 1, 0, 0,
	  { AF_INET, "255.255.255.255", 65535 }, { AF_INET, "0.0.0.0", 0 } },
	{ "v1 tcp6", BYTES("PROXY TCP6 2001:db8::1 2001:db8:0:1::a 56324 443\r\n"), 1, 0, 0, S6, D6 },
	/* "sets of 4 hexadecimal digits (upper or lower case)" */
	{ "v1 tcp6 upper case, full form",
	  BYTES("PROXY TCP6 2001:0DB8:0000:0000:0000:0000:0000:0001 2001:DB8:0:1::A 56324 443\r\n"),
	  1, 0, 0, S6, D6 },
	/* what our encoder (and HAProxy) send for different families */
	{ "v1 tcp6 mapped", BYTES("PROXY TCP6 ::ffff:192.0.2.1 2001:db8:0:1::a 56324 443\r\n"),
	  1, 0, 0, M4, D6 },
	{ "v1 tcp6 104 bytes", BYTES("PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
	  "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"), 1, 0, 0,
	  { AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535 },
	  { AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535 } },
	{ "v1 unknown", BYTES("PROXY UNKNOWN\r\n"), 1, 1, 0, NONE, NONE },
	/* "the receiver must ignore anything presented before the CRLF"; the
	 * spec's 107-byte worst case */
	{ "v1 unknown 107 bytes", BYTES("PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
	  "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n"), 1, 1, 0, NONE, NONE },
	{ "v1 unknown with v4 fields", BYTES("PROXY UNKNOWN 192.0.2.1 198.51.100.2 56324 443\r\n"),
	  1, 1, 0, NONE, NONE },
	/* v2 (spec 2.2) beyond the encoder goldens */
	/* "Receivers MUST always consider this field to skip the appropriate
	 * number of bytes and must not assume zero is presented for LOCAL" */
	{ "v2 local with a tcp4 block", BYTES(PP_V2_SIG "\x20\x11\x00\x0c" A4), 2, 1, 0, NONE, NONE },
	{ "v2 local with a tcp6 block and a tlv",
	  BYTES(PP_V2_SIG "\x20\x21\x00\x2f" A6 "\x02\x00\x08" "a.b.test"), 2, 1, 0, NONE, NONE },
	/* "A receiver may choose to skip over and ignore the TLVs it is not
	 * interested in": NOOP (2.2.4), NETNS, a custom and a future type,
	 * zero-length ones included */
	{ "v2 unknown and noop tlvs",
	  BYTES(PP_V2_SIG "\x21\x11\x00\x27" A4 "\x04\x00\x00" "\x04\x00\x03" "\x00\x00\x00"
		"\x30\x00\x03" "ns1" "\xe0\x00\x02" "\xde\xad" "\xf8\x00\x00" "\x00\x00\x01" "\x7f"),
	  2, 0, 0, S4, D4 },
	/* a TLV of a known type with unusual content is still only a TLV */
	{ "v2 empty alpn tlv", BYTES(PP_V2_SIG "\x21\x11\x00\x0f" A4 "\x01\x00\x00"), 2, 0, 0, S4, D4 },
	/* the header comment: AF_UNIX means "keep the socket's addresses" */
	{ "v2 unix stream", BYTES(PP_V2_SIG "\x21\x31\x00\xd8"
	  "/run/lb.sock\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
	  "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
	  "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
	  "/run/app.sock\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
	  "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
	  "\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"), 2, 1, 0, NONE, NONE },
};

static void test_decode_valid(void)
{
	for (size_t i = 0; i < sizeof(enc_cases) / sizeof(enc_cases[0]); i++) {
		const struct enc_case *c = &enc_cases[i];
		int local = c->wsrc.family == 0;
		char name[64];
		snprintf(name, sizeof(name), "decode v2 %s", c->name);
		check_decode_ok(name, c->v2, c->v2_len, 2, local, (c->tlvs & PP_TLV_CRC32C) != 0,
			&c->wsrc, &c->wdst);
		snprintf(name, sizeof(name), "decode v1 %s", c->name);
		check_decode_ok(name, (const uint8_t *)c->v1, strlen(c->v1), 1, local, 0, &c->wsrc, &c->wdst);
	}
	for (size_t i = 0; i < sizeof(dec_ok_cases) / sizeof(dec_ok_cases[0]); i++) {
		const struct dec_ok *c = &dec_ok_cases[i];
		check_decode_ok(c->name, c->p, c->n, c->version, c->local, c->crc, &c->src, &c->dst);
	}
	for (size_t i = 0; i < sizeof(hap_cases) / sizeof(hap_cases[0]); i++) {
		const struct hap_case *c = &hap_cases[i];
		check_decode_ok(c->name, c->hap, c->hap_len, 2, 0, 1, &c->src, &c->dst);
		check_decode_ok(c->name, c->ours, c->ours_len, 2, 0, 1, &c->src, &c->dst);
	}
	/* A large header still within PP_V2_MAX (whether that bounds the whole
	 * header or the length field): a 1008-byte one, padded with NOOP. */
	static uint8_t big[1008];
	memcpy(big, PP_V2_SIG "\x21\x11\x03\xe0" A4, 28);   /* 0x3e0 = 992 */
	big[28] = PP2_TYPE_NOOP;
	big[29] = (1008 - 31) >> 8;
	big[30] = (1008 - 31) & 0xff;
	static const struct ep s4 = S4, d4 = D4;
	check_decode_ok("v2 1008 bytes", big, sizeof(big), 2, 0, 0, &s4, &d4);
}

/* ------------------------------------------------------------------ */
/* pp_decode: invalid headers */

static void check_decode_bad(const char *name, const uint8_t *p, size_t n)
{
	struct pp_decoded d;
	const char *why = NULL;
	ssize_t r = pp_decode(p, n, &d, &why);
	CHECKC(name, r == -1);
	if (r != -1)
		fprintf(stderr, "  [%s] got %zd, want -1\n", name, r);
	else
		CHECKC(name, why != NULL && why[0] != '\0');
}

/* A TCP4 header whose SSL TLV holds a VERSION sub-TLV claiming 8 bytes
 * with 7 left in the SSL TLV, followed by a NOOP, so that the claimed byte
 * is inside the header but outside the SSL TLV. */
#define SSL_SUB_OVERFLOW PP_V2_SIG "\x21\x11\x00\x22" A4 \
	"\x20\x00\x0f" "\x01" "\x00\x00\x00\x00" "\x21\x00\x08" "TLSv1.3" "\x04\x00\x01" "\x00"

static const struct {
	const char *name;
	const uint8_t *p;
	size_t n;
} dec_bad_cases[] = {
	/* v2: the fixed 16 bytes (spec 2.2) */
	{ "v2 bad signature", BYTES("\r\n\r\n\0\r\nQUIX\n" "\x21\x11\x00\x0c" A4) },
	{ "v2 signature with a bad first byte", BYTES("\n\n\r\n\0\r\nQUIT\n" "\x21\x11\x00\x0c" A4) },
	{ "neither v1 nor v2", BYTES("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n") },
	{ "TLS client hello", BYTES("\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" "0123456789abcdef") },
	/* "it must always be sent as \x2 and the receiver must only accept this value" */
	{ "v2 version 1", BYTES(PP_V2_SIG "\x11\x11\x00\x0c" A4) },
	{ "v2 version 3", BYTES(PP_V2_SIG "\x31\x11\x00\x0c" A4) },
	{ "v2 version 0", BYTES(PP_V2_SIG "\x01\x11\x00\x0c" A4) },
	/* "Receivers must drop connections presenting unexpected values here" */
	{ "v2 command 2", BYTES(PP_V2_SIG "\x22\x11\x00\x0c" A4) },
	{ "v2 command 15", BYTES(PP_V2_SIG "\x2f\x11\x00\x0c" A4) },
	/* sluice proxies TCP only: UDP is refused (UNSPEC mode for an
	 * unsupported protocol: "free to accept ... or to reject it") */
	{ "v2 udp4", BYTES(PP_V2_SIG "\x21\x12\x00\x0c" A4) },
	{ "v2 udp6", BYTES(PP_V2_SIG "\x21\x22\x00\x24" A6) },
	/* "other values are unspecified ... must be rejected as invalid" */
	{ "v2 family 4", BYTES(PP_V2_SIG "\x21\x41\x00\x0c" A4) },
	{ "v2 transport 3", BYTES(PP_V2_SIG "\x21\x13\x00\x0c" A4) },
	/* length beyond PP_V2_MAX: refused from the 16 bytes alone (waiting for
	 * the rest would only hold the connection open) */
	{ "v2 length 65535, fixed part only", BYTES(PP_V2_SIG "\x21\x11\xff\xff") },
	{ "v2 length PP_V2_MAX+1, fixed part only", BYTES(PP_V2_SIG "\x21\x11\x04\x01") },
	/* address block shorter than the family needs */
	{ "v2 tcp4 length 0", BYTES(PP_V2_SIG "\x21\x11\x00\x00") },
	{ "v2 tcp4 length 11", BYTES(PP_V2_SIG "\x21\x11\x00\x0b" "\xc0\x00\x02\x01" "\xc6\x33\x64\x02"
				     "\xdc\x04" "\x01") },
	{ "v2 tcp6 length 12", BYTES(PP_V2_SIG "\x21\x21\x00\x0c" A4) },
	{ "v2 tcp6 length 35", BYTES(PP_V2_SIG "\x21\x21\x00\x23"
				     "\x20\x01\x0d\xb8" "\x00\x00\x00\x00" "\x00\x00\x00\x00" "\x00\x00\x00\x01"
				     "\x20\x01\x0d\xb8" "\x00\x00\x00\x01" "\x00\x00\x00\x00" "\x00\x00\x00\x0a"
				     "\xdc\x04" "\x01") },
	{ "v2 unix length 12", BYTES(PP_V2_SIG "\x21\x31\x00\x0c" A4) },
	/* TLVs that do not fit the header */
	{ "v2 tlv length overflows the header", BYTES(PP_V2_SIG "\x21\x11\x00\x17" A4 "\x01\x00\x09" "http/1.1") },
	{ "v2 tlv length 65535", BYTES(PP_V2_SIG "\x21\x11\x00\x0f" A4 "\x04\xff\xff") },
	{ "v2 tlv header cut after 1 byte", BYTES(PP_V2_SIG "\x21\x11\x00\x0d" A4 "\x04") },
	{ "v2 tlv header cut after 2 bytes", BYTES(PP_V2_SIG "\x21\x11\x00\x0e" A4 "\x04\x00") },
	{ "v2 tlv after a good one overflows",
	  BYTES(PP_V2_SIG "\x21\x11\x00\x1c" A4 "\x01\x00\x08" "http/1.1" "\x02\x00\x04" "ab") },
	/* the SSL TLV's own structure */
	{ "v2 ssl sub-tlv overflows the ssl tlv", BYTES(SSL_SUB_OVERFLOW) },
	{ "v2 ssl sub-tlv overflows the header",
	  BYTES(PP_V2_SIG "\x21\x11\x00\x1e" A4 "\x20\x00\x0f" "\x01" "\x00\x00\x00\x00" "\x21\x00\xff" "TLSv1.3") },
	{ "v2 ssl tlv shorter than client+verify",
	  BYTES(PP_V2_SIG "\x21\x11\x00\x13" A4 "\x20\x00\x04" "\x01" "\x00\x00\x00") },
	{ "v2 ssl sub-tlv header cut",
	  BYTES(PP_V2_SIG "\x21\x11\x00\x16" A4 "\x20\x00\x07" "\x01" "\x00\x00\x00\x00" "\x21\x00") },
	/* CRC32C (spec 2.2.3): a 32-bit value, and it must match */
	{ "v2 crc32c length 0", BYTES(PP_V2_SIG "\x21\x11\x00\x0f" A4 "\x03\x00\x00") },
	{ "v2 crc32c length 3", BYTES(PP_V2_SIG "\x21\x11\x00\x12" A4 "\x03\x00\x03" "\x20\xec\x95") },
	{ "v2 crc32c length 5", BYTES(PP_V2_SIG "\x21\x11\x00\x14" A4 "\x03\x00\x05" "\x20\xec\x95\x49\x00") },
	{ "v2 crc32c zero", BYTES(PP_V2_SIG "\x21\x11\x00\x13" A4 "\x03\x00\x04" "\x00\x00\x00\x00") },
	{ "v2 crc32c little-endian", BYTES(PP_V2_SIG "\x21\x11\x00\x13" A4 "\x03\x00\x04" "\x49\x95\xec\x20") },
	/* v1 (spec 2.1): "Any sequence which does not exactly match the
	 * protocol must be discarded" */
	{ "v1 bare LF", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\n"
			      "GET / HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nX-Pad: 0123456789\r\n\r\n") },
	{ "v1 bare CR", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443\rGET / HTTP/1.1\r\n") },
	{ "v1 ipv4 three parts", BYTES("PROXY TCP4 192.0.2 198.51.100.2 56324 443\r\n") },
	{ "v1 ipv4 five parts", BYTES("PROXY TCP4 192.0.2.1.5 198.51.100.2 56324 443\r\n") },
	{ "v1 ipv4 part 256", BYTES("PROXY TCP4 192.0.2.1 198.51.100.256 56324 443\r\n") },
	{ "v1 ipv4 letters", BYTES("PROXY TCP4 a.b.c.d 198.51.100.2 56324 443\r\n") },
	{ "v1 ipv4 heading zero", BYTES("PROXY TCP4 192.0.2.01 198.51.100.2 56324 443\r\n") },
	{ "v1 ipv6 bad digit", BYTES("PROXY TCP6 2001:db8::g 2001:db8:0:1::a 56324 443\r\n") },
	{ "v1 ipv6 two ::", BYTES("PROXY TCP6 2001::db8::1 2001:db8:0:1::a 56324 443\r\n") },
	{ "v1 ipv6 too short", BYTES("PROXY TCP6 2001:db8:0:0:0:0:1 2001:db8:0:1::a 56324 443\r\n") },
	{ "v1 port 65536", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 65536 443\r\n") },
	{ "v1 port 99999", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 99999\r\n") },
	{ "v1 port 2^32+443", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 4294967739\r\n") },
	{ "v1 port heading zero", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 0443\r\n") },
	{ "v1 port with sign", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 +56324 443\r\n") },
	{ "v1 negative port", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 -1 443\r\n") },
	{ "v1 port hex", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 0x1bb 443\r\n") },
	{ "v1 missing dst port", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324\r\n") },
	{ "v1 empty dst port", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 \r\n") },
	{ "v1 extra field", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 7\r\n") },
	{ "v1 trailing space", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324 443 \r\n") },
	{ "v1 double space after PROXY", BYTES("PROXY  TCP4 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 double space after TCP4", BYTES("PROXY TCP4  192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 double space between addresses", BYTES("PROXY TCP4 192.0.2.1  198.51.100.2 56324 443\r\n") },
	{ "v1 double space between ports", BYTES("PROXY TCP4 192.0.2.1 198.51.100.2 56324  443\r\n") },
	{ "v1 tab", BYTES("PROXY TCP4\t192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 NUL", BYTES("PROXY TCP4 192.0.2.1\0" "198.51.100.2 56324 443\r\n") },
	{ "v1 TCP4 with ipv6", BYTES("PROXY TCP4 2001:db8::1 2001:db8:0:1::a 56324 443\r\n") },
	{ "v1 TCP4 with ipv6 dst", BYTES("PROXY TCP4 192.0.2.1 2001:db8:0:1::a 56324 443\r\n") },
	{ "v1 TCP6 with ipv4", BYTES("PROXY TCP6 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 garbage", BYTES("PROXY garbage\r\n") },
	{ "v1 TCP5", BYTES("PROXY TCP5 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 lower case tcp4", BYTES("PROXY tcp4 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 UDP4", BYTES("PROXY UDP4 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 UNKNOWNX", BYTES("PROXY UNKNOWNX\r\n") },
	{ "v1 nothing after PROXY", BYTES("PROXY \r\n") },
	{ "v1 no space after PROXY", BYTES("PROXY\r\n\r\n\r\n") },
	{ "v1 PROXYTCP4", BYTES("PROXYTCP4 192.0.2.1 198.51.100.2 56324 443\r\n") },
	{ "v1 TCP4 without addresses", BYTES("PROXY TCP4\r\n") },
};

/* Test data sanity: a v2 case's length field matches the bytes given (or
 * only the fixed 16 are given), so that "-1" is never really "need more". */
static void check_table_lengths(const char *name, const uint8_t *p, size_t n)
{
	if (n < PP_V2_HDR_LEN || memcmp(p, PP_V2_SIG, PP_V2_SIG_LEN) != 0)
		return;
	size_t len = (size_t)p[14] << 8 | p[15];
	if (n != PP_V2_HDR_LEN && n != PP_V2_HDR_LEN + len) {
		fprintf(stderr, "test bug: [%s] %zu bytes, length field says %zu\n", name, n, 16 + len);
		exit(2);
	}
}

static void test_decode_invalid(void)
{
	for (size_t i = 0; i < sizeof(dec_ok_cases) / sizeof(dec_ok_cases[0]); i++)
		check_table_lengths(dec_ok_cases[i].name, dec_ok_cases[i].p, dec_ok_cases[i].n);
	for (size_t i = 0; i < sizeof(dec_bad_cases) / sizeof(dec_bad_cases[0]); i++)
		check_table_lengths(dec_bad_cases[i].name, dec_bad_cases[i].p, dec_bad_cases[i].n);
	for (size_t i = 0; i < sizeof(dec_bad_cases) / sizeof(dec_bad_cases[0]); i++)
		check_decode_bad(dec_bad_cases[i].name, dec_bad_cases[i].p, dec_bad_cases[i].n);

	/* "If the CRLF sequence is not found in the first 107 characters, the
	 * receiver should declare the line invalid." */
	uint8_t line[PP_V1_MAX + 8];
	memcpy(line, "PROXY UNKNOWN ", 14);
	memset(line + 14, 'f', sizeof(line) - 14);
	check_decode_bad("v1 no CRLF in 107 bytes (UNKNOWN)", line, PP_V1_MAX);
	check_decode_bad("v1 no CRLF in 115 bytes (UNKNOWN)", line, sizeof(line));
	memcpy(line + PP_V1_MAX - 1, "\r\n", 2);       /* CRLF at 107-108: one too far */
	check_decode_bad("v1 CRLF ending at byte 108", line, PP_V1_MAX + 1);
	memcpy(line, "PROXY TCP4 192.0.2.1 198.51.100.2 56324 443", 43);
	memset(line + 43, '3', sizeof(line) - 43);
	check_decode_bad("v1 no CRLF in 107 bytes (TCP4)", line, PP_V1_MAX);

	/* length beyond PP_V2_MAX with every byte present */
	static uint8_t big[PP_V2_HDR_LEN + PP_V2_MAX + 1];
	memset(big, 0, sizeof(big));
	memcpy(big, PP_V2_SIG "\x21\x11", 14);
	big[14] = (PP_V2_MAX + 1) >> 8;
	big[15] = (PP_V2_MAX + 1) & 0xff;
	memcpy(big + 16, A4, 12);
	big[28] = PP2_TYPE_NOOP;
	big[29] = (PP_V2_MAX + 1 - 15) >> 8;
	big[30] = (PP_V2_MAX + 1 - 15) & 0xff;
	check_decode_bad("v2 length PP_V2_MAX+1, complete", big, sizeof(big));

	/* a UNIX block one byte short */
	static uint8_t ux[16 + 215];
	memset(ux, 0, sizeof(ux));
	memcpy(ux, PP_V2_SIG "\x21\x31\x00\xd7", 16);
	check_decode_bad("v2 unix length 215", ux, sizeof(ux));
}

/* "If it is not, the receiver MUST treat the TCP connection providing the
 * header as invalid": flip bits of any one byte of a header carrying a
 * CRC32C and it must be refused. Zero bytes follow the header, so that a
 * flip making the length larger is judged on complete bytes rather than
 * answered with "need more". One byte is exempt: the CRC32C TLV's type.
 * Changed, the header simply carries no checksum (and an extra TLV of
 * another type), which the spec allows; nothing can detect that. */
static void check_flips(const char *name, const uint8_t *hdr, size_t n)
{
	static const uint8_t masks[] = { 0x01, 0x80, 0xff };
	static uint8_t buf[PP_V2_MAX + 1200];
	size_t crc_sz;
	long crc_at = tlv_find(hdr, PP_V2_HDR_LEN + addr_len(hdr), n, PP2_TYPE_CRC32C, &crc_sz);
	CHECKC(name, crc_at > 0);
	int bad = 0;
	for (size_t m = 0; m < sizeof(masks); m++) {
		for (size_t i = 0; i < n; i++) {
			if ((long)i == crc_at)
				continue;
			memset(buf, 0, sizeof(buf));
			memcpy(buf, hdr, n);
			buf[i] ^= masks[m];
			struct pp_decoded d;
			const char *why = NULL;
			ssize_t r = pp_decode(buf, n + 1100, &d, &why);
			if (r != -1 || !why || !*why) {
				if (bad++ < 8)
					fprintf(stderr, "  [%s] byte %zu ^ 0x%02x: got %zd\n", name, i, masks[m], r);
			}
		}
	}
	CHECKC(name, bad == 0);
}

static void test_decode_crc_flips(void)
{
	check_flips("flip g_crc32c", g_crc32c, sizeof(g_crc32c));
	check_flips("flip g_local_crc", g_local_crc, sizeof(g_local_crc));
	check_flips("flip g_all4", g_all4, sizeof(g_all4));
	check_flips("flip g_all6", g_all6, sizeof(g_all6));
	check_flips("flip hap_v2_tcp4", hap_v2_tcp4, sizeof(hap_v2_tcp4));   /* CRC32C first */
	check_flips("flip hap_v2_tls", hap_v2_tls, sizeof(hap_v2_tls));
}

/* ------------------------------------------------------------------ */
/* Round trip: what the encoder writes, the decoder reads back. */

static void test_round_trip(void)
{
	static const struct {
		const char *name;
		struct ep src, dst;
	} cases[] = {
		{ "tcp4", S4, D4 },
		{ "tcp6", S6, D6 },
		{ "mixed", S4, D6 },
		{ "loopback v4", { AF_INET, "127.0.0.1", 1 }, { AF_INET, "127.0.0.1", 65535 } },
		{ "v6 extremes", { AF_INET6, "::", 0 }, { AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535 } },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *name = cases[i].name;
		struct hdr_store st;
		const struct pp_header *h = hdr_make(&st, &cases[i].src, &cases[i].dst, ALL_TLVS, &ssl_full);
		uint8_t out[PP_V2_MAX];
		struct pp_decoded d;
		const char *why = NULL;
		size_t n = pp_encode_v2(h, out, sizeof(out));
		CHECKC(name, n > PP_V2_HDR_LEN);
		memset(&d, 0x55, sizeof(d));
		CHECKC(name, pp_decode(out, n, &d, &why) == (ssize_t)n);
		CHECKC(name, d.version == 2 && d.local == 0 && d.crc_checked == 1);
		CHECKC(name, addr_is(&d.src, &cases[i].src) && addr_is(&d.dst, &cases[i].dst));

		char line[PP_V1_MAX];
		n = pp_encode_v1(h, line, sizeof(line));
		CHECKC(name, n > 0);
		memset(&d, 0x55, sizeof(d));
		CHECKC(name, pp_decode((const uint8_t *)line, n, &d, &why) == (ssize_t)n);
		CHECKC(name, d.version == 1 && d.local == 0 && d.crc_checked == 0);
		CHECKC(name, addr_is(&d.src, &cases[i].src) && addr_is(&d.dst, &cases[i].dst));
	}
	/* LOCAL with every TLV asked for */
	static const struct ep none = NONE;
	struct hdr_store st;
	const struct pp_header *h = hdr_make(&st, &none, &none, ALL_TLVS, &ssl_full);
	uint8_t out[PP_V2_MAX];
	struct pp_decoded d;
	const char *why = NULL;
	size_t n = pp_encode_v2(h, out, sizeof(out));
	CHECK(n >= PP_V2_HDR_LEN);
	CHECK(pp_decode(out, n, &d, &why) == (ssize_t)n);
	CHECK(d.version == 2 && d.local == 1);
}

int main(void)
{
	test_crc32c();
	test_encode_golden();
	test_encode_family0_is_local();
	test_encode_absent_data();
	test_encode_unique_id_cut();
	test_haproxy_v2();
	test_haproxy_v1();
	test_detect();
	test_decode_valid();
	test_decode_invalid();
	test_decode_crc_flips();
	test_round_trip();
	printf("test_proxy_proto: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
