#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include "netaddr.h"

static const uint8_t v4mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

void netaddr_from_sockaddr(struct netaddr *a, const struct sockaddr *sa)
{
	memset(a, 0, sizeof(*a));
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		a->family = AF_INET;
		memcpy(a->ip, &s->sin_addr, 4);
		a->port = s->sin_port;
	} else if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		a->family = AF_INET6;
		memcpy(a->ip, &s->sin6_addr, 16);
		a->port = s->sin6_port;
	}
}

void netaddr_unmap(struct netaddr *out, const struct netaddr *in)
{
	*out = *in;
	if (in->family == AF_INET6 && memcmp(in->ip, v4mapped_prefix, 12) == 0) {
		memset(out->ip, 0, sizeof(out->ip));
		memcpy(out->ip, in->ip + 12, 4);
		out->family = AF_INET;
	}
}

/* Dotted quad by hand: inet_ntop costs more than the rest of a request's
 * identity headers together. */
static size_t ipv4_text(const uint8_t *ip, char *out)
{
	char *o = out;
	for (int i = 0; i < 4; i++) {
		unsigned v = ip[i];
		if (v >= 100)
			*o++ = (char)('0' + v / 100);
		if (v >= 10)
			*o++ = (char)('0' + v / 10 % 10);
		*o++ = (char)('0' + v % 10);
		*o++ = '.';
	}
	o[-1] = '\0';
	return (size_t)(o - 1 - out);
}

size_t netaddr_ip_text(const struct netaddr *a, char *out, size_t cap)
{
	if (a->family == AF_INET && cap >= 16)
		return ipv4_text(a->ip, out);
	if (a->family != AF_INET && a->family != AF_INET6) {
		snprintf(out, cap, "unknown");
		return strlen(out);
	}
	if (inet_ntop(a->family, a->ip, out, (socklen_t)cap) == NULL) {
		if (cap)
			out[0] = '\0';
		return 0;
	}
	return strlen(out);
}

size_t netaddr_peer_text(const struct netaddr *a, char *out, size_t cap)
{
	if (cap < NETADDR_PEER_MAX) {
		if (cap)
			out[0] = '\0';
		return 0;
	}
	char *o = out;
	if (a->family == AF_INET6)
		*o++ = '[';
	if (a->family == AF_INET || a->family == AF_INET6)
		o += netaddr_ip_text(a, o, NETADDR_IP_MAX);
	else
		*o++ = '?';
	if (a->family == AF_INET6)
		*o++ = ']';
	*o++ = ':';
	char digits[5];
	int n = 0;
	unsigned port = netaddr_port(a);
	do
		digits[n++] = (char)('0' + port % 10);
	while ((port /= 10) != 0);
	while (n)
		*o++ = digits[--n];
	*o = '\0';
	return (size_t)(o - out);
}

uint16_t netaddr_port(const struct netaddr *a)
{
	return ntohs(a->port);
}

int cidr_parse(const char *text, struct cidr *out, const char **why)
{
	char host[NETADDR_IP_MAX + 1];
	const char *slash = strchr(text, '/');
	size_t hl = slash ? (size_t)(slash - text) : strlen(text);
	memset(out, 0, sizeof(*out));
	if (hl == 0 || hl >= sizeof(host)) {
		*why = "expected an address or network like 10.0.0.0/8 or 2001:db8::/32";
		return -1;
	}
	memcpy(host, text, hl);
	host[hl] = '\0';
	unsigned maxbits;
	if (inet_pton(AF_INET, host, out->ip) == 1) {
		out->family = AF_INET;
		maxbits = 32;
	} else if (inet_pton(AF_INET6, host, out->ip) == 1) {
		out->family = AF_INET6;
		maxbits = 128;
	} else {
		*why = "not an IPv4 or IPv6 address";
		return -1;
	}
	unsigned bits = maxbits;
	if (slash) {
		const char *p = slash + 1;
		size_t digits = strspn(p, "0123456789");
		if (digits == 0 || p[digits] != '\0' || digits > 3 || (digits > 1 && p[0] == '0')) {
			*why = "prefix length must be a number";
			return -1;
		}
		unsigned long v = strtoul(p, NULL, 10);
		if (v > maxbits) {
			*why = out->family == AF_INET ? "prefix length must be 0-32" : "prefix length must be 0-128";
			return -1;
		}
		bits = (unsigned)v;
	}
	for (unsigned i = bits; i < maxbits; i++) {
		if (out->ip[i / 8] & (0x80u >> (i % 8))) {
			*why = "address has bits set beyond the prefix length";
			return -1;
		}
	}
	out->bits = (uint8_t)bits;
	return 0;
}

int cidr_match(const struct cidr *c, const struct netaddr *addr)
{
	struct netaddr a;
	netaddr_unmap(&a, addr);
	if (a.family != c->family)
		return 0;
	unsigned full = c->bits / 8, rest = c->bits % 8;
	if (memcmp(a.ip, c->ip, full) != 0)
		return 0;
	if (rest == 0)
		return 1;
	uint8_t mask = (uint8_t)(0xff00u >> rest);
	return (a.ip[full] & mask) == (c->ip[full] & mask);
}

int cidr_list_match(const struct cidr *list, unsigned n, const struct netaddr *a)
{
	for (unsigned i = 0; i < n; i++)
		if (cidr_match(&list[i], a))
			return 1;
	return 0;
}
