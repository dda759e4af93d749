/* nslib.c - a library that test_dlmopen loads into a namespace of its own
 * (dlmopen(LM_ID_NEWLM)): every call here goes to that namespace's own copy of libc,
 * which no preload is loaded beside. */
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>

#define NS_API __attribute__((visibility("default")))
NS_API int ns_munmap(void *p, size_t len);
NS_API int ns_madvise(void *p, size_t len, int advice);
NS_API void *ns_mmap_fixed(void *p, size_t len);
NS_API void *ns_mremap_move(void *p, size_t len, void *to);
NS_API void *ns_malloc(size_t n);
NS_API void ns_free(void *p);
NS_API int ns_failed_munmap_errno(void);

int ns_munmap(void *p, size_t len)
{
    return munmap(p, len);
}

int ns_madvise(void *p, size_t len, int advice)
{
    return madvise(p, len, advice);
}

/* Fresh private anonymous pages over [p, p+len). */
void *ns_mmap_fixed(void *p, size_t len)
{
    return mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
}

void *ns_mremap_move(void *p, size_t len, void *to)
{
    return mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to);
}

void *ns_malloc(size_t n)
{
    return malloc(n);
}

void ns_free(void *p)
{
    free(p);
}

/* The namespace's errno after a munmap that must fail (EINVAL). */
int ns_failed_munmap_errno(void)
{
    errno = 0;
    return munmap((void *)1, 4096) == -1 ? errno : 0;
}
