/* Unit test for the config loader (src/cfg*.c): the pure value parsers, the
 * default config, and the error report for bad configs (position and key
 * path). Run from the repository root. Bad configs are written to a fresh
 * temporary directory that is removed at the end. */
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
	CHECK(c->backends[0].servers[0].proxy_protocol == CFG_PP_OFF);
	CHECK(c->backends[0].forward.x_forwarded_for == CFG_XFF_APPEND);
	CHECK(c->listeners[0].nproxy_from == 0 && c->listeners[0].ntrusted_forwarders == 0);
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
	const struct cfg_forward *f;
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
	CHECK(c->backends[0].idle_max == UINT32_MAX);  /* bounded by max_connections only */
	CHECK(c->backends[0].health.enabled == 0);
	CHECK(strcmp(c->backends[0].health.path, "/") == 0);
	CHECK(c->timeouts.client_header_ms == 10000 && c->limits.max_headers == 100);
	/* No forward mapping: its defaults all the same. */
	f = &c->backends[0].forward;
	CHECK(f->x_forwarded_for == CFG_XFF_APPEND && f->x_forwarded_proto == 1);
	CHECK(f->x_forwarded_host == 0 && f->x_forwarded_port == 0 && f->forwarded == 0);
	CHECK(f->x_real_ip == 0 && f->wl_proxy_ssl == 0 && f->wl_proxy_client_ip == 0);
	CHECK(f->wl_proxy_client_port == 0 && f->wl_proxy_client_cert == 0);
	CHECK(c->backends[0].servers[0].proxy_protocol == CFG_PP_OFF);
	CHECK(c->backends[0].servers[0].proxy_tlvs == 0);
	CHECK(c->backends[0].servers[1].proxy_protocol == CFG_PP_OFF);
	CHECK(c->listeners[0].proxy_from == NULL && c->listeners[0].nproxy_from == 0);
	CHECK(c->listeners[0].trusted_forwarders == NULL &&
	      c->listeners[0].ntrusted_forwarders == 0);
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

/* error_log/access_log "syslog" and the facility: default daemon. */
static void test_syslog(void)
{
	char path[512], err[1024];
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "min.yaml", GOOD_LI GOOD_BE), err, sizeof(err));
	CHECK(c != NULL);
	if (c != NULL)
		CHECK(strcmp(c->syslog_facility, "daemon") == 0);
	cfg_free(c);
	c = cfg_load(write_tmp(path, sizeof(path), "min.yaml",
			       "error_log: syslog\naccess_log: syslog\nsyslog_facility: local3\n"
			       GOOD_LI GOOD_BE),
		     err, sizeof(err));
	if (c == NULL)
		printf("  syslog: %s\n", err);
	CHECK(c != NULL);
	if (c != NULL) {
		CHECK(strcmp(c->error_log, "syslog") == 0 && strcmp(c->access_log, "syslog") == 0);
		CHECK(strcmp(c->syslog_facility, "local3") == 0);
	}
	cfg_free(c);
}

/* headers_with_underscores: allow by default, each word, and a bad one. */
static void test_headers_with_underscores(void)
{
	static const char *const words[] = { "allow", "drop", "reject" };
	char path[512], err[1024], text[512];
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "min.yaml", GOOD_LI GOOD_BE), err, sizeof(err));
	CHECK(c != NULL && c->listeners[0].underscores == CFG_US_ALLOW);
	cfg_free(c);
	for (unsigned i = 0; i < 3; i++) {
		snprintf(text, sizeof(text), GOOD_LI "    headers_with_underscores: %s\n" GOOD_BE, words[i]);
		c = cfg_load(write_tmp(path, sizeof(path), "us.yaml", text), err, sizeof(err));
		CHECK(c != NULL && c->listeners[0].underscores == (enum cfg_underscores)i);
		cfg_free(c);
	}
	c = cfg_load(write_tmp(path, sizeof(path), "us.yaml",
			       GOOD_LI "    headers_with_underscores: off\n" GOOD_BE), err, sizeof(err));
	CHECK(c == NULL);
	CHECK(strstr(err, "us.yaml:4:31: listeners[0].headers_with_underscores: ") != NULL &&
	      strstr(err, "allow, drop or reject") != NULL);
	if (c == NULL && !strstr(err, "allow, drop or reject"))
		printf("  us.yaml: %s\n", err);
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

static int cidr_is(const struct cidr *n, int family, const char *ip, unsigned bits)
{
	uint8_t want[16] = { 0 };

	if (inet_pton(family, ip, want) != 1)
		return 0;
	return n->family == family && n->bits == bits &&
	       memcmp(n->ip, want, family == AF_INET ? 4 : 16) == 0;
}

/* backends[].forward, servers[].proxy_protocol/proxy_tlvs and the listeners'
 * CIDR lists: every key, every value, and defaults inside a present but
 * empty forward mapping. */
static void test_forward_proxy(void)
{
	char path[512], err[2048];
	const struct cfg_listener *l;
	const struct cfg_forward *f;
	const struct cfg_server *s;
	struct netaddr a;
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "fwd.yaml",
			       "listeners:\n"
			       "  - name: edge\n"
			       "    address: 127.0.0.1:8080\n"
			       "    backend: app\n"
			       "    accept_proxy_from: [10.0.0.0/8, \"2001:db8::/32\", 192.0.2.7]\n"
			       "    trusted_forwarders:\n"
			       "      - 172.16.0.0/12\n"
			       "      - \"::1\"\n"
			       "      - 2001:db8:1::/48\n"
			       "      - ::ffff:0:0/96\n"
			       "      - 0.0.0.0/0\n"
			       "  - address: 127.0.0.1:8081\n"
			       "    backend: plain\n"
			       "backends:\n"
			       "  - name: app\n"
			       "    forward:\n"
			       "      x_forwarded_for: replace\n"
			       "      x_forwarded_proto: false\n"
			       "      x_forwarded_host: true\n"
			       "      x_forwarded_port: on\n"
			       "      forwarded: yes\n"
			       "      x_real_ip: true\n"
			       "      wl_proxy_ssl: true\n"
			       "      wl_proxy_client_ip: true\n"
			       "      wl_proxy_client_port: true\n"
			       "      wl_proxy_client_cert: true\n"
			       "    servers:\n"
			       "      - address: 127.0.0.1:9000\n"
			       "        proxy_protocol: v2\n"
			       "        proxy_tlvs: [alpn, authority, unique_id, crc32c, ssl]\n"
			       "      - address: 127.0.0.1:9001\n"
			       "        proxy_protocol: v1\n"
			       "      - address: 127.0.0.1:9002\n"
			       "        proxy_protocol: off\n"
			       "      - address: 127.0.0.1:9003\n"
			       "        proxy_protocol: v2\n"
			       "        proxy_tlvs:\n"
			       "          - ssl\n"
			       "          - crc32c\n"
			       "      - address: 127.0.0.1:9004\n"
			       "        proxy_protocol: v2\n"
			       "        proxy_tlvs: []\n"
			       "  - name: plain\n"
			       "    forward: {x_forwarded_for: off, x_forwarded_proto: No}\n"
			       "    servers: [{address: 127.0.0.1:9100, proxy_tlvs: []}]\n"
			       "  - name: empty\n"
			       "    forward: {}\n"
			       "    servers: [{address: 127.0.0.1:9200}]\n"),
		     err, sizeof(err));
	if (c == NULL)
		printf("  fwd.yaml: %s\n", err);
	CHECK(c != NULL);
	if (c == NULL)
		goto out;

	l = &c->listeners[0];
	CHECK(l->nproxy_from == 3 && l->proxy_from != NULL);
	if (l->nproxy_from == 3) {
		CHECK(cidr_is(&l->proxy_from[0], AF_INET, "10.0.0.0", 8));
		CHECK(cidr_is(&l->proxy_from[1], AF_INET6, "2001:db8::", 32));
		CHECK(cidr_is(&l->proxy_from[2], AF_INET, "192.0.2.7", 32)); /* bare address */
	}
	CHECK(l->ntrusted_forwarders == 5 && l->trusted_forwarders != NULL);
	if (l->ntrusted_forwarders == 5) {
		CHECK(cidr_is(&l->trusted_forwarders[0], AF_INET, "172.16.0.0", 12));
		CHECK(cidr_is(&l->trusted_forwarders[1], AF_INET6, "::1", 128)); /* bare */
		CHECK(cidr_is(&l->trusted_forwarders[2], AF_INET6, "2001:db8:1::", 48));
		CHECK(cidr_is(&l->trusted_forwarders[3], AF_INET6, "::ffff:0:0", 96));
		CHECK(cidr_is(&l->trusted_forwarders[4], AF_INET, "0.0.0.0", 0));
	}
	/* The lists are usable as loaded. */
	memset(&a, 0, sizeof(a));
	a.family = AF_INET;
	a.ip[0] = 10, a.ip[1] = 9, a.ip[2] = 8, a.ip[3] = 7;
	CHECK(cidr_list_match(l->proxy_from, l->nproxy_from, &a));
	a.ip[0] = 11;
	CHECK(!cidr_list_match(l->proxy_from, l->nproxy_from, &a));
	l = &c->listeners[1];
	CHECK(l->proxy_from == NULL && l->nproxy_from == 0);
	CHECK(l->trusted_forwarders == NULL && l->ntrusted_forwarders == 0);

	f = &c->backends[0].forward;
	CHECK(f->x_forwarded_for == CFG_XFF_REPLACE && f->x_forwarded_proto == 0);
	CHECK(f->x_forwarded_host == 1 && f->x_forwarded_port == 1 && f->forwarded == 1);
	CHECK(f->x_real_ip == 1 && f->wl_proxy_ssl == 1 && f->wl_proxy_client_ip == 1);
	CHECK(f->wl_proxy_client_port == 1 && f->wl_proxy_client_cert == 1);
	f = &c->backends[1].forward;
	CHECK(f->x_forwarded_for == CFG_XFF_OFF && f->x_forwarded_proto == 0);
	CHECK(f->x_forwarded_host == 0 && f->forwarded == 0 && f->x_real_ip == 0);
	f = &c->backends[2].forward;
	CHECK(f->x_forwarded_for == CFG_XFF_APPEND && f->x_forwarded_proto == 1);
	CHECK(f->x_forwarded_host == 0 && f->x_forwarded_port == 0 && f->forwarded == 0);
	CHECK(f->x_real_ip == 0 && f->wl_proxy_ssl == 0 && f->wl_proxy_client_ip == 0);
	CHECK(f->wl_proxy_client_port == 0 && f->wl_proxy_client_cert == 0);

	CHECK(c->backends[0].nservers == 5);
	s = c->backends[0].servers;
	CHECK(s[0].proxy_protocol == CFG_PP_V2);
	CHECK(s[0].proxy_tlvs == (CFG_PP_TLV_ALPN | CFG_PP_TLV_AUTHORITY | CFG_PP_TLV_UNIQUE_ID |
				  CFG_PP_TLV_CRC32C | CFG_PP_TLV_SSL));
	CHECK(s[1].proxy_protocol == CFG_PP_V1 && s[1].proxy_tlvs == 0);
	CHECK(s[2].proxy_protocol == CFG_PP_OFF && s[2].proxy_tlvs == 0);
	CHECK(s[3].proxy_protocol == CFG_PP_V2);
	CHECK(s[3].proxy_tlvs == (CFG_PP_TLV_SSL | CFG_PP_TLV_CRC32C));
	CHECK(s[4].proxy_protocol == CFG_PP_V2 && s[4].proxy_tlvs == 0);
	/* [] is "none", valid without v2. */
	s = c->backends[1].servers;
	CHECK(s[0].proxy_protocol == CFG_PP_OFF && s[0].proxy_tlvs == 0);
	cfg_free(c);
out:
	unlink(path);
}

/* Every bad value among the new keys is reported, each at its own value. */
static void test_forward_proxy_errors(void)
{
	static const char *const want[] = {
		":7:33: backends[0].servers[0].proxy_tlvs[2]: unknown TLV \"tlv5\" (expected "
		"alpn, authority, unique_id, crc32c or ssl)",
		":7:39: backends[0].servers[0].proxy_tlvs[3]: duplicate TLV \"alpn\" (first at "
		"proxy_tlvs[0])",
		":8:25: backends[0].servers[0].proxy_protocol: unknown proxy_protocol \"v3\" "
		"(expected off, v1 or v2)",
		":11:27: backends[0].servers[1].proxy_tlvs[1]: empty value",
		":13:24: backends[0].forward.x_forwarded_for: unknown x_forwarded_for \"prepend\" "
		"(expected append, replace or off)",
		":14:18: backends[0].forward.x_real_ip: expected on or off",
		":18:24: listeners[0].accept_proxy_from: list at least one network or remove the key",
		":19:26: listeners[0].trusted_forwarders[0]: bad network \"10.1.0.0/8\": address "
		"has bits set beyond the prefix length",
		":19:38: listeners[0].trusted_forwarders[1]: bad network \"2001:db8::1/64\": "
		"address has bits set beyond the prefix length",
		":19:56: listeners[0].trusted_forwarders[2]: bad network \"192.0.2.1/33\": "
		"prefix length must be 0-32",
		":19:70: listeners[0].trusted_forwarders[3]: bad network \"fe80::1%eth0\": "
		"not an IPv4 or IPv6 address",
		":22:25: listeners[1].trusted_forwarders: list at least one network or remove the key",
	};
	char path[512], err[4096];
	const char *prev = NULL, *p;
	struct cfg *c;
	size_t i;
	int ok = 1;

	c = cfg_load(write_tmp(path, sizeof(path), "fwdbad.yaml",
			       "backends:\n"                                         /* 1 */
			       "  - name: app\n"
			       "    servers:\n"
			       "      - address: 127.0.0.1:9000\n"
			       "        name: a\n"                                   /* 5 */
			       "        weight: 1\n"
			       "        proxy_tlvs: [alpn, ssl, tlv5, alpn]\n"
			       "        proxy_protocol: v3\n"
			       "      - address: 127.0.0.1:9001\n"
			       "        proxy_protocol: v2\n"                        /* 10 */
			       "        proxy_tlvs: [ssl, '']\n"
			       "    forward:\n"
			       "      x_forwarded_for: prepend\n"
			       "      x_real_ip: 1\n"
			       "listeners:\n"                                       /* 15 */
			       "  - address: 127.0.0.1:8080\n"
			       "    backend: app\n"
			       "    accept_proxy_from: []\n"
			       "    trusted_forwarders: [10.1.0.0/8, '2001:db8::1/64', 192.0.2.1/33, fe80::1%eth0]\n"
			       "  - address: 127.0.0.1:8081\n"                      /* 20 */
			       "    backend: app\n"
			       "    trusted_forwarders: []\n"),
		     err, sizeof(err));
	CHECK(c == NULL);
	cfg_free(c);
	for (i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		p = strstr(err, want[i]);
		if (p == NULL || p < prev) {
			printf("  fwdbad.yaml: missing or out of order: %s\n", want[i]);
			ok = 0;
		}
		prev = p;
	}
	if (!ok)
		printf("  fwdbad.yaml:\n%s\n", err);
	CHECK(ok);
	/* Exactly those: no second message for the bad proxy_protocol. */
	for (i = 0, p = err; (p = strchr(p, '\n')) != NULL; p++)
		i++;
	CHECK(i + 1 == sizeof(want) / sizeof(want[0]));
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
	{ "unknown_syslog_facility", GOOD_LI GOOD_BE "syslog_facility: kern\n", 8, "syslog_facility",
	  "unknown facility \"kern\"" },
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

/* As bad_cases, with the column checked too: LINE, COL, KEY, MSG. */
struct bad_case_at {
	const char *name;
	const char *yaml;
	int line, col;
	const char *key;
	const char *msg;
};

static const struct bad_case_at bad_cases_at[] = {
	/* servers[].proxy_protocol and proxy_tlvs (after GOOD_LI GOOD_BE, line 8
	 * is in the first server). */
	{ "pp_unknown", GOOD_LI GOOD_BE "        proxy_protocol: v3\n",
	  8, 25, "backends[0].servers[0].proxy_protocol",
	  "unknown proxy_protocol \"v3\" (expected off, v1 or v2)" },
	{ "pp_empty", GOOD_LI GOOD_BE "        proxy_protocol: ''\n",
	  8, 25, "backends[0].servers[0].proxy_protocol", "empty value" },
	{ "pp_tlv_unknown", GOOD_LI GOOD_BE "        proxy_protocol: v2\n"
	  "        proxy_tlvs: [alpn, netns]\n",
	  9, 28, "backends[0].servers[0].proxy_tlvs[1]",
	  "unknown TLV \"netns\" (expected alpn, authority, unique_id, crc32c or ssl)" },
	{ "pp_tlv_duplicate", GOOD_LI GOOD_BE "        proxy_protocol: v2\n        proxy_tlvs:\n"
	  "          - ssl\n          - crc32c\n          - ssl\n",
	  12, 13, "backends[0].servers[0].proxy_tlvs[2]",
	  "duplicate TLV \"ssl\" (first at proxy_tlvs[0])" },
	{ "pp_tlv_case", GOOD_LI GOOD_BE "        proxy_protocol: v2\n        proxy_tlvs: [ALPN]\n",
	  9, 22, "backends[0].servers[0].proxy_tlvs[0]", "unknown TLV \"ALPN\"" },
	{ "pp_tlvs_with_v1", GOOD_LI GOOD_BE "        proxy_protocol: v1\n"
	  "        proxy_tlvs: [crc32c]\n",
	  9, 21, "backends[0].servers[0].proxy_tlvs", "proxy_tlvs needs proxy_protocol: v2" },
	{ "pp_tlvs_without_pp", GOOD_LI GOOD_BE "        proxy_tlvs:\n          - alpn\n",
	  9, 11, "backends[0].servers[0].proxy_tlvs", "proxy_tlvs needs proxy_protocol: v2" },
	{ "pp_tlvs_not_list", GOOD_LI GOOD_BE "        proxy_protocol: v2\n"
	  "        proxy_tlvs: alpn\n",
	  9, 21, "backends[0].servers[0].proxy_tlvs", "expected a list, got a scalar value" },
	/* backends[].forward */
	{ "forward_xff_unknown", GOOD_LI GOOD_BE "    forward:\n      x_forwarded_for: prepend\n",
	  9, 24, "backends[0].forward.x_forwarded_for",
	  "unknown x_forwarded_for \"prepend\" (expected append, replace or off)" },
	{ "forward_xff_bool", GOOD_LI GOOD_BE "    forward:\n      x_forwarded_for: true\n",
	  9, 24, "backends[0].forward.x_forwarded_for", "expected append, replace or off" },
	{ "forward_bad_bool", GOOD_LI GOOD_BE "    forward: {forwarded: enabled}\n",
	  8, 26, "backends[0].forward.forwarded",
	  "expected on or off (or true/false, yes/no), got \"enabled\"" },
	{ "forward_empty_bool", GOOD_LI GOOD_BE "    forward:\n      wl_proxy_ssl: ''\n",
	  9, 21, "backends[0].forward.wl_proxy_ssl", "empty value" },
	{ "forward_unknown_key", GOOD_LI GOOD_BE "    forward:\n      x_forwarded_server: on\n",
	  9, 7, "backends[0].forward.x_forwarded_server", "unknown key" },
	{ "forward_empty", GOOD_LI GOOD_BE "    forward:\n",
	  8, 13, "backends[0].forward", "expected a mapping, got an empty value" },
	{ "forward_not_mapping", GOOD_LI GOOD_BE "    forward: [x_forwarded_for]\n",
	  8, 14, "backends[0].forward", "expected a mapping, got a list" },
	/* listeners[].accept_proxy_from and trusted_forwarders (after GOOD_BE
	 * GOOD_LI, line 8 is in the listener). */
	{ "cidr_host_bits", GOOD_BE GOOD_LI "    accept_proxy_from: [10.1.0.0/8]\n",
	  8, 25, "listeners[0].accept_proxy_from[0]",
	  "bad network \"10.1.0.0/8\": address has bits set beyond the prefix length" },
	{ "cidr_host_bits_v6", GOOD_BE GOOD_LI "    trusted_forwarders:\n"
	  "      - 2001:db8::/32\n      - '2001:db8::1/64'\n",
	  10, 9, "listeners[0].trusted_forwarders[1]",
	  "bad network \"2001:db8::1/64\": address has bits set beyond the prefix length" },
	{ "cidr_not_address", GOOD_BE GOOD_LI "    trusted_forwarders: [localhost]\n",
	  8, 26, "listeners[0].trusted_forwarders[0]",
	  "bad network \"localhost\": not an IPv4 or IPv6 address" },
	{ "cidr_prefix_range", GOOD_BE GOOD_LI "    accept_proxy_from: ['10.0.0.1/33']\n",
	  8, 25, "listeners[0].accept_proxy_from[0]",
	  "bad network \"10.0.0.1/33\": prefix length must be 0-32" },
	{ "cidr_prefix_range_v6", GOOD_BE GOOD_LI "    accept_proxy_from: ['::/129']\n",
	  8, 25, "listeners[0].accept_proxy_from[0]", "prefix length must be 0-128" },
	{ "cidr_prefix_not_number", GOOD_BE GOOD_LI "    accept_proxy_from: [10.0.0.0/x]\n",
	  8, 25, "listeners[0].accept_proxy_from[0]", "prefix length must be a number" },
	{ "cidr_empty_list", GOOD_BE GOOD_LI "    accept_proxy_from: []\n",
	  8, 24, "listeners[0].accept_proxy_from", "list at least one network or remove the key" },
	{ "cidr_empty_list_trusted", GOOD_BE GOOD_LI "    trusted_forwarders: []\n",
	  8, 25, "listeners[0].trusted_forwarders", "list at least one network or remove the key" },
	{ "cidr_empty_entry", GOOD_BE GOOD_LI "    accept_proxy_from:\n      - 10.0.0.0/8\n"
	  "      - ''\n",
	  10, 9, "listeners[0].accept_proxy_from[1]", "empty value" },
	{ "cidr_not_list", GOOD_BE GOOD_LI "    trusted_forwarders: 10.0.0.0/8\n",
	  8, 25, "listeners[0].trusted_forwarders", "expected a list, got a scalar value" },
	{ "cidr_no_value", GOOD_BE GOOD_LI "    accept_proxy_from:\n",
	  8, 23, "listeners[0].accept_proxy_from", "expected a list, got an empty value" },
	{ "cidr_entry_mapping", GOOD_BE GOOD_LI "    accept_proxy_from: [10.0.0.0/8, {a: b}]\n",
	  8, 37, "listeners[0].accept_proxy_from[1]", "expected a scalar value, got a mapping" },
	{ "cidr_second_listener", GOOD_BE GOOD_LI "  - address: 127.0.0.1:8081\n    backend: app\n"
	  "    trusted_forwarders: ['192.0.2.0/24', '192.0.2.128/24']\n",
	  10, 42, "listeners[1].trusted_forwarders[1]", "bad network \"192.0.2.128/24\"" },
};

/* Loads T's config and checks the first error line: "FILE:LINE:COL: KEY: "
 * with COL only when T has one, and MSG anywhere. */
static void check_bad_case(const struct bad_case_at *t)
{
	char name[128], path[512], err[2048], want[640];
	struct cfg *c;
	int ok;

	snprintf(name, sizeof(name), "%s.yaml", t->name);
	write_tmp(path, sizeof(path), name, t->yaml);
	memset(err, 'x', sizeof(err));
	c = cfg_load(path, err, sizeof(err));
	CHECK(c == NULL);
	cfg_free(c);
	if (t->col != 0)
		snprintf(want, sizeof(want), "%s:%d:%d", path, t->line, t->col);
	else
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
		printf("  %s: want %d:%d, key \"%s\", \"%s\"; got:\n%s\n", t->name, t->line,
		       t->col, t->key, t->msg ? t->msg : "", err);
	CHECK(ok);
	CHECK(strlen(err) < sizeof(err)); /* NUL-terminated */
	unlink(path);
}

static void test_bad_configs(void)
{
	size_t i;

	for (i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *t = &bad_cases[i];
		const struct bad_case_at at = { t->name, t->yaml, t->line, 0, t->key, t->msg };
		check_bad_case(&at);
	}
	for (i = 0; i < sizeof(bad_cases_at) / sizeof(bad_cases_at[0]); i++)
		check_bad_case(&bad_cases_at[i]);
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

/* Found by fuzz_cfg: a value (or key) with a newline or another control
 * byte is quoted in its error escaped, so it cannot forge a line of its
 * own in `sluice -t` output or in the reload log, which logs the report
 * line by line. */
static void test_error_value_with_newline(void)
{
	char path[512], err[2048], want[700];
	struct cfg *c;

	c = cfg_load(write_tmp(path, sizeof(path), "nl.yaml",
			       "backends:\n"
			       "  - name: app\n"
			       "    servers:\n"
			       "      - address: 127.0.0.1:9000\n"
			       "listeners:\n"
			       "  - address: 127.0.0.1:8080\n"
			       "    backend: \"app\\nFAKE:1:1: forged\\r\\t\\x01 line\"\n"),
		     err, sizeof(err));
	CHECK(c == NULL);
	snprintf(want, sizeof(want),
		 "%s:7:14: listeners[0].backend: unknown backend \"app\\nFAKE:1:1: forged\\r\\x09\\x01 line\"", path);
	if (strncmp(err, want, strlen(want)) != 0 || strchr(err, '\n') != NULL)
		printf("  nl.yaml: want \"%s...\", one line; got:\n%s\n", want, err);
	CHECK(strncmp(err, want, strlen(want)) == 0);
	CHECK(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL);
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
	test_syslog();
	test_headers_with_underscores();
	test_tls();
	test_forward_proxy();
	test_forward_proxy_errors();
	test_bad_configs();
	test_many_errors();
	test_io_errors();
	test_error_value_with_newline();
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
