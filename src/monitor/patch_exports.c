/* patch_exports.c - libmrcache's own exported functions as entry points another library
 * may patch. A patcher that looks its targets up by name finds ours under LD_PRELOAD
 * (UCX's libucm: dlsym(RTLD_NEXT), then RTLD_DEFAULT) and writes a jump over their first
 * bytes: the program's calls then never reach our hooks. Each guarded export's first 8
 * bytes are held against those of our own file; one found changed is chained when it
 * starts with a plain jump (the jump moves into a stub, our entry now jumps to our logic,
 * which ends in theirs) and otherwise reported to the sink as lost. When to look is
 * patch_chain.c's: at start-up, when a page is made executable again, a few at each miss.
 * Invariants: our entry's head changes by one 8-byte compare-and-swap (patch_x86.c);
 * nothing here allocates; a call that comes back through our export from the other
 * library's hook goes to libc, never round again. */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "monitor/glibc_heap.h"
#include "monitor/patch.h"
#include "monitor/patch_priv.h"
#include "monitor/patch_x86.h"
#include "monitor/unmap.h"
#include "util/hot.h"
#include "util/sys.h"

#define MAX_EXPORTS 32

static struct guarded {
    const char *name;
    uint8_t *entry;
    int kind;              /* enum mrc_export_kind, or -1: not chainable */
    uint64_t expect;       /* its first 8 bytes as built */
    uint64_t head;         /* as we last left them: expect, or our jump once chained */
} g[MAX_EXPORTS];
static unsigned ng;

/* Once chained: the other library's jump, moved into a stub; NULL while not. */
static void *theirs[MRC_EXPORT_KINDS];

/* ---- the chained entries: our logic, ending in their hook ---- */

static __thread unsigned in_chained;

/* Runs call (one of unmap.c's mrc_on_*), whose system call becomes their hook's. If their
 * hook calls our export again, that call goes on to libc. */
#define VIA_THEIRS(k, call)                                                   \
    do {                                                                      \
        void *t_ = __atomic_load_n(&theirs[k], __ATOMIC_ACQUIRE);             \
        if (!t_ || (in_chained & (1u << (k))))                                \
            return call;                                                      \
        in_chained |= 1u << (k);                                              \
        mrc_monitor_next(t_);                                                 \
        __typeof__(call) r_ = call;                                           \
        in_chained &= ~(1u << (k));                                           \
        return r_;                                                            \
    } while (0)

static int x_munmap(void *a, size_t len)
{
    VIA_THEIRS(MRC_EXPORT_MUNMAP, mrc_on_munmap(a, len));
}

static void *x_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    VIA_THEIRS(MRC_EXPORT_MMAP, mrc_on_mmap(a, len, prot, flags, fd, off));
}

static void *x_mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    VIA_THEIRS(MRC_EXPORT_MMAP64, mrc_on_mmap(a, len, prot, flags, fd, off));
}

static void *x_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    VIA_THEIRS(MRC_EXPORT_MREMAP, mrc_on_mremap(old, old_size, new_size, flags, new_addr));
}

static int x_madvise(void *a, size_t len, int advice)
{
    VIA_THEIRS(MRC_EXPORT_MADVISE, mrc_on_madvise(a, len, advice));
}

static void *x_shmat(int id, const void *a, int flags)
{
    VIA_THEIRS(MRC_EXPORT_SHMAT, mrc_on_shmat(id, a, flags));
}

static int x_shmdt(const void *a)
{
    VIA_THEIRS(MRC_EXPORT_SHMDT, mrc_on_shmdt(a));
}

static int x_brk(void *a)
{
    VIA_THEIRS(MRC_EXPORT_BRK, mrc_on_brk(a));
}

static void *x_sbrk(intptr_t incr)
{
    VIA_THEIRS(MRC_EXPORT_SBRK, mrc_on_sbrk(incr));
}

/* x_<id> for each of the table's CHAIN rows. */
#define CHAINED_NOGUARD(id)
#define CHAINED_GUARD(id)
#define CHAINED_CHAIN(id, kind) [MRC_EXPORT_##kind] = (void *)x_##id,
#define CHAINED(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(CHAINED_, guard, id)
static void *const chained_of[MRC_EXPORT_KINDS] = { MRC_FNS(CHAINED) };

/* ---- what each export looked like when built ---- */

/* The first 8 bytes of our code at entry as they are in our file (text is never
 * relocated), or 0 if the file cannot be read (then what is there now is taken). */
static uint64_t built_head(const uint8_t *entry)
{
    Dl_info di;
    uint64_t head = 0;
    if (!dladdr(entry, &di) || !di.dli_fname || !di.dli_fbase)
        return 0;
    int fd = mrc_sys_open(di.dli_fname, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    ElfW(Ehdr) eh;
    uint64_t off = (uint64_t)((uintptr_t)entry - (uintptr_t)di.dli_fbase);
    if (mrc_sys_pread(fd, &eh, sizeof(eh), 0) == (ssize_t)sizeof(eh) && !memcmp(eh.e_ident, ELFMAG, SELFMAG))
        for (unsigned i = 0; i < eh.e_phnum; i++) {
            ElfW(Phdr) ph;
            if (mrc_sys_pread(fd, &ph, sizeof(ph), (off_t)(eh.e_phoff + i * sizeof(ph))) != (ssize_t)sizeof(ph))
                break;
            if (ph.p_type == PT_LOAD && off >= ph.p_vaddr && off + 8 <= ph.p_vaddr + ph.p_filesz) {
                if (mrc_sys_pread(fd, &head, 8, (off_t)(ph.p_offset + off - ph.p_vaddr)) != 8)
                    head = 0;
                break;
            }
        }
    mrc_sys_close(fd);
    return head;
}

void mrc_patch_guard_exports(const struct mrc_export *list, unsigned n)
{
    /* A chained head is swapped while other threads run: they must serialise after it,
     * whether or not libc was patched (which asks for the same). */
    mrc_x86_sync_init();
    for (unsigned i = 0; i < n && ng < MAX_EXPORTS; i++) {
        struct guarded *e = &g[ng];
        /* The head is replaced by one aligned 8-byte store: -falign-functions keeps ours
         * on 16 bytes. */
        if (!list[i].entry || ((uintptr_t)list[i].entry & 7))
            continue;
        e->name = list[i].name;
        e->entry = list[i].entry;
        e->kind = list[i].kind;
        e->expect = built_head(e->entry);
        if (!e->expect)
            e->expect = __atomic_load_n((uint64_t *)e->entry, __ATOMIC_RELAXED);
        e->head = e->expect;
        __atomic_store_n(&ng, ng + 1, __ATOMIC_RELEASE);
    }
}

/* ---- noticing and chaining ---- */

MRC_HOT unsigned mrc_patch_exports(void)
{
    return __atomic_load_n(&ng, __ATOMIC_ACQUIRE);
}

int mrc_patch_export_touched(unsigned i, uintptr_t lo, uintptr_t hi)
{
    uintptr_t e = (uintptr_t)g[i].entry;
    return e < hi && e + 8 > lo;
}

MRC_HOT int mrc_patch_export_changed(unsigned i)
{
    return g[i].entry && __atomic_load_n((uint64_t *)g[i].entry, __ATOMIC_ACQUIRE) != g[i].head;
}

static void give_up(struct guarded *e, uint64_t now)
{
    uint8_t b[8];
    memcpy(b, &now, 8);
    char lost[400];
    snprintf(lost, sizeof(lost),
             "patch: libmrcache's own %s was overwritten by another library (bytes %02x %02x %02x %02x, code that "
             "cannot be chained); the program's calls of %s are NO LONGER SEEN",
             e->name, b[0], b[1], b[2], b[3], e->name);
    e->entry = NULL;   /* nothing more to watch there */
    /* The allocator's exports only matter while their hooks run: otherwise libc's
     * patched entry points see what they would have. */
    const char *still = e->kind < 0 && !__atomic_load_n(&mrc_glibc_heap_watching, __ATOMIC_RELAXED)
                            ? "libc's patched entry points still see the allocator's unmaps"
                            : NULL;
    mrc_monitor.sink.source_lost(lost, still);
}

/* Theirs first: from here a call that enters the chained path ends in their hook. */
static void publish_theirs(unsigned kind, void *moved)
{
    __atomic_store_n(&theirs[kind], moved, __ATOMIC_RELEASE);
}

void mrc_patch_export_chain(unsigned i)
{
    struct guarded *e = &g[i];
    uint64_t now = e->entry ? __atomic_load_n((uint64_t *)e->entry, __ATOMIC_ACQUIRE) : e->head;
    if (now == e->head)
        return;
    if (now == e->expect) {
        /* The other library put our bytes back (it unpatched at unload): our own code
         * runs again, and their hook is gone from the path. */
        if (e->kind >= 0)
            __atomic_store_n(&theirs[e->kind], NULL, __ATOMIC_RELEASE);
        e->head = now;
        return;
    }
    uint64_t head;
    if (e->kind < 0 || !mrc_patch_chain_jump(e->entry, now, chained_of[e->kind], publish_theirs, (unsigned)e->kind,
                                             e->name, 1, &head)) {
        give_up(e, now);
        return;
    }
    if (head)
        e->head = head;    /* else changed again under us, or not writable: the next look decides */
}
