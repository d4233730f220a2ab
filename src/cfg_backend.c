/* Pass 3 of cfg_load() (see cfg.c) for one entry of backends[]: its
 * queue and pool settings, health_check, tls (towards the servers), forward
 * (the identity headers the servers receive) and servers[] with their PROXY
 * protocol settings. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "cfg.h"
#include "cfg-int.h"

static int addr_is_any(const struct cfg_addr *a)
{
	if (a->ss.ss_family == AF_INET)
		return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
	return IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr);
}

static void conv_health(struct cfg_load *ld, const char *pre, const struct y_health *y,
			struct cfg_health *h)
{
	char k[CFG_PATH_MAX];
	const char *p;
	size_t nerrs;

	h->enabled = 1;
	if (y->path != NULL) {
		kp(k, pre, "path");
		for (p = y->path; *p; p++)
			if ((unsigned char)*p <= ' ' || *p == 0x7f)
				break;
		if (y->path[0] != '/' || *p != '\0')
			cfg_err_at(ld, k, AT_VALUE, "must start with '/' and contain no blanks");
		else
			cfg_conv_str(ld, k, y->path, 0, h->path, sizeof(h->path));
	}
	nerrs = ld->nerrs + ld->ndropped;
	cfg_conv_duration(ld, kp(k, pre, "interval"), y->interval, 1, &h->interval_ms);
	cfg_conv_duration(ld, kp(k, pre, "timeout"), y->timeout, 1, &h->timeout_ms);
	/* A check must end before the next one starts. The default timeout
	 * shrinks to a short interval; a written one that is too long is an
	 * error (compared only when both values parsed). */
	if (y->timeout == NULL && h->timeout_ms > h->interval_ms)
		h->timeout_ms = h->interval_ms;
	else if (nerrs == ld->nerrs + ld->ndropped && h->timeout_ms > h->interval_ms)
		cfg_err_at(ld, kp(k, pre, "timeout"), AT_VALUE, "timeout (%" PRIu32 "ms) must "
			   "not exceed interval (%" PRIu32 "ms)", h->timeout_ms, h->interval_ms);
	{
		uint32_t st = (uint32_t)h->expect_status;
		cfg_conv_uint(ld, kp(k, pre, "expect_status"), y->expect_status, 100, 599, &st);
		h->expect_status = (int)st;
	}
	cfg_conv_uint(ld, kp(k, pre, "rise"), y->rise, 1, 1000, &h->rise);
	cfg_conv_uint(ld, kp(k, pre, "fall"), y->fall, 1, 1000, &h->fall);
}

static const struct {
	const char *name;
	unsigned bit;
} pp_tlvs[] = {
	{ "alpn", CFG_PP_TLV_ALPN },
	{ "authority", CFG_PP_TLV_AUTHORITY },
	{ "unique_id", CFG_PP_TLV_UNIQUE_ID },
	{ "crc32c", CFG_PP_TLV_CRC32C },
	{ "ssl", CFG_PP_TLV_SSL },
};
#define PP_TLVS_N (sizeof(pp_tlvs) / sizeof(pp_tlvs[0]))

/* proxy_protocol and proxy_tlvs of the server at PRE. TLVs exist only in
 * v2 headers: a list with v1 or off is refused rather than ignored, since
 * whoever wrote it expects the server to receive them. */
static void conv_proxy_protocol(struct cfg_load *ld, const char *pre, const struct y_server *y,
				struct cfg_server *s)
{
	char k[CFG_PATH_MAX], ep[CFG_PATH_MAX];
	unsigned first[PP_TLVS_N] = { 0 };
	unsigned i, t;
	int pp_ok = 1;

	if (y->proxy_protocol != NULL) {
		kp(k, pre, "proxy_protocol");
		if (cfg_conv_nonempty(ld, k, y->proxy_protocol) < 0)
			pp_ok = 0;
		else if (strcmp(y->proxy_protocol, "off") == 0)
			s->proxy_protocol = CFG_PP_OFF;
		else if (strcmp(y->proxy_protocol, "v1") == 0)
			s->proxy_protocol = CFG_PP_V1;
		else if (strcmp(y->proxy_protocol, "v2") == 0)
			s->proxy_protocol = CFG_PP_V2;
		else {
			cfg_err_at(ld, k, AT_VALUE, "unknown proxy_protocol \"%.40s\" (expected off, "
				   "v1 or v2)", y->proxy_protocol);
			pp_ok = 0;
		}
	}
	if (y->proxy_tlvs_count == 0)
		return; /* absent, or [] (none) */

	kp(k, pre, "proxy_tlvs");
	for (i = 0; i < y->proxy_tlvs_count; i++) {
		const char *v = y->proxy_tlvs[i];
		path_index(ep, k, i);
		if (v == NULL || cfg_conv_nonempty(ld, ep, v) < 0)
			continue;
		for (t = 0; t < PP_TLVS_N && strcmp(v, pp_tlvs[t].name) != 0; t++)
			;
		if (t == PP_TLVS_N) {
			cfg_err_at(ld, ep, AT_VALUE, "unknown TLV \"%.40s\" (expected alpn, authority, "
				   "unique_id, crc32c or ssl)", v);
		} else if (s->proxy_tlvs & pp_tlvs[t].bit) {
			cfg_err_at(ld, ep, AT_VALUE, "duplicate TLV \"%s\" (first at proxy_tlvs[%u])",
				   v, first[t]);
		} else {
			s->proxy_tlvs |= pp_tlvs[t].bit;
			first[t] = i;
		}
	}
	/* A bad proxy_protocol was reported already: once is enough. */
	if (pp_ok && s->proxy_protocol != CFG_PP_V2)
		cfg_err_at(ld, k, AT_VALUE, "proxy_tlvs needs proxy_protocol: v2");
}

static void conv_server(struct cfg_load *ld, const char *pre, unsigned idx,
			const struct y_server *y, struct cfg_server *s)
{
	char k[CFG_PATH_MAX];

	snprintf(s->name, sizeof(s->name), "s%u", idx + 1);
	s->max_connections = 32;
	s->weight = 1;
	s->proxy_protocol = CFG_PP_OFF;
	s->proxy_tlvs = 0;
	cfg_conv_name(ld, kp(k, pre, "name"), y->name, s->name);
	cfg_conv_addr(ld, kp(k, pre, "address"), y->address, &s->addr);
	if (s->addr.len != 0 && addr_is_any(&s->addr))
		cfg_err_at(ld, k, AT_VALUE, "cannot connect to a wildcard address");
	cfg_conv_uint(ld, kp(k, pre, "max_connections"), y->max_connections, 1, UINT32_MAX,
		      &s->max_connections);
	cfg_conv_uint(ld, kp(k, pre, "weight"), y->weight, 0, 256, &s->weight);
	cfg_conv_bool(ld, kp(k, pre, "backup"), y->backup, &s->backup);
	conv_proxy_protocol(ld, pre, y, s);
}

/* Files are only named here; the TLS module opens them and reports errors
 * at the tls mapping's LINE/COL. */
static void conv_backend_tls(struct cfg_load *ld, const char *pre, const struct y_backend_tls *y,
			     struct cfg_backend_tls *t)
{
	char k[CFG_PATH_MAX];
	unsigned line, col;

	t->enabled = 1;
	cfg_pos_lookup(ld, pre, AT_VALUE, &line, &col);
	t->line = (int)line;
	t->col = (int)col;
	t->verify = 1;
	t->session_reuse = 1;
	t->min_version = 0x0303;
	t->max_version = 0x0304;
	cfg_conv_bool(ld, kp(k, pre, "verify"), y->verify, &t->verify);
	cfg_conv_bool(ld, kp(k, pre, "session_reuse"), y->session_reuse, &t->session_reuse);
	cfg_conv_str(ld, kp(k, pre, "ca"), y->ca, 1, t->ca, sizeof(t->ca));
	cfg_conv_str(ld, kp(k, pre, "sni"), y->sni, 1, t->sni, sizeof(t->sni));
	cfg_conv_str(ld, kp(k, pre, "cert"), y->cert, 1, t->cert, sizeof(t->cert));
	cfg_conv_str(ld, kp(k, pre, "key"), y->key, 1, t->key, sizeof(t->key));
	cfg_conv_tls_version(ld, kp(k, pre, "min_version"), y->min_version, &t->min_version);
	cfg_conv_tls_version(ld, kp(k, pre, "max_version"), y->max_version, &t->max_version);
	if (t->min_version > t->max_version)
		cfg_err_at(ld, kp(k, pre, "min_version"), AT_VALUE, "min_version is above max_version");
	if (t->verify && t->ca[0] == '\0')
		cfg_err_at(ld, kp(k, pre, "verify"), AT_KEY, "verify is on (the default) but no ca is "
			   "set: name the CA file the servers' certificates are verified against, or "
			   "set verify: off");
}

/* Defaults are set by the caller, whether or not the mapping is present. */
static void conv_forward(struct cfg_load *ld, const char *pre, const struct y_forward *y,
			 struct cfg_forward *f)
{
	char k[CFG_PATH_MAX];

	if (y->x_forwarded_for != NULL &&
	    cfg_conv_nonempty(ld, kp(k, pre, "x_forwarded_for"), y->x_forwarded_for) == 0) {
		if (strcmp(y->x_forwarded_for, "append") == 0)
			f->x_forwarded_for = CFG_XFF_APPEND;
		else if (strcmp(y->x_forwarded_for, "replace") == 0)
			f->x_forwarded_for = CFG_XFF_REPLACE;
		else if (strcmp(y->x_forwarded_for, "off") == 0)
			f->x_forwarded_for = CFG_XFF_OFF;
		else
			cfg_err_at(ld, k, AT_VALUE, "unknown x_forwarded_for \"%.40s\" (expected "
				   "append, replace or off)", y->x_forwarded_for);
	}
	cfg_conv_bool(ld, kp(k, pre, "x_forwarded_proto"), y->x_forwarded_proto, &f->x_forwarded_proto);
	cfg_conv_bool(ld, kp(k, pre, "x_forwarded_host"), y->x_forwarded_host, &f->x_forwarded_host);
	cfg_conv_bool(ld, kp(k, pre, "x_forwarded_port"), y->x_forwarded_port, &f->x_forwarded_port);
	cfg_conv_bool(ld, kp(k, pre, "forwarded"), y->forwarded, &f->forwarded);
	cfg_conv_bool(ld, kp(k, pre, "x_real_ip"), y->x_real_ip, &f->x_real_ip);
	cfg_conv_bool(ld, kp(k, pre, "wl_proxy_ssl"), y->wl_proxy_ssl, &f->wl_proxy_ssl);
	cfg_conv_bool(ld, kp(k, pre, "wl_proxy_client_ip"), y->wl_proxy_client_ip,
		      &f->wl_proxy_client_ip);
	cfg_conv_bool(ld, kp(k, pre, "wl_proxy_client_port"), y->wl_proxy_client_port,
		      &f->wl_proxy_client_port);
	cfg_conv_bool(ld, kp(k, pre, "wl_proxy_client_cert"), y->wl_proxy_client_cert,
		      &f->wl_proxy_client_cert);
}

int cfg_conv_backend(struct cfg_load *ld, const char *pre, const struct y_backend *y,
		     struct cfg_backend *b)
{
	char k[CFG_PATH_MAX], sp[CFG_PATH_MAX];
	unsigned i;

	b->balance = CFG_BALANCE_ROUNDROBIN;
	b->queue_timeout_ms = 5000;
	b->queue_max = 10000;
	b->queue_abort_on_close = 1;
	b->idle_max = UINT32_MAX;  /* bounded by max_connections only */
	b->idle_timeout_ms = 30000;
	b->connect_timeout_ms = 3000;
	b->response_timeout_ms = 30000;
	snprintf(b->health.path, sizeof(b->health.path), "/");
	b->health.interval_ms = 2000;
	b->health.timeout_ms = 1000;
	b->health.expect_status = 200;
	b->health.rise = 2;
	b->health.fall = 3;
	b->forward = (struct cfg_forward){
		.x_forwarded_for = CFG_XFF_APPEND,
		.x_forwarded_proto = 1,
		/* every other header off */
	};

	cfg_conv_name(ld, kp(k, pre, "name"), y->name, b->name);
	if (y->balance != NULL) {
		if (strcmp(y->balance, "roundrobin") == 0)
			b->balance = CFG_BALANCE_ROUNDROBIN;
		else if (strcmp(y->balance, "leastconn") == 0)
			b->balance = CFG_BALANCE_LEASTCONN;
		else
			cfg_err_at(ld, kp(k, pre, "balance"), AT_VALUE,
				   "unknown balance \"%.40s\" (expected roundrobin or leastconn)",
				   y->balance);
	}
	cfg_conv_duration(ld, kp(k, pre, "queue_timeout"), y->queue_timeout, 1, &b->queue_timeout_ms);
	cfg_conv_uint(ld, kp(k, pre, "queue_max"), y->queue_max, 1, UINT32_MAX, &b->queue_max);
	cfg_conv_bool(ld, kp(k, pre, "queue_abort_on_close"), y->queue_abort_on_close, &b->queue_abort_on_close);
	cfg_conv_uint(ld, kp(k, pre, "idle_max"), y->idle_max, 0, UINT32_MAX, &b->idle_max);
	cfg_conv_duration(ld, kp(k, pre, "idle_timeout"), y->idle_timeout, 1, &b->idle_timeout_ms);
	cfg_conv_duration(ld, kp(k, pre, "connect_timeout"), y->connect_timeout, 1,
			  &b->connect_timeout_ms);
	cfg_conv_duration(ld, kp(k, pre, "response_timeout"), y->response_timeout, 1,
			  &b->response_timeout_ms);
	cfg_conv_bool(ld, kp(k, pre, "all_backups"), y->all_backups, &b->all_backups);
	cfg_conv_duration(ld, kp(k, pre, "slow_start"), y->slow_start, 0, &b->slow_start_ms);
	if (y->eject != NULL) {
		char ek[CFG_PATH_MAX];
		struct cfg_eject *e = &b->eject;
		kp(ek, pre, "eject");
		e->enabled = 1;
		e->consecutive_5xx = 5;
		e->consecutive_timeouts = 3;
		e->duration_ms = 30000;
		e->max_ejected_percent = 50;
		cfg_conv_uint(ld, kp(k, ek, "consecutive_5xx"), y->eject->consecutive_5xx, 0, 1000000,
			      &e->consecutive_5xx);
		cfg_conv_uint(ld, kp(k, ek, "consecutive_timeouts"), y->eject->consecutive_timeouts, 0, 1000000,
			      &e->consecutive_timeouts);
		cfg_conv_duration(ld, kp(k, ek, "duration"), y->eject->duration, 1, &e->duration_ms);
		cfg_conv_uint(ld, kp(k, ek, "max_ejected_percent"), y->eject->max_ejected_percent, 0, 100,
			      &e->max_ejected_percent);
		if (e->consecutive_5xx == 0 && e->consecutive_timeouts == 0)
			cfg_err_at(ld, ek, AT_KEY, "both consecutive_5xx and consecutive_timeouts are 0: "
				   "nothing would eject a server (leave eject out instead)");
	}
	if (y->health_check != NULL)
		conv_health(ld, kp(k, pre, "health_check"), y->health_check, &b->health);
	if (y->tls != NULL)
		conv_backend_tls(ld, kp(k, pre, "tls"), y->tls, &b->tls);
	if (y->forward != NULL)
		conv_forward(ld, kp(k, pre, "forward"), y->forward, &b->forward);

	b->servers = calloc(y->servers_count, sizeof(*b->servers));
	if (b->servers == NULL)
		return -1;
	b->nservers = y->servers_count;
	for (i = 0; i < b->nservers; i++) {
		path_index(sp, kp(k, pre, "servers"), i);
		conv_server(ld, sp, i, &y->servers[i], &b->servers[i]);
	}
	cfg_conv_persist(ld, pre, y, b);
	return 0;
}
