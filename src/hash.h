/* A small non-cryptographic 64-bit hash: FNV-1a over the bytes, then the
 * splitmix64 finaliser so that every input bit reaches every output bit
 * (FNV alone leaves the high bits weak for short keys). Stable across
 * builds and machines: values derived from it (persistence cookies) must
 * agree between sluice instances. */
#ifndef SLUICE_HASH_H
#define SLUICE_HASH_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t hash_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	x ^= x >> 31;
	return x;
}

static inline uint64_t hash_bytes(uint64_t seed, const void *p, size_t len)
{
	const unsigned char *c = p;
	uint64_t h = 0xcbf29ce484222325ull ^ seed;
	for (size_t i = 0; i < len; i++) {
		h ^= c[i];
		h *= 0x100000001b3ull;
	}
	return hash_mix64(h);
}

#endif
