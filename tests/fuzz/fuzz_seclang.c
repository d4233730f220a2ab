/* libFuzzer target: the SecLang parser (src/seclang.c).
 *
 * Input: a rule file's text (Include is refused here).
 * Oracles beyond "no crash, no leak":
 *   - a refused file names itself and a line within it in the error;
 *   - an accepted file's rules are well formed: every chain starter and
 *     SecAction has an id of its own, in its phase (1..5), with its
 *     chained rules in the same phase and without ids; every variable,
 *     operator, action and transformation is one the tables name; a
 *     selector is present exactly when its kind says so; an exclusion
 *     always names what it excludes;
 *   - loading the same text twice gives the same rules (the parser keeps
 *     no state between loads). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "seclang.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_seclang: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static int count_lines(const uint8_t *d, size_t n)
{
	int lines = 1;
	for (size_t i = 0; i < n; i++)
		lines += d[i] == '\n';
	return lines;
}

static void check_rule(const struct sl_rule *r, int starter, uint8_t phase)
{
	if (r->kind != SL_RULE && r->kind != SL_ACTION)
		FAIL("rule kind %d", r->kind);
	if (starter ? r->id == 0 : r->id != 0)
		FAIL("id %u on a %s", r->id, starter ? "chain starter" : "chained rule");
	if (r->phase < 1 || r->phase > 5 || (!starter && r->phase != phase))
		FAIL("phase %d", r->phase);
	if (r->op >= SL_OP__COUNT || r->op_arg == NULL)
		FAIL("operator %d", r->op);
	if (r->kind == SL_RULE && r->ntargets == 0)
		FAIL("a SecRule without variables");
	for (size_t i = 0; i < r->ntargets; i++) {
		const struct sl_target *t = &r->targets[i];
		if (t->var >= SL_VAR__COUNT || t->sel_kind > SL_SEL_REGEX || (t->sel_kind == SL_SEL_NONE) != (t->sel == NULL))
			FAIL("target %zu of rule %u", i, r->id);
		if (t->exclude && (t->count || t->sel == NULL))
			FAIL("exclusion without a selector");
	}
	for (size_t i = 0; i < r->nactions; i++) {
		const struct sl_action *a = &r->actions[i];
		if (a->act >= SL_ACT__COUNT || (a->act == SL_ACT_T && (a->tfn >= SL_TFN__COUNT || a->value == NULL)))
			FAIL("action %zu of rule %u", i, r->id);
	}
}

static size_t summary(const struct seclang *sl, char *out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < sl->nrules && n + 64 < cap; i++)
		for (const struct sl_rule *r = sl->rules[i]; r && n + 64 < cap; r = r->chained)
			n += (size_t)snprintf(out + n, cap - n, "%d/%u/%d/%d/%zu/%zu/%d/%d;", r->kind, r->id, r->phase,
					      r->op, r->ntargets, r->nactions, r->removed, r->line);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char a[8192], b[8192];
	struct seclang sl;
	seclang_init(&sl);
	int rc = seclang_load_buffer(&sl, "fuzz.conf", (const char *)data, size, 0);
	if (rc == 0)
		rc = seclang_finish(&sl);
	if (rc != 0) {
		int line;
		if (sscanf(sl.error, "fuzz.conf:%d: ", &line) != 1 || line < 1 || line > count_lines(data, size))
			FAIL("error without its place: %s", sl.error);
		seclang_free(&sl);
		return 0;
	}
	for (size_t i = 0; i < sl.nrules; i++) {
		const struct sl_rule *r = sl.rules[i];
		if (r->kind == SL_MARKER) {
			if (r->marker == NULL || r->id != 0 || r->chained)
				FAIL("marker");
			continue;
		}
		check_rule(r, 1, r->phase);
		for (const struct sl_rule *c = r->chained; c; c = c->chained)
			check_rule(c, 0, r->phase);
		for (size_t j = 0; j < i; j++)
			if (sl.rules[j]->id && sl.rules[j]->id == r->id)
				FAIL("id %u twice", r->id);
	}
	size_t na = summary(&sl, a, sizeof(a));
	seclang_free(&sl);
	seclang_init(&sl);
	if (seclang_load_buffer(&sl, "fuzz.conf", (const char *)data, size, 0) != 0 || seclang_finish(&sl) != 0)
		FAIL("the second load failed: %s", sl.error);
	size_t nb = summary(&sl, b, sizeof(b));
	if (na != nb || memcmp(a, b, na) != 0)
		FAIL("two loads, two results");
	seclang_free(&sl);
	return 0;
}
