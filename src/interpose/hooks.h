/* hooks.h - what the interposition layer's files share: second, hidden names for the
 * exports the unmap path relies on (their addresses are our own code, whatever the names
 * resolve to), for the constructor to hand to the runtime: which PLT slots hold our free,
 * which entry points the patch source must watch. */
#ifndef MRC_HOOKS_H
#define MRC_HOOKS_H

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

void mrc_hooks_free(void *p);
int mrc_own_munmap(void *addr, size_t len);
void *mrc_own_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *mrc_own_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *mrc_own_mremap(void *old, size_t old_size, size_t new_size, int flags, ...);
int mrc_own_madvise(void *addr, size_t len, int advice);
void *mrc_own_shmat(int id, const void *addr, int flags);
int mrc_own_shmdt(const void *addr);
int mrc_own_brk(void *addr);
void *mrc_own_sbrk(intptr_t incr);
void *mrc_own_realloc(void *p, size_t n);
void *mrc_own_reallocarray(void *p, size_t n, size_t size);
int mrc_own_posix_memalign(void **out, size_t align, size_t size);
void *mrc_own_aligned_alloc(size_t align, size_t size);
void *mrc_own_memalign(size_t align, size_t size);
void *mrc_own_valloc(size_t size);
void *mrc_own_pvalloc(size_t size);
int mrc_own_malloc_trim(size_t pad);

#endif
