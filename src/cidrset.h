/* A set of IP networks for fast membership tests (blocklists with
 * thousands of entries): every network becomes a range of 128-bit
 * addresses (IPv4 as ::ffff:a.b.c.d), and the ranges are sorted and merged
 * so a lookup is one binary search. Pure. */
#ifndef SLUICE_CIDRSET_H
#define SLUICE_CIDRSET_H

#include <stddef.h>
#include "netaddr.h"

struct cidrset_range {
	unsigned __int128 lo, hi;  /* inclusive */
};

struct cidrset {
	struct cidrset_range *r;
	size_t n;
};

/* Build from N networks (sorting and merging); returns 0, or -1 when out of
 * memory. The set owns its array; cidrset_free releases it. */
int cidrset_build(struct cidrset *s, const struct cidr *nets, size_t n);
int cidrset_contains(const struct cidrset *s, const struct netaddr *a);
void cidrset_free(struct cidrset *s);

#endif
