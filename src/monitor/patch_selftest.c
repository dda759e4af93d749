/* patch_selftest.c - the patch source's start-up self-test: each kind of unmap, made once
 * on private memory through libc's own entry points (as glibc's internal calls reach
 * them), must arrive at its patched hook. What arrived decides whether the allocator
 * hooks may idle and whether the userfaultfd source must join (the runtime's choice);
 * what did not is said once.
 * Invariants: runs in the constructor, on memory of its own (mapped directly, so no
 * registration can cover it); nothing it triggers reaches the sink armed. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "monitor/glibc_heap.h"
#include "monitor/patch.h"
#include "monitor/patch_priv.h"
#include "monitor/unmap.h"
#include "util/log.h"
#include "util/sys.h"
#include "util/thread.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

unsigned mrc_patch_selftest(int preload)
{
    if (!mrc_patch_count) {
        if (preload)
            mrc_log_note("unmap coverage incomplete: libc not patched; unmaps glibc and ld.so make themselves "
                         "(thread stacks, dlclose%s) are unseen",
                         __atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED) ? "" : ", free, heap trimming");
        return 0;
    }
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc)
        return 0;
    int (*l_munmap)(void *, size_t) = (int (*)(void *, size_t))dlsym(libc, "munmap");
    int (*l_madvise)(void *, size_t, int) = (int (*)(void *, size_t, int))dlsym(libc, "madvise");
    void *(*l_mmap)(void *, size_t, int, int, int, off_t) =
        (void *(*)(void *, size_t, int, int, int, off_t))dlsym(libc, "mmap");
    void *(*l_mremap)(void *, size_t, size_t, int, ...) = (void *(*)(void *, size_t, size_t, int, ...))dlsym(libc, "mremap");
    void *(*l_sbrk)(intptr_t) = (void *(*)(intptr_t))dlsym(libc, "sbrk");
    unsigned ok = 0;
    long pg = (long)mrc_monitor.page_size;
    size_t len = 4 * (size_t)pg;
    char *p = mrc_sys_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    p[0] = 1;
    mrc_patch_probe_arm(p, len);
    l_madvise(p, (size_t)pg, MADV_DONTNEED);
    ok |= mrc_patch_probe_disarm() & (1u << MRC_FN_MADVISE);
    mrc_patch_probe_arm(p, len);
    l_mmap(p, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ok |= mrc_patch_probe_disarm() & (1u << MRC_FN_MMAP);
    mrc_patch_probe_arm(p, len);
    l_mremap(p + 2 * pg, 2 * (size_t)pg, (size_t)pg, 0);      /* shrink in place */
    ok |= mrc_patch_probe_disarm() & (1u << MRC_FN_MREMAP);
    mrc_patch_probe_arm(p, len);
    l_munmap(p, len);
    ok |= mrc_patch_probe_disarm() & (1u << MRC_FN_MUNMAP);
    /* glibc's free of an mmapped chunk: munmap from inside libc. 40 MiB is above the
     * largest dynamic mmap threshold, so glibc's threshold does not move. */
    size_t big = 40u << 20;
    char *m = __libc_malloc(big);
    if (m) {
        mrc_patch_probe_arm(m - 4096, big + 8192);
        __libc_free(m);
        if (mrc_patch_probe_disarm() & (1u << MRC_FN_MUNMAP))
            ok |= 1u << MRC_FN_COUNT;     /* marker: the internal path arrived */
    }
    if ((mrc_patch_mask & (1u << MRC_FN_BRK)) && l_sbrk && mrc_thread_single()) {
        /* Another thread's malloc could move the break between our two steps. */
        char *cur = l_sbrk(0);
        if (cur != (void *)-1 && l_sbrk(pg) == cur) {
            mrc_patch_probe_arm(cur, (size_t)pg + 1);
            l_sbrk(-pg);
            ok |= mrc_patch_probe_disarm() & (1u << MRC_FN_BRK);
        }
    }
    char line[512];
    size_t n = 0;
    unsigned missing = 0;
    for (int fn = 0; fn < MRC_FN_COUNT; fn++) {
        const char *how;
        if (mrc_patch_mask & (1u << fn))
            how = (fn == MRC_FN_SHMAT || fn == MRC_FN_SHMDT || fn == MRC_FN_LDSO_MUNMAP ||
                   (fn == MRC_FN_BRK && !(ok & (1u << fn))))
                      ? "patched"
                      : (ok & (1u << fn)) ? "patched, tested" : "patched, test FAILED";
        else if (preload && fn != MRC_FN_LDSO_MUNMAP)
            how = "preload only";
        else
            how = "unseen";
        if ((mrc_patch_mask & (1u << fn)) && strstr(how, "FAILED"))
            missing |= 1u << fn;
        if (!(mrc_patch_mask & (1u << fn)))
            missing |= 1u << fn;
        int k = snprintf(line + n, sizeof(line) - n, "%s%s: %s", n ? "; " : "", mrc_patch_targets[fn].label, how);
        if (k > 0 && (size_t)k < sizeof(line) - n)
            n += (size_t)k;
    }
    snprintf(line + n, sizeof(line) - n, "; glibc-internal free: %s",
             (ok & (1u << MRC_FN_COUNT)) ? "seen" : "NOT seen");
    if (!(ok & (1u << MRC_FN_COUNT)))
        missing |= 1u << MRC_FN_MUNMAP;
    MRC_INFO("unmap coverage: %s", line);
    if (missing)
        mrc_log_note("unmap coverage incomplete: %s", line);
    return ok;
}
