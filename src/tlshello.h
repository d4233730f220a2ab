/* Pure readers for the ClientHello fields sluice chooses a certificate by.
 * Inputs are the bodies of single extensions (or the cipher_suites field) as
 * both TLS libraries hand them out; nothing here touches a TLS library. */
#ifndef SLUICE_TLSHELLO_H
#define SLUICE_TLSHELLO_H

#include <stddef.h>
#include <stdint.h>

#define TLSEXT_SERVER_NAME        0
#define TLSEXT_SIG_ALGS           13
#define TLSEXT_SUPPORTED_VERSIONS 43

/* host_name from a server_name extension, lower-cased into OUT. Returns its
 * length, 0 when absent, -1 when the extension is malformed. */
int hello_sni(const uint8_t *ext, size_t len, char *out, size_t outlen);
/* 1 when signature_algorithms lists an ECDSA scheme for CURVE_NID's hash
 * (P-256: 0x0403, P-384: 0x0503), -1 when malformed, else 0. CURVE_BITS is
 * 256 or 384. */
int hello_ecdsa_sigalg(const uint8_t *ext, size_t len, int curve_bits);
/* 1 when supported_versions offers TLS 1.3, -1 malformed, else 0. */
int hello_offers_tls13(const uint8_t *ext, size_t len);
/* 1 when the cipher_suites list offers one of the N suites in IDS. */
int hello_any_suite(const uint8_t *suites, size_t len, const uint16_t *ids, size_t n);
/* Certificate name match: exact (case-insensitive) or "*.example.com"
 * matching exactly one leftmost label. */
int hello_name_match(const char *pattern, const char *host);

#endif
