/* Unit tests for the SecLang parser (src/seclang.c), and the whole of
 * Debian's Core Rule Set 3.3.4 (modsecurity-crs, installed by make
 * test-deps) loaded through it. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "seclang.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)

#define CRS_RULES "/usr/share/modsecurity-crs/rules"
#define CRS_SETUP "/etc/modsecurity/crs/crs-setup.conf"

static int load(struct seclang *sl, const char *text)
{
	seclang_init(sl);
	int rc = seclang_load_buffer(sl, "t.conf", text, strlen(text), 0);
	if (rc == 0)
		rc = seclang_finish(sl);
	return rc;
}

/* Loading TEXT fails with an error that contains WANT. */
static int fails_with(const char *text, const char *want)
{
	struct seclang sl;
	int rc = load(&sl, text);
	int ok = rc < 0 && strstr(sl.error, want) != NULL;
	if (!ok)
		fprintf(stderr, "  loading [%s]: rc %d, error [%s], wanted [%s]\n", text, rc, sl.error, want);
	seclang_free(&sl);
	return ok;
}

static const struct sl_rule *rule(const struct seclang *sl, uint32_t id)
{
	for (size_t i = 0; i < sl->nrules; i++)
		if (sl->rules[i]->id == id)
			return sl->rules[i];
	return NULL;
}

static void test_words_and_lines(void)
{
	struct seclang sl;
	/* continuation keeps the next line's indentation; \" and \\ unescaped
	 * inside double quotes, other backslashes kept (regex escapes) */
	const char *t =
		"# a comment\n"
		"   \n"
		"SecRule REQUEST_URI \"@rx ^/a\\\"b\\\\c\\d+$\" \\\n"
		"    \"id:1,\\\n"
		"    phase:1,deny,msg:'it''s, quoted'\"\n"
		"SecRule ARGS 'x y' \"id:2,pass\"\n";
	CHECK(load(&sl, t) < 0 && strstr(sl.error, "t.conf:3: action msg: unexpected \"'\"") != NULL);
	seclang_free(&sl);
	t = "# a comment\n"
	    "SecRule REQUEST_URI \"@rx ^/a\\\"b\\\\c\\d+$\" \\\n"
	    "    \"id:1,\\\n"
	    "    phase:1,deny,msg:'it\\'s, quoted',logdata:'a\\\\\\\\b'\"\n"
	    "SecRule ARGS 'x y' \"id:2,pass\"  \n";
	CHECK(load(&sl, t) == 0);
	CHECK(sl.nrules == 2);
	const struct sl_rule *r = rule(&sl, 1);
	CHECK(r && r->line == 2 && r->phase == 1 && r->op == SL_OP_RX && !r->op_negated);
	CHECK(r && strcmp(r->op_arg, "^/a\"b\\c\\d+$") == 0);
	const struct sl_action *a = r ? seclang_action(r, SL_ACT_MSG) : NULL;
	CHECK(a && strcmp(a->value, "it's, quoted") == 0);
	a = r ? seclang_action(r, SL_ACT_LOGDATA) : NULL;
	CHECK(a && strcmp(a->value, "a\\b") == 0);
	r = rule(&sl, 2);
	CHECK(r && r->line == 5 && r->phase == 2 && r->op == SL_OP_RX && strcmp(r->op_arg, "x y") == 0);
	seclang_free(&sl);
	/* a comment that ends in a backslash continues (Apache's rule) */
	CHECK(load(&sl, "# comment \\\nSecRule ARGS x \"id:3\"\nSecRule ARGS y \"id:4\"\n") == 0 && sl.nrules == 1 &&
	      sl.rules[0]->id == 4);
	seclang_free(&sl);
	CHECK(fails_with("SecRule ARGS \"@rx a", "t.conf:1: a quoted argument has no closing quote"));
	CHECK(fails_with("\n\nSecFoo On\n", "t.conf:3: unknown directive SecFoo"));
	CHECK(fails_with("SecRule ARGS\n", "SecRule takes VARIABLES"));
	seclang_init(&sl);
	static const char nul_line[] = "\nSecRule ARGS \"x\0y\" \"id:1\"";
	CHECK(seclang_load_buffer(&sl, "n.conf", nul_line, sizeof(nul_line) - 1, 0) < 0 &&
	      strcmp(sl.error, "n.conf:2: a NUL byte in the line") == 0);
	seclang_free(&sl);
	/* directives ignore case, as Apache's do */
	CHECK(load(&sl, "secrule args x \"ID:5,Phase:2,PASS\"\nsecruleengine On\n") == 0 && sl.nrules == 1 &&
	      sl.nsettings == 1 && strcmp(sl.settings[0].name, "SecRuleEngine") == 0 &&
	      strcmp(sl.settings[0].value, "On") == 0);
	seclang_free(&sl);
}

static void test_targets(void)
{
	struct seclang sl;
	CHECK(load(&sl, "SecRule ARGS|!ARGS:foo|&TX:bar|REQUEST_COOKIES:/^__utm/|XML:/*|ARGS:'/a|b/'|"
			"request_headers:User-Agent \"@eq 1\" \"id:10\"\n") == 0);
	const struct sl_rule *r = rule(&sl, 10);
	CHECK(r && r->ntargets == 7);
	if (r && r->ntargets == 7) {
		const struct sl_target *t = r->targets;
		CHECK(t[0].var == SL_VAR_ARGS && !t[0].exclude && !t[0].count && t[0].sel_kind == SL_SEL_NONE);
		CHECK(t[1].var == SL_VAR_ARGS && t[1].exclude && t[1].sel_kind == SL_SEL_NAME && strcmp(t[1].sel, "foo") == 0);
		CHECK(t[2].var == SL_VAR_TX && t[2].count && strcmp(t[2].sel, "bar") == 0);
		CHECK(t[3].var == SL_VAR_REQUEST_COOKIES && t[3].sel_kind == SL_SEL_REGEX && strcmp(t[3].sel, "^__utm") == 0);
		CHECK(t[4].var == SL_VAR_XML && t[4].sel_kind == SL_SEL_NAME && strcmp(t[4].sel, "/*") == 0);
		CHECK(t[5].var == SL_VAR_ARGS && t[5].sel_kind == SL_SEL_REGEX && strcmp(t[5].sel, "a|b") == 0);
		CHECK(t[6].var == SL_VAR_REQUEST_HEADERS && strcmp(t[6].sel, "User-Agent") == 0);
	}
	CHECK(r && r->op == SL_OP_EQ && strcmp(r->op_arg, "1") == 0);
	seclang_free(&sl);
	CHECK(fails_with("SecRule ARGZ x \"id:1\"", "unknown variable ARGZ"));
	CHECK(fails_with("SecRule REQUEST_URI:x x \"id:1\"", "REQUEST_URI is not a collection"));
	CHECK(fails_with("SecRule !ARGS x \"id:1\"", "an exclusion names what it excludes"));
	CHECK(fails_with("SecRule ARGS: x \"id:1\"", "empty selector"));
	CHECK(fails_with("SecRule ARGS|| x \"id:1\"", "empty variable"));
	CHECK(fails_with("SecRule ARGS:'a x \"id:1\"", "missing closing quote"));
}

static void test_operators(void)
{
	struct seclang sl;
	CHECK(load(&sl, "SecRule ARGS \"!@pm a b c\" \"id:1\"\n"
			"SecRule ARGS \"@detectSQLi\" \"id:2\"\n"
			"SecRule ARGS \"!^x\" \"id:3\"\n"
			"SecRule ARGS \"@within %{tx.allowed_methods}\" \"id:4\"\n") == 0);
	const struct sl_rule *r = rule(&sl, 1);
	CHECK(r && r->op == SL_OP_PM && r->op_negated && strcmp(r->op_arg, "a b c") == 0);
	r = rule(&sl, 2);
	CHECK(r && r->op == SL_OP_DETECT_SQLI && r->op_arg[0] == '\0');
	r = rule(&sl, 3);
	CHECK(r && r->op == SL_OP_RX && r->op_negated && strcmp(r->op_arg, "^x") == 0);
	r = rule(&sl, 4);
	CHECK(r && r->op == SL_OP_WITHIN && strcmp(r->op_arg, "%{tx.allowed_methods}") == 0);
	seclang_free(&sl);
	CHECK(fails_with("SecRule ARGS \"@foo x\" \"id:1\"", "unknown operator @foo"));
	CHECK(fails_with("SecRule ARGS \"@rx\" \"id:1\"", "operator @rx needs an argument"));
	CHECK(fails_with("SecRule ARGS \"@streq   \" \"id:1\"", "operator @streq needs an argument"));
}

static void test_actions(void)
{
	struct seclang sl;
	CHECK(load(&sl, "SecRule ARGS x \"id:7, phase:request , t:none,t:URLDECODEUNI,t:lowercase,"
			"setvar:'tx.a=+%{tx.b}',ctl:ruleRemoveTargetById=942100;ARGS:pw,severity:'CRITICAL',"
			"tag:'a,b',tag:c,status:403,capture\"\n") == 0);
	const struct sl_rule *r = rule(&sl, 7);
	CHECK(r && r->phase == 2 && r->nactions == 12);
	if (r && r->nactions == 12) {
		CHECK(r->actions[2].act == SL_ACT_T && r->actions[2].tfn == SL_TFN_NONE);
		CHECK(r->actions[3].tfn == SL_TFN_URL_DECODE_UNI && r->actions[4].tfn == SL_TFN_LOWERCASE);
		CHECK(strcmp(r->actions[5].value, "tx.a=+%{tx.b}") == 0);
		CHECK(r->actions[6].act == SL_ACT_CTL && strcmp(r->actions[6].value, "ruleRemoveTargetById=942100;ARGS:pw") == 0);
		CHECK(r->actions[11].act == SL_ACT_CAPTURE && r->actions[11].value == NULL);
	}
	CHECK(r && seclang_has_tag(r, "a,b") && seclang_has_tag(r, "c") && !seclang_has_tag(r, "a"));
	seclang_free(&sl);
	CHECK(fails_with("SecRule ARGS x \"id:1,frobnicate\"", "unknown action \"frobnicate\""));
	CHECK(fails_with("SecRule ARGS x \"id:1,t:rot13\"", "unknown transformation t:rot13"));
	CHECK(fails_with("SecRule ARGS x \"id:1,msg\"", "action msg needs a value"));
	CHECK(fails_with("SecRule ARGS x \"id:1,deny:now\"", "action deny takes no value"));
	CHECK(fails_with("SecRule ARGS x \"id:1,msg:'abc\"", "action msg: missing closing quote"));
	CHECK(fails_with("SecRule ARGS x \"id:1,msg:'a\\b'\"", "invalid escape \\b"));
	CHECK(fails_with("SecRule ARGS x \"id:x1\"", "id:x1: an id is a number"));
	CHECK(fails_with("SecRule ARGS x \"id:0\"", "id:0: an id is a number"));
	CHECK(fails_with("SecRule ARGS x \"id:1,phase:6\"", "phase:6"));
	CHECK(fails_with("SecRule ARGS x \"id:1,severity:HUGE\"", "severity:HUGE"));
	CHECK(fails_with("SecRule ARGS x \"id:1,status:42\"", "status:42"));
	CHECK(fails_with("SecRule ARGS x \"id:1,skip:0\"", "skip:0"));
	CHECK(fails_with("SecRule ARGS x \"id:1 phase:2\"", "unexpected \"p\""));
	CHECK(fails_with("SecRule ARGS x \"phase:2\"", "a rule needs an id"));
	CHECK(fails_with("SecAction \"phase:2,pass\"", "a rule needs an id"));
	CHECK(fails_with("SecRule ARGS x \"id:5\"\n\nSecRule ARGS y \"id:5\"", "t.conf:3: id 5 is already used (t.conf:1)"));
}

static void test_chains_and_markers(void)
{
	struct seclang sl;
	CHECK(load(&sl, "SecDefaultAction \"phase:2,log,auditlog,pass\"\n"
			"SecRule ARGS a \"id:1,phase:2,block,chain\"\n"
			"  SecRule ARGS b \"t:lowercase,chain\"\n"
			"    SecRule ARGS c \"setvar:tx.x=1\"\n"
			"SecMarker END-1\n"
			"SecAction \"id:2,phase:1,pass,nolog,skipAfter:END-1\"\n") == 0);
	CHECK(sl.nrules == 3);
	const struct sl_rule *r = rule(&sl, 1);
	CHECK(r && r->chained && r->chained->chained && !r->chained->chained->chained);
	CHECK(r && r->chained && r->chained->phase == 2 && r->chained->id == 0 && r->chained->line == 3);
	CHECK(r && r->defaults == 0 && r->chained && r->chained->defaults == -1);
	CHECK(sl.rules[1]->kind == SL_MARKER && strcmp(sl.rules[1]->marker, "END-1") == 0);
	r = rule(&sl, 2);
	CHECK(r && r->kind == SL_ACTION && r->op == SL_OP_UNCONDITIONAL_MATCH && r->phase == 1 && r->defaults == -1);
	seclang_free(&sl);
	CHECK(fails_with("SecRule ARGS a \"id:1,chain\"\nSecRule ARGS b \"id:2\"", "t.conf:2: only the first rule of a chain may say id"));
	CHECK(fails_with("SecRule ARGS a \"id:1,chain\"\nSecRule ARGS b \"deny\"", "may say deny"));
	CHECK(fails_with("SecRule ARGS a \"id:1,chain\"\nSecRule ARGS b \"phase:1\"", "may say phase"));
	CHECK(fails_with("SecRule ARGS a \"id:1,chain\"\nSecMarker x", "t.conf:2: the rule before says chain"));
	CHECK(fails_with("SecRule ARGS a \"id:1,chain\"\nSecAction \"id:2\"", "the rule before says chain"));
	CHECK(fails_with("\nSecRule ARGS a \"id:1,chain\"\n", "t.conf:2: this rule says chain, but no rule follows"));
	CHECK(fails_with("SecAction \"id:1,chain\"", "SecAction cannot start a chain"));
	CHECK(fails_with("SecDefaultAction \"log,pass\"", "SecDefaultAction needs a phase"));
	CHECK(fails_with("SecDefaultAction \"phase:2,log\"", "SecDefaultAction needs a phase and a disruptive"));
	CHECK(fails_with("SecDefaultAction \"phase:2,pass,id:3\"", "and no id"));
}

static void test_config_time_changes(void)
{
	struct seclang sl;
	CHECK(load(&sl, "SecRule ARGS a \"id:100,tag:'attack-sqli',msg:'SQL one'\"\n"
			"SecRule ARGS b \"id:101,tag:'attack-xss',msg:'XSS'\"\n"
			"SecRule ARGS c \"id:102,tag:'attack-sqli'\"\n"
			"SecRule ARGS|REQUEST_COOKIES d \"id:103\"\n"
			"SecRule ARGS e \"id:104\"\n"
			"SecRuleRemoveById 104 \"90-99 101\"\n"
			"SecRuleRemoveByTag ^attack-sql\n"
			"SecRuleUpdateTargetById 103 \"!ARGS:password|!REQUEST_COOKIES:/^sess/\"\n"
			"SecRuleUpdateTargetById 103 ARGS_NAMES REQUEST_COOKIES\n"
			"SecRuleUpdateActionById 103 \"deny,status:403\"\n"
			"SecRule ARGS f \"id:105,tag:'attack-sqli'\"\n"
			"SecRuleRemoveByMsg \"^nothing$\"\n") == 0);
	CHECK(rule(&sl, 100)->removed && rule(&sl, 101)->removed && rule(&sl, 102)->removed && rule(&sl, 104)->removed);
	CHECK(!rule(&sl, 103)->removed && !rule(&sl, 105)->removed);  /* loaded after the removal */
	const struct sl_rule *r = rule(&sl, 103);
	CHECK(r->ntargets == 4);
	if (r->ntargets == 4) {
		CHECK(r->targets[0].var == SL_VAR_ARGS && r->targets[0].sel == NULL);
		CHECK(r->targets[1].var == SL_VAR_ARGS_NAMES);  /* replaced REQUEST_COOKIES */
		CHECK(r->targets[2].exclude && strcmp(r->targets[2].sel, "password") == 0);
		CHECK(r->targets[3].exclude && r->targets[3].sel_kind == SL_SEL_REGEX && strcmp(r->targets[3].sel, "^sess") == 0);
	}
	CHECK(r->nactions == 3 && r->actions[1].act == SL_ACT_DENY && r->actions[1].updated &&
	      r->actions[2].act == SL_ACT_STATUS && !r->actions[0].updated);
	CHECK(sl.nwarnings == 1 && strstr(sl.warning, "t.conf:12: SecRuleRemoveByMsg ^nothing$ removes no rule"));
	seclang_free(&sl);
	CHECK(fails_with("SecRuleRemoveById 5-3", "\"5-3\" is not a rule id or a range"));
	CHECK(fails_with("SecRuleRemoveById abc", "\"abc\" is not a rule id"));
	CHECK(fails_with("SecRuleRemoveByTag \"(\"", "bad regular expression"));
	CHECK(fails_with("SecRule ARGS a \"id:1\"\nSecRuleUpdateTargetById 1 ARGS_NAMES TX:x", "rule 1 has no variable TX:x"));
	CHECK(fails_with("SecRule ARGS a \"id:1\"\nSecRuleUpdateActionById 1 \"phase:1\"", "cannot change phase"));
}

static int write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return -1;
	fputs(text, f);
	return fclose(f);
}

static void test_include(void)
{
	char dir[] = "/tmp/seclang-test-XXXXXX";
	if (!mkdtemp(dir)) {
		CHECK(0);
		return;
	}
	char p[256], q[256], s[256], loop[256];
	snprintf(p, sizeof(p), "%s/main.conf", dir);
	snprintf(q, sizeof(q), "%s/sub", dir);
	mkdir(q, 0700);
	snprintf(q, sizeof(q), "%s/sub/b.conf", dir);
	snprintf(s, sizeof(s), "%s/sub/a.conf", dir);
	snprintf(loop, sizeof(loop), "%s/loop.conf", dir);
	CHECK(write_file(p, "Include sub/*.conf\nIncludeOptional nothing/*.conf\nSecRule ARGS z \"id:3\"\n") == 0);
	CHECK(write_file(s, "SecRule ARGS a \"id:1\"\n") == 0);
	CHECK(write_file(q, "\nSecRule ARGS b \"id:2,bogus\"\n") == 0);
	CHECK(write_file(loop, "Include loop.conf\n") == 0);
	struct seclang sl;
	seclang_init(&sl);
	CHECK(seclang_load_file(&sl, p) < 0);
	char want[300];
	snprintf(want, sizeof(want), "%s/sub/b.conf:2: unknown action \"bogus\"", dir);
	CHECK(strcmp(sl.error, want) == 0);
	seclang_free(&sl);
	CHECK(write_file(q, "SecRule ARGS b \"id:2\"\n") == 0);
	seclang_init(&sl);
	CHECK(seclang_load_file(&sl, p) == 0 && seclang_finish(&sl) == 0);
	CHECK(sl.nrules == 3 && sl.rules[0]->id == 1 && sl.rules[1]->id == 2 && sl.rules[2]->id == 3);  /* glob order */
	CHECK(sl.nfiles == 3 && strcmp(sl.rules[0]->file, s) == 0 && strcmp(sl.rules[2]->file, p) == 0);
	seclang_free(&sl);
	seclang_init(&sl);
	CHECK(seclang_load_file(&sl, loop) < 0 && strstr(sl.error, "levels deep") != NULL);
	seclang_free(&sl);
	CHECK(fails_with("Include /nonexistent/x.conf", "Include is not allowed here"));
	seclang_init(&sl);
	CHECK(seclang_load_buffer(&sl, "x.conf", "Include /nonexistent/x.conf", 27, 1) < 0 &&
	      strstr(sl.error, "x.conf:1: Include /nonexistent/x.conf: no such file") != NULL);
	seclang_free(&sl);
	seclang_init(&sl);
	CHECK(seclang_load_file(&sl, "/nonexistent/y.conf") < 0 && strstr(sl.error, "cannot open /nonexistent/y.conf"));
	seclang_free(&sl);
	unlink(p);
	unlink(q);
	unlink(s);
	unlink(loop);
	snprintf(q, sizeof(q), "%s/sub", dir);
	rmdir(q);
	rmdir(dir);
}

/* Independent counts from the files' text: active `id:` actions and
 * SecMarker lines (comment lines skipped). */
static void count_text(const char *path, unsigned *ids, unsigned *markers)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	char line[65536];
	while (fgets(line, sizeof(line), f)) {
		const char *s = line;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '#')
			continue;
		if (strncmp(s, "SecMarker", 9) == 0)
			(*markers)++;
		for (const char *p = s; (p = strstr(p, "id:")) != NULL; p += 3)
			if (p > s && (p[-1] == '"' || p[-1] == ',' || p[-1] == ' ') && p[3] >= '0' && p[3] <= '9')
				(*ids)++;
	}
	fclose(f);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_crs(void)
{
	if (access(CRS_RULES, R_OK) != 0 || access(CRS_SETUP, R_OK) != 0) {
		fprintf(stderr, "test_crs: Debian's modsecurity-crs is not installed (make test-deps installs it)\n");
		CHECK(0);
		return;
	}
	struct seclang sl;
	seclang_init(&sl);
	unsigned ids = 0, markers = 0;
	/* as Debian's owasp-crs.load: the setup, then every rule file */
	int rc = seclang_load_file(&sl, CRS_SETUP);
	count_text(CRS_SETUP, &ids, &markers);
	char *names[64];
	int n = 0;
	DIR *d = opendir(CRS_RULES);
	struct dirent *e;
	while (d && (e = readdir(d)) != NULL && n < 64) {
		size_t l = strlen(e->d_name);
		if (l > 5 && strcmp(e->d_name + l - 5, ".conf") == 0)
			names[n++] = strdup(e->d_name);
	}
	if (d)
		closedir(d);
	qsort(names, (size_t)n, sizeof(names[0]), cmp_str);
	for (int i = 0; i < n; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/%s", CRS_RULES, names[i]);
		if (rc == 0)
			rc = seclang_load_file(&sl, path);
		count_text(path, &ids, &markers);
		free(names[i]);
	}
	if (rc == 0)
		rc = seclang_finish(&sl);
	if (rc != 0)
		fprintf(stderr, "  CRS: %s\n", sl.error);
	CHECK(rc == 0);
	CHECK(n >= 25);
	unsigned nid = 0, nmark = 0, chains = 0, targets = 0;
	for (size_t i = 0; i < sl.nrules; i++) {
		const struct sl_rule *r = sl.rules[i];
		if (r->kind == SL_MARKER)
			nmark++;
		else
			nid++;
		for (const struct sl_rule *c = r->chained; c; c = c->chained)
			chains++, targets += (unsigned)c->ntargets;
		targets += (unsigned)r->ntargets;
	}
	fprintf(stderr, "  CRS 3.3.4: %u files, %u rules, %u chained, %u markers, %u targets, %u settings\n",
		(unsigned)sl.nfiles, nid, chains, nmark, targets, (unsigned)sl.nsettings);
	CHECK(nid == ids && nmark == markers && nid > 500 && chains > 50);
	const struct sl_rule *r = rule(&sl, 942100);
	CHECK(r && r->op == SL_OP_DETECT_SQLI && seclang_has_tag(r, "attack-sqli") && r->phase == 2);
	r = rule(&sl, 920100);
	CHECK(r && r->op == SL_OP_RX && r->op_negated && r->targets[0].var == SL_VAR_REQUEST_LINE && r->phase == 2);
	r = rule(&sl, 930120);
	CHECK(r && r->op == SL_OP_PM_FROM_FILE && strcmp(r->op_arg, "lfi-os-files.data") == 0);
	CHECK(sl.nwarnings == 0);
	seclang_free(&sl);
}

int main(void)
{
	test_words_and_lines();
	test_targets();
	test_operators();
	test_actions();
	test_chains_and_markers();
	test_config_time_changes();
	test_include();
	test_crs();
	printf("test_seclang: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
