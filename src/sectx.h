/* ModSecurity's per-request variables that rules write (TX, and the
 * collections initcol opens: IP, GLOBAL, SESSION, USER, RESOURCE), the
 * setvar action, and %{...} macro expansion, each as ModSecurity 2.9 does
 * it (issue 22). Pure; names are matched without regard to ASCII case. */
#ifndef SLUICE_SECTX_H
#define SLUICE_SECTX_H

#include <stddef.h>
#include <stdint.h>
#include "buf.h"

enum sectx_coll { SX_TX, SX_IP, SX_GLOBAL, SX_SESSION, SX_USER, SX_RESOURCE, SX__COLLS };

struct sectx_var {
	uint8_t coll;              /* enum sectx_coll */
	uint32_t hash;             /* of the name, caseless: most lookups compare only this */
	uint32_t name, nlen;       /* offsets into the store's arena */
	uint32_t value, vlen;
};

struct sectx {
	struct buf arena;          /* names and values; a changed value is appended anew */
	struct sectx_var *v;
	uint32_t n, cap;
	uint32_t *idx;             /* open addressing by hash: 1 + index into v, 0 empty */
	uint32_t idx_cap;          /* a power of two, at least twice n */
	uint8_t open[SX__COLLS];   /* TX is always open; others once initcol opened them */
	struct buf scratch[2];     /* setvar's expanded name and value, kept for the next */
	uint16_t tx_digits;        /* which of TX:0..TX:9 exist (bit per digit): a capture unsets
				    * the ones it did not fill, and most never were */
};

void sectx_reset(struct sectx *t);

/* Whether TX:D (D a digit, 0..9) exists. */
static inline int sectx_tx_digit(const struct sectx *t, int d)
{
	return t->tx_digits >> d & 1;
}
void sectx_free(struct sectx *t);

/* "tx", "ip", ... → enum sectx_coll, -1 for another name. */
int sectx_coll(const char *name, size_t len);
const struct sectx_var *sectx_get(const struct sectx *t, int coll, const char *name, size_t nlen);
/* The hash sectx_get computes for NAME in COLL, for a name known before the
 * request (a rule's TX:name), and the lookup that takes it. */
uint32_t sectx_hash(int coll, const char *name, size_t nlen);
const struct sectx_var *sectx_get_hashed(const struct sectx *t, int coll, const char *name, size_t nlen, uint32_t hash);
void sectx_set(struct sectx *t, int coll, const char *name, size_t nlen, const char *value, size_t vlen);
void sectx_unset(struct sectx *t, int coll, const char *name, size_t nlen);
static inline const char *sectx_str(const struct sectx *t, uint32_t off)
{
	return t->arena.data + off;
}

/* A macro's variable: NAME (the part before the first '.') and, when there
 * is one, PARAM after it. Appends its value to OUT and returns 1, or
 * returns 0 when the variable does not exist or has no value. */
typedef int (*sectx_resolve_fn)(void *ctx, const char *name, size_t nlen, const char *param, size_t plen,
				struct buf *out);

/* TEMPLATE with %{NAME} and %{NAME.PARAM} macros, into OUT (appended). A
 * macro that resolves to nothing expands to nothing; a '%' that does not
 * start a closed macro stays as it is. */
void sectx_expand(const char *tpl, size_t len, sectx_resolve_fn fn, void *ctx, struct buf *out);

/* setvar:SPEC, quotes already removed: "col.name=value" (the value
 * expanded), "col.name=+N" / "=-N" (the old value read as a number, or 0,
 * plus or minus the expanded N, never below 0), "col.name" (sets "1"),
 * "!col.name" (unsets); the name is expanded first. A name without a
 * collection, or in a collection that is not open, changes nothing.
 * Returns 1 if a variable changed, 0 if not. */
int sectx_setvar(struct sectx *t, const char *spec, size_t len, sectx_resolve_fn fn, void *ctx);

/* A setvar SPEC read once, when the rules are compiled: a name without
 * macros has its collection, name and hash found here, a value without
 * macros is used as it is, and running it does what sectx_setvar(SPEC)
 * does with none of the parsing or expansion. A name with a macro, or an
 * unknown collection, keeps the general path. SPEC must outlive it. */
struct sectx_setvar {
	const char *spec;          /* the whole spec, for the general path */
	uint32_t len;
	int8_t coll;               /* enum sectx_coll, -1: the general path */
	uint8_t unset;             /* "!col.name" */
	uint8_t arith;             /* "=+N" / "=-N" */
	uint8_t value_macro;       /* the value has a %{...} to expand */
	const char *name;          /* after "col." */
	uint32_t nlen, hash;
	const char *value;         /* after '=' and leading whitespace ("1" without '=') */
	uint32_t vlen;
};
void sectx_setvar_compile(struct sectx_setvar *c, const char *spec, size_t len);
int sectx_setvar_run(struct sectx *t, const struct sectx_setvar *c, sectx_resolve_fn fn, void *ctx);

#endif
