/* The Core Rule Set run on one request (crseval.h says what and why). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <hs/hs.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "crscache.h"
#include "crseval.h"
#include "netaddr.h"
#include "secop.h"
#include "sectfn.h"
#include "util.h"

struct crs_rmtarget {
	uint8_t by_tag;
	void *tag_re;              /* pcre2_code * (by_tag) */
	char *ids;                 /* id ranges (by id) */
	char *target;              /* "ARGS:name" or "ARGS" */
};

enum { NO_MATCH = 0, MATCH = 1, STOP = 2 };

/* ---- variables ------------------------------------------------------- */

/* One value of a variable. KEY is the member's name in a collection (NULL
 * for a scalar). VOLATILE values live where rules write (TX, MATCHED_VARS)
 * and must be copied before a rule's actions run. Return 1 to stop. */
typedef int (*emit_fn)(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, int volatile_);

/* What a target's selector asks for: a name (its length known), a regex,
 * or nothing (every member). */
struct selector {
	uint8_t kind;              /* enum sl_sel */
	const char *name;
	size_t nlen;
	const struct crs_selre *re;
	void *md;                  /* pcre2_match_data * to use */
};

/* A and B may be equal ignoring ASCII case (never 0 when they are): the
 * cheap look before strncasecmp. */
static inline int may_eq_caseless(char a, char b)
{
	return (a | 0x20) == (b | 0x20);
}

static int has_caseless(const char *s, size_t n, const char *lit, size_t ln)
{
	if (ln == 0)
		return 1;
	for (size_t i = 0; i + ln <= n; i++)
		if (may_eq_caseless(s[i], lit[0]) && strncasecmp(s + i, lit, ln) == 0)
			return 1;
	return 0;
}

static int sel_ok(const struct selector *sel, const char *key, size_t klen)
{
	if (!sel || sel->kind == SL_SEL_NONE)
		return 1;
	if (sel->kind == SL_SEL_NAME)
		return sel->nlen == klen && strncasecmp(sel->name, key, klen) == 0;
	const struct crs_selre *re = sel->re;
	if (re->lit)
		return re->anchored ? klen >= re->litlen && (!re->litlen || may_eq_caseless(key[0], re->lit[0])) &&
					      strncasecmp(key, re->lit, re->litlen) == 0
				    : has_caseless(key, klen, re->lit, re->litlen);
	return pcre2_match(re->re, (PCRE2_SPTR)key, klen, 0, 0, sel->md, NULL) >= 0;
}

static int emit_list(const struct seccoll *c, const struct sc_list *l, int names, const struct selector *sel,
		     emit_fn emit, void *ctx)
{
	for (uint32_t i = 0; i < l->n; i++) {
		const struct sc_pair *p = &l->v[i];
		const char *k = sc_str(c, p->name);
		if (!sel_ok(sel, k, p->nlen))
			continue;
		if (names ? emit(ctx, k, p->nlen, k, p->nlen, 0) : emit(ctx, k, p->nlen, sc_str(c, p->value), p->vlen, 0))
			return 1;
	}
	return 0;
}

static int emit_scalar(emit_fn emit, void *ctx, const char *v, size_t n)
{
	return emit(ctx, NULL, 0, v, n, 0);
}

static int emit_num(emit_fn emit, void *ctx, long long n)
{
	char num[24];
	int k = snprintf(num, sizeof(num), "%lld", n);
	return emit(ctx, NULL, 0, num, (size_t)k, 1);
}

static const char *const processor_names[] = { NULL, "URLENCODED", "JSON", "MULTIPART", "XML" };

/* Every value of VAR (restricted by SEL when it is given). */
static int gen(struct crs_txn *t, int var, const struct selector *sel, emit_fn emit, void *ctx)
{
	const struct seccoll *c = &t->coll;
	const struct sc_list *L = c->list;
	switch (var) {
	case SL_VAR_ARGS:
		return emit_list(c, &L[SC_ARGS_GET], 0, sel, emit, ctx) || emit_list(c, &L[SC_ARGS_POST], 0, sel, emit, ctx) ||
		       emit_list(c, &L[SC_ARGS_JSON], 0, sel, emit, ctx);
	case SL_VAR_ARGS_NAMES:
		return emit_list(c, &L[SC_ARGS_GET], 1, sel, emit, ctx) || emit_list(c, &L[SC_ARGS_POST], 1, sel, emit, ctx) ||
		       emit_list(c, &L[SC_ARGS_JSON], 1, sel, emit, ctx);
	case SL_VAR_ARGS_GET:
		return emit_list(c, &L[SC_ARGS_GET], 0, sel, emit, ctx);
	case SL_VAR_ARGS_GET_NAMES:
		return emit_list(c, &L[SC_ARGS_GET], 1, sel, emit, ctx);
	case SL_VAR_ARGS_POST:
		return emit_list(c, &L[SC_ARGS_POST], 0, sel, emit, ctx);
	case SL_VAR_ARGS_POST_NAMES:
		return emit_list(c, &L[SC_ARGS_POST], 1, sel, emit, ctx);
	case SL_VAR_REQUEST_COOKIES:
		return emit_list(c, &L[SC_COOKIES], 0, sel, emit, ctx);
	case SL_VAR_REQUEST_COOKIES_NAMES:
		return emit_list(c, &L[SC_COOKIES], 1, sel, emit, ctx);
	case SL_VAR_REQUEST_HEADERS:
		return emit_list(c, &L[SC_HEADERS], 0, sel, emit, ctx);
	case SL_VAR_REQUEST_HEADERS_NAMES:
		return emit_list(c, &L[SC_HEADERS], 1, sel, emit, ctx);
	case SL_VAR_FILES:
		return emit_list(c, &L[SC_FILES], 0, sel, emit, ctx);
	case SL_VAR_FILES_NAMES:
		return emit_list(c, &L[SC_FILES], 1, sel, emit, ctx);
	case SL_VAR_FILES_SIZES:
		return emit_list(c, &L[SC_FILES_SIZES], 0, sel, emit, ctx);
	case SL_VAR_MULTIPART_PART_HEADERS:
		return emit_list(c, &L[SC_PART_HEADERS], 0, sel, emit, ctx);
	case SL_VAR_FILES_COMBINED_SIZE: {
		if (!t->multipart)
			return 0;
		long long sum = 0;
		for (uint32_t i = 0; i < L[SC_FILES_SIZES].n; i++)
			sum += secop_atoi(sc_str(c, L[SC_FILES_SIZES].v[i].value), L[SC_FILES_SIZES].v[i].vlen);
		return emit_num(emit, ctx, sum);
	}
	case SL_VAR_ARGS_COMBINED_SIZE: {
		long long sum = 0;
		const int lists[] = { SC_ARGS_GET, SC_ARGS_POST, SC_ARGS_JSON };
		for (int k = 0; k < 3; k++)
			for (uint32_t i = 0; i < L[lists[k]].n; i++)
				sum += L[lists[k]].v[i].nlen + L[lists[k]].v[i].vlen;
		return emit_num(emit, ctx, sum);
	}
	case SL_VAR_TX:
	case SL_VAR_IP:
	case SL_VAR_GLOBAL:
	case SL_VAR_SESSION:
	case SL_VAR_USER: {
		int coll = var == SL_VAR_TX ? SX_TX : var == SL_VAR_IP ? SX_IP : var == SL_VAR_GLOBAL ? SX_GLOBAL
			 : var == SL_VAR_SESSION ? SX_SESSION : SX_USER;
		if (sel && sel->kind == SL_SEL_NAME) {  /* names are unique in a collection */
			const struct sectx_var *v = sectx_get(&t->tx, coll, sel->name, sel->nlen);
			return v ? emit(ctx, sectx_str(&t->tx, v->name), v->nlen, sectx_str(&t->tx, v->value), v->vlen, 1) : 0;
		}
		for (uint32_t i = 0; i < t->tx.n; i++) {
			const struct sectx_var *v = &t->tx.v[i];
			if (v->coll != coll)
				continue;
			const char *k = sectx_str(&t->tx, v->name);
			if (!sel_ok(sel, k, v->nlen))
				continue;
			if (emit(ctx, k, v->nlen, sectx_str(&t->tx, v->value), v->vlen, 1))
				return 1;
		}
		return 0;
	}
	case SL_VAR_MATCHED_VAR:
		return emit(ctx, NULL, 0, t->mv_value.data ? t->mv_value.data : "", t->mv_value.len, 1);
	case SL_VAR_MATCHED_VAR_NAME:
		return emit(ctx, NULL, 0, t->mv_name.data ? t->mv_name.data : "", t->mv_name.len, 1);
	case SL_VAR_MATCHED_VARS:
	case SL_VAR_MATCHED_VARS_NAMES: {
		size_t off = 0;
		for (size_t i = 0; i < t->nmvs; i++) {
			const char *n = t->mvs.data + off;
			size_t nl = t->mvs_len[2 * i], vl = t->mvs_len[2 * i + 1];
			const char *v = n + nl + 1;
			off += nl + 1 + vl + 1;
			if (!sel_ok(sel, n, nl))
				continue;
			if (var == SL_VAR_MATCHED_VARS ? emit(ctx, n, nl, v, vl, 1) : emit(ctx, n, nl, n, nl, 1))
				return 1;
		}
		return 0;
	}
	case SL_VAR_REQUEST_URI:
		return emit_scalar(emit, ctx, sc_str(c, c->uri), c->uri_len);
	case SL_VAR_REQUEST_URI_RAW:
		return emit_scalar(emit, ctx, t->rq->target, t->rq->target_len);
	case SL_VAR_REQUEST_FILENAME:
		return emit_scalar(emit, ctx, sc_str(c, c->filename), c->filename_len);
	case SL_VAR_REQUEST_BASENAME:
		return emit_scalar(emit, ctx, sc_str(c, c->basename), c->basename_len);
	case SL_VAR_QUERY_STRING:
		return c->query ? emit_scalar(emit, ctx, sc_str(c, c->query), c->query_len) : 0;
	case SL_VAR_REQUEST_LINE:
		return emit_scalar(emit, ctx, sc_str(c, c->line), c->line_len);
	case SL_VAR_REQUEST_METHOD:
		return emit_scalar(emit, ctx, sc_str(c, c->method), c->method_len);
	case SL_VAR_REQUEST_PROTOCOL:
		return emit_scalar(emit, ctx, sc_str(c, c->protocol), c->protocol_len);
	case SL_VAR_REMOTE_ADDR:
		return emit_scalar(emit, ctx, t->rq->remote_addr ? t->rq->remote_addr : "", t->rq->remote_addr ? strlen(t->rq->remote_addr) : 0);
	case SL_VAR_REMOTE_PORT:
		return emit_num(emit, ctx, t->rq->remote_port);
	case SL_VAR_REQUEST_BODY:
		/* ModSecurity keeps the raw body only for these processors */
		if (!t->body_processed || !(t->processor == CRS_BODY_NONE || t->processor == CRS_BODY_URLENCODED || t->force_body_var))
			return 0;
		return emit_scalar(emit, ctx, t->rq->body, t->rq->body_len);
	case SL_VAR_REQUEST_BODY_LENGTH:
		return emit_num(emit, ctx, t->body_processed ? (long long)t->rq->body_len : 0);
	case SL_VAR_REQBODY_PROCESSOR:
		return t->processor ? emit_scalar(emit, ctx, processor_names[t->processor], strlen(processor_names[t->processor])) : 0;
	case SL_VAR_REQBODY_ERROR:
	case SL_VAR_REQBODY_PROCESSOR_ERROR:
		return emit_num(emit, ctx, t->v.body_error);
	case SL_VAR_REQBODY_ERROR_MSG:
		return emit(ctx, NULL, 0, t->body_error_msg, strlen(t->body_error_msg), 1);
	case SL_VAR_URLENCODED_ERROR:
		return emit_num(emit, ctx, c->urlencoded_invalid > 0);
	case SL_VAR_MULTIPART_STRICT_ERROR:
	case SL_VAR_MULTIPART_UNMATCHED_BOUNDARY:
	case SL_VAR_MULTIPART_BOUNDARY_QUOTED:
	case SL_VAR_MULTIPART_BOUNDARY_WHITESPACE:
	case SL_VAR_MULTIPART_DATA_BEFORE:
	case SL_VAR_MULTIPART_DATA_AFTER:
	case SL_VAR_MULTIPART_HEADER_FOLDING:
	case SL_VAR_MULTIPART_LF_LINE:
	case SL_VAR_MULTIPART_CRLF_LF_LINES:
	case SL_VAR_MULTIPART_MISSING_SEMICOLON:
	case SL_VAR_MULTIPART_INVALID_QUOTING:
	case SL_VAR_MULTIPART_INVALID_PART:
	case SL_VAR_MULTIPART_INVALID_HEADER_FOLDING:
	case SL_VAR_MULTIPART_FILE_LIMIT_EXCEEDED:
		return t->multipart ? emit_num(emit, ctx, seccoll_multipart_flag(c, var)) : 0;
	case SL_VAR_UNIQUE_ID: {
		char id[32];
		int k = snprintf(id, sizeof(id), "%016llx", (unsigned long long)(uintptr_t)t->rq ^ now_us());
		return emit(ctx, NULL, 0, id, (size_t)k, 1);
	}
	case SL_VAR_DURATION:
		return emit_num(emit, ctx, 0);
	case SL_VAR_TIME_EPOCH:
		return emit_num(emit, ctx, (long long)time(NULL));
	case SL_VAR_XML:
		return emit_list(c, &L[SC_XML], 0, sel, emit, ctx);
	case SL_VAR_GEO:
	case SL_VAR_ENV:
		return 0;  /* no lookups */
	default:
		return 0;
	}
}

/* ---- the target list of one rule -------------------------------------- */

/* A rule's target list: the values, and their names ("ARGS:id") and
 * copied values in BUF. Lists of rules reading only request data are kept
 * for the phase by the rules' target signature (crs_rule.tsig): most CRS
 * rules share a handful of lists. */
struct crs_tlist {
	struct crs_target *tg;
	size_t ntg, cap;
	struct buf buf;
	uint32_t sig, epoch;       /* whose list, in which phase (tc_epoch) */
};

struct build {
	struct crs_tlist *L;
	const char *vname;
	size_t vlen;
	int exclude;
	size_t count;
};

static void tbuf_put(struct buf *b, const char *s, size_t n, uint32_t *off)
{
	*off = (uint32_t)b->len;
	buf_append(b, s, n);
	buf_append(b, "", 1);
}

static int name_eq(const char *a, size_t al, const char *b, size_t bl)
{
	return al == bl && strncasecmp(a, b, al) == 0;
}

/* A target's key while its list is built (a copied one is in the buffer). */
static const char *building_key(const struct crs_tlist *L, const struct crs_target *x)
{
	return x->stable || !x->key ? x->key : L->buf.data + x->koff;
}

static int build_emit(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, int volatile_)
{
	struct build *bd = ctx;
	struct crs_tlist *L = bd->L;
	bd->count++;
	if (bd->count > 0 && bd->exclude < 0)
		return 0;  /* counting only */
	if (bd->exclude) {  /* "!VAR:key": the targets of that name go */
		size_t j = 0;
		for (size_t i = 0; i < L->ntg; i++) {
			const struct crs_target *x = &L->tg[i];
			const char *xk = building_key(L, x);
			int same = name_eq(x->vname, x->vnlen, bd->vname, bd->vlen) && !xk == !key &&
				   (!key || name_eq(xk, x->klen, key, klen));
			if (!same)
				L->tg[j++] = L->tg[i];
		}
		L->ntg = j;
		return 0;
	}
	if (L->ntg == L->cap) {
		L->cap = L->cap ? L->cap * 2 : 64;
		L->tg = realloc(L->tg, L->cap * sizeof(*L->tg));
		AN(L->tg);
	}
	struct crs_target *tg = &L->tg[L->ntg++];
	tg->vname = bd->vname;
	tg->vnlen = (uint8_t)bd->vlen;
	tg->key = key;  /* a copied one: any non-NULL until the list is done */
	tg->klen = (uint32_t)klen;
	tg->vlen = (uint32_t)vlen;
	tg->value = volatile_ ? NULL : val;
	tg->stable = !volatile_;
	if (volatile_) {
		if (key)
			tbuf_put(&L->buf, key, klen, &tg->koff);
		tbuf_put(&L->buf, val, vlen, &tg->voff);
	}
	return 0;
}

/* The list of CR's targets in t->cur: a kept one when CR's signature was
 * built before in this phase. */
static void build_targets(struct crs_txn *t, const struct crs_rule *cr)
{
	struct crs_tlist *L = &t->tl[CRS_TL_SLOTS];  /* the scratch list */
	if (cr->tsig) {
		for (unsigned k = 0; k < CRS_TL_SLOTS; k++)
			if (t->tl[k].sig == cr->tsig && t->tl[k].epoch == t->tc_epoch) {
				t->cur = &t->tl[k];
				return;
			}
		L = &t->tl[t->tl_next++ % CRS_TL_SLOTS];
	}
	L->sig = cr->tsig;
	L->epoch = t->tc_epoch;
	L->ntg = 0;
	L->buf.len = 0;
	t->cur = L;
	for (size_t i = 0; i < cr->ntargets; i++) {
		const struct sl_target *tg = &cr->targets[i];
		struct build bd = { .L = L, .vname = seclang_var_name((enum sl_var)tg->var), .exclude = tg->exclude };
		bd.vlen = seclang_var_name_len((enum sl_var)tg->var);
		struct selector sel = { .kind = tg->sel_kind, .name = tg->sel, .nlen = tg->sel_len,
					.re = cr->sel_re ? &cr->sel_re[i] : NULL, .md = t->match_data };
		if (tg->count) {
			bd.exclude = -1;
			(void)gen(t, tg->var, &sel, build_emit, &bd);
			char num[24], *end = num + sizeof(num), *d = end;
			size_t c = bd.count;
			do
				*--d = (char)('0' + c % 10);
			while (c /= 10);
			bd.exclude = 0;
			bd.count = 0;
			(void)build_emit(&bd, NULL, 0, d, (size_t)(end - d), 1);
			continue;
		}
		(void)gen(t, tg->var, &sel, build_emit, &bd);
	}
	for (size_t i = 0; i < L->ntg; i++) {
		struct crs_target *x = &L->tg[i];
		if (x->stable)
			continue;
		x->value = L->buf.data + x->voff;
		if (x->key)
			x->key = L->buf.data + x->koff;
	}
}

/* ---- macros ----------------------------------------------------------- */

struct first {
	struct buf *out;
	int found;
};

static int first_emit(void *ctx, const char *key, size_t klen, const char *val, size_t vlen, int volatile_)
{
	(void)key, (void)klen, (void)volatile_;
	struct first *f = ctx;
	buf_append(f->out, val, vlen);
	f->found = 1;
	return 1;
}

static int resolve(void *ctx, const char *name, size_t nlen, const char *param, size_t plen, struct buf *out)
{
	struct crs_txn *t = ctx;
	if (name_eq(name, nlen, "rule", 4)) {
		const struct crs_rule *r = t->acting;
		if (!r || !param)
			return 0;
		if (name_eq(param, plen, "id", 2)) {
			buf_append_u64(out, r->id);
			return 1;
		}
		enum sl_act a = name_eq(param, plen, "msg", 3) ? SL_ACT_MSG : name_eq(param, plen, "logdata", 7) ? SL_ACT_LOGDATA
			      : name_eq(param, plen, "severity", 8) ? SL_ACT_SEVERITY : name_eq(param, plen, "rev", 3) ? SL_ACT_REV
			      : name_eq(param, plen, "ver", 3) ? SL_ACT_VER : SL_ACT__COUNT;
		const struct sl_action *act = a == SL_ACT__COUNT ? NULL : seclang_action(r->src, a);
		if (!act || !act->value)
			return 0;
		buf_append_str(out, act->value);
		return 1;
	}
	if (param && name_eq(name, nlen, "tx", 2)) {  /* most macros: a fast way */
		const struct sectx_var *v = sectx_get(&t->tx, SX_TX, param, plen);
		if (!v)
			return 0;
		buf_append(out, sectx_str(&t->tx, v->value), v->vlen);
		return 1;
	}
	int var = seclang_var_lookup(name, nlen);
	if (var < 0)
		return 0;
	struct selector sel = { .kind = param ? SL_SEL_NAME : SL_SEL_NONE, .name = param, .nlen = plen };
	struct first f = { .out = out };
	(void)gen(t, var, &sel, first_emit, &f);
	return f.found;
}

/* ---- operators -------------------------------------------------------- */

static void set_capture(struct crs_txn *t, int i, const char *v, size_t n)
{
	char k[2] = { (char)('0' + i), 0 };
	sectx_set(&t->tx, SX_TX, k, 1, v, n);
}

/* The operator's argument with its macros expanded (into scratch2). */
static const char *op_param(struct crs_txn *t, const struct crs_op *op, size_t *len)
{
	if (!op->has_macro) {
		*len = strlen(op->arg);
		return op->arg;
	}
	t->scratch2.len = 0;
	sectx_expand(op->arg, strlen(op->arg), resolve, t, &t->scratch2);
	buf_append(&t->scratch2, "", 1);
	*len = t->scratch2.len - 1;
	return t->scratch2.data;
}

/* the JIT's own entry skips pcre2_match's checks, which a compiled
 * pattern without UTF need not pass; same answers, same limits */
static int rx_run(struct crs_txn *t, const pcre2_code *re, int jit, const char *v, size_t vl)
{
	return jit ? pcre2_jit_match(re, (PCRE2_SPTR)v, vl, 0, 0, t->match_data, t->match_ctx)
		   : pcre2_match(re, (PCRE2_SPTR)v, vl, 0, 0, t->match_data, t->match_ctx);
}

/* CR's regex (split into branches) on V, whose prefilter bits are at
 * t->pf_at: only the branches whose literals V holds can match. Returns
 * op_rx's answer, or -1 when the regex should run whole: more than half
 * of the branches are candidates (one run beats several), or one gave up
 * (the whole regex's outcome then decides). With capture, TX:0 is the
 * whole regex's match: the earliest start, the first branch on a tie. */
static int rx_branches(struct crs_txn *t, const struct crs_rule *cr, const char *v, size_t vl)
{
	unsigned cand = 0;
	for (unsigned k = 0; k < cr->nbranch; k++)
		cand += (unsigned)crscache_has_bit(t, t->pf_at, cr->branch_bit + k + 1u);
	if (2 * cand > cr->nbranch)
		return -1;
	int found = 0;
	PCRE2_SIZE start = 0, end = 0;
	for (unsigned k = 0; k < cr->nbranch && cand; k++) {
		if (!crscache_has_bit(t, t->pf_at, cr->branch_bit + k + 1u))
			continue;
		cand--;
		int rc = rx_run(t, cr->branch[k].re, cr->branch[k].jit, v, vl);
		if (rc == PCRE2_ERROR_NOMATCH)
			continue;
		if (rc < 0)
			return -1;
		if (!cr->capture)
			return 1;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->match_data);
		if (!found || ov[0] < start) {
			start = ov[0];
			end = ov[1];
		}
		found = 1;
	}
	if (found) {
		set_capture(t, 0, v + start, end - start);
		for (int i = 1; i <= 9; i++) {
			char k[2] = { (char)('0' + i), 0 };
			if (sectx_tx_digit(&t->tx, i))
				sectx_unset(&t->tx, SX_TX, k, 1);
		}
	}
	return found;
}

static int lit_hit(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
	(void)id, (void)from, (void)to, (void)flags, (void)ctx;
	return 1;  /* one is enough: stop */
}

static int op_rx(struct crs_txn *t, const struct crs_rule *cr, const char *v, size_t vl)
{
	if (t->pf_seen == PF_SEEN_NO)
		return 0;
	/* no literal of the regex in the value: it cannot match (a failed
	 * scan rules nothing out) */
	if (cr->lits && t->pf_seen == PF_SEEN_UNKNOWN &&
	    hs_scan(cr->lits, vl ? v : "", (unsigned)vl, 0, t->hs_scratch, lit_hit, NULL) == HS_SUCCESS)
		return 0;
	const pcre2_code *re = cr->op.re;
	pcre2_code *dyn = NULL;
	if (!re) {
		size_t pl;
		const char *pat = op_param(t, &cr->op, &pl);
		int code;
		PCRE2_SIZE off;
		dyn = pcre2_compile((PCRE2_SPTR)pat, pl, PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY, &code, &off, NULL);
		if (!dyn)
			return 0;
		re = dyn;
	}
	if (cr->nbranch && t->pf_seen == PF_SEEN_YES) {
		int rc = rx_branches(t, cr, v, vl);
		if (rc >= 0)
			return rc;
	}
	int rc = rx_run(t, re, cr->op.jit, v, vl);
	pcre2_code_free(dyn);
	if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT) {
		/* ModSecurity flags it for rule 200005 and counts no match */
		sectx_set(&t->tx, SX_TX, "MSC_PCRE_LIMITS_EXCEEDED", 24, "1", 1);
		return 0;
	}
	if (rc < 0)
		return 0;
	if (cr->capture) {
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(t->match_data);
		int n = rc == 0 ? 10 : rc > 10 ? 10 : rc;
		for (int i = 0; i < n; i++) {
			if (ov[2 * i] == PCRE2_UNSET)
				set_capture(t, i, "", 0);
			else
				set_capture(t, i, v + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
		}
		for (int i = n; i <= 9; i++) {
			char k[2] = { (char)('0' + i), 0 };
			if (sectx_tx_digit(&t->tx, i))
				sectx_unset(&t->tx, SX_TX, k, 1);
		}
	}
	return 1;
}

static int ip_in(const struct crs_op *op, const char *v, size_t vl)
{
	char tmp[64];
	if (vl >= sizeof(tmp))
		return 0;
	memcpy(tmp, v, vl);
	tmp[vl] = '\0';
	struct cidr host;
	const char *why;
	if (cidr_parse(tmp, &host, &why) < 0 || host.bits != (host.family == AF_INET ? 32 : 128))
		return 0;
	struct netaddr a = { .family = host.family };
	memcpy(a.ip, host.ip, sizeof(a.ip));
	return cidrset_contains(&op->ips, &a);
}

typedef int (*string_op_fn)(const char *v, size_t vl, const char *p, size_t pl);

static string_op_fn string_op(int kind)
{
	switch (kind) {
	case SL_OP_STREQ: return secop_streq;
	case SL_OP_CONTAINS_WORD: return secop_contains_word;
	case SL_OP_BEGINS_WITH: return secop_begins_with;
	case SL_OP_ENDS_WITH: return secop_ends_with;
	case SL_OP_WITHIN: return secop_within;
	default: return secop_contains;  /* @contains, @strmatch */
	}
}

static int pm_found(unsigned id, unsigned long long from, unsigned long long to, unsigned flags, void *ctx)
{
	(void)id, (void)from, (void)to, (void)flags;
	*(int *)ctx = 1;
	return 1;  /* one is enough */
}

/* 1 when the operator (before '!') matches V. */
static int op_exec(struct crs_txn *t, const struct crs_rule *cr, const char *v, size_t vl)
{
	const struct crs_op *op = &cr->op;
	size_t pl;
	const char *p;
	switch (op->kind) {
	case SL_OP_RX:
		return op_rx(t, cr, v, vl);
	case SL_OP_PM:
	case SL_OP_PMF:
	case SL_OP_PM_FROM_FILE: {
		int found = t->pf_seen == PF_SEEN_YES;  /* the prefilter holds the phrases: its answer is exact */
		if (t->pf_seen == PF_SEEN_UNKNOWN &&
		    hs_scan(op->pm.hs, vl ? v : "", (unsigned)vl, 0, t->hs_scratch, pm_found, &found) == HS_SCAN_TERMINATED)
			found = 1;
		if (!found)
			return 0;
		size_t which;
		/* the phrase ModSecurity names: the leftmost (rarely needed, so found the slow way) */
		if (cr->capture && secop_pm(op->pm.v, op->pm.n, v, vl, &which))
			set_capture(t, 0, op->pm.v[which], op->pm.len[which]);
		return 1;
	}
	case SL_OP_STREQ:
	case SL_OP_CONTAINS:
	case SL_OP_STRMATCH:
	case SL_OP_CONTAINS_WORD:
	case SL_OP_BEGINS_WITH:
	case SL_OP_ENDS_WITH:
	case SL_OP_WITHIN:
		p = op_param(t, op, &pl);
		return string_op(op->kind)(v, vl, p, pl);
	case SL_OP_EQ:
	case SL_OP_GE:
	case SL_OP_GT:
	case SL_OP_LE:
	case SL_OP_LT: {
		long long want = op->num;
		if (op->has_macro) {
			p = op_param(t, op, &pl);
			want = secop_atoi(p, pl);
		}
		long long have = secop_atoi(v, vl);
		return op->kind == SL_OP_EQ ? have == want : op->kind == SL_OP_GE ? have >= want : op->kind == SL_OP_GT ? have > want
		     : op->kind == SL_OP_LE ? have <= want : have < want;
	}
	case SL_OP_VALIDATE_BYTE_RANGE:
		if (op->lone_forbidden >= 0)  /* one byte out of range: memchr goes faster than the table */
			return vl && memchr(v, op->lone_forbidden, vl) != NULL;
		return secop_validate_byte_range(op->bytes, v, vl);
	case SL_OP_VALIDATE_URL_ENCODING:
		return secop_validate_url_encoding(v, vl);
	case SL_OP_VALIDATE_UTF8_ENCODING:
		return secop_validate_utf8(v, vl);
	case SL_OP_IP_MATCH:
		return ip_in(op, v, vl);
	case SL_OP_DETECT_SQLI: {
		char fp[8];
		if (!injmemo_sqli(&t->inj, v, vl, fp))
			return 0;
		if (cr->capture)
			set_capture(t, 0, fp, strnlen(fp, sizeof(fp)));
		return 1;
	}
	case SL_OP_DETECT_XSS:
		return injmemo_xss(&t->inj, v, vl);
	case SL_OP_UNCONDITIONAL_MATCH:
		return 1;
	case SL_OP_NO_MATCH:
	default:
		return 0;
	}
}

/* ---- actions ---------------------------------------------------------- */

/* "VNAME:key" (or "VNAME") onto B. */
static void append_name(struct buf *b, const struct crs_target *x)
{
	buf_append(b, x->vname, x->vnlen);
	if (x->key) {
		buf_append(b, ":", 1);
		buf_append(b, x->key, x->klen);
	}
}

static void set_matched(struct crs_txn *t, const struct crs_target *x, const char *v, size_t vl)
{
	t->mv_name.len = 0;
	append_name(&t->mv_name, x);
	size_t nl = t->mv_name.len;
	t->mv_value.len = 0;
	buf_append(&t->mv_value, v, vl);
	if (t->nmvs == t->mvs_cap) {
		t->mvs_cap = t->mvs_cap ? t->mvs_cap * 2 : 16;
		t->mvs_len = realloc(t->mvs_len, 2 * t->mvs_cap * sizeof(*t->mvs_len));
		AN(t->mvs_len);
	}
	t->mvs_len[2 * t->nmvs] = (uint32_t)nl;
	t->mvs_len[2 * t->nmvs + 1] = (uint32_t)vl;
	t->nmvs++;
	buf_append(&t->mvs, t->mv_name.data, nl);
	buf_append(&t->mvs, "", 1);
	buf_append(&t->mvs, v, vl);
	buf_append(&t->mvs, "", 1);
}

static void clear_matched(struct crs_txn *t)
{
	t->nmvs = 0;
	t->mvs.len = 0;
}

static int value_is(const char *v, const char *want)
{
	return strcasecmp(v, want) == 0;
}

static void *compile_plain(const char *s, size_t n)
{
	int code;
	PCRE2_SIZE off;
	return pcre2_compile((PCRE2_SPTR)s, n, 0, &code, &off, NULL);
}

/* ctl:NAME=VALUE, for the rest of the transaction. */
static void run_ctl(struct crs_txn *t, const char *spec)
{
	const char *eq = strchr(spec, '=');
	if (!eq)
		return;
	size_t nl = (size_t)(eq - spec);
	const char *val = eq + 1;
	if (name_eq(spec, nl, "ruleEngine", 10)) {
		t->engine = value_is(val, "On") ? CRS_ENGINE_ON : value_is(val, "DetectionOnly") ? CRS_ENGINE_DETECTION_ONLY : CRS_ENGINE_OFF;
	} else if (name_eq(spec, nl, "requestBodyAccess", 17)) {
		t->body_access = value_is(val, "On");
	} else if (name_eq(spec, nl, "forceRequestBodyVariable", 24)) {
		t->force_body_var = value_is(val, "On");
	} else if (name_eq(spec, nl, "requestBodyProcessor", 20)) {
		for (int i = 1; i <= CRS_BODY_XML; i++)
			if (value_is(val, processor_names[i]))
				t->processor = (uint8_t)i;
	} else if (name_eq(spec, nl, "ruleRemoveById", 14)) {
		buf_append(&t->rm_ids, val, strlen(val) + 1);
	} else if (name_eq(spec, nl, "ruleRemoveByTag", 15)) {
		void *re = compile_plain(val, strlen(val));
		if (!re)
			return;
		if (t->nrm_tags == t->rm_tags_cap) {
			t->rm_tags_cap = t->rm_tags_cap ? t->rm_tags_cap * 2 : 4;
			t->rm_tags = realloc(t->rm_tags, t->rm_tags_cap * sizeof(*t->rm_tags));
			AN(t->rm_tags);
		}
		t->rm_tags[t->nrm_tags++] = re;
	} else if (name_eq(spec, nl, "ruleRemoveTargetById", 20) || name_eq(spec, nl, "ruleRemoveTargetByTag", 21)) {
		const char *semi = strchr(val, ';');
		if (!semi)
			return;
		struct crs_rmtarget rt = { .by_tag = nl == 21 };
		if (rt.by_tag) {
			rt.tag_re = compile_plain(val, (size_t)(semi - val));
			if (!rt.tag_re)
				return;
		} else {
			rt.ids = strndup(val, (size_t)(semi - val));
			AN(rt.ids);
		}
		rt.target = strdup(semi + 1);
		AN(rt.target);
		if (t->nrm_targets == t->rm_targets_cap) {
			t->rm_targets_cap = t->rm_targets_cap ? t->rm_targets_cap * 2 : 4;
			t->rm_targets = realloc(t->rm_targets, t->rm_targets_cap * sizeof(*t->rm_targets));
			AN(t->rm_targets);
		}
		t->rm_targets[t->nrm_targets++] = rt;
	}
	/* the others (audit log, debug log, hash engine) change no verdict */
}

static void run_actions(struct crs_txn *t, const struct crs_rule *cr)
{
	for (size_t i = 0; i < cr->nacts; i++) {
		const struct crs_act *a = &cr->acts[i];
		switch (a->act) {
		case SL_ACT_SETVAR:
			(void)sectx_setvar_run(&t->tx, &a->setvar, resolve, t);
			break;
		case SL_ACT_CTL:
			run_ctl(t, a->value);
			break;
		case SL_ACT_INITCOL: {
			const char *eq = strchr(a->value, '=');
			int coll = sectx_coll(a->value, eq ? (size_t)(eq - a->value) : strlen(a->value));
			if (coll > 0)
				t->tx.open[coll] = 1;  /* per-transaction: sluice keeps no persistent store */
			break;
		}
		default:
			break;
		}
	}
}

static void add_alert(struct crs_txn *t, const struct crs_rule *starter, int intercepted)
{
	struct crs_verdict *v = &t->v;
	if (v->nalerts == v->alerts_cap) {
		v->alerts_cap = v->alerts_cap ? v->alerts_cap * 2 : 32;
		v->alerts = realloc(v->alerts, v->alerts_cap * sizeof(*v->alerts));
		AN(v->alerts);
	}
	v->alerts[v->nalerts++] = (struct crs_alert){
		.rule = starter,
		.phase = t->phase,
		.logged = starter->log || intercepted,
		.secaction = starter->kind == SL_ACTION,
		.intercepted = (uint8_t)intercepted,
	};
}

/* The chain's end matched a value: its starter's disruptive action. */
static int disrupt(struct crs_txn *t, const struct crs_rule *starter)
{
	int act = starter->disruptive;
	int blocking = t->engine == CRS_ENGINE_ON;
	if (blocking && (act == SL_ACT_DENY || act == SL_ACT_DROP || act == SL_ACT_REDIRECT || act == SL_ACT_PROXY)) {
		t->v.intercepted = 1;
		t->v.phase = t->phase;
		t->v.status = starter->status ? starter->status : act == SL_ACT_REDIRECT ? 302 : 403;
		t->v.rule_id = starter->id;
		add_alert(t, starter, 1);
		return STOP;
	}
	add_alert(t, starter, 0);
	if (blocking && act == SL_ACT_ALLOW) {
		t->allowed = 1;
		return STOP;
	}
	return MATCH;
}

/* ---- rules ------------------------------------------------------------ */

static int range_has(const char *ranges, uint32_t id)
{
	const char *s = ranges;
	while (*s) {
		const char *e = strchr(s, ',');
		size_t n = e ? (size_t)(e - s) : strlen(s);
		const char *dash = memchr(s, '-', n);
		long a = atol(s);
		if (dash ? (long)id >= a && (long)id <= atol(dash + 1) : (long)id == a)
			return 1;
		if (!e)
			break;
		s = e + 1;
	}
	return 0;
}

static int removed_by_id(const struct crs_txn *t, uint32_t id)
{
	for (size_t off = 0; off < t->rm_ids.len; off += strlen(t->rm_ids.data + off) + 1)
		if (range_has(t->rm_ids.data + off, id))
			return 1;
	return 0;
}

static int tag_matches(const void *re, const struct sl_rule *r)
{
	for (size_t i = 0; i < r->nactions; i++) {
		if (r->actions[i].act != SL_ACT_TAG || !r->actions[i].value)
			continue;
		pcre2_match_data *md = pcre2_match_data_create(1, NULL);
		int rc = pcre2_match(re, (PCRE2_SPTR)r->actions[i].value, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL);
		pcre2_match_data_free(md);
		if (rc >= 0)
			return 1;
	}
	return 0;
}

static int removed_at_runtime(const struct crs_txn *t, const struct crs_rule *cr)
{
	if (cr->id && removed_by_id(t, cr->id))
		return 1;
	for (size_t i = 0; i < t->nrm_tags; i++)
		if (tag_matches(t->rm_tags[i], cr->src))
			return 1;
	return 0;
}

/* ctl:ruleRemoveTarget*: is target NAME ("ARGS:x") of the chain starter
 * CR excluded? A bare "ARGS" excludes every member. */
static int target_removed(const struct crs_txn *t, const struct crs_rule *cr, const struct crs_target *x)
{
	for (size_t i = 0; i < t->nrm_targets; i++) {
		const struct crs_rmtarget *rt = &t->rm_targets[i];
		if (rt->by_tag ? !tag_matches(rt->tag_re, cr->src) : !(cr->id && range_has(rt->ids, cr->id)))
			continue;
		const char *colon = strchr(rt->target, ':');
		size_t base = colon ? (size_t)(colon - rt->target) : strlen(rt->target);
		if (!name_eq(rt->target, base, x->vname, x->vnlen))
			continue;
		if (!colon)
			return 1;
		if (x->key && name_eq(colon + 1, strlen(colon + 1), x->key, x->klen))
			return 1;
	}
	return 0;
}

/* The operator on one (transformed) value V of target X, and what a match
 * sets off. */
static int try_value(struct crs_txn *t, const struct crs_rule *link, const struct crs_rule *starter,
		     const struct crs_target *x, const char *v, size_t vl)
{
	if (link == starter && t->nrm_targets && target_removed(t, starter, x))
		return NO_MATCH;
	int m = op_exec(t, link, v, vl);
	if (m == link->op.negated)
		return NO_MATCH;
	set_matched(t, x, v, vl);
	run_actions(t, link);
	if (!link->chained)
		return disrupt(t, starter);
	return MATCH;
}

/* A new phase: values may have moved (the body processor appends). An
 * entry is live when its epoch is the current one; 0 is never current
 * (calloc'd entries are 0). */
static void tc_clear(struct crs_txn *t)
{
	if (crscache_clear(t))
		for (unsigned k = 0; k <= CRS_TL_SLOTS; k++)
			t->tl[k].epoch = 0;
}

/* LINK (in prefilter group G) on the target list L: only the values that
 * have its bit can match (all of them, negated), as in run_rule. */
static int run_grouped(struct crs_txn *t, const struct crs_rule *link, const struct crs_rule *starter,
		       const struct crs_tlist *L, const struct crs_pfgroup *g)
{
	if (!link->op.negated && !crscache_has_bit(t, g->uni, link->prefilter))
		return NO_MATCH;
	const uint32_t *view = t->grp_view + g->view;
	int matched = 0;
	for (size_t i = 0; i < L->ntg; i++) {
		int yes = crscache_has_bit(t, view[i], link->prefilter);
		if (!yes && !link->op.negated)
			continue;
		const struct crs_target *tg = &L->tg[i];
		struct crs_tcache *e = crscache_find(t, tg->value, tg->vlen, TC_CHAIN(link->chain));
		AN(e);  /* the group's filling put it there */
		const char *v = e->same ? e->src : t->tc_data.data + e->off;
		t->pf_seen = yes ? PF_SEEN_YES : PF_SEEN_NO;
		t->pf_at = view[i];
		int rc = try_value(t, link, starter, tg, v, e->len);
		t->pf_seen = PF_SEEN_UNKNOWN;
		if (rc == STOP)
			return STOP;
		matched |= rc == MATCH;
	}
	return matched ? MATCH : NO_MATCH;
}

/* One rule of a chain on all its targets: MATCH if any value matched. */
static int run_rule(struct crs_txn *t, const struct crs_rule *link, const struct crs_rule *starter)
{
	if (link->kind == SL_ACTION) {
		/* ModSecurity runs a SecAction as @unconditionalMatch on REMOTE_ADDR */
		const char *ra = t->rq->remote_addr ? t->rq->remote_addr : "";
		const struct crs_target x = { .vname = seclang_var_name(SL_VAR_REMOTE_ADDR),
					      .vnlen = (uint8_t)seclang_var_name_len(SL_VAR_REMOTE_ADDR) };
		set_matched(t, &x, ra, strlen(ra));
		run_actions(t, link);
		return link->chained ? MATCH : disrupt(t, starter);
	}
	if (link->tx_direct) {
		const struct sl_target *tg = &link->targets[0];
		const struct sectx_var *xv = sectx_get_hashed(&t->tx, SX_TX, link->tx_name, tg->sel_len, link->tx_hash);
		if (link->tx_direct == TX_DIRECT_COUNT) {
			/* 1 or 0 (a name is unique in TX), as a count's target list gives it */
			const struct crs_target n = { .vname = seclang_var_name(SL_VAR_TX),
						      .vnlen = (uint8_t)seclang_var_name_len(SL_VAR_TX), .value = xv ? "1" : "0",
						      .vlen = 1 };
			return try_value(t, link, starter, &n, n.value, n.vlen);
		}
		if (!xv)
			return NO_MATCH;
		struct crs_target x = { .vname = seclang_var_name(SL_VAR_TX), .vnlen = (uint8_t)seclang_var_name_len(SL_VAR_TX),
					.key = sectx_str(&t->tx, xv->name), .value = sectx_str(&t->tx, xv->value),
					.klen = xv->nlen, .vlen = xv->vlen };
		if (link->nacts || link->capture || link->op.kind == SL_OP_RX) {
			/* copies, as build_emit makes of TX values: the rule's setvars, a
			 * capture or a regex's error flag may move the store */
			struct buf *b = &t->tx_direct;
			b->len = 0;
			tbuf_put(b, x.key, x.klen, &x.koff);
			tbuf_put(b, x.value, x.vlen, &x.voff);
			x.key = b->data + x.koff;
			x.value = b->data + x.voff;
		}
		return try_value(t, link, starter, &x, x.value, x.vlen);
	}
	build_targets(t, link);
	int matched = 0;
	const struct crs_tlist *L = t->cur;
	if (link->pf_group) {
		const struct crs_pfgroup *g = crscache_group(t, link, L->tg, L->ntg);
		if (g && g->n == L->ntg)
			return run_grouped(t, link, starter, L, g);
	}
	for (size_t i = 0; i < L->ntg; i++) {
		const struct crs_target *tg = &L->tg[i];
		const char *v = tg->value;
		size_t vl = tg->vlen;
		int tfn_changed = 0, rc;
		int cur = 0;
		if (!link->multi_match && (link->ntfn || link->prefilter) && tg->stable) {
			struct crs_tcache *e = crscache_find(t, tg->value, tg->vlen, TC_CHAIN(link->chain));
			if (!e)
				e = crscache_transform(t, link, tg->value, tg->vlen);
			v = e->same ? e->src : t->tc_data.data + e->off;
			vl = e->len;  /* E goes stale at the prefilter's scan */
			/* @rx: no literal of its regex in the value, the regex cannot
			 * match (no PCRE2 run); @pm: whether a phrase is in it */
			if (link->prefilter) {
				t->pf_seen = crscache_pf_may_match(t, link, e, &t->pf_at) ? PF_SEEN_YES : PF_SEEN_NO;
				if (t->pf_seen == PF_SEEN_NO && !link->op.negated) {
					t->pf_seen = PF_SEEN_UNKNOWN;
					continue;  /* what try_value would conclude */
				}
			}
			rc = try_value(t, link, starter, tg, v, vl);
			t->pf_seen = PF_SEEN_UNKNOWN;
			if (rc == STOP)
				return STOP;
			matched |= rc == MATCH;
			continue;
		}
		if (link->multi_match && link->ntfn && tg->stable) {
			/* the operator on the value, then after each step that changed it */
			struct crs_walk w;
			crscache_walk_start(t, &w, tg->value, tg->vlen);
			rc = try_value(t, link, starter, tg, w.v, w.vl);
			matched |= rc == MATCH;
			for (int k = 0; rc != STOP && k < link->ntfn; k++) {
				if (crscache_step(t, &w, (enum sl_tfn)link->tfn[k])) {
					rc = try_value(t, link, starter, tg, w.v, w.vl);
					matched |= rc == MATCH;
				}
			}
			if (rc == STOP)
				return STOP;
			continue;
		}
		for (int k = 0; k < link->ntfn; k++) {
			if (link->multi_match && (k == 0 || tfn_changed)) {
				rc = try_value(t, link, starter, tg, v, vl);
				if (rc == STOP)
					return STOP;
				matched |= rc == MATCH;
			}
			struct buf *out = &t->val[cur];
			tfn_changed = sectfn_apply((enum sl_tfn)link->tfn[k], v, vl, out);
			buf_append(out, "", 1);
			out->len--;
			v = out->data;
			vl = out->len;
			cur ^= 1;
		}
		/* multiMatch: the operator ran before each step that follows a
		 * change; once more at the end only if the last step changed
		 * the value (ModSecurity 2.9.7; never with no steps at all) */
		if (!link->multi_match || tfn_changed) {
			rc = try_value(t, link, starter, tg, v, vl);
			if (rc == STOP)
				return STOP;
			matched |= rc == MATCH;
		}
	}
	return matched ? MATCH : NO_MATCH;
}

static int run_chain(struct crs_txn *t, const struct crs_rule *starter)
{
	t->acting = starter;
	for (const struct crs_rule *link = starter; link; link = link->chained) {
		int rc = run_rule(t, link, starter);
		if (rc != MATCH)
			return rc;
	}
	return MATCH;
}

/* Which variables can give a value in this phase: request data that is
 * empty cannot; the others (TX, MATCHED_VARS, ...) change as rules run and
 * count as present. */
static void find_present(struct crs_txn *t)
{
	const struct seccoll *c = &t->coll;
	const struct sc_list *L = c->list;
	uint64_t *m = t->present;
	m[0] = m[1] = ~0ull;
	struct { int var; int empty; } v[] = {
		{ SL_VAR_ARGS, !L[SC_ARGS_GET].n && !L[SC_ARGS_POST].n && !L[SC_ARGS_JSON].n },
		{ SL_VAR_ARGS_NAMES, !L[SC_ARGS_GET].n && !L[SC_ARGS_POST].n && !L[SC_ARGS_JSON].n },
		{ SL_VAR_ARGS_GET, !L[SC_ARGS_GET].n }, { SL_VAR_ARGS_GET_NAMES, !L[SC_ARGS_GET].n },
		{ SL_VAR_ARGS_POST, !L[SC_ARGS_POST].n }, { SL_VAR_ARGS_POST_NAMES, !L[SC_ARGS_POST].n },
		{ SL_VAR_REQUEST_COOKIES, !L[SC_COOKIES].n }, { SL_VAR_REQUEST_COOKIES_NAMES, !L[SC_COOKIES].n },
		{ SL_VAR_REQUEST_HEADERS, !L[SC_HEADERS].n }, { SL_VAR_REQUEST_HEADERS_NAMES, !L[SC_HEADERS].n },
		{ SL_VAR_FILES, !L[SC_FILES].n }, { SL_VAR_FILES_NAMES, !L[SC_FILES].n },
		{ SL_VAR_FILES_SIZES, !L[SC_FILES_SIZES].n }, { SL_VAR_MULTIPART_PART_HEADERS, !L[SC_PART_HEADERS].n },
		{ SL_VAR_QUERY_STRING, !c->query }, { SL_VAR_XML, !L[SC_XML].n }, { SL_VAR_GEO, 1 }, { SL_VAR_ENV, 1 },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (v[i].empty)
			m[v[i].var >> 6] &= ~(1ull << (v[i].var & 63));
}

static int run_phase(struct crs_txn *t, int phase)
{
	const struct crs_program *p = t->prog;
	t->phase = (uint8_t)phase;
	tc_clear(t);
	find_present(t);
	for (size_t i = 0; i < p->nphase[phase]; i++) {
		const struct crs_gate *g = &p->gate[phase][i];
		const struct crs_rule *cr = &p->phase[phase][i];
		if (t->engine == CRS_ENGINE_OFF || t->allowed)
			return 0;
		if (g->kind == SL_MARKER)
			continue;
		if ((t->rm_ids.len || t->nrm_tags) && removed_at_runtime(t, cr))
			continue;
		if (!g->reads_all && !(g->reads[0] & t->present[0]) && !(g->reads[1] & t->present[1]))
			continue;  /* no value to look at: no match, nothing run */
		if (crscache_group_rules_out(t, g))
			continue;  /* no value has a literal it needs: no match, nothing run */
		clear_matched(t);
		int rc = run_chain(t, cr);
		clear_matched(t);
		if (rc == STOP)
			return t->v.intercepted;
		if (rc == MATCH && cr->skip_after >= 0)
			i = (size_t)cr->skip_after;
	}
	return 0;
}

/* ---- the transaction -------------------------------------------------- */

void crs_txn_init(struct crs_txn *t)
{
	memset(t, 0, sizeof(*t));
	t->match_data = pcre2_match_data_create(10, NULL);
	AN(t->match_data);
	t->match_ctx = pcre2_match_context_create(NULL);
	AN(t->match_ctx);
	t->tl = calloc(CRS_TL_SLOTS + 1, sizeof(*t->tl));
	AN(t->tl);
}

static void rm_clear(struct crs_txn *t)
{
	for (size_t i = 0; i < t->nrm_tags; i++)
		pcre2_code_free(t->rm_tags[i]);
	t->nrm_tags = 0;
	for (size_t i = 0; i < t->nrm_targets; i++) {
		pcre2_code_free(t->rm_targets[i].tag_re);
		free(t->rm_targets[i].ids);
		free(t->rm_targets[i].target);
	}
	t->nrm_targets = 0;
	t->rm_ids.len = 0;
}

void crs_txn_free(struct crs_txn *t)
{
	rm_clear(t);
	free(t->rm_tags);
	free(t->rm_targets);
	buf_free(&t->rm_ids);
	seccoll_free(&t->coll);
	sectx_free(&t->tx);
	free(t->v.alerts);
	for (unsigned k = 0; t->tl && k <= CRS_TL_SLOTS; k++) {
		free(t->tl[k].tg);
		buf_free(&t->tl[k].buf);
	}
	free(t->tl);
	buf_free(&t->val[0]);
	buf_free(&t->val[1]);
	free(t->tc);
	buf_free(&t->tc_data);
	free(t->pf_bits);
	free(t->grp);
	free(t->grp_view);
	free(t->hdr);
	buf_free(&t->scratch);
	buf_free(&t->scratch2);
	buf_free(&t->tx_direct);
	buf_free(&t->mv_name);
	buf_free(&t->mv_value);
	buf_free(&t->mvs);
	free(t->mvs_len);
	pcre2_match_data_free(t->match_data);
	pcre2_match_context_free(t->match_ctx);
	injmemo_free(&t->inj);
	hs_free_scratch(t->hs_scratch);
	memset(t, 0, sizeof(*t));
}

/* Apache hands ModSecurity one header per name, repeats joined by ", ".
 * The joined values live in scratch, sized first so it never moves. */
static void merge_headers(struct crs_txn *t, const struct crs_request *rq, struct sc_header **out, size_t *nout)
{
	if (rq->nheaders > t->hdr_cap) {  /* kept across requests: no allocation once warm */
		t->hdr_cap = rq->nheaders;
		free(t->hdr);
		t->hdr = malloc(t->hdr_cap * sizeof(*t->hdr));
		AN(t->hdr);
	}
	struct sc_header *h = t->hdr;
	size_t n = 0, need = 1;
	for (size_t i = 0; i < rq->nheaders; i++)
		need += rq->headers[i].vlen + 2;
	t->scratch.len = 0;
	buf_reserve(&t->scratch, need);
	for (size_t i = 0; i < rq->nheaders; i++) {
		const struct sc_header *in = &rq->headers[i];
		size_t j = 0;
		while (j < n && !name_eq(h[j].name, h[j].nlen, in->name, in->nlen))
			j++;
		if (j < n)
			continue;  /* joined when its first occurrence was met */
		h[n] = *in;
		for (size_t k = i + 1; k < rq->nheaders; k++) {
			const struct sc_header *dup = &rq->headers[k];
			if (!name_eq(dup->name, dup->nlen, in->name, in->nlen))
				continue;
			if (h[n].value == in->value) {
				size_t off = t->scratch.len;
				buf_append(&t->scratch, in->value, in->vlen);
				h[n].value = t->scratch.data + off;
			}
			buf_append(&t->scratch, ", ", 2);
			buf_append(&t->scratch, dup->value, dup->vlen);
			h[n].vlen = (size_t)(t->scratch.data + t->scratch.len - h[n].value);
		}
		n++;
	}
	*out = h;
	*nout = n;
}

static const struct sc_header *find_header(const struct sc_header *h, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (name_eq(h[i].name, h[i].nlen, name, strlen(name)))
			return &h[i];
	return NULL;
}

static int ct_is(const struct sc_header *ct, const char *want)
{
	size_t n = strlen(want);
	return ct && ct->vlen >= n && strncasecmp(ct->value, want, n) == 0;
}

static void process_body(struct crs_txn *t, const struct sc_header *h, size_t nh)
{
	const struct crs_request *rq = t->rq;
	if (!t->body_access || !rq->body || rq->body_len == 0)
		return;
	t->body_processed = 1;
	switch (t->processor) {
	case CRS_BODY_URLENCODED:
		seccoll_urlencoded_body(&t->coll, rq->body, rq->body_len);
		break;
	case CRS_BODY_JSON:
		if (seccoll_json_body(&t->coll, rq->body, rq->body_len) < 0) {
			t->v.body_error = 1;
			snprintf(t->body_error_msg, sizeof(t->body_error_msg), "JSON parsing error");
		}
		break;
	case CRS_BODY_MULTIPART: {
		const struct sc_header *ct = find_header(h, nh, "content-type");
		if (seccoll_multipart_body(&t->coll, ct ? ct->value : "", ct ? ct->vlen : 0, rq->body, rq->body_len) < 0) {
			t->v.body_error = 1;
			snprintf(t->body_error_msg, sizeof(t->body_error_msg), "Multipart parsing error");
		}
		t->multipart = 1;
		break;
	}
	case CRS_BODY_XML:
		if (seccoll_xml_body(&t->coll, rq->body, rq->body_len, t->prog->xpaths, t->prog->nxpaths) < 0) {
			t->v.body_error = 1;
			snprintf(t->body_error_msg, sizeof(t->body_error_msg), "XML parsing error");
		}
		break;
	case CRS_BODY_NONE:
	default:
		break;
	}
}

int crs_eval_request(struct crs_txn *t, const struct crs_program *p, const struct crs_request *rq)
{
	t->prog = p;
	t->rq = rq;
	crscache_begin(t, p);
	if (p->hs_scratch && t->hs_serial != p->serial) {
		hs_free_scratch(t->hs_scratch);
		t->hs_scratch = NULL;
		AN(hs_clone_scratch(p->hs_scratch, (hs_scratch_t **)&t->hs_scratch) == HS_SUCCESS);
		t->hs_serial = p->serial;
	}
	/* a regex that gives up flags TX:MSC_PCRE_LIMITS_EXCEEDED (op_rx) */
	pcre2_set_match_limit(t->match_ctx, p->pcre_match_limit ? p->pcre_match_limit : 10000000);
	pcre2_set_depth_limit(t->match_ctx, p->pcre_depth_limit ? p->pcre_depth_limit : 10000000);
	seccoll_reset(&t->coll);
	sectx_reset(&t->tx);
	injmemo_clear(&t->inj);
	rm_clear(t);
	t->v.intercepted = 0;
	t->v.phase = 0;
	t->v.status = 0;
	t->v.rule_id = 0;
	t->v.body_error = 0;
	t->v.nalerts = 0;
	t->body_error_msg[0] = '\0';
	t->engine = p->engine;
	t->body_access = p->body_access;
	t->force_body_var = 0;
	t->allowed = 0;
	t->body_processed = 0;
	t->multipart = 0;
	t->mv_name.len = t->mv_value.len = 0;
	clear_matched(t);

	struct sc_header *h;
	size_t nh;
	merge_headers(t, rq, &h, &nh);
	seccoll_request(&t->coll, rq->method, rq->method_len, rq->target, rq->target_len, rq->protocol, rq->protocol_len, h, nh);
	const struct sc_header *ct = find_header(h, nh, "content-type");
	t->processor = ct_is(ct, "application/x-www-form-urlencoded") ? CRS_BODY_URLENCODED
		     : ct_is(ct, "multipart/form-data")		     ? CRS_BODY_MULTIPART
									     : CRS_BODY_NONE;
	if (!run_phase(t, 1) && !t->allowed && t->engine != CRS_ENGINE_OFF) {
		(void)seccoll_server_path(&t->coll);
		process_body(t, h, nh);
		(void)run_phase(t, 2);
	}
	return 0;
}

const char *crs_txn_tx(const struct crs_txn *t, const char *name, size_t *len)
{
	const struct sectx_var *v = sectx_get(&t->tx, SX_TX, name, strlen(name));
	if (!v)
		return NULL;
	if (len)
		*len = v->vlen;
	return sectx_str(&t->tx, v->value);
}

int crs_txn_tx_int(const struct crs_txn *t, const char *name)
{
	size_t n;
	const char *v = crs_txn_tx(t, name, &n);
	return v ? secop_atoi(v, n) : 0;
}
