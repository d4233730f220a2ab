/* crs_replay: run the CRS engine (crseval) on raw HTTP requests and print
 * ModSecurity-style verdicts, one JSON line per request, for comparing
 * with the ModSecurity oracle (tests/e2e/test_crs_differential.py).
 *
 *   crs_replay [-s SKIPID]... [-b ROUNDS [-c KB]] CONF < requests
 *
 * -b: evaluate every request ROUNDS times and print only the mean time per
 * evaluation, with how many @rx operators the program has and how many of
 * them the prefilter covers (bench/ uses it; no output per request).
 * -c: before each timed evaluation write KB kilobytes of other memory, as
 * a proxy's other work does between requests: the time of a cold-cache
 * evaluation (the writes are not timed).
 *
 * CONF is a SecLang file (its Includes are followed). The requests on
 * stdin are records "ID TAB LENGTH LF" followed by LENGTH bytes of a
 * whole HTTP/1.1 request. The body is taken by Content-Length, or
 * de-chunked. Output: {"id", "intercepted", "status", "disruptive",
 * "phase", "alerts": [[id, logged, secaction, phase], ...], "tx": {...}}
 * with the anomaly-score TX variables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include "buf.h"
#include "crseval.h"
#include "util.h"

static const char *const tx_report[] = { "paranoia_level", "anomaly_score_pl1", "anomaly_score_pl2", "anomaly_score_pl3",
					 "anomaly_score_pl4", "inbound_anomaly_score_threshold", NULL };

static const char *find_crlf(const char *s, const char *end)
{
	for (const char *p = s; p + 1 < end; p++)
		if (p[0] == '\r' && p[1] == '\n')
			return p;
	return NULL;
}

/* De-chunk S..END into OUT; 0 or -1. */
static int dechunk(const char *s, const char *end, struct buf *out)
{
	for (;;) {
		const char *eol = find_crlf(s, end);
		if (!eol)
			return -1;
		size_t n = strtoul(s, NULL, 16);
		s = eol + 2;
		if (n == 0)
			return 0;
		if ((size_t)(end - s) < n + 2)
			return -1;
		buf_append(out, s, n);
		s += n + 2;
	}
}

static unsigned bench_rounds;      /* -b N: evaluate each request N times, print the mean time only */
static double bench_us;
static unsigned long bench_n;
static size_t cold_bytes;          /* -c KB: memory written between timed evaluations */
static unsigned char *cold_mem;

static void replay(struct crs_txn *t, const struct crs_program *p, const char *id, const char *raw, size_t len, struct buf *out)
{
	const char *end = raw + len;
	const char *eol = find_crlf(raw, end);
	out->len = 0;
	if (!eol) {
		printf("{\"id\":\"%s\",\"error\":\"no request line\"}\n", id);
		return;
	}
	const char *sp1 = memchr(raw, ' ', (size_t)(eol - raw));
	const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(eol - sp1 - 1)) : NULL;
	if (!sp2) {
		printf("{\"id\":\"%s\",\"error\":\"bad request line\"}\n", id);
		return;
	}
	struct sc_header h[256];
	size_t nh = 0;
	const char *s = eol + 2;
	long clen = -1;
	int chunked = 0;
	while (s < end) {
		const char *e = find_crlf(s, end);
		if (!e)
			e = end;
		if (e == s) {
			s += 2;
			break;
		}
		const char *colon = memchr(s, ':', (size_t)(e - s));
		if (colon && nh < 256) {
			const char *v = colon + 1;
			while (v < e && (*v == ' ' || *v == '\t'))
				v++;
			const char *ve = e;
			while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
				ve--;
			h[nh] = (struct sc_header){ s, v, (size_t)(colon - s), (size_t)(ve - v) };
			if (h[nh].nlen == 14 && strncasecmp(s, "content-length", 14) == 0)
				clen = strtol(v, NULL, 10);
			if (h[nh].nlen == 17 && strncasecmp(s, "transfer-encoding", 17) == 0 && (size_t)(ve - v) >= 7 &&
			    strncasecmp(v, "chunked", 7) == 0)
				chunked = 1;
			nh++;
		}
		s = e + 2;
	}
	if (chunked) {
		/* httpd drops Content-Length when Transfer-Encoding is there too */
		size_t j = 0;
		for (size_t k = 0; k < nh; k++)
			if (!(h[k].nlen == 14 && strncasecmp(h[k].name, "content-length", 14) == 0))
				h[j++] = h[k];
		nh = j;
	}
	const char *body = NULL;
	size_t blen = 0;
	if (s > end)
		s = end;
	if (chunked) {
		if (dechunk(s, end, out) == 0) {
			body = out->data;
			blen = out->len;
		}
	} else if (clen > 0) {
		body = s;
		blen = (size_t)clen <= (size_t)(end - s) ? (size_t)clen : (size_t)(end - s);
	}
	struct crs_request rq = {
		.method = raw, .method_len = (size_t)(sp1 - raw),
		.target = sp1 + 1, .target_len = (size_t)(sp2 - sp1 - 1),
		.protocol = sp2 + 1, .protocol_len = (size_t)(eol - sp2 - 1),
		.headers = h, .nheaders = nh, .body = body, .body_len = blen,
		.remote_addr = "127.0.0.1", .remote_port = 40000,
	};
	if (bench_rounds) {
		struct timespec a, b;
		if (cold_bytes) {
			for (unsigned i = 0; i < bench_rounds; i++) {
				for (size_t k = 0; k < cold_bytes; k += 64)
					cold_mem[k] = (unsigned char)(cold_mem[k] + i + 1);
				clock_gettime(CLOCK_MONOTONIC, &a);
				crs_eval_request(t, p, &rq);
				clock_gettime(CLOCK_MONOTONIC, &b);
				bench_us += (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
			}
			bench_n += bench_rounds;
			return;
		}
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (unsigned i = 0; i < bench_rounds; i++)
			crs_eval_request(t, p, &rq);
		clock_gettime(CLOCK_MONOTONIC, &b);
		bench_us += (double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3;
		bench_n += bench_rounds;
		return;
	}
	crs_eval_request(t, p, &rq);
	const struct crs_verdict *v = &t->v;
	printf("{\"id\":\"%s\",\"intercepted\":%s,\"status\":%u,\"disruptive\":%u,\"phase\":%u,\"alerts\":[", id,
	       v->intercepted ? "true" : "false", v->status, v->rule_id, v->phase);
	for (size_t i = 0; i < v->nalerts; i++)
		printf("%s[%u,%u,%u,%u]", i ? "," : "", crs_rule_id(v->alerts[i].rule), v->alerts[i].logged,
		       v->alerts[i].secaction, v->alerts[i].phase);
	printf("],\"tx\":{");
	for (int i = 0; tx_report[i]; i++)
		printf("%s\"%s\":%d", i ? "," : "", tx_report[i], crs_txn_tx_int(t, tx_report[i]));
	printf("}}\n");
}

int main(int argc, char **argv)
{
	uint32_t skip[64];
	size_t nskip = 0;
	int i = 1;
	for (; i < argc - 1 && (strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "-b") == 0 || strcmp(argv[i], "-c") == 0);
	     i += 2) {
		if (argv[i][1] == 'b') {
			bench_rounds = (unsigned)strtoul(argv[i + 1], NULL, 10);
		} else if (argv[i][1] == 'c') {
			unsigned long kb = strtoul(argv[i + 1], NULL, 10);
			if (kb > (1ul << 24)) {
				fprintf(stderr, "crs_replay: -c: at most 16 GB\n");
				return 2;
			}
			cold_bytes = (size_t)kb * 1024;
		} else if (nskip < 64)
			skip[nskip++] = (uint32_t)strtoul(argv[i + 1], NULL, 10);
	}
	if (i != argc - 1) {
		fprintf(stderr, "usage: crs_replay [-s SKIPID]... [-b ROUNDS [-c KB]] CONF < requests\n");
		return 2;
	}
	if (cold_bytes && !bench_rounds) {
		fprintf(stderr, "crs_replay: -c needs -b\n");
		return 2;
	}
	if (cold_bytes) {
		cold_mem = calloc(1, cold_bytes);
		if (!cold_mem)
			return 1;
	}
	struct seclang sl;
	seclang_init(&sl);
	if (seclang_load_file(&sl, argv[i]) < 0 || seclang_finish(&sl) < 0) {
		fprintf(stderr, "crs_replay: %s\n", sl.error);
		return 1;
	}
	struct crs_program p;
	if (crs_compile(&p, &sl, skip, nskip) < 0) {
		fprintf(stderr, "crs_replay: %s\n", p.error);
		return 1;
	}
	struct crs_txn t;
	crs_txn_init(&t);
	struct buf raw = { 0 }, body = { 0 };
	char line[512];
	while (fgets(line, sizeof(line), stdin)) {
		char *tab = strchr(line, '\t');
		if (!tab)
			break;
		*tab = '\0';
		size_t n = strtoul(tab + 1, NULL, 10);
		raw.len = 0;
		buf_reserve(&raw, n + 1);
		if (fread(raw.data, 1, n, stdin) != n)
			break;
		raw.len = n;
		replay(&t, &p, line, raw.data, raw.len, &body);
	}
	if (bench_rounds)
		printf("{\"evaluations\":%lu,\"mean_us\":%.2f,\"rx_rules\":%u,\"prefiltered\":%u}\n", bench_n,
		       bench_n ? bench_us / (double)bench_n : 0.0, p.rx_rules, p.pf_rules);
	crs_txn_free(&t);
	crs_program_free(&p);
	buf_free(&raw);
	buf_free(&body);
	free(cold_mem);
	return 0;
}
