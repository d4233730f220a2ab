#include <stdlib.h>
#include <sys/socket.h>
#include "cidrset.h"

/* IPv4 lives in ::ffff:0:0/96, so an IPv4-mapped IPv6 client matches IPv4
 * networks without a special case. */
static unsigned __int128 key_of(uint8_t family, const uint8_t *ip)
{
	unsigned __int128 k = 0;
	if (family == AF_INET) {
		k = (unsigned __int128)0xFFFF << 32;
		for (int i = 0; i < 4; i++)
			k |= (unsigned __int128)ip[i] << (8 * (3 - i));
		return k;
	}
	for (int i = 0; i < 16; i++)
		k = (k << 8) | ip[i];
	return k;
}

static int range_cmp(const void *a, const void *b)
{
	const struct cidrset_range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int cidrset_build(struct cidrset *s, const struct cidr *nets, size_t n)
{
	s->r = NULL;
	s->n = 0;
	if (n == 0)
		return 0;
	s->r = malloc(n * sizeof(*s->r));
	if (s->r == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		unsigned bits = nets[i].bits + (nets[i].family == AF_INET ? 96u : 0u);
		unsigned __int128 lo = key_of(nets[i].family, nets[i].ip);
		unsigned __int128 host = bits >= 128 ? 0 : (~(unsigned __int128)0) >> bits;
		s->r[i].lo = lo & ~host;
		s->r[i].hi = lo | host;
	}
	qsort(s->r, n, sizeof(*s->r), range_cmp);
	size_t w = 0;
	for (size_t i = 1; i < n; i++) {
		/* Overlapping or adjacent (hi + 1 == lo; no wrap: hi < lo there). */
		if (s->r[i].lo <= s->r[w].hi || s->r[i].lo - 1 == s->r[w].hi) {
			if (s->r[i].hi > s->r[w].hi)
				s->r[w].hi = s->r[i].hi;
		} else {
			s->r[++w] = s->r[i];
		}
	}
	s->n = w + 1;
	return 0;
}

int cidrset_contains(const struct cidrset *s, const struct netaddr *a)
{
	if (a->family != AF_INET && a->family != AF_INET6)
		return 0;
	unsigned __int128 k = key_of(a->family, a->ip);
	size_t lo = 0, hi = s->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (k < s->r[mid].lo)
			hi = mid;
		else if (k > s->r[mid].hi)
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

void cidrset_free(struct cidrset *s)
{
	free(s->r);
	s->r = NULL;
	s->n = 0;
}
