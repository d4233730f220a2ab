/* Annotations for valgrind's memcheck (make valgrind); no-ops outside it and
 * where valgrind's headers are absent. A region reserved far beyond what is
 * used (stats: 1.9 GB of untouched shared pages) is marked no-access and its
 * pieces defined as they are handed out: the leak check then skips the rest
 * (scanning it cost every process ~7 s at exit), and a stray access into an
 * unused piece is reported instead of passing silently. */
#ifndef SLUICE_VGMEM_H
#define SLUICE_VGMEM_H

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define vg_mem_noaccess(p, n) ((void)VALGRIND_MAKE_MEM_NOACCESS((p), (n)))
#define vg_mem_defined(p, n) ((void)VALGRIND_MAKE_MEM_DEFINED((p), (n)))
#endif
#endif

#ifndef vg_mem_noaccess
#define vg_mem_noaccess(p, n) ((void)(p), (void)(n))
#define vg_mem_defined(p, n) ((void)(p), (void)(n))
#endif

#endif
