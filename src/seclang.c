/* SecLang rule files parsed into rules (seclang.h says what and why). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "seclang.h"
#include "util.h"

#define SL_INCLUDE_DEPTH 16
/* A rule file is text; a larger one is a mistake (CRS 3.3.4's largest is 90 KB). */
#define SL_FILE_MAX (16u << 20)

struct sl_name {
	const char *name;
	uint8_t arg;
};

#define SL_NAME_ENTRY(id, name, arg) { name, arg },
static const struct sl_name var_names[] = { SL_VARS(SL_NAME_ENTRY) };
#define SL_LEN_ENTRY(id, name, arg) sizeof(name) - 1,
static const uint8_t var_name_lens[] = { SL_VARS(SL_LEN_ENTRY) };
#undef SL_LEN_ENTRY
static const struct sl_name op_names[] = { SL_OPS(SL_NAME_ENTRY) };
static const struct sl_name act_names[] = { SL_ACTS(SL_NAME_ENTRY) };
#undef SL_NAME_ENTRY
#define SL_TFN_ENTRY(id, name) name,
static const char *const tfn_names[] = { SL_TFNS(SL_TFN_ENTRY) };
#undef SL_TFN_ENTRY

const char *seclang_var_name(enum sl_var v) { return var_names[v].name; }
size_t seclang_var_name_len(enum sl_var v) { return var_name_lens[v]; }
const char *seclang_op_name(enum sl_op o) { return op_names[o].name; }
const char *seclang_act_name(enum sl_act a) { return act_names[a].name; }
const char *seclang_tfn_name(enum sl_tfn t) { return tfn_names[t]; }

static int name_lookup(const struct sl_name *tab, int n, const char *s, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strncasecmp(tab[i].name, s, len) == 0 && tab[i].name[len] == '\0')
			return i;
	return -1;
}

int seclang_var_lookup(const char *s, size_t len)
{
	/* the lengths first: macros name variables per request */
	for (int i = 0; i < SL_VAR__COUNT; i++)
		if (var_name_lens[i] == len && strncasecmp(var_names[i].name, s, len) == 0)
			return i;
	return -1;
}

int seclang_tfn_lookup(const char *s, size_t len)
{
	for (int i = 0; i < SL_TFN__COUNT; i++)
		if (strncasecmp(tfn_names[i], s, len) == 0 && tfn_names[i][len] == '\0')
			return i;
	return -1;
}

/* Directives that configure the engine rather than add rules: kept as
 * settings for the engine to honour or refuse. */
static const char *const setting_directives[] = {
	"SecArgumentSeparator", "SecArgumentsLimit", "SecAuditEngine", "SecAuditLog", "SecAuditLog2",
	"SecAuditLogDirMode", "SecAuditLogFileMode", "SecAuditLogFormat", "SecAuditLogParts",
	"SecAuditLogRelevantStatus", "SecAuditLogStorageDir", "SecAuditLogType", "SecCacheTransformations",
	"SecChrootDir", "SecCollectionTimeout", "SecComponentSignature", "SecConnEngine",
	"SecContentInjection", "SecCookieFormat", "SecCookieV0Separator", "SecDataDir", "SecDebugLog",
	"SecDebugLogLevel", "SecDisableBackendCompression", "SecGeoLookupDb", "SecGsbLookupDb",
	"SecGuardianLog", "SecHashEngine", "SecHashKey", "SecHashMethodPm", "SecHashMethodRx",
	"SecHashParam", "SecHttpBlKey", "SecInterceptOnError", "SecPcreMatchLimit",
	"SecPcreMatchLimitRecursion", "SecReadStateLimit", "SecRemoteRules", "SecRemoteRulesFailAction",
	"SecRequestBodyAccess", "SecRequestBodyInMemoryLimit", "SecRequestBodyJsonDepthLimit",
	"SecRequestBodyLimit", "SecRequestBodyLimitAction", "SecRequestBodyNoFilesLimit",
	"SecResponseBodyAccess", "SecResponseBodyLimit", "SecResponseBodyLimitAction",
	"SecResponseBodyMimeType", "SecResponseBodyMimeTypesClear", "SecRuleEngine",
	"SecRuleInheritance", "SecRulePerfTime", "SecSensorId", "SecServerSignature", "SecStatusEngine",
	"SecStreamInBodyInspection", "SecStreamOutBodyInspection", "SecTmpDir", "SecTmpSaveUploadedFiles",
	"SecUnicodeCodePage", "SecUnicodeMapFile", "SecUploadDir", "SecUploadFileLimit",
	"SecUploadFileMode", "SecUploadKeepFiles", "SecWebAppId", "SecWriteStateLimit",
	"SecXmlExternalEntity",
};

/* ---- errors ---- */

struct sl_ctx {
	struct seclang *sl;
	const char *file;   /* owned by sl->files */
	int line;
};

static int fail(struct sl_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct sl_ctx *c, const char *fmt, ...)
{
	if (c->sl->error[0])
		return -1;
	int n = snprintf(c->sl->error, sizeof(c->sl->error), "%s:%d: ", c->file, c->line);
	if (n < 0 || (size_t)n >= sizeof(c->sl->error))
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->sl->error + n, sizeof(c->sl->error) - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static void warn(struct sl_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct sl_ctx *c, const char *fmt, ...)
{
	if (c->sl->nwarnings++ > 0)
		return;
	int n = snprintf(c->sl->warning, sizeof(c->sl->warning), "%s:%d: ", c->file, c->line);
	if (n < 0 || (size_t)n >= sizeof(c->sl->warning))
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->sl->warning + n, sizeof(c->sl->warning) - (size_t)n, fmt, ap);
	va_end(ap);
}

static char *dupn(const char *s, size_t n)
{
	char *d = malloc(n + 1);
	AN(d);
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

/* ---- Apache's configuration words ---- */

/* One word of a logical line, as Apache's ap_getword_conf reads it: a
 * quoted word ends at its unescaped quote, and inside it only \<quote>
 * and \\ are escapes; an unquoted word ends at whitespace and only \\ is
 * an escape. Returns the word (malloc'd) and advances *P, or NULL at the
 * end of the line; an unterminated quote is an error (-1 in *BAD). */
static char *next_word(const char **pp, int *bad)
{
	const char *p = *pp;
	while (*p && isspace((unsigned char)*p))
		p++;
	if (!*p) {
		*pp = p;
		return NULL;
	}
	char quote = 0;
	if (*p == '"' || *p == '\'')
		quote = *p++;
	const char *start = p;
	while (*p && (quote ? *p != quote : !isspace((unsigned char)*p))) {
		if (p[0] == '\\' && (p[1] == '\\' || (quote && p[1] == quote)))
			p++;
		p++;
	}
	if (quote && *p != quote) {
		*bad = 1;
		return NULL;
	}
	char *w = malloc((size_t)(p - start) + 1), *d = w;
	AN(w);
	for (const char *s = start; s < p; s++) {
		if (s[0] == '\\' && (s[1] == '\\' || (quote && s[1] == quote)))
			s++;
		*d++ = *s;
	}
	*d = '\0';
	if (quote)
		p++;
	*pp = p;
	return w;
}

/* ---- actions: ModSecurity's name[:value] list, values optionally in
 * single quotes where only \' and \\ are escapes ---- */

static void actions_free(struct sl_action *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(a[i].value);
	free(a);
}

static int severity_ok(const char *v)
{
	static const char *const names[] = { "EMERGENCY", "ALERT", "CRITICAL", "ERROR", "WARNING", "NOTICE", "INFO", "DEBUG" };
	if (v[0] >= '0' && v[0] <= '7' && v[1] == '\0')
		return 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcasecmp(v, names[i]) == 0)
			return 1;
	return 0;
}

static int parse_uint(const char *v, uint32_t max, uint32_t *out)
{
	if (!isdigit((unsigned char)v[0]))
		return -1;
	errno = 0;
	char *end;
	unsigned long long x = strtoull(v, &end, 10);
	if (*end || errno || x > max)
		return -1;
	*out = (uint32_t)x;
	return 0;
}

static int parse_phase(const char *v)
{
	if (v[0] >= '1' && v[0] <= '5' && v[1] == '\0')
		return v[0] - '0';
	if (strcasecmp(v, "request") == 0)
		return 2;
	if (strcasecmp(v, "response") == 0)
		return 4;
	if (strcasecmp(v, "logging") == 0)
		return 5;
	return -1;
}

static int action_check(struct sl_ctx *c, struct sl_action *a)
{
	uint32_t u;
	switch (a->act) {
	case SL_ACT_T: {
		int t = seclang_tfn_lookup(a->value, strlen(a->value));
		if (t < 0)
			return fail(c, "unknown transformation t:%s", a->value);
		a->tfn = (uint8_t)t;
		return 0;
	}
	case SL_ACT_ID:
		if (parse_uint(a->value, UINT32_MAX, &u) < 0 || u == 0)
			return fail(c, "id:%s: an id is a number from 1 to 4294967295", a->value);
		return 0;
	case SL_ACT_PHASE:
		if (parse_phase(a->value) < 0)
			return fail(c, "phase:%s: a phase is 1 to 5, request, response or logging", a->value);
		return 0;
	case SL_ACT_SEVERITY:
		if (!severity_ok(a->value))
			return fail(c, "severity:%s: 0 to 7 or EMERGENCY, ALERT, CRITICAL, ERROR, WARNING, NOTICE, INFO, DEBUG",
				    a->value);
		return 0;
	case SL_ACT_STATUS:
		if (parse_uint(a->value, 999, &u) < 0 || u < 100)
			return fail(c, "status:%s: an HTTP status from 100 to 999", a->value);
		return 0;
	case SL_ACT_SKIP:
		if (parse_uint(a->value, INT_MAX, &u) < 0 || u == 0)
			return fail(c, "skip:%s: a positive number of rules", a->value);
		return 0;
	default:
		return 0;
	}
}

static int parse_actions(struct sl_ctx *c, const char *s, struct sl_action **out, size_t *nout)
{
	struct sl_action *v = NULL;
	size_t n = 0, cap = 0;
	const char *p = s;
	for (;;) {
		while (*p && (isspace((unsigned char)*p) || *p == ','))
			p++;
		if (!*p)
			break;
		const char *name = p;
		while (*p && *p != ':' && *p != ',' && !isspace((unsigned char)*p))
			p++;
		size_t nlen = (size_t)(p - name);
		int act = name_lookup(act_names, SL_ACT__COUNT, name, nlen);
		if (act < 0) {
			fail(c, "unknown action \"%.*s\"", (int)nlen, name);
			goto bad;
		}
		while (*p && isspace((unsigned char)*p))
			p++;
		char *value = NULL;
		if (*p == ':') {
			p++;
			while (*p && isspace((unsigned char)*p))
				p++;
			if (*p == '\'') {
				p++;
				size_t cap2 = strlen(p) + 1, k = 0;
				value = malloc(cap2);
				AN(value);
				for (;;) {
					if (!*p) {
						free(value);
						fail(c, "action %s: missing closing quote", act_names[act].name);
						goto bad;
					}
					if (*p == '\\') {
						if (p[1] != '\'' && p[1] != '\\') {
							free(value);
							fail(c, "action %s: invalid escape \\%c in a quoted value (only \\' and \\\\)",
							     act_names[act].name, p[1] ? p[1] : ' ');
							goto bad;
						}
						p++;
						value[k++] = *p++;
					} else if (*p == '\'') {
						p++;
						break;
					} else {
						value[k++] = *p++;
					}
				}
				value[k] = '\0';
			} else {
				const char *vs = p;
				while (*p && *p != ',' && !isspace((unsigned char)*p))
					p++;
				value = dupn(vs, (size_t)(p - vs));
			}
			while (*p && isspace((unsigned char)*p))
				p++;
		}
		if (*p && *p != ',') {
			free(value);
			fail(c, "action %s: unexpected \"%c\" after it (actions are separated by commas)",
			     act_names[act].name, *p);
			goto bad;
		}
		if (act_names[act].arg == 1 && (value == NULL || value[0] == '\0')) {
			free(value);
			fail(c, "action %s needs a value (%s:...)", act_names[act].name, act_names[act].name);
			goto bad;
		}
		if (act_names[act].arg == 0 && value != NULL) {
			free(value);
			fail(c, "action %s takes no value", act_names[act].name);
			goto bad;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			v = realloc(v, cap * sizeof(*v));
			AN(v);
		}
		v[n] = (struct sl_action){ .act = (uint8_t)act, .value = value };
		if (action_check(c, &v[n++]) < 0)
			goto bad;
	}
	*out = v;
	*nout = n;
	return 0;
bad:
	actions_free(v, n);
	return -1;
}

/* ---- targets: VAR|!VAR:sel|&VAR|VAR:/regex/|VAR:'quoted' ---- */

static void targets_free(struct sl_target *t, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(t[i].sel);
	free(t);
}

static int parse_targets(struct sl_ctx *c, const char *s, struct sl_target **out, size_t *nout)
{
	struct sl_target *v = NULL;
	size_t n = 0, cap = 0;
	const char *p = s;
	for (;;) {
		while (*p && isspace((unsigned char)*p))
			p++;
		if (!*p && n > 0)
			break;
		struct sl_target t = { 0 };
		if (*p == '!')
			t.exclude = 1, p++;
		else if (*p == '&')
			t.count = 1, p++;
		const char *name = p;
		while (*p && *p != ':' && *p != '|' && !isspace((unsigned char)*p))
			p++;
		size_t nlen = (size_t)(p - name);
		if (nlen == 0) {
			fail(c, "empty variable in \"%s\"", s);
			goto bad;
		}
		int var = name_lookup(var_names, SL_VAR__COUNT, name, nlen);
		if (var < 0) {
			fail(c, "unknown variable %.*s", (int)nlen, name);
			goto bad;
		}
		t.var = (uint8_t)var;
		if (*p == ':') {
			p++;
			char *sel;
			if (*p == '\'') {
				const char *q = ++p;
				while (*p && *p != '\'')
					p++;
				if (*p != '\'') {
					fail(c, "%s: missing closing quote in its selector", var_names[var].name);
					goto bad;
				}
				sel = dupn(q, (size_t)(p - q));
				p++;
			} else {
				const char *q = p;
				while (*p && *p != '|' && !isspace((unsigned char)*p))
					p++;
				sel = dupn(q, (size_t)(p - q));
			}
			size_t sl = strlen(sel);
			if (sl == 0) {
				free(sel);
				fail(c, "%s: empty selector after ':'", var_names[var].name);
				goto bad;
			}
			if (!var_names[var].arg) {
				free(sel);
				fail(c, "%s is not a collection: it takes no selector", var_names[var].name);
				goto bad;
			}
			if (var != SL_VAR_XML && sl >= 2 && sel[0] == '/' && sel[sl - 1] == '/') {
				memmove(sel, sel + 1, sl - 2);
				sel[sl - 2] = '\0';
				t.sel_kind = SL_SEL_REGEX;
			} else {
				t.sel_kind = SL_SEL_NAME;
			}
			t.sel = sel;
			t.sel_len = (uint32_t)strlen(sel);
		}
		if (t.exclude && t.sel_kind == SL_SEL_NONE) {
			fail(c, "!%s: an exclusion names what it excludes (!%s:name)", var_names[var].name,
			     var_names[var].name);
			goto bad;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 8;
			v = realloc(v, cap * sizeof(*v));
			AN(v);
		}
		v[n++] = t;
		while (*p && isspace((unsigned char)*p))
			p++;
		if (*p == '|') {
			p++;
			continue;
		}
		if (*p) {
			fail(c, "unexpected \"%c\" in the variables (separate them with |)", *p);
			goto bad;
		}
		break;
	}
	*out = v;
	*nout = n;
	return 0;
bad:
	targets_free(v, n);
	return -1;
}

/* ---- the operator: "[!]@name arg", or a bare regex ---- */

static int parse_operator(struct sl_ctx *c, const char *s, struct sl_rule *r)
{
	const char *p = s;
	while (*p && isspace((unsigned char)*p))
		p++;
	if (*p == '!') {
		r->op_negated = 1;
		p++;
	}
	if (*p != '@') {
		r->op = SL_OP_RX;
		r->op_arg = strdup(p);
		AN(r->op_arg);
		return 0;
	}
	const char *name = ++p;
	while (*p && !isspace((unsigned char)*p))
		p++;
	size_t nlen = (size_t)(p - name);
	int op = name_lookup(op_names, SL_OP__COUNT, name, nlen);
	if (op < 0)
		return fail(c, "unknown operator @%.*s", (int)nlen, name);
	r->op = (uint8_t)op;
	while (*p && isspace((unsigned char)*p))
		p++;
	if (op_names[op].arg && !*p)
		return fail(c, "operator @%s needs an argument", op_names[op].name);
	r->op_arg = strdup(p);
	AN(r->op_arg);
	return 0;
}

/* ---- rules ---- */

const struct sl_action *seclang_action(const struct sl_rule *r, enum sl_act act)
{
	for (size_t i = 0; i < r->nactions; i++)
		if (r->actions[i].act == act)
			return &r->actions[i];
	return NULL;
}

int seclang_has_tag(const struct sl_rule *r, const char *tag)
{
	for (size_t i = 0; i < r->nactions; i++)
		if (r->actions[i].act == SL_ACT_TAG && strcmp(r->actions[i].value, tag) == 0)
			return 1;
	return 0;
}

static void rule_free(struct sl_rule *r)
{
	while (r) {
		struct sl_rule *next = r->chained;
		free(r->op_arg);
		free(r->marker);
		targets_free(r->targets, r->ntargets);
		actions_free(r->actions, r->nactions);
		free(r);
		r = next;
	}
}

int seclang_is_disruptive(enum sl_act act)
{
	return act == SL_ACT_ALLOW || act == SL_ACT_BLOCK || act == SL_ACT_DENY || act == SL_ACT_DROP ||
	       act == SL_ACT_PASS || act == SL_ACT_PROXY || act == SL_ACT_REDIRECT || act == SL_ACT_PAUSE;
}

static const struct sl_rule *find_id(const struct seclang *sl, uint32_t id)
{
	for (size_t i = 0; i < sl->nrules; i++)
		if (sl->rules[i]->id == id)
			return sl->rules[i];
	return NULL;
}

static void rules_push(struct seclang *sl, struct sl_rule *r)
{
	if (sl->nrules == sl->rules_cap) {
		sl->rules_cap = sl->rules_cap ? sl->rules_cap * 2 : 256;
		sl->rules = realloc(sl->rules, sl->rules_cap * sizeof(*sl->rules));
		AN(sl->rules);
	}
	sl->rules[sl->nrules++] = r;
}

/* A SecRule or SecAction is complete: the checks that need all its
 * actions, then into the list (or onto the chain waiting for it). On
 * failure the caller still owns R. */
static int rule_add(struct sl_ctx *c, struct sl_rule *r)
{
	struct seclang *sl = c->sl;
	struct sl_rule *starter = sl->chain_tail;
	uint32_t id = 0;
	int phase = 0, says_chain = 0;
	for (size_t i = 0; i < r->nactions; i++) {
		const struct sl_action *a = &r->actions[i];
		if (a->act == SL_ACT_ID)
			(void)parse_uint(a->value, UINT32_MAX, &id);
		else if (a->act == SL_ACT_PHASE)
			phase = parse_phase(a->value);
		else if (a->act == SL_ACT_CHAIN)
			says_chain = 1;
		if (starter && (a->act == SL_ACT_ID || a->act == SL_ACT_PHASE || seclang_is_disruptive((enum sl_act)a->act) ||
				a->act == SL_ACT_SKIP || a->act == SL_ACT_SKIP_AFTER))
			return fail(c, "only the first rule of a chain may say %s", seclang_act_name(a->act));
	}
	if (says_chain && r->kind != SL_RULE)
		return fail(c, "SecAction cannot start a chain");
	if (starter) {
		r->phase = starter->phase;
		starter->chained = r;
	} else {
		if (id == 0)
			return fail(c, "a rule needs an id (id:N)");
		const struct sl_rule *dup = find_id(sl, id);
		if (dup)
			return fail(c, "id %u is already used (%s:%d)", id, dup->file, dup->line);
		r->id = id;
		r->phase = (uint8_t)(phase > 0 ? phase : 2);
		r->defaults = sl->default_idx[r->phase];
		rules_push(sl, r);
	}
	sl->chain_tail = says_chain ? r : NULL;
	return 0;
}

static struct sl_rule *rule_new(struct sl_ctx *c, enum sl_kind kind)
{
	struct sl_rule *r = calloc(1, sizeof(*r));
	AN(r);
	r->kind = (uint8_t)kind;
	r->file = c->file;
	r->line = c->line;
	r->defaults = -1;
	return r;
}

static int do_secrule(struct sl_ctx *c, char **argv, int argc)
{
	if (argc < 3 || argc > 4)
		return fail(c, "SecRule takes VARIABLES \"OPERATOR\" [\"ACTIONS\"], not %d arguments", argc - 1);
	struct sl_rule *r = rule_new(c, SL_RULE);
	if (parse_targets(c, argv[1], &r->targets, &r->ntargets) < 0 || parse_operator(c, argv[2], r) < 0 ||
	    (argc == 4 && parse_actions(c, argv[3], &r->actions, &r->nactions) < 0)) {
		rule_free(r);
		return -1;
	}
	if (rule_add(c, r) < 0) {
		rule_free(r);
		return -1;
	}
	return 0;
}

static int do_secaction(struct sl_ctx *c, char **argv, int argc)
{
	if (argc != 2)
		return fail(c, "SecAction takes one argument, \"ACTIONS\"");
	struct sl_rule *r = rule_new(c, SL_ACTION);
	r->op = SL_OP_UNCONDITIONAL_MATCH;
	r->op_arg = strdup("");
	AN(r->op_arg);
	if (parse_actions(c, argv[1], &r->actions, &r->nactions) < 0) {
		rule_free(r);
		return -1;
	}
	if (rule_add(c, r) < 0) {
		rule_free(r);
		return -1;
	}
	return 0;
}

static int do_marker(struct sl_ctx *c, char **argv, int argc)
{
	if (argc != 2)
		return fail(c, "SecMarker takes one argument, its name");
	if (c->sl->chain_tail)
		return fail(c, "the rule before says chain, but this is not a SecRule");
	struct sl_rule *r = rule_new(c, SL_MARKER);
	r->marker = strdup(argv[1]);
	AN(r->marker);
	r->phase = 0;
	rules_push(c->sl, r);
	return 0;
}

static int do_default_action(struct sl_ctx *c, char **argv, int argc)
{
	if (argc != 2)
		return fail(c, "SecDefaultAction takes one argument, \"ACTIONS\"");
	struct sl_defaults d = { 0 };
	if (parse_actions(c, argv[1], &d.actions, &d.nactions) < 0)
		return -1;
	int phase = -1, disruptive = 0, forbidden = 0;
	for (size_t i = 0; i < d.nactions; i++) {
		uint8_t a = d.actions[i].act;
		if (a == SL_ACT_PHASE)
			phase = parse_phase(d.actions[i].value);
		else if (seclang_is_disruptive((enum sl_act)a))
			disruptive = 1;
		else if (a == SL_ACT_ID || a == SL_ACT_CHAIN || a == SL_ACT_SKIP || a == SL_ACT_SKIP_AFTER ||
			 a == SL_ACT_MSG || a == SL_ACT_TAG)
			forbidden = 1;
	}
	if (phase < 0 || !disruptive || forbidden) {
		actions_free(d.actions, d.nactions);
		return fail(c, "SecDefaultAction needs a phase and a disruptive action, and no id, chain, skip, "
			       "skipAfter, msg or tag");
	}
	d.phase = (uint8_t)phase;
	struct seclang *sl = c->sl;
	sl->defaults = realloc(sl->defaults, (sl->ndefaults + 1) * sizeof(*sl->defaults));
	AN(sl->defaults);
	sl->defaults[sl->ndefaults] = d;
	sl->default_idx[phase] = (int)sl->ndefaults++;
	return 0;
}

/* "N" or "N-M" */
static int parse_id_range(const char *s, uint32_t *lo, uint32_t *hi)
{
	const char *dash = strchr(s, '-');
	char tmp[24];
	if (!dash)
		return parse_uint(s, UINT32_MAX, lo) < 0 ? -1 : (*hi = *lo, 0);
	size_t n = (size_t)(dash - s);
	if (n == 0 || n >= sizeof(tmp))
		return -1;
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	if (parse_uint(tmp, UINT32_MAX, lo) < 0 || parse_uint(dash + 1, UINT32_MAX, hi) < 0 || *hi < *lo)
		return -1;
	return 0;
}

/* Rules selected by id ranges (words of ARGV), a tag regex or a msg regex. */
enum sel_by { BY_ID, BY_TAG, BY_MSG };

struct rule_sel {
	enum sel_by by;
	pcre2_code *re;
	pcre2_match_data *md;
	uint32_t lo[64], hi[64];
	int nranges;
};

static int sel_init(struct sl_ctx *c, struct rule_sel *s, enum sel_by by, char **words, int nwords)
{
	memset(s, 0, sizeof(*s));
	s->by = by;
	if (by == BY_ID) {
		for (int i = 0; i < nwords; i++) {
			/* a quoted argument may hold several: "1 2 3-9" */
			const char *p = words[i];
			int bad = 0;
			char *w;
			while ((w = next_word(&p, &bad)) != NULL) {
				if (s->nranges == 64) {
					free(w);
					return fail(c, "more than 64 ids or ranges in one directive");
				}
				int ok = parse_id_range(w, &s->lo[s->nranges], &s->hi[s->nranges]) == 0;
				if (!ok) {
					fail(c, "\"%s\" is not a rule id or a range of ids (N-M)", w);
					free(w);
					return -1;
				}
				free(w);
				s->nranges++;
			}
		}
		return s->nranges ? 0 : fail(c, "no rule id given");
	}
	int errcode;
	PCRE2_SIZE off;
	s->re = pcre2_compile((PCRE2_SPTR)words[0], PCRE2_ZERO_TERMINATED, 0, &errcode, &off, NULL);
	if (!s->re) {
		char msg[120];
		pcre2_get_error_message(errcode, (PCRE2_UCHAR *)msg, sizeof(msg));
		return fail(c, "bad regular expression \"%s\" at offset %zu: %s", words[0], (size_t)off, msg);
	}
	s->md = pcre2_match_data_create_from_pattern(s->re, NULL);
	AN(s->md);
	return 0;
}

static void sel_free(struct rule_sel *s)
{
	pcre2_match_data_free(s->md);
	pcre2_code_free(s->re);
}

static int re_search(const struct rule_sel *s, const char *v)
{
	return pcre2_match(s->re, (PCRE2_SPTR)v, strlen(v), 0, 0, s->md, NULL) >= 0;
}

static int sel_match(const struct rule_sel *s, const struct sl_rule *r)
{
	if (r->kind == SL_MARKER)
		return 0;
	if (s->by == BY_ID) {
		for (int i = 0; i < s->nranges; i++)
			if (r->id >= s->lo[i] && r->id <= s->hi[i])
				return 1;
		return 0;
	}
	for (size_t i = 0; i < r->nactions; i++) {
		const struct sl_action *a = &r->actions[i];
		if (a->act == (s->by == BY_TAG ? SL_ACT_TAG : SL_ACT_MSG) && re_search(s, a->value))
			return 1;
	}
	return 0;
}

static int do_remove(struct sl_ctx *c, enum sel_by by, char **argv, int argc)
{
	if (argc < 2 || (by != BY_ID && argc != 2))
		return fail(c, "%s takes %s", argv[0], by == BY_ID ? "rule ids or ranges (N-M)" : "one regular expression");
	struct rule_sel s;
	if (sel_init(c, &s, by, argv + 1, argc - 1) < 0) {
		sel_free(&s);
		return -1;
	}
	unsigned hits = 0;
	for (size_t i = 0; i < c->sl->nrules; i++)
		if (sel_match(&s, c->sl->rules[i])) {
			c->sl->rules[i]->removed = 1;
			hits++;
		}
	sel_free(&s);
	if (hits == 0)
		warn(c, "%s %s removes no rule loaded before it", argv[0], argv[1]);
	return 0;
}

static int same_target(const struct sl_target *a, const struct sl_target *b)
{
	return a->var == b->var && a->exclude == b->exclude && a->count == b->count && a->sel_kind == b->sel_kind &&
	       (a->sel == NULL ? b->sel == NULL : b->sel != NULL && strcmp(a->sel, b->sel) == 0);
}

static int do_update_target(struct sl_ctx *c, enum sel_by by, char **argv, int argc)
{
	if (argc != 3 && argc != 4)
		return fail(c, "%s takes %s, the variables to add, and optionally the one they replace", argv[0],
			    by == BY_ID ? "a rule id (or N-M)" : "a regular expression");
	struct rule_sel s;
	struct sl_target *add = NULL, *rep = NULL;
	size_t nadd = 0, nrep = 0;
	int rc = -1;
	if (sel_init(c, &s, by, argv + 1, 1) < 0 || parse_targets(c, argv[2], &add, &nadd) < 0 ||
	    (argc == 4 && parse_targets(c, argv[3], &rep, &nrep) < 0))
		goto out;
	if (argc == 4 && (nrep != 1 || nadd != 1)) {
		fail(c, "%s: one variable replaces one variable", argv[0]);
		goto out;
	}
	unsigned hits = 0;
	for (size_t i = 0; i < c->sl->nrules; i++) {
		struct sl_rule *r = c->sl->rules[i];
		if (r->kind != SL_RULE || !sel_match(&s, r))
			continue;
		hits++;
		if (argc == 4) {
			size_t k = 0;
			while (k < r->ntargets && !same_target(&r->targets[k], &rep[0]))
				k++;
			if (k == r->ntargets) {
				fail(c, "%s: rule %u has no variable %s to replace", argv[0], r->id, argv[3]);
				goto out;
			}
			free(r->targets[k].sel);
			r->targets[k] = add[0];
			r->targets[k].sel = add[0].sel ? strdup(add[0].sel) : NULL;
			continue;
		}
		r->targets = realloc(r->targets, (r->ntargets + nadd) * sizeof(*r->targets));
		AN(r->targets);
		for (size_t k = 0; k < nadd; k++) {
			r->targets[r->ntargets] = add[k];
			r->targets[r->ntargets++].sel = add[k].sel ? strdup(add[k].sel) : NULL;
		}
	}
	if (hits == 0)
		warn(c, "%s %s updates no rule loaded before it", argv[0], argv[1]);
	rc = 0;
out:
	sel_free(&s);
	targets_free(add, nadd);
	targets_free(rep, nrep);
	return rc;
}

static int do_update_action(struct sl_ctx *c, char **argv, int argc)
{
	if (argc != 3)
		return fail(c, "SecRuleUpdateActionById takes a rule id and \"ACTIONS\"");
	uint32_t id;
	if (parse_uint(argv[1], UINT32_MAX, &id) < 0 || id == 0)
		return fail(c, "\"%s\" is not a rule id", argv[1]);
	struct sl_action *a;
	size_t n;
	if (parse_actions(c, argv[2], &a, &n) < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (a[i].act == SL_ACT_ID || a[i].act == SL_ACT_PHASE || a[i].act == SL_ACT_CHAIN) {
			fail(c, "SecRuleUpdateActionById cannot change %s", seclang_act_name(a[i].act));
			actions_free(a, n);
			return -1;
		}
	struct sl_rule *r = (struct sl_rule *)find_id(c->sl, id);
	if (!r) {
		warn(c, "SecRuleUpdateActionById %u: no rule with that id was loaded before it", id);
		actions_free(a, n);
		return 0;
	}
	r->actions = realloc(r->actions, (r->nactions + n) * sizeof(*r->actions));
	AN(r->actions);
	for (size_t i = 0; i < n; i++) {
		a[i].updated = 1;
		r->actions[r->nactions++] = a[i];
	}
	free(a);
	return 0;
}

static int load_file(struct seclang *sl, const char *path, struct sl_ctx *from);

static int do_include(struct sl_ctx *c, char **argv, int argc, int optional)
{
	if (argc != 2)
		return fail(c, "%s takes one path (wildcards allowed)", argv[0]);
	if (!c->sl->allow_include)
		return fail(c, "%s is not allowed here", argv[0]);
	char pattern[PATH_MAX];
	const char *slash = strrchr(c->file, '/');
	int n;
	if (argv[1][0] == '/' || !slash)
		n = snprintf(pattern, sizeof(pattern), "%s", argv[1]);
	else
		n = snprintf(pattern, sizeof(pattern), "%.*s/%s", (int)(slash - c->file), c->file, argv[1]);
	if (n < 0 || (size_t)n >= sizeof(pattern))
		return fail(c, "%s: path too long", argv[0]);
	glob_t g;
	int gr = glob(pattern, 0, NULL, &g);
	if (gr == GLOB_NOMATCH) {
		globfree(&g);
		return optional ? 0 : fail(c, "Include %s: no such file", pattern);
	}
	if (gr != 0) {
		globfree(&g);
		return fail(c, "Include %s: cannot read it", pattern);
	}
	int rc = 0;
	for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
		rc = load_file(c->sl, g.gl_pathv[i], c);
	globfree(&g);
	return rc;
}

static int do_setting(struct sl_ctx *c, const char *name, char **argv, int argc)
{
	if (argc < 2)
		return fail(c, "%s needs a value", argv[0]);
	size_t len = 0;
	for (int i = 1; i < argc; i++)
		len += strlen(argv[i]) + 1;
	char *v = malloc(len), *d = v;
	AN(v);
	for (int i = 1; i < argc; i++) {
		size_t k = strlen(argv[i]);
		memcpy(d, argv[i], k);
		d += k;
		*d++ = i + 1 < argc ? ' ' : '\0';
	}
	struct seclang *sl = c->sl;
	sl->settings = realloc(sl->settings, (sl->nsettings + 1) * sizeof(*sl->settings));
	AN(sl->settings);
	sl->settings[sl->nsettings++] = (struct sl_setting){ .name = strdup(name), .value = v, .file = c->file,
							      .line = c->line };
	AN(sl->settings[sl->nsettings - 1].name);
	return 0;
}

static int directive(struct sl_ctx *c, char **argv, int argc)
{
	const char *d = argv[0];
	if (c->sl->chain_tail && strcasecmp(d, "SecRule") != 0)
		return fail(c, "the rule before says chain, but %s is not a SecRule", d);
	if (strcasecmp(d, "SecRule") == 0)
		return do_secrule(c, argv, argc);
	if (strcasecmp(d, "SecAction") == 0)
		return do_secaction(c, argv, argc);
	if (strcasecmp(d, "SecMarker") == 0)
		return do_marker(c, argv, argc);
	if (strcasecmp(d, "SecDefaultAction") == 0)
		return do_default_action(c, argv, argc);
	if (strcasecmp(d, "SecRuleRemoveById") == 0)
		return do_remove(c, BY_ID, argv, argc);
	if (strcasecmp(d, "SecRuleRemoveByTag") == 0)
		return do_remove(c, BY_TAG, argv, argc);
	if (strcasecmp(d, "SecRuleRemoveByMsg") == 0)
		return do_remove(c, BY_MSG, argv, argc);
	if (strcasecmp(d, "SecRuleUpdateTargetById") == 0)
		return do_update_target(c, BY_ID, argv, argc);
	if (strcasecmp(d, "SecRuleUpdateTargetByTag") == 0)
		return do_update_target(c, BY_TAG, argv, argc);
	if (strcasecmp(d, "SecRuleUpdateTargetByMsg") == 0)
		return do_update_target(c, BY_MSG, argv, argc);
	if (strcasecmp(d, "SecRuleUpdateActionById") == 0)
		return do_update_action(c, argv, argc);
	if (strcasecmp(d, "Include") == 0)
		return do_include(c, argv, argc, 0);
	if (strcasecmp(d, "IncludeOptional") == 0)
		return do_include(c, argv, argc, 1);
	for (size_t i = 0; i < sizeof(setting_directives) / sizeof(setting_directives[0]); i++)
		if (strcasecmp(d, setting_directives[i]) == 0)
			return do_setting(c, setting_directives[i], argv, argc);
	return fail(c, "unknown directive %s", d);
}

/* One logical line: its words, then the directive. */
static int logical_line(struct sl_ctx *c, const char *line)
{
	char *argv[8];
	int argc = 0, bad = 0, rc;
	const char *p = line;
	char *w;
	while ((w = next_word(&p, &bad)) != NULL) {
		if (argc == 8) {
			free(w);
			rc = fail(c, "too many arguments for %s", argv[0]);
			goto out;
		}
		argv[argc++] = w;
	}
	if (bad)
		rc = fail(c, "a quoted argument has no closing quote");
	else
		rc = argc ? directive(c, argv, argc) : 0;
out:
	for (int i = 0; i < argc; i++)
		free(argv[i]);
	return rc;
}

/* Apache's lines: trailing whitespace is dropped, a line that then ends in
 * a backslash continues on the next (the backslash goes, the next line's
 * leading whitespace stays), and a logical line whose first non-blank
 * character is # is a comment. */
static int parse_text(struct sl_ctx *c, const char *text, size_t len)
{
	char *logical = NULL;
	size_t llen = 0, lcap = 0;
	int lineno = 0, first = 0, rc = 0;
	const char *p = text, *end = text + len;
	while (p < end && rc == 0) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *e = nl ? nl : end;
		lineno++;
		if (llen == 0)
			first = lineno;
		const char *t = e;
		while (t > p && isspace((unsigned char)t[-1]))
			t--;
		int cont = t > p && t[-1] == '\\';
		if (cont)
			t--;
		size_t need = llen + (size_t)(t - p) + 1;
		if (need > lcap) {
			lcap = need * 2;
			logical = realloc(logical, lcap);
			AN(logical);
		}
		memcpy(logical + llen, p, (size_t)(t - p));
		llen += (size_t)(t - p);
		logical[llen] = '\0';
		p = nl ? nl + 1 : end;
		if (cont && p < end)
			continue;
		if (memchr(logical, '\0', llen)) {
			c->line = first;
			rc = fail(c, "a NUL byte in the line");
			break;
		}
		const char *s = logical;
		while (*s && isspace((unsigned char)*s))
			s++;
		c->line = first;
		if (*s && *s != '#')
			rc = logical_line(c, s);
		llen = 0;
	}
	free(logical);
	return rc;
}

static const char *file_name(struct seclang *sl, const char *name)
{
	sl->files = realloc(sl->files, (sl->nfiles + 1) * sizeof(*sl->files));
	AN(sl->files);
	sl->files[sl->nfiles] = strdup(name);
	AN(sl->files[sl->nfiles]);
	return sl->files[sl->nfiles++];
}

static int load_file(struct seclang *sl, const char *path, struct sl_ctx *from)
{
	struct sl_ctx c = { .sl = sl, .file = from ? from->file : path, .line = from ? from->line : 0 };
	if (sl->include_depth >= SL_INCLUDE_DEPTH)
		return fail(&c, "Include %s: more than %d levels deep (an include loop?)", path, SL_INCLUDE_DEPTH);
	FILE *f = fopen(path, "rb");
	if (!f)
		return fail(&c, "cannot open %s: %s", path, strerror(errno));
	char *text = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len == cap) {
			cap = cap ? cap * 2 : 65536;
			text = realloc(text, cap);
			AN(text);
		}
		size_t n = fread(text + len, 1, cap - len, f);
		len += n;
		if (n == 0 || len > SL_FILE_MAX)
			break;
	}
	int err = ferror(f);
	fclose(f);
	if (err || len > SL_FILE_MAX) {
		free(text);
		return fail(&c, "cannot read %s: %s", path, err ? "read error" : "larger than 16 MiB");
	}
	c.file = file_name(sl, path);
	c.line = 0;
	sl->include_depth++;
	int rc = parse_text(&c, text, len);
	sl->include_depth--;
	free(text);
	return rc;
}

void seclang_init(struct seclang *sl)
{
	memset(sl, 0, sizeof(*sl));
	for (int i = 0; i < 6; i++)
		sl->default_idx[i] = -1;
	sl->allow_include = 1;
}

int seclang_load_file(struct seclang *sl, const char *path)
{
	sl->allow_include = 1;
	return load_file(sl, path, NULL);
}

int seclang_load_buffer(struct seclang *sl, const char *name, const char *text, size_t len, int allow_include)
{
	struct sl_ctx c = { .sl = sl, .file = file_name(sl, name), .line = 0 };
	sl->allow_include = allow_include;
	return parse_text(&c, text, len);
}

int seclang_finish(struct seclang *sl)
{
	if (sl->chain_tail) {
		struct sl_ctx c = { .sl = sl, .file = sl->chain_tail->file, .line = sl->chain_tail->line };
		return fail(&c, "this rule says chain, but no rule follows it");
	}
	return 0;
}

void seclang_free(struct seclang *sl)
{
	for (size_t i = 0; i < sl->nrules; i++)
		rule_free(sl->rules[i]);
	free(sl->rules);
	for (size_t i = 0; i < sl->ndefaults; i++)
		actions_free(sl->defaults[i].actions, sl->defaults[i].nactions);
	free(sl->defaults);
	for (size_t i = 0; i < sl->nsettings; i++) {
		free(sl->settings[i].name);
		free(sl->settings[i].value);
	}
	free(sl->settings);
	for (size_t i = 0; i < sl->nfiles; i++)
		free(sl->files[i]);
	free(sl->files);
	memset(sl, 0, sizeof(*sl));
}
