/* libinjection's two checks, as ModSecurity's @detectSQLi and @detectXSS
 * run them (issue 22). Debian does not package libinjection; the static
 * library crs/libinjection/ builds wraps the crates registry's Rust port
 * of it (libinjectionrs) in this C ABI. Pure and thread-safe. */
#ifndef SLUICE_LIBINJECTION_H
#define SLUICE_LIBINJECTION_H

#include <stddef.h>
#include <stdint.h>

/* 1 when DATA looks like SQL injection; FINGERPRINT (8 bytes, or NULL)
 * then holds libinjection's token fingerprint, NUL-ended. */
int sluice_detect_sqli(const uint8_t *data, size_t len, uint8_t *fingerprint);
/* 1 when DATA looks like cross-site scripting. */
int sluice_detect_xss(const uint8_t *data, size_t len);

#endif
