/* A SecLang ruleset compiled for running (crsprog.h says what and why). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <hs/hs.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "buf.h"
#include "crsprog.h"
#include "netaddr.h"
#include "rxlit.h"
#include "sectfn.h"
#include "util.h"

static int fail(struct crs_program *p, const struct sl_rule *r, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int fail(struct crs_program *p, const struct sl_rule *r, const char *fmt, ...)
{
	int n = snprintf(p->error, sizeof(p->error), "%s:%d: ", r->file, r->line);
	if (n < 0 || (size_t)n >= sizeof(p->error))
		return -1;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->error + n, sizeof(p->error) - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Why sluice does not run an operator (NULL: it does). */
static const char *op_unsupported(enum sl_op op)
{
	switch (op) {
	case SL_OP_RBL:
	case SL_OP_GEO_LOOKUP:
	case SL_OP_GSB_LOOKUP:
		return "sluice makes no lookups in external databases per request";
	case SL_OP_INSPECT_FILE:
		return "sluice runs no external programs";
	case SL_OP_FUZZY_HASH:
	case SL_OP_VERIFY_CC:
	case SL_OP_VERIFY_CPF:
	case SL_OP_VERIFY_SSN:
	case SL_OP_VALIDATE_DTD:
	case SL_OP_VALIDATE_SCHEMA:
	case SL_OP_VALIDATE_HASH:
	case SL_OP_RSUB:
	case SL_OP_IP_MATCH_F:
	case SL_OP_IP_MATCH_FROM_FILE:
		return "not implemented";
	default:
		return NULL;
	}
}

/* Why the evaluator cannot read a variable in the request phases (NULL:
 * it can). Response variables are refused too: sluice runs phases 1-2. */
static const char *var_unsupported(enum sl_var v)
{
	switch (v) {
	case SL_VAR_ARGS: case SL_VAR_ARGS_NAMES: case SL_VAR_ARGS_GET: case SL_VAR_ARGS_GET_NAMES:
	case SL_VAR_ARGS_POST: case SL_VAR_ARGS_POST_NAMES: case SL_VAR_ARGS_COMBINED_SIZE:
	case SL_VAR_REQUEST_COOKIES: case SL_VAR_REQUEST_COOKIES_NAMES: case SL_VAR_REQUEST_HEADERS:
	case SL_VAR_REQUEST_HEADERS_NAMES: case SL_VAR_FILES: case SL_VAR_FILES_NAMES: case SL_VAR_FILES_SIZES:
	case SL_VAR_FILES_COMBINED_SIZE: case SL_VAR_MULTIPART_PART_HEADERS: case SL_VAR_TX: case SL_VAR_IP:
	case SL_VAR_GLOBAL: case SL_VAR_SESSION: case SL_VAR_USER: case SL_VAR_MATCHED_VAR:
	case SL_VAR_MATCHED_VAR_NAME: case SL_VAR_MATCHED_VARS: case SL_VAR_MATCHED_VARS_NAMES:
	case SL_VAR_REQUEST_URI: case SL_VAR_REQUEST_URI_RAW: case SL_VAR_REQUEST_FILENAME:
	case SL_VAR_REQUEST_BASENAME: case SL_VAR_QUERY_STRING: case SL_VAR_REQUEST_LINE:
	case SL_VAR_REQUEST_METHOD: case SL_VAR_REQUEST_PROTOCOL: case SL_VAR_REMOTE_ADDR: case SL_VAR_REMOTE_PORT:
	case SL_VAR_REQUEST_BODY: case SL_VAR_REQUEST_BODY_LENGTH: case SL_VAR_REQBODY_PROCESSOR:
	case SL_VAR_REQBODY_ERROR: case SL_VAR_REQBODY_PROCESSOR_ERROR: case SL_VAR_REQBODY_ERROR_MSG:
	case SL_VAR_URLENCODED_ERROR: case SL_VAR_MULTIPART_STRICT_ERROR: case SL_VAR_MULTIPART_UNMATCHED_BOUNDARY:
	case SL_VAR_MULTIPART_BOUNDARY_QUOTED: case SL_VAR_MULTIPART_BOUNDARY_WHITESPACE:
	case SL_VAR_MULTIPART_DATA_BEFORE: case SL_VAR_MULTIPART_DATA_AFTER: case SL_VAR_MULTIPART_HEADER_FOLDING:
	case SL_VAR_MULTIPART_LF_LINE: case SL_VAR_MULTIPART_CRLF_LF_LINES: case SL_VAR_MULTIPART_MISSING_SEMICOLON:
	case SL_VAR_MULTIPART_INVALID_QUOTING: case SL_VAR_MULTIPART_INVALID_PART:
	case SL_VAR_MULTIPART_INVALID_HEADER_FOLDING: case SL_VAR_MULTIPART_FILE_LIMIT_EXCEEDED:
	case SL_VAR_UNIQUE_ID: case SL_VAR_DURATION: case SL_VAR_TIME_EPOCH: case SL_VAR_XML:
		return NULL;
	case SL_VAR_GEO:
	case SL_VAR_ENV:
		return NULL;  /* sluice has neither: always empty, as ModSecurity's without lookups */
	default:
		return "sluice does not provide it";
	}
}

static void phrases_free(struct crs_phrases *pm)
{
	for (size_t i = 0; i < pm->n; i++)
		free(pm->v[i]);
	free(pm->v);
	free(pm->len);
	hs_free_database(pm->hs);
	memset(pm, 0, sizeof(*pm));
}

static void phrase_add(struct crs_phrases *pm, const char *s, size_t n)
{
	pm->v = realloc(pm->v, (pm->n + 1) * sizeof(*pm->v));
	pm->len = realloc(pm->len, (pm->n + 1) * sizeof(*pm->len));
	AN(pm->v);
	AN(pm->len);
	char *d = malloc(n + 1);
	AN(d);
	for (size_t i = 0; i < n; i++)
		d[i] = (char)tolower((unsigned char)s[i]);
	d[n] = '\0';
	pm->len[pm->n] = n;
	pm->v[pm->n++] = d;
}

/* One Hyperscan database of every phrase, as literals, ignoring ASCII case
 * as ModSecurity's Aho-Corasick matcher does: one pass per value. */
static int phrases_compile(struct crs_program *p, const struct sl_rule *r, struct crs_phrases *pm)
{
	unsigned *flags = malloc(pm->n * sizeof(*flags)), *ids = malloc(pm->n * sizeof(*ids));
	AN(flags);
	AN(ids);
	for (size_t i = 0; i < pm->n; i++) {
		flags[i] = HS_FLAG_CASELESS | HS_FLAG_SINGLEMATCH;
		ids[i] = (unsigned)i;
	}
	hs_compile_error_t *err = NULL;
	hs_database_t *db = NULL;
	hs_error_t rc = hs_compile_lit_multi((const char *const *)pm->v, flags, ids, pm->len, (unsigned)pm->n, HS_MODE_BLOCK,
					     NULL, &db, &err);
	free(flags);
	free(ids);
	if (rc != HS_SUCCESS) {
		int ret = fail(p, r, "@pm: Hyperscan cannot compile the phrase list: %s", err ? err->message : "?");
		hs_free_compile_error(err);
		return ret;
	}
	pm->hs = db;
	if (hs_alloc_scratch(db, (hs_scratch_t **)&p->hs_scratch) != HS_SUCCESS)
		return fail(p, r, "@pm: Hyperscan scratch: out of memory");
	return 0;
}

/* @pm's argument as ModSecurity reads it: an optional pair of double
 * quotes around it, |hex bytes| between pipes, \: \; \\ \" escapes; then
 * phrases separated by spaces. */
static int pm_phrases(struct crs_program *p, const struct sl_rule *r, const char *arg, struct crs_phrases *pm)
{
	while (isspace((unsigned char)*arg))
		arg++;
	size_t len = strlen(arg);
	if (len >= 2 && arg[0] == '"' && arg[len - 1] == '"') {
		arg++;
		len -= 2;
	}
	char *buf = malloc(len + 1);
	AN(buf);
	size_t k = 0;
	int bin = 0, esc = 0, nib = -1;
	for (size_t i = 0; i < len; i++) {
		char c = arg[i];
		if (c == '|' && !esc) {
			bin = !bin;
			nib = -1;
		} else if (bin) {
			if (hex_value((unsigned char)c) >= 0) {
				if (nib < 0) {
					nib = hex_value((unsigned char)c);
				} else {
					buf[k++] = (char)(nib << 4 | hex_value((unsigned char)c));
					nib = -1;
				}
			}
		} else if (!esc && c == '\\') {
			esc = 1;
		} else if (esc) {
			if (c != ':' && c != ';' && c != '\\' && c != '"') {
				free(buf);
				return fail(p, r, "@pm: unsupported escape \\%c", c);
			}
			buf[k++] = c;
			esc = 0;
		} else {
			buf[k++] = c;
		}
	}
	size_t i = 0;
	while (i < k) {
		while (i < k && buf[i] == ' ')
			i++;
		size_t s = i;
		while (i < k && buf[i] != ' ')
			i++;
		if (i > s)
			phrase_add(pm, buf + s, i - s);
	}
	free(buf);
	return pm->n ? 0 : fail(p, r, "@pm: no phrase");
}

/* @pmFromFile: one phrase per line of each named file (relative names from
 * the rule file's directory); empty lines and lines starting with # skipped. */
static int pm_files(struct crs_program *p, const struct sl_rule *r, const char *arg, struct crs_phrases *pm)
{
	const char *s = arg;
	while (*s) {
		while (*s == ' ')
			s++;
		const char *e = s;
		while (*e && *e != ' ')
			e++;
		if (e == s)
			break;
		char path[PATH_MAX];
		const char *slash = strrchr(r->file, '/');
		int n = *s == '/' || !slash ? snprintf(path, sizeof(path), "%.*s", (int)(e - s), s)
					    : snprintf(path, sizeof(path), "%.*s/%.*s", (int)(slash - r->file), r->file,
						       (int)(e - s), s);
		if (n < 0 || (size_t)n >= sizeof(path))
			return fail(p, r, "@pmFromFile: path too long");
		FILE *f = fopen(path, "r");
		if (!f)
			return fail(p, r, "@pmFromFile: cannot open %s: %s", path, strerror(errno));
		char line[8192];
		while (fgets(line, sizeof(line), f)) {
			size_t l = strlen(line);
			while (l > 0 && (line[l - 1] == '\n' || line[l - 1] == '\r'))
				l--;
			if (l == 0 || line[0] == '#')
				continue;
			phrase_add(pm, line, l);
		}
		fclose(f);
		s = e;
	}
	return pm->n ? 0 : fail(p, r, "@pmFromFile: no phrase in \"%s\"", arg);
}

/* "9,10,13,32-126" */
static int byte_ranges(struct crs_program *p, const struct sl_rule *r, const char *arg, uint8_t bits[32])
{
	const char *s = arg;
	memset(bits, 0, 32);
	for (;;) {
		while (*s == ' ')
			s++;
		char *end;
		errno = 0;
		long a = strtol(s, &end, 10), b;
		if (end == s || errno || a < 0 || a > 255)
			return fail(p, r, "@validateByteRange: bad range list \"%s\"", arg);
		s = end;
		b = a;
		if (*s == '-') {
			s++;
			b = strtol(s, &end, 10);
			if (end == s || b < a || b > 255)
				return fail(p, r, "@validateByteRange: bad range list \"%s\"", arg);
			s = end;
		}
		for (long x = a; x <= b; x++)
			bits[x >> 3] |= (uint8_t)(1u << (x & 7));
		while (*s == ' ')
			s++;
		if (*s == '\0')
			return 0;
		if (*s++ != ',')
			return fail(p, r, "@validateByteRange: bad range list \"%s\"", arg);
	}
}

static int ip_list(struct crs_program *p, const struct sl_rule *r, const char *arg, struct cidrset *set)
{
	struct cidr nets[64];
	unsigned n = 0;
	const char *s = arg;
	while (*s) {
		while (*s == ' ' || *s == ',')
			s++;
		const char *e = s;
		while (*e && *e != ',' && *e != ' ')
			e++;
		if (e == s)
			break;
		char tmp[64];
		const char *why = "";
		if ((size_t)(e - s) >= sizeof(tmp) || n == 64)
			return fail(p, r, "@ipMatch: \"%s\": too long a list or address", arg);
		memcpy(tmp, s, (size_t)(e - s));
		tmp[e - s] = '\0';
		if (cidr_parse(tmp, &nets[n], &why) < 0)
			return fail(p, r, "@ipMatch: \"%s\": %s", tmp, why);
		n++;
		s = e;
	}
	if (n == 0)
		return fail(p, r, "@ipMatch: no address");
	if (cidrset_build(set, nets, n) < 0)
		return fail(p, r, "@ipMatch: out of memory");
	return 0;
}

static int op_prepare(struct crs_program *p, const struct sl_rule *r, uint32_t id, struct crs_op *op)
{
	op->kind = r->op;
	op->negated = r->op_negated;
	op->arg = r->op_arg;
	op->has_macro = strstr(r->op_arg, "%{") != NULL;
	const char *why = op_unsupported((enum sl_op)r->op);
	if (why)
		return fail(p, r, "rule %u: @%s is not supported: %s (list the rule's id under skip to load the rest)",
			    id, seclang_op_name((enum sl_op)r->op), why);
	switch (r->op) {
	case SL_OP_RX: {
		if (op->has_macro)
			return 0;
		int code;
		PCRE2_SIZE off;
		/* ModSecurity's flags: '.' matches newlines, '$' only at the very end */
		pcre2_code *re = pcre2_compile((PCRE2_SPTR)r->op_arg, PCRE2_ZERO_TERMINATED, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY,
					       &code, &off, NULL);
		if (!re) {
			char msg[160];
			pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof(msg));
			return fail(p, r, "@rx: PCRE2 cannot compile it at offset %zu: %s", (size_t)off, msg);
		}
		/* the interpreter still works without; pcre2_jit_match skips the
		 * subject's UTF-8 check that a (*UTF) pattern needs from pcre2_match */
		uint32_t opts = 0;
		(void)pcre2_pattern_info(re, PCRE2_INFO_ALLOPTIONS, &opts);
		op->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0 && !(opts & PCRE2_UTF);
		op->re = re;
		return 0;
	}
	case SL_OP_PM:
		if (op->has_macro)
			return fail(p, r, "@pm: macros are not expanded in phrase lists");
		return pm_phrases(p, r, r->op_arg, &op->pm) < 0 ? -1 : phrases_compile(p, r, &op->pm);
	case SL_OP_PMF:
	case SL_OP_PM_FROM_FILE:
		return pm_files(p, r, r->op_arg, &op->pm) < 0 ? -1 : phrases_compile(p, r, &op->pm);
	case SL_OP_IP_MATCH:
		return ip_list(p, r, r->op_arg, &op->ips);
	case SL_OP_VALIDATE_BYTE_RANGE: {
		if (byte_ranges(p, r, r->op_arg, op->bytes) < 0)
			return -1;
		op->lone_forbidden = -1;
		for (int c = 0, n = 0; c < 256; c++)
			if (!(op->bytes[c >> 3] >> (c & 7) & 1))
				op->lone_forbidden = (int16_t)(++n == 1 ? c : -1);
		return 0;
	}
	case SL_OP_EQ:
	case SL_OP_GE:
	case SL_OP_GT:
	case SL_OP_LE:
	case SL_OP_LT:
		if (!op->has_macro)
			op->num = atoll(r->op_arg);  /* ModSecurity's atoi: "abc" is 0 */
		return 0;
	default:
		return 0;
	}
}

static int tfn_add(struct crs_program *p, const struct sl_rule *r, struct crs_rule *cr, const struct sl_action *a)
{
	if (a->tfn == SL_TFN_NONE) {
		cr->ntfn = 0;
		return 0;
	}
	if (!sectfn_supported((enum sl_tfn)a->tfn))
		return fail(p, r, "t:%s is not supported", seclang_tfn_name((enum sl_tfn)a->tfn));
	if (cr->ntfn == CRS_MAX_TFN)
		return fail(p, r, "more than %d transformations", CRS_MAX_TFN);
	cr->tfn[cr->ntfn++] = a->tfn;
	return 0;
}

static void op_free(struct crs_op *op)
{
	pcre2_code_free(op->re);
	if (op->kind == SL_OP_PM || op->kind == SL_OP_PMF || op->kind == SL_OP_PM_FROM_FILE)
		phrases_free(&op->pm);
	else if (op->kind == SL_OP_IP_MATCH)
		cidrset_free(&op->ips);
}

static void rule_release(struct crs_rule *cr)
{
	op_free(&cr->op);
	for (unsigned k = 0; k < cr->nbranch; k++)
		pcre2_code_free(cr->branch[k].re);
	free(cr->branch);
	hs_free_database(cr->lits);
	for (size_t i = 0; cr->sel_re && i < cr->src->ntargets; i++) {
		pcre2_code_free(cr->sel_re[i].re);
		free(cr->sel_re[i].lit);
	}
	free(cr->sel_re);
	free(cr->acts);
	free(cr->tx_name);
}

static void rule_free(struct crs_rule *cr)
{
	while (cr) {
		struct crs_rule *next = cr->chained;
		rule_release(cr);
		free(cr);
		cr = next;
	}
}

/* Number the rule's transformation sequence (a transaction caches a value
 * transformed by a sequence under that number). */
static void chain_number(struct crs_program *p, struct crs_rule *cr)
{
	for (unsigned i = 0; i < p->nchains; i++)
		if (p->chains[i][0] == cr->ntfn && memcmp(p->chains[i] + 1, cr->tfn, cr->ntfn) == 0) {
			cr->chain = (uint16_t)i;
			return;
		}
	p->chains = realloc(p->chains, (p->nchains + 1) * sizeof(*p->chains));
	AN(p->chains && p->nchains < 65535);
	p->chains[p->nchains][0] = cr->ntfn;
	memcpy(p->chains[p->nchains] + 1, cr->tfn, cr->ntfn);
	cr->chain = (uint16_t)p->nchains++;
}

static int selre_literal_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Whether the selector regex RX (caseless, dotall, not end-anchored) is
 * a plain literal: "^abc" a prefix, "abc" anywhere. What may follow the
 * literal at its end (".*", "c*", "c?") matches the empty string, so it
 * does not change which names match and is dropped. */
static void selre_literal(struct crs_selre *s, const char *rx)
{
	int anchored = rx[0] == '^';
	const char *b = rx + anchored;
	size_t n = strlen(b);
	for (;;) {
		if (n >= 2 && b[n - 2] == '.' && b[n - 1] == '*')
			n -= 2;
		else if (n >= 2 && (b[n - 1] == '*' || b[n - 1] == '?') && selre_literal_char(b[n - 2]))
			n -= 2;
		else
			break;
	}
	for (size_t i = 0; i < n; i++)
		if (!selre_literal_char(b[i]))
			return;
	if (n > UINT16_MAX)
		return;
	s->lit = strndup(b, n);
	AN(s->lit);
	s->litlen = (uint16_t)n;
	s->anchored = (uint8_t)anchored;
}

/* ID: the chain starter's (chained rules have none of their own). */
static int rule_compile(struct crs_program *p, const struct sl_rule *r, uint32_t id, struct crs_rule *cr)
{
	cr->src = r;
	cr->id = r->id;
	cr->kind = r->kind;
	cr->targets = r->targets;
	cr->ntargets = (uint32_t)r->ntargets;
	cr->skip_after = -1;
	if (r->kind == SL_MARKER)
		return 0;
	const struct sl_defaults *d = r->defaults >= 0 ? &p->sl.defaults[r->defaults] : NULL;
	uint8_t dflt_disruptive = 0, own_disruptive = 0;
	cr->log = 1;
	for (size_t i = 0; d && i < d->nactions; i++) {
		const struct sl_action *a = &d->actions[i];
		if (a->act == SL_ACT_T && tfn_add(p, r, cr, a) < 0)
			return -1;
		if (seclang_is_disruptive((enum sl_act)a->act))
			dflt_disruptive = a->act;
		if (a->act == SL_ACT_LOG || a->act == SL_ACT_NOLOG)
			cr->log = a->act == SL_ACT_LOG;
		if (a->act == SL_ACT_STATUS)
			cr->status = (uint16_t)atoi(a->value);
	}
	for (size_t i = 0; i < r->nactions; i++) {
		const struct sl_action *a = &r->actions[i];
		if (a->act == SL_ACT_T && tfn_add(p, r, cr, a) < 0)
			return -1;
		if (seclang_is_disruptive((enum sl_act)a->act))
			own_disruptive = a->act;
		if (a->act == SL_ACT_LOG || a->act == SL_ACT_NOLOG)
			cr->log = a->act == SL_ACT_LOG;
		if (a->act == SL_ACT_STATUS)
			cr->status = (uint16_t)atoi(a->value);
		if (a->act == SL_ACT_CAPTURE)
			cr->capture = 1;
		if (a->act == SL_ACT_MULTI_MATCH)
			cr->multi_match = 1;
	}
	for (size_t i = 0; i < r->nactions; i++) {
		const struct sl_action *a = &r->actions[i];
		if (a->act != SL_ACT_SETVAR && a->act != SL_ACT_CTL && a->act != SL_ACT_INITCOL)
			continue;
		if (!cr->acts) {
			cr->acts = calloc(r->nactions, sizeof(*cr->acts));
			AN(cr->acts);
		}
		AN(cr->nacts < UINT16_MAX);
		struct crs_act *ca = &cr->acts[cr->nacts++];
		ca->act = a->act;
		ca->value = a->value;
		if (a->act == SL_ACT_SETVAR)
			sectx_setvar_compile(&ca->setvar, a->value, strlen(a->value));
	}
	/* block: whatever SecDefaultAction says (pass when it says nothing) */
	cr->disruptive = own_disruptive && own_disruptive != SL_ACT_BLOCK ? own_disruptive
		       : dflt_disruptive && dflt_disruptive != SL_ACT_BLOCK ? dflt_disruptive
		       : own_disruptive == SL_ACT_BLOCK ? SL_ACT_PASS : dflt_disruptive;
	if (r->ntargets) {
		cr->sel_re = calloc(r->ntargets, sizeof(*cr->sel_re));
		AN(cr->sel_re);
	}
	for (size_t i = 0; i < r->ntargets; i++) {
		if (r->targets[i].sel_kind != SL_SEL_REGEX)
			continue;
		int code;
		PCRE2_SIZE off;
		/* ModSecurity compiles selector regexes caseless */
		cr->sel_re[i].re = pcre2_compile((PCRE2_SPTR)r->targets[i].sel, PCRE2_ZERO_TERMINATED,
						 PCRE2_DOTALL | PCRE2_CASELESS | PCRE2_DOLLAR_ENDONLY, &code, &off, NULL);
		if (!cr->sel_re[i].re)
			return fail(p, r, "%s:/%s/: PCRE2 cannot compile the selector", seclang_var_name((enum sl_var)r->targets[i].var),
				    r->targets[i].sel);
		selre_literal(&cr->sel_re[i], r->targets[i].sel);
	}
	for (size_t i = 0; r->phase <= 2 && i < r->ntargets; i++) {
		const char *why = var_unsupported((enum sl_var)r->targets[i].var);
		if (why)
			return fail(p, r, "rule %u: variable %s is not supported: %s (list the rule's id under skip to load the rest)", id,
				    seclang_var_name((enum sl_var)r->targets[i].var), why);
	}
	chain_number(p, cr);
	for (size_t i = 0; i < r->ntargets; i++) {
		const struct sl_target *tg = &r->targets[i];
		if (tg->var != SL_VAR_XML || !tg->sel || tg->exclude)
			continue;
		size_t k = 0;
		while (k < p->nxpaths && strcmp(p->xpaths[k], tg->sel) != 0)
			k++;
		if (k == p->nxpaths) {
			p->xpaths = realloc(p->xpaths, (p->nxpaths + 1) * sizeof(*p->xpaths));
			AN(p->xpaths);
			p->xpaths[p->nxpaths++] = tg->sel;
		}
	}
	if (r->kind == SL_RULE && r->ntargets == 1 && r->targets[0].var == SL_VAR_TX &&
	    r->targets[0].sel_kind == SL_SEL_NAME && !r->targets[0].exclude && !cr->ntfn && !cr->multi_match) {
		cr->tx_direct = r->targets[0].count ? TX_DIRECT_COUNT : TX_DIRECT_VALUE;
		cr->tx_name = strndup(r->targets[0].sel, r->targets[0].sel_len);
		AN(cr->tx_name);
		for (char *c = cr->tx_name; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c + ('a' - 'A'));
		cr->tx_hash = sectx_hash(SX_TX, cr->tx_name, r->targets[0].sel_len);
	}
	if (op_prepare(p, r, id, &cr->op) < 0)
		return -1;
	if (r->chained) {
		cr->chained = calloc(1, sizeof(*cr->chained));
		AN(cr->chained);
		return rule_compile(p, r->chained, id, cr->chained);
	}
	return 0;
}

static int skipped(const uint32_t *skip, size_t nskip, uint32_t id)
{
	for (size_t i = 0; i < nskip; i++)
		if (skip[i] == id)
			return 1;
	return 0;
}

/* The settings the evaluator reads; the last of each wins, as in ModSecurity. */
static void read_settings(struct crs_program *p)
{
	p->engine = CRS_ENGINE_ON;
	p->body_access = 0;
	p->body_limit = 131072;
	for (size_t i = 0; i < p->sl.nsettings; i++) {
		const struct sl_setting *st = &p->sl.settings[i];
		if (strcasecmp(st->name, "SecRuleEngine") == 0)
			p->engine = strcasecmp(st->value, "On") == 0		 ? CRS_ENGINE_ON
				  : strcasecmp(st->value, "DetectionOnly") == 0 ? CRS_ENGINE_DETECTION_ONLY
										 : CRS_ENGINE_OFF;
		else if (strcasecmp(st->name, "SecRequestBodyAccess") == 0)
			p->body_access = strcasecmp(st->value, "On") == 0;
		else if (strcasecmp(st->name, "SecRequestBodyNoFilesLimit") == 0)
			p->body_limit = (size_t)strtoull(st->value, NULL, 10);
		else if (strcasecmp(st->name, "SecPcreMatchLimit") == 0)
			p->pcre_match_limit = (uint32_t)strtoul(st->value, NULL, 10);
		else if (strcasecmp(st->name, "SecPcreMatchLimitRecursion") == 0)
			p->pcre_depth_limit = (uint32_t)strtoul(st->value, NULL, 10);
	}
}

/* Variables whose values stay the same through a phase (the request's). */
static int var_fixed_in_phase(enum sl_var v)
{
	switch (v) {
	case SL_VAR_ARGS: case SL_VAR_ARGS_NAMES: case SL_VAR_ARGS_GET: case SL_VAR_ARGS_GET_NAMES:
	case SL_VAR_ARGS_POST: case SL_VAR_ARGS_POST_NAMES: case SL_VAR_REQUEST_COOKIES:
	case SL_VAR_REQUEST_COOKIES_NAMES: case SL_VAR_REQUEST_HEADERS: case SL_VAR_REQUEST_HEADERS_NAMES:
	case SL_VAR_REQUEST_URI: case SL_VAR_REQUEST_URI_RAW: case SL_VAR_REQUEST_FILENAME:
	case SL_VAR_REQUEST_BASENAME: case SL_VAR_QUERY_STRING: case SL_VAR_REQUEST_LINE:
	case SL_VAR_REQUEST_METHOD: case SL_VAR_REQUEST_PROTOCOL: case SL_VAR_FILES: case SL_VAR_FILES_NAMES:
	case SL_VAR_XML:
		return 1;
	default:
		return 0;
	}
}

/* Number each rule's target list when it reads only request data: a
 * transaction builds such a list once per phase and signature. */
static void target_signatures(struct crs_program *p)
{
	char **sigs = NULL;
	uint32_t nsigs = 0;
	struct buf b = { 0 };
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p->nphase[ph]; i++)
			for (struct crs_rule *cr = &p->phase[ph][i]; cr; cr = cr->chained) {
				const struct sl_rule *r = cr->src;
				if (r->kind != SL_RULE || !r->ntargets)
					continue;
				b.len = 0;
				size_t k;
				for (k = 0; k < r->ntargets; k++) {
					const struct sl_target *tg = &r->targets[k];
					if (!var_fixed_in_phase((enum sl_var)tg->var))
						break;
					/* the selector's length first: a quoted one may hold '|' and '/' */
					const char *sel = tg->sel ? tg->sel : "";
					buf_appendf(&b, "%d/%d/%d/%d/%zu:%s|", tg->var, tg->sel_kind, tg->exclude, tg->count,
						    strlen(sel), sel);
				}
				if (k < r->ntargets)
					continue;
				buf_append(&b, "", 1);
				uint32_t n;
				for (n = 0; n < nsigs && strcmp(sigs[n], b.data) != 0; n++)
					;
				if (n == nsigs) {
					sigs = realloc(sigs, (nsigs + 1) * sizeof(*sigs));
					AN(sigs);
					sigs[nsigs++] = strdup(b.data);
					AN(sigs[n]);
				}
				cr->tsig = n + 1;
			}
	for (uint32_t n = 0; n < nsigs; n++)
		free(sigs[n]);
	free(sigs);
	buf_free(&b);
}

struct litlist {
	const char **s;
	size_t *len;
	unsigned *ids, *flags;
	size_t n, cap;
};

/* DISTINCT: each literal gets an id of its own (see lit_compile). */
static void litlist_add(struct litlist *l, char *const *lits, const size_t *lens, size_t n, unsigned id, int distinct)
{
	if (l->n + n > l->cap) {
		l->cap = (l->n + n) * 2;
		l->s = realloc(l->s, l->cap * sizeof(*l->s));
		l->len = realloc(l->len, l->cap * sizeof(*l->len));
		l->ids = realloc(l->ids, l->cap * sizeof(*l->ids));
		l->flags = realloc(l->flags, l->cap * sizeof(*l->flags));
		AN(l->s && l->len && l->ids && l->flags);
	}
	for (size_t i = 0; i < n; i++, l->n++) {
		l->s[l->n] = lits[i];
		l->len[l->n] = lens[i];
		l->ids[l->n] = id;
		l->flags[l->n] = HS_FLAG_CASELESS | (distinct ? 0 : HS_FLAG_SINGLEMATCH);  /* lit_compile reads and sets it */
	}
}

struct byte_bit {
	uint8_t byte;
	uint16_t bit;
};

static int byte_bit_cmp(const void *a, const void *b)
{
	const struct byte_bit *x = a, *y = b;
	return x->byte != y->byte ? (int)x->byte - (int)y->byte : (int)x->bit - (int)y->bit;
}

/* L's one-byte literals out of it, into PF's byte table (crs_onebyte). */
static void onebyte_split(struct litlist *l, struct crs_prefilter *pf)
{
	struct byte_bit *bb = malloc(2 * l->n * sizeof(*bb));
	AN(bb);
	size_t j = 0, n = 0, m = 0;
	for (size_t i = 0; i < l->n; i++) {
		if (l->len[i] != 1) {
			l->s[j] = l->s[i];
			l->len[j] = l->len[i];
			l->ids[j] = l->ids[i];
			l->flags[j] = l->flags[i];
			j++;
			continue;
		}
		unsigned char c = (unsigned char)l->s[i][0];
		bb[n++] = (struct byte_bit){ c, (uint16_t)l->ids[i] };
		if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
			bb[n++] = (struct byte_bit){ (uint8_t)(c ^ 0x20), (uint16_t)l->ids[i] };
	}
	l->n = j;
	qsort(bb, n, sizeof(*bb), byte_bit_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i && bb[i].byte == bb[i - 1].byte && bb[i].bit == bb[i - 1].bit)
			continue;  /* a rule with the byte twice */
		if (!pf->none || pf->one[pf->none - 1].byte != bb[i].byte) {
			pf->one = realloc(pf->one, (pf->none + 1) * sizeof(*pf->one));
			AN(pf->one);
			pf->one_mask[bb[i].byte >> 6] |= 1ull << (bb[i].byte & 63);
			pf->one_at[bb[i].byte] = (uint8_t)pf->none;  /* at most 256 distinct bytes */
			pf->one[pf->none++] = (struct crs_onebyte){ .byte = bb[i].byte, .first = (uint32_t)m };
		}
		pf->one_bits = realloc(pf->one_bits, (m + 1) * sizeof(*pf->one_bits));
		AN(pf->one_bits);
		pf->one_bits[m++] = bb[i].bit;
		pf->one[pf->none - 1].n++;
	}
	free(bb);
}

/* A literal database (Hyperscan's literal API) into *DB, the shared
 * scratch grown to fit it. -1 and p->error on failure. */
static int lits_compile(struct crs_program *p, const char *const *lits, const unsigned *flags, const unsigned *ids,
			const size_t *lens, unsigned n, void **db)
{
	hs_compile_error_t *err = NULL;
	if (hs_compile_lit_multi(lits, flags, ids, lens, n, HS_MODE_BLOCK, NULL, (hs_database_t **)db, &err) !=
	    HS_SUCCESS) {
		snprintf(p->error, sizeof(p->error), "@rx prefilter: Hyperscan cannot compile the literals: %s",
			 err ? err->message : "?");
		hs_free_compile_error(err);
		return -1;
	}
	if (hs_alloc_scratch(*db, (hs_scratch_t **)&p->hs_scratch) != HS_SUCCESS) {
		snprintf(p->error, sizeof(p->error), "@rx prefilter: Hyperscan scratch: out of memory");
		return -1;
	}
	return 0;
}

/* L's literals as PF's database: each its own id, mapped to its rule's bit. */
static int lit_compile(struct crs_program *p, struct litlist *l, struct crs_prefilter *pf)
{
	onebyte_split(l, pf);
	if (!l->n)
		return 0;
	unsigned *ids = malloc(l->n * sizeof(*ids));
	pf->bit = malloc((pf->nbits + l->n) * sizeof(*pf->bit));
	AN(ids && pf->bit);
	for (unsigned b = 0; b < pf->nbits; b++)
		pf->bit[b] = (uint16_t)b;
	for (size_t i = 0; i < l->n; i++) {
		/* a regex's few literals share its bit as id (one report per scan);
		 * a phrase list's many each get one of their own */
		ids[i] = l->flags[i] & HS_FLAG_SINGLEMATCH ? l->ids[i] : pf->nbits + (unsigned)i;
		pf->bit[pf->nbits + i] = (uint16_t)l->ids[i];
		l->flags[i] |= HS_FLAG_SINGLEMATCH;
	}
	int rc = lits_compile(p, l->s, l->flags, ids, l->len, (unsigned)l->n, &pf->hs);
	free(ids);
	return rc;
}

static int pm_prefilterable(const struct crs_rule *cr)
{
	if ((cr->op.kind != SL_OP_PM && cr->op.kind != SL_OP_PMF && cr->op.kind != SL_OP_PM_FROM_FILE) || !cr->op.pm.hs ||
	    !cr->op.pm.n)
		return 0;
	for (size_t i = 0; i < cr->op.pm.n; i++)
		if (!cr->op.pm.len[i])
			return 0;
	return 1;
}

/* A literal database of CR's own (crs_rule.lits) when its regex has a
 * literal set and PCRE2 finds no first or last code unit to search for:
 * without one, PCRE2 tries the regex at every position of every value. */
static int rule_lits(struct crs_program *p, struct crs_rule *cr)
{
	uint32_t first = 0, last = 0;
	(void)pcre2_pattern_info(cr->op.re, PCRE2_INFO_FIRSTCODETYPE, &first);
	(void)pcre2_pattern_info(cr->op.re, PCRE2_INFO_LASTCODETYPE, &last);
	struct rxlit x;
	if (first == 1 || last || !rxlit_required(cr->op.arg, strlen(cr->op.arg), &x))
		return 0;
	unsigned *flags = malloc(x.n * sizeof(*flags)), *ids = calloc(x.n, sizeof(*ids));
	AN(flags && ids);
	for (size_t i = 0; i < x.n; i++)
		flags[i] = HS_FLAG_CASELESS | HS_FLAG_SINGLEMATCH;
	int rc = lits_compile(p, (const char *const *)x.s, flags, ids, x.len, (unsigned)x.n, &cr->lits);
	free(flags);
	free(ids);
	rxlit_free(&x);
	return rc;
}

/* CR's regex as the branches of its outermost alternation, when each has
 * literals of its own (kept in KEEP) and compiles: their bits follow in
 * PF, their literals go to L. Not when SecPcreMatchLimit(Recursion) is
 * set: an operator who sets a limit means it for the regex the rule
 * names; under PCRE2's default (10,000,000 steps) a branch not tried, like
 * a value the prefilter skips, is a regex that cannot match there. */
static void branches_build(struct crs_program *p, struct crs_rule *cr, struct crs_prefilter *pf, struct litlist *l,
			   struct rxlit **keep, size_t *nkeep)
{
	struct rxlit b;
	if (p->pcre_match_limit || p->pcre_depth_limit || !rxlit_branches(cr->op.arg, strlen(cr->op.arg), &b))
		return;
	struct rxlit *lits = calloc(b.n, sizeof(*lits));
	struct crs_branch *br = calloc(b.n, sizeof(*br));
	AN(lits && br);
	int ok = pf->nbits + b.n < UINT16_MAX - 1;
	for (size_t k = 0; ok && k < b.n; k++) {
		int code;
		PCRE2_SIZE off;
		ok = rxlit_required(b.s[k], b.len[k], &lits[k]);
		pcre2_code *re = ok ? pcre2_compile((PCRE2_SPTR)b.s[k], b.len[k], PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &code,
						    &off, NULL)
				    : NULL;
		if (!re) {
			ok = 0;
			break;
		}
		uint32_t opts = 0;
		(void)pcre2_pattern_info(re, PCRE2_INFO_ALLOPTIONS, &opts);
		br[k] = (struct crs_branch){ .re = re, .jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0 && !(opts & PCRE2_UTF) };
	}
	if (ok) {
		cr->branch = br;
		cr->nbranch = (uint16_t)b.n;
		cr->branch_bit = (uint16_t)pf->nbits;
		pf->nbits += (unsigned)b.n;
		*keep = realloc(*keep, (*nkeep + b.n) * sizeof(**keep));
		AN(*keep);
		for (size_t k = 0; k < b.n; k++) {
			litlist_add(l, lits[k].s, lits[k].len, lits[k].n, cr->branch_bit + (unsigned)k, 0);
			(*keep)[(*nkeep)++] = lits[k];
		}
	} else {
		for (size_t k = 0; k < b.n; k++) {
			pcre2_code_free(br[k].re);
			rxlit_free(&lits[k]);
		}
		free(br);
	}
	free(lits);
	rxlit_free(&b);
}

/* One literal database per transformation chain over the required
 * literals of its @rx rules and the phrases of its @pm rules (those a
 * transaction caches: not multiMatch). For @pm the bit is the answer. */
static int prefilter_build(struct crs_program *p)
{
	p->pf = calloc(p->nchains ? p->nchains : 1, sizeof(*p->pf));
	struct litlist *ll = calloc(p->nchains ? p->nchains : 1, sizeof(*ll));
	struct rxlit *keep = NULL;
	size_t nkeep = 0;
	AN(p->pf && ll);
	int rc = 0;
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p->nphase[ph]; i++)
			for (struct crs_rule *cr = &p->phase[ph][i]; cr; cr = cr->chained) {
				if (cr->src->kind == SL_MARKER)
					continue;
				struct crs_prefilter *pf = &p->pf[cr->chain];
				if (!cr->multi_match && pf->nbits < UINT16_MAX - 1 && pm_prefilterable(cr)) {
					cr->prefilter = (uint16_t)(1 + pf->nbits++);
					litlist_add(&ll[cr->chain], cr->op.pm.v, cr->op.pm.len, cr->op.pm.n, cr->prefilter - 1u,
						    cr->op.pm.n > 16);
					continue;
				}
				if (cr->op.kind != SL_OP_RX || !cr->op.re)
					continue;
				p->rx_rules++;
				struct rxlit x;
				if (cr->multi_match) {
					if (rule_lits(p, cr) < 0)
						rc = -1;
					continue;
				}
				if (pf->nbits == UINT16_MAX - 1 || !rxlit_required(cr->op.arg, strlen(cr->op.arg), &x))
					continue;
				keep = realloc(keep, (nkeep + 1) * sizeof(*keep));
				AN(keep);
				keep[nkeep++] = x;
				cr->prefilter = (uint16_t)(1 + pf->nbits++);
				litlist_add(&ll[cr->chain], x.s, x.len, x.n, cr->prefilter - 1u, 0);
				p->pf_rules++;
				branches_build(p, cr, pf, &ll[cr->chain], &keep, &nkeep);
			}
	for (unsigned c = 0; c < p->nchains && rc == 0; c++)
		if (ll[c].n)
			rc = lit_compile(p, &ll[c], &p->pf[c]);
	for (unsigned c = 0; c < p->nchains; c++) {
		struct litlist *l = &ll[c];
		free(l->s);
		free(l->len);
		free(l->ids);
		free(l->flags);
	}
	free(ll);
	for (size_t i = 0; i < nkeep; i++)
		rxlit_free(&keep[i]);
	free(keep);
	return rc;
}

/* Number the prefilter groups (crscache.h): the rules with a prefilter
 * bit whose target list is fixed for the phase (a signature) and holds no
 * count (a count's value is made per rule, not cached), by (target
 * signature, chain): such rules read the same transformed values. */
static void prefilter_groups(struct crs_program *p)
{
	uint64_t *keys = NULL;
	unsigned n = 0;
	for (int ph = 1; ph <= 5; ph++)
		for (size_t i = 0; i < p->nphase[ph]; i++)
			for (struct crs_rule *cr = &p->phase[ph][i]; cr; cr = cr->chained) {
				const struct sl_rule *r = cr->src;
				if (r->kind != SL_RULE || !cr->prefilter || !cr->tsig || cr->multi_match)
					continue;
				size_t k = 0;
				while (k < r->ntargets && !r->targets[k].count)
					k++;
				if (k < r->ntargets)
					continue;
				uint64_t key = (uint64_t)cr->tsig << 16 | cr->chain;
				unsigned g = 0;
				while (g < n && keys[g] != key)
					g++;
				if (g == n) {
					if (n == UINT16_MAX)
						continue;
					keys = realloc(keys, (n + 1) * sizeof(*keys));
					AN(keys);
					keys[n++] = key;
				}
				cr->pf_group = (uint16_t)(g + 1);
			}
	p->npf_groups = n;
	free(keys);
}

int crs_compile(struct crs_program *p, struct seclang *sl, const uint32_t *skip, size_t nskip)
{
	static uint64_t serials;
	memset(p, 0, sizeof(*p));
	p->sl = *sl;
	p->serial = ++serials;
	memset(sl, 0, sizeof(*sl));
	read_settings(p);
	size_t cap = p->sl.nrules;
	for (int ph = 1; ph <= 5; ph++) {
		/* each rule on cache lines of its own (sizeof is a multiple of 64) */
		size_t bytes = (cap ? cap : 1) * sizeof(struct crs_rule);
		p->phase[ph] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
		AN(p->phase[ph]);
		memset(p->phase[ph], 0, bytes);
	}
	/* markers stand in every phase, as ModSecurity places them, so a
	 * skipAfter finds its marker in whichever phase it runs */
	for (size_t i = 0; i < p->sl.nrules; i++) {
		const struct sl_rule *r = p->sl.rules[i];
		if (r->removed)
			continue;
		if (r->kind != SL_MARKER && skipped(skip, nskip, r->id)) {
			p->skipped++;
			continue;
		}
		for (int ph = 1; ph <= 5; ph++) {
			if (r->kind != SL_MARKER && ph != r->phase)
				continue;
			struct crs_rule *cr = &p->phase[ph][p->nphase[ph]++];
			if (rule_compile(p, r, r->id, cr) < 0)
				return -1;
		}
	}
	for (int ph = 1; ph <= 5; ph++) {
		for (size_t i = 0; i < p->nphase[ph]; i++) {
			struct crs_rule *cr = &p->phase[ph][i];
			const struct sl_action *a = cr->src->kind == SL_MARKER ? NULL : seclang_action(cr->src, SL_ACT_SKIP_AFTER);
			if (!a)
				continue;
			size_t j = i + 1;
			while (j < p->nphase[ph] &&
			       !(p->phase[ph][j].src->kind == SL_MARKER && strcmp(p->phase[ph][j].src->marker, a->value) == 0))
				j++;
			if (j == p->nphase[ph])
				return fail(p, cr->src, "skipAfter:%s: no SecMarker %s after this rule", a->value, a->value);
			cr->skip_after = (int32_t)j;
		}
	}
	target_signatures(p);
	if (prefilter_build(p) < 0)
		return -1;
	prefilter_groups(p);
	for (int ph = 1; ph <= 5; ph++) {
		p->gate[ph] = calloc(p->nphase[ph] ? p->nphase[ph] : 1, sizeof(struct crs_gate));
		AN(p->gate[ph]);
		for (size_t i = 0; i < p->nphase[ph]; i++) {
			const struct crs_rule *cr = &p->phase[ph][i];
			struct crs_gate *g = &p->gate[ph][i];
			*g = (struct crs_gate){ .pf_group = cr->pf_group, .prefilter = cr->prefilter, .kind = cr->kind,
						.reads_all = cr->src->kind != SL_RULE, .negated = cr->op.negated };
			for (size_t k = 0; k < cr->src->ntargets; k++) {
				const struct sl_target *tg = &cr->src->targets[k];
				if (tg->count)
					g->reads_all = 1;
				else if (!tg->exclude)
					g->reads[tg->var >> 6] |= 1ull << (tg->var & 63);
			}
		}
	}
	return 0;
}

void crs_program_free(struct crs_program *p)
{
	for (int ph = 1; ph <= 5; ph++) {
		for (size_t i = 0; i < p->nphase[ph]; i++) {
			struct crs_rule *cr = &p->phase[ph][i];
			rule_release(cr);
			rule_free(cr->chained);
		}
		free(p->phase[ph]);
		free(p->gate[ph]);
	}
	seclang_free(&p->sl);
	for (unsigned c = 0; p->pf && c < p->nchains; c++) {
		hs_free_database(p->pf[c].hs);
		free(p->pf[c].bit);
		free(p->pf[c].one);
		free(p->pf[c].one_bits);
	}
	free(p->pf);
	hs_free_scratch(p->hs_scratch);
	free(p->chains);
	free(p->xpaths);
	memset(p, 0, sizeof(*p));
}
