/* Unit tests for the CRS evaluator (src/crseval.c) and the multipart body
 * processor (src/secmultipart.c): ModSecurity 2.9.7's rule semantics on
 * small rule sets, each checked against what the real ModSecurity did with
 * the same rules (tests/e2e/modsec.py ran them while this was written). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "crseval.h"
#include "sectfn.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

static struct crs_program P;
static struct crs_txn T;

static int load(const char *rules)
{
	struct seclang sl;
	seclang_init(&sl);
	if (seclang_load_buffer(&sl, "t.conf", rules, strlen(rules), 0) < 0 || seclang_finish(&sl) < 0) {
		fprintf(stderr, "load: %s\n", sl.error);
		seclang_free(&sl);
		return -1;
	}
	crs_program_free(&P);
	if (crs_compile(&P, &sl, NULL, 0) < 0) {
		fprintf(stderr, "compile: %s\n", P.error);
		return -1;
	}
	return 0;
}

/* Run a request: TARGET, headers "Name: value\n"..., BODY (or NULL). */
static void run(const char *method, const char *target, const char *headers, const char *body)
{
	static struct sc_header h[32];
	static char hb[4096];
	size_t nh = 0;
	snprintf(hb, sizeof(hb), "%s", headers ? headers : "");
	char *s = hb;
	while (*s && nh < 32) {
		char *nl = strchr(s, '\n');
		if (nl)
			*nl = '\0';
		char *colon = strchr(s, ':');
		if (colon) {
			char *v = colon + 1;
			while (*v == ' ')
				v++;
			h[nh++] = (struct sc_header){ s, v, (size_t)(colon - s), strlen(v) };
		}
		if (!nl)
			break;
		s = nl + 1;
	}
	static struct crs_request rq;
	rq = (struct crs_request){ .method = method, .method_len = strlen(method), .target = target,
				   .target_len = strlen(target), .protocol = "HTTP/1.1", .protocol_len = 8,
				   .headers = h, .nheaders = nh, .body = body, .body_len = body ? strlen(body) : 0,
				   .remote_addr = "192.0.2.7", .remote_port = 5555 };
	CHECK(crs_eval_request(&T, &P, &rq) == 0);
}

/* The ids of the alerts (SecActions left out), as "1,2,2". */
static const char *alerts(void)
{
	static char out[512];
	size_t k = 0;
	out[0] = '\0';
	for (size_t i = 0; i < T.v.nalerts && k < sizeof(out) - 16; i++)
		if (!T.v.alerts[i].secaction)
			k += (size_t)snprintf(out + k, sizeof(out) - k, "%s%u", k ? "," : "", crs_rule_id(T.v.alerts[i].rule));
	return out;
}

static int tx_is(const char *name, const char *want)
{
	size_t n;
	const char *v = crs_txn_tx(&T, name, &n);
	if (!want)
		return v == NULL;
	return v && n == strlen(want) && memcmp(v, want, n) == 0;
}

static void test_targets_and_scores(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx evil\" \"id:1,phase:1,pass,log,setvar:tx.score=+5\"\n"
		   "SecRule ARGS|!ARGS:b \"@rx evil\" \"id:2,phase:1,pass,log,setvar:tx.two=+1\"\n"
		   "SecRule ARGS:/^[ab]$/ \"@rx evil\" \"id:3,phase:1,pass,nolog,setvar:tx.three=+1\"\n"
		   "SecRule &ARGS \"@eq 3\" \"id:4,phase:1,pass,setvar:tx.count=%{MATCHED_VAR}\"\n"
		   "SecRule &ARGS:zz \"@eq 0\" \"id:5,phase:1,pass,setvar:tx.none=1\"\n") == 0);
	run("GET", "/?a=evil&b=evil&c=evil", NULL, NULL);
	/* a rule that matches three values scores three times */
	CHECK(strcmp(alerts(), "1,1,1,2,2,3,3,4,5") == 0);
	CHECK(tx_is("score", "15") && tx_is("two", "2") && tx_is("three", "2") && tx_is("count", "3") && tx_is("none", "1"));
	CHECK(T.v.alerts[0].logged && !T.v.alerts[5].logged);
	CHECK(!T.v.intercepted);
}

static void test_chain_and_matched_vars(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx ^x\" \"id:10,phase:1,deny,status:418,chain,setvar:tx.first=+1\"\n"
		   "  SecRule MATCHED_VARS \"@rx y$\" \"setvar:tx.second=%{MATCHED_VAR_NAME}\"\n"
		   "SecRule ARGS \"@rx never\" \"id:11,phase:1,deny\"\n") == 0);
	run("GET", "/?p=xa&q=xy", NULL, NULL);
	/* the first link's actions ran per matched value; the chain's end,
	 * seeing both values in MATCHED_VARS, matched one and denied */
	CHECK(tx_is("first", "2") && tx_is("second", "MATCHED_VARS:ARGS:q"));
	CHECK(T.v.intercepted && T.v.status == 418 && T.v.rule_id == 10 && T.v.phase == 1);
	CHECK(strcmp(alerts(), "10") == 0 && T.v.alerts[0].intercepted);
	run("GET", "/?p=xa", NULL, NULL);
	CHECK(!T.v.intercepted && strcmp(alerts(), "") == 0 && tx_is("first", "1") && tx_is("second", NULL));
}

static void test_skip_after_and_ctl(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS:skip \"@streq 1\" \"id:20,phase:1,pass,nolog,skipAfter:END\"\n"
		   "SecRule ARGS \"@rx .\" \"id:21,phase:1,pass,log\"\n"
		   "SecMarker END\n"
		   "SecRule ARGS:off \"@streq 1\" \"id:22,phase:1,pass,nolog,ctl:ruleRemoveById=23-24\"\n"
		   "SecRule ARGS:t \"@streq 1\" \"id:25,phase:1,pass,nolog,ctl:ruleRemoveTargetById=26;ARGS:secret\"\n"
		   "SecRule ARGS \"@rx .\" \"id:23,phase:1,pass,log\"\n"
		   "SecRule ARGS \"@rx pw\" \"id:26,phase:1,pass,log\"\n") == 0);
	run("GET", "/?skip=1", NULL, NULL);
	CHECK(strcmp(alerts(), "20,23") == 0);
	run("GET", "/?off=1&secret=pw&other=pw", NULL, NULL);
	CHECK(strcmp(alerts(), "21,21,21,22,26,26") == 0);
	run("GET", "/?t=1&secret=pw&other=pw", NULL, NULL);
	CHECK(strcmp(alerts(), "21,21,21,25,23,23,23,26") == 0);
}

static void test_multimatch(void)
{
	/* as measured on ModSecurity 2.9.7: the operator runs on the raw value
	 * and after each changing step, at the end only if the last step
	 * changed the value; with no steps, never */
	CHECK(load("SecRuleEngine On\n"
		   "SecRule REQUEST_COOKIES \"@rx a\" \"id:30,phase:1,pass,multiMatch,t:none,setvar:tx.c=+1\"\n"
		   "SecRule REQUEST_COOKIES \"@rx a\" \"id:31,phase:1,pass,multiMatch,t:none,t:removeNulls,t:urlDecodeUni,setvar:tx.d=+1\"\n"
		   "SecRule REQUEST_COOKIES \"@rx ab\" \"id:32,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,t:removeNulls,setvar:tx.e=+1\"\n"
		   "SecRule REQUEST_COOKIES \"@rx ab\" \"id:33,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,t:cmdLine,setvar:tx.f=+1\"\n") == 0);
	run("GET", "/", "Cookie: k=a%62", NULL);
	CHECK(tx_is("c", NULL) && tx_is("d", "2") && tx_is("e", "1") && tx_is("f", "2"));
	/* a step whose result another rule already cached: what it said about
	 * changing the value still decides whether the operator runs again
	 * ("x%" has a '%' but nothing to decode; "x%41" decodes) */
	CHECK(load("SecRuleEngine On\n"
		   "SecRule REQUEST_COOKIES \"@rx x\" \"id:34,phase:1,pass,t:none,t:urlDecodeUni,setvar:tx.a=+1\"\n"
		   "SecRule REQUEST_COOKIES \"@rx x\" \"id:35,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,setvar:tx.g=+1\"\n"
		   "SecRule REQUEST_COOKIES \"@rx x\" \"id:36,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,t:lowercase,setvar:tx.h=+1\"\n"
		   /* the raw value matches and the decoded one does not: still a match, the chain goes on */
		   "SecRule REQUEST_COOKIES \"@rx %41\" \"id:37,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,chain\"\n"
		   "SecRule REQUEST_COOKIES \"@rx .\" \"setvar:tx.m=1\"\n") == 0);
	run("GET", "/", "Cookie: k=x%", NULL);
	CHECK(tx_is("a", "1") && tx_is("g", "1") && tx_is("h", "1") && tx_is("m", NULL));
	run("GET", "/", "Cookie: k=x%41", NULL);
	CHECK(tx_is("a", "1") && tx_is("g", "2") && tx_is("h", "3") && tx_is("m", "1"));
}

static void test_captures_and_macros(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecAction \"id:40,phase:1,pass,nolog,setvar:tx.limit=3\"\n"
		   "SecRule REQUEST_HEADERS:User-Agent \"@rx (\\w+)/(\\d+)\" \"id:41,phase:1,pass,capture,setvar:tx.ua=%{tx.1}-%{tx.2}\"\n"
		   "SecRule ARGS:n \"@gt %{tx.limit}\" \"id:42,phase:1,pass,setvar:tx.big=%{MATCHED_VAR}\"\n"
		   "SecRule REQUEST_METHOD \"@within GET HEAD\" \"id:43,phase:1,pass,setvar:tx.m=%{rule.id}\"\n"
		   "SecRule REMOTE_ADDR \"@ipMatch 192.0.2.0/24,10.0.0.1\" \"id:44,phase:1,pass,setvar:tx.ip=%{REMOTE_ADDR}\"\n") == 0);
	run("GET", "/?n=7", "User-Agent: curl/8 x", NULL);
	CHECK(tx_is("ua", "curl-8") && tx_is("0", "curl/8") && tx_is("big", "7") && tx_is("m", "43") && tx_is("ip", "192.0.2.7"));
	run("GET", "/?n=2", "User-Agent: none", NULL);
	CHECK(tx_is("ua", NULL) && tx_is("big", NULL));
}

/* The prefilter (rxlit literals and @pm phrases per chain) decides
 * nothing a regex or phrase list would not: negation, captures, shared
 * transformation results across chains. */
static void test_prefilter(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx union\\s+select\" \"id:50,phase:1,pass,t:none,t:lowercase,setvar:tx.u=+1\"\n"
		   "SecRule ARGS \"!@rx union\" \"id:51,phase:1,pass,t:none,t:lowercase,setvar:tx.n=+1\"\n"
		   "SecRule ARGS \"@pm foo bar\" \"id:52,phase:1,pass,capture,t:none,t:lowercase,setvar:tx.p=%{tx.0}\"\n"
		   "SecRule ARGS \"@rx (sel)ect\" \"id:53,phase:1,pass,capture,t:none,t:urlDecodeUni,t:lowercase,setvar:tx.c=%{tx.1}\"\n"
		   "SecRule ARGS \"@rx SELECT\" \"id:54,phase:1,pass,t:none,setvar:tx.s=+1\"\n") == 0);
	run("GET", "/?q=UNION%20%20SELECT&r=hello&a=xBARx&b=%2553ELECT", NULL, NULL);
	CHECK(tx_is("u", "1") && tx_is("n", "3") && tx_is("p", "bar") && tx_is("c", "sel") && tx_is("s", "1"));
	run("GET", "/?r=hello", NULL, NULL);
	CHECK(tx_is("u", NULL) && tx_is("n", "1") && tx_is("p", NULL) && tx_is("c", NULL) && tx_is("s", NULL));
}

/* One-byte literals are looked up in the value's set of bytes, not
 * scanned: the same answers, caseless like the scan, on a value as it is
 * and on a transformed one, with and without a literal database beside. */
static void test_prefilter_one_byte(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx ;\" \"id:70,phase:1,pass,t:none,setvar:tx.semi=+1\"\n"
		   "SecRule ARGS \"@rx (?i)q\" \"id:71,phase:1,pass,t:none,setvar:tx.qi=+1\"\n"
		   "SecRule ARGS \"@rx q\" \"id:72,phase:1,pass,t:none,setvar:tx.q=+1\"\n"
		   "SecRule ARGS \"@rx [xy]z\" \"id:73,phase:1,pass,t:none,setvar:tx.xy=+1\"\n"
		   "SecRule ARGS \"!@rx ;\" \"id:74,phase:1,pass,t:none,setvar:tx.nosemi=+1\"\n"
		   "SecRule ARGS \"@pm k ;\" \"id:75,phase:1,pass,t:none,setvar:tx.pm=+1\"\n"
		   "SecRule ARGS \"@rx a\" \"id:76,phase:1,pass,t:none,t:lowercase,setvar:tx.lower=+1\"\n"
		   "SecRule ARGS \"@rx (?:b|c|d|e|f|g|h)\" \"id:77,phase:1,pass,t:none,setvar:tx.bh=+1\"\n") == 0);
	/* t:none has more one-byte literals than are looked for one by one
	 * (its values' sets of bytes answer), t:lowercase fewer (memchr) */
	int both = 0, alone = 0, many = 0;
	for (unsigned c = 0; c < P.nchains; c++) {
		both += P.pf[c].hs && P.pf[c].none;
		alone += !P.pf[c].hs && P.pf[c].none;
		many += P.pf[c].none > 6;
	}
	CHECK(both == 1 && alone == 1 && many == 1);
	run("GET", "/?a=x;y&b=Q&c=yz&d=K&e=A", NULL, NULL);
	CHECK(tx_is("semi", "1") && tx_is("qi", "1") && tx_is("q", NULL) && tx_is("xy", "1"));
	CHECK(tx_is("nosemi", "4") && tx_is("pm", "2") && tx_is("lower", "1") && tx_is("bh", NULL));
	run("GET", "/?a=hello&b=q&c=H", NULL, NULL);
	CHECK(tx_is("semi", NULL) && tx_is("qi", "1") && tx_is("q", "1") && tx_is("xy", NULL));
	CHECK(tx_is("nosemi", "3") && tx_is("pm", NULL) && tx_is("lower", NULL) && tx_is("bh", "1"));
	/* the one byte anywhere in a long value, or nowhere */
	int found = 0;
	for (int at = -1; at < 41; at++) {
		char target[64] = "/?v=";
		for (int i = 0; i < 41; i++)
			target[4 + i] = i == at ? 'e' : 'z';
		run("GET", target, NULL, NULL);
		found += tx_is("bh", at >= 0 ? "1" : NULL);
	}
	CHECK(found == 42);
}

static const struct crs_rule *rule_of(uint32_t id)
{
	for (size_t i = 0; i < P.nphase[1]; i++)
		if (P.phase[1][i].src->id == id)
			return &P.phase[1][i];
	return NULL;
}

/* A regex split into its branches runs only those whose literals a value
 * holds, and answers as the whole regex: the same verdicts, and with
 * capture the same TX:0 (the earliest match, the first branch on a tie),
 * whether few branches are candidates or most (then it runs whole). */
static void test_prefilter_branches(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx (?i:(?:'\\s*or\\s*1|union\\s+select|sleep\\s*\\(|benchmark\\())\" "
		   "\"id:80,phase:1,pass,capture,t:none,setvar:tx.a=+1,setvar:'tx.a0_%{MATCHED_VAR_NAME}=%{tx.0}'\"\n"
		   "SecRule ARGS \"@rx (?:abc\\d|ab|zzz|qqq)\" \"id:81,phase:1,pass,capture,t:none,"
		   "setvar:'tx.b0_%{MATCHED_VAR_NAME}=%{tx.0}'\"\n"
		   "SecRule ARGS \"!@rx (?:abc\\d|ab|zzz|qqq)\" \"id:82,phase:1,pass,t:none,setvar:tx.notb=+1\"\n") == 0);
	CHECK(rule_of(80)->nbranch == 4 && rule_of(81)->nbranch == 4);
	run("GET", "/?p=union%20select%20x'%20or%201&q=SLEEP%20(1)&r=sleep%20no&s=hello&t=xabc1&u=xzab&v=zzzqqqab", NULL, NULL);
	/* p: two candidate branches, the second matches first; r: a literal and no match */
	CHECK(tx_is("a", "2") && tx_is("a0_args:p", "union select") && tx_is("a0_args:q", "SLEEP (") &&
	      tx_is("a0_args:r", NULL));
	/* t: a tie at one start goes to the first branch; v: three of four candidates, run whole */
	CHECK(tx_is("b0_args:t", "abc1") && tx_is("b0_args:u", "ab") && tx_is("b0_args:v", "zzz") &&
	      tx_is("b0_args:s", NULL) && tx_is("notb", "4"));
	run("GET", "/?s=hello", NULL, NULL);
	CHECK(tx_is("a", NULL) && tx_is("notb", "1"));
}

/* A multiMatch regex with no literal PCRE2 searches for gets a literal
 * database of its own, tried on each step's value: a value without its
 * literals does not match, one with them runs the regex. */
static void test_multimatch_literals(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx (?:like|not)\\s+\\w\" \"id:90,phase:1,pass,multiMatch,t:none,t:urlDecodeUni,"
		   "setvar:tx.mm=+1\"\n") == 0);
	CHECK(rule_of(90)->lits != NULL);
	run("GET", "/?a=like%2520b&b=hello%20world&c=not%2509x&d=LIKE%2520b", NULL, NULL);
	/* a: "like%20b" then "like b"; c: "not%09x" then "not\tx"; d: no (?i) */
	CHECK(tx_is("mm", "2"));
	run("GET", "/?b=hello%20world", NULL, NULL);
	CHECK(tx_is("mm", NULL));
}

/* @validateByteRange rejecting one byte looks for it with memchr, the
 * others through the table: the same answers. */
static void test_byte_range(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@validateByteRange 1-255\" \"id:95,phase:1,pass,t:none,setvar:tx.nul=+1\"\n"
		   "SecRule ARGS \"@validateByteRange 0-64,66-255\" \"id:96,phase:1,pass,t:none,setvar:tx.b=+1\"\n"
		   "SecRule ARGS \"@validateByteRange 2-255\" \"id:97,phase:1,pass,t:none,setvar:tx.low=+1\"\n") == 0);
	CHECK(rule_of(95)->op.lone_forbidden == 0 && rule_of(96)->op.lone_forbidden == 'A' &&
	      rule_of(97)->op.lone_forbidden == -1);
	run("GET", "/?a=x%00y&b=xAy&c=%01&d=plain&e=", NULL, NULL);
	CHECK(tx_is("nul", "1") && tx_is("b", "1") && tx_is("low", "2"));
	run("GET", "/?d=plain", NULL, NULL);
	CHECK(tx_is("nul", NULL) && tx_is("b", NULL) && tx_is("low", NULL));
}

/* A rule whose one target is TX:name runs from the store (tx_direct): the
 * same MATCHED_VAR(_NAME) as a target list gives, a value its own setvar
 * changes still seen as it was, no value no match (negated or not), and
 * a target ctl removed stays removed. */
static int tx_direct(uint32_t id)
{
	for (size_t i = 0; i < P.nphase[1]; i++)
		if (P.phase[1][i].src->id == id)
			return P.phase[1][i].tx_direct;
	return -1;
}

static void test_tx_direct(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecAction \"id:80,phase:1,pass,nolog,setvar:tx.Level=2\"\n"
		   "SecRule TX:level \"@ge 2\" \"id:81,phase:1,pass,setvar:tx.level=+5,setvar:'tx.m=%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'\"\n"
		   "SecRule TX:missing \"!@eq 1\" \"id:82,phase:1,pass,setvar:tx.neg=1\"\n"
		   "SecRule TX:level \"@lt 3\" \"id:83,phase:1,pass,setvar:tx.lt=1\"\n"
		   "SecRule ARGS:x \"@streq 1\" \"id:84,phase:1,pass,nolog,ctl:ruleRemoveTargetById=85;TX:level\"\n"
		   "SecRule TX:level \"@ge 7\" \"id:85,phase:1,pass,setvar:tx.seen=1\"\n"
		   "SecRule TX:level \"@ge 7\" \"id:86,phase:1,pass,t:lowercase,setvar:tx.tfn=1\"\n"
		   /* no action of its own: read in place; its chain still sees what it matched */
		   "SecRule TX:LEVEL \"@ge 7\" \"id:87,phase:1,pass,nolog,chain\"\n"
		   "  SecRule MATCHED_VAR \"@streq 7\" \"setvar:'tx.chained=%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'\"\n"
		   "SecRule TX:level \"@lt 8\" \"id:88,phase:1,pass,nolog,skipAfter:END\"\n"
		   "SecAction \"id:89,phase:1,pass,nolog,setvar:tx.after=1\"\n"
		   "SecMarker END\n"
		   /* &TX:name from the store, as a count's target list gives it */
		   "SecRule &TX:absent \"@eq 0\" \"id:90,phase:1,pass,nolog,setvar:'tx.c1=%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'\"\n"
		   "SecRule &TX:absent|&TX:absent2 \"@eq 0\" \"id:91,phase:1,pass,nolog,setvar:'tx.c2=%{MATCHED_VAR_NAME}=%{MATCHED_VAR}'\"\n"
		   "SecRule &TX:LEVEL \"@eq 1\" \"id:92,phase:1,pass,nolog,setvar:tx.c3=1\"\n"
		   "SecRule &TX:level \"@eq 0\" \"id:93,phase:1,pass,nolog,setvar:tx.c4=1\"\n") == 0);
	CHECK(tx_direct(81) == 1 && tx_direct(82) == 1 && tx_direct(85) == 1 && tx_direct(86) == 0);
	CHECK(tx_direct(87) == TX_DIRECT_VALUE && tx_direct(88) == TX_DIRECT_VALUE);
	CHECK(tx_direct(90) == TX_DIRECT_COUNT && tx_direct(91) == TX_DIRECT_NONE && tx_direct(92) == TX_DIRECT_COUNT);
	run("GET", "/", NULL, NULL);
	CHECK(tx_is("level", "7") && tx_is("m", "TX:Level=2") && tx_is("neg", NULL) && tx_is("lt", NULL));
	CHECK(tx_is("seen", "1") && tx_is("tfn", "1"));
	CHECK(tx_is("chained", "MATCHED_VAR=7"));  /* the link's own target, the starter's value */
	CHECK(tx_is("after", NULL));  /* 88 matched in place and skipped 89 */
	CHECK(tx_is("c1", "TX=0") && tx_is("c2", "TX=0"));
	CHECK(tx_is("c3", "1") && tx_is("c4", NULL));
	run("GET", "/?x=1", NULL, NULL);
	CHECK(tx_is("level", "7") && tx_is("seen", NULL) && tx_is("tfn", "1"));
}

/* The prefilter group (crscache.h) of rule ID's LINK-th link: its pf_group, 0 if none. */
static unsigned group_of(uint32_t id, int link)
{
	for (int ph = 1; ph <= 2; ph++)
		for (size_t i = 0; i < P.nphase[ph]; i++)
			if (P.phase[ph][i].src->id == id) {
				const struct crs_rule *cr = &P.phase[ph][i];
				while (link-- > 0 && cr)
					cr = cr->chained;
				return cr ? cr->pf_group : 0;
			}
	return 0;
}

/* Prefilter groups: a rule none of whose values has its bit is passed
 * over, but a negated one, a chain's second link and a rule that reads a
 * count still see every value, and the first rule of a group in a phase
 * finds the values scanned. */
static void test_prefilter_groups(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@rx union\\s+select\" \"id:60,phase:1,pass,t:none,t:lowercase,setvar:tx.u=+1\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"!@rx union\" \"id:61,phase:1,pass,t:none,t:lowercase,setvar:tx.n=+1\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@rx evil\" \"id:62,phase:1,pass,t:none,t:lowercase,chain,setvar:tx.c1=+1\"\n"
		   "  SecRule ARGS|REQUEST_HEADERS:X \"@rx bad\" \"t:none,t:lowercase,setvar:tx.c2=+1\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@pm foo bar\" \"id:63,phase:1,pass,t:none,t:lowercase,setvar:tx.p=+1\"\n"
		   "SecRule &ARGS|ARGS \"@rx 2\" \"id:64,phase:1,pass,t:none,t:lowercase,setvar:tx.cnt=+1\"\n"
		   "SecRule ARGS:x \"@streq 1\" \"id:65,phase:1,pass,nolog,ctl:ruleRemoveTargetById=66;ARGS:q\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@rx union\\s+select\" \"id:66,phase:1,pass,t:none,t:lowercase,setvar:tx.r=+1\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@rx union\\s+select\" \"id:67,phase:2,pass,t:none,t:lowercase,setvar:tx.u2=+1\"\n"
		   "SecRule ARGS|REQUEST_HEADERS:X \"@rx evil\" \"id:68,phase:2,pass,t:none,t:lowercase,setvar:tx.e2=+1\"\n") == 0);
	unsigned g = group_of(60, 0);
	CHECK(g && group_of(61, 0) == g && group_of(62, 0) == g && group_of(62, 1) == g && group_of(63, 0) == g);
	CHECK(group_of(66, 0) == g && group_of(67, 0) == g);
	CHECK(group_of(64, 0) == 0);  /* a count is made per rule: no group */
	/* no value has any bit: only the negated rule and the count match */
	run("GET", "/?a=hello&b=world", "X: plain\n", NULL);
	CHECK(tx_is("u", NULL) && tx_is("n", "3") && tx_is("c1", NULL) && tx_is("c2", NULL) && tx_is("p", NULL));
	CHECK(tx_is("cnt", "1") && tx_is("r", NULL) && tx_is("u2", NULL) && tx_is("e2", NULL));
	/* the chain's first link matches, its second link's bit is on no value */
	run("GET", "/?a=EVIL&b=world", "X: plain\n", NULL);
	CHECK(tx_is("c1", "1") && tx_is("c2", NULL) && tx_is("n", "3") && tx_is("e2", "1"));
	/* both links; the negated rule skips the value with its literal */
	run("GET", "/?a=evil&b=Bad", "X: union  select\n", NULL);
	CHECK(tx_is("c1", "1") && tx_is("c2", "1") && tx_is("n", "2") && tx_is("u", "1") && tx_is("u2", "1"));
	/* @pm's bit is its answer; ctl removed a target of 66 only */
	run("GET", "/?x=1&q=union%20select&f=FOO", NULL, NULL);
	CHECK(tx_is("p", "1") && tx_is("u", "1") && tx_is("r", NULL) && tx_is("u2", "1") && tx_is("n", "2"));
}

/* A JSON body of hundreds of values, most of them repeats (stored once,
 * seccoll.c, and so transformed and scanned once): every verdict is the
 * one each value gets alone, and values with the same length and ends
 * but other bytes in between are told apart. */
static void test_repeated_values(void)
{
	CHECK(load("SecRuleEngine On\nSecRequestBodyAccess On\n"
		   "SecRule REQUEST_HEADERS:Content-Type \"^application/json\" \"id:60,phase:1,pass,nolog,t:lowercase,ctl:requestBodyProcessor=JSON\"\n"
		   "SecRule ARGS \"@rx union\\s+select\" \"id:90,phase:2,pass,t:none,t:lowercase,setvar:tx.u=+1\"\n"
		   "SecRule ARGS \"!@rx union\" \"id:91,phase:2,pass,t:none,t:lowercase,setvar:tx.n=+1\"\n"
		   "SecRule ARGS \"@rx evil\" \"id:92,phase:2,pass,t:none,setvar:tx.e=+1\"\n"
		   "SecRule ARGS_NAMES \"@rx ^o\\.o\\.k3$\" \"id:93,phase:2,pass,t:none,setvar:tx.k=+1\"\n") == 0);
	static char body[65536];
	char ends[2][41];
	memset(ends[0], 'a', 40);
	memset(ends[1], 'z', 40);
	ends[0][40] = ends[1][40] = '\0';
	size_t k = (size_t)snprintf(body, sizeof(body), "{\"o\":[");
	unsigned nobj = 100, nargs = 0, unions = 0, evils = 0;
	for (unsigned i = 0; i < nobj; i++) {
		/* the good twin first: the evil one must not be taken for it */
		k += (size_t)snprintf(body + k, sizeof(body) - k,
				      "%s{\"k1\":\"%sgood%s\",\"k2\":\"%s\",\"k3\":\"plain%u\",\"k4\":\"%sevil%s\"}",
				      i ? "," : "", ends[0], ends[1], i % 3 ? "x" : "UNION SELECT", i % 4, ends[0], ends[1]);
		nargs += 4;
		unions += i % 3 == 0;
		evils++;
	}
	k += (size_t)snprintf(body + k, sizeof(body) - k, "]}");
	CHECK(k < sizeof(body) - 1);
	run("POST", "/", "Content-Type: application/json", body);
	char want[16];
	snprintf(want, sizeof(want), "%u", unions);
	CHECK(tx_is("u", want));
	snprintf(want, sizeof(want), "%u", nargs - unions);
	CHECK(tx_is("n", want));
	snprintf(want, sizeof(want), "%u", evils);
	CHECK(tx_is("e", want));
	snprintf(want, sizeof(want), "%u", nobj);
	CHECK(tx_is("k", want));
}

/* sectfn_unchanged_f on a value's features answers as sectfn_unchanged. */
static void test_tfn_features(void)
{
	static const char alphabet[] = "aZ%+&\\/* \t\n\x00\xa0\xc3\x0b.";
	unsigned seed = 12345;
	int bad = 0;
	for (int k = 0; k < 20000; k++) {
		char v[48];
		size_t n = (size_t)(k % 48);
		for (size_t i = 0; i < n; i++) {
			seed = seed * 1103515245u + 12345u;
			v[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
		}
		uint32_t f = sectfn_features(v, n);
		for (int t = 0; t < SL_TFN__COUNT; t++)
			bad += sectfn_unchanged_f((enum sl_tfn)t, f) != sectfn_unchanged((enum sl_tfn)t, v, n);
	}
	CHECK(bad == 0);
}

/* SecPcreMatchLimit: a regex that gives up sets TX:MSC_PCRE_LIMITS_EXCEEDED. */
static void test_pcre_limits(void)
{
	CHECK(load("SecRuleEngine On\nSecPcreMatchLimit 100\n"
		   "SecRule ARGS \"@rx ^(\\w+\\s?)*$\" \"id:55,phase:1,pass,t:none\"\n"
		   "SecRule TX:MSC_PCRE_LIMITS_EXCEEDED \"@eq 1\" \"id:56,phase:1,pass,setvar:tx.lim=1\"\n") == 0);
	run("GET", "/?q=aaaaaaaaaaaaaaaaaa!", NULL, NULL);
	CHECK(tx_is("lim", "1"));
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx ^(\\w+\\s?)*$\" \"id:55,phase:1,pass,t:none\"\n"
		   "SecRule TX:MSC_PCRE_LIMITS_EXCEEDED \"@eq 1\" \"id:56,phase:1,pass,setvar:tx.lim=1\"\n") == 0);
	run("GET", "/?q=aaaaaaaaaaaaaaaaaa!", NULL, NULL);
	CHECK(tx_is("lim", NULL));
}

/* A (*UTF) pattern on a subject that is not UTF-8: PCRE2 refuses the
 * subject (no match), as pcre2_match always did; a byte pattern matches. */
static void test_utf_pattern(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule ARGS \"@rx (*UTF)bc\" \"id:57,phase:1,pass,t:none,t:urlDecode,setvar:tx.utf=1\"\n"
		   "SecRule ARGS \"@rx bc\" \"id:58,phase:1,pass,t:none,t:urlDecode,setvar:tx.bytes=1\"\n") == 0);
	run("GET", "/?x=a%ffbc", NULL, NULL);
	CHECK(tx_is("utf", NULL) && tx_is("bytes", "1"));
	run("GET", "/?x=a%c3%a9bc", NULL, NULL);
	CHECK(tx_is("utf", "1") && tx_is("bytes", "1"));
}

static void test_engine_modes(void)
{
	CHECK(load("SecRuleEngine DetectionOnly\n"
		   "SecDefaultAction \"phase:1,log,auditlog,pass\"\n"
		   "SecRule ARGS \"@rx bad\" \"id:50,phase:1,deny\"\n"
		   "SecRule ARGS \"@rx bad\" \"id:51,phase:1,block\"\n") == 0);
	run("GET", "/?a=bad", NULL, NULL);
	CHECK(!T.v.intercepted && strcmp(alerts(), "50,51") == 0);
	CHECK(load("SecRuleEngine On\n"
		   "SecDefaultAction \"phase:1,log,auditlog,pass\"\n"
		   "SecRule ARGS \"@rx bad\" \"id:51,phase:1,block\"\n"
		   "SecRule ARGS \"@rx off\" \"id:52,phase:1,pass,ctl:ruleEngine=Off\"\n"
		   "SecRule ARGS \"@rx bad\" \"id:53,phase:1,deny\"\n") == 0);
	run("GET", "/?a=bad", NULL, NULL);  /* block is the default action's pass */
	CHECK(T.v.intercepted && T.v.rule_id == 53 && T.v.status == 403 && strcmp(alerts(), "51,53") == 0);
	run("GET", "/?a=bad&b=off", NULL, NULL);
	CHECK(!T.v.intercepted && strcmp(alerts(), "51,52") == 0);
}

static void test_bodies(void)
{
	CHECK(load("SecRuleEngine On\nSecRequestBodyAccess On\n"
		   "SecRule REQUEST_HEADERS:Content-Type \"^application/json\" \"id:60,phase:1,pass,nolog,t:lowercase,ctl:requestBodyProcessor=JSON\"\n"
		   "SecRule REQBODY_ERROR \"!@eq 0\" \"id:61,phase:2,deny,status:400\"\n"
		   "SecRule ARGS_POST \"@rx .\" \"id:62,phase:2,pass,setvar:tx.post=+1\"\n"
		   "SecRule ARGS \"@rx hello\" \"id:63,phase:2,pass,setvar:tx.where=%{MATCHED_VAR_NAME}\"\n"
		   "SecRule REQUEST_BODY \"@rx .\" \"id:64,phase:2,pass,setvar:tx.body=1\"\n"
		   "SecRule REQBODY_PROCESSOR \"@rx .\" \"id:65,phase:2,pass,setvar:tx.proc=%{MATCHED_VAR}\"\n") == 0);
	run("POST", "/", "Content-Type: application/json", "{\"a\":{\"b\":\"\\u0068ello\"}}");
	CHECK(!T.v.intercepted && tx_is("where", "ARGS:a.b") && tx_is("post", NULL) && tx_is("body", NULL) && tx_is("proc", "JSON"));
	run("POST", "/", "Content-Type: application/json", "{\"a\":");
	CHECK(T.v.intercepted && T.v.rule_id == 61 && T.v.status == 400 && T.v.body_error);
	run("POST", "/", "Content-Type: application/x-www-form-urlencoded", "x=hello&y=2");
	CHECK(tx_is("post", "2") && tx_is("where", "ARGS:x") && tx_is("body", "1") && tx_is("proc", "URLENCODED"));
	run("POST", "/", "Content-Type: text/plain", "hello");
	CHECK(tx_is("post", NULL) && tx_is("body", "1") && tx_is("proc", NULL));
}

static void test_xml(void)
{
	CHECK(load("SecRuleEngine On\nSecRequestBodyAccess On\n"
		   "SecRule REQUEST_HEADERS:Content-Type \"^(?:application|text)/xml\" \"id:80,phase:1,pass,t:lowercase,ctl:requestBodyProcessor=XML\"\n"
		   "SecRule REQBODY_ERROR \"!@eq 0\" \"id:81,phase:2,deny,status:400\"\n"
		   "SecRule XML:/* \"@rx union select\" \"id:82,phase:2,pass,setvar:tx.text=%{MATCHED_VAR_NAME}\"\n"
		   "SecRule XML://@* \"@rx ^evil$\" \"id:83,phase:2,pass,setvar:tx.attr=1\"\n"
		   "SecRule XML:/* \"@contains root:x:0\" \"id:84,phase:2,pass,setvar:tx.xxe=1\"\n") == 0);
	run("POST", "/", "Content-Type: text/xml", "<a><b k=\"evil\">1 union</b><c> select 2</c></a>");
	CHECK(!T.v.intercepted && tx_is("text", "XML:/*") && tx_is("attr", "1"));
	run("POST", "/", "Content-Type: application/xml", "<a><b>1</a>");
	CHECK(T.v.intercepted && T.v.rule_id == 81 && T.v.status == 400);
	/* an external entity is not read (nor any DTD), the document still parses */
	run("POST", "/", "Content-Type: application/xml",
	    "<?xml version=\"1.0\"?><!DOCTYPE a [<!ENTITY e SYSTEM \"file:///etc/passwd\">]><a>&e;</a>");
	CHECK(!T.v.intercepted && tx_is("xxe", NULL));
}

static void test_server_path(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecRule REQUEST_FILENAME \"@rx .\" \"id:70,phase:1,pass,setvar:tx.f1=%{MATCHED_VAR}\"\n"
		   "SecRule REQUEST_FILENAME \"@rx .\" \"id:71,phase:2,pass,setvar:tx.f2=%{MATCHED_VAR}\"\n"
		   "SecRule REQUEST_URI \"@rx .\" \"id:72,phase:2,pass,setvar:tx.u2=%{MATCHED_VAR}\"\n"
		   "SecRule REQUEST_BASENAME \"@rx .\" \"id:73,phase:2,pass,setvar:tx.b2=%{MATCHED_VAR}\"\n") == 0);
	run("GET", "/a//%2e/b/../c%41%2f%20d.php?x=%2e%2e", NULL, NULL);
	CHECK(tx_is("f1", "/a//%2e/b/../c%41%2f%20d.php"));
	CHECK(tx_is("f2", "/a/cA%2f%20d.php") && tx_is("b2", "cA%2f%20d.php") && tx_is("u2", "/a/cA%2f d.php?x=%2e%2e"));
}

/* ---- the multipart processor ---- */

static struct seccoll C;

static int mp(const char *ct, const char *body)
{
	seccoll_reset(&C);
	return seccoll_multipart_body(&C, ct, strlen(ct), body, strlen(body));
}

static int has(enum sc_list_id l, const char *name, const char *value)
{
	for (uint32_t i = 0; i < C.list[l].n; i++) {
		const struct sc_pair *p = &C.list[l].v[i];
		if (p->nlen == strlen(name) && memcmp(sc_str(&C, p->name), name, p->nlen) == 0 && p->vlen == strlen(value) &&
		    memcmp(sc_str(&C, p->value), value, p->vlen) == 0)
			return 1;
	}
	return 0;
}

static void test_multipart(void)
{
	const char *ct = "multipart/form-data; boundary=XyZ";
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\none\r\ntwo\r\n"
		     "--XyZ\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x.php\"\r\nContent-Type: text/plain\r\n\r\nDATA\r\n"
		     "--XyZ--\r\n") == 0);
	CHECK(has(SC_ARGS_POST, "a", "one\r\ntwo") && C.list[SC_ARGS_POST].n == 1);
	CHECK(has(SC_FILES, "f", "x.php") && has(SC_FILES_SIZES, "f", "4"));
	CHECK(has(SC_PART_HEADERS, "f", "Content-Type: text/plain") &&
	      has(SC_PART_HEADERS, "a", "Content-Disposition: form-data; name=\"a\""));
	CHECK(seccoll_multipart_flag(&C, SL_VAR_MULTIPART_STRICT_ERROR) == 0 &&
	      seccoll_multipart_flag(&C, SL_VAR_MULTIPART_UNMATCHED_BOUNDARY) == 0);
	/* LF line ends, a quoted boundary, no semicolon: strict errors, parsed anyway */
	CHECK(mp("multipart/form-data boundary=\"XyZ\"", "--XyZ\nContent-Disposition: form-data; name=a\n\nv\n--XyZ--\n") == 0);
	CHECK(has(SC_ARGS_POST, "a", "v"));
	CHECK(seccoll_multipart_flag(&C, SL_VAR_MULTIPART_LF_LINE) && seccoll_multipart_flag(&C, SL_VAR_MULTIPART_BOUNDARY_QUOTED) &&
	      seccoll_multipart_flag(&C, SL_VAR_MULTIPART_MISSING_SEMICOLON) &&
	      seccoll_multipart_flag(&C, SL_VAR_MULTIPART_STRICT_ERROR));
	/* data before the first and after the last boundary */
	CHECK(mp(ct, "junk\r\n--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--XyZ--\r\nmore") == 0);
	CHECK(seccoll_multipart_flag(&C, SL_VAR_MULTIPART_DATA_BEFORE) && seccoll_multipart_flag(&C, SL_VAR_MULTIPART_DATA_AFTER));
	/* a single quote: fine inside double quotes, not in single quotes or bare */
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name=\"a\"; filename=\"it's.txt\"\r\n\r\nv\r\n--XyZ--\r\n") == 0);
	CHECK(!seccoll_multipart_flag(&C, SL_VAR_MULTIPART_INVALID_QUOTING) && has(SC_FILES, "a", "it's.txt"));
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name='a'\r\n\r\nv\r\n--XyZ--\r\n") == 0);
	CHECK(seccoll_multipart_flag(&C, SL_VAR_MULTIPART_INVALID_QUOTING) && has(SC_ARGS_POST, "a", "v"));
	/* something that looks like our boundary inside a part */
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nx --XyZ y\r\n--XyZ--\r\n") == 0);
	CHECK(seccoll_multipart_flag(&C, SL_VAR_MULTIPART_UNMATCHED_BOUNDARY));
	/* refused: no final boundary, no Content-Disposition, a bad boundary in C-T */
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n") < 0 && C.list[SC_ARGS_POST].n == 0 &&
	      strstr(C.mp_error, "Final boundary missing"));
	CHECK(mp(ct, "--XyZ\r\nContent-Type: text/plain\r\n\r\nv\r\n--XyZ--\r\n") < 0 &&
	      seccoll_multipart_flag(&C, SL_VAR_MULTIPART_STRICT_ERROR));
	CHECK(mp("multipart/form-data; boundary=a,b", "--a,b--\r\n") < 0);
	CHECK(mp("multipart/form-data", "--a--\r\n") < 0 && strstr(C.mp_error, "Boundary not found"));
	/* the final boundary without its line end still ends the body */
	CHECK(mp(ct, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--XyZ--") == 0 && has(SC_ARGS_POST, "a", "v"));
	seccoll_free(&C);
}

/* /regex/ selectors that are literals are compared, not run: the same
 * names as PCRE2 (caseless) picks */
static void test_literal_selectors(void)
{
	CHECK(load("SecRuleEngine On\n"
		   "SecAction \"id:30,phase:1,pass,nolog,setvar:tx.Header_Name_a=x,setvar:tx.xheader_name_b=x,"
		   "setvar:tx.paramcounter_c=x,setvar:tx.paramcounte=x,setvar:tx.ct=x,setvar:tx.ct__=x,setvar:tx.c=x\"\n"
		   "SecRule TX:/^header_name_/ \"@unconditionalMatch\" \"id:31,phase:1,pass,nolog,setvar:tx.n31=+1\"\n"
		   "SecRule TX:/header_NAME_/ \"@unconditionalMatch\" \"id:32,phase:1,pass,nolog,setvar:tx.n32=+1\"\n"
		   "SecRule TX:/paramcounter_.*/ \"@unconditionalMatch\" \"id:33,phase:1,pass,nolog,setvar:tx.n33=+1\"\n"
		   "SecRule TX:/^ct_*/ \"@unconditionalMatch\" \"id:34,phase:1,pass,nolog,setvar:tx.n34=+1\"\n"
		   "SecRule TX:/^c$/ \"@unconditionalMatch\" \"id:35,phase:1,pass,nolog,setvar:tx.n35=+1\"\n"
		   "SecRule TX:/^/ \"@unconditionalMatch\" \"id:36,phase:1,pass,nolog,setvar:tx.n36=+1\"\n"
		   "SecRule TX:/.*/ \"@unconditionalMatch\" \"id:37,phase:1,pass,nolog,setvar:tx.n37=+1\"\n"
		   "SecRule TX:/^HEADER_name_/ \"@unconditionalMatch\" \"id:38,phase:1,pass,nolog,setvar:tx.n38=+1\"\n") == 0);
	run("GET", "/", NULL, NULL);
	/* each counter counts the TX names its selector picked when its rule ran */
	CHECK(tx_is("n31", "1") && tx_is("n32", "2") && tx_is("n33", "1") && tx_is("n34", "2") && tx_is("n35", "1"));
	CHECK(tx_is("n36", "12") && tx_is("n37", "13") && tx_is("n38", "1"));
}

int main(void)
{
	crs_txn_init(&T);
	test_targets_and_scores();
	test_literal_selectors();
	test_chain_and_matched_vars();
	test_skip_after_and_ctl();
	test_multimatch();
	test_captures_and_macros();
	test_prefilter();
	test_prefilter_one_byte();
	test_prefilter_branches();
	test_multimatch_literals();
	test_byte_range();
	test_tx_direct();
	test_prefilter_groups();
	test_repeated_values();
	test_tfn_features();
	test_pcre_limits();
	test_utf_pattern();
	test_engine_modes();
	test_bodies();
	test_server_path();
	test_xml();
	test_multipart();
	crs_txn_free(&T);
	crs_program_free(&P);
	printf("test_crseval: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
