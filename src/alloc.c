#include <stdio.h>
#ifdef HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif
#include "alloc.h"

void alloc_release_free_pages(void)
{
#ifdef HAVE_JEMALLOC
	/* "arena.<MALLCTL_ARENAS_ALL>.purge": every arena's unused dirty pages */
	char name[64];
	snprintf(name, sizeof(name), "arena.%u.purge", (unsigned)MALLCTL_ARENAS_ALL);
	mallctl(name, NULL, NULL, NULL, 0);
#endif
}

#ifdef SLUICE_WRAP_FREE
/* Linked with -Wl,--wrap=free (the AWS-LC build: its libraries are static,
 * so their calls to free come here too). AWS-LC's ERR_clear_error, which
 * every SSL_read and SSL_write runs, frees all 16 of its error slots and
 * its scratch pointer, nearly always NULL: 17 free(NULL) per call, and
 * jemalloc's free takes its slow path for NULL (about 45 instructions
 * each, ~9% of a TLS keepalive request). */
void __real_free(void *p);
void __wrap_free(void *p);
void __wrap_free(void *p)
{
	if (p != NULL)
		__real_free(p);
}
#endif
