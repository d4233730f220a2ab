/* libFuzzer target: the CRS engine's request side, from untrusted bytes:
 * the multipart processor (src/secmultipart.c), the JSON and urlencoded
 * processors and Apache's path normalisation (src/seccoll.c), and the
 * evaluator (src/crseval.c) running a small rule set over all of them.
 *
 * Input: a request-target line, a Content-Type line, then the body.
 * The XML processor (src/secxml.c, libxml2) too.
 * Oracles beyond "no crash, no leak":
 *   - a refused multipart body says why and puts no field in ARGS_POST;
 *     an accepted one lists sizes as decimals and part headers as
 *     "Name: value" lines;
 *   - the normalised path starts with '/', has no "//", "/./" or "/../"
 *     and does not end in "/." or "/..";
 *   - the evaluator's verdict is the same when the request runs twice
 *     (a transaction keeps nothing between requests).
 * The rules reach the prefilter's one-byte literals both ways, @pm, a
 * TX:name rule (with and without actions), &TX:name counts and the
 * transformation shortcuts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "crseval.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(...) do { fprintf(stderr, "fuzz_crs_body: " __VA_ARGS__); fputc('\n', stderr); abort(); } while (0)

static const char RULES[] =
	"SecRuleEngine On\nSecRequestBodyAccess On\n"
	"SecRule REQUEST_HEADERS:Content-Type \"^application/json\" \"id:1,phase:1,pass,nolog,t:lowercase,ctl:requestBodyProcessor=JSON\"\n"
	"SecRule REQUEST_HEADERS:Content-Type \"xml\" \"id:8,phase:1,pass,nolog,t:lowercase,ctl:requestBodyProcessor=XML\"\n"
	"SecRule REQBODY_ERROR \"!@eq 0\" \"id:2,phase:2,deny,status:400\"\n"
	"SecRule MULTIPART_STRICT_ERROR \"!@eq 0\" \"id:3,phase:2,pass,setvar:tx.strict=+1\"\n"
	"SecRule ARGS|ARGS_NAMES|FILES|FILES_NAMES|MULTIPART_PART_HEADERS|REQUEST_FILENAME|XML:/*|XML://@* \"@rx (?i)<script|\\.\\./|select\" "
	"\"id:4,phase:2,pass,capture,multiMatch,t:none,t:utf8toUnicode,t:urlDecodeUni,t:htmlEntityDecode,t:jsDecode,t:cssDecode,"
	"t:removeNulls,t:cmdLine,t:compressWhitespace,setvar:tx.score=+5,setvar:'tx.%{rule.id}-%{MATCHED_VAR_NAME}=%{tx.0}'\"\n"
	"SecRule ARGS \"@detectSQLi\" \"id:5,phase:2,pass,t:none,t:urlDecodeUni,chain\"\n"
	"  SecRule MATCHED_VARS \"@detectXSS\" \"t:none,setvar:tx.both=1\"\n"
	"SecRule &ARGS \"@gt 3\" \"id:6,phase:2,pass,setvar:tx.many=%{MATCHED_VAR}\"\n"
	"SecRule TX:score \"@ge 10\" \"id:7,phase:2,deny,status:403\"\n"
	/* one-byte prefilter literals: a chain with few (memchr) and one with
	 * many (the value's byte set), @pm's exact answer, a TX:name rule */
	"SecRule ARGS|REQUEST_FILENAME \"@rx (?:;|\\||a..b)\" \"id:9,phase:2,pass,t:none,t:lowercase,t:normalizePathWin,setvar:tx.one=+1\"\n"
	"SecRule ARGS_NAMES|ARGS \"@rx (?:b|c|d|e|f|g|h|%|<)\" \"id:10,phase:2,pass,t:none,setvar:tx.bytes=+1\"\n"
	"SecRule ARGS|ARGS_NAMES \"@rx [q]\" \"id:12,phase:2,pass,t:none,setvar:tx.q=+1\"\n"
	"SecRule ARGS|ARGS_NAMES \"@pm ; | z\" \"id:13,phase:2,pass,t:none,t:urlDecode,setvar:tx.pm=+1\"\n"
	"SecRule TX:one \"@gt 0\" \"id:11,phase:2,pass,setvar:tx.direct=%{MATCHED_VAR_NAME}\"\n"
	/* TX:name read in place (no action of its own) with a chain, &TX:name counted from the store */
	"SecRule TX:ONE \"@ge 2\" \"id:15,phase:2,pass,nolog,chain\"\n"
	"  SecRule MATCHED_VAR \"@gt 1\" \"setvar:tx.inplace=%{MATCHED_VAR}\"\n"
	"SecRule &TX:q \"@eq 0\" \"id:16,phase:2,pass,nolog,skipAfter:END16\"\n"
	"SecRule &TX:Bytes \"@eq 1\" \"id:17,phase:2,pass,setvar:tx.counted=%{MATCHED_VAR_NAME}%{MATCHED_VAR}\"\n"
	"SecMarker END16\n"
	/* a regex run as its branches (a value's literals pick them), with capture */
	"SecRule ARGS|ARGS_NAMES \"@rx (?i:(?:ab\\d|a|z[^z]|</?q|or\\s+1))\" \"id:14,phase:2,pass,capture,t:none,t:lowercase,"
	"setvar:'tx.br-%{MATCHED_VAR_NAME}=%{tx.0}'\"\n";

static struct crs_program P;
static struct crs_txn T;
static int ready;

static void check_path(const struct seccoll *c)
{
	const char *p = sc_str(c, c->filename);
	size_t n = c->filename_len;
	if (n == 0 || p[0] != '/')
		return;
	if (memmem(p, n, "//", 2) || memmem(p, n, "/./", 3) || memmem(p, n, "/../", 4))
		FAIL("normalised path %.*s", (int)n, p);
	if ((n >= 2 && memcmp(p + n - 2, "/.", 2) == 0) || (n >= 3 && memcmp(p + n - 3, "/..", 3) == 0))
		FAIL("normalised path ends in a dot segment: %.*s", (int)n, p);
}

static void check_multipart(struct seccoll *c, const char *ct, const char *body, size_t blen)
{
	seccoll_reset(c);
	int rc = seccoll_multipart_body(c, ct, strlen(ct), body, blen);
	if (rc < 0 && (!c->mp_error || c->list[SC_ARGS_POST].n))
		FAIL("a refused body (%s) with %u fields", c->mp_error ? c->mp_error : "no reason", c->list[SC_ARGS_POST].n);
	for (uint32_t i = 0; i < c->list[SC_FILES_SIZES].n; i++) {
		const struct sc_pair *s = &c->list[SC_FILES_SIZES].v[i];
		if (s->vlen == 0 || strspn(sc_str(c, s->value), "0123456789") != s->vlen)
			FAIL("file size %s", sc_str(c, s->value));
	}
	for (uint32_t i = 0; i < c->list[SC_PART_HEADERS].n; i++) {
		const struct sc_pair *h = &c->list[SC_PART_HEADERS].v[i];
		if (!memchr(sc_str(c, h->value), ':', h->vlen))
			FAIL("part header without a colon");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		struct seclang sl;
		seclang_init(&sl);
		if (seclang_load_buffer(&sl, "fuzz.conf", RULES, sizeof(RULES) - 1, 0) < 0 || seclang_finish(&sl) < 0 ||
		    crs_compile(&P, &sl, NULL, 0) < 0)
			FAIL("rules: %s %s", sl.error, P.error);
		crs_txn_init(&T);
		ready = 1;
	}
	char *buf = malloc(size + 1);
	memcpy(buf, data, size);
	buf[size] = '\0';
	const char *target = buf, *ct = "", *body = "";
	size_t blen = 0;
	char *nl = memchr(buf, '\n', size);
	if (nl) {
		*nl = '\0';
		char *ctw = nl + 1;
		ct = ctw;
		char *nl2 = memchr(ctw, '\n', size - (size_t)(ctw - buf));
		if (nl2) {
			*nl2 = '\0';
			body = nl2 + 1;
			blen = size - (size_t)(body - buf);
		}
	}
	if (*target != '/')
		target = "/";

	struct seccoll c = { 0 };
	check_multipart(&c, ct, body, blen);
	seccoll_reset(&c);
	(void)seccoll_json_body(&c, body, blen);
	seccoll_reset(&c);
	static const char *const xp[] = { "/*", "//@*", "//text()" };
	(void)seccoll_xml_body(&c, body, blen, xp, 3);
	seccoll_reset(&c);
	seccoll_urlencoded_body(&c, body, blen);
	seccoll_reset(&c);
	seccoll_request(&c, "POST", 4, target, strlen(target), "HTTP/1.1", 8, NULL, 0);
	(void)seccoll_server_path(&c);
	check_path(&c);
	seccoll_free(&c);

	struct sc_header h[2] = { { "Content-Type", ct, 12, strlen(ct) }, { "Host", "fuzz", 4, 4 } };
	struct crs_request rq = { .method = "POST", .method_len = 4, .target = target, .target_len = strlen(target),
				  .protocol = "HTTP/1.1", .protocol_len = 8, .headers = h, .nheaders = 2,
				  .body = body, .body_len = blen, .remote_addr = "127.0.0.1" };
	crs_eval_request(&T, &P, &rq);
	struct crs_verdict first = T.v;
	size_t nalerts = T.v.nalerts;
	int score = crs_txn_tx_int(&T, "score");
	crs_eval_request(&T, &P, &rq);
	if (T.v.intercepted != first.intercepted || T.v.rule_id != first.rule_id || T.v.nalerts != nalerts ||
	    crs_txn_tx_int(&T, "score") != score)
		FAIL("the same request gave another verdict the second time");
	free(buf);
	return 0;
}
