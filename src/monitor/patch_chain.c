/* patch_chain.c - another library patching one of our entry points after us. UCX 1.13
 * (libucm's constructor, UCX_MEM_MMAP_HOOK_MODE=bistro) writes a 5-byte "jmp rel32" to
 * its hook over the first bytes of our jump at munmap, mmap, mremap, madvise, shmat,
 * shmdt, brk and sbrk; its hooks then make the system call themselves, so glibc's own
 * unmaps would bypass us. Such a patcher makes the page executable again with mprotect,
 * which interpose/hooks_mprotect.c reports here. If the new first instruction is an
 * absolute jump (or a rel32 one, whose target we can make absolute), the entry gets our
 * jump back and the foreign jump moves into a stub that mrc_real's pointer calls:
 * entry -> our hook (invalidate) -> their hook -> kernel. Anything else is given up:
 * the sink hears that the source is lost, with what goes unseen.
 * Invariants: one thread checks at a time, and a check asked for meanwhile is not lost;
 * nothing here allocates. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "monitor/patch.h"
#include "monitor/patch_priv.h"
#include "monitor/patch_x86.h"
#include "monitor/unmap.h"
#include "util/hot.h"
#include "util/log.h"
#include "util/real.h"
#include "util/sys.h"

/* What our "original" path calls once an entry point is chained. */
static void *orig_of[MRC_PATCH_NFN];

/* Our original path once chained: the other library's hook, unless this thread is in it
 * already. A patcher that chains as we do keeps a copy of the bytes it replaced (our old
 * jump) and calls it: that call comes back here, and then goes to the kernel. A signal
 * handler's call made while its thread is in the other hook goes to the kernel too. */
static __thread unsigned in_orig;

#define VIA_ORIG(fn, ftype, sys_call, ...)                                                   \
    do {                                                                                     \
        if (in_orig & (1u << (fn)))                                                          \
            return sys_call;                                                                 \
        in_orig |= 1u << (fn);                                                               \
        __typeof__(sys_call) r_ = ((ftype)__atomic_load_n(&orig_of[fn], __ATOMIC_ACQUIRE))(__VA_ARGS__); \
        in_orig &= ~(1u << (fn));                                                            \
        return r_;                                                                           \
    } while (0)

static int o_munmap(void *a, size_t len)
{
    VIA_ORIG(MRC_FN_MUNMAP, int (*)(void *, size_t), mrc_sys_munmap(a, len), a, len);
}

static void *o_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    VIA_ORIG(MRC_FN_MMAP, void *(*)(void *, size_t, int, int, int, off_t), mrc_sys_mmap(a, len, prot, flags, fd, off),
             a, len, prot, flags, fd, off);
}

static void *o_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    VIA_ORIG(MRC_FN_MREMAP, void *(*)(void *, size_t, size_t, int, ...),
             mrc_sys_mremap(old, old_size, new_size, flags, new_addr), old, old_size, new_size, flags, new_addr);
}

static int o_madvise(void *a, size_t len, int advice)
{
    VIA_ORIG(MRC_FN_MADVISE, int (*)(void *, size_t, int), mrc_sys_madvise(a, len, advice), a, len, advice);
}

static void *o_shmat(int id, const void *a, int flags)
{
    VIA_ORIG(MRC_FN_SHMAT, void *(*)(int, const void *, int), mrc_sys_shmat(id, a, flags), id, a, flags);
}

static int o_shmdt(const void *a)
{
    VIA_ORIG(MRC_FN_SHMDT, int (*)(const void *), mrc_sys_shmdt(a), a);
}

static int o_brk(void *a)
{
    VIA_ORIG(MRC_FN_BRK, int (*)(void *), mrc_sys_brk(a), a);
}

static void *o_sbrk(intptr_t incr)
{
    VIA_ORIG(MRC_FN_SBRK, void *(*)(intptr_t), mrc_sys_sbrk(incr), incr);
}

/* libc's sbrk, chained: a shrinking call is glibc trimming its heap. unmap.c's sbrk
 * logic leaves that to brk's patch, which this call no longer reaches, hence the range
 * handled here; the preload sbrk hook still lands here through mrc_real.sbrk (libc's). */
static void *p_sbrk(intptr_t incr)
{
    if (incr >= 0 || !mrc_sink_armed(&mrc_monitor.sink))
        return o_sbrk(incr);
    return mrc_monitor_sbrk_shrink(o_sbrk, incr);
}

/* Where a chained entry's jump lands again: the entry point's own hook. */
static void *hook_of(int fn)
{
    return fn == MRC_FN_SBRK ? (void *)p_sbrk : mrc_patch_targets[fn].hook;
}

/* Set into mrc_real once chained (sbrk's stays libc's, whose entry lands in p_sbrk):
 * o_<id> for each patched row of the table with an mrc_real pointer; ld.so's munmap has
 * none: it is given up. */
#define ORIG_HAS_LIBC(x) YES
#define ORIG_HAS_LDSO(x) NO
#define ORIG_YES(id, ID) [MRC_FN_##ID] = (void *)o_##id,
#define ORIG_NO(id, ID)
#define ORIG_NOPATCH(...)
#define ORIG_ENTRY(...)
#define ORIG_SYSCALL(id, has, ID, sys, shape, follow, label, lost) ORIG_##has(id, ID)
#define ORIG_ROW(sym, id, ret, params, where, patch, guard, plt)                                            \
    MRC_CASE(ORIG_, patch, id, MRC_CASE(ORIG_HAS_, where, x))
static void *const via_orig_of[MRC_FN_COUNT] = { MRC_FNS(ORIG_ROW) };

/* What goes unseen once an entry point is given up. */
static const char *lost_of(int fn)
{
    return fn == MRC_FN_SBRK ? "heap trimming in free" : mrc_patch_targets[fn].lost;
}

static const char *fn_name(int fn)
{
    return fn == MRC_FN_SBRK ? "sbrk" : mrc_patch_targets[fn].name;
}

static void give_up(int fn, uint8_t *entry)
{
    const uint8_t *c = entry;
    __atomic_store_n(&mrc_patch_entry[fn], NULL, __ATOMIC_RELEASE);
    if (fn < MRC_FN_COUNT) {
        __atomic_fetch_and(&mrc_monitor.patched, ~(1u << fn), __ATOMIC_SEQ_CST);
        mrc_patch_mask &= ~(1u << fn);
        mrc_patch_count--;
    }
    /* Calls through the preload hook now reach whatever sits at the entry, as they would
     * without us; the guard in o_* stops a loop if that ends in a copy of our jump. */
    if (fn < MRC_FN_COUNT && mrc_patch_targets[fn].real) {
        __atomic_store_n(&orig_of[fn], entry, __ATOMIC_RELEASE);
        __atomic_store_n(mrc_patch_targets[fn].real, via_orig_of[fn], __ATOMIC_RELEASE);
    }
    char lost[400];
    snprintf(lost, sizeof(lost),
             "patch: %s was overwritten by another library after libmrcache patched it (bytes %02x %02x %02x %02x, "
             "code that cannot be chained); %s are NO LONGER SEEN",
             fn_name(fn), c[0], c[1], c[2], c[3], lost_of(fn));
    mrc_monitor.sink.source_lost(lost, fn == MRC_FN_SBRK ? "calls to sbrk itself go to the other library"
                                                         : mrc_patch_fallback());
}

int mrc_patch_chain_jump(uint8_t *entry, uint64_t now, void *hook, void (*publish)(unsigned id, void *moved),
                         unsigned id, const char *name, int own, uint64_t *head)
{
    uint8_t *slot = mrc_x86_stub_alloc(entry);
    if (!slot || !mrc_x86_move_jump(entry, slot + 16)) {
        mrc_x86_stub_seal(slot, 0);
        return 0;
    }
    mrc_x86_abs_jump(slot, (uint64_t)(uintptr_t)hook);
    mrc_x86_stub_seal(slot, 1);
    publish(id, slot + 16);
    *head = mrc_x86_swap_head(entry, now, slot);
    if (*head && mrc_log_level >= MRC_LOG_INFO) {
        uint8_t was[8];
        memcpy(was, &now, 8);
        MRC_INFO("patch: %s%s was patched by %s%s (%02x %02x %02x %02x %02x); chained: our hook runs first, then "
                 "theirs",
                 own ? "libmrcache's own " : "", name, mrc_patch_jump_owner(slot + 16), own ? "" : " after libmrcache",
                 was[0], was[1], was[2], was[3], was[4]);
    }
    return 1;
}

/* The original path first: from here calls through the preload hooks reach the other
 * library too, and once the entry lands in our hook again its calls go there. */
static void publish_orig(unsigned fn, void *moved)
{
    __atomic_store_n(&orig_of[fn], moved, __ATOMIC_RELEASE);
    if (fn < MRC_FN_COUNT)
        __atomic_store_n(mrc_patch_targets[fn].real, via_orig_of[fn], __ATOMIC_RELEASE);
}

static void chain(int fn, uint8_t *entry, uint64_t now)
{
    uint64_t head;
    if (fn == MRC_FN_LDSO_MUNMAP ||
        !mrc_patch_chain_jump(entry, now, hook_of(fn), publish_orig, (unsigned)fn, fn_name(fn), 0, &head)) {
        give_up(fn, entry);
        return;
    }
    /* 0 when changed again under us, or not writable: the next check decides. */
    mrc_patch_head[fn] = head;
}

static int check_wanted, check_busy;

/* One thread checks at a time; a request arriving meanwhile (another thread, a signal
 * handler) is seen by the checking thread before it stops. */
void mrc_patch_check_all(void)
{
    __atomic_store_n(&check_wanted, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&check_wanted, __ATOMIC_SEQ_CST) && !__atomic_exchange_n(&check_busy, 1, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&check_wanted, 0, __ATOMIC_SEQ_CST);
        for (int fn = 0; fn < MRC_PATCH_NFN; fn++) {
            uint8_t *e = mrc_patch_entry[fn];
            uint64_t now = e ? __atomic_load_n((uint64_t *)e, __ATOMIC_ACQUIRE) : 0;
            if (e && now != mrc_patch_head[fn])
                chain(fn, e, now);
        }
        for (unsigned i = 0; i < mrc_patch_exports(); i++)
            mrc_patch_export_chain(i);
        __atomic_store_n(&check_busy, 0, __ATOMIC_RELEASE);
    }
}

void mrc_patch_code_changed(const void *addr, size_t len)
{
    /* 0 until mrc_monitor_init, which comes before anything is watched (our mprotect
     * runs from the first constructor on). */
    uintptr_t pg = (uintptr_t)mrc_monitor.page_size;
    if (!pg)
        return;
    uintptr_t a = (uintptr_t)addr;
    int touched = 0;
    for (int fn = 0; fn < MRC_PATCH_NFN && !touched; fn++) {
        uintptr_t e = (uintptr_t)__atomic_load_n(&mrc_patch_entry[fn], __ATOMIC_ACQUIRE) & ~(pg - 1);
        touched = e && a < e + pg && a + len > e;
    }
    for (unsigned i = 0; i < mrc_patch_exports() && !touched; i++)
        touched = mrc_patch_export_touched(i, a & ~(pg - 1), ((a + len + pg - 1) & ~(pg - 1)));
    if (touched)
        mrc_patch_check_all();
}

/* Where this thread looks next, plus one (0: it has not looked yet), and where the next
 * thread to start looks first. The cursor is the thread's own: a miss pays no shared
 * cache line; each thread starts where the last one to start did, one further, so that
 * threads making a registration or two each still look at every entry point in turn. */
static __thread unsigned look_next;
static unsigned look_first;

/* One entry point per call, in turn: each look is a load of a code line, which after the
 * NIC's system call may be cold (~15 ns); every one is looked at within as many misses of
 * a thread as there are entry points. */
MRC_HOT void mrc_patch_check(void)
{
    unsigned n = MRC_PATCH_NFN + mrc_patch_exports();
    unsigned i = look_next - 1;
    if (__builtin_expect(look_next == 0, 0))
        i = __atomic_fetch_add(&look_first, 1, __ATOMIC_RELAXED) % n;
    /* n never shrinks (exports are only added), so the i kept is below it. */
    look_next = i + 1 < n ? i + 2 : 1;
    int changed;
    if (i < MRC_PATCH_NFN) {
        uint8_t *e = __atomic_load_n(&mrc_patch_entry[i], __ATOMIC_ACQUIRE);
        changed = e && __atomic_load_n((uint64_t *)e, __ATOMIC_ACQUIRE) != mrc_patch_head[i];
    } else {
        changed = mrc_patch_export_changed(i - MRC_PATCH_NFN);
    }
    if (changed)
        mrc_patch_check_all();
}
