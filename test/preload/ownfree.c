/* ownfree.c - a free of its own that counts its calls and hands them to glibc's: as a
 * library preloaded before libmrcache (LD_PRELOAD=libmrc_ownfree.so:libmrcache.so), and
 * compiled into test_route_ownfree (where the program's own free comes first). Either way
 * the process's PLT calls of free must keep reaching it. */
#include <stdlib.h>

extern void __libc_free(void *p);

__attribute__((visibility("default"))) unsigned long mrc_test_free_calls;

__attribute__((visibility("default"))) void free(void *p)
{
    __atomic_fetch_add(&mrc_test_free_calls, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}
