/* ModSecurity's string and validation operators (SecLang @contains,
 * @within, @eq, @validateByteRange, ...), with ModSecurity 2.9's edge
 * cases: an empty parameter matches for @contains/@beginsWith/@endsWith/
 * @containsWord, an empty value matches for @within, numbers are read as C's
 * atoi reads them. Pure: values and parameters are byte ranges. Each
 * returns 1 for a match, 0 for none (the caller applies '!'). */
#ifndef SLUICE_SECOP_H
#define SLUICE_SECOP_H

#include <stddef.h>
#include <stdint.h>

int secop_contains(const char *v, size_t vl, const char *p, size_t pl);
/* P as a whole word of V: neither neighbour a letter, digit or '_'. */
int secop_contains_word(const char *v, size_t vl, const char *p, size_t pl);
int secop_begins_with(const char *v, size_t vl, const char *p, size_t pl);
int secop_ends_with(const char *v, size_t vl, const char *p, size_t pl);
int secop_streq(const char *v, size_t vl, const char *p, size_t pl);
/* V found anywhere in P. */
int secop_within(const char *v, size_t vl, const char *p, size_t pl);
/* C's atoi on the first N bytes at S (strtol's saturation, then int). */
int secop_atoi(const char *s, size_t n);
/* Any byte of V outside the allowed set (a 256-bit map). */
int secop_validate_byte_range(const uint8_t allowed[32], const char *v, size_t vl);
/* A '%' not followed by two hex digits. */
int secop_validate_url_encoding(const char *v, size_t vl);
/* A byte sequence that is not UTF-8: bad lead or continuation bytes, a
 * cut sequence, an overlong form, a surrogate, above U+10FFFF. */
int secop_validate_utf8(const char *v, size_t vl);
/* Any of N lowercased phrases in V, ignoring ASCII case; *WHICH = its index. */
int secop_pm(char *const *phrases, size_t n, const char *v, size_t vl, size_t *which);

#endif
