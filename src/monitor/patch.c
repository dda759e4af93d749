/* patch.c - the 'patch' source's entry points: libc's munmap, mmap, mremap, madvise,
 * shmat, shmdt, brk (sbrk calls brk directly) and ld.so's private munmap, whose first 13
 * bytes become "movabs $hook, %r11; jmp *%r11" (patch_x86.c). The hooks run unmap.c's
 * logic, whose mrc_real pointers then make the system call inline (util/sys.h): the
 * original code never runs again. Which entry points, with which shapes, is the table's
 * (util/interposed.h). A later patcher's jump is chained in patch_chain.c;
 * the start-up self-test is patch_selftest.c.
 * Invariants: a function is patched at start-up only if its first bytes are the
 * syscall-wrapper shape this file knows (anything else, e.g. another library's jump, is
 * refused and left alone, said once); hooks never allocate and keep errno. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

#include "monitor/patch.h"
#include "monitor/patch_priv.h"
#include "monitor/patch_x86.h"
#include "monitor/unmap.h"
#include "util/log.h"
#include "util/real.h"
#include "util/sys.h"

/* ---- the hooks the jumps land in; the self-test's probe sees each arrival ---- */

static uintptr_t probe_lo, probe_hi;   /* armed only during the self-test */
static unsigned probe_seen;

static inline void probe(enum mrc_fn fn, const void *a)
{
    if (__builtin_expect(__atomic_load_n(&probe_hi, __ATOMIC_RELAXED) != 0, 0) &&
        (uintptr_t)a >= probe_lo && (uintptr_t)a < probe_hi)
        __atomic_fetch_or(&probe_seen, 1u << fn, __ATOMIC_RELAXED);
}

void mrc_patch_probe_arm(const void *p, size_t len)
{
    __atomic_store_n(&probe_seen, 0, __ATOMIC_SEQ_CST);
    probe_lo = (uintptr_t)p;
    __atomic_store_n(&probe_hi, (uintptr_t)p + len, __ATOMIC_SEQ_CST);
}

unsigned mrc_patch_probe_disarm(void)
{
    __atomic_store_n(&probe_hi, 0, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&probe_seen, __ATOMIC_SEQ_CST);
}

/* The errno of every other libc patched (mrc_patch_install_more): its callers read their
 * own libc's, and the hooks fail with ours. Copied to each on a failure only (a call may
 * set errno whenever it fails, even another namespace's view of it). */
#define MAX_MORE 16
static int *(*more_errno[MAX_MORE])(void);
static unsigned nmore;

static __attribute__((noinline, cold)) void failed(void)
{
    int e = errno;
    for (unsigned i = 0; i < __atomic_load_n(&nmore, __ATOMIC_ACQUIRE); i++)
        *more_errno[i]() = e;
}
/* Returns call: a tail call while no other libc is patched (the usual case, on every
 * unmap the program makes), else its result with a failure's errno copied. */
#define RETURN_CALL(type, call, bad)                                                   \
    do {                                                                               \
        if (__builtin_expect(!__atomic_load_n(&nmore, __ATOMIC_RELAXED), 1))           \
            return call;                                                               \
        type r_ = call;                                                                \
        if (bad)                                                                       \
            failed();                                                                  \
        return r_;                                                                     \
    } while (0)

static int p_munmap(void *a, size_t len)
{
    probe(MRC_FN_MUNMAP, a);
    RETURN_CALL(int, mrc_on_munmap(a, len), r_ != 0);
}

static int p_ldso_munmap(void *a, size_t len)
{
    probe(MRC_FN_LDSO_MUNMAP, a);
    return mrc_on_munmap_from(MRC_FN_LDSO_MUNMAP, a, len);
}

static void *p_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    probe(MRC_FN_MMAP, a);
    RETURN_CALL(void *, mrc_on_mmap(a, len, prot, flags, fd, off), r_ == MAP_FAILED);
}

static void *p_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    probe(MRC_FN_MREMAP, old);
    RETURN_CALL(void *, mrc_on_mremap(old, old_size, new_size, flags, new_addr), r_ == MAP_FAILED);
}

static int p_madvise(void *a, size_t len, int advice)
{
    probe(MRC_FN_MADVISE, a);
    RETURN_CALL(int, mrc_on_madvise(a, len, advice), r_ != 0);
}

static void *p_shmat(int id, const void *a, int flags)
{
    probe(MRC_FN_SHMAT, a);
    RETURN_CALL(void *, mrc_on_shmat(id, a, flags), r_ == (void *)-1);
}

static int p_shmdt(const void *a)
{
    probe(MRC_FN_SHMDT, a);
    RETURN_CALL(int, mrc_on_shmdt(a), r_ != 0);
}

static int p_brk(void *a)
{
    probe(MRC_FN_BRK, a);
    return mrc_on_brk(a);
}

/* ---- the targets: the table's patched rows (util/interposed.h) ---- */

#define TARGET_REAL_LIBC(id) (void **)&mrc_real.id
#define TARGET_REAL_LDSO(id) NULL
#define TARGET_FROM_LIBC(sym) #sym, MRC_PATCH_FROM_LIBC
#define TARGET_FROM_LDSO(sym) "ld.so " #sym, MRC_PATCH_FROM_LDSO
#define TARGET_NOPATCH(...)
#define TARGET_ENTRY(...)
#define TARGET_SYSCALL(id, real, name, from, ID, sys, shape, follow, label, lost) \
    [MRC_FN_##ID] = { name, shape, follow, (void *)p_##id, real, (void *)(sys), from, label, lost },
#define TARGET(sym, id, ret, params, where, patch, guard, plt)                                              \
    MRC_CASE(TARGET_, patch, id, MRC_CASE(TARGET_REAL_, where, id), MRC_CASE(TARGET_FROM_, where, sym))

const struct mrc_patch_target mrc_patch_targets[MRC_FN_COUNT] = { MRC_FNS(TARGET) };

/* ---- the watched entry points ---- */

unsigned mrc_patch_mask;
int mrc_patch_count;
static int patch_tried;
uint8_t *mrc_patch_entry[MRC_PATCH_NFN];
uint64_t mrc_patch_head[MRC_PATCH_NFN];

void mrc_patch_watch(int fn, uint8_t *entry)
{
    /* The head is replaced by one aligned 8-byte store; glibc aligns entries to 16. */
    if (!entry || ((uintptr_t)entry & 7))
        return;
    mrc_patch_head[fn] = __atomic_load_n((uint64_t *)entry, __ATOMIC_RELAXED);
    __atomic_store_n(&mrc_patch_entry[fn], entry, __ATOMIC_RELEASE);
}

const char *mrc_patch_jump_owner(const uint8_t *c)
{
    Dl_info di;
    uint64_t to = mrc_x86_jump_target(c);
    if (!to)
        return "unknown code";
    return dladdr((void *)(uintptr_t)to, &di) && di.dli_fname ? di.dli_fname : "anonymous memory";
}

const char *mrc_patch_fallback(void)
{
    return mrc_monitor.preload ? "the preload hook sees only calls through the PLT"
                               : "nothing watches it (MRCACHE_MONITOR has no preload)";
}

/* Whether entry's first bytes are the wrapper t expects, with room for the jump. */
static int shape_ok(const struct mrc_patch_target *t, const uint8_t *entry)
{
    size_t n = mrc_x86_shape_match(entry, t->shape);
    if (n && t->follow) {
        /* A generic prologue: the system call must follow it. */
        int found = 0;
        for (size_t i = 0; i < 96 && !found; i++)
            found = mrc_x86_shape_match(entry + i, t->follow) != 0;
        n = found ? n : 0;
    }
    return n >= MRC_X86_JUMP_LEN;
}

static int patch_one(enum mrc_fn fn, uint8_t *entry)
{
    const struct mrc_patch_target *t = &mrc_patch_targets[fn];
    if (!entry) {
        mrc_log_note("patch: %s not found; %s", t->name, mrc_patch_fallback());
        return -ENOENT;
    }
    /* Two-byte stores must not straddle a cache line; glibc aligns entries to 16. */
    if ((uintptr_t)entry & 1) {
        mrc_log_note("patch: %s at %p is not aligned; left alone: %s", t->name, (void *)entry,
                     mrc_patch_fallback());
        return -EINVAL;
    }
    if (!shape_ok(t, entry)) {
        if (mrc_x86_foreign_jump(entry))
            mrc_log_note("patch: %s already starts with a jump (another library patched it: UCX, libfabric, "
                         "Open MPI?); not overwriting it: %s",
                         t->name, mrc_patch_fallback());
        else
            mrc_log_note("patch: %s does not have the expected shape (bytes %02x %02x %02x %02x); left alone, "
                         "%s",
                         t->name, entry[0], entry[1], entry[2], entry[3], mrc_patch_fallback());
        return -EINVAL;
    }
    /* The hook ends in mrc_real's call: if another library interposes the function
     * between us and libc, that call would come back through the patched entry. */
    if (t->real && *t->real != (void *)entry) {
        mrc_log_note("patch: %s is interposed by another library after libmrcache; not patching it: %s", t->name,
                     mrc_patch_fallback());
        return -EBUSY;
    }
    /* From here both the preload hook and the patched entry reach the kernel directly. */
    if (t->real)
        __atomic_store_n(t->real, t->sys, __ATOMIC_RELEASE);
    __atomic_fetch_or(&mrc_monitor.patched, 1u << fn, __ATOMIC_SEQ_CST);
    int rc = mrc_x86_write_jump(entry, t->hook);
    if (rc) {
        __atomic_fetch_and(&mrc_monitor.patched, ~(1u << fn), __ATOMIC_SEQ_CST);
        mrc_log_note("patch: cannot make %s writable (%s); %s", t->name, strerror(-rc), mrc_patch_fallback());
        return rc;
    }
    mrc_patch_mask |= 1u << fn;
    mrc_patch_count++;
    mrc_patch_watch(fn, entry);
    return 0;
}

/* ld.so keeps private copies of the wrappers it needs; dlclose unmaps through its own
 * munmap, which is not exported. Found by its exact shape in ld.so's code, and patched
 * only if exactly one 16-byte-aligned candidate exists. */
static uint8_t *find_ldso_munmap(const struct mrc_patch_target *t)
{
    uintptr_t base = getauxval(AT_BASE);
    if (!base)
        return NULL;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG))
        return NULL;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
    uint8_t *hit = NULL;
    int hits = 0;
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_LOAD || !(ph[i].p_flags & PF_X))
            continue;
        uint8_t *p = (uint8_t *)(base + ph[i].p_vaddr);
        uint8_t *end = p + ph[i].p_filesz;
        p = (uint8_t *)(((uintptr_t)p + 15) & ~(uintptr_t)15);
        for (; p + 16 <= end; p += 16)
            if (p[0] == 0xb8 && p[1] == 0x0b && mrc_x86_shape_match(p, t->shape)) {
                hit = p;
                hits++;
            }
    }
    return hits == 1 ? hit : NULL;
}

/* Where t's entry point is: in the libc whose handle is given (by its name), or in ld.so. */
static uint8_t *entry_of(const struct mrc_patch_target *t, void *libc)
{
    switch (t->from) {
    case MRC_PATCH_FROM_LIBC: return dlsym(libc, t->name);
    case MRC_PATCH_FROM_LDSO: return find_ldso_munmap(t);
    }
    return NULL;
}

const char *mrc_patch_step_aside_reason(void)
{
#if !defined(__x86_64__)
    return "not x86-64";
#endif
    if (dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
        dlsym(RTLD_DEFAULT, "__msan_init") || dlsym(RTLD_DEFAULT, "__hwasan_init"))
        return "a sanitizer is loaded (it intercepts these calls itself)";
    const char *pre = getenv("LD_PRELOAD");
    if (pre && (strstr(pre, "vgpreload") || strstr(pre, "valgrind")))
        return "running under valgrind (it does not expect code to change)";
    return NULL;
}

unsigned mrc_patch_install(void)
{
    if (patch_tried)
        return mrc_patch_mask;
    patch_tried = 1;
    const char *why = mrc_patch_step_aside_reason();
    if (why) {
        mrc_log_note("patch: not patching libc: %s; %s", why,
                     mrc_monitor.preload ? "the preload hooks alone watch unmaps" : "NOTHING watches unmaps");
        return 0;
    }
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc) {
        mrc_log_note("patch: libc.so.6 not found; %s",
                     mrc_monitor.preload ? "the preload hooks alone watch unmaps" : "NOTHING watches unmaps");
        return 0;
    }
    mrc_x86_sync_init();
    for (int fn = 0; fn < MRC_FN_COUNT; fn++)
        patch_one((enum mrc_fn)fn, entry_of(&mrc_patch_targets[fn], libc));
    if (mrc_patch_mask & (1u << MRC_FN_BRK))
        mrc_patch_watch(MRC_FN_SBRK, dlsym(libc, "sbrk"));
    /* The handle is kept: libc is never unloaded. */
    MRC_DEBUG("patch: %d of %d entry points patched", mrc_patch_count, MRC_FN_COUNT);
    return mrc_patch_mask;
}

int mrc_patch_install_more(void *libc, const char **missing)
{
    const char *why = mrc_patch_step_aside_reason();
    *missing = why;
    if (why)
        return -EPERM;
    int *(*errno_of)(void) = (int *(*)(void))dlsym(libc, "__errno_location");
    if (!errno_of || nmore == MAX_MORE) {
        *missing = errno_of ? "room for another libc" : "__errno_location";
        return -ENOSPC;
    }
    mrc_x86_sync_init();
    more_errno[nmore] = errno_of;
    __atomic_store_n(&nmore, nmore + 1, __ATOMIC_RELEASE);
    for (int fn = 0; fn < MRC_FN_COUNT; fn++) {
        const struct mrc_patch_target *t = &mrc_patch_targets[fn];
        /* ld.so is one for every namespace; brk keeps the break in its own libc's
         * variable (and only the first libc's malloc grows the heap). */
        if (t->from != MRC_PATCH_FROM_LIBC || fn == MRC_FN_BRK)
            continue;
        uint8_t *entry = dlsym(libc, t->name);
        /* Its hook ends in mrc_real's call, the first libc's (or the direct system
         * call): nothing of this libc's is called again. */
        if (!entry || ((uintptr_t)entry & 1) || !shape_ok(t, entry) || mrc_x86_write_jump(entry, t->hook)) {
            *missing = t->name;
            return -EINVAL;
        }
    }
    return 0;
}

const char *mrc_patch_summary(void)
{
    static char buf[16];
    if (!mrc_patch_count)
        return "";
    if (mrc_patch_count == MRC_FN_COUNT)
        return "patch";
    buf[0] = 0;
    int n = mrc_patch_count;
    memcpy(buf, "patch(", 6);
    buf[6] = (char)('0' + n);
    buf[7] = '/';
    buf[8] = (char)('0' + MRC_FN_COUNT);
    buf[9] = ')';
    buf[10] = 0;
    return buf;
}
