/* The heap allocator, where sluice needs more of it than malloc/free. */
#ifndef SLUICE_ALLOC_H
#define SLUICE_ALLOC_H

/* Hand the pages of freed memory back to the OS now. jemalloc keeps freed
 * pages for reuse and purges them only as later allocations go by, so a
 * process that has just freed a lot and then goes quiet would hold them for
 * good: a master after compiling pattern databases (which every worker then
 * inherits), a worker whose idle clients gave their buffers back. A no-op
 * with the libc allocator (`make asan`). */
void alloc_release_free_pages(void);

#endif
