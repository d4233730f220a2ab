/* Keyed content hash (vhash.h says what for). */
#include <string.h>
#include <sys/random.h>
#include "vhash.h"

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return h;
}

static uint64_t hash_key;

uint64_t vhash(const char *v, size_t n, unsigned domain)
{
	if (!hash_key) {
		uint64_t k = 0;
		if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k))
			k = (uint64_t)(uintptr_t)&k ^ (uint64_t)n * 0x9E3779B97F4A7C15ull;
		hash_key = k | 1;
	}
	uint64_t h = hash_key ^ mix((uint64_t)n << 32 ^ (uint64_t)domain);
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, v + i, 8);
		h = mix(h ^ w) * 0xC2B2AE3D27D4EB4Full;
	}
	uint64_t tail = 0;
	if (n > i)
		memcpy(&tail, v + i, n - i);
	return mix(h ^ tail ^ 0x165667B19E3779F9ull);
}
