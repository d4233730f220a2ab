/* Unit tests for the compiled SecLang program (src/crsprog.c), and Debian's
 * CRS 3.3.4 compiled whole: every regex through PCRE2 with ModSecurity's
 * flags, every phrase file read. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "crsprog.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

#define CRS_RULES "/usr/share/modsecurity-crs/rules"
#define CRS_SETUP "/etc/modsecurity/crs/crs-setup.conf"

static int compile(struct crs_program *p, const char *text, const uint32_t *skip, size_t nskip)
{
	struct seclang sl;
	seclang_init(&sl);
	if (seclang_load_buffer(&sl, "c.conf", text, strlen(text), 0) < 0 || seclang_finish(&sl) < 0) {
		fprintf(stderr, "  parse: %s\n", sl.error);
		seclang_free(&sl);
		memset(p, 0, sizeof(*p));
		return -2;
	}
	return crs_compile(p, &sl, skip, nskip);
}

static int fails_with(const char *text, const char *want)
{
	struct crs_program p;
	int rc = compile(&p, text, NULL, 0);
	int ok = rc == -1 && strstr(p.error, want) != NULL;
	if (!ok)
		fprintf(stderr, "  [%s]: rc %d, error [%s], wanted [%s]\n", text, rc, p.error, want);
	crs_program_free(&p);
	return ok;
}

static const struct crs_rule *find(const struct crs_program *p, uint32_t id)
{
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p->nphase[ph]; i++)
			if (p->phase[ph][i].src->id == id)
				return &p->phase[ph][i];
	return NULL;
}

static int bit(const uint8_t *b, int x)
{
	return (b[x >> 3] >> (x & 7)) & 1;
}

static void test_small(void)
{
	struct crs_program p;
	CHECK(compile(&p,
		      "SecDefaultAction \"phase:2,log,pass,t:lowercase\"\n"
		      "SecRule ARGS \"@rx ^a.b$\" \"id:1,block,t:urlDecodeUni\"\n"
		      "SecRule ARGS \"@rx x\" \"id:2,deny,t:lowercase,t:none,t:removeNulls\"\n"
		      "SecRule ARGS \"@pm \\\"foo |41 42|bar a\\\\;b\\\"\" \"id:3,phase:1,pass,skipAfter:END\"\n"
		      "SecRule ARGS \"@validateByteRange 9,10, 32-126\" \"id:4,phase:1,pass\"\n"
		      "SecRule REMOTE_ADDR \"@ipMatch 127.0.0.1,::1, 10.0.0.0/8\" \"id:5,phase:1,pass\"\n"
		      "SecRule TX:x \"@ge 5\" \"id:6,phase:1,pass,chain\"\n"
		      "  SecRule TX:y \"@lt %{tx.z}\" \"t:length\"\n"
		      "SecMarker END\n"
		      "SecRule ARGS \"@rx %{tx.a}\" \"id:7,phase:1,pass\"\n",
		      NULL, 0) == 0);
	const struct crs_rule *r = find(&p, 1);
	CHECK(r && r->op.re != NULL && r->ntfn == 2 && r->tfn[0] == SL_TFN_LOWERCASE && r->tfn[1] == SL_TFN_URL_DECODE_UNI);
	CHECK(r && r->disruptive == SL_ACT_PASS);  /* block: SecDefaultAction's pass */
	r = find(&p, 2);
	CHECK(r && r->ntfn == 1 && r->tfn[0] == SL_TFN_REMOVE_NULLS && r->disruptive == SL_ACT_DENY);
	r = find(&p, 3);
	CHECK(r && r->op.pm.n == 3);
	if (r && r->op.pm.n == 3)
		CHECK(strcmp(r->op.pm.v[0], "foo") == 0 && strcmp(r->op.pm.v[1], "abbar") == 0 && strcmp(r->op.pm.v[2], "a;b") == 0);
	CHECK(r && r->skip_after >= 0 && p.phase[1][r->skip_after].src->kind == SL_MARKER);
	r = find(&p, 4);
	CHECK(r && bit(r->op.bytes, 9) && bit(r->op.bytes, 10) && !bit(r->op.bytes, 11) && bit(r->op.bytes, 32) &&
	      bit(r->op.bytes, 126) && !bit(r->op.bytes, 127) && !bit(r->op.bytes, 0));
	r = find(&p, 5);
	CHECK(r && r->op.ips.n == 3);
	r = find(&p, 6);
	CHECK(r && r->op.num == 5 && !r->op.has_macro && r->chained && r->chained->op.has_macro &&
	      r->chained->ntfn == 1 && r->chained->tfn[0] == SL_TFN_LENGTH);
	r = find(&p, 7);
	CHECK(r && r->op.has_macro && r->op.re == NULL);
	/* the marker stands in every phase */
	int markers = 0;
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p.nphase[ph]; i++)
			markers += p.phase[ph][i].src->kind == SL_MARKER;
	CHECK(markers == 5 && p.nphase[2] == 3 && p.nphase[1] == 6);
	crs_program_free(&p);

	CHECK(fails_with("\n\nSecRule ARGS \"@rx a(b\" \"id:1\"", "c.conf:3: @rx: PCRE2 cannot compile it at offset 3"));
	CHECK(fails_with("SecRule REMOTE_ADDR \"@rbl sbl.example\" \"id:910140\"",
			 "c.conf:1: rule 910140: @rbl is not supported: sluice makes no lookups"));
	CHECK(fails_with("SecRule FULL_REQUEST x \"id:9,phase:2\"", "c.conf:1: rule 9: variable FULL_REQUEST is not supported"));
	CHECK(fails_with("SecRule ARGS x \"id:1,t:removeComments\"", "t:removeComments is not supported"));
	CHECK(fails_with("SecRule ARGS x \"id:1,skipAfter:NOWHERE\"", "skipAfter:NOWHERE: no SecMarker NOWHERE after this rule"));
	CHECK(fails_with("SecMarker M\nSecRule ARGS x \"id:1,skipAfter:M\"", "no SecMarker M after this rule"));
	CHECK(fails_with("SecRule ARGS \"@validateByteRange 1-300\" \"id:1\"", "@validateByteRange: bad range list"));
	CHECK(fails_with("SecRule REMOTE_ADDR \"@ipMatch 10.1.0.0/8\" \"id:1\"", "@ipMatch: \"10.1.0.0/8\""));
	CHECK(fails_with("SecRule ARGS \"@pmFromFile nothere.data\" \"id:1\"", "@pmFromFile: cannot open nothere.data"));
	CHECK(fails_with("SecRule ARGS \"@pm a\\\\qb\" \"id:1\"", "@pm: unsupported escape \\q"));
	/* the skip list drops a rule that would not compile */
	static const uint32_t skip[] = { 910140 };
	CHECK(compile(&p, "SecRule REMOTE_ADDR \"@rbl x\" \"id:910140\"\nSecRule ARGS x \"id:2\"", skip, 1) == 0 &&
	      p.skipped == 1 && p.nphase[2] == 1 && find(&p, 2) != NULL && find(&p, 910140) == NULL);
	crs_program_free(&p);
	/* rules removed at config time are not compiled */
	CHECK(compile(&p, "SecRule ARGS \"@detectXSS\" \"id:9\"\nSecRuleRemoveById 9", NULL, 0) == 0 && p.nphase[2] == 0);
	crs_program_free(&p);
}

static unsigned data_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	unsigned n = 0;
	char line[8192];
	while (f && fgets(line, sizeof(line), f))
		if (line[0] != '#' && line[0] != '\n' && line[0] != '\r')
			n++;
	if (f)
		fclose(f);
	return n;
}

static int load_crs(struct seclang *sl)
{
	seclang_init(sl);
	if (seclang_load_file(sl, CRS_SETUP) < 0)
		return -1;
	char cmd[] = "Include " CRS_RULES "/*.conf\n";
	return seclang_load_buffer(sl, "crs.load", cmd, strlen(cmd), 1) < 0 ? -1 : seclang_finish(sl);
}

static void test_crs(void)
{
	if (access(CRS_RULES, R_OK) != 0) {
		fprintf(stderr, "test_crs: Debian's modsecurity-crs is not installed (make test-deps installs it)\n");
		CHECK(0);
		return;
	}
	struct seclang sl;
	CHECK(load_crs(&sl) == 0);
	/* what the engine cannot run, found from the parse */
	uint32_t skip[32];
	size_t nskip = 0;
	unsigned rx = 0, rx_macro = 0;
	for (size_t i = 0; i < sl.nrules; i++) {
		unsigned nrx = 0, nrx_macro = 0, unsupported = 0;
		for (const struct sl_rule *r = sl.rules[i]; r; r = r->chained) {
			if (r->kind == SL_MARKER)
				continue;
			unsupported |= r->op == SL_OP_RBL || r->op == SL_OP_GEO_LOOKUP;
			if (r->op == SL_OP_RX)
				strstr(r->op_arg, "%{") ? nrx_macro++ : nrx++;
		}
		if (unsupported && nskip < 32)
			skip[nskip++] = sl.rules[i]->id;
		else
			rx += nrx, rx_macro += nrx_macro;
	}
	struct crs_program p;
	CHECK(crs_compile(&p, &sl, NULL, 0) < 0 && strstr(p.error, "REQUEST-910-IP-REPUTATION.conf:77: rule 910100: @geoLookup "
							   "is not supported") != NULL);
	fprintf(stderr, "  CRS without a skip list: %s\n", p.error);
	crs_program_free(&p);
	CHECK(load_crs(&sl) == 0);
	int rc = crs_compile(&p, &sl, skip, nskip);
	if (rc)
		fprintf(stderr, "  CRS: %s\n", p.error);
	CHECK(rc == 0);
	unsigned compiled_rx = 0, macro_rx = 0, rules = 0;
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p.nphase[ph]; i++)
			for (const struct crs_rule *r = &p.phase[ph][i]; r; r = r->chained) {
				if (r->src->kind == SL_MARKER)
					continue;
				rules += r == &p.phase[ph][i];
				if (r->op.kind == SL_OP_RX)
					r->op.re ? compiled_rx++ : macro_rx++;
				if (seclang_action(r->src, SL_ACT_SKIP_AFTER))
					CHECK(r->skip_after > (long)i);
			}
	fprintf(stderr, "  CRS 3.3.4 compiled: %u rules (%u skipped: rbl, geoLookup), %u regexes "
		"compiled, %u with macros left for run time\n", rules, p.skipped, compiled_rx, macro_rx);
	CHECK(p.skipped == nskip && nskip == 2);
	CHECK(compiled_rx == rx && macro_rx == rx_macro && rx > 200);
	const struct crs_rule *r = find(&p, 930120);
	CHECK(r && r->op.pm.n == data_lines(CRS_RULES "/lfi-os-files.data") && r->op.pm.n > 500);
	r = find(&p, 933150);
	CHECK(r && r->op.pm.n == data_lines(CRS_RULES "/php-function-names-933150.data"));
	r = find(&p, 920100);
	CHECK(r && r->op.re && r->op.negated && r->disruptive == SL_ACT_PASS);  /* block, SecDefaultAction pass */
	crs_program_free(&p);
}

int main(void)
{
	test_small();
	test_crs();
	printf("test_crsprog: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
