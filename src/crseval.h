/* The Core Rule Set run on one request (issue 22): a compiled SecLang
 * program (crsprog.h) evaluated as ModSecurity 2.9 evaluates it, phase 1
 * on the request head, the body processor, phase 2 on the body. The rule
 * loop follows ModSecurity's: targets expanded per rule (exclusions
 * remove by name, &VAR counts), transformations per value, the operator,
 * and on every matched value MATCHED_VAR(S) set and the rule's
 * non-disruptive actions run (so a rule matching three arguments adds its
 * score three times); a chain's disruptive action and alert only when its
 * last link matched; skipAfter to its marker; ctl: changes for the rest of
 * the transaction.
 *
 * A crs_txn is per worker and reused: its buffers keep their capacity. */
#ifndef SLUICE_CRSEVAL_H
#define SLUICE_CRSEVAL_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"
#include "crsprog.h"
#include "injmemo.h"
#include "seccoll.h"
#include "sectx.h"

struct crs_request {
	const char *method, *target, *protocol;
	size_t method_len, target_len, protocol_len;
	const struct sc_header *headers;   /* as received, in order */
	size_t nheaders;
	const char *body;                  /* the whole body, de-chunked; NULL for none */
	size_t body_len;
	const char *remote_addr;           /* the client's address as text */
	uint16_t remote_port;
};

/* One alert: a rule (or whole chain) that matched one value and reached
 * its disruptive step (ModSecurity writes one message per such match). */
struct crs_alert {
	const struct crs_rule *rule;   /* the chain starter: id, msg, tags, severity */
	uint8_t phase;
	uint8_t logged;                /* log (not nolog): what an audit log lists */
	uint8_t secaction;             /* an unconditional SecAction */
	uint8_t intercepted;           /* this one denied the request */
};

struct crs_verdict {
	uint8_t intercepted;           /* a deny/drop/redirect ran in blocking mode */
	uint8_t phase;                 /* where */
	uint16_t status;               /* the answer it asks for */
	uint32_t rule_id;              /* the rule that intercepted */
	uint8_t body_error;            /* the body processor failed (REQBODY_ERROR) */
	struct crs_alert *alerts;      /* in order */
	size_t nalerts, alerts_cap;
};

struct crs_target;
struct crs_tlist;
#define CRS_TL_SLOTS 8
struct crs_rmtarget;
struct crs_tcache;
struct crs_pfgroup;

struct crs_txn {
	const struct crs_program *prog;
	const struct crs_request *rq;
	struct seccoll coll;
	struct sectx tx;
	struct crs_verdict v;

	/* target lists: kept ones by signature, then a scratch one */
	struct crs_tlist *tl;          /* [CRS_TL_SLOTS + 1] */
	struct crs_tlist *cur;         /* the rule being run's */
	unsigned tl_next;
	struct buf val[2];             /* transformation steps */
	/* values already transformed in this phase, by (where the value is, chain) */
	struct crs_tcache *tc;
	size_t tc_cap, tc_n;
	uint32_t tc_epoch;
	struct buf tc_data;
	uint64_t *pf_bits;             /* prefilter results of cached values (crs_tcache.pf) */
	size_t pf_n, pf_cap;
	uint8_t pf_seen;               /* enum crs_pf_seen: the prefilter's word on the value being tried */
	uint32_t pf_at;                /* with PF_SEEN_YES: that value's bits (an offset in pf_bits) */
	struct crs_pfgroup *grp;       /* per prefilter group of the program (crscache.h) */
	size_t grp_cap;
	uint32_t *grp_view;            /* the groups' values' bits (offsets in pf_bits) */
	size_t grp_view_n, grp_view_cap;
	struct buf scratch;            /* macro expansions */
	struct sc_header *hdr;         /* the request's headers as Apache merges them */
	size_t hdr_cap;
	struct buf scratch2;
	struct buf tx_direct;          /* a tx_direct rule's "TX:name" NUL value NUL */
	void *hs_scratch;              /* hs_scratch_t *, cloned from the program's */
	uint64_t hs_serial;            /* the program it was cloned for */
	void *match_data;              /* pcre2_match_data * */
	void *match_ctx;               /* pcre2_match_context * */
	struct injmemo inj;            /* @detectSQLi/@detectXSS answers by content */

	/* MATCHED_VAR(_NAME) and MATCHED_VARS(_NAMES) of the rule or chain being run */
	struct buf mv_name, mv_value;
	struct buf mvs;                /* name NUL value NUL pairs, lengths in mvs_len */
	uint32_t *mvs_len;
	size_t nmvs, mvs_cap;

	const struct crs_rule *acting; /* the chain starter being run (for %{rule.*}) */
	uint64_t present[2];           /* variables (enum sl_var bits) that may have values this phase */
	uint8_t phase;
	uint8_t engine;                /* enum crs_engine, ctl:ruleEngine can change it */
	uint8_t body_access;
	uint8_t force_body_var;
	uint8_t processor;             /* enum crs_body_processor */
	uint8_t allowed;               /* allow ran: no more rules */
	uint8_t body_processed;        /* REQUEST_BODY and the body arguments exist */
	uint8_t multipart;             /* the multipart processor ran */
	char body_error_msg[128];

	/* ctl: exclusions for this transaction */
	struct buf rm_ids;             /* ruleRemoveById ranges, NUL-separated */
	void **rm_tags;                /* ruleRemoveByTag regexes */
	size_t nrm_tags, rm_tags_cap;
	struct crs_rmtarget *rm_targets;
	size_t nrm_targets, rm_targets_cap;
};

enum crs_pf_seen { PF_SEEN_UNKNOWN, PF_SEEN_NO, PF_SEEN_YES };

enum crs_body_processor { CRS_BODY_NONE, CRS_BODY_URLENCODED, CRS_BODY_JSON, CRS_BODY_MULTIPART, CRS_BODY_XML };

void crs_txn_init(struct crs_txn *t);
void crs_txn_free(struct crs_txn *t);

/* Run phases 1 and 2 of P on RQ. The verdict and the alerts are in t->v
 * until the next call; TX variables can be read with crs_txn_tx. Returns 0,
 * or -1 when a rule could not run (t->v.body_error_msg says why). */
int crs_eval_request(struct crs_txn *t, const struct crs_program *p, const struct crs_request *rq);

/* TX:NAME's value (NULL when unset), and as a number (0 when unset). */
const char *crs_txn_tx(const struct crs_txn *t, const char *name, size_t *len);
int crs_txn_tx_int(const struct crs_txn *t, const char *name);

/* The rule's id: the chain starter's, 0 for a marker. */
static inline uint32_t crs_rule_id(const struct crs_rule *r)
{
	return r->id;
}

#endif
