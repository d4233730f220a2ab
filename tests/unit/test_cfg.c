/* Unit test for src/cfg.c: the pure value parsers, the default config, and
 * the error report for bad configs (position and key path). Run from the
 * repository root. Bad configs are written to a fresh temporary directory
 * that is removed at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "cfg.h"

static unsigned passed, failed;

#define CHECK(cond)                                                            \
	do {                                                                   \
		if (cond) {                                                    \
			passed++;                                              \
		} else {                                                       \
			failed++;                                              \
			printf("%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
			       #cond);                                         \
		}                                                              \
	} while (0)

static char tmpdir[] = "/tmp/test_cfg.XXXXXX";

/* A valid backend + listener, for configs that break something else. */
#define GOOD_BE "backends:\n  - name: app\n    servers:\n      - address: 127.0.0.1:9000\n"
#define GOOD_LI "listeners:\n  - address: 127.0.0.1:8080\n    backend: app\n"
/* After GOOD_BE: a listener whose tls mapping starts on line 9, and a
 * certificate list on lines 9-10, so extra tls keys start on line 11. */
#define TLS_LI "listeners:\n  - address: 127.0.0.1:8443\n    backend: app\n    tls:\n"
#define TLS_CERT "      certificates:\n        - cert: a.pem\n"

static void test_duration(void)
{
	static const struct { const char *s; uint32_t ms; } good[] = {
		{ "150ms", 150 }, { "2s", 2000 }, { "1m", 60000 }, { "1h", 3600000 },
		{ "0", 0 }, { "42", 42 }, { "0s", 0 }, { "4294967295", 4294967295u },
		{ "1193h", 1193u * 3600000u },
	};
	static const char *const bad[] = {
		"", "s", "ms", "2x", "-1", "+1", "1.5s", " 2s", "2s ", "2 s", "2S", "2sec",
		"4294967296", "1194h", "99999999999999999999999", "1d",
	};
	size_t i;
	uint32_t v;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		CHECK(cfg_parse_duration(good[i].s, &v) == 0 && v == good[i].ms);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		if (cfg_parse_duration(bad[i], &v) != -1 || v != 12345)
			printf("  duration \"%s\" accepted\n", bad[i]);
		CHECK(cfg_parse_duration(bad[i], &v) == -1 && v == 12345);
	}
	CHECK(cfg_parse_duration(NULL, &v) == -1);
}

static void test_size(void)
{
	static const struct { const char *s; uint64_t b; } good[] = {
		{ "512", 512 }, { "16k", 16384 }, { "4m", 4u << 20 }, { "1g", 1u << 30 },
		{ "0", 0 }, { "16K", 16384 }, { "2G", 2ull << 30 },
		{ "18446744073709551615", UINT64_MAX }, { "17179869183g", 17179869183ull << 30 },
	};
	static const char *const bad[] = {
		"", "k", "16kb", "16 k", "-1", "1t", "1.5k", " 1", "1 ",
		"18446744073709551616", "17179869184g",
	};
	size_t i;
	uint64_t v;

	for (i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		v = 12345;
		CHECK(cfg_parse_size(good[i].s, &v) == 0 && v == good[i].b);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = 12345;
		if (cfg_parse_size(bad[i], &v) != -1 || v != 12345)
			printf("  size \"%s\" accepted\n", bad[i]);
		CHECK(cfg_parse_size(bad[i], &v) == -1 && v == 12345);
	}
}

static int addr_is(const struct cfg_addr *a, int family, const char *ip, unsigned port)
{
	char buf[INET6_ADDRSTRLEN];
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&a->ss;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&a->ss;

	if (a->ss.ss_family != family)
		return 0;
	if (family == AF_INET)
		return a->len == sizeof(*sin) && ntohs(sin->sin_port) == port &&
		       inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof(buf)) &&
		       strcmp(buf, ip) == 0;
	return a->len == sizeof(*sin6) && ntohs(sin6->sin6_port) == port &&
	       inet_ntop(AF_INET6, &sin6->sin6_addr, buf, sizeof(buf)) && strcmp(buf, ip) == 0;
}

static void test_addr(void)
{
	static const char *const bad[] = {
		"", "1.2.3.4", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4:8x",
		"1.2.3.4:-1", ":80", "::1:80", "[::1]80", "[::1]", "[1.2.3.4]:80", "[]:80",
		"1.2.3:80", "256.1.1.1:80", "host name:80", "*:0",
		"a-very-long-host-name-that-does-not-fit-in-the-80-byte-text-field.example.com:8080",
	};
	struct cfg_addr a;
	size_t i;

	CHECK(cfg_parse_addr("1.2.3.4:80", &a) == 0 && addr_is(&a, AF_INET, "1.2.3.4", 80));
	CHECK(strcmp(a.text, "1.2.3.4:80") == 0);
	CHECK(cfg_parse_addr("[::1]:8080", &a) == 0 && addr_is(&a, AF_INET6, "::1", 8080));
	CHECK(strcmp(a.text, "[::1]:8080") == 0);
	CHECK(cfg_parse_addr("[::]:443", &a) == 0 && addr_is(&a, AF_INET6, "::", 443));
	CHECK(cfg_parse_addr("*:80", &a) == 0 && addr_is(&a, AF_INET, "0.0.0.0", 80));
	CHECK(strcmp(a.text, "*:80") == 0);
	CHECK(cfg_parse_addr("0.0.0.0:65535", &a) == 0 && addr_is(&a, AF_INET, "0.0.0.0", 65535));
	/* IPv4 preferred when a name has both. */
	CHECK(cfg_parse_addr("localhost:80", &a) == 0 &&
	      (addr_is(&a, AF_INET, "127.0.0.1", 80) || addr_is(&a, AF_INET6, "::1", 80)));
	CHECK(strcmp(a.text, "localhost:80") == 0);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (cfg_parse_addr(bad[i], &a) != -1)
			printf("  address \"%s\" accepted\n", bad[i]);
		CHECK(cfg_parse_addr(bad[i], &a) == -1);
	}
}

static void test_default_config(void)
{
	char err[4096] = "x";
	struct cfg *c = cfg_load("conf/sluice.yaml", err, sizeof(err));

	if (c == NULL)
		printf("  conf/sluice.yaml: %s\n", err);
	CHECK(c != NULL);
	if (c == NULL)
		return;
	CHECK(err[0] == '\0');
	CHECK(strcmp(c->path, "conf/sluice.yaml") == 0);
	CHECK(c->workers == 2);
	CHECK(strcmp(c->error_log, "stderr") == 0 && strcmp(c->access_log, "stderr") == 0);
	CHECK(c->pid_file[0] == '\0');
	CHECK(c->timeouts.client_header_ms == 10000 && c->timeouts.client_keepalive_ms == 60000);
	CHECK(c->timeouts.client_body_ms == 30000 && c->timeouts.drain_ms == 10000);
	CHECK(c->limits.max_request_line == 8192 && c->limits.max_header_size == 32768);
	CHECK(c->limits.max_headers == 100 && c->limits.max_body_size == 0);
	CHECK(c->limits.max_connections == 100000);
	CHECK(c->nlisteners == 2 && c->nbackends == 1);
	CHECK(!c->listeners[0].tls.enabled && c->listeners[1].tls.enabled);
	CHECK(c->listeners[1].tls.ncerts == 2);
	CHECK(strcmp(c->listeners[1].tls.certs[0].cert, "conf/tls/ecdsa.pem") == 0);
	CHECK(strcmp(c->listeners[0].name, "http") == 0);
	CHECK(addr_is(&c->listeners[0].addr, AF_INET, "0.0.0.0", 8080));
	CHECK(c->listeners[0].backlog == 511);
	CHECK(c->listeners[0].backend == &c->backends[0]);
	CHECK(strcmp(c->listeners[0].backend_name, "demo") == 0);
	CHECK(strcmp(c->backends[0].name, "demo") == 0);
	CHECK(c->backends[0].balance == CFG_BALANCE_ROUNDROBIN);
	CHECK(c->backends[0].queue_timeout_ms == 5000 && c->backends[0].queue_max == 10000);
	CHECK(c->backends[0].idle_max == 64 && c->backends[0].idle_timeout_ms == 30000);
	CHECK(c->backends[0].connect_timeout_ms == 3000);
	CHECK(c->backends[0].response_timeout_ms == 30000);
	CHECK(c->backends[0].health.enabled == 1);
	CHECK(strcmp(c->backends[0].health.path, "/health") == 0);
	CHECK(c->backends[0].health.interval_ms == 2000 && c->backends[0].health.timeout_ms == 1000);
	CHECK(c->backends[0].health.expect_status == 200);
	CHECK(c->backends[0].health.rise == 2 && c->backends[0].health.fall == 3);
	CHECK(c->backends[0].nservers == 1);
	CHECK(strcmp(c->backends[0].servers[0].name, "demo1") == 0);
	CHECK(addr_is(&c->backends[0].servers[0].addr, AF_INET, "127.0.0.1", 9000));
	CHECK(c->backends[0].servers[0].max_connections == 16);
	CHECK(c->backends[0].servers[0].weight == 1);
	cfg_free(c);
	cfg_free(NULL);
}

/* Writes TEXT to NAME in the temporary directory; returns the path in BUF. */
static const char *write_tmp(char *buf, size_t len, const char *name, const char *text)
{
	FILE *f;

	snprintf(buf, len, "%s/%s", tmpdir, name);
	f = fopen(buf, "w");
	if (f == NULL) {
		printf("  cannot write %s: %s\n", buf, strerror(errno));
		return buf;
	}
	fputs(text, f);
	fclose(f);
	return buf;
}

/* Minimal config: every default applies. */
static void test_defaults(void)
{
	char path[512], err[1024];
	struct cfg *c;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

	c = cfg_load(write_tmp(path, sizeof(path), "min.yaml",
			       "listeners: [{address: '*:80', backend: app}]\n"
			       "backends: [{name: app, servers: [{address: 'localhost:9000'},"
			       " {address: '[::1]:9001'}]}]\n"),
		     err, sizeof(err));
	if (c == NULL)
		printf("  min.yaml: %s\n", err);
	CHECK(c != NULL);
	if (c == NULL)
		return;
	CHECK(c->workers == (unsigned)(ncpu < 1 ? 1 : ncpu > 128 ? 128 : ncpu));
	CHECK(strcmp(c->listeners[0].name, "l1") == 0);
	CHECK(strcmp(c->backends[0].servers[0].name, "s1") == 0);
	CHECK(strcmp(c->backends[0].servers[1].name, "s2") == 0);
	CHECK(c->backends[0].servers[0].max_connections == 32);
	CHECK(c->backends[0].health.enabled == 0);
	CHECK(strcmp(c->backends[0].health.path, "/") == 0);
	CHECK(c->timeouts.client_header_ms == 10000 && c->limits.max_headers == 100);
	cfg_free(c);

	/* A short health interval shrinks the default timeout with it. */
	c = cfg_load(write_tmp(path, sizeof(path), "hc.yaml",
			       GOOD_LI GOOD_BE "    balance: leastconn\n"
			       "    health_check: {interval: 200ms}\n"),
		     err, sizeof(err));
	CHECK(c != NULL);
	if (c != NULL) {
		CHECK(c->backends[0].health.enabled == 1);
		CHECK(c->backends[0].health.interval_ms == 200);
		CHECK(c->backends[0].health.timeout_ms == 200);
		CHECK(c->backends[0].balance == CFG_BALANCE_LEASTCONN);
	}
	cfg_free(c);
}

/* The listener tls mapping: every key, defaults, and the positions the TLS
 * module uses for its own errors. */
static void test_tls(void)
{
	char path[512], err[1024];
	const struct cfg_tls *t;
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "tls.yaml",
			       GOOD_BE                                        /* 1-4 */
			       "listeners:\n"                                 /* 5 */
			       "  - name: https\n"                            /* 6 */
			       "    address: 127.0.0.1:8443\n"                /* 7 */
			       "    backend: app\n"                           /* 8 */
			       "    tls:\n"                                   /* 9 */
			       "      certificates:\n"                        /* 10 */
			       "        - cert: conf/tls/ecdsa.pem\n"         /* 11 */
			       "          key: conf/tls/ecdsa.key\n"          /* 12 */
			       "          passphrase: secret\n"               /* 13 */
			       "        -   key: /etc/tls/rsa.key\n"          /* 14 */
			       "            cert: /etc/tls/rsa.pem\n"         /* 15 */
			       "      min_version: TLSv1.3\n"                 /* 16 */
			       "      max_version: TLSv1.3\n"                 /* 17 */
			       "      ciphers: \"ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256\"\n"
			       "      ciphersuites: \"TLS_AES_128_GCM_SHA256\"\n"
			       "      curves: \"X25519:P-256\"\n"            /* 20 */
			       "      tickets: off\n"
			       "      ticket_keys: conf/tls/ticket.keys\n"
			       "      session_cache: 20000\n"
			       "      handshake_timeout: 5s\n"
			       "      client_auth: optional\n"                /* 25 */
			       "      client_ca: conf/tls/ca.pem\n"
			       "      verify_depth: 5\n"
			       "  - address: 127.0.0.1:8444\n"                /* 28 */
			       "    backend: app\n"
			       "    tls: {certificates: [{cert: a.pem}, {cert: b.pem, key: ''}]}\n"
			       "  - address: 127.0.0.1:8080\n"                /* 31 */
			       "    backend: app\n"),
		     err, sizeof(err));
	if (c == NULL)
		printf("  tls.yaml: %s\n", err);
	CHECK(c != NULL);
	if (c == NULL)
		goto out;
	CHECK(c->nlisteners == 3);
	t = &c->listeners[0].tls;
	CHECK(t->enabled == 1 && t->line == 10 && t->col == 7);
	CHECK(t->ncerts == 2);
	CHECK(strcmp(t->certs[0].cert, "conf/tls/ecdsa.pem") == 0);
	CHECK(strcmp(t->certs[0].key, "conf/tls/ecdsa.key") == 0);
	CHECK(strcmp(t->certs[0].passphrase, "secret") == 0);
	CHECK(t->certs[0].line == 11 && t->certs[0].col == 11);
	CHECK(strcmp(t->certs[1].cert, "/etc/tls/rsa.pem") == 0);
	CHECK(strcmp(t->certs[1].key, "/etc/tls/rsa.key") == 0);
	CHECK(t->certs[1].passphrase[0] == '\0');
	CHECK(t->certs[1].line == 14 && t->certs[1].col == 13);
	CHECK(t->min_version == 0x0304 && t->max_version == 0x0304);
	CHECK(strcmp(t->ciphers, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256") == 0);
	CHECK(strcmp(t->ciphersuites, "TLS_AES_128_GCM_SHA256") == 0);
	CHECK(strcmp(t->curves, "X25519:P-256") == 0);
	CHECK(t->tickets == 0);
	CHECK(strcmp(t->ticket_keys, "conf/tls/ticket.keys") == 0);
	CHECK(t->session_cache == 20000);
	CHECK(t->handshake_timeout_ms == 5000);
	CHECK(t->client_auth == CFG_CLIENT_AUTH_OPTIONAL);
	CHECK(strcmp(t->client_ca, "conf/tls/ca.pem") == 0);
	CHECK(t->verify_depth == 5);

	/* Flow style, and every default. */
	t = &c->listeners[1].tls;
	CHECK(t->enabled == 1 && t->line == 30 && t->col == 10);
	CHECK(t->ncerts == 2);
	CHECK(strcmp(t->certs[0].cert, "a.pem") == 0 && t->certs[0].key[0] == '\0');
	CHECK(t->certs[0].line == 30 && t->certs[0].col == 26);
	CHECK(strcmp(t->certs[1].cert, "b.pem") == 0 && t->certs[1].key[0] == '\0');
	CHECK(t->certs[1].line == 30 && t->certs[1].col == 41);
	CHECK(t->min_version == 0x0303 && t->max_version == 0x0304);
	CHECK(t->ciphers[0] == '\0' && t->ciphersuites[0] == '\0');
	CHECK(strcmp(t->curves, "X25519:P-256:P-384") == 0);
	CHECK(t->tickets == 1 && t->ticket_keys[0] == '\0');
	CHECK(t->session_cache == 0 && t->handshake_timeout_ms == 10000);
	CHECK(t->client_auth == CFG_CLIENT_AUTH_OFF && t->client_ca[0] == '\0');
	CHECK(t->verify_depth == 3);

	/* No tls mapping: plain TCP. */
	t = &c->listeners[2].tls;
	CHECK(t->enabled == 0 && t->certs == NULL && t->ncerts == 0);
	cfg_free(c);

	/* A tls mapping shared through an alias: positions are the alias's. */
	c = cfg_load(write_tmp(path, sizeof(path), "tls.yaml",
			       GOOD_BE
			       "listeners:\n"                                 /* 5 */
			       "  - address: 127.0.0.1:8443\n"
			       "    backend: app\n"
			       "    tls: &tls\n"                              /* 8 */
			       "      certificates:\n"
			       "        - cert: a.pem\n"                      /* 10 */
			       "      tickets: No\n"
			       "      client_auth: required\n"
			       "      client_ca: ca.pem\n"
			       "  - address: 127.0.0.1:8444\n"
			       "    backend: app\n"
			       "    tls: *tls\n"),                            /* 16 */
		     err, sizeof(err));
	if (c == NULL)
		printf("  tls.yaml (alias): %s\n", err);
	CHECK(c != NULL);
	if (c == NULL)
		goto out;
	CHECK(c->listeners[0].tls.line == 8 && c->listeners[0].tls.certs[0].line == 10);
	CHECK(c->listeners[0].tls.tickets == 0);
	CHECK(c->listeners[0].tls.client_auth == CFG_CLIENT_AUTH_REQUIRED);
	CHECK(c->listeners[1].tls.enabled == 1 && c->listeners[1].tls.ncerts == 1);
	CHECK(c->listeners[1].tls.line == 16 && c->listeners[1].tls.col == 10);
	CHECK(c->listeners[1].tls.certs[0].line == 16);
	CHECK(strcmp(c->listeners[1].tls.certs[0].cert, "a.pem") == 0);
	cfg_free(c);
out:
	unlink(path);
}

struct bad_case {
	const char *name;
	const char *yaml;
	int line;           /* expected ":LINE:" of the first error line */
	const char *key;    /* expected "KEY: " right after the position */
	const char *msg;    /* a substring of the message, or NULL */
};

static const struct bad_case bad_cases[] = {
	{ "unknown_key", GOOD_LI GOOD_BE "bogus: 1\n", 8, "bogus", "unknown key" },
	{ "unknown_nested_key", GOOD_LI GOOD_BE "        weight: 2\n        maxconn: 2\n", 9, "backends[0].servers[0].maxconn", "unknown key" },
	{ "wrong_type", "workers: [1, 2]\n" GOOD_LI GOOD_BE, 1, "workers",
	  "expected a scalar value, got a list" },
	{ "wrong_type_mapping", GOOD_LI GOOD_BE "timeouts: 10s\n", 8, "timeouts",
	  "expected a mapping" },
	{ "bad_duration", GOOD_LI GOOD_BE "timeouts:\n  client_header: 10\n  drain: 10 s\n", 10, "timeouts.drain", "bad duration" },
	{ "bad_size", GOOD_LI GOOD_BE "limits:\n  max_header_size: 32kb\n", 9,
	  "limits.max_header_size", "bad size" },
	{ "unknown_balance", GOOD_LI GOOD_BE "    balance: random\n", 8, "backends[0].balance",
	  "unknown balance \"random\"" },
	{ "bad_address", GOOD_LI GOOD_BE "      - address: 127.0.0.1:99999\n", 8,
	  "backends[0].servers[1].address", "bad address" },
	{ "unknown_backend", GOOD_BE "listeners:\n  - address: 127.0.0.1:8080\n    backend: api\n",
	  7, "listeners[0].backend", "unknown backend \"api\"" },
	{ "duplicate_backend", GOOD_LI GOOD_BE
	  "  - name: app\n    servers:\n      - address: 127.0.0.1:9001\n", 8,
	  "backends[1].name", "duplicate backend name \"app\" (first at line 5)" },
	{ "duplicate_server", GOOD_LI GOOD_BE "        name: a\n"
	  "      - address: 127.0.0.1:9001\n        name: a\n", 10,
	  "backends[0].servers[1].name", "duplicate server name" },
	{ "duplicate_default_server_name", GOOD_LI GOOD_BE "      - address: 127.0.0.1:9001\n"
	  "        name: s1\n", 9, "backends[0].servers[1].name", "duplicate server name \"s1\"" },
	{ "duplicate_listener", GOOD_BE GOOD_LI "    name: web\n"
	  "  - address: 127.0.0.1:8081\n    backend: app\n    name: web\n", 11,
	  "listeners[1].name", "duplicate listener name" },
	{ "max_connections_zero", GOOD_LI GOOD_BE "      - address: 127.0.0.1:9001\n"
	  "        max_connections: 0\n", 9, "backends[0].servers[1].max_connections",
	  "must be at least 1" },
	{ "workers_range", "workers: 129\n" GOOD_LI GOOD_BE, 1, "workers", "out of range" },
	{ "missing_listeners", GOOD_BE, 1, "listeners", "missing required key" },
	{ "empty_listeners", "listeners: []\n" GOOD_BE, 1, "listeners", "at least 1" },
	{ "missing_server_address", GOOD_LI GOOD_BE "      - name: b\n        weight: 2\n", 8,
	  "backends[0].servers[1].address", "missing required key" },
	{ "missing_servers", GOOD_LI "backends:\n  - name: app\n    balance: leastconn\n", 5,
	  "backends[0].servers", "missing required key" },
	{ "missing_backend_ref", GOOD_BE "listeners:\n  - name: x\n    address: '*:80'\n", 6,
	  "listeners[0].backend", "missing required key" },
	{ "duplicate_key", GOOD_LI GOOD_BE "workers: 2\nworkers: 3\n", 9, "workers",
	  "duplicate key (first at line 8)" },
	{ "syntax_error", GOOD_LI GOOD_BE "limits: {max_headers: 10\n", 9, "limits",
	  "syntax error" },
	{ "empty_file", "", 1, "listeners", "missing required key" },
	{ "health_timeout", GOOD_LI GOOD_BE "    health_check:\n      interval: 1s\n"
	  "      timeout: 2s\n", 10, "backends[0].health_check.timeout", "must not exceed" },
	{ "expect_status", GOOD_LI GOOD_BE "    health_check: {expect_status: 1000}\n", 8,
	  "backends[0].health_check.expect_status", "out of range" },
	{ "wildcard_server", GOOD_LI GOOD_BE "      - address: '*:9001'\n", 8,
	  "backends[0].servers[1].address", "wildcard" },
	{ "same_listener_address", GOOD_BE GOOD_LI "  - address: 127.0.0.1:8080\n"
	  "    backend: app\n", 8, "listeners[1].address", "same address" },
	{ "bad_name", GOOD_LI GOOD_BE "      - address: 127.0.0.1:1\n        name: 'a b'\n", 9,
	  "backends[0].servers[1].name", "bad name" },
	{ "empty_value", "workers:\n" GOOD_LI GOOD_BE, 1, "workers", "empty value" },
	{ "tab_indent", GOOD_LI GOOD_BE "\tworkers: 2\n", 8, "", "syntax error" },
	{ "two_documents", GOOD_LI GOOD_BE "---\nworkers: 2\n", 8, "(root)",
	  "only one YAML document" },
	{ "tls_empty", GOOD_BE TLS_LI, 8, "listeners[0].tls", "expected a mapping, got an empty value" },
	{ "tls_no_certificates", GOOD_BE TLS_LI "      min_version: TLSv1.2\n", 9,
	  "listeners[0].tls.certificates", "missing required key" },
	{ "tls_empty_certificates", GOOD_BE TLS_LI "      certificates: []\n", 9,
	  "listeners[0].tls.certificates", "needs at least 1 entry" },
	{ "tls_certificates_not_list", GOOD_BE TLS_LI "      certificates: a.pem\n", 9,
	  "listeners[0].tls.certificates", "expected a list" },
	{ "tls_missing_cert", GOOD_BE TLS_LI TLS_CERT "        - key: b.key\n          passphrase: x\n",
	  11, "listeners[0].tls.certificates[1].cert", "missing required key" },
	{ "tls_empty_cert", GOOD_BE TLS_LI "      certificates:\n        - cert: ''\n", 10,
	  "listeners[0].tls.certificates[0].cert", "empty value" },
	{ "tls_unknown_cert_key", GOOD_BE TLS_LI TLS_CERT "          chain: b.pem\n", 11,
	  "listeners[0].tls.certificates[0].chain", "unknown key" },
	{ "tls_unknown_key", GOOD_BE TLS_LI TLS_CERT "      protocols: h2\n", 11,
	  "listeners[0].tls.protocols", "unknown key" },
	{ "tls_bad_min_version", GOOD_BE TLS_LI TLS_CERT "      min_version: TLSv1.1\n", 11,
	  "listeners[0].tls.min_version", "unknown TLS version \"TLSv1.1\"" },
	{ "tls_bad_max_version", GOOD_BE TLS_LI TLS_CERT "      max_version: '1.3'\n", 11,
	  "listeners[0].tls.max_version", "expected TLSv1.2 or TLSv1.3" },
	{ "tls_min_above_max", GOOD_BE TLS_LI TLS_CERT "      max_version: TLSv1.2\n"
	  "      min_version: TLSv1.3\n", 12, "listeners[0].tls.min_version",
	  "min_version (TLSv1.3) is above max_version (TLSv1.2)" },
	{ "tls_bad_handshake_timeout", GOOD_BE TLS_LI TLS_CERT "      handshake_timeout: 1.5s\n", 11,
	  "listeners[0].tls.handshake_timeout", "bad duration \"1.5s\"" },
	{ "tls_zero_handshake_timeout", GOOD_BE TLS_LI TLS_CERT "      handshake_timeout: 0\n", 11,
	  "listeners[0].tls.handshake_timeout", "must be at least 1ms" },
	{ "tls_bad_client_auth", GOOD_BE TLS_LI TLS_CERT "      client_auth: yes\n", 11,
	  "listeners[0].tls.client_auth", "unknown client_auth \"yes\"" },
	{ "tls_client_auth_needs_ca", GOOD_BE TLS_LI TLS_CERT "      verify_depth: 2\n"
	  "      client_auth: required\n", 12, "listeners[0].tls.client_auth",
	  "client_auth required needs client_ca" },
	{ "tls_client_auth_empty_ca", GOOD_BE TLS_LI TLS_CERT "      client_auth: optional\n"
	  "      client_ca: ''\n", 11, "listeners[0].tls.client_auth",
	  "client_auth optional needs client_ca" },
	{ "tls_bad_tickets", GOOD_BE TLS_LI TLS_CERT "      tickets: enabled\n", 11,
	  "listeners[0].tls.tickets", "expected on or off" },
	{ "tls_session_cache_range", GOOD_BE TLS_LI TLS_CERT "      session_cache: 10000001\n", 11,
	  "listeners[0].tls.session_cache", "out of range (0..10000000)" },
	{ "tls_verify_depth_range", GOOD_BE TLS_LI TLS_CERT "      verify_depth: 17\n", 11,
	  "listeners[0].tls.verify_depth", "out of range (1..16)" },
	{ "tls_empty_curves", GOOD_BE TLS_LI TLS_CERT "      curves: ''\n", 11,
	  "listeners[0].tls.curves", "empty value" },
	{ "tls_second_listener", GOOD_BE TLS_LI TLS_CERT "  - address: 127.0.0.1:8444\n"
	  "    backend: app\n    tls:\n      certificates:\n        - cert: b.pem\n"
	  "          passphrase: [x]\n", 16,
	  "listeners[1].tls.certificates[0].passphrase", "expected a scalar value, got a list" },
};

static void test_bad_configs(void)
{
	char name[128], path[512], err[2048], want[640];
	size_t i;
	struct cfg *c;

	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *t = &bad_cases[i];
		int ok;

		snprintf(name, sizeof(name), "%s.yaml", t->name);
		write_tmp(path, sizeof(path), name, t->yaml);
		memset(err, 'x', sizeof(err));
		c = cfg_load(path, err, sizeof(err));
		CHECK(c == NULL);
		cfg_free(c);
		/* "FILE:LINE:COL: KEY: message" for the first line. */
		snprintf(want, sizeof(want), "%s:%d:", path, t->line);
		ok = strncmp(err, want, strlen(want)) == 0;
		if (ok && t->key[0] != '\0') {
			const char *p = err + strlen(want);
			p += strspn(p, "0123456789");
			snprintf(want, sizeof(want), ": %s: ", t->key);
			ok = strncmp(p, want, strlen(want)) == 0;
		}
		if (ok && t->msg != NULL)
			ok = strstr(err, t->msg) != NULL;
		if (!ok)
			printf("  %s: want line %d, key \"%s\", \"%s\"; got:\n%s\n", t->name,
			       t->line, t->key, t->msg ? t->msg : "", err);
		CHECK(ok);
		CHECK(strlen(err) < sizeof(err)); /* NUL-terminated */
		unlink(path);
	}
}

/* Errors after loading are all reported, sorted by position. */
static void test_many_errors(void)
{
	char path[512], err[4096];
	const char *l5, *l7, *l9;
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "many.yaml",
			       "backends:\n"                             /* 1 */
			       "  - name: app\n"                         /* 2 */
			       "    servers:\n"                          /* 3 */
			       "      - address: 127.0.0.1:9000\n"       /* 4 */
			       "        max_connections: 0\n"            /* 5 */
			       "listeners:\n"                            /* 6 */
			       "  - address: 127.0.0.1:80800\n"          /* 7 */
			       "    backend: app\n"                      /* 8 */
			       "workers: 0\n"),                          /* 9 */
		     err, sizeof(err));
	CHECK(c == NULL);
	l5 = strstr(err, ":5:26: backends[0].servers[0].max_connections: ");
	l7 = strstr(err, ":7:14: listeners[0].address: bad address");
	l9 = strstr(err, ":9:10: workers: 0 is out of range (1..128)");
	if (!(l5 && l7 && l9 && l5 < l7 && l7 < l9))
		printf("  many.yaml:\n%s\n", err);
	CHECK(l5 != NULL && l7 != NULL && l9 != NULL && l5 < l7 && l7 < l9);
	CHECK(strchr(err, '\n') != NULL && err[strlen(err) - 1] != '\n');
	unlink(path);

	/* A tiny buffer still gets a NUL-terminated prefix. */
	c = cfg_load(write_tmp(path, sizeof(path), "tiny.yaml", "workers: x\n"), err, 8);
	CHECK(c == NULL && strlen(err) == 7);
	c = cfg_load(path, err, 0);
	CHECK(c == NULL);
	unlink(path);
}

static void test_io_errors(void)
{
	char path[512], err[1024], want[600];
	struct cfg *c;

	snprintf(path, sizeof(path), "%s/does-not-exist.yaml", tmpdir);
	c = cfg_load(path, err, sizeof(err));
	snprintf(want, sizeof(want), "%s: cannot open: %s", path, strerror(ENOENT));
	CHECK(c == NULL && strcmp(err, want) == 0);

	c = cfg_load(tmpdir, err, sizeof(err));
	snprintf(want, sizeof(want), "%s: cannot read: %s", tmpdir, strerror(EISDIR));
	CHECK(c == NULL && strcmp(err, want) == 0);
}

int main(void)
{
	if (mkdtemp(tmpdir) == NULL) {
		printf("test_cfg: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	test_duration();
	test_size();
	test_addr();
	test_default_config();
	test_defaults();
	test_tls();
	test_bad_configs();
	test_many_errors();
	test_io_errors();
	{
		char p[600];
		snprintf(p, sizeof(p), "%s/min.yaml", tmpdir);
		unlink(p);
		snprintf(p, sizeof(p), "%s/hc.yaml", tmpdir);
		unlink(p);
	}
	rmdir(tmpdir);
	printf("test_cfg: %u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
