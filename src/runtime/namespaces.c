/* namespaces.c - link-map namespaces besides the program's (dlmopen, LM_ID_NEWLM): each
 * loads its own libc, whose calls reach neither our exports (a preload is not loaded into
 * another namespace) nor the patched entry points of the program's libc, so its frees,
 * munmaps, discards and MAP_FIXED mappings over registered memory would go unseen. The
 * loader's list of namespaces (the r_debug_extended chain, glibc 2.35) is read where the
 * program's DT_DEBUG entry points; while it holds one namespace, a registration pays one
 * load. Otherwise every registration looks for a libc not seen before: each gets the
 * patch source's entry points (monitor/patch.h), and everything cached is invalidated
 * (what it unmapped before it was found went unseen). A libc that cannot be patched,
 * with no userfaultfd source to see its unmaps, stops caching, said once.
 * Invariants: the loader's lists are walked only under its lock (inside
 * dl_iterate_phdr's callback), and patched only outside it; one thread looks at a time. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>

#include "monitor/patch.h"
#include "monitor/uffd.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/log.h"

#define MAX_NS 16   /* glibc's DL_NNS */

/* Until the chain is found, or where the loader keeps no chain: a version without one. */
static const int no_chain = 1;
const int *mrc_rt_ns_version = &no_chain;
static struct r_debug_extended *chain;

void mrc_rt_namespaces_init(void)
{
    /* The program's dynamic section, through its program headers (no system call). */
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)getauxval(AT_PHDR);
    unsigned long n = getauxval(AT_PHNUM);
    uintptr_t bias = 0;
    const ElfW(Dyn) *dyn = NULL;
    for (unsigned long i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_PHDR)
            bias = (uintptr_t)ph - ph[i].p_vaddr;
    for (unsigned long i = 0; ph && i < n; i++)
        if (ph[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(bias + ph[i].p_vaddr);
    for (; dyn && dyn->d_tag != DT_NULL; dyn++)
        if (dyn->d_tag == DT_DEBUG && dyn->d_un.d_ptr) {
            chain = (struct r_debug_extended *)dyn->d_un.d_ptr;
            __atomic_store_n(&mrc_rt_ns_version, &chain->base.r_version, __ATOMIC_RELEASE);
            return;
        }
}

/* What the last look saw: each other namespace's first object, by address. */
static const void *seen[MAX_NS];
static unsigned nseen;
/* The libcs handled, by load address. */
static uintptr_t handled[MAX_NS];
static unsigned nhandled;
static pthread_mutex_t look_lock = PTHREAD_MUTEX_INITIALIZER;

struct look {
    const void *sig[MAX_NS];
    unsigned nsig;
    struct link_map *found[MAX_NS];   /* libcs not handled yet */
    unsigned nfound;
};

static unsigned signature(const void **sig)
{
    unsigned n = 0;
    for (struct r_debug_extended *r = __atomic_load_n(&chain->r_next, __ATOMIC_ACQUIRE); r && n < MAX_NS;
         r = __atomic_load_n(&r->r_next, __ATOMIC_ACQUIRE))
        sig[n++] = __atomic_load_n(&r->base.r_map, __ATOMIC_ACQUIRE);
    return n;
}

static int is_libc(const char *name)
{
    const char *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    return base && !strcmp(base, "libc.so.6");
}

static int was_handled(uintptr_t addr)
{
    for (unsigned i = 0; i < nhandled; i++)
        if (handled[i] == addr)
            return 1;
    return 0;
}

/* Called with the loader's lock held: its lists stand still. Stops at the first object. */
static int walk(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)info;
    (void)size;
    struct look *lk = arg;
    lk->nsig = signature(lk->sig);
    for (struct r_debug_extended *r = chain->r_next; r; r = r->r_next)
        for (struct link_map *l = r->base.r_map; l; l = l->l_next)
            if (is_libc(l->l_name) && !was_handled(l->l_addr) && lk->nfound < MAX_NS)
                lk->found[lk->nfound++] = l;
    return 1;
}

static void take(struct link_map *libc, int *lost_one)
{
    const char *missing = NULL;
    int rc = -EPERM;
    if (mrc_rt.cfg.monitor & MRC_MONITOR_PATCH) {
        /* A handle of its own (a link map the program did not open has no search list
         * of its own for dlsym), which also keeps the libc loaded while it is patched. */
        Lmid_t lmid;
        void *h = dlinfo(libc, RTLD_DI_LMID, &lmid) ? NULL : dlmopen(lmid, libc->l_name, RTLD_LAZY | RTLD_NOLOAD);
        if (h)
            rc = mrc_patch_install_more(h, &missing);
        else
            missing = "its handle";
    }
    if (nhandled < MAX_NS)
        handled[nhandled++] = libc->l_addr;
    if (!rc) {
        MRC_INFO("dlmopen: the libc of another namespace (%s at %#lx) is patched: its unmaps are seen",
                 libc->l_name, (unsigned long)libc->l_addr);
        return;
    }
    const char *why = missing ? missing : "MRCACHE_MONITOR has no patch";
    if (mrc_uffd_on()) {
        MRC_INFO("dlmopen: the libc of another namespace (%s) is not patched (%s): the userfaultfd source alone "
                 "sees its unmaps", libc->l_name, why);
        return;
    }
    char msg[512];
    snprintf(msg, sizeof(msg),
             "dlmopen: the libc of another namespace (%s) cannot be patched (%s), so its unmaps of registered "
             "memory would go unseen (MRCACHE_MONITOR=patch,preload,uffd sees them)",
             libc->l_name, why);
    mrc_rt_stop_caching(msg);
    *lost_one = 1;
}

void mrc_rt_namespaces_look(void)
{
    if (!mrc_rt.cfg.monitor)
        return;   /* nothing watches memory by the user's choice: nor this libc */
    const void *sig[MAX_NS];
    unsigned n = signature(sig);
    if (n == __atomic_load_n(&nseen, __ATOMIC_ACQUIRE) && !memcmp(sig, seen, n * sizeof(sig[0])))
        return;
    int saved = errno;
    pthread_mutex_lock(&look_lock);
    struct look lk = { .nsig = 0 };
    dl_iterate_phdr(walk, &lk);
    int lost = 0;
    for (unsigned i = 0; i < lk.nfound && !lost; i++)
        take(lk.found[i], &lost);
    /* Whatever a libc found now unmapped before it was found went unseen. */
    if (lk.nfound && !lost && __atomic_load_n(&mrc_rt.cache.active, __ATOMIC_RELAXED))
        mrc_cache_invalidate(&mrc_rt.cache, 0, UINT64_MAX, MRC_INVAL_SOURCE_LOST);
    memcpy(seen, lk.sig, lk.nsig * sizeof(lk.sig[0]));
    __atomic_store_n(&nseen, lk.nsig, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&look_lock);
    errno = saved;
}
