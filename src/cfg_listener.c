/* Pass 3 of cfg_load() (see cfg.c) for one entry of listeners[]: its
 * address and backlog, the networks it trusts (accept_proxy_from,
 * trusted_forwarders), tls (certificates, versions, client certificates)
 * and inspect (the Lua hook: script, body, budgets). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cfg.h"
#include "cfg-int.h"
#include "inspect.h"
#include "netaddr.h"

static const char *tls_version_str(int v)
{
	return v == 0x0304 ? "TLSv1.3" : "TLSv1.2";
}

static void conv_tls_cert(struct cfg_load *ld, const char *pre, const struct y_tls_cert *y,
			  struct cfg_tls_cert *t)
{
	char k[CFG_PATH_MAX];
	unsigned line, col;

	/* The start of the entry's mapping (or of the alias standing for it). */
	cfg_pos_lookup(ld, pre, AT_KEY, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	cfg_conv_str(ld, kp(k, pre, "cert"), y->cert, 0, t->cert, sizeof(t->cert));
	cfg_conv_str(ld, kp(k, pre, "key"), y->key, 1, t->key, sizeof(t->key));
	cfg_conv_str(ld, kp(k, pre, "passphrase"), y->passphrase, 1, t->passphrase,
		     sizeof(t->passphrase));
}

/* Fills T from Y (the tls mapping of the listener at PRE). Certificate and
 * key files are only named here: the TLS module opens and checks them, and
 * points its errors at the LINE/COL recorded here. Returns -1 when out of
 * memory. */
static int conv_tls(struct cfg_load *ld, const char *pre, const struct y_tls *y,
		    struct cfg_tls *t)
{
	char k[CFG_PATH_MAX], cp[CFG_PATH_MAX];
	unsigned i, line, col;
	size_t nerrs;

	t->enabled = 1;
	cfg_pos_lookup(ld, pre, AT_VALUE, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	t->min_version = 0x0303;
	t->max_version = 0x0304;
	snprintf(t->curves, sizeof(t->curves), "X25519:P-256:P-384");
	t->tickets = 1;
	t->session_cache = 0;
	t->handshake_timeout_ms = 10000;
	t->client_auth = CFG_CLIENT_AUTH_OFF;
	t->verify_depth = 3;

	t->certs = calloc(y->certificates_count, sizeof(*t->certs));
	if (t->certs == NULL)
		return -1;
	t->ncerts = y->certificates_count;
	for (i = 0; i < t->ncerts; i++) {
		path_index(cp, kp(k, pre, "certificates"), i);
		conv_tls_cert(ld, cp, &y->certificates[i], &t->certs[i]);
	}

	nerrs = ld->nerrs + ld->ndropped;
	cfg_conv_tls_version(ld, kp(k, pre, "min_version"), y->min_version, &t->min_version);
	cfg_conv_tls_version(ld, kp(k, pre, "max_version"), y->max_version, &t->max_version);
	if (nerrs == ld->nerrs + ld->ndropped && t->min_version > t->max_version)
		cfg_err_at(ld, kp(k, pre, "min_version"), AT_VALUE, "min_version (%s) is above "
			   "max_version (%s)", tls_version_str(t->min_version),
			   tls_version_str(t->max_version));
	cfg_conv_str(ld, kp(k, pre, "ciphers"), y->ciphers, 1, t->ciphers, sizeof(t->ciphers));
	cfg_conv_str(ld, kp(k, pre, "ciphersuites"), y->ciphersuites, 1, t->ciphersuites,
		     sizeof(t->ciphersuites));
	cfg_conv_str(ld, kp(k, pre, "curves"), y->curves, 0, t->curves, sizeof(t->curves));
	cfg_conv_bool(ld, kp(k, pre, "tickets"), y->tickets, &t->tickets);
	cfg_conv_str(ld, kp(k, pre, "ticket_keys"), y->ticket_keys, 1, t->ticket_keys,
		     sizeof(t->ticket_keys));
	cfg_conv_uint(ld, kp(k, pre, "session_cache"), y->session_cache, 0, 10000000,
		      &t->session_cache);
	cfg_conv_duration(ld, kp(k, pre, "handshake_timeout"), y->handshake_timeout, 1,
			  &t->handshake_timeout_ms);
	if (y->client_auth != NULL && cfg_conv_nonempty(ld, kp(k, pre, "client_auth"),
						     y->client_auth) == 0) {
		if (strcmp(y->client_auth, "off") == 0)
			t->client_auth = CFG_CLIENT_AUTH_OFF;
		else if (strcmp(y->client_auth, "optional") == 0)
			t->client_auth = CFG_CLIENT_AUTH_OPTIONAL;
		else if (strcmp(y->client_auth, "required") == 0)
			t->client_auth = CFG_CLIENT_AUTH_REQUIRED;
		else
			cfg_err_at(ld, k, AT_VALUE, "unknown client_auth \"%.40s\" (expected off, "
				   "optional or required)", y->client_auth);
	}
	cfg_conv_str(ld, kp(k, pre, "client_ca"), y->client_ca, 1, t->client_ca,
		     sizeof(t->client_ca));
	/* Only an absent or empty client_ca: one that is too long was
	 * reported above, once is enough. */
	if (t->client_auth != CFG_CLIENT_AUTH_OFF &&
	    (y->client_ca == NULL || y->client_ca[0] == '\0'))
		cfg_err_at(ld, kp(k, pre, "client_auth"), AT_VALUE, "client_auth %s needs client_ca "
			   "(the CA file that client certificates are verified against)",
			   y->client_auth);
	cfg_conv_uint(ld, kp(k, pre, "verify_depth"), y->verify_depth, 1, 16, &t->verify_depth);
	return 0;
}

/* A list of networks at PATH (N entries in Y) into a new array in *OUT.
 * Absent and empty both leave *OUT NULL, but a written empty list is an
 * error: "trust nobody" is spelled by leaving the key out, and an empty
 * list is more likely a template whose networks were never filled in.
 * Returns -1 when out of memory. */
static int conv_cidrs(struct cfg_load *ld, const char *path, char *const *y, unsigned n,
		      struct cidr **out, unsigned *nout)
{
	char ep[CFG_PATH_MAX];
	struct cidr *list;
	const char *why;
	unsigned i;

	if (n == 0) {
		/* Inside an aliased listener the key has no position of its
		 * own: then [] passes as "absent", which means the same. */
		if (cfg_pos_find(ld, path) != NULL)
			cfg_err_at(ld, path, AT_VALUE, "list at least one network or remove the key");
		return 0;
	}
	list = calloc(n, sizeof(*list));
	if (list == NULL)
		return -1;
	*out = list;
	*nout = n;
	for (i = 0; i < n; i++) {
		path_index(ep, path, i);
		if (y[i] == NULL || cfg_conv_nonempty(ld, ep, y[i]) < 0)
			continue;
		if (cidr_parse(y[i], &list[i], &why) < 0)
			cfg_err_at(ld, ep, AT_VALUE, "bad network \"%.80s\": %s", y[i], why);
	}
	return 0;
}

/* A per-call budget: a duration, or microseconds as "500us" (finer than a
 * duration's ms); "0" is no limit, and anything above 60 s counts as 60 s. */
static uint32_t conv_budget_us(struct cfg_load *ld, const char *key, const char *text)
{
	size_t tl = strlen(text);
	if (tl > 2 && strcmp(text + tl - 2, "us") == 0) {
		char num[32];
		uint32_t us = 0;
		snprintf(num, sizeof(num), "%.*s", (int)(tl - 2), text);
		cfg_conv_uint(ld, key, num, 0, 60000000, &us);
		return us;
	}
	uint32_t ms = 0;
	cfg_conv_duration(ld, key, text, 0, &ms);
	return ms > 60000 ? 60000000u : ms * 1000u;
}

void cfg_conv_inspect(struct cfg_load *ld, const char *pre, const struct y_inspect *y,
		      struct cfg_inspect *in, uint64_t memory_max)
{
	static const char *const overflow[] = { "partial", "reject", NULL };
	static const char *const on_error[] = { "allow", "deny", NULL };
	static const char *const modes[] = { "enforce", "shadow", NULL };
	char k[CFG_PATH_MAX];
	unsigned line, col;
	int v;

	in->enabled = 1;
	in->budget_instructions = 1000000;
	in->budget_us = 5000;
	cfg_conv_str(ld, kp(k, pre, "script"), y->script, 0, in->script, sizeof(in->script));
	cfg_pos_lookup(ld, kp(k, pre, "script"), AT_VALUE, &line, &col);
	in->line = (int)line;
	in->col = (int)col;
	if (y->body != NULL && strcmp(y->body, "off") != 0) {
		uint64_t b = 0;
		cfg_conv_size(ld, kp(k, pre, "body"), y->body, 1, INSPECT_BODY_MAX, &b);
		in->body = (uint32_t)b;
	}
	if ((v = cfg_conv_word(ld, kp(k, pre, "body_overflow"), y->body_overflow, overflow)) >= 0)
		in->body_reject = v;
	if ((v = cfg_conv_word(ld, kp(k, pre, "on_error"), y->on_error, on_error)) >= 0)
		in->on_error_deny = v;
	if ((v = cfg_conv_word(ld, kp(k, pre, "mode"), y->mode, modes)) >= 0)
		in->shadow = v;
	if (y->budget != NULL) {
		char bp[CFG_PATH_MAX];
		kp(bp, pre, "budget");
		if (y->budget->instructions != NULL) {
			uint32_t n = 0;
			cfg_conv_uint(ld, kp(k, bp, "instructions"), y->budget->instructions, 0, UINT32_MAX, &n);
			in->budget_instructions = n;
		}
		if (y->budget->time != NULL)
			in->budget_us = conv_budget_us(ld, kp(k, bp, "time"), y->budget->time);
		if (y->budget->wall_time != NULL)
			in->budget_wall_us = conv_budget_us(ld, kp(k, bp, "wall_time"), y->budget->wall_time);
		if (in->budget_wall_us && in->budget_wall_us < in->budget_us)
			cfg_err_at(ld, kp(k, bp, "wall_time"), AT_VALUE,
				   "the wall-clock ceiling (%u us) is below the CPU time budget (%u us): "
				   "a call on a busy machine would be stopped for time it did not use",
				   in->budget_wall_us, in->budget_us);
	}
	if (y->budget == NULL || y->budget->wall_time == NULL) {
		/* Ten times the CPU budget, at least 1 s: only a call that holds
		 * the worker while it stops using CPU gets there. */
		uint64_t w = (uint64_t)in->budget_us * 10;
		in->budget_wall_us = in->budget_us == 0 ? 0 : w < 1000000 ? 1000000u : w > 60000000 ? 60000000u : (uint32_t)w;
	}
	if (in->script[0] != '\0') {
		char why[512];
		if (inspect_script_check(in->script, memory_max, why, sizeof(why)) < 0)
			cfg_err_at(ld, kp(k, pre, "script"), AT_VALUE, "%s", why);
	}
}

/* protocols, h2c and http2. A plain listener's `protocols` may only say
 * http/1.1: h2 over cleartext is prior knowledge (`h2c`), never ALPN. */
static void conv_http2(struct cfg_load *ld, const char *pre, const struct y_listener *y,
		       struct cfg_listener *l)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	l->alpn_h2 = y->tls != NULL;
	l->alpn_h1 = 1;
	l->h2_max_streams = 100;
	l->h2_window = 65535;
	if (y->protocols != NULL) {
		kp(k, pre, "protocols");
		if (y->protocols_count == 0)
			cfg_err_at(ld, k, AT_VALUE, "list h2, http/1.1 or both, or remove the key");
		l->alpn_h2 = l->alpn_h1 = 0;
		for (unsigned i = 0; i < y->protocols_count; i++) {
			path_index(ep, k, i);
			const char *p = y->protocols[i] ? y->protocols[i] : "";
			if (strcmp(p, "h2") == 0 && y->tls == NULL)
				cfg_err_at(ld, ep, AT_VALUE, "h2 is offered by ALPN on TLS listeners only; "
					   "for HTTP/2 over cleartext set h2c: on");
			else if (strcmp(p, "h2") == 0)
				l->alpn_h2 = 1;
			else if (strcmp(p, "http/1.1") == 0)
				l->alpn_h1 = 1;
			else
				cfg_err_at(ld, ep, AT_VALUE, "unknown protocol \"%.40s\" (h2 or http/1.1)", p);
		}
	}
	int h2c = 0;
	cfg_conv_bool(ld, kp(k, pre, "h2c"), y->h2c, &h2c);
	if (h2c && y->tls != NULL)
		cfg_err_at(ld, k, AT_VALUE, "h2c is HTTP/2 over cleartext: on a TLS listener, "
			   "list h2 in protocols instead");
	l->h2c = (uint8_t)h2c;
	if (y->http2 != NULL) {
		char hp[CFG_PATH_MAX];
		kp(hp, pre, "http2");
		cfg_conv_uint(ld, kp(k, hp, "max_concurrent_streams"), y->http2->max_concurrent_streams, 1,
			      10000, &l->h2_max_streams);
		uint64_t w = l->h2_window;
		cfg_conv_size(ld, kp(k, hp, "initial_window_size"), y->http2->initial_window_size, 1024,
			      (1u << 31) - 1, &w);
		l->h2_window = (uint32_t)w;
	}
}

/* monitor_uri is compared, byte for byte, with the path of the request
 * target as received (the query left out): only a path a request line can
 * carry as it is could ever match. */
static void conv_monitor_uri(struct cfg_load *ld, const char *path, const char *s,
			     struct cfg_listener *l)
{
	if (s == NULL || cfg_conv_nonempty(ld, path, s) < 0)
		return;
	if (s[0] != '/') {
		cfg_err_at(ld, path, AT_VALUE, "\"%.40s\" is not a path: it must start with / "
			   "(e.g. /ready)", s);
		return;
	}
	for (const char *p = s; *p; p++)
		if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '?' || *p == '#') {
			cfg_err_at(ld, path, AT_VALUE, "bad character in \"%.40s\" (a path without "
				   "query, fragment, spaces or control characters)", s);
			return;
		}
	cfg_conv_str(ld, path, s, 0, l->monitor_uri, sizeof(l->monitor_uri));
}

int cfg_conv_listener(struct cfg_load *ld, const char *pre, unsigned idx,
		      const struct y_listener *y, struct cfg_listener *l)
{
	char k[CFG_PATH_MAX];

	snprintf(l->name, sizeof(l->name), "l%u", idx + 1);
	l->backlog = 511;
	cfg_conv_name(ld, kp(k, pre, "name"), y->name, l->name);
	cfg_conv_addr(ld, kp(k, pre, "address"), y->address, &l->addr);
	{
		uint32_t v = (uint32_t)l->backlog;
		cfg_conv_uint(ld, kp(k, pre, "backlog"), y->backlog, 1, 65535, &v);
		l->backlog = (int)v;
	}
	/* Resolved in pass 4; only emptiness and length are checked here. */
	cfg_conv_str(ld, kp(k, pre, "backend"), y->backend, 0, l->backend_name,
		     sizeof(l->backend_name));
	if (conv_cidrs(ld, kp(k, pre, "accept_proxy_from"), y->accept_proxy_from,
		       y->accept_proxy_from_count, &l->proxy_from, &l->nproxy_from) < 0 ||
	    conv_cidrs(ld, kp(k, pre, "trusted_forwarders"), y->trusted_forwarders,
		       y->trusted_forwarders_count, &l->trusted_forwarders,
		       &l->ntrusted_forwarders) < 0)
		return -1;
	{
		static const char *const underscores[] = { "allow", "drop", "reject", NULL };
		int v = cfg_conv_word(ld, kp(k, pre, "headers_with_underscores"), y->headers_with_underscores,
				      underscores);
		if (v >= 0)
			l->underscores = (enum cfg_underscores)v;
	}
	conv_http2(ld, pre, y, l);
	conv_monitor_uri(ld, kp(k, pre, "monitor_uri"), y->monitor_uri, l);
	if (y->inspect != NULL)
		cfg_conv_inspect(ld, kp(k, pre, "inspect"), y->inspect, &l->inspect, ld->lua_memory_max);
	if (y->rate_limit != NULL)
		cfg_conv_rate_limit(ld, kp(k, pre, "rate_limit"), y->rate_limit, &l->rate_limit, 0);
	if (cfg_conv_routes(ld, pre, y, l) < 0)
		return -1;
	if (y->tls != NULL)
		return conv_tls(ld, kp(k, pre, "tls"), y->tls, &l->tls);
	return 0;
}
