/* Required literals of a regex (rxlit.h says what for). A recursive
 * descent over PCRE2's syntax computes, per node, either its exact
 * language (a small set of strings), or a set one of which every match
 * contains, or nothing known. A sequence keeps the best set among its
 * runs of exact pieces; an alternation needs a set from every branch. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "rxlit.h"
#include "util.h"

#define EXACT_CAP 64     /* strings an exact language may have */
#define REQ_CAP   4096   /* strings a required set may have */
#define LIT_MAX   64     /* longest string an exact language keeps */
#define CLASS_CAP 6      /* a character class of more bytes is "any byte" */
#define DEPTH_MAX 200

struct lit {
	char *s;
	size_t len;
};

struct sset {
	struct lit *v;
	size_t n, cap;
};

enum kind { K_ANY, K_EXACT, K_REQ };

struct info {
	enum kind k;       /* K_EXACT: SET is the whole language (may hold "");
			    * K_REQ: every match contains one of SET (none empty) */
	struct sset set;
	/* Not K_EXACT: every match starts with one of the bytes of FB (folded)
	 * when HAS_FB. What follows an exact run in a sequence then gives
	 * longer literals than either alone: "/" then "." or "%" is "/." or
	 * "/%", rarer than both. */
	int has_fb;
	uint8_t fb[32];
};

struct rx {
	const char *p;
	size_t i, n;
	int bad;           /* not understood: the whole pattern gets no set */
	int depth;
	int transparent;   /* the last atom was a comment, an option setting or \E:
			    * PCRE2 applies a quantifier after it to the atom before */
	/* For rxlit_branches: where the outermost alternation splits, and
	 * what would make its branches mean something else alone. */
	size_t cuts[RXLIT_BRANCHES_MAX];
	size_t ncuts;
	int split;         /* record the cuts (rxlit_branches) */
	int too_many;      /* more branches than cuts can hold */
	int captures;      /* a capturing group: group numbers would move */
	int refs;          /* a back reference, subroutine call or \K */
	int outer_option;  /* an option setting (?i) in the outermost alternation: it
			    * carries into the branches after it */
	int fragile;       /* a lookaround or a {0} quantifier: PCRE2 10.42's start-of-match
			    * optimisation mis-reads some of them in a pattern of their own
			    * ("(?=a).?a" misses "a", which "(?=a).?a|b" matches) */
};

static unsigned char fold(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + 32) : c;
}

static void set_push(struct sset *s, const char *a, size_t al, const char *b, size_t bl)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		AN(s->v);
	}
	char *m = malloc(al + bl + 1);
	AN(m);
	if (al)
		memcpy(m, a, al);
	if (bl)
		memcpy(m + al, b, bl);
	m[al + bl] = 0;
	s->v[s->n++] = (struct lit){ m, al + bl };
}

static int set_has(const struct sset *s, const char *a, size_t al)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i].len == al && (al == 0 || memcmp(s->v[i].s, a, al) == 0))
			return 1;
	return 0;
}

static void set_free(struct sset *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i].s);
	free(s->v);
	*s = (struct sset){ 0 };
}

static struct info any(void)
{
	return (struct info){ .k = K_ANY };
}

static struct info exact_str(const char *s, size_t n)
{
	struct info x = { .k = K_EXACT };
	set_push(&x.set, s, n, NULL, 0);
	return x;
}

static struct info empty(void)
{
	return exact_str("", 0);
}

static struct info byte(unsigned char c)
{
	char b = (char)fold(c);
	return exact_str(&b, 1);
}

static void info_free(struct info *x)
{
	set_free(&x->set);
	x->k = K_ANY;
	x->has_fb = 0;
}

/* Whether every match of X starts with a byte of OUT (a 256-bit set). */
static int first_bytes(const struct info *x, uint8_t out[32])
{
	if (x->k != K_EXACT) {
		if (x->has_fb)
			memcpy(out, x->fb, 32);
		return x->has_fb;
	}
	if (!x->set.n)
		return 0;
	memset(out, 0, 32);
	for (size_t i = 0; i < x->set.n; i++) {
		if (!x->set.v[i].len)
			return 0;
		unsigned char c = (unsigned char)x->set.v[i].s[0];
		out[c >> 3] |= (uint8_t)(1u << (c & 7));
	}
	return 1;
}

/* X (not exact) starts with a byte of FB when KNOWN. */
static struct info with_fb(struct info x, int known, const uint8_t fb[32])
{
	if (x.k == K_EXACT)
		return x;
	x.has_fb = known;
	if (known)
		memcpy(x.fb, fb, 32);
	return x;
}

static size_t max_len(const struct sset *s)
{
	size_t m = 0;
	for (size_t i = 0; i < s->n; i++)
		m = s->v[i].len > m ? s->v[i].len : m;
	return m;
}

/* An exact language as a requirement: impossible when it holds "". */
static struct info to_req(struct info x)
{
	if (x.k != K_EXACT)
		return x;
	uint8_t fb[32];
	int known = first_bytes(&x, fb);
	if (set_has(&x.set, "", 0) || x.set.n > REQ_CAP) {
		info_free(&x);
		return with_fb(any(), known, fb);
	}
	x.k = K_REQ;
	return with_fb(x, known, fb);
}

/* How rarely a literal occurs in ordinary text: letters, digits and
 * spaces are everywhere, punctuation less so; longer is rarer. */
static unsigned strength(const struct lit *l)
{
	unsigned w = 0;
	for (size_t i = 0; i < l->len && w < 12; i++) {
		unsigned char c = (unsigned char)l->s[i];
		w += (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ' ' ? 1 : 3;
	}
	return w < 12 ? w : 12;
}

static unsigned weakest(const struct sset *s)
{
	unsigned m = UINT_MAX;
	for (size_t i = 0; i < s->n; i++) {
		unsigned w = strength(&s->v[i]);
		m = w < m ? w : m;
	}
	return m;
}

/* Higher is more selective: the weakest literal's strength, then fewer
 * literals. */
static long score(const struct sset *s)
{
	return (long)weakest(s) * 100000 - (long)s->n;
}

/* Keep the better of BEST and CAND (both consumed into BEST). */
static void consider(struct info *best, struct info cand)
{
	cand = to_req(cand);
	if (cand.k != K_REQ)
		return;
	if (best->k == K_REQ && score(&best->set) >= score(&cand.set)) {
		info_free(&cand);
		return;
	}
	info_free(best);
	*best = cand;
}

static int cross_ok(const struct info *a, const struct info *b)
{
	return a->set.n * b->set.n <= EXACT_CAP && max_len(&a->set) + max_len(&b->set) <= LIT_MAX;
}

static struct info cross(struct info a, struct info b)
{
	struct info x = { .k = K_EXACT };
	for (size_t i = 0; i < a.set.n; i++)
		for (size_t j = 0; j < b.set.n; j++)
			set_push(&x.set, a.set.v[i].s, a.set.v[i].len, b.set.v[j].s, b.set.v[j].len);
	info_free(&a);
	info_free(&b);
	return x;
}

static struct info alt2_sets(struct info a, struct info b);

/* A match of A|B starts with a byte that starts A's or B's. */
static struct info alt2(struct info a, struct info b)
{
	uint8_t fb_a[32], fb_b[32];
	int known = first_bytes(&a, fb_a) && first_bytes(&b, fb_b);
	for (int i = 0; known && i < 32; i++)
		fb_a[i] |= fb_b[i];
	return with_fb(alt2_sets(a, b), known, fb_a);
}

static struct info alt2_sets(struct info a, struct info b)
{
	if (a.k == K_EXACT && b.k == K_EXACT && a.set.n + b.set.n <= EXACT_CAP) {
		for (size_t i = 0; i < b.set.n; i++)
			if (!set_has(&a.set, b.set.v[i].s, b.set.v[i].len))
				set_push(&a.set, b.set.v[i].s, b.set.v[i].len, NULL, 0);
		info_free(&b);
		return a;
	}
	a = to_req(a);
	b = to_req(b);
	if (a.k != K_REQ || b.k != K_REQ || a.set.n + b.set.n > REQ_CAP) {
		info_free(&a);
		info_free(&b);
		return any();
	}
	for (size_t i = 0; i < b.set.n; i++)
		set_push(&a.set, b.set.v[i].s, b.set.v[i].len, NULL, 0);
	info_free(&b);
	return a;
}

static int peek(const struct rx *r)
{
	return r->i < r->n ? (unsigned char)r->p[r->i] : -1;
}

static int hexval(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* \x.. after the x: its byte, or -1 (and bad) when not one byte. */
static int hex_escape(struct rx *r)
{
	int v = 0;
	if (peek(r) == '{') {
		r->i++;
		int digits = 0;
		while (hexval(peek(r)) >= 0 && v <= 0xff)
			v = v * 16 + hexval(r->p[r->i++]), digits++;
		if (peek(r) != '}' || !digits || v > 0xff) {
			r->bad = 1;
			return -1;
		}
		r->i++;
		return v;
	}
	for (int k = 0; k < 2 && hexval(peek(r)) >= 0; k++)
		v = v * 16 + hexval(r->p[r->i++]);
	return v;
}

/* \0 then up to two more octal digits. */
static int octal_escape(struct rx *r)
{
	int v = 0;
	for (int k = 0; k < 2 && peek(r) >= '0' && peek(r) <= '7'; k++)
		v = v * 8 + (r->p[r->i++] - '0');
	return v;
}

/* \p{..} \P{..} \pL: skip the property name. */
static void skip_property(struct rx *r)
{
	if (peek(r) == '{') {
		while (r->i < r->n && r->p[r->i] != '}')
			r->i++;
		if (r->i < r->n)
			r->i++;
		else
			r->bad = 1;
	} else if (r->i < r->n) {
		r->i++;
	}
}

/* A byte escape common to classes and the rest (after the backslash):
 * the byte, -2 when C is not one of them. */
static int byte_escape(struct rx *r, int c)
{
	switch (c) {
	case 'n': return '\n';
	case 'r': return '\r';
	case 't': return '\t';
	case 'f': return '\f';
	case 'e': return 27;
	case 'a': return 7;
	case 'x': return hex_escape(r);
	case '0': return octal_escape(r);
	default:
		if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
			return -2;
		return c;  /* an escaped punctuation or other byte stands for itself */
	}
}

static struct info parse_alt(struct rx *r);

static struct info parse_escape(struct rx *r)
{
	if (r->i >= r->n) {
		r->bad = 1;
		return any();
	}
	int c = (unsigned char)r->p[r->i++];
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S': case 'h': case 'H':
	case 'v': case 'V': case 'R': case 'N': case 'X': case 'C':
		return any();
	case 'p': case 'P':
		skip_property(r);
		return any();
	case 'E':
		r->transparent = 1;
		return empty();
	case 'K':
		r->refs = 1;
		return empty();
	case 'b': case 'B': case 'A': case 'Z': case 'z': case 'G':
		return empty();
	case 'c':  /* a control character: some byte */
		if (r->i < r->n)
			r->i++;
		return any();
	case 'g': case 'k': {  /* a back reference or subroutine call: something */
		r->refs = 1;
		int open = peek(r), close = open == '{' ? '}' : open == '<' ? '>' : open == '\'' ? '\'' : 0;
		if (close) {
			while (++r->i < r->n && r->p[r->i] != close)
				;
			if (r->i >= r->n)
				r->bad = 1;
			else
				r->i++;
		} else {
			if (peek(r) == '-' || peek(r) == '+')
				r->i++;
			while (peek(r) >= '0' && peek(r) <= '9')
				r->i++;
		}
		return any();
	}
	case 'Q':  /* quoting: a quantifier after it binds to its last byte; not worth it */
		r->bad = 1;
		return any();
	default:
		break;
	}
	if (c >= '1' && c <= '9') {  /* a back reference (or an octal byte): something */
		r->refs = 1;
		while (peek(r) >= '0' && peek(r) <= '9')
			r->i++;
		return any();
	}
	int b = byte_escape(r, c);
	if (b == -2 || r->bad) {
		r->bad = 1;
		return any();
	}
	return byte((unsigned char)b);
}

/* One member of a class: its byte, or -1 for a set (\d, [:alpha:], ...). */
static int class_member(struct rx *r)
{
	int c = (unsigned char)r->p[r->i++];
	if (c == '[' && peek(r) == ':') {
		const char *end = memmem(r->p + r->i, r->n - r->i, ":]", 2);
		if (!end) {
			r->bad = 1;
			return -1;
		}
		r->i = (size_t)(end - r->p) + 2;
		return -1;
	}
	if (c != '\\')
		return c;
	if (r->i >= r->n) {
		r->bad = 1;
		return -1;
	}
	c = (unsigned char)r->p[r->i++];
	switch (c) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S': case 'h': case 'H': case 'v': case 'V':
		return -1;
	case 'p': case 'P':
		skip_property(r);
		return -1;
	case 'b':
		return 8;
	default:
		break;
	}
	int b = byte_escape(r, c);
	if (b < 0 || r->bad) {
		r->bad = 1;
		return -1;
	}
	return b;
}

static struct info parse_class(struct rx *r)
{
	unsigned char in[256] = { 0 };
	int neg = 0, big = 0, first = 1;
	if (peek(r) == '^') {
		neg = 1;
		r->i++;
	}
	for (;;) {
		if (r->i >= r->n || r->bad) {
			r->bad = 1;
			return any();
		}
		if (r->p[r->i] == ']' && !first) {
			r->i++;
			break;
		}
		first = 0;
		int lo = class_member(r);
		if (lo < 0) {
			big = 1;
			continue;
		}
		int hi = lo;
		if (peek(r) == '-' && r->i + 1 < r->n && r->p[r->i + 1] != ']') {
			r->i++;
			hi = class_member(r);
			if (hi < lo) {  /* "a-\d" is literal '-' in PCRE; not worth following */
				r->bad = 1;
				return any();
			}
		}
		for (int c = lo; c <= hi; c++)
			in[fold((unsigned char)c)] = 1;
	}
	if (neg || big)
		return any();
	struct info x = { .k = K_EXACT };
	for (int c = 0; c < 256; c++)
		if (in[c]) {
			if (x.set.n == CLASS_CAP) {
				info_free(&x);
				return any();
			}
			char b = (char)c;
			set_push(&x.set, &b, 1, NULL, 0);
		}
	return x;
}

/* After "(": what the group matches. */
static struct info parse_group(struct rx *r)
{
	int zero_width = 0;
	if (peek(r) == '*') {  /* (*VERB) */
		r->bad = 1;
		return any();
	}
	if (peek(r) != '?')
		r->captures = 1;
	if (peek(r) == '?') {
		r->i++;
		int c = peek(r);
		if (c < 0) {
			r->bad = 1;
			return any();
		}
		if (c == ':' || c == '>' || c == '|') {
			r->i++;
		} else if (c == '=' || c == '!') {
			r->i++;
			zero_width = 1;
		} else if (c == '<' && r->i + 1 < r->n && (r->p[r->i + 1] == '=' || r->p[r->i + 1] == '!')) {
			r->i += 2;
			zero_width = 1;
		} else if (c == '<' || c == '\'' || (c == 'P' && r->i + 1 < r->n && r->p[r->i + 1] == '<')) {
			r->captures = 1;
			int close = c == '\'' ? '\'' : '>';
			while (++r->i < r->n && r->p[r->i] != close)
				;
			if (r->i >= r->n) {
				r->bad = 1;
				return any();
			}
			r->i++;
		} else if (c == '#') {
			while (r->i < r->n && r->p[r->i] != ')')
				r->i++;
			if (r->i >= r->n) {
				r->bad = 1;
				return any();
			}
			r->i++;
			r->transparent = 1;
			return empty();
		} else {
			/* option letters: (?i) changes the rest of the group, (?i:...) its
			 * own; case needs no tracking (all literals are caseless), but
			 * x (whitespace and comments ignored) would change the reading */
			while (r->i < r->n && strchr("imnsUJ-^", r->p[r->i]))
				r->i++;
			c = peek(r);
			if (c == ')') {
				r->i++;
				r->transparent = 1;
				if (r->depth == 0)
					r->outer_option = 1;
				return empty();
			}
			if (c != ':') {  /* x, conditionals, recursion, (?P=name), ... */
				r->bad = 1;
				return any();
			}
			r->i++;
		}
	}
	if (++r->depth > DEPTH_MAX) {
		r->bad = 1;
		return any();
	}
	struct info x = parse_alt(r);
	r->depth--;
	if (peek(r) != ')') {
		r->bad = 1;
		info_free(&x);
		return any();
	}
	r->i++;
	if (zero_width) {
		r->fragile = 1;
		info_free(&x);
		return empty();
	}
	return x;
}

static struct info parse_atom(struct rx *r)
{
	int c = (unsigned char)r->p[r->i++];
	switch (c) {
	case '(': return parse_group(r);
	case '[': return parse_class(r);
	case '.': return any();
	case '^': case '$': return empty();
	case '\\': return parse_escape(r);
	case '*': case '+': case '?':  /* nothing to repeat: PCRE2 rejects it */
		r->bad = 1;
		return any();
	default: return byte((unsigned char)c);
	}
}

/* "{n}", "{n,}", "{n,m}" at r->i: 1 and the bounds (consumed), 0 when it
 * is a literal '{'. */
static int brace_quantifier(struct rx *r, unsigned *lo, unsigned *hi)
{
	size_t i = r->i + 1;
	unsigned a = 0, b;
	int da = 0, db = 0;
	while (i < r->n && r->p[i] >= '0' && r->p[i] <= '9' && a < 100000)
		a = a * 10 + (unsigned)(r->p[i++] - '0'), da++;
	if (!da) {
		if (i < r->n && r->p[i] == ',')  /* "{,n}": its reading changed across PCRE2 versions */
			r->bad = 1;
		return 0;
	}
	b = a;
	if (i < r->n && r->p[i] == ',') {
		i++;
		b = UINT_MAX;
		unsigned m = 0;
		while (i < r->n && r->p[i] >= '0' && r->p[i] <= '9' && m < 100000)
			m = m * 10 + (unsigned)(r->p[i++] - '0'), db++;
		if (db)
			b = m;
	}
	if (i >= r->n || r->p[i] != '}')
		return 0;
	r->i = i + 1;
	*lo = a;
	*hi = b;
	return 1;
}

static struct info parse_quantified(struct rx *r)
{
	r->transparent = 0;
	struct info x = parse_atom(r);
	if (r->bad)
		return x;
	unsigned lo, hi;
	int c = peek(r);
	if (r->transparent && (c == '?' || c == '*' || c == '+' || c == '{')) {
		r->bad = 1;  /* the quantifier belongs to an earlier atom */
		return x;
	}
	if (c == '?' || c == '*' || c == '+') {
		lo = c == '+';
		hi = c == '?' ? 1 : UINT_MAX;
		r->i++;
	} else if (c == '{' && brace_quantifier(r, &lo, &hi)) {
		/* bounds read */
	} else {
		return x;
	}
	if (peek(r) == '?' || peek(r) == '+')  /* lazy, possessive: the same language or less */
		r->i++;
	if (hi == 0)
		r->fragile = 1;
	if (lo == 0) {
		if (hi == 1 && x.k == K_EXACT && x.set.n < EXACT_CAP) {
			if (!set_has(&x.set, "", 0))
				set_push(&x.set, "", 0, NULL, 0);
			return x;
		}
		info_free(&x);
		return any();
	}
	if (lo == 1 && hi == 1)
		return x;
	if (x.k == K_EXACT && lo == hi && lo <= 4) {
		struct info rep = empty();
		for (unsigned k = 0; k < lo; k++) {
			if (!cross_ok(&rep, &x)) {
				info_free(&rep);
				return to_req(x);
			}
			struct info copy = { .k = K_EXACT };
			for (size_t i = 0; i < x.set.n; i++)
				set_push(&copy.set, x.set.v[i].s, x.set.v[i].len, NULL, 0);
			rep = cross(rep, copy);
		}
		info_free(&x);
		return rep;
	}
	return to_req(x);  /* at least one copy of X is in every match */
}

/* Each string of RUN (exact, none empty) followed by each byte of FB:
 * one of them is in every match of RUN then something starting with FB. */
static struct info junction(const struct info *run, const uint8_t fb[32])
{
	size_t nb = 0;
	for (int c = 0; c < 256; c++)
		nb += (size_t)(fb[c >> 3] >> (c & 7) & 1);
	if (run->set.n * nb > REQ_CAP || max_len(&run->set) + 1 > LIT_MAX)
		return any();
	struct info x = { .k = K_EXACT };
	for (size_t i = 0; i < run->set.n; i++)
		for (int c = 0; c < 256; c++)
			if (fb[c >> 3] >> (c & 7) & 1) {
				char b = (char)c;
				set_push(&x.set, run->set.v[i].s, run->set.v[i].len, &b, 1);
			}
	return x;
}

/* Whether J (RUN's strings each followed by a first byte of X) is worth
 * keeping: RUN weak (short, common) and J's weakest literal stronger than
 * both RUN's and X's. More literals of the same strength are no better
 * ("if " is not rarer than "if" in prose). */
static int junction_helps(const struct info *j, const struct info *run, const struct info *x)
{
	unsigned wj = weakest(&j->set), wr = weakest(&run->set);
	unsigned wx = x->k == K_ANY || !x->set.n ? 0 : weakest(&x->set);
	return j->k == K_EXACT && wr < 6 && wj > wr && wj > wx;
}

static int is_zero_width(const struct info *x)
{
	return x->k == K_EXACT && x->set.n == 1 && x->set.v[0].len == 0;
}

static struct info parse_seq(struct rx *r)
{
	struct info run = empty(), best = any();
	int whole = 1;  /* every piece exact so far: RUN is the language */
	int lead = 1;   /* every piece so far matched only "" (anchors, lookarounds) */
	int seq_known = 0;
	uint8_t seq_fb[32], xf[32];
	while (r->i < r->n && !r->bad && r->p[r->i] != '|' && r->p[r->i] != ')') {
		struct info x = parse_quantified(r);
		int x_known = first_bytes(&x, xf);
		if (lead && !is_zero_width(&x)) {
			lead = 0;
			seq_known = x_known;
			memcpy(seq_fb, xf, 32);
		}
		if (run.k == K_EXACT && x.k == K_EXACT && cross_ok(&run, &x)) {
			run = cross(run, x);
			continue;
		}
		whole = 0;
		if (x_known && run.set.n && !set_has(&run.set, "", 0)) {
			struct info j = junction(&run, xf);
			if (junction_helps(&j, &run, &x))
				consider(&best, j);
			else
				info_free(&j);
		}
		consider(&best, run);
		if (x.k == K_EXACT) {
			run = x;
		} else {
			consider(&best, x);
			run = empty();
		}
	}
	if (whole) {
		info_free(&best);
		return run;
	}
	consider(&best, run);
	return with_fb(best, seq_known && !lead, seq_fb);
}

static struct info parse_alt(struct rx *r)
{
	struct info acc = parse_seq(r);
	while (!r->bad && peek(r) == '|') {
		if (r->split && r->depth == 0) {
			if (r->ncuts == RXLIT_BRANCHES_MAX - 1)
				r->too_many = 1;
			else
				r->cuts[r->ncuts++] = r->i;
		}
		r->i++;
		acc = alt2(acc, parse_seq(r));
	}
	return acc;
}

int rxlit_required(const char *pattern, size_t n, struct rxlit *out)
{
	*out = (struct rxlit){ 0 };
	struct rx r = { .p = pattern, .n = n };
	struct info x = to_req(parse_alt(&r));
	if (r.bad || r.i != n || x.k != K_REQ || x.set.n == 0) {
		info_free(&x);
		return 0;
	}
	out->s = malloc(x.set.n * sizeof(*out->s));
	out->len = malloc(x.set.n * sizeof(*out->len));
	AN(out->s && out->len);
	for (size_t i = 0; i < x.set.n; i++) {
		out->s[i] = x.set.v[i].s;
		out->len[i] = x.set.v[i].len;
	}
	out->n = x.set.n;
	free(x.set.v);
	return 1;
}

/* Options set at the very start, "(?i)", and non-capturing groups that
 * span the rest, "(?i:...)": what every branch keeps around it. */
static void unwrap(const char *p, size_t *lo, size_t *hi)
{
	for (;;) {
		size_t j = *lo;
		if (j + 1 >= *hi || p[j] != '(' || p[j + 1] != '?')
			return;
		j += 2;
		while (j < *hi && p[j] && strchr("imsU-^", p[j]))
			j++;
		if (j < *hi && p[j] == ')') {
			*lo = j + 1;
			continue;
		}
		if (j >= *hi || p[j] != ':')
			return;
		struct rx g = { .p = p, .n = *hi, .i = *lo + 1 };
		struct info x = parse_group(&g);
		info_free(&x);
		if (g.bad || g.i != *hi)
			return;  /* the group ends before the pattern does */
		*lo = j + 1;
		(*hi)--;
	}
}

int rxlit_branches(const char *pattern, size_t n, struct rxlit *out)
{
	*out = (struct rxlit){ 0 };
	size_t lo = 0, hi = n;
	unwrap(pattern, &lo, &hi);
	struct rx r = { .p = pattern, .n = hi, .i = lo, .split = 1 };
	struct info x = parse_alt(&r);
	info_free(&x);
	if (r.bad || r.i != hi || !r.ncuts || r.too_many || r.captures || r.refs || r.outer_option || r.fragile)
		return 0;
	out->n = r.ncuts + 1;
	out->s = malloc(out->n * sizeof(*out->s));
	out->len = malloc(out->n * sizeof(*out->len));
	AN(out->s && out->len);
	size_t from = lo;
	for (size_t k = 0; k < out->n; k++) {
		size_t to = k < r.ncuts ? r.cuts[k] : hi;
		size_t len = lo + (to - from) + (n - hi);
		char *b = malloc(len + 1);
		AN(b);
		memcpy(b, pattern, lo);
		memcpy(b + lo, pattern + from, to - from);
		memcpy(b + lo + (to - from), pattern + hi, n - hi);
		b[len] = 0;
		out->s[k] = b;
		out->len[k] = len;
		from = to + 1;
	}
	return 1;
}

void rxlit_free(struct rxlit *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->s[i]);
	free(l->s);
	free(l->len);
	*l = (struct rxlit){ 0 };
}
