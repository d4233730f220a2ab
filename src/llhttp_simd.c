/*
 * Which build of llhttp's parser runs: the one compiled with SSE4.2 or the
 * baseline one.
 *
 * llhttp's generated parser has SSE4.2 fast paths (header values are skipped
 * 16 bytes per instruction) that exist only when it is compiled with
 * __SSE4_2__, and Debian's x86-64 baseline does not include SSE4.2. So on
 * x86-64 the Makefile compiles llhttp.c twice, with the entry point renamed in
 * each copy, and this file picks one once, before main, by what the CPU
 * supports. The indirect call costs a few instructions per llhttp_execute; the
 * fast path saves about 2,000 per 550-byte browser request (callgrind).
 *
 * Elsewhere (other architectures, the fuzz build) llhttp.c is compiled once
 * and this file is empty.
 */
#include <stddef.h>

#ifdef SLUICE_LLHTTP_SIMD
#include "llhttp.h"

typedef int execute_fn(llhttp__internal_t *s, const char *p, const char *endp);

execute_fn llhttp__internal_execute_generic;
execute_fn llhttp__internal_execute_sse42;

static execute_fn *execute_impl = llhttp__internal_execute_generic;

__attribute__((constructor)) static void llhttp_pick_impl(void)
{
	__builtin_cpu_init();
	if (__builtin_cpu_supports("sse4.2"))
		execute_impl = llhttp__internal_execute_sse42;
}

/* The name api.c's llhttp_execute calls. */
int llhttp__internal_execute(llhttp__internal_t *s, const char *p, const char *endp)
{
	return execute_impl(s, p, endp);
}
#else
/* ISO C wants a declaration in every translation unit. */
typedef int llhttp_simd_unused;
#endif
