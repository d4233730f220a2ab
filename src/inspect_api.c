/* req and resp methods (docs/lua-api.md). Reads come from the parsed head
 * (struct msg) without copying until a Lua string is made; edits are
 * validated here and recorded in the stream's insp, and only applied when the head
 * is written, so a script that fails halfway leaves no trace. */
#include <string.h>
#include <strings.h>
#include <lauxlib.h>
#include "httpmsg.h"
#include "inspect_api.h"
#include "netaddr.h"
#include "tls.h"
#include "transform.h"
#include "upstream.h"
#include "worker.h"

static const char *const decision_names[] = {
#define INSPECT_NAME(id, name) name,
	INSPECT_DECISIONS(INSPECT_NAME)
#undef INSPECT_NAME
};

const char *inspect_decision_name(unsigned d)
{
	return d < sizeof(decision_names) / sizeof(decision_names[0]) ? decision_names[d] : "?";
}

#define REQ_MT  "sluice.req"
#define RESP_MT "sluice.resp"
#define HDR_VALUE_MAX 16384

static struct buf scratch;  /* decoding args: one copy, then one Lua string */

static struct inspect_ref *check(lua_State *L, int is_resp)
{
	struct inspect_ref *r = luaL_checkudata(L, 1, is_resp ? RESP_MT : REQ_MT);
	if (r->s == NULL || r->phase == INSPECT_PH_NONE)
		luaL_error(L, "%s used outside the call it was passed to", is_resp ? "resp" : "req");
	return r;
}

static struct stream *req_stream(lua_State *L) { return check(L, 0)->s; }

static struct inspect_ref *acting(lua_State *L, const char *what)
{
	struct inspect_ref *r = check(L, 0);
	if (r->phase != INSPECT_PH_INSPECT)
		luaL_error(L, "req:%s() is only allowed in inspect()", what);
	return r;
}

static void push_or_nil(lua_State *L, const char *s, size_t n)
{
	if (s)
		lua_pushlstring(L, s, n);
	else
		lua_pushnil(L);
}

/* ---- the head ---- */

static const char *target(const struct stream *t, size_t *len)
{
	*len = t->req.url_len;
	return msg_str(&t->req, t->req.url_off);
}

static int req_method(lua_State *L)
{
	lua_pushstring(L, llhttp_method_name((llhttp_method_t)req_stream(L)->method));
	return 1;
}

static int req_version(lua_State *L)
{
	const struct stream *s = req_stream(L);
	lua_pushstring(L, s->http_major == 2 ? "2" : s->http_minor ? "1.1" : "1.0");
	return 1;
}

static int req_uri(lua_State *L)
{
	size_t n;
	const char *u = target(req_stream(L), &n);
	lua_pushlstring(L, u, n);
	return 1;
}

static int req_path(lua_State *L)
{
	size_t n;
	const char *u = target(req_stream(L), &n);
	const char *q = memchr(u, '?', n);
	lua_pushlstring(L, u, q ? (size_t)(q - u) : n);
	return 1;
}

static const char *query(const struct stream *t, size_t *len)
{
	size_t n;
	const char *u = target(t, &n);
	const char *q = memchr(u, '?', n);
	if (q == NULL) {
		*len = 0;
		return u + n;
	}
	*len = n - (size_t)(q + 1 - u);
	return q + 1;
}

static int req_query(lua_State *L)
{
	size_t n;
	const char *q = query(req_stream(L), &n);
	lua_pushlstring(L, q, n);
	return 1;
}

/* Decode S (form semantics) into the scratch buffer at its end; returns its offset. */
static size_t decode_into(const char *s, size_t n, size_t *outlen)
{
	size_t off = scratch.len;
	buf_append(&scratch, s, n);
	*outlen = xform_step(XF_URLDECODE_UNI, scratch.data + off, n);
	scratch.len = off + *outlen;
	return off;
}

/* Next "name=value" pair of a query at *POS; 0 when done. */
static int next_pair(const char *q, size_t qlen, size_t *pos, const char **name, size_t *nlen,
		     const char **val, size_t *vlen)
{
	while (*pos < qlen && q[*pos] == '&')
		(*pos)++;
	if (*pos >= qlen)
		return 0;
	const char *p = q + *pos;
	const char *end = memchr(p, '&', qlen - *pos);
	size_t plen = end ? (size_t)(end - p) : qlen - *pos;
	const char *eq = memchr(p, '=', plen);
	*name = p;
	*nlen = eq ? (size_t)(eq - p) : plen;
	*val = eq ? eq + 1 : p + plen;
	*vlen = eq ? plen - *nlen - 1 : 0;
	*pos += plen;
	return 1;
}

static int req_arg(lua_State *L)
{
	struct stream *t = req_stream(L);
	size_t want_len;
	const char *want = luaL_checklstring(L, 2, &want_len);
	size_t qlen, pos = 0, nl, vl;
	const char *q = query(t, &qlen), *n, *v;
	while (next_pair(q, qlen, &pos, &n, &nl, &v, &vl)) {
		scratch.len = 0;
		size_t dl;
		size_t off = decode_into(n, nl, &dl);
		if (dl == want_len && memcmp(scratch.data + off, want, dl) == 0) {
			off = decode_into(v, vl, &dl);
			lua_pushlstring(L, scratch.data + off, dl);
			return 1;
		}
	}
	lua_pushnil(L);
	return 1;
}

static int args_iter(lua_State *L)
{
	struct stream *t = req_stream(L);
	size_t pos = (size_t)lua_tointeger(L, lua_upvalueindex(1));
	size_t qlen, nl, vl;
	const char *q = query(t, &qlen), *n, *v;
	if (!next_pair(q, qlen, &pos, &n, &nl, &v, &vl))
		return 0;
	lua_pushinteger(L, (lua_Integer)pos);
	lua_replace(L, lua_upvalueindex(1));
	scratch.len = 0;
	size_t dn, dv;
	size_t on = decode_into(n, nl, &dn);
	size_t ov = decode_into(v, vl, &dv);
	lua_pushlstring(L, scratch.data + on, dn);
	lua_pushlstring(L, scratch.data + ov, dv);
	return 2;
}

/* for k, v in req:args() -- the closure keeps the position; the generic
 * for passes req as its state so each step re-checks it is still valid. */
static int req_args(lua_State *L)
{
	check(L, 0);
	lua_pushinteger(L, 0);
	lua_pushcclosure(L, args_iter, 1);
	lua_pushvalue(L, 1);
	return 2;
}

/* ---- headers (req and resp share these) ---- */

static struct msg *msg_of(lua_State *L, int is_resp)
{
	struct inspect_ref *r = check(L, is_resp);
	return is_resp ? &r->s->resp : &r->s->req;
}

static int hdr_get(lua_State *L, int is_resp)
{
	struct msg *m = msg_of(L, is_resp);
	size_t nl;
	const char *name = luaL_checklstring(L, 2, &nl);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		if (h->name_len == nl && strncasecmp(msg_str(m, h->name_off), name, nl) == 0) {
			lua_pushlstring(L, msg_str(m, h->val_off), h->val_len);
			return 1;
		}
	}
	lua_pushnil(L);
	return 1;
}

static int hdr_count(lua_State *L, int is_resp)
{
	struct msg *m = msg_of(L, is_resp);
	size_t nl;
	const char *name = luaL_checklstring(L, 2, &nl);
	lua_Integer n = 0;
	for (uint32_t i = 0; i < m->nhdrs; i++)
		if (m->hdrs[i].name_len == nl && strncasecmp(msg_str(m, m->hdrs[i].name_off), name, nl) == 0)
			n++;
	lua_pushinteger(L, n);
	return 1;
}

static int hdr_iter(lua_State *L, int is_resp)
{
	struct msg *m = msg_of(L, is_resp);
	lua_Integer i = lua_tointeger(L, lua_upvalueindex(1));
	if (i >= (lua_Integer)m->nhdrs)
		return 0;
	lua_pushinteger(L, i + 1);
	lua_replace(L, lua_upvalueindex(1));
	const struct hdr *h = &m->hdrs[i];
	lua_pushlstring(L, msg_str(m, h->name_off), h->name_len);
	lua_pushlstring(L, msg_str(m, h->val_off), h->val_len);
	return 2;
}

static int req_hdr_iter(lua_State *L) { return hdr_iter(L, 0); }
static int resp_hdr_iter(lua_State *L) { return hdr_iter(L, 1); }

static int hdr_all(lua_State *L, int is_resp)
{
	check(L, is_resp);
	lua_pushinteger(L, 0);
	lua_pushcclosure(L, is_resp ? resp_hdr_iter : req_hdr_iter, 1);
	lua_pushvalue(L, 1);
	return 2;
}

/* Check an edit of NAME (and VALUE unless NULL); raises on a bad one. */
static void edit_check(lua_State *L, int is_resp, const char *name, size_t nl, const char *val, size_t vl)
{
	if (nl == 0 || nl > 256)
		luaL_error(L, "header name must be 1 to 256 bytes");
	for (size_t i = 0; i < nl; i++)
		if (!tchar((unsigned char)name[i]))
			luaL_error(L, "bad header name \"%s\" (not an HTTP token)", name);
	int hop;
	if (!hdr_editable(hdr_classify(name, nl, &hop), is_resp))
		luaL_error(L, "header %s cannot be edited: sluice sets it (framing, routing or client identity)", name);
	if (val == NULL)
		return;
	if (vl > HDR_VALUE_MAX)
		luaL_error(L, "header value longer than %d bytes", HDR_VALUE_MAX);
	for (size_t i = 0; i < vl; i++)
		if (val[i] == '\r' || val[i] == '\n' || val[i] == '\0')
			luaL_error(L, "header value contains CR, LF or NUL");
}

/* The edits of one direction, or NULL when they are not recorded (shadow). */
static struct inspect_ref *editor(lua_State *L, int is_resp, struct buf **add, struct buf **del)
{
	struct inspect_ref *r;
	if (is_resp) {
		r = check(L, 1);
		if (r->phase != INSPECT_PH_RESPONSE)
			luaL_error(L, "resp can only be edited in inspect_response()");
	} else {
		r = acting(L, "set_header");
	}
	struct txn_insp *in = &r->s->insp;
	*add = is_resp ? &in->resp_hdrs : &in->req_hdrs;
	*del = is_resp ? &in->resp_del : &in->req_del;
	return r;
}

static int hdr_edit(lua_State *L, int is_resp, int remove_old, int add_new)
{
	struct buf *add, *del;
	struct inspect_ref *r = editor(L, is_resp, &add, &del);
	size_t nl, vl = 0;
	const char *name = luaL_checklstring(L, 2, &nl);
	const char *val = add_new ? luaL_checklstring(L, 3, &vl) : NULL;
	edit_check(L, is_resp, name, nl, val, vl);
	if (r->ic->shadow)
		return 0;
	if (remove_old) {
		buf_append(del, name, nl);
		buf_append(del, "", 1);
		/* Lines an earlier set/add made for the same name go too. */
		size_t w = 0, pos = 0;
		while (pos < add->len) {
			const char *line = add->data + pos;
			const char *eol = memchr(line, '\n', add->len - pos);
			size_t ll = (size_t)(eol - line) + 1;
			int same = ll > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0;
			if (!same) {
				memmove(add->data + w, line, ll);
				w += ll;
			}
			pos += ll;
		}
		add->len = w;
	}
	if (add_new) {
		buf_append(add, name, nl);
		buf_append(add, ": ", 2);
		buf_append(add, val, vl);
		buf_append(add, "\r\n", 2);
	}
	return 0;
}

static int req_header(lua_State *L) { return hdr_get(L, 0); }
static int req_header_count(lua_State *L) { return hdr_count(L, 0); }
static int req_headers(lua_State *L) { return hdr_all(L, 0); }
static int req_set_header(lua_State *L) { return hdr_edit(L, 0, 1, 1); }
static int req_add_header(lua_State *L) { return hdr_edit(L, 0, 0, 1); }
static int req_remove_header(lua_State *L) { return hdr_edit(L, 0, 1, 0); }
static int resp_header(lua_State *L) { return hdr_get(L, 1); }
static int resp_header_count(lua_State *L) { return hdr_count(L, 1); }
static int resp_headers(lua_State *L) { return hdr_all(L, 1); }
static int resp_set_header(lua_State *L) { return hdr_edit(L, 1, 1, 1); }
static int resp_add_header(lua_State *L) { return hdr_edit(L, 1, 0, 1); }
static int resp_remove_header(lua_State *L) { return hdr_edit(L, 1, 1, 0); }

static int resp_status(lua_State *L)
{
	struct inspect_ref *r = check(L, 1);
	lua_pushinteger(L, r->s->status);
	return 1;
}

/* ---- cookies ---- */

/* Next cookie of the Cookie headers from header *HI, offset *OFF. */
static int next_cookie(const struct msg *m, uint32_t *hi, size_t *off, const char **name, size_t *nlen,
		       const char **val, size_t *vlen)
{
	for (; *hi < m->nhdrs; (*hi)++, *off = 0) {
		const struct hdr *h = &m->hdrs[*hi];
		if (!tok_eq(msg_str(m, h->name_off), h->name_len, "cookie"))
			continue;
		const char *v = msg_str(m, h->val_off);
		while (*off < h->val_len) {
			while (*off < h->val_len && (v[*off] == ' ' || v[*off] == ';' || v[*off] == '\t'))
				(*off)++;
			if (*off >= h->val_len)
				break;
			const char *p = v + *off;
			const char *end = memchr(p, ';', h->val_len - *off);
			size_t plen = end ? (size_t)(end - p) : h->val_len - *off;
			*off += plen;
			const char *eq = memchr(p, '=', plen);
			*name = p;
			*nlen = eq ? (size_t)(eq - p) : plen;
			while (*nlen && (p[*nlen - 1] == ' ' || p[*nlen - 1] == '\t'))
				(*nlen)--;
			*val = eq ? eq + 1 : p + plen;
			*vlen = eq ? plen - (size_t)(eq + 1 - p) : 0;
			while (*vlen && ((*val)[0] == ' ' || (*val)[0] == '\t'))
				(*val)++, (*vlen)--;
			while (*vlen && ((*val)[*vlen - 1] == ' ' || (*val)[*vlen - 1] == '\t'))
				(*vlen)--;
			return 1;
		}
	}
	return 0;
}

static int req_cookie(lua_State *L)
{
	struct stream *t = req_stream(L);
	size_t wl;
	const char *want = luaL_checklstring(L, 2, &wl);
	uint32_t hi = 0;
	size_t off = 0, nl, vl;
	const char *n, *v;
	while (next_cookie(&t->req, &hi, &off, &n, &nl, &v, &vl))
		if (nl == wl && memcmp(n, want, wl) == 0) {
			lua_pushlstring(L, v, vl);
			return 1;
		}
	lua_pushnil(L);
	return 1;
}

static int cookies_iter(lua_State *L)
{
	struct stream *t = req_stream(L);
	uint32_t hi = (uint32_t)lua_tointeger(L, lua_upvalueindex(1));
	size_t off = (size_t)lua_tointeger(L, lua_upvalueindex(2)), nl, vl;
	const char *n, *v;
	if (!next_cookie(&t->req, &hi, &off, &n, &nl, &v, &vl))
		return 0;
	lua_pushinteger(L, hi);
	lua_replace(L, lua_upvalueindex(1));
	lua_pushinteger(L, (lua_Integer)off);
	lua_replace(L, lua_upvalueindex(2));
	lua_pushlstring(L, n, nl);
	lua_pushlstring(L, v, vl);
	return 2;
}

static int req_cookies(lua_State *L)
{
	check(L, 0);
	lua_pushinteger(L, 0);
	lua_pushinteger(L, 0);
	lua_pushcclosure(L, cookies_iter, 2);
	lua_pushvalue(L, 1);
	return 2;
}

/* ---- body, client, TLS ---- */

static int req_body(lua_State *L)
{
	struct inspect_ref *r = check(L, 0);
	struct stream *t = r->s;
	if (r->ic->body == 0 || r->phase != INSPECT_PH_INSPECT) {
		lua_pushnil(L);
		return 1;
	}
	/* While held, tobe is the de-chunked body as received. */
	size_t n = t->tobe.len < r->ic->body ? t->tobe.len : r->ic->body;
	lua_pushlstring(L, t->tobe.data ? t->tobe.data : "", n);
	return 1;
}

static int req_body_truncated(lua_State *L)
{
	lua_pushboolean(L, req_stream(L)->insp.body_truncated);
	return 1;
}

static int req_client_ip(lua_State *L)
{
	struct client *cl = check(L, 0)->s->cl;
	char ip[NETADDR_IP_MAX];
	size_t n = netaddr_ip_text(&cl->src, ip, sizeof(ip));
	lua_pushlstring(L, ip, n);
	return 1;
}

static int req_client_port(lua_State *L)
{
	lua_pushinteger(L, netaddr_port(&check(L, 0)->s->cl->src));
	return 1;
}

static int req_listener(lua_State *L)
{
	lua_pushstring(L, check(L, 0)->s->cl->li->cfg->name);
	return 1;
}

static int req_backend(lua_State *L)
{
	lua_pushstring(L, req_stream(L)->be->cfg->name);
	return 1;
}

static int req_route(lua_State *L)
{
	const struct cfg_route *rt = req_stream(L)->route;
	if (rt)
		lua_pushstring(L, rt->name);
	else
		lua_pushnil(L);
	return 1;
}

static int req_tls(lua_State *L)
{
	lua_pushboolean(L, check(L, 0)->s->cl->tls != NULL);
	return 1;
}

static int tls_fact(lua_State *L, int which)
{
	struct client *cl = check(L, 0)->s->cl;
	if (cl->tls == NULL) {
		lua_pushnil(L);
		return 1;
	}
	if (which == 3) {
		char subj[512];
		size_t n = tls_conn_peer_subject(cl->tls, subj, sizeof(subj));
		push_or_nil(L, n ? subj : NULL, n);
		return 1;
	}
	struct tls_facts f;
	tls_conn_facts(cl->tls, &f);
	const char *v = which == 0 ? f.version : which == 1 ? f.cipher_std : f.sni;
	push_or_nil(L, v && v[0] ? v : NULL, v ? strlen(v) : 0);
	return 1;
}

static int req_tls_version(lua_State *L) { return tls_fact(L, 0); }
static int req_tls_cipher(lua_State *L) { return tls_fact(L, 1); }
static int req_sni(lua_State *L) { return tls_fact(L, 2); }
static int req_client_cert_subject(lua_State *L) { return tls_fact(L, 3); }

static int req_id(lua_State *L)
{
	struct client *cl = check(L, 0)->s->cl;
	lua_pushfstring(L, "w%d-c%I-r%I", W->index, (lua_Integer)cl->serial, (lua_Integer)cl->nrequests + 1);
	return 1;
}

/* ---- actions ---- */

/* The first deny or redirect wins. */
static int decided(const struct txn_insp *in)
{
	return in->decision != INSPECT_ALLOW;
}

static int req_deny(lua_State *L)
{
	struct inspect_ref *r = acting(L, "deny");
	struct txn_insp *in = &r->s->insp;
	lua_Integer status = luaL_optinteger(L, 2, 403);
	size_t bl = 0;
	const char *body = luaL_optlstring(L, 3, NULL, &bl);
	if (status < 400 || status > 599)
		return luaL_error(L, "req:deny(): status %d is not 400..599", (int)status);
	if (decided(in))
		return 0;
	in->decision = r->ic->shadow ? INSPECT_WOULD_DENY : INSPECT_DENY;
	in->status = (uint16_t)status;
	in->local.len = 0;
	in->deny_body = body != NULL;
	if (body)
		buf_append(&in->local, body, bl);
	return 0;
}

static int req_redirect(lua_State *L)
{
	struct inspect_ref *r = acting(L, "redirect");
	struct txn_insp *in = &r->s->insp;
	size_t ll;
	const char *loc = luaL_checklstring(L, 2, &ll);
	lua_Integer status = luaL_optinteger(L, 3, 302);
	if (status != 301 && status != 302 && status != 303 && status != 307 && status != 308)
		return luaL_error(L, "req:redirect(): status must be 301, 302, 303, 307 or 308");
	if (ll == 0 || ll > HDR_VALUE_MAX || memchr(loc, '\r', ll) || memchr(loc, '\n', ll) || memchr(loc, '\0', ll))
		return luaL_error(L, "req:redirect(): bad location (empty, too long, or CR/LF/NUL)");
	if (decided(in))
		return 0;
	in->decision = r->ic->shadow ? INSPECT_WOULD_REDIRECT : INSPECT_REDIRECT;
	in->status = (uint16_t)status;
	in->local.len = 0;
	buf_append(&in->local, loc, ll);
	return 0;
}

static int req_set_backend(lua_State *L)
{
	struct inspect_ref *r = acting(L, "set_backend");
	const char *name = luaL_checkstring(L, 2);
	struct backend *be = upstream_backend(name);
	if (be == NULL)
		return luaL_error(L, "req:set_backend(): no backend named \"%s\"", name);
	if (!r->ic->shadow)
		r->s->be = be;
	return 0;
}

static int req_tag(lua_State *L)
{
	struct inspect_ref *r = acting(L, "tag");
	struct txn_insp *in = &r->s->insp;
	size_t tl;
	const char *tag = luaL_checklstring(L, 2, &tl);
	if (tl == 0 || tl > 64)
		return luaL_error(L, "req:tag(): a tag is 1 to 64 bytes");
	for (size_t i = 0; i < tl; i++)
		if (!(tchar((unsigned char)tag[i]) || tag[i] == ':') || tag[i] == ',' || tag[i] == '"' ||
		    tag[i] == '\\')
			return luaL_error(L, "req:tag(): use letters, digits and -_.:");
	if (in->ntags >= INSPECT_MAX_TAGS)
		return 0;
	if (in->ntags)
		buf_append(&in->tags, ",", 1);
	buf_append(&in->tags, tag, tl);
	in->ntags++;
	return 0;
}

/* ---- outcome (log) ---- */

static struct inspect_ref *logging(lua_State *L, const char *what)
{
	struct inspect_ref *r = check(L, 0);
	if (r->phase != INSPECT_PH_LOG)
		luaL_error(L, "req:%s() is only available in log()", what);
	return r;
}

static int req_status(lua_State *L)
{
	struct stream *t = logging(L, "status")->s;
	if (t->resp_head_sent)
		lua_pushinteger(L, t->status);
	else
		lua_pushnil(L);
	return 1;
}

static int req_decision(lua_State *L)
{
	lua_pushstring(L, inspect_decision_name(logging(L, "decision")->s->insp.decision));
	return 1;
}

static int req_tags(lua_State *L)
{
	struct txn_insp *in = &check(L, 0)->s->insp;
	lua_pushlstring(L, in->tags.data ? in->tags.data : "", in->tags.len);
	return 1;
}

static int req_inspect_us(lua_State *L)
{
	struct txn_insp *in = &logging(L, "inspect_us")->s->insp;
	if (in->ran)
		lua_pushinteger(L, (lua_Integer)in->us);
	else
		lua_pushnil(L);
	return 1;
}

static int req_total_us(lua_State *L)
{
	struct stream *t = logging(L, "total_us")->s;
	lua_pushinteger(L, t->t_start ? (lua_Integer)(now_us() - t->t_start) : 0);
	return 1;
}

static int ref_tostring(lua_State *L)
{
	struct inspect_ref *r = lua_touserdata(L, 1);
	lua_pushstring(L, r->is_resp ? "sluice.resp" : "sluice.req");
	return 1;
}

static void new_mt(lua_State *L, const char *name, const luaL_Reg *methods)
{
	luaL_newmetatable(L, name);
	lua_newtable(L);
	luaL_setfuncs(L, methods, 0);
	lua_setfield(L, -2, "__index");
	lua_pushcfunction(L, ref_tostring);
	lua_setfield(L, -2, "__tostring");
	lua_pushboolean(L, 0);
	lua_setfield(L, -2, "__metatable");  /* scripts cannot reach or change it */
	lua_pop(L, 1);
}

void inspect_api_open(lua_State *L)
{
	static const luaL_Reg req_m[] = {
		{ "method", req_method }, { "version", req_version }, { "uri", req_uri }, { "path", req_path }, { "query", req_query },
		{ "arg", req_arg }, { "args", req_args },
		{ "header", req_header }, { "header_count", req_header_count }, { "headers", req_headers },
		{ "cookie", req_cookie }, { "cookies", req_cookies },
		{ "body", req_body }, { "body_truncated", req_body_truncated },
		{ "client_ip", req_client_ip }, { "client_port", req_client_port },
		{ "listener", req_listener }, { "backend", req_backend }, { "route", req_route }, { "tls", req_tls },
		{ "tls_version", req_tls_version }, { "tls_cipher", req_tls_cipher }, { "sni", req_sni },
		{ "client_cert_subject", req_client_cert_subject }, { "id", req_id },
		{ "deny", req_deny }, { "redirect", req_redirect }, { "set_header", req_set_header },
		{ "add_header", req_add_header }, { "remove_header", req_remove_header },
		{ "set_backend", req_set_backend }, { "tag", req_tag },
		{ "status", req_status }, { "decision", req_decision }, { "tags", req_tags },
		{ "inspect_us", req_inspect_us }, { "total_us", req_total_us },
		{ NULL, NULL },
	};
	static const luaL_Reg resp_m[] = {
		{ "status", resp_status }, { "header", resp_header }, { "header_count", resp_header_count },
		{ "headers", resp_headers }, { "set_header", resp_set_header }, { "add_header", resp_add_header },
		{ "remove_header", resp_remove_header }, { NULL, NULL },
	};
	new_mt(L, REQ_MT, req_m);
	new_mt(L, RESP_MT, resp_m);
}

void inspect_api_req_view(lua_State *L, int idx, struct inspect_req_view *v)
{
	struct inspect_ref *r = luaL_checkudata(L, idx, REQ_MT);
	if (r->s == NULL || r->phase == INSPECT_PH_NONE)
		luaL_error(L, "req used outside the call it was passed to");
	struct stream *t = r->s;
	v->method = llhttp_method_name((llhttp_method_t)t->method);
	v->target = target(t, &v->target_len);
	v->version = t->http_major == 2 ? "HTTP/2.0" : t->http_minor ? "HTTP/1.1" : "HTTP/1.0";
	v->head = &t->req;
	v->body = NULL;
	v->body_len = 0;
	if (r->ic->body && r->phase == INSPECT_PH_INSPECT) {
		v->body = t->tobe.data ? t->tobe.data : "";
		v->body_len = t->tobe.len < r->ic->body ? t->tobe.len : r->ic->body;
	}
	size_t n = netaddr_ip_text(&t->cl->src, v->client_ip, sizeof(v->client_ip));
	v->client_ip[n < sizeof(v->client_ip) ? n : sizeof(v->client_ip) - 1] = '\0';
	v->client_port = netaddr_port(&t->cl->src);
}

struct inspect_ref *inspect_api_new(lua_State *L, int is_resp)
{
	struct inspect_ref *r = lua_newuserdatauv(L, sizeof(*r), 0);
	memset(r, 0, sizeof(*r));
	r->is_resp = (uint8_t)is_resp;
	luaL_setmetatable(L, is_resp ? RESP_MT : REQ_MT);
	return r;
}
