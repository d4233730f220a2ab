/* Unit tests for the ClientHello readers that pick a certificate. */
#include <stdio.h>
#include <string.h>
#include "tlshello.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

int main(void)
{
	char name[256];
	/* server_name: list len 13, type 0, len 10, "Example.CO" */
	static const uint8_t sni[] = { 0, 13, 0, 0, 10, 'E', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'C', 'O' };
	CHECK(hello_sni(sni, sizeof(sni), name, sizeof(name)) == 10 && strcmp(name, "example.co") == 0);
	CHECK(hello_sni(NULL, 0, name, sizeof(name)) == 0);
	CHECK(hello_sni(sni, sizeof(sni) - 1, name, sizeof(name)) == -1);  /* truncated */
	static const uint8_t sni_nul[] = { 0, 6, 0, 0, 3, 'a', 0, 'b' };
	CHECK(hello_sni(sni_nul, sizeof(sni_nul), name, sizeof(name)) == -1);
	CHECK(hello_sni(sni, sizeof(sni), name, 5) == -1);                  /* does not fit */

	static const uint8_t sig_rsa[] = { 0, 4, 0x08, 0x04, 0x04, 0x01 };
	static const uint8_t sig_ec[] = { 0, 6, 0x08, 0x04, 0x04, 0x03, 0x05, 0x03 };
	CHECK(hello_ecdsa_sigalg(sig_rsa, sizeof(sig_rsa), 256) == 0);
	CHECK(hello_ecdsa_sigalg(sig_ec, sizeof(sig_ec), 256) == 1);
	CHECK(hello_ecdsa_sigalg(sig_ec, sizeof(sig_ec), 384) == 1);
	CHECK(hello_ecdsa_sigalg(sig_ec, 4, 384) == -1);
	CHECK(hello_ecdsa_sigalg(NULL, 0, 256) == 0);

	static const uint8_t v13[] = { 4, 0x03, 0x04, 0x03, 0x03 };
	static const uint8_t v12[] = { 2, 0x03, 0x03 };
	CHECK(hello_offers_tls13(v13, sizeof(v13)) == 1);
	CHECK(hello_offers_tls13(v12, sizeof(v12)) == 0);
	CHECK(hello_offers_tls13(v13, 4) == -1);

	static const uint8_t suites_rsa[] = { 0xC0, 0x2F, 0x00, 0x9C };
	static const uint8_t suites_ec[] = { 0xC0, 0x2F, 0xC0, 0x2B };
	static const uint16_t server_ecdsa[] = { 0xC02B, 0xC02C };
	CHECK(hello_any_suite(suites_rsa, sizeof(suites_rsa), server_ecdsa, 2) == 0);
	CHECK(hello_any_suite(suites_ec, sizeof(suites_ec), server_ecdsa, 2) == 1);
	CHECK(hello_any_suite(suites_ec, sizeof(suites_ec), server_ecdsa, 0) == 0);  /* server has none */

	CHECK(hello_name_match("a.test", "A.TEST"));
	CHECK(hello_name_match("*.wild.test", "x.wild.test"));
	CHECK(!hello_name_match("*.wild.test", "wild.test"));
	CHECK(!hello_name_match("*.wild.test", "a.b.wild.test"));
	CHECK(!hello_name_match("*.wild.test", ".wild.test"));
	printf("test_tlshello: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
