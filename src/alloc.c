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
