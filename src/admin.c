#include <errno.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <llhttp.h>
#include "acceptor.h"
#include "admin.h"
#include "lb.h"
#include "version.h"
#include "log.h"
#include "shm.h"
#include "cfg.h"
#include "ratelimit.h"
#include "routestats.h"
#include "shdict.h"
#include "stats.h"
#include "upstream.h"
#include "worker.h"

#define ADMIN_HEAD_MAX 8192
#define ADMIN_BODY_MAX 4096
#define ADMIN_TIMEOUT_MS 10000

struct admin_conn {
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t wreq;
	llhttp_t parser;
	struct buf url, hname, hval, auth, body, out;
	int in_value, done, closing, pending, too_big, head_only;
	struct list link;
};

static uv_tcp_t admin_tcp;
static struct acceptor admin_acc;
static int admin_running;
static struct list admin_conns = { &admin_conns, &admin_conns };
static llhttp_settings_t settings;

/* ---- Prometheus text ---- */

static void fmt_seconds(struct buf *out, uint64_t us)
{
	buf_appendf(out, "%llu.%06llu", (unsigned long long)(us / 1000000), (unsigned long long)(us % 1000000));
}

/* Exported bucket edges: 1, 2, 3, 4, 6, 8, 12, 16 ... us (powers of two and
 * 1.5x), each an exact (inclusive) internal bucket edge. */
static int export_edge(size_t i)
{
	uint64_t v = stats_bucket_low(i);
	if (v == 0)
		return 0;
	if ((v & (v - 1)) == 0)
		return 1;
	return v % 3 == 0 && ((v / 3) & (v / 3 - 1)) == 0;
}

struct scope {
	int slot;
	char labels[200];
};

static unsigned scopes_collect(struct scope *sc, unsigned max)
{
	unsigned n = 0;
	const struct cfg *cfg = W->cfg;
	for (unsigned l = 0; l < cfg->nlisteners && n < max; l++) {
		char name[SHM_NAME_MAX];
		stats_listener_slot_name(&cfg->listeners[l], name, sizeof(name));
		sc[n].slot = shm_slot_find(name);
		snprintf(sc[n].labels, sizeof(sc[n].labels), "listener=\"%s\"", cfg->listeners[l].name);
		n += sc[n].slot >= 0;
	}
	for (unsigned b = 0; b < W->nbackends && n < max; b++) {
		struct backend *be = &W->backends[b];
		sc[n].slot = be->slot;
		snprintf(sc[n].labels, sizeof(sc[n].labels), "backend=\"%s\"", be->cfg->name);
		n++;
		for (unsigned s = 0; s < be->nservers && n < max; s++) {
			sc[n].slot = be->servers[s].slot;
			snprintf(sc[n].labels, sizeof(sc[n].labels), "backend=\"%s\",server=\"%s\"", be->cfg->name,
				 be->servers[s].cfg->name);
			n++;
		}
	}
	return n;
}

static void metrics_tag(const char *tag, const uint64_t *n, void *ctx)
{
	static const char *const outcome[STATS_TAG_N] = { "allow", "deny", "error" };
	for (int k = 0; k < STATS_TAG_N; k++)
		if (n[k])
			buf_appendf(ctx, "sluice_inspect_tag_total{tag=\"%s\",outcome=\"%s\"} %llu\n", tag, outcome[k],
				    (unsigned long long)n[k]);
}

static const char *const route_class[] = { "1xx", "2xx", "3xx", "4xx", "5xx", "none" };

/* One family of route metrics, C1..C2 of each route's counters (a class
 * label when they are several). */
static void metrics_route_family(struct buf *out, const char *name, const char *help, int c1, int c2,
				 const uint64_t (*v)[RS_N])
{
	const struct cfg *cfg = W->cfg;
	unsigned k = 0;
	buf_appendf(out, "# HELP sluice_%s %s\n# TYPE sluice_%s counter\n", name, help, name);
	for (unsigned l = 0; l < cfg->nlisteners; l++)
		for (unsigned r = 0; r < cfg->listeners[l].nroutes; r++, k++)
			for (int c = c1; c <= c2; c++) {
				buf_appendf(out, "sluice_%s{listener=\"%s\",route=\"%s\"", name, cfg->listeners[l].name,
					    cfg->listeners[l].routes[r].name);
				if (c1 != c2)
					buf_appendf(out, ",class=\"%s\"", route_class[c - RS_1XX]);
				buf_appendf(out, "} %llu\n", (unsigned long long)v[k][c]);
			}
}

static void metrics_routes(struct buf *out)
{
	const struct cfg *cfg = W->cfg;
	unsigned n = 0, k = 0;
	for (unsigned l = 0; l < cfg->nlisteners; l++)
		n += cfg->listeners[l].nroutes;
	if (n == 0)
		return;
	uint64_t (*v)[RS_N] = calloc(n, sizeof(*v));
	AN(v);
	for (unsigned l = 0; l < cfg->nlisteners; l++)
		for (unsigned r = 0; r < cfg->listeners[l].nroutes; r++, k++)
			if (cfg->listeners[l].routes[r].stats_slot >= 0)
				routestats_read(cfg->listeners[l].routes[r].stats_slot, v[k]);
	metrics_route_family(out, "route_requests_total", "Requests that matched the route", RS_REQUESTS,
			     RS_REQUESTS, v);
	metrics_route_family(out, "route_responses_total", "The route's requests by response status class "
			     "(none: ended without a response)", RS_1XX, RS_NONE, v);
	metrics_route_family(out, "route_response_bytes_total", "Response bytes sent for the route's requests",
			     RS_BYTES_OUT, RS_BYTES_OUT, v);
	metrics_route_family(out, "route_rate_limited_total", "The route's requests its rate_limit answered "
			     "(429; 503 when the limit's store failed and on_store_error is deny)",
			     RS_RATE_LIMITED, RS_RATE_LIMITED, v);
	free(v);
}

void admin_metrics(struct buf *out)
{
	struct scope sc[SHM_MAX_SLOTS];
	unsigned n = scopes_collect(sc, SHM_MAX_SLOTS);
	struct stats_sum *sums = calloc(n ? n : 1, sizeof(*sums));
	AN(sums);
	for (unsigned i = 0; i < n; i++)
		stats_read(sc[i].slot, &sums[i]);
	for (int c = 0; c < STAT_NCOUNTERS; c++) {
		buf_appendf(out, "# HELP sluice_%s %s\n# TYPE sluice_%s counter\n", stats_counter_names[c],
			    stats_counter_help[c], stats_counter_names[c]);
		for (unsigned i = 0; i < n; i++)
			buf_appendf(out, "sluice_%s{%s} %llu\n", stats_counter_names[c], sc[i].labels,
				    (unsigned long long)sums[i].c[c]);
	}
	buf_append_str(out, "# HELP sluice_errors_total Requests that ended for a reason other than ok\n"
			    "# TYPE sluice_errors_total counter\n");
	for (unsigned i = 0; i < n; i++)
		for (int r = 1; r < REASON__COUNT; r++)
			if (sums[i].reason[r])
				buf_appendf(out, "sluice_errors_total{%s,reason=\"%s\"} %llu\n", sc[i].labels,
					    reason_name((enum reason)r), (unsigned long long)sums[i].reason[r]);
	for (int g = 0; g < GAUGE_N; g++) {
		buf_appendf(out, "# HELP sluice_%s %s\n# TYPE sluice_%s gauge\n", stats_gauge_names[g],
			    stats_gauge_help[g], stats_gauge_names[g]);
		for (unsigned i = 0; i < n; i++)
			buf_appendf(out, "sluice_%s{%s} %lld\n", stats_gauge_names[g], sc[i].labels,
				    (long long)sums[i].gauge[g]);
	}
	buf_append_str(out, "# HELP sluice_backend_connections Open backend connections, all workers (server)\n"
			    "# TYPE sluice_backend_connections gauge\n");
	for (unsigned b = 0; b < W->nbackends; b++)
		for (unsigned s = 0; s < W->backends[b].nservers; s++) {
			struct server *srv = &W->backends[b].servers[s];
			buf_appendf(out, "sluice_backend_connections{backend=\"%s\",server=\"%s\"} %u\n",
				    W->backends[b].cfg->name, srv->cfg->name, shm_get(srv->slot, SHM_CONNS));
		}
	buf_append_str(out, "# HELP sluice_server_up 1 when the server takes requests (healthy, enabled, not ejected)\n"
			    "# TYPE sluice_server_up gauge\n");
	for (unsigned b = 0; b < W->nbackends; b++)
		for (unsigned s = 0; s < W->backends[b].nservers; s++) {
			struct server *srv = &W->backends[b].servers[s];
			buf_appendf(out, "sluice_server_up{backend=\"%s\",server=\"%s\"} %d\n", W->backends[b].cfg->name,
				    srv->cfg->name, upstream_server_usable(srv));
		}
	buf_append_str(out, "# HELP sluice_server_weight The weight balancing gives the server now (slow start included)\n"
			    "# TYPE sluice_server_weight gauge\n");
	for (unsigned b = 0; b < W->nbackends; b++)
		for (unsigned s = 0; s < W->backends[b].nservers; s++) {
			struct server *srv = &W->backends[b].servers[s];
			buf_appendf(out, "sluice_server_weight{backend=\"%s\",server=\"%s\"} %.2f\n",
				    W->backends[b].cfg->name, srv->cfg->name,
				    upstream_server_eweight(srv) / (double)LB_SCALE);
		}
	for (int h = 0; h < HIST_N; h++) {
		buf_appendf(out, "# HELP sluice_%s %s\n# TYPE sluice_%s histogram\n", stats_hist_names[h],
			    stats_hist_help[h], stats_hist_names[h]);
		for (unsigned i = 0; i < n; i++) {
			const struct stats_hist_sum *hs = &sums[i].h[h];
			uint64_t below = 0;
			for (size_t k = 0; k < STATS_NBUCKETS; k++) {
				if (export_edge(k)) {
					buf_appendf(out, "sluice_%s_bucket{%s,le=\"", stats_hist_names[h], sc[i].labels);
					fmt_seconds(out, stats_bucket_low(k));
					buf_appendf(out, "\"} %llu\n", (unsigned long long)below);
				}
				below += hs->b[k];
			}
			buf_appendf(out, "sluice_%s_bucket{%s,le=\"+Inf\"} %llu\n", stats_hist_names[h], sc[i].labels,
				    (unsigned long long)hs->count);
			buf_appendf(out, "sluice_%s_sum{%s} ", stats_hist_names[h], sc[i].labels);
			fmt_seconds(out, hs->sum_us);
			buf_appendf(out, "\nsluice_%s_count{%s} %llu\n", stats_hist_names[h], sc[i].labels,
				    (unsigned long long)hs->count);
		}
	}
	uint32_t drain = atomic_load(&shm->drain);
	buf_appendf(out, "# HELP sluice_ready 1 while the instance is ready for traffic (GET /ready answers 200)\n"
		    "# TYPE sluice_ready gauge\nsluice_ready %d\n"
		    "# HELP sluice_draining 1 for each cause that makes the instance not ready\n"
		    "# TYPE sluice_draining gauge\nsluice_draining{cause=\"admin\"} %d\n"
		    "sluice_draining{cause=\"stop\"} %d\n", drain == 0, !!(drain & SHM_DRAIN_ADMIN),
		    !!(drain & SHM_DRAIN_STOP));
	buf_appendf(out, "# HELP sluice_inspect_enabled 1 when the inspection hook is switched on\n"
		    "# TYPE sluice_inspect_enabled gauge\nsluice_inspect_enabled %d\n", atomic_load(&shm->inspect_on));
	buf_append_str(out, "# HELP sluice_inspect_tag_total Requests carrying an inspection rule tag, by the request's outcome\n"
			    "# TYPE sluice_inspect_tag_total counter\n");
	stats_tags_each(metrics_tag, out);
	metrics_routes(out);
	ratelimit_metrics(out);
	shdict_metrics(out);
	free(sums);
}

/* ---- /status JSON ---- */

static void json_str(struct buf *out, const char *s)
{
	buf_append_json(out, s, strlen(s));
}

/* ,"ready":B,"draining":[its causes] */
static void readiness_json(struct buf *out)
{
	uint32_t d = atomic_load(&shm->drain);
	int admin = !!(d & SHM_DRAIN_ADMIN), stop = !!(d & SHM_DRAIN_STOP);
	buf_appendf(out, ",\"ready\":%s,\"draining\":[%s%s%s]", d ? "false" : "true", admin ? "\"admin\"" : "",
		    admin && stop ? "," : "", stop ? "\"stop\"" : "");
}

static void json_figures(struct buf *out, const struct stats_sum *s)
{
	buf_appendf(out, "\"requests\":%llu,\"responses\":{\"1xx\":%llu,\"2xx\":%llu,\"3xx\":%llu,\"4xx\":%llu,"
		    "\"5xx\":%llu,\"none\":%llu},\"bytes_in\":%llu,\"bytes_out\":%llu",
		    (unsigned long long)s->c[STAT_REQUESTS], (unsigned long long)s->c[STAT_RESP_1XX],
		    (unsigned long long)s->c[STAT_RESP_2XX], (unsigned long long)s->c[STAT_RESP_3XX],
		    (unsigned long long)s->c[STAT_RESP_4XX], (unsigned long long)s->c[STAT_RESP_5XX],
		    (unsigned long long)s->c[STAT_RESP_NONE], (unsigned long long)s->c[STAT_BYTES_IN],
		    (unsigned long long)s->c[STAT_BYTES_OUT]);
	buf_append_str(out, ",\"errors\":{");
	int first = 1;
	for (int r = 1; r < REASON__COUNT; r++) {
		if (!s->reason[r])
			continue;
		buf_appendf(out, "%s\"%s\":%llu", first ? "" : ",", reason_name((enum reason)r),
			    (unsigned long long)s->reason[r]);
		first = 0;
	}
	buf_append_str(out, "},\"latency_us\":{");
	for (int h = 0; h < HIST_N; h++) {
		const struct stats_hist_sum *hs = &s->h[h];
		buf_appendf(out, "%s\"%s\":{\"count\":%llu,\"mean\":%llu,\"p50\":%llu,\"p90\":%llu,\"p99\":%llu,"
			    "\"p999\":%llu}", h ? "," : "", stats_hist_names[h], (unsigned long long)hs->count,
			    (unsigned long long)(hs->count ? hs->sum_us / hs->count : 0),
			    (unsigned long long)stats_quantile(hs, 0.50), (unsigned long long)stats_quantile(hs, 0.90),
			    (unsigned long long)stats_quantile(hs, 0.99), (unsigned long long)stats_quantile(hs, 0.999));
	}
	buf_append_str(out, "}");
}

static const char *admin_state_name(int a)
{
	return a == SHM_ADMIN_DISABLED ? "disabled" : a == SHM_ADMIN_DRAIN ? "drain" : "enabled";
}

static void status_routes(struct buf *out, const struct cfg_listener *li)
{
	static const char *const action[] = { "backend", "redirect", "respond" };
	buf_append_str(out, "\"routes\":[");
	for (unsigned r = 0; r < li->nroutes; r++) {
		const struct cfg_route *rt = &li->routes[r];
		uint64_t v[RS_N] = { 0 };
		if (rt->stats_slot >= 0)
			routestats_read(rt->stats_slot, v);
		buf_appendf(out, "%s{\"name\":", r ? "," : "");
		json_str(out, rt->name);
		buf_appendf(out, ",\"action\":\"%s\",\"backend\":", action[rt->action]);
		if (rt->action != CFG_ROUTE_BACKEND)
			buf_append_str(out, "null");
		else
			json_str(out, rt->backend_name[0] ? rt->backend_name : li->backend_name);
		buf_appendf(out, ",\"requests\":%llu,\"responses\":{", (unsigned long long)v[RS_REQUESTS]);
		for (int c = RS_1XX; c <= RS_NONE; c++)
			buf_appendf(out, "%s\"%s\":%llu", c == RS_1XX ? "" : ",", route_class[c - RS_1XX],
				    (unsigned long long)v[c]);
		buf_appendf(out, "},\"bytes_out\":%llu}", (unsigned long long)v[RS_BYTES_OUT]);
	}
	buf_append_str(out, "],");
}

void admin_status(struct buf *out)
{
	struct stats_sum *s = malloc(sizeof(*s));
	AN(s);
	const struct cfg *cfg = W->cfg;
	buf_appendf(out, "{\"version\":\"%s\",\"master_pid\":%d,\"uptime_s\":%lld,\"config\":", SLUICE_VERSION,
		    (int)atomic_load(&shm->master_pid), (long long)(time(NULL) - atomic_load(&shm->started)));
	json_str(out, cfg->path);
	readiness_json(out);
	buf_appendf(out, ",\"inspect\":\"%s\",\"instances\":%u,\"workers\":[",
		    atomic_load(&shm->inspect_on) ? "on" : "off", W->cfg->instances);
	int first = 1;
	for (int w = 0; w < SHM_MAX_WORKERS; w++) {
		pid_t pid = atomic_load(&shm->workers[w].pid);
		if (pid == 0)
			continue;
		buf_appendf(out, "%s{\"slot\":%d,\"pid\":%d,\"generation\":%u}", first ? "" : ",", w, (int)pid,
			    shm->workers[w].generation);
		first = 0;
	}
	buf_append_str(out, "],\"listeners\":[");
	for (unsigned l = 0; l < cfg->nlisteners; l++) {
		char name[SHM_NAME_MAX];
		stats_listener_slot_name(&cfg->listeners[l], name, sizeof(name));
		int slot = shm_slot_find(name);
		if (slot < 0)
			continue;
		stats_read(slot, s);
		buf_appendf(out, "%s{\"name\":", l ? "," : "");
		json_str(out, cfg->listeners[l].name);
		buf_append_str(out, ",\"address\":");
		json_str(out, cfg->listeners[l].addr.text);
		buf_appendf(out, ",\"tls\":%s,\"backend\":", cfg->listeners[l].tls.enabled ? "true" : "false");
		json_str(out, cfg->listeners[l].backend_name);
		buf_appendf(out, ",\"connections\":%lld,\"accepted\":%llu,\"tls_handshakes\":{\"full_ecdsa\":%llu,"
			    "\"full_rsa\":%llu,\"resumed\":%llu,\"failed\":%llu},",
			    (long long)s->gauge[GAUGE_CLIENTS], (unsigned long long)s->c[STAT_CONN_ACCEPTED],
			    (unsigned long long)s->c[STAT_TLS_FULL_ECDSA], (unsigned long long)s->c[STAT_TLS_FULL_RSA],
			    (unsigned long long)s->c[STAT_TLS_RESUMED], (unsigned long long)s->c[STAT_TLS_FAILED]);
		const struct cfg_listener *li = &cfg->listeners[l];
		buf_appendf(out, "\"protocols\":[%s%s%s],\"h2c\":%s,\"h2\":{\"connections\":%lld,\"streams\":%lld,"
			    "\"connections_total\":%llu,\"requests\":%llu},",
			    li->alpn_h2 ? "\"h2\"" : "", li->alpn_h2 && li->alpn_h1 ? "," : "",
			    li->alpn_h1 ? "\"http/1.1\"" : "", li->h2c ? "true" : "false",
			    (long long)s->gauge[GAUGE_H2_CONNS], (long long)s->gauge[GAUGE_H2_STREAMS],
			    (unsigned long long)s->c[STAT_H2_CONNS], (unsigned long long)s->c[STAT_H2_REQUESTS]);
		const struct cfg_inspect *ic = &cfg->listeners[l].inspect;
		if (ic->enabled) {
			buf_append_str(out, "\"inspect\":{\"script\":");
			json_str(out, ic->script);
			buf_appendf(out, ",\"mode\":\"%s\",\"body\":%u,\"on_error\":\"%s\",\"allow\":%llu,"
				    "\"deny\":%llu,\"error\":%llu},", ic->shadow ? "shadow" : "enforce", ic->body,
				    ic->on_error_deny ? "deny" : "allow", (unsigned long long)s->c[STAT_INSPECT_ALLOW],
				    (unsigned long long)s->c[STAT_INSPECT_DENY], (unsigned long long)s->c[STAT_INSPECT_ERROR]);
		} else {
			buf_append_str(out, "\"inspect\":null,");
		}
		status_routes(out, &cfg->listeners[l]);
		json_figures(out, s);
		buf_append_str(out, "}");
	}
	buf_append_str(out, "],\"backends\":[");
	for (unsigned b = 0; b < W->nbackends; b++) {
		struct backend *be = &W->backends[b];
		stats_read(be->slot, s);
		uint64_t reqs = s->c[STAT_BCONN_NEW] + s->c[STAT_BCONN_REUSED];
		buf_appendf(out, "%s{\"name\":", b ? "," : "");
		json_str(out, be->cfg->name);
		uint32_t queued = shm_get(be->slot, SHM_WAITING);
		for (unsigned k = 0; k < be->nservers; k++)
			queued += shm_get(be->servers[k].slot, SHM_WAITING);
		buf_appendf(out, ",\"queued\":%u,\"connection_reuse\":%.4f,", queued,
			    reqs ? (double)s->c[STAT_BCONN_REUSED] / (double)reqs : 0.0);
		if (be->cfg->persist.type == CFG_PERSIST_NONE)
			buf_append_str(out, "\"persistence\":null,");
		else
			buf_appendf(out, "\"persistence\":{\"type\":\"%s\",\"hits\":%llu,\"misses\":%llu,"
				    "\"failovers\":%llu},", cfg_persist_type_name(be->cfg->persist.type),
				    (unsigned long long)s->c[STAT_PERSIST_HIT], (unsigned long long)s->c[STAT_PERSIST_MISS],
				    (unsigned long long)s->c[STAT_PERSIST_FAILOVER]);
		json_figures(out, s);
		buf_append_str(out, ",\"servers\":[");
		for (unsigned k = 0; k < be->nservers; k++) {
			struct server *srv = &be->servers[k];
			const struct shm_slot *sl = &shm->slots[srv->slot];
			stats_read(srv->slot, s);
			reqs = s->c[STAT_BCONN_NEW] + s->c[STAT_BCONN_REUSED];
			buf_appendf(out, "%s{\"name\":", k ? "," : "");
			json_str(out, srv->cfg->name);
			buf_append_str(out, ",\"address\":");
			json_str(out, srv->cfg->addr.text);
			buf_appendf(out, ",\"ejected\":%s,\"queued\":%u", upstream_server_ejected(srv) ? "true" : "false",
				    shm_get(srv->slot, SHM_WAITING));
			buf_appendf(out, ",\"health\":\"%s\",\"admin\":\"%s\",\"backup\":%s,\"weight\":%u,"
				    "\"effective_weight\":%.2f,\"max_connections\":%u,\"tier_max_connections\":%u,"
				    "\"connections\":%u,"
				    "\"busy\":%lld,\"idle\":%lld,\"connection_reuse\":%.4f,",
				    atomic_load(&sl->up) ? "up" : "down", admin_state_name(atomic_load(&sl->admin)),
				    srv->cfg->backup ? "true" : "false", upstream_server_weight(srv),
				    upstream_server_eweight(srv) / (double)LB_SCALE,
				    upstream_server_max_conns(srv), upstream_server_tier_max_conns(srv),
				    shm_get(srv->slot, SHM_CONNS),
				    (long long)s->gauge[GAUGE_BCONN_BUSY], (long long)s->gauge[GAUGE_BCONN_IDLE],
				    reqs ? (double)s->c[STAT_BCONN_REUSED] / (double)reqs : 0.0);
			json_figures(out, s);
			buf_append_str(out, "}");
		}
		buf_append_str(out, "]}");
	}
	buf_append_str(out, "]}\n");
	free(s);
}

/* ---- controls ---- */

static struct server *find_server(const char *be_name, size_t bl, const char *srv_name, size_t sl)
{
	for (unsigned b = 0; b < W->nbackends; b++) {
		struct backend *be = &W->backends[b];
		if (strlen(be->cfg->name) != bl || strncmp(be->cfg->name, be_name, bl) != 0)
			continue;
		for (unsigned s = 0; s < be->nservers; s++)
			if (strlen(be->servers[s].cfg->name) == sl && strncmp(be->servers[s].cfg->name, srv_name, sl) == 0)
				return &be->servers[s];
	}
	return NULL;
}

/* Split "/a/b/c" into up to MAX segments. */
static int split_path(const char *p, size_t n, const char **seg, size_t *len, int max)
{
	int k = 0;
	size_t i = 0;
	while (i < n) {
		if (p[i] != '/')
			return -1;
		size_t j = i + 1;
		while (j < n && p[j] != '/')
			j++;
		if (k == max || j == i + 1)
			return -1;
		seg[k] = p + i + 1;
		len[k] = j - i - 1;
		k++;
		i = j;
	}
	return k;
}

static int seg_is(const char *s, size_t n, const char *lit)
{
	return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* Returns the status; MSG gets the body's text. */
/* A control's body: one decimal number, trailing newline or spaces allowed. */
static int parse_body_number(const struct buf *body, unsigned long *v)
{
	char num[16];
	size_t n = body->len;
	while (n && (body->data[n - 1] == '\n' || body->data[n - 1] == '\r' || body->data[n - 1] == ' '))
		n--;
	if (n == 0 || n >= sizeof(num) || strspn(body->data, "0123456789") < n)
		return -1;
	memcpy(num, body->data, n);
	num[n] = '\0';
	*v = strtoul(num, NULL, 10);
	return 0;
}

static int control(const char *path, size_t plen, const struct buf *body, char *msg, size_t cap)
{
	const char *seg[4];
	size_t len[4];
	int k = split_path(path, plen, seg, len, 4);
	if (k == 2 && seg_is(seg[0], len[0], "inspect")) {
		int on = seg_is(seg[1], len[1], "on");
		if (!on && !seg_is(seg[1], len[1], "off")) {
			snprintf(msg, cap, "use POST /inspect/on or /inspect/off\n");
			return 404;
		}
		atomic_store(&shm->inspect_on, on);
		log_warn("admin: inspection hook switched %s", on ? "on" : "off");
		snprintf(msg, cap, "inspect %s\n", on ? "on" : "off");
		return 200;
	}
	if (k == 1 && (seg_is(seg[0], len[0], "drain") || seg_is(seg[0], len[0], "ready"))) {
		/* Instance-wide, in shared memory: every worker's monitor_uri
		 * and /ready follow, and listeners go on serving, so that the
		 * balancer in front takes the instance out in its own time.
		 * Kept across reloads. A stop's own cause is not the admin's
		 * to clear. */
		if (seg[0][0] == 'd') {
			uint32_t was = atomic_fetch_or(&shm->drain, SHM_DRAIN_ADMIN);
			if (!(was & SHM_DRAIN_ADMIN))
				log_warn("admin: drain: GET /ready and monitor_uri answer 503 until POST /ready");
			snprintf(msg, cap, "draining: /ready and monitor_uri answer 503; listeners keep serving\n");
			return 200;
		}
		uint32_t was = atomic_fetch_and(&shm->drain, ~(uint32_t)SHM_DRAIN_ADMIN);
		if (was & SHM_DRAIN_ADMIN)
			log_warn("admin: ready: drain undone");
		if (was & SHM_DRAIN_STOP) {
			snprintf(msg, cap, "stopping: the instance stays not ready\n");
			return 409;
		}
		snprintf(msg, cap, "ready\n");
		return 200;
	}
	if (k == 1 && seg_is(seg[0], len[0], "reload")) {
		log_warn("admin: reload requested");
		/* A worker that gave up root may not signal a root master
		 * (EPERM); the flag then reaches it within a tick. */
		if (kill(atomic_load(&shm->master_pid), SIGHUP) < 0)
			atomic_store(&shm->reload_requested, 1);
		snprintf(msg, cap, "reload started\n");
		return 202;
	}
	if (k == 4 && seg_is(seg[0], len[0], "servers")) {
		struct server *srv = find_server(seg[1], len[1], seg[2], len[2]);
		if (srv == NULL) {
			snprintf(msg, cap, "no server %.*s in backend %.*s\n", (int)len[2], seg[2], (int)len[1], seg[1]);
			return 404;
		}
		struct shm_slot *sl = &shm->slots[srv->slot];
		const char *name = srv->cfg->name, *be = srv->be->cfg->name;
		int state = -1;
		if (seg_is(seg[3], len[3], "enable"))
			state = SHM_ADMIN_ENABLED;
		else if (seg_is(seg[3], len[3], "disable"))
			state = SHM_ADMIN_DISABLED;
		else if (seg_is(seg[3], len[3], "drain"))
			state = SHM_ADMIN_DRAIN;
		if (state >= 0) {
			if (state == SHM_ADMIN_ENABLED && atomic_load(&sl->admin) != SHM_ADMIN_ENABLED)
				atomic_store(&sl->back_since_ms, now_us() / 1000);  /* slow start */
			atomic_store(&sl->admin, state);
			shm_kick_others(W->slot);
			upstream_on_kick();
			log_warn("admin: server %s/%s set to %s", be, name, admin_state_name(state));
			snprintf(msg, cap, "%s/%s %s\n", be, name, admin_state_name(state));
			return 200;
		}
		if (seg_is(seg[3], len[3], "max_connections")) {
			unsigned long v;
			if (parse_body_number(body, &v) < 0) {
				snprintf(msg, cap, "body must be the new max_connections, a number 1-1000000\n");
				return 400;
			}
			if (v < 1 || v > 1000000) {
				snprintf(msg, cap, "max_connections must be 1-1000000\n");
				return 400;
			}
			atomic_store(&sl->max_conns, (uint32_t)v);
			shm_kick_others(W->slot);
			upstream_on_kick();
			log_warn("admin: server %s/%s max_connections set to %lu", be, name, v);
			snprintf(msg, cap, "%s/%s max_connections %lu\n", be, name, v);
			return 200;
		}
		if (seg_is(seg[3], len[3], "weight")) {
			unsigned long v;
			if (parse_body_number(body, &v) < 0 || v > 256) {
				snprintf(msg, cap, "body must be the new weight, a number 0-256\n");
				return 400;
			}
			atomic_store(&sl->weight_op, (uint32_t)v + 1);
			shm_kick_others(W->slot);
			upstream_on_kick();
			log_warn("admin: server %s/%s weight set to %lu", be, name, v);
			snprintf(msg, cap, "%s/%s weight %lu\n", be, name, v);
			return 200;
		}
		snprintf(msg, cap, "unknown action %.*s (enable, disable, drain, max_connections, weight)\n",
			 (int)len[3], seg[3]);
		return 404;
	}
	snprintf(msg, cap, "unknown control (POST /servers/<backend>/<server>/{enable,disable,drain,"
		 "max_connections,weight}, /inspect/{on,off}, /reload, /drain, /ready)\n");
	return 404;
}

/* ---- connections ---- */

extern const char admin_dashboard_html[];

static const char *status_text(int s)
{
	switch (s) {
	case 200: return "OK";
	case 202: return "Accepted";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 409: return "Conflict";
	case 413: return "Content Too Large";
	case 503: return "Service Unavailable";
	default:  return "Error";
	}
}

static void conn_closed(uv_handle_t *h)
{
	struct admin_conn *c = h->data;
	if (--c->pending > 0)
		return;
	buf_free(&c->url);
	buf_free(&c->hname);
	buf_free(&c->hval);
	buf_free(&c->auth);
	buf_free(&c->body);
	buf_free(&c->out);
	free(c);
}

static void conn_close(struct admin_conn *c)
{
	if (c->closing)
		return;
	c->closing = 1;
	list_del(&c->link);
	c->pending = 2;
	uv_close((uv_handle_t *)&c->tcp, conn_closed);
	uv_close((uv_handle_t *)&c->timer, conn_closed);
}

static void write_cb(uv_write_t *req, int status)
{
	(void)status;
	conn_close(req->data);
}

static void respond(struct admin_conn *c, int status, const char *type, const char *body, size_t len)
{
	struct buf *o = &c->out;
	buf_appendf(o, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
		    "Connection: close\r\n\r\n", status, status_text(status), type, len);
	if (llhttp_get_method(&c->parser) != HTTP_HEAD)
		buf_append(o, body, len);
	uv_buf_t b = uv_buf_init(o->data, (unsigned)o->len);
	c->wreq.data = c;
	c->done = 1;
	uv_read_stop((uv_stream_t *)&c->tcp);
	if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, write_cb) < 0)
		conn_close(c);
}

static void respond_text(struct admin_conn *c, int status, const char *msg)
{
	respond(c, status, "text/plain; charset=utf-8", msg, strlen(msg));
}

static int authorized(const struct admin_conn *c)
{
	const char *tok = W->cfg->admin.token;
	if (tok[0] == '\0')
		return 1;
	size_t tl = strlen(tok);
	return c->auth.len == tl + 7 && strncasecmp(c->auth.data, "Bearer ", 7) == 0 &&
	       memcmp(c->auth.data + 7, tok, tl) == 0;
}

static void handle(struct admin_conn *c)
{
	llhttp_method_t m = llhttp_get_method(&c->parser);
	const char *url = c->url.data ? c->url.data : "";
	size_t ul = c->url.len;
	const char *q = memchr(url, '?', ul);
	size_t pl = q ? (size_t)(q - url) : ul;
	int is_page = (pl == 1 && url[0] == '/') || (pl == 10 && memcmp(url, "/dashboard", 10) == 0);
	if (c->too_big) {
		respond_text(c, 413, "control bodies are at most 4096 bytes\n");
		return;
	}
	int is_ready = pl == 6 && memcmp(url, "/ready", 6) == 0;
	/* The page itself holds no data and a browser cannot attach a token
	 * to a navigation: it asks for the token and sends it on every fetch.
	 * GET /ready says only "ready" or "draining", to balancers' health
	 * checks, which often cannot send a header. */
	if (!((is_page || is_ready) && (m == HTTP_GET || m == HTTP_HEAD)) && !authorized(c)) {
		respond_text(c, 401, "missing or wrong token (Authorization: Bearer <admin.token>)\n");
		return;
	}
	int is_control = (pl >= 9 && memcmp(url, "/servers/", 9) == 0) || (pl >= 9 && memcmp(url, "/inspect/", 9) == 0) ||
			 (pl == 7 && memcmp(url, "/reload", 7) == 0) || (pl == 6 && memcmp(url, "/drain", 6) == 0);
	if ((m == HTTP_GET || m == HTTP_HEAD) && is_control) {
		respond_text(c, 405, "controls are POST only\n");
		return;
	}
	if (m == HTTP_GET || m == HTTP_HEAD) {
		struct buf body = { 0 };
		if (pl == 8 && memcmp(url, "/metrics", 8) == 0) {
			admin_metrics(&body);
			respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", body.data, body.len);
		} else if (pl == 7 && memcmp(url, "/status", 7) == 0) {
			admin_status(&body);
			respond(c, 200, "application/json", body.data, body.len);
		} else if (is_ready) {
			int ready = worker_ready(NULL);
			respond_text(c, ready ? 200 : 503, ready ? "ready\n" : "draining\n");
		} else if (is_page) {
			respond(c, 200, "text/html; charset=utf-8", admin_dashboard_html, strlen(admin_dashboard_html));
		} else {
			respond_text(c, 404, "not found (GET /metrics, /status, /ready, /; POST controls)\n");
		}
		buf_free(&body);
		return;
	}
	if (m != HTTP_POST) {
		respond_text(c, 405, "controls are POST only; reads are GET\n");
		return;
	}
	char msg[256];
	int st = control(url, pl, &c->body, msg, sizeof(msg));
	respond_text(c, st, msg);
}

static int on_url(llhttp_t *p, const char *at, size_t len)
{
	struct admin_conn *c = p->data;
	if (c->url.len + len > 1024)
		return -1;
	buf_append(&c->url, at, len);
	return 0;
}

static int on_field(llhttp_t *p, const char *at, size_t len)
{
	struct admin_conn *c = p->data;
	if (c->in_value) {
		c->hname.len = c->hval.len = 0;
		c->in_value = 0;
	}
	if (c->hname.len + len > 256)
		return -1;
	buf_append(&c->hname, at, len);
	return 0;
}

static int on_value(llhttp_t *p, const char *at, size_t len)
{
	struct admin_conn *c = p->data;
	c->in_value = 1;
	if (c->hval.len + len > 1024)
		return -1;
	buf_append(&c->hval, at, len);
	return 0;
}

static int on_value_done(llhttp_t *p)
{
	struct admin_conn *c = p->data;
	if (c->hname.len == 13 && strncasecmp(c->hname.data, "authorization", 13) == 0) {
		c->auth.len = 0;
		buf_append(&c->auth, c->hval.data, c->hval.len);
	}
	c->hname.len = c->hval.len = 0;
	c->in_value = 0;
	return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
	struct admin_conn *c = p->data;
	if (c->body.len + len > ADMIN_BODY_MAX) {
		c->too_big = 1;
		return 0;
	}
	buf_append(&c->body, at, len);
	return 0;
}

static int on_done(llhttp_t *p)
{
	struct admin_conn *c = p->data;
	handle(c);
	return HPE_PAUSED;
}

static void alloc_cb(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
	(void)h;
	(void)suggested;
	static char rbuf[ADMIN_HEAD_MAX];
	*b = uv_buf_init(rbuf, sizeof(rbuf));
}

static void read_cb(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct admin_conn *c = s->data;
	if (n == 0 || c->done || c->closing)
		return;
	if (n < 0) {
		conn_close(c);
		return;
	}
	llhttp_errno_t e = llhttp_execute(&c->parser, b->base, (size_t)n);
	if (e != HPE_OK && e != HPE_PAUSED && !c->done)
		respond_text(c, c->too_big ? 413 : 400, c->too_big ? "control bodies are at most 4096 bytes\n"
								    : "malformed request\n");
}

static void timer_cb(uv_timer_t *t)
{
	conn_close(t->data);
}

static void on_conn(uv_stream_t *srv, int status)
{
	if (!acceptor_ready(&admin_acc, status))
		return;
	struct admin_conn *c = calloc(1, sizeof(*c));
	AN(c);
	uv_tcp_init(srv->loop, &c->tcp);
	uv_timer_init(srv->loop, &c->timer);
	c->tcp.data = c->timer.data = c;
	list_add_tail(&admin_conns, &c->link);
	if (uv_accept(srv, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c);
		return;
	}
	llhttp_init(&c->parser, HTTP_REQUEST, &settings);
	c->parser.data = c;
	uv_timer_start(&c->timer, timer_cb, ADMIN_TIMEOUT_MS, 0);
	uv_read_start((uv_stream_t *)&c->tcp, alloc_cb, read_cb);
}

void admin_start(struct worker *w)
{
	const struct cfg_admin *a = &w->cfg->admin;
	if (!a->enabled)
		return;
	llhttp_settings_init(&settings);
	settings.on_url = on_url;
	settings.on_header_field = on_field;
	settings.on_header_value = on_value;
	settings.on_header_value_complete = on_value_done;
	settings.on_body = on_body;
	settings.on_message_complete = on_done;
	/* SO_REUSEPORT: the next generation's worker 0 binds while this one
	 * still serves, so a reload never refuses an admin request. */
	int fd = socket(a->addr.ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0 ||
	    bind(fd, (const struct sockaddr *)&a->addr.ss, a->addr.len) < 0 || listen(fd, 64) < 0) {
		log_error("admin listener %s: %s", a->addr.text, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	if (acceptor_open(&w->loop, &admin_acc, &admin_tcp, fd, 64, a->addr.text, on_conn, NULL) < 0) {
		log_error("admin listener %s: cannot listen", a->addr.text);
		return;
	}
	admin_running = 1;
	log_info("admin listener on %s", a->addr.text);
}

void admin_stop(void)
{
	if (!admin_running)
		return;
	admin_running = 0;
	acceptor_stop(&admin_acc, NULL);
	while (!list_empty(&admin_conns))
		conn_close(CONTAINER_OF(admin_conns.next, struct admin_conn, link));
}
