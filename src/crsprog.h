/* A SecLang ruleset (seclang.h) compiled for running (issue 22): per phase,
 * the rules in file order with their transformation chains resolved
 * (SecDefaultAction's inherited unless t:none), operators prepared
 * (regexes compiled as ModSecurity compiles them, phrase lists read,
 * networks parsed, byte ranges as bitmaps), skipAfter resolved to the
 * marker's place. Built once, at config load, by the master; read-only
 * afterwards, so forked workers share it. Anything the engine cannot run
 * is an error naming the rule's file and line, unless the rule's id is in
 * the skip list (then it is dropped, and counted). */
#ifndef SLUICE_CRSPROG_H
#define SLUICE_CRSPROG_H

#include <stddef.h>
#include <stdint.h>
#include "cidrset.h"
#include "seclang.h"
#include "sectx.h"

#define CRS_MAX_TFN 16

struct crs_phrases {           /* @pm / @pmFromFile: lowercased phrases */
	char **v;
	size_t *len;
	size_t n;
	void *hs;                  /* hs_database_t *: all of them, literal, caseless */
};

struct crs_op {
	uint8_t kind;              /* enum sl_op */
	uint8_t negated;
	uint8_t has_macro;         /* the argument holds %{...}: expanded per request */
	uint8_t jit;               /* re is JIT-compiled and not UTF: matched through pcre2_jit_match */
	const char *arg;           /* the parsed rule's (macros not expanded) */
	void *re;                  /* pcre2_code *: @rx without macros */
	union {                    /* by kind: each operator's own (a rule is 56 bytes shorter) */
		struct crs_phrases pm;     /* @pm, @pmf, @pmFromFile */
		struct cidrset ips;        /* @ipMatch */
		long long num;             /* @eq @ge @gt @le @lt without macros */
		struct {
			uint8_t bytes[32];         /* @validateByteRange: allowed bytes */
			int16_t lone_forbidden;    /* the byte, when exactly one is out of range (a
						    * memchr finds it), else -1 */
		};
	};
};

/* A /regex/ target selector. Most of CRS's are a literal, anchored or not
 * (TX:/^header_name_/, or paramcounter_ followed by dot-star), and one runs on every
 * TX variable once per request header: those compare the name instead. */
struct crs_selre {
	void *re;                  /* pcre2_code *, always compiled */
	char *lit;                 /* the regex as a caseless ASCII literal, or NULL */
	uint16_t litlen;
	uint8_t anchored;          /* ^literal: a prefix; else anywhere in the name */
};

struct crs_branch {
	void *re;                  /* pcre2_code * */
	uint8_t jit;               /* as crs_op.jit */
};

enum { TX_DIRECT_NONE, TX_DIRECT_VALUE, TX_DIRECT_COUNT };

/* A compiled rule: three cache lines (what run_phase reads to pass a rule
 * over is in its crs_gate). */
struct crs_rule {
	const struct sl_rule *src; /* the parsed rule: targets, actions, file, line */
	uint8_t kind;              /* enum sl_kind, the parsed rule's */
	/* Its one target is TX:name (TX_DIRECT_VALUE) or &TX:name
	 * (TX_DIRECT_COUNT), with no transformation, not multiMatch: run
	 * straight from the store, no target list built (CRS has a few such
	 * rules per file, the paranoia-level checks, and its initialisation's
	 * "&TX:x @eq 0" defaults). */
	uint8_t tx_direct;
	uint16_t prefilter;        /* @rx, @pm: 1 + its bit in its chain's prefilter; 0 none (the operator runs alone) */
	uint16_t pf_group;         /* 1 + its prefilter group (crscache.h): the rules with a prefilter bit,
				    * the same target list (tsig, no counts) and chain; 0 none */
	int32_t skip_after;        /* index in its phase's list to continue after, -1 none */
	uint32_t tx_hash;          /* sectx_hash of the name */
	char *tx_name;             /* the name lowercased, as CRS's setvars write them: the store's
				    * exact compare then finds it without the caseless one */
	const struct sl_target *targets; /* the parsed rule's, read on every run without going through src */
	uint32_t ntargets;
	uint32_t id;               /* the parsed rule's (0 for a chained rule or a marker): alerts and
				    * the Lua result read it for every match, src is a cache miss away */
	struct crs_op op;          /* kind and negated first */
	uint8_t tfn[CRS_MAX_TFN];  /* enum sl_tfn, in order, t:none already applied */
	uint8_t ntfn;
	uint16_t chain;            /* the tfn sequence's number: equal sequences, equal numbers */
	uint8_t disruptive;        /* enum sl_act: the rule's, or its SecDefaultAction's (block
				    * resolved to the SecDefaultAction's); 0 none */
	uint8_t capture;           /* @rx/@pm captures go to TX:0..9 */
	uint8_t multi_match;       /* the operator runs after every changing transformation */
	uint8_t log;               /* its alerts are logged (log, the default) or not (nolog) */
	uint16_t status;           /* status:N, 0 none */
	uint32_t tsig;             /* its targets read only request data (fixed for a phase): equal
				    * target lists, equal numbers; 0 otherwise */
	struct crs_selre *sel_re;  /* per target: its /regex/ selector, all NULL for the others */
	struct crs_act *acts;      /* what a match runs (setvar, ctl, initcol), in order */
	uint16_t nacts;
	/* @rx as the branches of its outermost alternation (rxlit_branches),
	 * each with a prefilter bit of its own, branch_bit + k: a value whose
	 * literals leave few candidates runs only those. NULL: it runs whole. */
	uint16_t nbranch;
	uint16_t branch_bit;
	struct crs_branch *branch;
	/* A multiMatch @rx runs on values its chain's prefilter never saw (each
	 * step's): its own literal database, hs_database_t *, scanned before
	 * PCRE2 when PCRE2 has no literal of its own to look for. */
	void *lits;
	struct crs_rule *chained;
};

/* What run_phase reads of a rule to pass it over, copied into an array of
 * their own (24 bytes a rule, against three cache lines of crs_rule): a phase's
 * rules are all walked on every request, and most are passed over. */
struct crs_gate {
	/* The variables (enum sl_var bits) the rule reads, exclusions aside;
	 * with none of them present a request gives it no value, and it cannot
	 * match. reads_all: it has a value anyway (a count, a SecAction). */
	uint64_t reads[2];
	uint16_t pf_group;         /* crs_rule.pf_group */
	uint16_t prefilter;        /* crs_rule.prefilter */
	uint8_t kind;              /* enum sl_kind */
	uint8_t reads_all;
	uint8_t negated;           /* its operator's */
};

/* One of the actions a match runs; a setvar read once (sectx.h). */
struct crs_act {
	uint8_t act;               /* enum sl_act */
	const char *value;
	struct sectx_setvar setvar;
};

/* A byte that is a literal of its own, and the bits of the rules it is a
 * literal of (one_bits[first..first+n)): looked up in the value's set of
 * bytes instead of the scan, where one-byte literals would make Hyperscan
 * confirm at nearly every position (CRS's chains have dozens). */
struct crs_onebyte {
	uint8_t byte;
	uint32_t first, n;
};

/* Per transformation chain: the required literals (rxlit.h) of its @rx
 * rules, each literal's id the rule's bit. A value no literal of a rule
 * occurs in cannot match that rule's regex. */
struct crs_prefilter {
	void *hs;                  /* hs_database_t *, NULL when the chain has none */
	uint16_t *bit;             /* literal id -> its rule's bit (ids are distinct: Hyperscan
				    * compiles many literals sharing an id far slower) */
	unsigned nbits;
	struct crs_onebyte *one;   /* distinct bytes, both cases of a letter (the scan is caseless) */
	uint16_t *one_bits;
	unsigned none;
	uint64_t one_mask[4];      /* one's bytes as a set: ANDed with a value's set of bytes */
	uint8_t one_at[256];       /* byte -> its index in one (valid for the bytes of one_mask) */
};

enum crs_engine { CRS_ENGINE_OFF, CRS_ENGINE_DETECTION_ONLY, CRS_ENGINE_ON };

struct crs_program {
	struct seclang sl;         /* owned: the rules point into it */
	uint8_t engine;            /* SecRuleEngine, enum crs_engine (DetectionOnly if never set) */
	uint8_t body_access;       /* SecRequestBodyAccess On */
	size_t body_limit;         /* SecRequestBodyNoFilesLimit (bodies without files) */
	uint32_t pcre_match_limit; /* SecPcreMatchLimit, SecPcreMatchLimitRecursion (PCRE2's
				    * match and depth limits); 0: PCRE2's defaults */
	uint32_t pcre_depth_limit;
	struct crs_rule *phase[6]; /* [1..5]; markers are rules with kind SL_MARKER */
	struct crs_gate *gate[6];  /* [1..5]: phase[ph][i]'s at gate[ph][i] */
	size_t nphase[6];
	unsigned skipped;          /* rules dropped by the skip list */
	const char **xpaths;       /* the XML:... expressions rules read (into sl's strings) */
	size_t nxpaths;
	void *hs_scratch;          /* hs_scratch_t *: fits every database, cloned per transaction */
	uint8_t (*chains)[CRS_MAX_TFN + 1];  /* distinct tfn sequences: length, then the steps */
	unsigned nchains;
	struct crs_prefilter *pf;  /* [nchains] */
	unsigned npf_groups;       /* distinct crs_rule.pf_group */
	unsigned pf_rules;         /* @rx rules with a prefilter (and all @rx rules: rx_rules) */
	unsigned rx_rules;
	uint64_t serial;           /* unique per compiled program: a transaction's scratch is for one */
	char error[512];
};

/* Compile SL (taken over: *sl is emptied). SKIP lists rule ids to drop
 * (NSKIP of them). Returns 0, or -1 with p->error; either way
 * crs_program_free releases everything. */
int crs_compile(struct crs_program *p, struct seclang *sl, const uint32_t *skip, size_t nskip);
void crs_program_free(struct crs_program *p);

#endif
