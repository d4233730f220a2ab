/* ModSecurity's transformations (SecLang t:...), byte for byte as
 * ModSecurity 2.9 computes them, quirks included: the Core Rule Set's
 * verdicts depend on exactly what each step leaves (issue 22). These are
 * not transform.c's steps, which decode to UTF-8 for sluice's own rules
 * (waf.lua): ModSecurity keeps the low byte of %uXXXX, leaves most HTML
 * entities alone, folds NBSP into whitespace, and so on. Pure. */
#ifndef SLUICE_SECTFN_H
#define SLUICE_SECTFN_H

#include <stddef.h>
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

#endif
