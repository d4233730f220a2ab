/* ModSecurity's multipart/form-data processor (seccoll.h says what).
 *
 * It is followed step for step, not replaced by a cleaner MIME parser,
 * because the Core Rule Set and Debian's rule 200003 judge requests by its
 * flags: the body is read line by line through a buffer of
 * SC_MULTIPART_LINE bytes (a longer line is cut and its rest does not start
 * a line), a line ending is held back and given to the part only when more
 * data follows (so the line end before a boundary belongs to no part), part
 * headers are parsed on their empty line, Content-Disposition by
 * ModSecurity's grammar (form-data; name=...; filename=..., with its
 * quoting rules and flags). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "seccoll.h"
#include "seclang.h"
#include "util.h"

#define MP_MAX_HEADERS 64

struct mp_header {
	uint32_t name, nlen, value, vlen, line, llen;  /* in part.hb */
};

struct mp_part {
	int state;                 /* 0: reading headers, 1: data */
	int is_file;
	struct buf hb;             /* header names, values, lines */
	struct mp_header h[MP_MAX_HEADERS];
	int nh, last;              /* last: the header a folded line continues, -1 none */
	struct buf name, filename, value;
	int has_name, has_filename;
	size_t length;
	char reserve[2];
	int nreserve;
};

struct mp {
	struct seccoll *c;
	char boundary[1025];
	size_t blen;
	char buf[SC_MULTIPART_LINE + 1];
	size_t used;
	int contains_line;
	int in_part;
	int is_complete, seen_data, boundary_count;
	struct mp_part part;
	struct buf fields;         /* completed form fields: name NUL value NUL, with lengths */
	struct buf field_lens;
};

static int token_char(unsigned char c)
{
	if (c < 32 || c > 126)
		return 0;
	return strchr("()<>@,;:\\\"/[]?={} \t", c) == NULL;
}

static void flag(struct mp *m, unsigned f)
{
	m->c->mp_flags |= f;
}

static int fail(struct mp *m, const char *why)
{
	m->c->mp_flags |= SC_MP_ERROR;
	m->c->mp_error = why;
	return -1;
}

static void part_reset(struct mp_part *p)
{
	p->state = 0;
	p->is_file = 0;
	p->hb.len = 0;
	p->nh = 0;
	p->last = -1;
	p->name.len = p->filename.len = p->value.len = 0;
	p->has_name = p->has_filename = 0;
	p->length = 0;
	p->nreserve = 0;
}

static void part_free(struct mp_part *p)
{
	buf_free(&p->hb);
	buf_free(&p->name);
	buf_free(&p->filename);
	buf_free(&p->value);
}

static const char *hb_str(const struct mp_part *p, uint32_t off)
{
	return p->hb.data + off;
}

static uint32_t hb_put(struct mp_part *p, const char *s, size_t n)
{
	uint32_t off = (uint32_t)p->hb.len;
	buf_append(&p->hb, s, n);
	buf_append(&p->hb, "", 1);
	return off;
}

static const struct mp_header *part_header(const struct mp_part *p, const char *name)
{
	size_t n = strlen(name);
	for (int i = 0; i < p->nh; i++)
		if (p->h[i].nlen == n && strncasecmp(hb_str(p, p->h[i].name), name, n) == 0)
			return &p->h[i];
	return NULL;
}

/* A single quote in a value is suspect unless the value was in double
 * quotes (ModSecurity 2.9.5 on: Apache's own parser agrees then). */
static void check_quotes(struct mp *m, const char *v, size_t n, char quote)
{
	if (quote != '"' && memchr(v, '\'', n))
		flag(m, SC_MP_INVALID_QUOTING);
}

/* Content-Disposition: form-data[; name=...][; filename=...]. Returns 1,
 * or a negative code as ModSecurity numbers them. */
static int parse_disposition(struct mp *m, const char *p)
{
	struct mp_part *part = &m->part;
	if (strncmp(p, "form-data", 9) != 0)
		return -1;
	p += 9;
	while (*p == '\t' || *p == ' ')
		p++;
	if (*p == '\0')
		return 1;
	if (*p != ';')
		return -2;
	p++;
	struct buf val = { 0 };
	int rc = 1;
	while (*p != '\0') {
		while (*p == '\t' || *p == ' ')
			p++;
		if (*p == '\0') {
			rc = -3;
			break;
		}
		const char *start = p;
		while (*p != '\0' && *p != '=' && *p != '\t' && *p != ' ')
			p++;
		if (*p == '\0') {
			rc = -4;
			break;
		}
		size_t nlen = (size_t)(p - start);
		const char *pname = start;
		while (*p == '\t' || *p == ' ')
			p++;
		if (*p == '\0') {
			rc = -5;
			break;
		}
		if (*p != '=') {
			rc = -13;
			break;
		}
		p++;
		while (*p == '\t' || *p == ' ')
			p++;
		if (*p == '\0') {
			rc = -6;
			break;
		}
		val.len = 0;
		char quote = 0;
		if (*p == '"' || *p == '\'') {
			quote = *p;
			if (quote == '\'')
				flag(m, SC_MP_INVALID_QUOTING);
			p++;
			if (*p == '\0') {
				rc = -7;
				break;
			}
			while (*p != '\0') {
				if (*p == '\\') {
					if (p[1] == '\0') {
						rc = -8;
						break;
					}
					/* only the quote and '\' are escapes; a lone '\' stays
					 * (browsers send Windows paths that way) */
					if (p[1] == quote || p[1] == '\\')
						p++;
				} else if (*p == quote) {
					break;
				}
				buf_append(&val, p, 1);
				p++;
			}
			if (rc < 0)
				break;
			if (*p == '\0') {
				rc = -10;
				break;
			}
			p++;
		} else {
			const char *s = p;
			while (*p != '\0' && token_char((unsigned char)*p))
				p++;
			buf_append(&val, s, (size_t)(p - s));
		}
		const char *v = val.data ? val.data : "";
		if (nlen == 4 && strncmp(pname, "name", 4) == 0) {
			check_quotes(m, v, val.len, quote);
			if (part->has_name) {
				rc = -14;
				break;
			}
			part->name.len = 0;
			buf_append(&part->name, v, val.len);
			part->has_name = 1;
		} else if (nlen == 8 && strncmp(pname, "filename", 8) == 0) {
			check_quotes(m, v, val.len, quote);
			if (part->has_filename) {
				rc = -15;
				break;
			}
			part->filename.len = 0;
			buf_append(&part->filename, v, val.len);
			part->has_filename = 1;
		} else {
			rc = -11;
			break;
		}
		if (*p != '\0') {
			while (*p == '\t' || *p == ' ')
				p++;
			if (*p == '\0')
				break;
			if (*p != ';') {
				if (p[-1] == '\'' || p[-1] == '"')
					flag(m, SC_MP_INVALID_QUOTING);
				rc = -12;
				break;
			}
			p++;
		}
	}
	buf_free(&val);
	return rc;
}

static size_t strip_line_end(const char *s, size_t n)
{
	while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r'))
		n--;
	return n;
}

static int part_header_line(struct mp *m)
{
	struct mp_part *part = &m->part;
	size_t len = m->used;
	if (memchr(m->buf, '\0', len))
		return fail(m, "Multipart: Nul byte in part headers.");
	if (len > 1 && m->buf[len - 2] == '\r')
		flag(m, SC_MP_CRLF_LINE);
	else
		flag(m, SC_MP_LF_LINE);
	if ((len == 2 && m->buf[0] == '\r' && m->buf[1] == '\n') || (len == 1 && m->buf[0] == '\n')) {
		const struct mp_header *cd = part_header(part, "Content-Disposition");
		if (!cd)
			return fail(m, "Multipart: Part missing Content-Disposition header.");
		if (parse_disposition(m, hb_str(part, cd->value)) < 0)
			return fail(m, "Multipart: Invalid Content-Disposition header.");
		if (!part->has_name)
			return fail(m, "Multipart: Content-Disposition header missing name field.");
		if (part->has_filename) {
			/* a crude parser that missed the filename would see a field */
			if (!strstr(hb_str(part, cd->value), "filename="))
				return fail(m, "Multipart: Invalid Content-Disposition header (filename).");
			part->is_file = 1;
		}
		part->state = 1;
		part->last = -1;
		return 0;
	}
	if (isspace((unsigned char)m->buf[0])) {
		flag(m, SC_MP_HEADER_FOLDING);
		if (m->buf[0] != '\t' && m->buf[0] != ' ')
			flag(m, SC_MP_INVALID_HEADER_FOLDING);
		if (part->last < 0)
			return fail(m, "Multipart: Invalid part header (folding error).");
		size_t i = 0;
		while (i < len && isspace((unsigned char)m->buf[i])) {
			if (m->buf[i] != '\t' && m->buf[i] != ' ')
				flag(m, SC_MP_INVALID_HEADER_FOLDING);
			i++;
		}
		struct mp_header *h = &part->h[part->last];
		size_t add = strip_line_end(m->buf + i, len - i);
		/* value and line grow: rebuild both at the end of the arena */
		struct buf tmp = { 0 };
		buf_append(&tmp, hb_str(part, h->value), h->vlen);
		buf_append(&tmp, " ", 1);
		buf_append(&tmp, m->buf + i, add);
		if (tmp.len > SC_MULTIPART_LINE) {
			buf_free(&tmp);
			return fail(m, "Multipart: Part header too long.");
		}
		h->value = hb_put(part, tmp.data, tmp.len);
		h->vlen = (uint32_t)tmp.len;
		tmp.len = 0;
		buf_append(&tmp, hb_str(part, h->line), h->llen);
		buf_append(&tmp, " ", 1);
		buf_append(&tmp, m->buf + i, add);
		h->line = hb_put(part, tmp.data, tmp.len);
		h->llen = (uint32_t)tmp.len;
		buf_free(&tmp);
		return 0;
	}
	const char *colon = memchr(m->buf, ':', len);
	if (!colon)
		return fail(m, "Multipart: Invalid part header (colon missing).");
	if (colon == m->buf)
		return fail(m, "Multipart: Invalid part header (header name missing).");
	size_t nlen = (size_t)(colon - m->buf);
	const char *v = colon + 1;
	while (*v == '\t' || *v == ' ')
		v++;
	size_t vlen = strip_line_end(v, len - (size_t)(v - m->buf));
	for (int i = 0; i < part->nh; i++)
		if (part->h[i].nlen == nlen && strncasecmp(hb_str(part, part->h[i].name), m->buf, nlen) == 0)
			return fail(m, "Multipart: Duplicate part header.");
	if (part->nh == MP_MAX_HEADERS)
		return fail(m, "Multipart: Too many part headers.");
	struct mp_header *h = &part->h[part->nh];
	h->name = hb_put(part, m->buf, nlen);
	h->nlen = (uint32_t)nlen;
	h->value = hb_put(part, v, vlen);
	h->vlen = (uint32_t)vlen;
	h->llen = (uint32_t)strip_line_end(m->buf, len);
	h->line = hb_put(part, m->buf, h->llen);
	part->last = part->nh++;
	return 0;
}

static void part_data_line(struct mp *m)
{
	struct mp_part *part = &m->part;
	size_t len = m->used;
	char hold[2];
	int nhold = 0;
	if (len >= 1 && m->buf[len - 1] == '\n') {
		if (len >= 2 && m->buf[len - 2] == '\r') {
			hold[0] = '\r', hold[1] = '\n', nhold = 2;
		} else {
			hold[0] = '\n', nhold = 1;
		}
		len -= (size_t)nhold;
	}
	/* the line end held back from the previous line belongs to the part
	 * after all: more data followed it */
	if (part->is_file) {
		part->length += (size_t)part->nreserve + len;
	} else {
		buf_append(&part->value, part->reserve, (size_t)part->nreserve);
		buf_append(&part->value, m->buf, len);
	}
	part->nreserve = nhold;
	memcpy(part->reserve, hold, (size_t)nhold);
}

/* A part ends at a boundary: file parts are listed now, fields once the
 * whole body has parsed. */
static void part_finish(struct mp *m)
{
	struct mp_part *part = &m->part;
	struct seccoll *c = m->c;
	if (!part->has_name) {
		flag(m, SC_MP_INVALID_PART);
		return;
	}
	const char *name = part->name.data ? part->name.data : "";
	for (int i = 0; i < part->nh; i++)
		seccoll_add(c, SC_PART_HEADERS, name, part->name.len, hb_str(part, part->h[i].line), part->h[i].llen);
	if (part->is_file) {
		char size[24];
		int k = snprintf(size, sizeof(size), "%zu", part->length);
		seccoll_add(c, SC_FILES, name, part->name.len, part->filename.data ? part->filename.data : "", part->filename.len);
		seccoll_add(c, SC_FILES_SIZES, name, part->name.len, size, (size_t)k);
		return;
	}
	uint32_t lens[2] = { (uint32_t)part->name.len, (uint32_t)part->value.len };
	buf_append(&m->field_lens, lens, sizeof(lens));
	buf_append(&m->fields, name, part->name.len);
	buf_append(&m->fields, part->value.data ? part->value.data : "", part->value.len);
}

static void boundary_seen(struct mp *m, int last)
{
	if (m->in_part) {
		part_finish(m);
		m->in_part = 0;
	}
	if (!last) {
		part_reset(&m->part);
		m->in_part = 1;
	}
}

/* A line, or a full buffer, is in m->buf[0..used). */
static int process_buffer(struct mp *m, int cut)
{
	const char *b = m->buf;
	size_t len = m->used;
	int as_boundary = 0;
	m->buf[len] = '\0';
	size_t slen = strlen(b);  /* ModSecurity looks at the line as a C string */
	if (m->contains_line && slen > 3 && b[0] == '-' && b[1] == '-') {
		if (slen >= m->blen + 2 && strncmp(b + 2, m->boundary, m->blen) == 0) {
			const char *end = b + 2 + m->blen;
			int final = 0;
			if (end[0] == '-' && end[1] == '-') {
				final = 1;
				end += 2;
				if (m->is_complete)
					return fail(m, "Multipart: Invalid boundary (final duplicate).");
			}
			if ((end[0] == '\r' && end[1] == '\n' && end[2] == '\0') || (end[0] == '\n' && end[1] == '\0')) {
				flag(m, end[0] == '\n' ? SC_MP_LF_LINE : SC_MP_CRLF_LINE);
				boundary_seen(m, final);
				if (final)
					m->is_complete = 1;
				as_boundary = 1;
				m->boundary_count++;
			} else {
				return fail(m, "Multipart: Invalid boundary.");
			}
		} else {
			if ((m->c->mp_flags & SC_MP_BOUNDARY_QUOTED) && slen >= m->blen + 3 && b[2] == '"' &&
			    strncmp(b + 3, m->boundary, m->blen) == 0)
				return fail(m, "Multipart: Invalid boundary (quotes).");
			const char *p = b + 2;
			while (isspace((unsigned char)*p))
				p++;
			if (p != b + 2 && strncmp(p, m->boundary, m->blen) == 0)
				return fail(m, "Multipart: Invalid boundary (whitespace).");
			flag(m, SC_MP_UNMATCHED_BOUNDARY);
		}
	} else if (m->contains_line) {
		for (size_t i = 0; i + 1 < len; i++)
			if (b[i] == '-' && b[i + 1] == '-' && strncmp(b + i + 2, m->boundary, m->blen) == 0) {
				flag(m, SC_MP_UNMATCHED_BOUNDARY);
				break;
			}
	}
	if (!as_boundary) {
		if (!m->in_part) {
			flag(m, SC_MP_DATA_BEFORE);
		} else if (m->part.state == 0) {
			if (cut)
				return fail(m, "Multipart: Part header line too long.");
			if (part_header_line(m) < 0)
				return -1;
		} else {
			part_data_line(m);
		}
	}
	return 0;
}

static int boundary_chars_ok(const char *b)
{
	for (const unsigned char *p = (const unsigned char *)b; *p; p++)
		if (*p < 32 || *p > 126 || strchr("()<>@,;:\\\"/[]?=", *p))
			return 0;
	return 1;
}

static int count_boundary_params(const char *s)
{
	int n = 0;
	for (const char *p = s; *p; p++) {
		if (strncasecmp(p, "boundary", 8) == 0) {
			p += 7;
			if (strchr(p + 1, '='))
				n++;
		}
	}
	return n;
}

static int parse_content_type(struct mp *m, const char *ct)
{
	if (strlen(ct) > 1024)
		return fail(m, "Multipart: Invalid boundary in C-T (length).");
	if (strncasecmp(ct, "multipart/form-data", 19) != 0)
		return fail(m, "Multipart: Invalid MIME type.");
	if (count_boundary_params(ct) > 1)
		return fail(m, "Multipart: Multiple boundary parameters in C-T.");
	const char *bp = strstr(ct, "boundary");
	if (!bp) {
		if (count_boundary_params(ct) > 0)
			return fail(m, "Multipart: Invalid boundary in C-T (case sensitivity).");
		return fail(m, "Multipart: Boundary not found in C-T.");
	}
	int semicolon = 0;
	for (const char *p = ct + 19; p < bp; p++) {
		if (isspace((unsigned char)*p))
			continue;
		if (!semicolon && *p == ';')
			semicolon = 1;
		else
			return fail(m, "Multipart: Invalid boundary in C-T (malformed).");
	}
	if (!semicolon)
		flag(m, SC_MP_MISSING_SEMICOLON);
	const char *eq = strchr(bp + 8, '=');
	if (!eq)
		return fail(m, "Multipart: Invalid boundary in C-T (malformed).");
	for (const char *p = bp + 8; p < eq; p++) {
		if (!isspace((unsigned char)*p))
			return fail(m, "Multipart: Invalid boundary in C-T (parameter name).");
		flag(m, SC_MP_BOUNDARY_WHITESPACE);
	}
	const char *b = eq + 1;
	size_t len = strlen(b);
	if (isspace((unsigned char)*b))
		flag(m, SC_MP_BOUNDARY_WHITESPACE);
	if (len >= 2 && b[0] == '"' && b[len - 1] == '"') {
		b++;
		len -= 2;
		flag(m, SC_MP_BOUNDARY_QUOTED);
	} else if (b[0] == '"' || (len >= 2 && b[len - 1] == '"')) {
		return fail(m, "Multipart: Invalid boundary in C-T (quote).");
	}
	memcpy(m->boundary, b, len);
	m->boundary[len] = '\0';
	m->blen = len;
	if (count_boundary_params(m->boundary) != 0)
		return fail(m, "Multipart: Invalid boundary in C-T (content).");
	if (!boundary_chars_ok(m->boundary))
		return fail(m, "Multipart: Invalid boundary in C-T (characters).");
	if (m->blen == 0)
		return fail(m, "Multipart: Invalid boundary in C-T (empty).");
	return 0;
}

static int feed(struct mp *m, const char *in, size_t n)
{
	size_t i = 0;
	if (n == 0)
		return 0;
	m->seen_data = 1;
	while (i < n) {
		char ch = in[i];
		int cut = 0;
		if (ch == '\r' && m->used == SC_MULTIPART_LINE - 1) {
			cut = 1;  /* a '\r' is never the buffer's last byte */
		} else {
			m->buf[m->used++] = ch;
			i++;
		}
		if (ch == '\n' || m->used == SC_MULTIPART_LINE || cut) {
			if (process_buffer(m, cut || m->used == SC_MULTIPART_LINE) < 0)
				return -1;
			m->used = 0;
			m->contains_line = ch == '\n';
		}
		if (m->is_complete && i < n) {
			flag(m, SC_MP_DATA_AFTER);
			return 0;
		}
	}
	return 0;
}

static int complete(struct mp *m)
{
	if (!m->seen_data || m->is_complete)
		return 0;
	if (m->boundary_count == 0)
		return fail(m, "Multipart: No boundaries found in payload.");
	/* the final boundary without its line end */
	if (m->contains_line && m->used == 4 + m->blen && m->buf[0] == '-' && m->buf[1] == '-' &&
	    strncmp(m->buf + 2, m->boundary, m->blen) == 0 && m->buf[2 + m->blen] == '-' && m->buf[3 + m->blen] == '-') {
		boundary_seen(m, 1);
		m->is_complete = 1;
		return 0;
	}
	m->c->mp_error = "Multipart: Final boundary missing.";
	return -1;
}

int seccoll_multipart_body(struct seccoll *c, const char *ct, size_t ctlen, const char *body, size_t len)
{
	struct mp *m = calloc(1, sizeof(*m));
	AN(m);
	m->c = c;
	m->contains_line = 1;
	char *ctz = strndup(ct, ctlen);
	AN(ctz);
	int rc = parse_content_type(m, ctz);
	free(ctz);
	if (rc == 0)
		rc = feed(m, body, len);
	if (rc == 0)
		rc = complete(m);
	if (rc == 0) {
		const uint32_t *lens = (const uint32_t *)(const void *)m->field_lens.data;
		size_t off = 0;
		for (size_t i = 0; i < m->field_lens.len / (2 * sizeof(uint32_t)); i++) {
			const char *name = m->fields.data + off;
			seccoll_add(c, SC_ARGS_POST, name, lens[2 * i], name + lens[2 * i], lens[2 * i + 1]);
			off += lens[2 * i] + lens[2 * i + 1];
		}
	}
	part_free(&m->part);
	buf_free(&m->fields);
	buf_free(&m->field_lens);
	free(m);
	return rc;
}

int seccoll_multipart_flag(const struct seccoll *c, int sl_var)
{
	static const struct { int var; unsigned flags; } map[] = {
		{ SL_VAR_MULTIPART_STRICT_ERROR,
		  SC_MP_ERROR | SC_MP_BOUNDARY_QUOTED | SC_MP_BOUNDARY_WHITESPACE | SC_MP_DATA_BEFORE | SC_MP_DATA_AFTER |
			  SC_MP_HEADER_FOLDING | SC_MP_LF_LINE | SC_MP_MISSING_SEMICOLON | SC_MP_INVALID_QUOTING |
			  SC_MP_INVALID_PART | SC_MP_INVALID_HEADER_FOLDING | SC_MP_FILE_LIMIT_EXCEEDED },
		{ SL_VAR_MULTIPART_UNMATCHED_BOUNDARY, SC_MP_UNMATCHED_BOUNDARY },
		{ SL_VAR_MULTIPART_BOUNDARY_QUOTED, SC_MP_BOUNDARY_QUOTED },
		{ SL_VAR_MULTIPART_BOUNDARY_WHITESPACE, SC_MP_BOUNDARY_WHITESPACE },
		{ SL_VAR_MULTIPART_DATA_BEFORE, SC_MP_DATA_BEFORE },
		{ SL_VAR_MULTIPART_DATA_AFTER, SC_MP_DATA_AFTER },
		{ SL_VAR_MULTIPART_HEADER_FOLDING, SC_MP_HEADER_FOLDING },
		{ SL_VAR_MULTIPART_LF_LINE, SC_MP_LF_LINE },
		{ SL_VAR_MULTIPART_MISSING_SEMICOLON, SC_MP_MISSING_SEMICOLON },
		{ SL_VAR_MULTIPART_INVALID_QUOTING, SC_MP_INVALID_QUOTING },
		{ SL_VAR_MULTIPART_INVALID_PART, SC_MP_INVALID_PART },
		{ SL_VAR_MULTIPART_INVALID_HEADER_FOLDING, SC_MP_INVALID_HEADER_FOLDING },
		{ SL_VAR_MULTIPART_FILE_LIMIT_EXCEEDED, SC_MP_FILE_LIMIT_EXCEEDED },
	};
	unsigned f = c->mp_flags;
	if (sl_var == SL_VAR_MULTIPART_CRLF_LF_LINES)  /* both kinds of line ends */
		return (f & SC_MP_LF_LINE) && (f & SC_MP_CRLF_LINE);
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].var == sl_var)
			return (f & map[i].flags) != 0;
	return 0;
}
