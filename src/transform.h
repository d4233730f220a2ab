/* The string transformations inspection rules apply before matching
 * (ModSecurity's t:urlDecodeUni, t:htmlEntityDecode, t:lowercase, ...).
 * Pure. Every step's output is never longer than its input, so a chain runs
 * in place over one copy of the string. */
#ifndef SLUICE_TRANSFORM_H
#define SLUICE_TRANSFORM_H

#include <stddef.h>
#include <stdint.h>

#define XFORM_STEPS(X) \
	X(URLDECODE,      "urldecode")      /* %XX; '+' stays (path semantics) */ \
	X(URLDECODE_UNI,  "urldecode_uni")  /* %XX, %uXXXX (as UTF-8), '+' -> space (form semantics) */ \
	X(HTMLDECODE,     "htmldecode")     /* &lt; &gt; &amp; &quot; &apos; &nbsp; &#NN; &#xNN; */ \
	X(LOWER,          "lower")          /* ASCII letters */ \
	X(COMPRESS_WS,    "compress_ws")    /* each run of whitespace -> one space */ \
	X(REMOVE_WS,      "remove_ws") \
	X(REMOVE_NULLS,   "remove_nulls") \
	X(B64DECODE,      "b64decode")      /* standard or URL-safe alphabet; stops at the first invalid byte */ \
	X(NORMALIZE_PATH, "normalize_path") /* collapse double slashes, drop dot segments, resolve dot-dot (never above the start) */ \
	X(TRIM,           "trim") \
	X(JSONDECODE,     "jsondecode")     /* JSON string escapes; uXXXX and surrogate pairs as UTF-8 */

enum xform_step {
#define XFORM_ENUM(id, name) XF_##id,
	XFORM_STEPS(XFORM_ENUM)
#undef XFORM_ENUM
	XF__COUNT
};

#define XFORM_MAX_STEPS 16

/* Parse a comma-separated chain ("urldecode_uni,lower"). Returns the number
 * of steps, or -1 with BAD and BADLEN naming the first unknown step (also for
 * an empty step or more than MAX). */
int xform_parse(const char *spec, size_t len, uint8_t *steps, int max, const char **bad, size_t *badlen);

/* Apply STEPS to the N bytes at P, in place; returns the new length. */
size_t xform_apply(const uint8_t *steps, int nsteps, char *p, size_t n);

/* One step, in place; returns the new length. */
size_t xform_step(enum xform_step s, char *p, size_t n);

#endif
