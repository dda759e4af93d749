/* real.c - finds the next definition of every interposed function, in one place.
 * libc: dlsym(RTLD_NEXT). libibverbs: RTLD_NEXT when the program links it, else the
 * copy a plugin loaded with RTLD_LOCAL, found by soname with RTLD_NOLOAD and dlvsym
 * (RTLD_NEXT only searches the global scope). Versioned lookups name the versions
 * rdma-core defines, so we never bind the IBVERBS_1.0 compatibility entry points. */
#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <pthread.h>
#include <string.h>

#include "util/real.h"
#include "util/log.h"

struct mrc_real_fns mrc_real;

int mrc_real_alloc_is_glibc;

/* Where a function's code lives: the load address of its object. dladdr neither
 * allocates nor opens anything, so it is safe inside another allocator's start-up. */
static void *object_of(const void *fn)
{
    Dl_info info;
    return fn && dladdr(fn, &info) ? info.dli_fbase : NULL;
}

int mrc_real_in_libc(const void *fn)
{
    /* gnu_get_libc_version is glibc's alone: no allocator defines it, so the object
     * holding it is libc.so.6, whatever names other objects export (tcmalloc and
     * mimalloc export __libc_malloc and __libc_free of their own). */
    static void *libc_base;
    void *base = __atomic_load_n(&libc_base, __ATOMIC_RELAXED);
    if (!base) {
        base = object_of((const void *)gnu_get_libc_version);
        __atomic_store_n(&libc_base, base, __ATOMIC_RELAXED);
    }
    return base && object_of(fn) == base;
}

#define NEXT(field, name) (*(void **)&mrc_real.field = dlsym(RTLD_NEXT, name))

void mrc_real_resolve_libc(void)
{
    if (__atomic_load_n(&mrc_real.munmap, __ATOMIC_ACQUIRE))
        return;
    NEXT(mmap, "mmap");
    NEXT(mremap, "mremap");
    NEXT(madvise, "madvise");
    NEXT(shmat, "shmat");
    NEXT(shmdt, "shmdt");
    NEXT(brk, "brk");
    NEXT(sbrk, "sbrk");
    NEXT(mprotect, "mprotect");
    NEXT(process_madvise, "process_madvise");
    NEXT(remap_file_pages, "remap_file_pages");
    NEXT(ftruncate, "ftruncate");
    NEXT(ftruncate64, "ftruncate64");
    NEXT(truncate, "truncate");
    NEXT(truncate64, "truncate64");
    NEXT(fallocate, "fallocate");
    NEXT(fallocate64, "fallocate64");
    NEXT(open, "open");
    NEXT(open64, "open64");
    NEXT(openat, "openat");
    NEXT(openat64, "openat64");
    NEXT(open_2, "__open_2");
    NEXT(open64_2, "__open64_2");
    NEXT(openat_2, "__openat_2");
    NEXT(openat64_2, "__openat64_2");
    NEXT(creat, "creat");
    NEXT(creat64, "creat64");
    NEXT(fopen, "fopen");
    NEXT(fopen64, "fopen64");
    NEXT(freopen, "freopen");
    NEXT(freopen64, "freopen64");
    NEXT(shm_open, "shm_open");
    NEXT(free, "free");
    NEXT(realloc, "realloc");
    NEXT(reallocarray, "reallocarray");
    NEXT(posix_memalign, "posix_memalign");
    NEXT(aligned_alloc, "aligned_alloc");
    NEXT(memalign, "memalign");
    NEXT(valloc, "valloc");
    NEXT(pvalloc, "pvalloc");
    NEXT(malloc_trim, "malloc_trim");
    NEXT(mallopt, "mallopt");
    NEXT(fork, "fork");
    mrc_real.nptl_nthreads = dlvsym(RTLD_NEXT, "__nptl_nthreads", "GLIBC_PRIVATE");
    NEXT(close, "close");
    NEXT(close_range, "close_range");
    NEXT(closefrom, "closefrom");
    NEXT(dup2, "dup2");
    NEXT(dup3, "dup3");
    NEXT(ioctl, "ioctl");
    /* The next free is glibc's only if its code is libc's: one preloaded after us
     * (jemalloc, tcmalloc, mimalloc) or a sanitizer's has chunks that are not glibc's.
     * No dlopen here: this may run inside another allocator's initialisation, and dlopen
     * mallocs. */
    mrc_real_alloc_is_glibc = mrc_real_in_libc((const void *)mrc_real.free);
    void *munmap_fn = dlsym(RTLD_NEXT, "munmap");
    __atomic_store_n((void **)&mrc_real.munmap, munmap_fn, __ATOMIC_RELEASE);
}

static pthread_mutex_t verbs_lock = PTHREAD_MUTEX_INITIALIZER;
int mrc_real_verbs_ready;

static void *verbs_sym(void *lib, const char *name, const char *version)
{
    void *f = dlvsym(RTLD_NEXT, name, version);
    if (!f && lib)
        f = dlvsym(lib, name, version);
    return f;
}

int mrc_real_resolve_verbs(void)
{
    if (__atomic_load_n(&mrc_real_verbs_ready, __ATOMIC_ACQUIRE))
        return 0;
    int rc = 0;
    pthread_mutex_lock(&verbs_lock);
    if (!mrc_real_verbs_ready) {
        void *lib = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
        *(void **)&mrc_real.reg_mr_iova2 = verbs_sym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8");
        *(void **)&mrc_real.reg_dmabuf_mr = verbs_sym(lib, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
        *(void **)&mrc_real.dereg_mr = verbs_sym(lib, "ibv_dereg_mr", "IBVERBS_1.1");
        *(void **)&mrc_real.rereg_mr = verbs_sym(lib, "ibv_rereg_mr", "IBVERBS_1.1");
        *(void **)&mrc_real.dealloc_pd = verbs_sym(lib, "ibv_dealloc_pd", "IBVERBS_1.1");
        *(void **)&mrc_real.close_device = verbs_sym(lib, "ibv_close_device", "IBVERBS_1.1");
        *(void **)&mrc_real.is_fork_initialized = verbs_sym(lib, "ibv_is_fork_initialized", "IBVERBS_1.13");
        /* The handle from dlopen is kept: libibverbs stays loaded while MRs exist. */
        if (mrc_real.reg_mr_iova2 && mrc_real.dereg_mr && mrc_real.dealloc_pd && mrc_real.close_device) {
            __atomic_store_n(&mrc_real_verbs_ready, 1, __ATOMIC_RELEASE);
        } else {
            MRC_ERROR("libibverbs.so.1 is not loaded or lacks IBVERBS_1.8: registrations fail with ENOSYS");
            if (lib)
                dlclose(lib);
            rc = -ENOSYS;
        }
    }
    pthread_mutex_unlock(&verbs_lock);
    return rc;
}

static __thread int resolving;

int mrc_real_ensure_libc_slow(void)
{
    if (resolving)
        return 0;
    resolving = 1;
    mrc_real_resolve_libc();
    resolving = 0;
    return 1;
}
