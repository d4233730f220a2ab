/* Unit tests for ModSecurity's per-request variables, setvar and macro
 * expansion (src/sectx.c). */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include "sectx.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static struct sectx T;

/* %{tx.x}, %{ip.x}: the store; %{MATCHED_VAR}: "m'v"; %{rule.id}: 942100;
 * anything else: unknown. */
static int resolve(void *ctx, const char *name, size_t nlen, const char *param, size_t plen, struct buf *out)
{
	(void)ctx;
	int coll = sectx_coll(name, nlen);
	if (coll >= 0 && param) {
		const struct sectx_var *v = sectx_get(&T, coll, param, plen);
		if (!v)
			return 0;
		buf_append(out, sectx_str(&T, v->value), v->vlen);
		return 1;
	}
	if (nlen == 11 && strncasecmp(name, "MATCHED_VAR", 11) == 0 && !param) {
		buf_append(out, "m'v", 3);
		return 1;
	}
	if (nlen == 4 && strncasecmp(name, "rule", 4) == 0 && param && plen == 2 && strncasecmp(param, "id", 2) == 0) {
		buf_append(out, "942100", 6);
		return 1;
	}
	return 0;
}

static int expands(const char *tpl, const char *want)
{
	struct buf out = { 0 };
	sectx_expand(tpl, strlen(tpl), resolve, NULL, &out);
	int ok = out.len == strlen(want) && (out.len == 0 || memcmp(out.data, want, out.len) == 0);
	if (!ok)
		fprintf(stderr, "  expand(%s) = [%.*s], want [%s]\n", tpl, (int)out.len, out.data ? out.data : "", want);
	buf_free(&out);
	return ok;
}

static int tx_is(const char *name, const char *want)
{
	const struct sectx_var *v = sectx_get(&T, SX_TX, name, strlen(name));
	if (!want)
		return v == NULL;
	return v && v->vlen == strlen(want) && memcmp(sectx_str(&T, v->value), want, v->vlen) == 0;
}

/* Each setvar case runs twice: parsed at the call (sectx_setvar), and
 * read once the way compiled rules do (sectx_setvar_compile, then _run),
 * which must come to the same store. */
static int compiled;

static int setvar(const char *spec)
{
	if (!compiled)
		return sectx_setvar(&T, spec, strlen(spec), resolve, NULL);
	struct sectx_setvar c;
	sectx_setvar_compile(&c, spec, strlen(spec));
	return sectx_setvar_run(&T, &c, resolve, NULL);
}

static void setvar_cases(void)
{
	sectx_reset(&T);
	CHECK(setvar("tx.critical_anomaly_score=5") && tx_is("critical_anomaly_score", "5"));
	CHECK(setvar("TX.Anomaly_Score_PL1=+%{tx.critical_anomaly_score}") && tx_is("anomaly_score_pl1", "5"));
	CHECK(setvar("tx.anomaly_score_pl1=+%{TX.CRITICAL_ANOMALY_SCORE}") && tx_is("ANOMALY_SCORE_PL1", "10"));
	CHECK(setvar("tx.anomaly_score_pl1=-3") && tx_is("anomaly_score_pl1", "7"));
	CHECK(setvar("tx.anomaly_score_pl1=-30") && tx_is("anomaly_score_pl1", "0"));  /* never below 0 */
	CHECK(setvar("tx.fresh=+2") && tx_is("fresh", "2"));
	CHECK(setvar("tx.words=+abc") && tx_is("words", "0"));
	CHECK(setvar("tx.flag") && tx_is("flag", "1"));
	CHECK(setvar("tx.spaced=   hello world") && tx_is("spaced", "hello world"));
	CHECK(setvar("tx.%{rule.id}-OWASP_CRS/WEB_ATTACK/SQL=%{MATCHED_VAR}") &&
	      tx_is("942100-owasp_crs/web_attack/sql", "m'v"));
	CHECK(setvar("tx.allowed=|a| |b|") && setvar("tx.allowed=%{tx.allowed} |c|") && tx_is("allowed", "|a| |b| |c|"));
	CHECK(setvar("!tx.flag") && tx_is("flag", NULL));
	CHECK(setvar("tx.empty=") && tx_is("empty", ""));
	CHECK(setvar("tx.unknown_macro=a%{nothere}b%{tx.none}c") && tx_is("unknown_macro", "abc"));
	/* no collection, an unknown one, or one initcol did not open: nothing */
	CHECK(!setvar("noncollection=1") && !setvar("foo.bar=1") && !setvar("ip.reput_block_flag=1"));
	T.open[SX_IP] = 1;
	CHECK(setvar("ip.reput_block_flag=1") && sectx_get(&T, SX_IP, "REPUT_BLOCK_FLAG", 16) != NULL &&
	      sectx_get(&T, SX_TX, "reput_block_flag", 16) == NULL);
	/* a value copied from another variable of the same store */
	for (int i = 0; i < 200; i++)
		CHECK(setvar("tx.copy=%{tx.allowed}") && tx_is("copy", "|a| |b| |c|"));
}

int main(void)
{
	setvar_cases();
	compiled = 1;
	setvar_cases();
	{
		struct sectx_setvar c;  /* what compiling decided */
		sectx_setvar_compile(&c, "tx.%{rule.id}-x=1", 17);
		CHECK(c.coll == -1);
		sectx_setvar_compile(&c, "foo.bar=1", 9);
		CHECK(c.coll == -1);
		sectx_setvar_compile(&c, "!TX.flag", 8);
		CHECK(c.coll == SX_TX && c.unset && c.nlen == 4);
		sectx_setvar_compile(&c, "tx.a=+%{tx.b}", 13);
		CHECK(c.coll == SX_TX && c.arith && c.value_macro && c.vlen == 8);
		sectx_setvar_compile(&c, "ip.x", 4);
		CHECK(c.coll == SX_IP && c.vlen == 1 && c.value[0] == '1' && !c.arith);
	}

	/* macros */
	CHECK(expands("no macros", "no macros"));
	CHECK(expands("%{tx.critical_anomaly_score}/%{MATCHED_VAR}", "5/m'v"));
	CHECK(expands("100% sure %", "100% sure %"));
	CHECK(expands("%{unterminated", "%{unterminated"));
	CHECK(expands("%{", "%{"));
	CHECK(expands("a%{}b", "ab"));
	CHECK(expands("%%{tx.critical_anomaly_score}", "%5"));
	CHECK(expands("", ""));
	sectx_reset(&T);
	CHECK(tx_is("critical_anomaly_score", NULL) && T.open[SX_TX] && !T.open[SX_IP]);
	sectx_free(&T);
	printf("test_sectx: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
