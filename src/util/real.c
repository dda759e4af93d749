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

int mrc_real_libc_ready;

/* The libc rows (interposed.h) by dlsym(RTLD_NEXT), its data by dlvsym. */
#define LIBC_LOOKUP_LIBC(sym, id) __atomic_store_n((void **)&mrc_real.id, dlsym(RTLD_NEXT, #sym), __ATOMIC_RELAXED);
#define LIBC_LOOKUP_VERBS(sym, id, version, need)
#define LIBC_LOOKUP_OWN(sym, id)
#define LIBC_LOOKUP_LDSO(sym, id)
#define LIBC_LOOKUP(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(LIBC_LOOKUP_, where, sym, id)
#define DATA_LOOKUP(sym, id, type, version) mrc_real.id = dlvsym(RTLD_NEXT, #sym, version);

void mrc_real_resolve_libc(void)
{
    if (__atomic_load_n(&mrc_real_libc_ready, __ATOMIC_ACQUIRE))
        return;
    MRC_FNS(LIBC_LOOKUP)
    MRC_DATA(DATA_LOOKUP)
    /* The next free is glibc's only if its code is libc's: one preloaded after us
     * (jemalloc, tcmalloc, mimalloc) or a sanitizer's has chunks that are not glibc's.
     * No dlopen here: this may run inside another allocator's initialisation, and dlopen
     * mallocs. */
    mrc_real_alloc_is_glibc = mrc_real_in_libc((const void *)mrc_real.free);
    __atomic_store_n(&mrc_real_libc_ready, 1, __ATOMIC_RELEASE);
}

static pthread_mutex_t verbs_lock = PTHREAD_MUTEX_INITIALIZER;
int mrc_real_verbs_ready;

/* The libibverbs rows (interposed.h); found stays 1 if every REQUIRED one is there. */
#define VERBS_NEED_REQUIRED(id) found &= mrc_real.id != NULL;
#define VERBS_NEED_OPTIONAL(id)
#define VERBS_LOOKUP_VERBS(sym, id, version, need)                                                          \
    *(void **)&mrc_real.id = verbs_sym(lib, #sym, version);                                                 \
    VERBS_NEED_##need(id)
#define VERBS_LOOKUP_LIBC(sym, id)
#define VERBS_LOOKUP_OWN(sym, id)
#define VERBS_LOOKUP_LDSO(sym, id)
#define VERBS_LOOKUP(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(VERBS_LOOKUP_, where, sym, id)

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
        int found = 1;
        MRC_FNS(VERBS_LOOKUP)
        /* The handle from dlopen is kept: libibverbs stays loaded while MRs exist. */
        if (found) {
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
