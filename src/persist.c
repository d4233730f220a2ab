/* Session persistence (see persist.h): cookie, jvm_route, weblogic,
 * app_cookie and source, behind one interface the upstream layer calls. */
#include <arpa/inet.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>
#include "persist.h"
#include "hash.h"
#include "httpmsg.h"
#include "log.h"
#include "shm.h"
#include "stats.h"
#include "util.h"
#include "worker.h"

static const struct persist_server_state *state;

void persist_set_server_state(const struct persist_server_state *st)
{
	state = st;
}

const char *persist_result_text(enum persist_result r)
{
	static const char *const t[] = { "none", "miss", "hit", "failover" };
	return t[r];
}

static uint64_t id_hash(const char *p, size_t n)
{
	uint64_t h = hash_bytes(0x776c, p, n);
	return h ? h : 1;  /* 0 means "none learned" */
}

void persist_init_server(struct server *srv)
{
	srv->name_hash = hash_bytes(0x7372, srv->cfg->name, strlen(srv->cfg->name));
	srv->jvmid_seed = srv->cfg->jvmid[0] ? id_hash(srv->cfg->jvmid, strlen(srv->cfg->jvmid)) : 0;
}

/* ---- reading the request's key ---- */

int persist_path_param(const char *u, size_t n, const char *name, const char **v, size_t *vl)
{
	size_t nl = strlen(name);
	const char *end = u + n, *q = memchr(u, '?', n);
	end = q ? q : end;
	for (const char *p = u; p < end && (p = memchr(p, ';', (size_t)(end - p))) != NULL; p++) {
		if ((size_t)(end - p) <= nl + 1 || memcmp(p + 1, name, nl) != 0 || p[1 + nl] != '=')
			continue;
		const char *val = p + 2 + nl, *ve = val;
		while (ve < end && *ve != ';' && *ve != '/')
			ve++;
		*v = val;
		*vl = (size_t)(ve - val);
		return 1;
	}
	return 0;
}

/* The session id: the cookie first (Tomcat prefers it too), then the path. */
static int session_id(const struct stream *s, const struct cfg_persist *p, const char **v, size_t *vl)
{
	if (msg_cookie(&s->req, p->cookie, strlen(p->cookie), v, vl) && *vl)
		return 1;
	const struct msg *m = &s->req;
	return p->path_parameter[0] &&
	       persist_path_param(msg_str(m, m->url_off), m->url_len, p->path_parameter, v, vl) && *vl;
}

/* The server whose string key at OFF in its config (cookie, route) is V. */
static struct server *by_key(struct backend *be, size_t off, const char *v, size_t vl)
{
	for (unsigned i = 0; i < be->nservers; i++) {
		const char *k = (const char *)be->servers[i].cfg + off;
		if (strlen(k) == vl && memcmp(k, v, vl) == 0)
			return &be->servers[i];
	}
	return NULL;
}

/* The server whose JVMID (learned, else seeded) is ID. */
static struct server *by_jvmid(struct backend *be, const char *id, size_t n)
{
	if (n == 0 || (n == 4 && memcmp(id, "NONE", 4) == 0))
		return NULL;
	uint64_t h = id_hash(id, n);
	for (unsigned i = 0; i < be->nservers; i++) {
		struct server *srv = &be->servers[i];
		uint64_t learned = atomic_load_explicit(&shm->slots[srv->slot].wl_id, memory_order_relaxed);
		if (learned ? learned == h : srv->jvmid_seed == h)
			return srv;
	}
	return NULL;
}

void persist_weblogic_ids(const char *v, size_t vl, const char *id[2], size_t n[2])
{
	const char *end = v + vl, *p = memchr(v, '!', vl);
	for (int i = 0; i < 2; i++) {
		id[i] = NULL;
		n[i] = 0;
		if (p == NULL)
			continue;
		const char *b = p + 1, *e = memchr(b, '!', (size_t)(end - b));
		id[i] = b;
		n[i] = (size_t)((e ? e : end) - b);
		p = e;
	}
}

/* The client for source hashing: the peer (or what its PROXY header said),
 * or, from a trusted forwarder, the last address its X-Forwarded-For adds. */
static uint64_t source_key(const struct stream *s)
{
	const struct client *cl = s->cl;
	struct netaddr a;
	netaddr_unmap(&a, &cl->src);
	if (cl->trusted_fwd) {
		const struct msg *m = &s->req;
		for (uint32_t i = m->nhdrs; i-- > 0;) {
			if (m->hdrs[i].kind != HDR_X_FORWARDED_FOR)
				continue;
			const char *v = msg_str(m, m->hdrs[i].val_off), *e = v + m->hdrs[i].val_len;
			const char *b = e;
			while (b > v && b[-1] != ',')
				b--;
			while (b < e && (*b == ' ' || *b == '\t'))
				b++;
			char ip[64];
			size_t n = (size_t)(e - b);
			if (n == 0 || n >= sizeof(ip))
				break;
			memcpy(ip, b, n);
			ip[n] = '\0';
			if (inet_pton(AF_INET, ip, a.ip) == 1)
				a.family = AF_INET;
			else if (inet_pton(AF_INET6, ip, a.ip) == 1)
				a.family = AF_INET6;
			break;
		}
	}
	return hash_bytes(a.family, a.ip, a.family == AF_INET ? 4 : 16);
}

void persist_request(struct stream *s)
{
	const struct cfg_persist *p = &s->be->cfg->persist;
	struct backend *be = s->be;
	const char *v;
	size_t vl;

	s->sticky[0] = s->sticky[1] = NULL;
	s->persist_key = 0;
	s->persist = PERSIST_NONE;
	switch (p->type) {
	case CFG_PERSIST_NONE:
		return;
	case CFG_PERSIST_COOKIE:
		if (msg_cookie(&s->req, p->cookie, strlen(p->cookie), &v, &vl) && vl) {
			s->persist_key = 1;
			s->sticky[0] = by_key(be, offsetof(struct cfg_server, cookie), v, vl);
		}
		break;
	case CFG_PERSIST_JVM_ROUTE:
		if (session_id(s, p, &v, &vl)) {
			s->persist_key = 1;
			const char *dot = memchr(v, '.', vl);
			if (dot)
				s->sticky[0] = by_key(be, offsetof(struct cfg_server, route), dot + 1,
						     (size_t)(v + vl - dot - 1));
		}
		break;
	case CFG_PERSIST_WEBLOGIC:
		if (session_id(s, p, &v, &vl)) {
			const char *id[2];
			size_t n[2];
			s->persist_key = 1;
			persist_weblogic_ids(v, vl, id, n);
			s->sticky[0] = by_jvmid(be, id[0], n[0]);
			s->sticky[1] = by_jvmid(be, id[1], n[1]);
			if (s->sticky[1] == s->sticky[0])
				s->sticky[1] = NULL;
		}
		break;
	case CFG_PERSIST_APP_COOKIE:
		if (msg_cookie(&s->req, p->cookie, strlen(p->cookie), &v, &vl) && vl) {
			s->persist_key = 1;
			s->sticky_key = hash_bytes((uint64_t)be->slot, v, vl);
			int slot = shm_stick_get(W->slot, s->sticky_key, (uint32_t)(now_us() / 1000000),
						 p->ttl_ms / 1000);
			for (unsigned i = 0; slot >= 0 && i < be->nservers; i++)
				if (be->servers[i].slot == slot)
					s->sticky[0] = &be->servers[i];
		}
		break;
	case CFG_PERSIST_SOURCE:
		s->persist_key = 1;
		s->sticky_key = source_key(s);
		break;
	}
}

/* ---- choosing ---- */

/* Weighted rendezvous hashing: every server scores the client, the best
 * score wins; a server added or removed moves only the clients it wins or
 * won (1/n of them). score = -w / ln(u), u uniform in (0,1) from the hash. */
static double hrw_score(uint64_t key, const struct server *srv, uint32_t w)
{
	uint64_t h = hash_mix64(key ^ srv->name_hash);
	double u = ((double)(h >> 11) + 0.5) * (1.0 / 9007199254740992.0);
	return -(double)w / log(u);
}

static struct server *source_target(struct stream *s)
{
	struct backend *be = s->be;
	struct server *top = NULL, *best = NULL;
	double top_score = 0, best_score = 0;
	for (unsigned i = 0; i < be->nservers; i++) {
		struct server *srv = &be->servers[i];
		uint32_t w = state->weight(srv);
		if (srv->cfg->backup || w == 0)
			continue;
		double sc = hrw_score(s->sticky_key, srv, w);
		if (top == NULL || sc > top_score) {
			top = srv;
			top_score = sc;
		}
		/* Drain: the hash holds no sessions to keep, the clients move. */
		if (srv != s->avoid && state->usable(srv) && (best == NULL || sc > best_score)) {
			best = srv;
			best_score = sc;
		}
	}
	s->persist = best && best == top ? PERSIST_HIT : PERSIST_FAILOVER;
	return best;
}

struct server *persist_target(struct stream *s)
{
	switch (s->be->cfg->persist.type) {
	case CFG_PERSIST_NONE:
		s->persist = PERSIST_NONE;
		return NULL;
	case CFG_PERSIST_SOURCE:
		return source_target(s);
	default:
		break;
	}
	/* WebLogic's plug-in moves a session off a draining primary to its
	 * secondary, which holds the replica; only when neither is in
	 * balancing does a draining one keep it. Other types have no replica
	 * to go to: a draining server keeps its sessions. */
	int strict = s->be->cfg->persist.type == CFG_PERSIST_WEBLOGIC;
	for (int pass = strict ? 0 : 1; pass < 2; pass++)
		for (int i = 0; i < 2; i++) {
			struct server *srv = s->sticky[i];
			if (srv && srv != s->avoid &&
			    (pass ? state->keeps_sessions(srv) : state->usable(srv))) {
				s->persist = i == 0 ? PERSIST_HIT : PERSIST_FAILOVER;
				return srv;
			}
		}
	/* A key naming no server we know is a session we cannot place (a
	 * server removed, a cookie from elsewhere): balanced, like none.
	 * WebLogic's primary unknown but a secondary named is a failover. */
	s->persist = s->sticky[0] || s->sticky[1] ? PERSIST_FAILOVER : PERSIST_MISS;
	return NULL;
}

/* ---- learning from the response ---- */

static int name_is(const struct msg *m, const struct hdr *h, const char *lit, size_t n)
{
	return h->name_len == n && strncasecmp(msg_str(m, h->name_off), lit, n) == 0;
}

/* SRV showed JVMID ID: it is SRV's now, and no other server's. */
static void weblogic_learn(struct server *srv, const char *id, size_t n)
{
	if (n == 0 || (n == 4 && memcmp(id, "NONE", 4) == 0))
		return;
	uint64_t h = id_hash(id, n);
	_Atomic uint64_t *mine = &shm->slots[srv->slot].wl_id;
	if (atomic_load_explicit(mine, memory_order_relaxed) == h)
		return;
	struct backend *be = srv->be;
	for (unsigned i = 0; i < be->nservers; i++) {
		uint64_t old = h;
		if (&be->servers[i] != srv)
			atomic_compare_exchange_strong(&shm->slots[be->servers[i].slot].wl_id, &old, 0);
	}
	atomic_store(mine, h);
	log_info("backend %s: server %s has JVMID %.*s", be->cfg->name, srv->cfg->name, (int)n, id);
}

static void cookie_insert(struct stream *s)
{
	const struct cfg_persist *p = &s->be->cfg->persist;
	struct buf *b = &s->insp.resp_hdrs;
	/* Plain appends: vsnprintf cost as much as the rest of persistence. */
	buf_append_str(b, "Set-Cookie: ");
	buf_append_str(b, p->cookie);
	buf_append(b, "=", 1);
	buf_append_str(b, s->srv->cfg->cookie);
	buf_append_str(b, "; Path=");
	buf_append_str(b, p->path);
	if (p->domain[0]) {
		buf_append_str(b, "; Domain=");
		buf_append_str(b, p->domain);
	}
	if (p->max_age_s)
		buf_appendf(b, "; Max-Age=%u", p->max_age_s);
	if (p->secure > 0 || (p->secure < 0 && s->cl->tls))
		buf_append_str(b, "; Secure");
	if (p->http_only)
		buf_append_str(b, "; HttpOnly");
	static const char *const ss[] = { "", "; SameSite=Lax", "; SameSite=Strict", "; SameSite=None" };
	buf_append_str(b, ss[p->same_site]);
	buf_append(b, "\r\n", 2);
}

void persist_response(struct stream *s)
{
	const struct cfg_persist *p = &s->be->cfg->persist;
	const struct msg *m = &s->resp;
	struct server *srv = s->srv;
	if (srv == NULL || p->type == CFG_PERSIST_NONE)
		return;
	if (p->type == CFG_PERSIST_COOKIE) {
		if (s->sticky[0] != srv)
			cookie_insert(s);
		return;
	}
	if (p->type != CFG_PERSIST_WEBLOGIC && p->type != CFG_PERSIST_APP_COOKIE)
		return;
	size_t cl = strlen(p->cookie);
	for (uint32_t i = 0; i < m->nhdrs; i++) {
		const struct hdr *h = &m->hdrs[i];
		const char *hv = msg_str(m, h->val_off), *n, *v;
		size_t nl, vl;
		if (p->type == CFG_PERSIST_WEBLOGIC && name_is(m, h, "x-weblogic-jvmid", 16)) {
			weblogic_learn(srv, hv, h->val_len);
			continue;
		}
		if (!name_is(m, h, "set-cookie", 10) || set_cookie_split(hv, h->val_len, &n, &nl, &v, &vl) < 0 ||
		    nl != cl || memcmp(n, p->cookie, cl) != 0 || vl == 0)
			continue;
		if (p->type == CFG_PERSIST_WEBLOGIC) {
			const char *id[2];
			size_t idn[2];
			persist_weblogic_ids(v, vl, id, idn);
			if (id[0])
				weblogic_learn(srv, id[0], idn[0]);
		} else {
			shm_stick_put(W->slot, hash_bytes((uint64_t)s->be->slot, v, vl), srv->slot,
				      (uint32_t)(now_us() / 1000000));
		}
	}
}
