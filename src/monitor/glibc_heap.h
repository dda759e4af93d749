/* glibc_heap.h - unmaps that glibc's allocator makes internally (no PLT, so no munmap
 * hook sees them): free and realloc of mmapped chunks, heap trimming in free, realloc
 * and the memalign family, malloc_trim. Each function performs the real call. */
#ifndef MRC_GLIBC_HEAP_H
#define MRC_GLIBC_HEAP_H

#include <stddef.h>
#include <stdint.h>

/* Reads malloc's tunables from the environment; returns whether the next allocator is
 * glibc's (otherwise its unmaps go through the munmap hooks and these only forward). */
int mrc_glibc_heap_init(void);

/* Whether the functions below predict and publish the allocator's unmaps (off: they only
 * forward). Read by the exported free's fast path; set by whoever decides the hooks run
 * (the runtime), with mrc_glibc_heap_watch, which returns the previous setting. */
extern int mrc_glibc_heap_watching;
int mrc_glibc_heap_watch(int on);

/* For a mapping [start, end) the caller knows is readable: when glibc's allocator is the
 * program's and the mapping begins with mmapped chunks (glibc maps each large allocation
 * on its own, and the kernel may join neighbouring ones into one mapping), 1 and the
 * extent of the chunk holding addr in [*cs, *ce); else 0. Reads only chunk headers, at
 * most a few dozen; a header that only looks like one narrows the answer, never widens
 * it past the mapping. */
int mrc_glibc_mmapped_chunk(uint64_t start, uint64_t end, uint64_t addr, uint64_t *cs, uint64_t *ce);

void mrc_on_free(void *p);
void *mrc_on_realloc(void *p, size_t n);
void *mrc_on_reallocarray(void *p, size_t n, size_t size);
int mrc_on_posix_memalign(void **out, size_t align, size_t size);
void *mrc_on_aligned_alloc(size_t align, size_t size);
void *mrc_on_memalign(size_t align, size_t size);
void *mrc_on_valloc(size_t size);
void *mrc_on_pvalloc(size_t size);
int mrc_on_malloc_trim(size_t pad);
int mrc_on_mallopt(int param, int value);

#endif
