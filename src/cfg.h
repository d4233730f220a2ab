/* Configuration loading and validation (libcyaml schema + semantic checks). */
#ifndef SLUICE_CFG_H
#define SLUICE_CFG_H

#include <stddef.h>
#include "cfg-t.h"

/* Load and validate PATH. On success returns a tree the caller owns (free it
 * with cfg_free). On failure returns NULL and writes one or more lines of the
 * form "FILE:LINE:COL: KEY: message" into ERR (always NUL-terminated). */
struct cfg *cfg_load(const char *path, char *err, size_t errlen);
void cfg_free(struct cfg *cfg);

/* Pure value parsers, also used by tests. Return 0 on success, -1 on a bad
 * value. Durations: "150ms", "2s", "1m", "1h", bare integer = ms.
 * Sizes: "512", "16k", "4m", "1g" (binary multiples). Addresses:
 * "1.2.3.4:80", "[::1]:80", "*:80" (any IPv4), "localhost:80". */
int cfg_parse_duration(const char *s, uint32_t *ms);
int cfg_parse_size(const char *s, uint64_t *bytes);
int cfg_parse_addr(const char *s, struct cfg_addr *out);

/* "cookie", "jvm_route", ... for logs and /status ("none" for none). */
const char *cfg_persist_type_name(enum cfg_persist_type t);

#endif
