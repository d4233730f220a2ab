/* libinjection's answers by content, per evaluation (injmemo.h says why). */
#include <stdlib.h>
#include <string.h>
#include "injmemo.h"
#include "libinjection.h"
#include "util.h"
#include "vhash.h"

enum { INJ_SQLI, INJ_XSS };

/* What an evaluation may keep: past it, values are checked, not kept. */
#define INJMEMO_MAX_BYTES (1u << 20)
#define INJMEMO_MAX_ENTRIES 65536
/* A value whose slot is this far from where its hash points is checked,
 * not kept: values crafted to share a hash cost a bounded walk each. */
#define INJMEMO_MAX_PROBE 16

struct injmemo_entry {
	uint64_t hash;
	uint32_t off, len;         /* the value's bytes in data */
	uint32_t epoch;
	uint8_t kind;              /* INJ_* */
	uint8_t hit;
	char fp[8];
};

void injmemo_clear(struct injmemo *m)
{
	if (++m->epoch == 0) {  /* wrapped: stale entries could look current */
		if (m->e)
			memset(m->e, 0, m->cap * sizeof(*m->e));
		m->epoch = 1;
	}
	m->n = 0;
	m->data.len = 0;
}

void injmemo_free(struct injmemo *m)
{
	free(m->e);
	buf_free(&m->data);
	memset(m, 0, sizeof(*m));
}

static void grow(struct injmemo *m)
{
	size_t ncap = m->cap ? m->cap * 2 : 256;
	struct injmemo_entry *old = m->e;
	size_t ocap = m->cap;
	m->e = calloc(ncap, sizeof(*m->e));
	AN(m->e);
	m->cap = ncap;
	for (size_t k = 0; k < ocap; k++) {
		if (old[k].epoch != m->epoch)
			continue;
		size_t i = (size_t)old[k].hash & (ncap - 1);
		while (m->e[i].epoch == m->epoch)
			i = (i + 1) & (ncap - 1);
		m->e[i] = old[k];
	}
	free(old);
}

static int check(int kind, const char *v, size_t vl, char fp[8])
{
	if (kind == INJ_XSS)
		return sluice_detect_xss((const uint8_t *)v, vl);
	memset(fp, 0, 8);
	return sluice_detect_sqli((const uint8_t *)v, vl, (uint8_t *)fp);
}

static int lookup(struct injmemo *m, int kind, const char *v, size_t vl, char fp[8])
{
	if (m->epoch == 0)
		m->epoch = 1;  /* never cleared yet: 0 is what calloc'd entries hold */
	uint64_t h = vhash(v, vl, (unsigned)kind);
	if (m->cap) {
		size_t i = (size_t)h & (m->cap - 1);
		for (unsigned probe = 0; probe < INJMEMO_MAX_PROBE; probe++, i = (i + 1) & (m->cap - 1)) {
			const struct injmemo_entry *e = &m->e[i];
			if (e->epoch != m->epoch)
				break;
			if (e->hash == h && e->kind == kind && e->len == vl && (vl == 0 || memcmp(m->data.data + e->off, v, vl) == 0)) {
				memcpy(fp, e->fp, 8);
				return e->hit;
			}
		}
	}
	int hit = check(kind, v, vl, fp);
	if (m->data.len + vl > INJMEMO_MAX_BYTES || m->n >= INJMEMO_MAX_ENTRIES)
		return hit;
	if ((m->n + 1) * 2 > m->cap)
		grow(m);
	size_t i = (size_t)h & (m->cap - 1);
	for (unsigned probe = 0; m->e[i].epoch == m->epoch; probe++, i = (i + 1) & (m->cap - 1))
		if (probe + 1 >= INJMEMO_MAX_PROBE)
			return hit;
	struct injmemo_entry *e = &m->e[i];
	*e = (struct injmemo_entry){ .hash = h, .off = (uint32_t)m->data.len, .len = (uint32_t)vl, .epoch = m->epoch,
				     .kind = (uint8_t)kind, .hit = (uint8_t)hit };
	memcpy(e->fp, fp, 8);
	buf_append(&m->data, v, vl);
	m->n++;
	return hit;
}

/* Whether V is nothing but ASCII digits (and not empty). */
static int all_digits(const char *v, size_t vl)
{
	if (vl == 0)
		return 0;
	for (size_t i = 0; i < vl; i++)
		if ((unsigned)(v[i] - '0') > 9u)
			return 0;
	return 1;
}

/* Whether V is one word: a letter or '_', then letters, digits and '_'. */
static int one_word(const char *v, size_t vl)
{
	if (vl == 0 || !(((unsigned)(v[0] | 0x20) - 'a') < 26u || v[0] == '_'))
		return 0;
	for (size_t i = 1; i < vl; i++)
		if (!(((unsigned)(v[i] | 0x20) - 'a') < 26u || (unsigned)(v[i] - '0') <= 9u || v[i] == '_'))
			return 0;
	return 1;
}

int injmemo_sqli(struct injmemo *m, const char *v, size_t vl, char fp[8])
{
	/* One word is one token to libinjection's tokenizer (a bareword, or a
	 * keyword of some type; the letters that may open a quoted string,
	 * x'..', n'..', q'..', need the quote), and with no quote or comment
	 * it gets no other reading. Of one-token fingerprints libinjection
	 * flags only the evil 'X', which no word makes: no word is SQL
	 * injection. Argument names and many short values are such words.
	 * tests/unit/test_injmemo.c checks this against libinjection. */
	if (one_word(v, vl)) {
		memset(fp, 0, 8);
		return 0;
	}
	/* Digits alone are one number token to libinjection's tokenizer,
	 * whatever they are and however many (no quote to try the other
	 * contexts with, no comment to reparse for): every such value gets
	 * the answer and fingerprint of "1". Numbers are the commonest
	 * argument (ids, pages, quantities), each otherwise its own entry.
	 * tests/unit/test_injmemo.c checks this against libinjection. */
	static int digits_known, digits_hit;
	static char digits_fp[8];
	if (all_digits(v, vl)) {
		if (!digits_known) {
			digits_hit = check(INJ_SQLI, "1", 1, digits_fp);
			digits_known = 1;
		}
		memcpy(fp, digits_fp, 8);
		return digits_hit;
	}
	return lookup(m, INJ_SQLI, v, vl, fp);
}

int injmemo_xss(struct injmemo *m, const char *v, size_t vl)
{
	/* Every XSS verdict of libinjection's comes from a token its HTML5
	 * tokenizer makes out of a '<' (a tag, comment, doctype) or of an
	 * attribute value, which only a '=' starts (a value the input opens
	 * in is never judged). Most values (a User-Agent, a cookie, a number)
	 * hold neither: two memchr passes instead of five tokenizer runs.
	 * tests/unit/test_injmemo.c checks this against libinjection. */
	if (vl == 0 || (memchr(v, '<', vl) == NULL && memchr(v, '=', vl) == NULL))
		return 0;
	char fp[8] = { 0 };
	return lookup(m, INJ_XSS, v, vl, fp);
}
