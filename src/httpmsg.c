#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include "httpmsg.h"
#include "util.h"

/* Lengths kept with the names: classifying is on every header line of
 * every message, and most names are none of these. */
#define KNOWN(name, kind, hop) { name, sizeof(name) - 1, kind, hop }
static const struct { const char *name; uint8_t len; enum hdr_kind kind; uint8_t hop; } known[] = {
	KNOWN("host",              HDR_HOST,              0),
	KNOWN("content-length",    HDR_CONTENT_LENGTH,    0),
	KNOWN("transfer-encoding", HDR_TRANSFER_ENCODING, 1),
	KNOWN("connection",        HDR_CONNECTION,        1),
	KNOWN("keep-alive",        HDR_KEEP_ALIVE,        1),
	KNOWN("proxy-connection",  HDR_PROXY_CONNECTION,  1),
	KNOWN("te",                HDR_TE,                1),
	KNOWN("trailer",           HDR_TRAILER,           1),
	KNOWN("upgrade",           HDR_UPGRADE,           1),
	KNOWN("expect",            HDR_EXPECT,            1),
	KNOWN("x-forwarded-for",   HDR_X_FORWARDED_FOR,   0),
	KNOWN("forwarded",         HDR_FORWARDED,         0),
	KNOWN("x-real-ip",         HDR_IDENTITY,          0),
	KNOWN("proxy-client-ip",   HDR_IDENTITY,          0),
	/* RFC 7540 3.2.1: only for the h2c upgrade of one connection */
	KNOWN("http2-settings",    HDR_OTHER,             1),
};

/* Families of headers an app server reads the client's identity from. */
#define PREFIX(p) { p, sizeof(p) - 1 }
static const struct { const char *text; uint8_t len; } identity_prefixes[] = {
	PREFIX("x-forwarded-"), PREFIX("wl-proxy-"), PREFIX("x-weblogic-"),
};

/* NAME (LEN bytes) equals the lower-case LIT of the same length, case
 * aside; the first byte is compared inline, since it rules most out. */
static int name_is(const char *name, const char *lit, size_t len)
{
	if ((name[0] | 0x20) != lit[0])
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)name[i];
		if (c >= 'A' && c <= 'Z')
			c |= 0x20;
		if (c != (unsigned char)lit[i])
			return 0;
	}
	return 1;
}

void msg_reset(struct msg *m, uint32_t max_hdrs)
{
	m->raw.len = 0;
	m->nhdrs = 0;
	m->max_hdrs = max_hdrs;
	m->url_off = m->url_len = 0;
	m->head_bytes = 0;
	m->in_field = m->in_value = 0;
	memset(m->nkind, 0, sizeof(m->nkind));
}

void msg_free(struct msg *m)
{
	buf_free(&m->raw);
	free(m->hdrs);
	m->hdrs = NULL;
	m->nhdrs = m->hdrs_cap = 0;
}

void msg_on_url(struct msg *m, const char *at, size_t len)
{
	if (m->url_len == 0)
		m->url_off = (uint32_t)m->raw.len;
	buf_append(&m->raw, at, len);
	m->url_len += (uint32_t)len;
	m->head_bytes += (uint32_t)len;
}

/* A zeroed entry at the end of the header array (its capacity is kept
 * across messages). */
static struct hdr *msg_new_hdr(struct msg *m)
{
	if (m->nhdrs == m->hdrs_cap) {
		uint32_t cap = m->hdrs_cap ? m->hdrs_cap * 2 : 32;
		struct hdr *nh = realloc(m->hdrs, cap * sizeof(*nh));
		AN(nh);
		m->hdrs = nh;
		m->hdrs_cap = cap;
	}
	struct hdr *h = &m->hdrs[m->nhdrs++];
	memset(h, 0, sizeof(*h));
	return h;
}

int msg_on_field(struct msg *m, const char *at, size_t len)
{
	if (!m->in_field) {
		if (m->nhdrs >= m->max_hdrs)
			return -1;
		struct hdr *h = msg_new_hdr(m);
		h->name_off = (uint32_t)m->raw.len;
		m->in_field = 1;
		m->in_value = 0;
		m->head_bytes += 4; /* ": " and CRLF */
	}
	buf_append(&m->raw, at, len);
	m->hdrs[m->nhdrs - 1].name_len += (uint32_t)len;
	m->head_bytes += (uint32_t)len;
	return 0;
}

int msg_on_value(struct msg *m, const char *at, size_t len)
{
	if (!m->in_field && !m->in_value)
		return -1;  /* a value with no field name before it */
	struct hdr *h = &m->hdrs[m->nhdrs - 1];
	if (!m->in_value) {
		h->val_off = (uint32_t)m->raw.len;
		m->in_value = 1;
	}
	m->in_field = 0;
	buf_append(&m->raw, at, len);
	h->val_len += (uint32_t)len;
	m->head_bytes += (uint32_t)len;
	return 0;
}

struct hdr *msg_finish_header(struct msg *m)
{
	if (!m->in_field && !m->in_value)
		return NULL;
	struct hdr *h = &m->hdrs[m->nhdrs - 1];
	if (!m->in_value)  /* empty value: llhttp sends no value callback */
		h->val_off = (uint32_t)m->raw.len;
	m->in_field = m->in_value = 0;
	const char *v = m->raw.data + h->val_off;
	while (h->val_len > 0 && (v[h->val_len - 1] == ' ' || v[h->val_len - 1] == '\t'))
		h->val_len--;
	if (h->name_len == 0)
		return NULL;
	int hop;
	h->kind = (uint8_t)hdr_classify(m->raw.data + h->name_off, h->name_len, &hop);
	h->drop = (uint8_t)hop;
	m->nkind[h->kind]++;
	return h;
}

uint32_t msg_take_head(struct msg *m, const char *head, size_t len, uint32_t start_off, uint32_t start_len)
{
	uint32_t base = (uint32_t)m->raw.len;
	buf_append(&m->raw, head, len);
	m->url_off = base + start_off;
	m->url_len = start_len;
	m->head_bytes += start_len;
	return base;
}

struct hdr *msg_add_parsed(struct msg *m, uint32_t name_off, uint32_t name_len, uint32_t val_off, uint32_t val_len)
{
	if (m->nhdrs >= m->max_hdrs)
		return NULL;
	struct hdr *h = msg_new_hdr(m);
	h->name_off = name_off;
	h->name_len = name_len;
	h->val_off = val_off;
	h->val_len = val_len;
	m->head_bytes += 4 + name_len + val_len;
	int hop;
	h->kind = (uint8_t)hdr_classify(m->raw.data + name_off, name_len, &hop);
	h->drop = (uint8_t)hop;
	m->nkind[h->kind]++;
	return h;
}

void msg_drop_last(struct msg *m)
{
	struct hdr *h = &m->hdrs[m->nhdrs - 1];
	m->nkind[h->kind]--;
	m->raw.len = h->name_off;
	m->nhdrs--;
}

/* Compare NAME with the lower-case LIT for N bytes, case-insensitively and
 * reading '_' as '-'. */
static int loose_eq(const char *name, const char *lit, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if ((name[i] == '_' ? '-' : (name[i] | 0x20)) != lit[i])
			return 0;
	return 1;
}

static int is_identity_kind(enum hdr_kind k)
{
	return k == HDR_IDENTITY || k == HDR_X_FORWARDED_FOR || k == HDR_FORWARDED;
}

/* An identity header spelled with underscores (X_Forwarded_For,
 * WL_Proxy_Client_IP): servers and CGI-style frameworks that map '_' and
 * '-' to the same variable take it for the real one (Puma's
 * CVE-2024-45614), so it is protected like the dashed name. */
static int identity_alias(const char *name, size_t len)
{
	for (size_t i = 0; i < ARRAY_SIZE(known); i++) {
		enum hdr_kind k = known[i].kind;
		if (is_identity_kind(k) && known[i].len == len && loose_eq(name, known[i].name, len))
			return 1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(identity_prefixes); i++) {
		size_t pl = identity_prefixes[i].len;
		if (len > pl && loose_eq(name, identity_prefixes[i].text, pl))
			return 1;
	}
	return 0;
}

/* known[] by name length: at most KNOWN_SAME_LEN names share one. */
#define KNOWN_MAX_LEN 17
#define KNOWN_SAME_LEN 2
static uint8_t known_by_len[KNOWN_MAX_LEN + 1][KNOWN_SAME_LEN + 1];  /* index + 1; 0 ends */
/* First bytes, either case, of the identity names and prefixes (and so of
 * their underscore aliases): any other name is not an identity header. */
static uint8_t identity_first[256];

static void identity_first_set(char c)
{
	identity_first[(unsigned char)c] = 1;
	if (c >= 'a' && c <= 'z')
		identity_first[(unsigned char)(c - 0x20)] = 1;
}

static void known_index(void) __attribute__((constructor));
static void known_index(void)
{
	for (size_t i = 0; i < ARRAY_SIZE(known); i++) {
		uint8_t *slot = known_by_len[known[i].len];
		AN(known[i].len <= KNOWN_MAX_LEN);
		while (*slot)
			slot++;
		AN(slot < known_by_len[known[i].len] + KNOWN_SAME_LEN);
		*slot = (uint8_t)(i + 1);
		if (is_identity_kind(known[i].kind))
			identity_first_set(known[i].name[0]);
	}
	for (size_t i = 0; i < ARRAY_SIZE(identity_prefixes); i++)
		identity_first_set(identity_prefixes[i].text[0]);
}

enum hdr_kind hdr_classify(const char *name, size_t len, int *hop)
{
	*hop = 0;
	if (len == 0)
		return HDR_OTHER;
	if (len <= KNOWN_MAX_LEN) {
		for (const uint8_t *k = known_by_len[len]; *k; k++) {
			if (name_is(name, known[*k - 1].name, len)) {
				*hop = known[*k - 1].hop;
				return known[*k - 1].kind;
			}
		}
	}
	if (!identity_first[(unsigned char)name[0]])
		return HDR_OTHER;
	for (size_t i = 0; i < ARRAY_SIZE(identity_prefixes); i++)
		if (len > identity_prefixes[i].len &&
		    name_is(name, identity_prefixes[i].text, identity_prefixes[i].len))
			return HDR_IDENTITY;
	/* Not HDR_X_FORWARDED_FOR for X_Forwarded_For: a trusted
	 * forwarder's copy is passed on as sent, never merged. */
	if (memchr(name, '_', len) && identity_alias(name, len))
		return HDR_IDENTITY;
	return HDR_OTHER;
}

int list_next(const char **p, const char *end, const char **tok, size_t *toklen)
{
	const char *s = *p;
	for (;;) {
		while (s < end && (*s == ' ' || *s == '\t' || *s == ','))
			s++;
		if (s >= end) {
			*p = s;
			return 0;
		}
		const char *e = s;
		while (e < end && *e != ',')
			e++;
		const char *t = e;
		while (t > s && (t[-1] == ' ' || t[-1] == '\t'))
			t--;
		*p = e;
		if (t > s) {
			*tok = s;
			*toklen = (size_t)(t - s);
			return 1;
		}
		s = e;
	}
}

unsigned msg_apply_connection(struct msg *m)
{
	unsigned flags = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *h = &m->hdrs[i];
		if (h->kind != HDR_CONNECTION)
			continue;
		const char *p = m->raw.data + h->val_off, *end = p + h->val_len, *t;
		size_t tl;
		while (list_next(&p, end, &t, &tl)) {
			if (tok_eq(t, tl, "close")) {
				flags |= CONN_CLOSE;
			} else if (tok_eq(t, tl, "keep-alive")) {
				flags |= CONN_KEEPALIVE;
			} else if (tok_eq(t, tl, "upgrade")) {
				flags |= CONN_UPGRADE;
			} else {
				/* Framing and routing are not the sender's to
				 * unlist: dropping Content-Length or Host here
				 * would let a client (or backend) make the next
				 * hop read a different message than we parsed. */
				for (uint32_t j = 0; j < m->nhdrs; j++) {
					struct hdr *o = &m->hdrs[j];
					if (o->kind == HDR_CONTENT_LENGTH || o->kind == HDR_HOST)
						continue;
					if (o->name_len == tl && strncasecmp(m->raw.data + o->name_off, t, tl) == 0)
						o->drop = 1;
				}
			}
		}
	}
	return flags;
}

/* Header I's line as it stands in the arena, "name: value\r\n" byte for byte
 * (a head read in one piece and not edited since): its length, else 0. */
static size_t line_in_arena(const struct msg *m, const struct hdr *h)
{
	size_t colon = (size_t)h->name_off + h->name_len, end = (size_t)h->val_off + h->val_len;
	if (h->val_off != colon + 2 || end + 2 > m->raw.len)
		return 0;
	const char *r = m->raw.data;
	if (r[colon] != ':' || r[colon + 1] != ' ' || r[end] != '\r' || r[end + 1] != '\n')
		return 0;
	return end + 2 - h->name_off;
}

void msg_write_headers(const struct msg *m, struct buf *out)
{
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->drop)
			continue;
		size_t run = line_in_arena(m, h);
		if (run > 0) {
			/* Consecutive kept lines still whole in the arena go
			 * out with one copy. */
			while (i + 1 < m->nhdrs && !m->hdrs[i + 1].drop && m->hdrs[i + 1].name_off == h->name_off + run) {
				size_t next = line_in_arena(m, &m->hdrs[i + 1]);
				if (next == 0)
					break;
				run += next;
				i++;
			}
			buf_append(out, m->raw.data + h->name_off, run);
			continue;
		}
		buf_reserve(out, h->name_len + h->val_len + 4);
		memcpy(out->data + out->len, m->raw.data + h->name_off, h->name_len);
		out->len += h->name_len;
		out->data[out->len++] = ':';
		out->data[out->len++] = ' ';
		memcpy(out->data + out->len, m->raw.data + h->val_off, h->val_len);
		out->len += h->val_len;
		out->data[out->len++] = '\r';
		out->data[out->len++] = '\n';
	}
}

void msg_set_value(struct msg *m, struct hdr *h, const char *v, size_t len)
{
	h->val_off = (uint32_t)m->raw.len;
	h->val_len = (uint32_t)len;
	buf_append(&m->raw, v, len);
}

struct hdr *msg_add(struct msg *m, const char *name, const char *value, size_t vlen)
{
	struct hdr *h = msg_new_hdr(m);
	size_t nl = strlen(name);
	h->name_off = (uint32_t)m->raw.len;
	h->name_len = (uint32_t)nl;
	buf_append(&m->raw, name, nl);
	msg_set_value(m, h, value, vlen);
	int hop;
	h->kind = (uint8_t)hdr_classify(name, nl, &hop);
	h->drop = (uint8_t)hop;
	m->nkind[h->kind]++;
	return h;
}

int hdr_framing_alias(const char *name, size_t len)
{
	static const char *const framing[] = { "content-length", "transfer-encoding" };
	if (memchr(name, '_', len) == NULL)
		return 0;
	for (size_t k = 0; k < ARRAY_SIZE(framing); k++)
		if (strlen(framing[k]) == len && loose_eq(name, framing[k], len))
			return 1;
	return 0;
}

static int is_hex(char c)
{
	return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f');
}

int host_valid(const char *v, size_t n)
{
	size_t i = 0;
	if (n && v[0] == '[') {
		/* IP-literal: IPv6 (hex, ':', '.') or IPvFuture ("v" ...) */
		for (i = 1; i < n && v[i] != ']'; i++)
			if (!is_hex(v[i]) && v[i] != ':' && v[i] != '.' && (v[i] | 0x20) != 'v')
				return 0;
		if (i == n || i == 1)
			return 0;
		i++;
	} else {
		for (; i < n && v[i] != ':'; i++) {
			unsigned char c = (unsigned char)v[i];
			if (c == '%') {
				if (i + 2 >= n || !is_hex(v[i + 1]) || !is_hex(v[i + 2]))
					return 0;
				i += 2;
				continue;
			}
			if (!((c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ||
			      strchr("-._~!$&'()*+;=", c) != NULL) || c == 0)
				return 0;
		}
	}
	if (i == n)
		return 1;
	if (v[i] != ':')
		return 0;
	for (i++; i < n; i++)
		if (v[i] < '0' || v[i] > '9')
			return 0;
	return 1;
}

int url_absolute_split(const char *u, size_t n, const char **auth, size_t *alen,
		       const char **path, size_t *plen)
{
	size_t s;
	if (n >= 7 && strncasecmp(u, "http://", 7) == 0)
		s = 7;
	else if (n >= 8 && strncasecmp(u, "https://", 8) == 0)
		s = 8;
	else if (memchr(u, ':', n) && n && u[0] != '/' && u[0] != '*')
		return -1;  /* another scheme, or authority-form outside CONNECT */
	else
		return 0;
	size_t e = s;
	while (e < n && u[e] != '/' && u[e] != '?' && u[e] != '#')
		e++;
	if (e == s || memchr(u + s, '@', e - s))
		return -1;
	*auth = u + s;
	*alen = e - s;
	*path = u + e;
	*plen = n - e;
	return 1;
}

static int is_blank(char c)
{
	return c == ' ' || c == '\t';
}

static void unquote_trim(const char **v, const char **ve)
{
	while (*v < *ve && is_blank(**v))
		(*v)++;
	while (*ve > *v && is_blank((*ve)[-1]))
		(*ve)--;
	if (*ve - *v >= 2 && (*v)[0] == '"' && (*ve)[-1] == '"') {
		(*v)++;
		(*ve)--;
	}
}

int cookie_next(const char **pos, const char *end, const char *name, size_t nl,
		const char **v, size_t *vl)
{
	const char *p = *pos;
	while (p < end) {
		while (p < end && (is_blank(*p) || *p == ';'))
			p++;
		const char *pair = p, *semi = memchr(p, ';', (size_t)(end - p));
		p = semi ? semi : end;
		const char *eq = memchr(pair, '=', (size_t)(p - pair));
		if (eq == NULL)
			continue;
		const char *ne = eq;
		while (ne > pair && is_blank(ne[-1]))
			ne--;
		if ((size_t)(ne - pair) != nl || memcmp(pair, name, nl) != 0)
			continue;
		const char *val = eq + 1, *ve = p;
		unquote_trim(&val, &ve);
		*v = val;
		*vl = (size_t)(ve - val);
		*pos = p;
		return 1;
	}
	*pos = p;
	return 0;
}

int msg_cookie(const struct msg *m, const char *name, size_t nl, const char **v, size_t *vl)
{
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->name_len != 6 || strncasecmp(msg_str(m, h->name_off), "cookie", 6) != 0)
			continue;
		const char *p = msg_str(m, h->val_off);
		if (cookie_next(&p, p + h->val_len, name, nl, v, vl))
			return 1;
	}
	return 0;
}

int set_cookie_split(const char *p, size_t n, const char **name, size_t *nl,
		     const char **v, size_t *vl)
{
	const char *end = memchr(p, ';', n);
	end = end ? end : p + n;
	const char *eq = memchr(p, '=', (size_t)(end - p));
	if (eq == NULL)
		return -1;
	const char *nb = p, *ne = eq, *val = eq + 1, *ve = end;
	unquote_trim(&nb, &ne);
	unquote_trim(&val, &ve);
	*name = nb;
	*nl = (size_t)(ne - nb);
	*v = val;
	*vl = (size_t)(ve - val);
	return 0;
}

const struct hdr *msg_find(const struct msg *m, enum hdr_kind kind)
{
	if (m->nkind[kind] == 0)
		return NULL;
	for (uint32_t i = 0; i < m->nhdrs; i++)
		if (m->hdrs[i].kind == kind)
			return &m->hdrs[i];
	return NULL;
}

int msg_count(const struct msg *m, enum hdr_kind kind)
{
	return m->nkind[kind];
}

/* Length of the run of bytes above '\r' at P (at most N): every such byte
 * is head text. Eight at a time: a word has a byte below 14 exactly when
 * (x - 0x0e..0e) & ~x & 0x80..80 is not zero. */
static size_t text_run(const unsigned char *p, size_t n)
{
	const uint64_t below = 0x0e0e0e0e0e0e0e0eull, highs = 0x8080808080808080ull;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t x;
		memcpy(&x, p + i, 8);
		if ((x - below) & ~x & highs)
			break;
	}
	while (i < n && p[i] > '\r')
		i++;
	return i;
}

int head_scan(struct head_scan *hs, const char *p, size_t n)
{
	const unsigned char *u = (const unsigned char *)p;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = u[i];
		if (c > '\r' && hs->state != HS_CR && hs->state != HS_CRLF_CR) {
			hs->state = HS_TEXT;
			hs->seen_text = 1;
			i += text_run(u + i + 1, n - i - 1);
			if (i + 2 < n && u[i + 1] == '\r' && u[i + 2] == '\n') {
				hs->state = HS_CRLF;  /* the line's end, in one step */
				i += 2;
			}
			continue;
		}
		switch (hs->state) {
		case HS_CR:      /* after CR: only LF may follow */
		case HS_CRLF_CR:
			if (c != '\n')
				return -1;
			if (hs->state == HS_CRLF_CR && hs->seen_text)
				return (int)(i + 1);
			hs->state = HS_CRLF;
			continue;
		default:
			break;
		}
		if (c == '\n' || c == 0)
			return -1;
		if (c == '\r') {
			hs->state = hs->state == HS_CRLF ? HS_CRLF_CR : HS_CR;
		} else {
			hs->state = HS_TEXT;
			hs->seen_text = 1;
		}
	}
	return 0;
}

void msg_canonical_length(struct msg *m, uint64_t clen)
{
	char tmp[20], *end = tmp + sizeof(tmp), *num = end;
	do {
		*--num = (char)('0' + clen % 10);
		clen /= 10;
	} while (clen);
	size_t n = (size_t)(end - num);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		struct hdr *h = &m->hdrs[i];
		if (h->kind != HDR_CONTENT_LENGTH)
			continue;
		if (h->val_len != n || memcmp(msg_str(m, h->val_off), num, n) != 0)
			msg_set_value(m, h, num, n);
	}
}
