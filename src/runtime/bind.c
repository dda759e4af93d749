/* bind.c - one cache for every route to libibverbs' MR calls. A program that binds the
 * verbs from a library handle (NCCL's dlopen + dlvsym, Python's ctypes, JNI, Rust's
 * libloading) or a plugin loaded with RTLD_DEEPBIND calls libibverbs' own entry points,
 * not our exports; libibverbs' ibv_reg_mr still reaches our ibv_reg_mr_iova2 through its
 * PLT and so returns one of our handles, which its own ibv_dereg_mr would refuse (EINVAL,
 * the MR left pinned, the PD busy). So before the first registration is cached, the entry
 * point of each of the table's ENTRY rows (util/interposed.h) is made to jump to our
 * export, and its mrc_real pointer runs the original through a trampoline: its first
 * instructions, moved next to it, then a jump back.
 * Invariants: done once per process, before any handle of ours exists (a forked child
 * inherits the rewritten code, and libibverbs stays loaded once resolved: util/real.c);
 * mrc_real changes to the trampoline before the entry changes, so our own calls never
 * loop back into our hooks; an entry whose first instructions are not ones the code
 * mover knows is left alone, with one warning naming what its callers lose. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "monitor/patch_x86.h"
#include "runtime/runtime.h"
#include "runtime/state.h"
#include "util/log.h"

static const struct mrc_rt_entry *entries;
static unsigned n_entries;

void mrc_rt_verbs_entries(const struct mrc_rt_entry *list, unsigned n)
{
    entries = list;
    n_entries = n;
}

/* 1 rewritten, 0 absent (an OPTIONAL row rdma-core lacks), -1 left alone. */
static int bind_one(const struct mrc_rt_entry *e)
{
    uint8_t *entry = __atomic_load_n((uint8_t **)e->real, __ATOMIC_ACQUIRE);
    if (!entry)
        return 0;
    if ((uintptr_t)entry & 7)
        return -1;                          /* the head is swapped by one aligned 8-byte store */
    uint8_t *tramp = mrc_x86_stub_alloc(entry);
    if (!tramp)
        return -1;
    size_t n = mrc_x86_relocate(entry, 5, tramp, MRC_X86_STUB_SIZE);
    mrc_x86_stub_seal(tramp, n != 0);
    if (!n)
        return -1;
    uint8_t *jump = mrc_x86_stub_alloc(entry);
    if (!jump)
        return -1;                          /* the trampoline's slot stays used: harmless */
    mrc_x86_abs_jump(jump, (uint64_t)(uintptr_t)e->own);
    mrc_x86_stub_seal(jump, 1);
    __atomic_store_n((uint8_t **)e->real, tramp, __ATOMIC_RELEASE);
    uint64_t old;
    memcpy(&old, entry, 8);
    if (!mrc_x86_swap_head(entry, old, jump)) {
        __atomic_store_n((uint8_t **)e->real, entry, __ATOMIC_RELEASE);
        return -1;
    }
    return 1;
}

static void bind_all(void)
{
    int done = 0;
    for (unsigned i = 0; i < n_entries; i++) {
        int rc = bind_one(&entries[i]);
        if (rc > 0)
            done++;
        else if (rc < 0)
            MRC_WARN("libibverbs' %s could not be rewritten: a caller that bound it from a library handle "
                     "(dlopen, ctypes) or a deep-bound plugin bypasses the cache there",
                     entries[i].name);
    }
    MRC_INFO("libibverbs: %d entry point%s lead to libmrcache", done, done == 1 ? "" : "s");
}

void mrc_rt_bind_verbs(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, bind_all);
}
