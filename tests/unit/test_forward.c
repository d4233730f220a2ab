/* Unit tests for forward.c: which identity headers a client may assert and
 * the exact lines sluice adds, for untrusted and trusted clients, IPv4 and
 * IPv6, and the netaddr/CIDR helpers they rely on. No sockets: a client
 * struct is filled by hand (plain connections only; TLS facts are covered
 * end to end). */
#include <string.h>
#include <stdio.h>
#include <arpa/inet.h>
#include "forward.h"
#include "netaddr.h"
#include "worker.h"

static int passed, failed;
#define CHECK(c) do { if (c) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c); } } while (0)
#define CHECK_STR(got, want) do { if (strcmp((got), (want)) == 0) passed++; else { failed++; \
	fprintf(stderr, "%s:%d: got\n%s\nwant\n%s\n", __FILE__, __LINE__, (got), (want)); } } while (0)

static struct worker worker;

static void add_header(struct msg *m, const char *name, const char *value)
{
	CHECK(msg_on_field(m, name, strlen(name)) == 0);
	if (*value)
		CHECK(msg_on_value(m, value, strlen(value)) == 0);
	CHECK(msg_finish_header(m) != NULL);
}

static void set_addr(struct netaddr *a, const char *ip, unsigned port)
{
	memset(a, 0, sizeof(*a));
	if (inet_pton(AF_INET, ip, a->ip) == 1)
		a->family = AF_INET;
	else if (inet_pton(AF_INET6, ip, a->ip) == 1)
		a->family = AF_INET6;
	a->port = htons((uint16_t)port);
}

static struct cfg_forward all_on(void)
{
	struct cfg_forward f = {
		.x_forwarded_for = CFG_XFF_APPEND, .x_forwarded_proto = 1, .x_forwarded_host = 1,
		.x_forwarded_port = 1, .forwarded = 1, .x_real_ip = 1, .wl_proxy_ssl = 1,
		.wl_proxy_client_ip = 1, .wl_proxy_client_port = 1, .wl_proxy_client_cert = 1,
	};
	return f;
}

/* Headers the backend gets: the client's (after Connection and the
 * filter) then sluice's, as one string. */
static void render(struct client *cl, struct msg *m, const struct cfg_forward *f, struct buf *out)
{
	out->len = 0;
	msg_apply_connection(m);
	forward_filter(cl, m, f);
	msg_write_headers(m, out);
	forward_write(cl, m, f, out);
	buf_append(out, "", 1);
}

static void spoof_headers(struct msg *m)
{
	add_header(m, "Host", "app.example:8443");
	add_header(m, "X-Forwarded-For", "6.6.6.6");
	add_header(m, "x-FORWARDED-proto", "https");
	add_header(m, "X-Forwarded-Host", "evil");
	add_header(m, "X-Forwarded-Port", "1");
	add_header(m, "X-Forwarded-Anything", "1");
	add_header(m, "Forwarded", "for=6.6.6.6");
	add_header(m, "X-Real-IP", "6.6.6.6");
	add_header(m, "Proxy-Client-IP", "6.6.6.6");
	add_header(m, "WL-Proxy-SSL", "true");
	add_header(m, "WL-Proxy-Client-IP", "6.6.6.6");
	add_header(m, "wl-proxy-anything", "1");
	add_header(m, "X-WebLogic-KeySize", "256");
	add_header(m, "X-Forwarded", "kept: not an identity header family");
	add_header(m, "Accept", "*/*");
}

static void test_untrusted_all_on(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = all_on();
	set_addr(&cl.src, "192.0.2.10", 40000);
	set_addr(&cl.dst, "198.51.100.1", 8443);
	msg_reset(&m, 64);
	spoof_headers(&m);
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data,
		  "Host: app.example:8443\r\n"
		  "X-Forwarded: kept: not an identity header family\r\n"
		  "Accept: */*\r\n"
		  "X-Forwarded-For: 192.0.2.10\r\n"
		  "Forwarded: for=192.0.2.10;proto=http;host=\"app.example:8443\"\r\n"
		  "X-Forwarded-Proto: http\r\n"
		  "X-Forwarded-Host: app.example:8443\r\n"
		  "X-Forwarded-Port: 8443\r\n"
		  "X-Real-IP: 192.0.2.10\r\n"
		  "WL-Proxy-SSL: false\r\n"
		  "WL-Proxy-Client-IP: 192.0.2.10\r\n"
		  "WL-Proxy-Client-Port: 40000\r\n");
	buf_free(&out);
	msg_free(&m);
}

static void test_untrusted_all_off(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = { .x_forwarded_for = CFG_XFF_OFF };
	set_addr(&cl.src, "192.0.2.10", 40000);
	msg_reset(&m, 64);
	spoof_headers(&m);
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: app.example:8443\r\nX-Forwarded: kept: not an identity header family\r\n"
			    "Accept: */*\r\n");
	buf_free(&out);
	msg_free(&m);
}

/* Identity headers spelled with '_' for '-' (or a mix), in any case: gone
 * from an untrusted client like the dashed ones; a trusted forwarder's are
 * passed as sent and never merged into sluice's chain. */
static const char *const underscore_spellings[] = {
	"X_Forwarded_For", "X-Forwarded_For", "x_forwarded-for", "X_Real_IP", "x_real_ip",
	"Proxy_Client_IP", "WL_Proxy_Client_IP", "WL_Proxy_SSL", "wl_proxy_client_cert",
	"X_Forwarded_Proto", "X_Forwarded_Host", "X_WebLogic_KeySize", "X_Forwarded_Anything",
};

static void test_underscore_spellings(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = { .x_forwarded_for = CFG_XFF_APPEND, .x_forwarded_proto = 1 };
	set_addr(&cl.src, "192.0.2.10", 40000);
	for (size_t i = 0; i < sizeof(underscore_spellings) / sizeof(underscore_spellings[0]); i++) {
		const char *name = underscore_spellings[i];
		int hop;
		CHECK(hdr_classify(name, strlen(name), &hop) == HDR_IDENTITY && hop == 0);
		cl.trusted_fwd = 0;
		msg_reset(&m, 64);
		add_header(&m, "Host", "a");
		add_header(&m, name, "6.6.6.6");
		add_header(&m, "X_Other_Thing", "kept");
		render(&cl, &m, &f, &out);
		CHECK_STR(out.data, "Host: a\r\nX_Other_Thing: kept\r\n"
				    "X-Forwarded-For: 192.0.2.10\r\nX-Forwarded-Proto: http\r\n");
		cl.trusted_fwd = 1;
		msg_reset(&m, 64);
		add_header(&m, "Host", "a");
		add_header(&m, name, "6.6.6.6");
		render(&cl, &m, &f, &out);
		char want[256];
		snprintf(want, sizeof(want), "Host: a\r\n%s: 6.6.6.6\r\n"
			 "X-Forwarded-For: 192.0.2.10\r\nX-Forwarded-Proto: http\r\n", name);
		CHECK_STR(out.data, want);
	}
	/* not identity names once read with '-': left alone */
	static const char *const others[] = { "X_Forwarded", "X_Forwarded_", "X_Real_IPs", "Forwarded_For",
					      "WL_Proxy", "Proxy_Client_IP_" };
	for (size_t i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		int hop;
		CHECK(hdr_classify(others[i], strlen(others[i]), &hop) == HDR_OTHER);
	}
	buf_free(&out);
	msg_free(&m);
}

/* A Connection header naming sluice's headers removes only the client's. */
static void test_connection_cannot_remove_ours(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = { .x_forwarded_for = CFG_XFF_APPEND, .x_forwarded_proto = 1, .wl_proxy_client_ip = 1 };
	set_addr(&cl.src, "192.0.2.10", 40000);
	msg_reset(&m, 64);
	add_header(&m, "Host", "a");
	add_header(&m, "Connection", "X-Forwarded-For, WL-Proxy-Client-IP, X-Forwarded-Proto");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: a\r\nX-Forwarded-For: 192.0.2.10\r\nX-Forwarded-Proto: http\r\n"
			    "WL-Proxy-Client-IP: 192.0.2.10\r\n");
	/* ... also for a trusted forwarder: its named copy is gone, ours stays. */
	cl.trusted_fwd = 1;
	msg_reset(&m, 64);
	add_header(&m, "Host", "a");
	add_header(&m, "Connection", "X-Forwarded-For");
	add_header(&m, "X-Forwarded-For", "203.0.113.7");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: a\r\nX-Forwarded-For: 192.0.2.10\r\nX-Forwarded-Proto: http\r\n"
			    "WL-Proxy-Client-IP: 192.0.2.10\r\n");
	buf_free(&out);
	msg_free(&m);
}

static void test_trusted_chain(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = all_on();
	f.wl_proxy_client_port = 0;
	cl.trusted_fwd = 1;
	set_addr(&cl.src, "10.0.0.5", 1234);
	set_addr(&cl.dst, "10.0.0.1", 80);
	msg_reset(&m, 64);
	add_header(&m, "Host", "h");
	add_header(&m, "X-Forwarded-For", "203.0.113.7");
	add_header(&m, "X-Forwarded-For", "198.51.100.9, 10.9.9.9");
	add_header(&m, "Forwarded", "for=203.0.113.7;proto=https");
	add_header(&m, "X-Forwarded-Proto", "https");
	add_header(&m, "WL-Proxy-Client-IP", "203.0.113.7");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data,
		  "Host: h\r\n"
		  "X-Forwarded-Proto: https\r\n"
		  "WL-Proxy-Client-IP: 203.0.113.7\r\n"
		  "X-Forwarded-For: 203.0.113.7, 198.51.100.9, 10.9.9.9, 10.0.0.5\r\n"
		  "Forwarded: for=203.0.113.7;proto=https, for=10.0.0.5;proto=http;host=h\r\n"
		  "X-Forwarded-Host: h\r\n"
		  "X-Forwarded-Port: 80\r\n"
		  "X-Real-IP: 10.0.0.5\r\n"
		  "WL-Proxy-SSL: false\r\n");
	/* replace: the chain is dropped even from a trusted forwarder */
	f = (struct cfg_forward){ .x_forwarded_for = CFG_XFF_REPLACE };
	msg_reset(&m, 64);
	add_header(&m, "Host", "h");
	add_header(&m, "X-Forwarded-For", "203.0.113.7");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: h\r\nX-Forwarded-For: 10.0.0.5\r\n");
	/* off: a trusted forwarder's header passes as sent */
	f = (struct cfg_forward){ .x_forwarded_for = CFG_XFF_OFF };
	msg_reset(&m, 64);
	add_header(&m, "Host", "h");
	add_header(&m, "X-Forwarded-For", "203.0.113.7");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: h\r\nX-Forwarded-For: 203.0.113.7\r\n");
	buf_free(&out);
	msg_free(&m);
}

static void test_ipv6_and_mapped(void)
{
	struct client cl = { 0 };
	struct msg m = { 0 };
	struct buf out = { 0 };
	struct cfg_forward f = { .x_forwarded_for = CFG_XFF_APPEND, .forwarded = 1, .wl_proxy_client_ip = 1 };
	set_addr(&cl.src, "2001:db8::17", 5000);
	msg_reset(&m, 64);
	add_header(&m, "Host", "[2001:db8::1]:8080");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: [2001:db8::1]:8080\r\n"
			    "X-Forwarded-For: 2001:db8::17\r\n"
			    "Forwarded: for=\"[2001:db8::17]\";proto=http;host=\"[2001:db8::1]:8080\"\r\n"
			    "WL-Proxy-Client-IP: 2001:db8::17\r\n");
	/* A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d. */
	set_addr(&cl.src, "::ffff:192.0.2.1", 5000);
	msg_reset(&m, 64);
	add_header(&m, "Host", "plain.example");
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: plain.example\r\nX-Forwarded-For: 192.0.2.1\r\n"
			    "Forwarded: for=192.0.2.1;proto=http;host=plain.example\r\n"
			    "WL-Proxy-Client-IP: 192.0.2.1\r\n");
	/* A Host value with a quote is escaped inside the quoted-string. */
	msg_reset(&m, 64);
	add_header(&m, "Host", "a\"b");
	f = (struct cfg_forward){ .forwarded = 1 };
	render(&cl, &m, &f, &out);
	CHECK_STR(out.data, "Host: a\"b\r\nForwarded: for=192.0.2.1;proto=http;host=\"a\\\"b\"\r\n");
	buf_free(&out);
	msg_free(&m);
}

static void test_cidr(void)
{
	struct cidr c;
	const char *why = NULL;
	struct netaddr a;
	CHECK(cidr_parse("10.0.0.0/8", &c, &why) == 0 && c.family == AF_INET && c.bits == 8);
	set_addr(&a, "10.255.1.2", 0);
	CHECK(cidr_match(&c, &a));
	set_addr(&a, "11.0.0.1", 0);
	CHECK(!cidr_match(&c, &a));
	set_addr(&a, "::ffff:10.1.2.3", 0);
	CHECK(cidr_match(&c, &a));
	CHECK(cidr_parse("127.0.0.1", &c, &why) == 0 && c.bits == 32);
	CHECK(cidr_parse("2001:db8::/32", &c, &why) == 0 && c.family == AF_INET6 && c.bits == 32);
	set_addr(&a, "2001:db8:ffff::1", 0);
	CHECK(cidr_match(&c, &a));
	set_addr(&a, "2001:db9::1", 0);
	CHECK(!cidr_match(&c, &a));
	CHECK(cidr_parse("192.168.1.0/23", &c, &why) == -1 && strstr(why, "beyond the prefix"));
	CHECK(cidr_parse("10.0.0.0/33", &c, &why) == -1);
	CHECK(cidr_parse("10.0.0.0/", &c, &why) == -1);
	CHECK(cidr_parse("example.com", &c, &why) == -1);
	CHECK(cidr_parse("/8", &c, &why) == -1);
	CHECK(cidr_parse("0.0.0.0/0", &c, &why) == 0);
	set_addr(&a, "203.0.113.9", 0);
	CHECK(cidr_match(&c, &a));
	CHECK(cidr_parse("11.0.0.0/7", &c, &why) == -1);
	CHECK(cidr_parse("10.0.0.0/7", &c, &why) == 0);
	CHECK(cidr_parse("10.0.0.0/08", &c, &why) == -1);
	CHECK(cidr_parse("10.0.0.0/8/8", &c, &why) == -1 && strstr(why, "number"));
	CHECK(cidr_parse("10.128.0.0/9", &c, &why) == 0);
	set_addr(&a, "10.200.0.1", 0);
	CHECK(cidr_match(&c, &a));
	set_addr(&a, "10.100.0.1", 0);
	CHECK(!cidr_match(&c, &a));
}

static void test_base64(void)
{
	struct buf b = { 0 };
	const char *in[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	const char *want[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy" };
	for (size_t i = 0; i < 7; i++) {
		b.len = 0;
		buf_append_base64(&b, in[i], strlen(in[i]));
		buf_append(&b, "", 1);
		CHECK_STR(b.data, want[i]);
	}
	buf_free(&b);
}

/* The hand-made text forms against libc's. */
static void test_number_and_address_text(void)
{
	static const uint64_t nums[] = { 0, 7, 10, 99, 100, 65535, 1000000007, UINT64_MAX };
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++) {
		char want[48];
		struct buf b = { 0 };
		buf_append_u64(&b, nums[i]);
		snprintf(want, sizeof(want), "%llu", (unsigned long long)nums[i]);
		CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
		b.len = 0;
		buf_append_hex(&b, nums[i]);
		snprintf(want, sizeof(want), "%llx", (unsigned long long)nums[i]);
		CHECK(b.len == strlen(want) && memcmp(b.data, want, b.len) == 0);
		buf_free(&b);
	}
	static const char *const v4[] = { "0.0.0.0", "1.2.3.4", "10.20.30.40", "100.200.255.9", "255.255.255.255" };
	for (size_t i = 0; i < sizeof(v4) / sizeof(v4[0]); i++) {
		struct netaddr a = { .family = AF_INET };
		char got[NETADDR_IP_MAX];
		inet_pton(AF_INET, v4[i], a.ip);
		size_t n = netaddr_ip_text(&a, got, sizeof(got));
		CHECK(n == strlen(v4[i]) && strcmp(got, v4[i]) == 0);
	}
}

static void test_peer_text(void)
{
	static const struct { int family; const char *ip; unsigned port; const char *want; } cases[] = {
		{ AF_INET, "127.0.0.1", 0, "127.0.0.1:0" },
		{ AF_INET, "10.20.30.40", 8080, "10.20.30.40:8080" },
		{ AF_INET, "255.255.255.255", 65535, "255.255.255.255:65535" },
		{ AF_INET6, "::1", 443, "[::1]:443" },
		{ AF_INET6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 65535,
		  "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535" },
		{ AF_INET6, "::ffff:10.0.0.1", 80, "[::ffff:10.0.0.1]:80" },
		{ 0, NULL, 9, "?:9" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct netaddr a = { .family = (uint8_t)cases[i].family, .port = htons((uint16_t)cases[i].port) };
		if (cases[i].ip)
			inet_pton(cases[i].family, cases[i].ip, a.ip);
		char got[NETADDR_PEER_MAX];
		size_t n = netaddr_peer_text(&a, got, sizeof(got));
		CHECK(n == strlen(cases[i].want) && strcmp(got, cases[i].want) == 0);
	}
	char small[8] = "x";
	CHECK(netaddr_peer_text(&(struct netaddr){ .family = AF_INET }, small, sizeof(small)) == 0 && small[0] == 0);
}

int main(void)
{
	W = &worker;
	test_number_and_address_text();
	test_untrusted_all_on();
	test_untrusted_all_off();
	test_connection_cannot_remove_ours();
	test_underscore_spellings();
	test_trusted_chain();
	test_ipv6_and_mapped();
	test_cidr();
	test_base64();
	test_peer_text();
	printf("test_forward: %d passed, %d failed\n", passed, failed);
	return failed != 0;
}
