/* monitor.h - memory events to cache invalidations: what range each unmapping call
 * takes away, computed before the call and invalidated around it. Each function
 * performs the real call and returns its result, with errno as the real call left it. */
#ifndef MRC_MONITOR_H
#define MRC_MONITOR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

int mrc_on_munmap(void *addr, size_t len);
void *mrc_on_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *mrc_on_mremap(void *old, size_t old_size, size_t new_size, int flags, void *new_addr);
int mrc_on_madvise(void *addr, size_t len, int advice);
void *mrc_on_shmat(int id, const void *addr, int flags);
int mrc_on_shmdt(const void *addr);
int mrc_on_brk(void *addr);
void *mrc_on_sbrk(intptr_t incr);

#endif
