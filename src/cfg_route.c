/* The `routes` of a listener (docs/config.md, "listeners[].routes"):
 * conditions and actions checked and compiled at load, so that a bad regex,
 * a bad redirect template, a protected header or a route that can never
 * match is an error with its file:line:col, never a surprise at run time. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <llhttp.h>
#include <pcre2.h>

#include "cfg.h"
#include "cfg-int.h"
#include "hash.h"
#include "httpmsg.h"
#include "ratelimit.h"

#define ROUTE_BODY_MAX (1024 * 1024)
#define ROUTE_VALUE_MAX 8192

static void *regex_compile(struct cfg_load *ld, const char *path, const char *pat)
{
	int err;
	PCRE2_SIZE off;
	pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_NEVER_BACKSLASH_C,
				       &err, &off, NULL);
	if (re == NULL) {
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(err, msg, sizeof(msg));
		cfg_err_at(ld, path, AT_VALUE, "bad regex at offset %zu: %s", (size_t)off, (char *)msg);
		return NULL;
	}
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  /* interpreted where JIT is unavailable */
	return re;
}

static int token_ok(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!tchar((unsigned char)*s))
			return 0;
	return 1;
}

static char *dup_or_oom(struct cfg_load *ld, const char *s, size_t n)
{
	char *d = malloc(n + 1);
	if (d == NULL) {
		ld->oom = 1;
		return NULL;
	}
	memcpy(d, s, n);
	d[n] = '\0';
	return d;
}

static void blob_add(struct cfg_load *ld, char **blob, size_t *len, const char *s, size_t n)
{
	char *nb = realloc(*blob, *len + n + 1);
	if (nb == NULL) {
		ld->oom = 1;
		return;
	}
	memcpy(nb + *len, s, n);
	*len += n;
	nb[*len] = '\0';
	*blob = nb;
}

/* "example.com", "*.example.com": lowercase DNS names, no port. */
static void conv_hosts(struct cfg_load *ld, const char *pre, const struct y_match *y, struct cfg_route *r)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	kp(k, pre, "host");
	if (y->host_count == 0) {
		if (y->host != NULL)
			cfg_err_at(ld, k, AT_VALUE, "an empty list matches nothing: give names, or leave host out");
		return;
	}
	r->hosts = calloc(y->host_count, sizeof(*r->hosts));
	if (r->hosts == NULL) {
		ld->oom = 1;
		return;
	}
	for (unsigned i = 0; i < y->host_count; i++) {
		const char *h = y->host[i];
		path_index(ep, k, i);
		if (h == NULL || cfg_conv_nonempty(ld, ep, h) < 0)
			continue;
		size_t n = strlen(h);
		if (n > 1 && h[n - 1] == '.')
			n--;  /* a fully qualified name's dot */
		const char *p = h;
		int ok = n < sizeof(r->hosts[0]);
		if (n > 2 && p[0] == '*' && p[1] == '.')
			p += 2;
		for (; ok && p < h + n; p++)
			ok = isalnum((unsigned char)*p) || *p == '-' || *p == '.' || *p == '_';
		if (!ok) {
			cfg_err_at(ld, ep, AT_VALUE, "bad host \"%.80s\" (a DNS name, or *.name for any "
				   "name under it; no port)", h);
			continue;
		}
		for (size_t j = 0; j < n; j++)
			r->hosts[r->nhosts][j] = (char)tolower((unsigned char)h[j]);
		r->hosts[r->nhosts][n] = '\0';
		r->nhosts++;
	}
}

static void conv_path(struct cfg_load *ld, const char *pre, const struct y_path *y, struct cfg_route *r)
{
	char k[CFG_PATH_MAX];
	int n = (y->exact != NULL) + (y->prefix != NULL) + (y->regex != NULL);
	if (n != 1) {
		cfg_err_at(ld, pre, AT_KEY, "needs exactly one of exact, prefix or regex");
		return;
	}
	int plain = 0;
	cfg_conv_bool(ld, kp(k, pre, "plain"), y->plain, &plain);
	if (plain && y->prefix == NULL)
		cfg_err_at(ld, kp(k, pre, "plain"), AT_KEY, "plain only applies to prefix");
	if (y->regex != NULL) {
		r->path_kind = CFG_PATH_REGEX;
		r->path = dup_or_oom(ld, y->regex, strlen(y->regex));
		r->path_re = regex_compile(ld, kp(k, pre, "regex"), y->regex);
		return;
	}
	const char *v = y->exact ? y->exact : y->prefix;
	kp(k, pre, y->exact ? "exact" : "prefix");
	if (v[0] != '/') {
		cfg_err_at(ld, k, AT_VALUE, "a path starts with /");
		return;
	}
	for (const char *p = v; *p; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f || *p == '?' || *p == '#' || *p == '%' || *p == ';') {
			cfg_err_at(ld, k, AT_VALUE, "paths are matched decoded and without ;parameters: "
				   "write \"%.80s\" without %%-escapes, ';', '?', '#', spaces or control bytes", v);
			return;
		}
	}
	size_t len = strlen(v);
	r->path_kind = y->exact ? CFG_PATH_EXACT : plain ? CFG_PATH_PLAIN_PREFIX : CFG_PATH_PREFIX;
	/* A segment prefix is kept without its trailing '/': "/app/" and "/app"
	 * both mean the /app subtree. */
	if (r->path_kind == CFG_PATH_PREFIX)
		while (len > 1 && v[len - 1] == '/')
			len--;
	r->path = dup_or_oom(ld, v, len);
}

static void conv_methods(struct cfg_load *ld, const char *pre, const struct y_match *y, struct cfg_route *r)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	kp(k, pre, "methods");
	if (y->methods != NULL && y->methods_count == 0)
		cfg_err_at(ld, k, AT_VALUE, "an empty list matches nothing: name methods, or leave methods out");
	for (unsigned i = 0; i < y->methods_count; i++) {
		path_index(ep, k, i);
		const char *m = y->methods[i];
		if (m == NULL || cfg_conv_nonempty(ld, ep, m) < 0)
			continue;
		int found = -1;
#define METHOD_ID(num, name, string) \
		if (found < 0 && (num) < 64 && strcmp(#string, m) == 0) \
			found = (num);
		HTTP_METHOD_MAP(METHOD_ID)
#undef METHOD_ID
		if (found < 0)
			cfg_err_at(ld, ep, AT_VALUE, "unknown method \"%.40s\" (methods are upper case: GET, "
				   "POST, ...)", m);
		else
			r->methods |= 1ull << found;
	}
}

static void conv_conds(struct cfg_load *ld, const char *k, const struct y_cond *y, unsigned n,
		       int cookies, struct cfg_cond **out, unsigned *nout)
{
	char ep[CFG_PATH_MAX], vk[CFG_PATH_MAX];
	if (n == 0)
		return;
	*out = calloc(n, sizeof(**out));
	if (*out == NULL) {
		ld->oom = 1;
		return;
	}
	for (unsigned i = 0; i < n; i++) {
		struct cfg_cond *c = &(*out)[*nout];
		path_index(ep, k, i);
		const char *name = y[i].name;
		if (name == NULL || !(cookies ? name[0] != '\0' && strpbrk(name, "=; \t") == NULL
					       : token_ok(name)) || strlen(name) >= sizeof(c->name)) {
			cfg_err_at(ld, kp(vk, ep, "name"), AT_VALUE, "bad %s name \"%.80s\"",
				   cookies ? "cookie" : "header", name ? name : "");
			continue;
		}
		int nops = (y[i].present != NULL) + (y[i].equals != NULL) + (y[i].regex != NULL);
		if (nops != 1) {
			cfg_err_at(ld, ep, AT_KEY, "needs exactly one of present, equals%s", cookies ? "" : " or regex");
			continue;
		}
		snprintf(c->name, sizeof(c->name), "%s", name);
		if (y[i].present != NULL) {
			int v = 1;
			cfg_conv_bool(ld, kp(vk, ep, "present"), y[i].present, &v);
			c->op = v ? CFG_COND_PRESENT : CFG_COND_ABSENT;
		} else if (y[i].equals != NULL) {
			c->op = CFG_COND_EQUALS;
			c->value_len = strlen(y[i].equals);
			c->value = dup_or_oom(ld, y[i].equals, c->value_len);
		} else {
			c->op = CFG_COND_REGEX;
			c->value_len = strlen(y[i].regex);
			c->value = dup_or_oom(ld, y[i].regex, c->value_len);
			c->re = regex_compile(ld, kp(vk, ep, "regex"), y[i].regex);
		}
		(*nout)++;
	}
}

/* {scheme} {host} {path} {query}, and no byte a header value cannot hold. */
static void check_template(struct cfg_load *ld, const char *path, const char *t)
{
	static const char *const vars[] = { "{scheme}", "{host}", "{path}", "{query}" };
	if (t[0] == '\0') {
		cfg_err_at(ld, path, AT_VALUE, "an empty Location");
		return;
	}
	for (const char *p = t; *p; p++) {
		if ((unsigned char)*p < ' ' || *p == 0x7f) {
			cfg_err_at(ld, path, AT_VALUE, "control byte in the Location template");
			return;
		}
		if (*p == '}') {
			cfg_err_at(ld, path, AT_VALUE, "'}' without '{' at offset %zu", (size_t)(p - t));
			return;
		}
		if (*p != '{')
			continue;
		size_t v;
		for (v = 0; v < 4; v++)
			if (strncmp(p, vars[v], strlen(vars[v])) == 0)
				break;
		if (v == 4) {
			cfg_err_at(ld, path, AT_VALUE, "unknown substitution at offset %zu (use {scheme}, "
				   "{host}, {path} or {query})", (size_t)(p - t));
			return;
		}
		p += strlen(vars[v]) - 1;
	}
}

static char *read_body_file(struct cfg_load *ld, const char *path, const char *file, size_t *len)
{
	int fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		cfg_err_at(ld, path, AT_VALUE, "cannot open %.200s: %m", file);
		return NULL;
	}
	char *b = malloc(ROUTE_BODY_MAX + 1);
	size_t n = 0;
	ssize_t got = 0;
	while (b && n <= ROUTE_BODY_MAX && (got = read(fd, b + n, ROUTE_BODY_MAX + 1 - n)) > 0)
		n += (size_t)got;
	close(fd);
	if (b == NULL) {
		ld->oom = 1;
		return NULL;
	}
	if (got < 0 || n > ROUTE_BODY_MAX) {
		cfg_err_at(ld, path, AT_VALUE, got < 0 ? "cannot read %.200s" : "%.200s is over 1 MiB", file);
		free(b);
		return NULL;
	}
	*len = n;
	return b;
}

static int status_in(struct cfg_load *ld, const char *path, const char *s, int dflt, const int *allowed)
{
	uint32_t v = (uint32_t)dflt;
	if (s == NULL)
		return dflt;
	cfg_conv_uint(ld, path, s, 200, 599, &v);
	if (allowed) {
		int ok = 0;
		for (const int *a = allowed; *a; a++)
			ok |= *a == (int)v;
		if (!ok) {
			cfg_err_at(ld, path, AT_VALUE, "a redirect status is 301, 302, 303, 307 or 308");
			return dflt;
		}
	}
	return (int)v;
}

/* Header edits: a set replaces every field of that name, so its name goes
 * to the removals too. Response edits may not touch framing; request edits
 * may not touch anything sluice owns (framing, Host, client identity), as
 * for the Lua hook. */
static void conv_edits(struct cfg_load *ld, const char *pre, const char *setkey, const struct y_kv *set,
		       unsigned nset, const char *delkey, char *const *del, unsigned ndel, int resp,
		       char **add_blob, size_t *add_len, char **del_blob, size_t *del_len)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX], vk[CFG_PATH_MAX];
	for (unsigned pass = 0; pass < 2; pass++) {
		unsigned n = pass ? ndel : nset;
		kp(k, pre, pass ? delkey : setkey);
		for (unsigned i = 0; i < n; i++) {
			path_index(ep, k, i);
			const char *name = pass ? del[i] : set[i].name;
			const char *where = pass ? ep : kp(vk, ep, "name");
			if (name == NULL || !token_ok(name) || strlen(name) > 256) {
				cfg_err_at(ld, where, AT_VALUE, "bad header name \"%.80s\"", name ? name : "");
				continue;
			}
			int hop;
			if (!hdr_editable(hdr_classify(name, strlen(name), &hop), resp)) {
				cfg_err_at(ld, where, AT_VALUE, "header %s cannot be edited: sluice sets it "
					   "(framing, routing or client identity)", name);
				continue;
			}
			blob_add(ld, del_blob, del_len, name, strlen(name) + 1);
			if (pass)
				continue;
			const char *v = set[i].value ? set[i].value : "";
			size_t vl = strlen(v);
			if (vl > ROUTE_VALUE_MAX || strpbrk(v, "\r\n") != NULL) {
				cfg_err_at(ld, kp(vk, ep, "value"), AT_VALUE, "a header value is at most %d bytes, "
					   "without CR or LF", ROUTE_VALUE_MAX);
				continue;
			}
			blob_add(ld, add_blob, add_len, name, strlen(name));
			blob_add(ld, add_blob, add_len, ": ", 2);
			blob_add(ld, add_blob, add_len, v, vl);
			blob_add(ld, add_blob, add_len, "\r\n", 2);
		}
	}
}

static int matches_all(const struct cfg_route *r)
{
	return r->nhosts == 0 && r->methods == 0 && r->nheaders == 0 && r->ncookies == 0 &&
	       (r->path_kind == CFG_PATH_ANY ||
		((r->path_kind == CFG_PATH_PREFIX || r->path_kind == CFG_PATH_PLAIN_PREFIX) &&
		 strcmp(r->path, "/") == 0));
}

static void conv_route(struct cfg_load *ld, const char *pre, unsigned idx, const struct y_route *y,
		       struct cfg_route *r)
{
	char k[CFG_PATH_MAX], mk[CFG_PATH_MAX];
	static const int redirects[] = { 301, 302, 303, 307, 308, 0 };
	unsigned line, col;

	snprintf(r->name, sizeof(r->name), "route%u", idx + 1);
	r->stats_slot = -1;
	cfg_conv_name(ld, kp(k, pre, "name"), y->name, r->name);
	cfg_pos_lookup(ld, pre, AT_KEY, &line, &col);
	r->line = (int)line;
	r->col = (int)col;
	if (y->match != NULL) {
		const struct y_match *m = y->match;
		kp(mk, pre, "match");
		conv_hosts(ld, mk, m, r);
		if (m->path != NULL)
			conv_path(ld, kp(k, mk, "path"), m->path, r);
		conv_methods(ld, mk, m, r);
		conv_conds(ld, kp(k, mk, "headers"), m->headers, m->headers_count, 0, &r->headers, &r->nheaders);
		conv_conds(ld, kp(k, mk, "cookies"), m->cookies, m->cookies_count, 1, &r->cookies, &r->ncookies);
	}
	int nact = (y->backend != NULL) + (y->redirect != NULL) + (y->respond != NULL);
	if (nact > 1)
		cfg_err_at(ld, pre, AT_KEY, "a route has one action: backend, redirect or respond");
	cfg_conv_str(ld, kp(k, pre, "backend"), y->backend, 0, r->backend_name, sizeof(r->backend_name));
	r->action = CFG_ROUTE_BACKEND;
	if (y->redirect != NULL) {
		r->action = CFG_ROUTE_REDIRECT;
		kp(mk, pre, "redirect");
		r->status = status_in(ld, kp(k, mk, "status"), y->redirect->status, 302, redirects);
		check_template(ld, kp(k, mk, "location"), y->redirect->location);
		r->location = dup_or_oom(ld, y->redirect->location, strlen(y->redirect->location));
	} else if (y->respond != NULL) {
		const struct y_respond *rs = y->respond;
		r->action = CFG_ROUTE_RESPOND;
		kp(mk, pre, "respond");
		r->status = status_in(ld, kp(k, mk, "status"), rs->status, 200, NULL);
		if (r->status == 204 || r->status == 304)
			cfg_err_at(ld, k, AT_VALUE, "%d has no body: answer 200 with an empty body instead", r->status);
		snprintf(r->content_type, sizeof(r->content_type), "text/plain");
		cfg_conv_str(ld, kp(k, mk, "content_type"), rs->content_type, 0, r->content_type,
			     sizeof(r->content_type));
		for (const char *p = r->content_type; *p; p++)
			if ((unsigned char)*p < ' ' || *p == 0x7f) {
				cfg_err_at(ld, k, AT_VALUE, "control byte in content_type");
				break;
			}
		if (rs->body != NULL && rs->body_file != NULL)
			cfg_err_at(ld, kp(k, mk, "body_file"), AT_KEY, "give body or body_file, not both");
		else if (rs->body_file != NULL)
			r->body = read_body_file(ld, kp(k, mk, "body_file"), rs->body_file, &r->body_len);
		else if (rs->body != NULL && strlen(rs->body) > ROUTE_BODY_MAX)
			cfg_err_at(ld, kp(k, mk, "body"), AT_VALUE, "a body is at most 1 MiB");
		else {
			r->body_len = rs->body ? strlen(rs->body) : 0;
			r->body = dup_or_oom(ld, rs->body ? rs->body : "", r->body_len);
		}
	}
	r->inspect = 1;
	r->max_body_size = UINT64_MAX;
	cfg_conv_bool(ld, kp(k, pre, "inspect"), y->inspect, &r->inspect);
	if (y->inspect_override != NULL) {
		if (y->inspect != NULL)
			cfg_err_at(ld, kp(k, pre, "inspect_override"), AT_KEY,
				   "give inspect (on/off) or inspect_override, not both");
		else if (r->action != CFG_ROUTE_BACKEND)
			cfg_err_at(ld, kp(k, pre, "inspect_override"), AT_KEY,
				   "a route that answers itself (redirect, respond) runs no hook");
		else if ((r->inspect_override = calloc(1, sizeof(*r->inspect_override))) == NULL)
			ld->oom = 1;
		else
			cfg_conv_inspect(ld, kp(k, pre, "inspect_override"), y->inspect_override,
					 r->inspect_override, ld->lua_memory_max);
	}
	cfg_conv_duration(ld, kp(k, pre, "response_timeout"), y->response_timeout, 1, &r->response_timeout_ms);
	cfg_conv_size(ld, kp(k, pre, "max_body_size"), y->max_body_size, 0, UINT64_MAX - 1, &r->max_body_size);
	if (y->rate_limit != NULL) {
		if (r->action != CFG_ROUTE_BACKEND)
			cfg_err_at(ld, kp(k, pre, "rate_limit"), AT_KEY,
				   "a route that answers itself (redirect, respond) is not rate limited");
		else
			cfg_conv_rate_limit(ld, kp(k, pre, "rate_limit"), y->rate_limit, &r->rate_limit, 1);
	}
	conv_edits(ld, pre, "set_request_headers", y->set_request_headers, y->set_request_headers_count,
		   "remove_request_headers", y->remove_request_headers, y->remove_request_headers_count, 0,
		   &r->req_add, &r->req_add_len, &r->req_del, &r->req_del_len);
	conv_edits(ld, pre, "set_response_headers", y->set_response_headers, y->set_response_headers_count,
		   "remove_response_headers", y->remove_response_headers, y->remove_response_headers_count, 1,
		   &r->resp_add, &r->resp_add_len, &r->resp_del, &r->resp_del_len);
}

int cfg_conv_routes(struct cfg_load *ld, const char *pre, const struct y_listener *y, struct cfg_listener *l)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX], e2[CFG_PATH_MAX];
	if (y->routes_count == 0)
		return 0;
	l->routes = calloc(y->routes_count, sizeof(*l->routes));
	if (l->routes == NULL)
		return -1;
	l->nroutes = y->routes_count;
	kp(k, pre, "routes");
	for (unsigned i = 0; i < l->nroutes; i++) {
		path_index(ep, k, i);
		conv_route(ld, ep, i, &y->routes[i], &l->routes[i]);
		for (unsigned j = 0; j < i; j++) {
			path_index(e2, k, j);
			if (strcmp(l->routes[i].name, l->routes[j].name) == 0)
				cfg_err_at(ld, ep, AT_KEY, "duplicate route name \"%s\" (first at line %d)",
					   l->routes[i].name, l->routes[j].line);
		}
	}
	/* First match wins: after a route that matches everything, nothing
	 * else ever can. */
	for (unsigned i = 0; i + 1 < l->nroutes; i++) {
		if (!matches_all(&l->routes[i]))
			continue;
		path_index(ep, k, i + 1);
		cfg_err_at(ld, ep, AT_KEY, "route \"%s\" can never match: route \"%s\" (line %d) comes first "
			   "and matches every request", l->routes[i + 1].name, l->routes[i].name, l->routes[i].line);
		break;
	}
	return 0;
}

void cfg_resolve_routes(struct cfg_load *ld, const char *pre, struct cfg *c, struct cfg_listener *l)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	for (unsigned i = 0; i < l->nroutes; i++) {
		struct cfg_route *r = &l->routes[i];
		if (r->backend_name[0] == '\0')
			continue;
		for (unsigned j = 0; j < c->nbackends && r->backend == NULL; j++)
			if (strcmp(r->backend_name, c->backends[j].name) == 0)
				r->backend = &c->backends[j];
		if (r->backend == NULL) {
			path_index(ep, kp(k, pre, "routes"), i);
			cfg_err_at(ld, kp(k, ep, "backend"), AT_VALUE, "unknown backend \"%s\"", r->backend_name);
		}
	}
}

static void conds_free(struct cfg_cond *c, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		free(c[i].value);
		pcre2_code_free(c[i].re);
	}
	free(c);
}

void cfg_free_routes(struct cfg_listener *l)
{
	for (unsigned i = 0; i < l->nroutes; i++) {
		struct cfg_route *r = &l->routes[i];
		free(r->hosts);
		free(r->path);
		pcre2_code_free(r->path_re);
		conds_free(r->headers, r->nheaders);
		conds_free(r->cookies, r->ncookies);
		free(r->location);
		free(r->body);
		free(r->req_add);
		free(r->req_del);
		free(r->resp_add);
		free(r->resp_del);
		free(r->inspect_override);
	}
	free(l->routes);
	l->routes = NULL;
	l->nroutes = 0;
}

/* ---- rate limits (docs/config.md "rate_limit") ---- */

#define RL_TAU_MAX_US (86400ull * 1000000u)  /* a bucket refills within a day */

void cfg_conv_rate_limit(struct cfg_load *ld, const char *pre, const struct y_rate_limit *y,
			 struct cfg_rate_limit *rl, int route)
{
	static const char *const stores[] = { "local", "redis", NULL };
	static const char *const on_error[] = { "allow", "deny", NULL };
	char k[CFG_PATH_MAX];
	unsigned line, col;
	uint32_t count = 0;
	int v;

	cfg_pos_lookup(ld, pre, AT_KEY, &line, &col);
	rl->line = (int)line;
	rl->col = (int)col;
	rl->mode = CFG_RL_ON;
	if (y->rate != NULL && strcmp(y->rate, "off") == 0) {
		/* A route's way out of its listener's limit. */
		if (!route)
			cfg_err_at(ld, kp(k, pre, "rate"), AT_VALUE, "off applies to a route (to lift its "
				   "listener's limit); on a listener, remove rate_limit");
		else if (y->key || y->burst || y->store || y->on_store_error)
			cfg_err_at(ld, pre, AT_KEY, "rate: off takes no other key");
		rl->mode = CFG_RL_OFF;
		return;
	}
	if (y->rate == NULL) {
		cfg_err_at(ld, pre, AT_KEY, "needs rate (requests per second or minute: 100/s, 6000/m)");
	} else {
		const char *why;
		if (ratelimit_parse_rate(y->rate, &rl->interval_us, &count, &why) < 0)
			cfg_err_at(ld, kp(k, pre, "rate"), AT_VALUE, "bad rate \"%.40s\": %s", y->rate, why);
	}
	rl->burst = count ? count : 1;
	cfg_conv_uint(ld, kp(k, pre, "burst"), y->burst, 1, 1000000, &rl->burst);
	if (rl->interval_us && (uint64_t)rl->burst * rl->interval_us > RL_TAU_MAX_US)
		cfg_err_at(ld, kp(k, pre, y->burst ? "burst" : "rate"), AT_VALUE,
			   "a burst of %u at this rate takes more than a day to refill", rl->burst);
	rl->key = CFG_RL_CLIENT;
	if (y->key != NULL) {
		const char *kv = y->key, *name = NULL;
		kp(k, pre, "key");
		if (strcmp(kv, "client") == 0) {
			rl->key = CFG_RL_CLIENT;
		} else if (strncmp(kv, "header:", 7) == 0) {
			rl->key = CFG_RL_HEADER;
			name = kv + 7;
			if (!token_ok(name))
				cfg_err_at(ld, k, AT_VALUE, "bad header name \"%.80s\"", name);
		} else if (strncmp(kv, "cookie:", 7) == 0) {
			rl->key = CFG_RL_COOKIE;
			name = kv + 7;
			if (name[0] == '\0' || strpbrk(name, "=; \t,\"") != NULL)
				cfg_err_at(ld, k, AT_VALUE, "bad cookie name \"%.80s\"", name);
		} else {
			cfg_err_at(ld, k, AT_VALUE, "unknown key \"%.60s\" (expected client, header:<Name> "
				   "or cookie:<name>)", kv);
		}
		if (name && strlen(name) >= sizeof(rl->key_name))
			cfg_err_at(ld, k, AT_VALUE, "name longer than %zu bytes", sizeof(rl->key_name) - 1);
		else if (name)
			snprintf(rl->key_name, sizeof(rl->key_name), "%s", name);
	}
	if ((v = cfg_conv_word(ld, kp(k, pre, "store"), y->store, stores)) >= 0)
		rl->store = (enum cfg_rl_store)v;
	if ((v = cfg_conv_word(ld, kp(k, pre, "on_store_error"), y->on_store_error, on_error)) >= 0) {
		rl->on_store_error_deny = v;
		if (rl->store != CFG_RL_REDIS)
			cfg_err_at(ld, kp(k, pre, "on_store_error"), AT_KEY,
				   "applies to store: redis only (the local store cannot fail)");
	}
}

void cfg_conv_redis(struct cfg_load *ld, const struct y_redis *y, struct cfg_redis *r)
{
	r->enabled = 1;
	r->timeout_ms = 50;
	r->connect_timeout_ms = 1000;
	cfg_conv_str(ld, "redis.address", y->address, 0, r->address, sizeof(r->address));
	if (r->address[0] == '/') {
		r->unix_socket = 1;
	} else if (r->address[0] != '\0') {
		cfg_conv_addr(ld, "redis.address", y->address, &r->addr);
	}
	cfg_conv_duration(ld, "redis.timeout", y->timeout, 1, &r->timeout_ms);
	if (r->timeout_ms > 10000)
		cfg_err_at(ld, "redis.timeout", AT_VALUE, "at most 10s: requests wait this long for "
			   "their verdict when Redis does not answer");
	cfg_conv_duration(ld, "redis.connect_timeout", y->connect_timeout, 1, &r->connect_timeout_ms);
	cfg_conv_str(ld, "redis.password", y->password, 0, r->password, sizeof(r->password));
	cfg_conv_uint(ld, "redis.db", y->db, 0, 1000000, &r->db);
}

static void link_rate_limit(struct cfg_load *ld, const char *path, const struct cfg *c,
			    struct cfg_rate_limit *rl, const char *scope_a, const char *scope_b)
{
	char k[CFG_PATH_MAX];
	snprintf(rl->scope, sizeof(rl->scope), "%s%s%s", scope_a, scope_b ? "/" : "", scope_b ? scope_b : "");
	rl->scope_hash = hash_bytes(0x726c, rl->scope, strlen(rl->scope));
	if (rl->mode == CFG_RL_ON && rl->store == CFG_RL_REDIS && !c->redis.enabled)
		cfg_err_at(ld, kp(k, path, "store"), AT_VALUE, "store: redis needs the top-level redis: "
			   "mapping (its address)");
}

void cfg_link_rate_limits(struct cfg_load *ld, const char *pre, const struct cfg *c, struct cfg_listener *l)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	link_rate_limit(ld, kp(k, pre, "rate_limit"), c, &l->rate_limit, l->name, NULL);
	for (unsigned i = 0; i < l->nroutes; i++) {
		path_index(ep, kp(k, pre, "routes"), i);
		link_rate_limit(ld, kp(k, ep, "rate_limit"), c, &l->routes[i].rate_limit, l->name,
				l->routes[i].name);
	}
}
