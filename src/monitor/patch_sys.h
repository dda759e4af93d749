/* patch_sys.h - what libc's patched wrappers did, done inline: the system call with
 * glibc's errno rule (-1 or MAP_FAILED and errno set), for the patched hooks' calls to
 * the kernel and for code that must not land in any hook. */
#ifndef MRC_PATCH_SYS_H
#define MRC_PATCH_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

int mrc_sys_munmap(void *a, size_t len);
void *mrc_sys_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off);
void *mrc_sys_mremap(void *old, size_t old_size, size_t new_size, int flags, ...);
int mrc_sys_madvise(void *a, size_t len, int advice);
void *mrc_sys_shmat(int id, const void *a, int flags);
int mrc_sys_shmdt(const void *a);
/* Also records the new break in __curbrk, which glibc's sbrk and malloc read. */
int mrc_sys_brk(void *a);
void *mrc_sys_sbrk(intptr_t incr);

#endif
