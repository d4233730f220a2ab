/* ModSecurity's transformations (SecLang t:...), byte for byte as
 * ModSecurity 2.9 computes them, quirks included: the Core Rule Set's
 * verdicts depend on exactly what each step leaves (issue 22). These are
 * not transform.c's steps, which decode to UTF-8 for sluice's own rules
 * (waf.lua): ModSecurity keeps the low byte of %uXXXX, leaves most HTML
 * entities alone, folds NBSP into whitespace, and so on. Pure. */
#ifndef SLUICE_SECTFN_H
#define SLUICE_SECTFN_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "seclang.h"

/* Does sluice implement T? (md5 is not: no rule of the Core Rule Set uses
 * it, and its loader names what it refuses.) */
int sectfn_supported(enum sl_tfn t);

/* OUT = T(IN[0..N)); OUT is emptied first and grown as needed. IN must not
 * point into OUT. Returns 1 when the value changed, as ModSecurity reports
 * it (its multiMatch action runs operators after every changing step). */
int sectfn_apply(enum sl_tfn t, const char *in, size_t n, struct buf *out);

/* 1 when T certainly leaves IN as it is, found by a cheap look (no copy):
 * a value without '%' or '+' has nothing to URL-decode. 0 when T may
 * change it (or is not one of the steps looked at this way). */
int sectfn_unchanged(enum sl_tfn t, const char *in, size_t n);

/* What sectfn_unchanged looks for, for every step at once: one pass over
 * a value that many transformation chains start from gives its features,
 * and sectfn_unchanged_f(T, features) then answers exactly as
 * sectfn_unchanged(T, value) does, without another pass. */
enum {
	SECTFN_F_UPPER = 1u << 0,     /* A-Z */
	SECTFN_F_PCT_PLUS = 1u << 1,  /* '%' or '+' */
	SECTFN_F_AMP = 1u << 2,
	SECTFN_F_BSLASH = 1u << 3,
	SECTFN_F_NUL = 1u << 4,
	SECTFN_F_COMMENT = 1u << 5,   /* "slash star" */
	SECTFN_F_HIGH = 1u << 6,      /* a byte >= 0x80 */
	SECTFN_F_WS = 1u << 7,        /* whitespace, NBSP included */
	SECTFN_F_COMPRESS = 1u << 8,  /* whitespace that compressWhitespace changes */
	SECTFN_F_TRIM_L = 1u << 9,    /* starts with C-locale whitespace */
	SECTFN_F_TRIM_R = 1u << 10,   /* ends with it */
	SECTFN_F_PATH = 1u << 11,     /* a '/', or "." / ".." at the end: normalizePath may change it */
};
uint32_t sectfn_features(const char *in, size_t n);
int sectfn_unchanged_f(enum sl_tfn t, uint32_t features);

#endif
