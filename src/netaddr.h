/* Client and server addresses in a compact form, their text forms, and
 * CIDR networks (trust lists). Pure: no I/O. */
#ifndef SLUICE_NETADDR_H
#define SLUICE_NETADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* An IP endpoint. FAMILY is AF_INET (IP in the first 4 bytes), AF_INET6, or
 * 0 when unknown (a PROXY header that said LOCAL/UNKNOWN on a socket whose
 * peer could not be read). IP and PORT are in network byte order. */
struct netaddr {
	uint8_t family;
	uint8_t ip[16];
	uint16_t port;
};

/* A network: the first BITS bits of IP. IPv4 networks have FAMILY AF_INET. */
struct cidr {
	uint8_t family;
	uint8_t bits;
	uint8_t ip[16];
};

#define NETADDR_IP_MAX 46      /* INET6_ADDRSTRLEN */
#define NETADDR_TEXT_MAX 56    /* "[v6]:port" */

void netaddr_from_sockaddr(struct netaddr *a, const struct sockaddr *sa);
/* ::ffff:a.b.c.d becomes a.b.c.d; anything else is copied. */
void netaddr_unmap(struct netaddr *out, const struct netaddr *in);
/* Bare IP literal ("192.0.2.1", "2001:db8::1"), or "unknown". Returns its length. */
size_t netaddr_ip_text(const struct netaddr *a, char *out, size_t cap);
/* "ip:port", "[ip6]:port", or "?:port" for no address, as logs name a
 * peer; formatted by hand (once per connection, so snprintf showed).
 * CAP must be at least NETADDR_PEER_MAX, or OUT is left empty. */
#define NETADDR_PEER_MAX (NETADDR_IP_MAX + 8)
size_t netaddr_peer_text(const struct netaddr *a, char *out, size_t cap);
uint16_t netaddr_port(const struct netaddr *a);

/* "10.0.0.0/8", "2001:db8::/32", or a bare address (a host network).
 * Host bits beyond the prefix must be zero: "10.1.0.0/8" is almost always a
 * typo for something else, so it is refused rather than silently masked.
 * Returns 0, or -1 with a reason in *WHY. */
int cidr_parse(const char *text, struct cidr *out, const char **why);
/* IPv4-mapped IPv6 addresses match IPv4 networks. */
int cidr_match(const struct cidr *c, const struct netaddr *a);
int cidr_list_match(const struct cidr *list, unsigned n, const struct netaddr *a);

#endif
