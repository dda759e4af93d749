/* patch.c - rewrites the first 13 bytes of libc's munmap, mmap, mremap, madvise, shmat,
 * shmdt, brk (sbrk calls brk directly) and ld.so's private munmap into
 * "movabs $hook, %r11; jmp *%r11". The hooks run monitor.c's logic, whose mrc_real
 * pointers then make the system call inline: the original code never runs again.
 * Another library patching one of them later (UCX's bistro hooks when libucm loads)
 * is noticed when it makes the page executable again, and chained: its jump moves into
 * a trampoline that our "original" path calls, so both hooks see every call.
 * Invariants: a function is patched at start-up only if its first bytes are the
 * syscall-wrapper shape this file knows (anything else, e.g. another library's jump, is
 * refused and left alone); a thread entering during a write sees either the old entry,
 * a two-byte spin loop, or the whole jump (a re-patch: the old or the new jump, one
 * 8-byte store); hooks never allocate and keep errno. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/cache.h"
#include "interpose/real.h"
#include "interpose/route.h"
#include "interpose/state.h"
#include "monitor/monitor.h"
#include "monitor/patch.h"
#include "util/log.h"
#include "util/thread.h"

#ifndef MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE (1 << 5)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE (1 << 6)
#endif

#define PATCH_LEN 13

/* ---- the original behaviour: the system call, inline, with glibc's errno rule ---- */

static inline long sc6(long n, long a, long b, long c, long d, long e, long f)
{
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "0"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return r;
}
#define SC(n, a, b, c, d, e, f) sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

static long sys_result(long r)
{
    if ((unsigned long)r > -4096ul) {
        errno = (int)-r;
        return -1;
    }
    return r;
}

static int raw_munmap(void *a, size_t len)
{
    return (int)sys_result(SC(SYS_munmap, a, len, 0, 0, 0, 0));
}

static void *raw_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (off & 4095) {           /* glibc's MMAP_OFF_LOW_MASK check */
        errno = EINVAL;
        return MAP_FAILED;
    }
    return (void *)sys_result(SC(SYS_mmap, a, len, prot, flags, fd, off));
}

static void *raw_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    return (void *)sys_result(SC(SYS_mremap, old, old_size, new_size, flags, new_addr, 0));
}

static int raw_madvise(void *a, size_t len, int advice)
{
    return (int)sys_result(SC(SYS_madvise, a, len, advice, 0, 0, 0));
}

static void *raw_shmat(int id, const void *a, int flags)
{
    return (void *)sys_result(SC(SYS_shmat, id, a, flags, 0, 0, 0));
}

static int raw_shmdt(const void *a)
{
    return (int)sys_result(SC(SYS_shmdt, a, 0, 0, 0, 0, 0));
}

/* glibc's brk also records the new break in __curbrk, which sbrk and malloc read. */
extern void *__curbrk;
static int raw_brk(void *a)
{
    void *r = (void *)SC(SYS_brk, a, 0, 0, 0, 0, 0);
    __curbrk = r;
    if ((uintptr_t)r < (uintptr_t)a) {
        errno = ENOMEM;
        return -1;
    }
    return 0;
}

/* ---- the hooks the jumps land in; the self-test's probe sees each arrival ---- */

static uintptr_t probe_lo, probe_hi;   /* armed only during the self-test */
static unsigned probe_seen;

static inline void probe(enum mrc_fn fn, const void *a)
{
    if (__builtin_expect(__atomic_load_n(&probe_hi, __ATOMIC_RELAXED) != 0, 0) &&
        (uintptr_t)a >= probe_lo && (uintptr_t)a < probe_hi)
        __atomic_fetch_or(&probe_seen, 1u << fn, __ATOMIC_RELAXED);
}

static int p_munmap(void *a, size_t len)
{
    probe(MRC_FN_MUNMAP, a);
    return mrc_on_munmap(a, len);
}

static int p_ldso_munmap(void *a, size_t len)
{
    probe(MRC_FN_LDSO_MUNMAP, a);
    return mrc_on_munmap_from(MRC_FN_LDSO_MUNMAP, a, len);
}

static void *p_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    probe(MRC_FN_MMAP, a);
    return mrc_on_mmap(a, len, prot, flags, fd, off);
}

static void *p_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    probe(MRC_FN_MREMAP, old);
    return mrc_on_mremap(old, old_size, new_size, flags, new_addr);
}

static int p_madvise(void *a, size_t len, int advice)
{
    probe(MRC_FN_MADVISE, a);
    return mrc_on_madvise(a, len, advice);
}

static void *p_shmat(int id, const void *a, int flags)
{
    probe(MRC_FN_SHMAT, a);
    return mrc_on_shmat(id, a, flags);
}

static int p_shmdt(const void *a)
{
    probe(MRC_FN_SHMDT, a);
    return mrc_on_shmdt(a);
}

static int p_brk(void *a)
{
    probe(MRC_FN_BRK, a);
    return mrc_on_brk(a);
}

/* ---- what each entry point must look like (glibc 2.36, x86-64; "??" any byte) ---- */

struct target {
    const char *name;
    const char *shape;      /* the first bytes, which the jump replaces and more */
    void *hook;
    void **real;            /* mrc_real's pointer, redirected to the direct call */
    void *raw;
};

/* The plain wrappers: mov $nr,%eax; syscall; cmp $-4095,%rax; jae error; ret. */
#define WRAPPER(nr) "b8 " nr " 00 00 00 0f 05 48 3d ?? f0 ff ff ?? ?? c3"

static const struct target targets[MRC_FN_COUNT] = {
    [MRC_FN_MUNMAP] = { "munmap", WRAPPER("0b"), (void *)p_munmap, (void **)&mrc_real.munmap, (void *)raw_munmap },
    /* mov %ecx,%r10d; test $0xfff,%r9d; jne einval; mov $9,%eax; syscall */
    [MRC_FN_MMAP] = { "mmap", "41 89 ca 41 f7 c1 ff 0f 00 00 75 ?? b8 09 00 00 00 0f 05", (void *)p_mmap,
                      (void **)&mrc_real.mmap, (void *)raw_mmap },
    /* sub $n,%rsp; mov %r8,n(%rsp); mov %fs:0x28,%rax (a compiled C wrapper; the
     * system call number is checked further in, below) */
    [MRC_FN_MREMAP] = { "mremap", "48 83 ec ?? 4c 89 44 24 ?? 64 48 8b 04 25 28 00 00 00", (void *)p_mremap,
                        (void **)&mrc_real.mremap, (void *)raw_mremap },
    [MRC_FN_MADVISE] = { "madvise", WRAPPER("1c"), (void *)p_madvise, (void **)&mrc_real.madvise,
                         (void *)raw_madvise },
    [MRC_FN_SHMAT] = { "shmat", "b8 1e 00 00 00 0f 05 48 3d ?? f0 ff ff ?? ?? c3", (void *)p_shmat,
                       (void **)&mrc_real.shmat, (void *)raw_shmat },
    [MRC_FN_SHMDT] = { "shmdt", WRAPPER("43"), (void *)p_shmdt, (void **)&mrc_real.shmdt, (void *)raw_shmdt },
    /* mov $12,%eax; syscall; mov __curbrk@GOT,%rdx; mov %rax,(%rdx) */
    [MRC_FN_BRK] = { "brk", "b8 0c 00 00 00 0f 05 48 8b 15 ?? ?? ?? ?? 48 89 02", (void *)p_brk,
                     (void **)&mrc_real.brk, (void *)raw_brk },
    [MRC_FN_LDSO_MUNMAP] = { "ld.so munmap", WRAPPER("0b"), (void *)p_ldso_munmap, NULL, NULL },
};

/* Whether code matches shape; returns the number of bytes the shape covers, or 0. */
static size_t shape_match(const uint8_t *code, const char *shape)
{
    size_t i = 0;
    for (const char *s = shape; *s; s += (s[2] ? 3 : 2), i++) {
        if (s[0] == '?')
            continue;
        unsigned v = (unsigned)strtoul((char[3]){ s[0], s[1], 0 }, NULL, 16);
        if (code[i] != v)
            return 0;
    }
    return i;
}

/* A jump someone else wrote: jmp rel32/rel8, jmp *mem, movabs $x,%reg (UCX bistro,
 * libfabric memhooks, Open MPI's patcher), push+ret, or a debugger's int3. */
static int foreign_jump(const uint8_t *c)
{
    return c[0] == 0xe9 || c[0] == 0xeb || (c[0] == 0xff && c[1] == 0x25) || c[0] == 0xcc ||
           c[0] == 0x68 || ((c[0] == 0x48 || c[0] == 0x49) && (c[1] & 0xf8) == 0xb8);
}

/* Messages about coverage: logged at info level now, and repeated once as a warning at
 * the first registration (mrc_patch_warn_pending), so a program that never registers
 * stays silent. A fixed buffer: this runs before anything may allocate. */
static char pending[1024];
static size_t pending_len;

__attribute__((format(printf, 1, 2))) static void note(const char *fmt, ...)
{
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(m, sizeof(m), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    MRC_INFO("%s", m);
    n = snprintf(pending + pending_len, sizeof(pending) - pending_len, "%s%s", pending_len ? "\n  " : "", m);
    if (n > 0)
        pending_len = pending_len + (size_t)n < sizeof(pending) ? pending_len + (size_t)n : sizeof(pending) - 1;
}

void mrc_patch_warn_pending(void)
{
    static int done;
    if (!pending_len || __atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL))
        return;
    MRC_WARN("%s", pending);
}

static unsigned patched_mask;
static int patched_count, patch_tried;

/* sbrk is not patched at start-up (glibc's sbrk calls brk, which is), but once another
 * library patches it, glibc's heap trimming (__sbrk with a negative increment) reaches
 * that library's hook instead of brk: it is chained like the others. */
#define FN_SBRK MRC_FN_COUNT
#define NFN (MRC_FN_COUNT + 1)

static uint8_t *entry_of[NFN];     /* watched entry points; NULL once given up */
static uint64_t head_of[NFN];      /* their first 8 bytes as we last left them */
static void *orig_of[NFN];         /* what our "original" path calls once chained */

static void watch_entry(int fn, uint8_t *entry)
{
    /* The head is replaced by one aligned 8-byte store; glibc aligns entries to 16. */
    if (!entry || ((uintptr_t)entry & 7))
        return;
    head_of[fn] = __atomic_load_n((uint64_t *)entry, __ATOMIC_RELAXED);
    __atomic_store_n(&entry_of[fn], entry, __ATOMIC_RELEASE);
}

/* What watches a function left unpatched. */
static const char *fallback(void)
{
    return mrc_g.watch_unmaps ? "the preload hook sees only calls through the PLT"
                              : "nothing watches it (MRCACHE_MONITOR has no preload)";
}

static int sys_mprotect(void *a, size_t len, int prot)
{
    return (int)SC(SYS_mprotect, a, len, prot, 0, 0, 0);
}

static int membarrier_ok;

static void sync_cores(void)
{
    /* Other threads may hold stale decoded instructions: make each serialise. */
    if (membarrier_ok)
        SC(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0, 0, 0, 0);
}

/* Writes the jump at entry. Returns 0 or -errno (the page could not be made writable). */
/* The pages holding the code bytes [p, p + n): their start and length, for mprotect. */
static void code_pages(const uint8_t *p, size_t n, uintptr_t *lo, size_t *len)
{
    uintptr_t psz = (uintptr_t)sysconf(_SC_PAGESIZE);
    *lo = (uintptr_t)p & ~(psz - 1);
    *len = (((uintptr_t)p + n + psz - 1) & ~(psz - 1)) - *lo;
}

static int write_jump(uint8_t *entry, void *hook)
{
    uint8_t code[PATCH_LEN] = { 0x49, 0xbb };           /* movabs $hook, %r11 */
    uint64_t h = (uint64_t)(uintptr_t)hook;
    memcpy(code + 2, &h, 8);
    code[10] = 0x41, code[11] = 0xff, code[12] = 0xe3;  /* jmp *%r11 */

    uintptr_t lo;
    size_t len;
    code_pages(entry, PATCH_LEN, &lo, &len);
    /* RWX, never RW: other threads may be executing elsewhere on these pages. */
    int rc = sys_mprotect((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC);
    if (rc)
        return rc;
    /* 1: a spin loop at the entry (one aligned 2-byte store), so a thread arriving now
     * waits instead of running half-old, half-new bytes; 2: the rest; 3: the first two
     * bytes, again in one store. */
    __atomic_store_n((uint16_t *)entry, (uint16_t)0xfeeb, __ATOMIC_SEQ_CST);
    sync_cores();
    memcpy(entry + 2, code + 2, PATCH_LEN - 2);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    sync_cores();
    uint16_t head;
    memcpy(&head, code, 2);
    __atomic_store_n((uint16_t *)entry, head, __ATOMIC_SEQ_CST);
    sync_cores();
    sys_mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
    return 0;
}

static int patch_one(enum mrc_fn fn, uint8_t *entry)
{
    const struct target *t = &targets[fn];
    if (!entry) {
        note("patch: %s not found; %s", t->name, fallback());
        return -ENOENT;
    }
    /* Two-byte stores must not straddle a cache line; glibc aligns entries to 16. */
    if ((uintptr_t)entry & 1) {
        note("patch: %s at %p is not aligned; left alone: %s", t->name, (void *)entry, fallback());
        return -EINVAL;
    }
    size_t n = shape_match(entry, t->shape);
    if (n && fn == MRC_FN_MREMAP) {
        /* The prologue is generic: the mremap system call must follow it. */
        int found = 0;
        for (size_t i = 0; i + 7 <= 96 && !found; i++)
            found = !memcmp(entry + i, "\xb8\x19\x00\x00\x00\x0f\x05", 7);
        n = found ? n : 0;
    }
    if (!n || n < PATCH_LEN) {
        if (foreign_jump(entry))
            note("patch: %s already starts with a jump (another library patched it: UCX, libfabric, "
                     "Open MPI?); not overwriting it: %s",
                     t->name, fallback());
        else
            note("patch: %s does not have the expected shape (bytes %02x %02x %02x %02x); left alone, "
                     "%s",
                     t->name, entry[0], entry[1], entry[2], entry[3], fallback());
        return -EINVAL;
    }
    /* The hook ends in mrc_real's call: if another library interposes the function
     * between us and libc, that call would come back through the patched entry. */
    if (t->real && *t->real != (void *)entry) {
        note("patch: %s is interposed by another library after libmrcache; not patching it: %s", t->name,
             fallback());
        return -EBUSY;
    }
    /* From here both the preload hook and the patched entry reach the kernel directly. */
    if (t->real)
        __atomic_store_n(t->real, t->raw, __ATOMIC_RELEASE);
    __atomic_fetch_or(&mrc_monitor_patched, 1u << fn, __ATOMIC_SEQ_CST);
    int rc = write_jump(entry, t->hook);
    if (rc) {
        __atomic_fetch_and(&mrc_monitor_patched, ~(1u << fn), __ATOMIC_SEQ_CST);
        note("patch: cannot make %s writable (%s); %s", t->name, strerror(-rc), fallback());
        return rc;
    }
    patched_mask |= 1u << fn;
    patched_count++;
    watch_entry(fn, entry);
    return 0;
}

/* ld.so keeps private copies of the wrappers it needs; dlclose unmaps through its own
 * munmap, which is not exported. Found by its exact shape in ld.so's code, and patched
 * only if exactly one 16-byte-aligned candidate exists. */
static uint8_t *find_ldso_munmap(void)
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
            if (p[0] == 0xb8 && p[1] == 0x0b && shape_match(p, targets[MRC_FN_LDSO_MUNMAP].shape)) {
                hit = p;
                hits++;
            }
    }
    return hits == 1 ? hit : NULL;
}

/* Why patching must not happen here, or NULL. */
static const char *step_aside_reason(void)
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
        return patched_mask;
    patch_tried = 1;
    const char *why = step_aside_reason();
    if (why) {
        note("patch: not patching libc: %s; %s", why,
             mrc_g.watch_unmaps ? "the preload hooks alone watch unmaps" : "NOTHING watches unmaps");
        return 0;
    }
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    if (!libc) {
        note("patch: libc.so.6 not found; %s",
             mrc_g.watch_unmaps ? "the preload hooks alone watch unmaps" : "NOTHING watches unmaps");
        return 0;
    }
    membarrier_ok = SC(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0, 0, 0, 0, 0) == 0;
    for (int fn = 0; fn < MRC_FN_COUNT; fn++) {
        uint8_t *entry = fn == MRC_FN_LDSO_MUNMAP ? find_ldso_munmap() : dlsym(libc, targets[fn].name);
        patch_one((enum mrc_fn)fn, entry);
    }
    if (patched_mask & (1u << MRC_FN_BRK))
        watch_entry(FN_SBRK, dlsym(libc, "sbrk"));
    /* The handle is kept: libc is never unloaded. */
    MRC_DEBUG("patch: %d of %d entry points patched", patched_count, MRC_FN_COUNT);
    return patched_mask;
}

const char *mrc_patch_summary(void)
{
    static char buf[16];
    if (!patched_count)
        return "";
    if (patched_count == MRC_FN_COUNT)
        return "patch";
    buf[0] = 0;
    int n = patched_count;
    memcpy(buf, "patch(", 6);
    buf[6] = (char)('0' + n);
    buf[7] = '/';
    buf[8] = (char)('0' + MRC_FN_COUNT);
    buf[9] = ')';
    buf[10] = 0;
    return buf;
}

/* ---- another library patching an entry point after us: chain it, or give it up ----
 * UCX 1.13 (libucm's constructor, UCX_MEM_MMAP_HOOK_MODE=bistro) writes a 5-byte
 * "jmp rel32" to its hook over the first bytes of our jump at munmap, mmap, mremap,
 * madvise, shmat, shmdt, brk and sbrk; its hooks then make the system call themselves,
 * so glibc's own unmaps would bypass us. Such a patcher makes the page executable again
 * with mprotect, which hooks_mprotect.c reports here. If the new first instruction is an
 * absolute jump (or a rel32 one, whose target we can make absolute), the entry gets our
 * jump back and the foreign jump moves into a trampoline that mrc_real's pointer calls:
 * entry -> our hook (invalidate) -> their hook -> kernel. Anything else is given up:
 * said once, with what is lost, and the allocator hooks resume. */

/* Our original path once chained: the other library's hook, unless this thread is in it
 * already. A patcher that chains as we do keeps a copy of the bytes it replaced (our old
 * jump) and calls it: that call comes back here, and then goes to the kernel. A signal
 * handler's call made while its thread is in the other hook goes to the kernel too. */
static __thread unsigned in_orig;

#define VIA_ORIG(fn, ftype, raw_call, ...)                                                   \
    do {                                                                                     \
        if (in_orig & (1u << (fn)))                                                          \
            return raw_call;                                                                 \
        in_orig |= 1u << (fn);                                                               \
        __typeof__(raw_call) r_ = ((ftype)__atomic_load_n(&orig_of[fn], __ATOMIC_ACQUIRE))(__VA_ARGS__); \
        in_orig &= ~(1u << (fn));                                                            \
        return r_;                                                                           \
    } while (0)

static void *raw_sbrk(intptr_t incr)
{
    if (!__curbrk)
        raw_brk(NULL);          /* learns the break, as glibc's sbrk does */
    char *cur = __curbrk;
    return incr == 0 || raw_brk(cur + incr) == 0 ? cur : (void *)-1;
}

static int o_munmap(void *a, size_t len)
{
    VIA_ORIG(MRC_FN_MUNMAP, int (*)(void *, size_t), raw_munmap(a, len), a, len);
}

static void *o_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    VIA_ORIG(MRC_FN_MMAP, void *(*)(void *, size_t, int, int, int, off_t), raw_mmap(a, len, prot, flags, fd, off),
             a, len, prot, flags, fd, off);
}

static void *o_mremap(void *old, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr;
    MRC_MREMAP_NEW_ADDR(flags, new_addr);
    VIA_ORIG(MRC_FN_MREMAP, void *(*)(void *, size_t, size_t, int, ...),
             raw_mremap(old, old_size, new_size, flags, new_addr), old, old_size, new_size, flags, new_addr);
}

static int o_madvise(void *a, size_t len, int advice)
{
    VIA_ORIG(MRC_FN_MADVISE, int (*)(void *, size_t, int), raw_madvise(a, len, advice), a, len, advice);
}

static void *o_shmat(int id, const void *a, int flags)
{
    VIA_ORIG(MRC_FN_SHMAT, void *(*)(int, const void *, int), raw_shmat(id, a, flags), id, a, flags);
}

static int o_shmdt(const void *a)
{
    VIA_ORIG(MRC_FN_SHMDT, int (*)(const void *), raw_shmdt(a), a);
}

static int o_brk(void *a)
{
    VIA_ORIG(MRC_FN_BRK, int (*)(void *), raw_brk(a), a);
}

static void *o_sbrk(intptr_t incr)
{
    VIA_ORIG(FN_SBRK, void *(*)(intptr_t), raw_sbrk(incr), incr);
}

/* libc's sbrk, chained: a shrinking call is glibc trimming its heap. monitor.c's sbrk
 * logic leaves that to brk's patch, which this call no longer reaches, hence the range
 * handled here; the preload sbrk hook still lands here through mrc_real.sbrk (libc's). */
static void *p_sbrk(intptr_t incr)
{
    if (incr >= 0 || !__atomic_load_n(&mrc_g.cache.active, __ATOMIC_RELAXED))
        return o_sbrk(incr);
    return mrc_monitor_sbrk_shrink(o_sbrk, incr);
}

static void *const hook_of[NFN] = {
    [MRC_FN_MUNMAP] = (void *)p_munmap, [MRC_FN_MMAP] = (void *)p_mmap, [MRC_FN_MREMAP] = (void *)p_mremap,
    [MRC_FN_MADVISE] = (void *)p_madvise, [MRC_FN_SHMAT] = (void *)p_shmat, [MRC_FN_SHMDT] = (void *)p_shmdt,
    [MRC_FN_BRK] = (void *)p_brk, [FN_SBRK] = (void *)p_sbrk,
};
/* Set into mrc_real once chained (sbrk's stays libc's, whose entry lands in p_sbrk);
 * ld.so's munmap has no mrc_real pointer: it is given up. */
static void *const via_orig_of[MRC_FN_COUNT] = {
    [MRC_FN_MUNMAP] = (void *)o_munmap, [MRC_FN_MMAP] = (void *)o_mmap, [MRC_FN_MREMAP] = (void *)o_mremap,
    [MRC_FN_MADVISE] = (void *)o_madvise, [MRC_FN_SHMAT] = (void *)o_shmat, [MRC_FN_SHMDT] = (void *)o_shmdt,
    [MRC_FN_BRK] = (void *)o_brk,
};
static const char *const lost_of[NFN] = {
    [MRC_FN_MUNMAP] = "glibc's own munmap calls (free of mmapped chunks, thread arenas)",
    [MRC_FN_MMAP] = "glibc's own MAP_FIXED mappings (thread arenas)",
    [MRC_FN_MREMAP] = "glibc's own mremap calls (realloc of mmapped chunks)",
    [MRC_FN_MADVISE] = "glibc's own madvise calls (thread stacks at thread exit, malloc_trim)",
    [MRC_FN_SHMAT] = "shmat(SHM_REMAP) not made through the PLT",
    [MRC_FN_SHMDT] = "shmdt not made through the PLT",
    [MRC_FN_BRK] = "heap trimming in free",
    [MRC_FN_LDSO_MUNMAP] = "dlclose's unmaps",
    [FN_SBRK] = "heap trimming in free",
};

/* Stubs and trampolines live in one page within a rel32 jump of libc: the new head of an
 * entry must be a single instruction inside its first 8 bytes. 32 bytes per chain. */
static uint8_t *near_page;
static size_t near_used;

static int near(const uint8_t *from, const uint8_t *to)
{
    int64_t d = (int64_t)((intptr_t)to - (intptr_t)from);
    return d > INT32_MIN / 2 && d < INT32_MAX / 2;
}

/* 32 free bytes of the page, made writable (and still executable: stubs already there
 * may be running), or NULL. */
static uint8_t *near_slot(const uint8_t *entry)
{
    long pg = sysconf(_SC_PAGESIZE);
    for (uintptr_t d = 1ul << 20; !near_page && d < (1ul << 30); d <<= 1)
        for (int s = -1; s <= 1 && !near_page; s += 2) {
            uintptr_t hint = ((uintptr_t)entry + (uintptr_t)(s * (intptr_t)d)) & ~(uintptr_t)(pg - 1);
            long p = SC(SYS_mmap, hint, pg, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                        -1, 0);
            if ((unsigned long)p > -4096ul)
                continue;
            if (near((uint8_t *)p, entry))
                near_page = (uint8_t *)p;
            else
                SC(SYS_munmap, p, pg, 0, 0, 0, 0);   /* a kernel that took the hint as a hint */
        }
    if (!near_page || near_used + 32 > (size_t)pg || !near(near_page + near_used, entry) ||
        sys_mprotect(near_page, (size_t)pg, PROT_READ | PROT_WRITE | PROT_EXEC))
        return NULL;
    near_used += 32;
    return near_page + near_used - 32;
}

/* jmp *0(%rip); .quad target: an absolute jump that clobbers no register. */
static void abs_jump(uint8_t *at, uint64_t target)
{
    static const uint8_t op[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    memcpy(at, op, 6);
    memcpy(at + 6, &target, 8);
}

/* Moves the jump at c into t (16 bytes). 1 if c starts with one that still works
 * elsewhere: jmp rel32 (made absolute), movabs $x,%reg; jmp *%reg (copied: UCX when its
 * hook is far, libfabric, Open MPI, our own), jmp *disp32(%rip) (through the same slot,
 * which its owner may change later). 0 for anything else. */
static int move_jump(const uint8_t *c, uint8_t *t)
{
    if (c[0] == 0xe9) {
        int32_t d;
        memcpy(&d, c + 1, 4);
        abs_jump(t, (uint64_t)(uintptr_t)(c + 5) + (uint64_t)(int64_t)d);
        return 1;
    }
    if ((c[0] == 0x48 || c[0] == 0x49) && (c[1] & 0xf8) == 0xb8) {
        uint8_t reg = c[1] & 7;
        size_t n = c[0] == 0x48 ? (c[10] == 0xff && c[11] == (0xe0 | reg) ? 12 : 0)
                                : (c[10] == 0x41 && c[11] == 0xff && c[12] == (0xe0 | reg) ? 13 : 0);
        memcpy(t, c, n);
        return n != 0;
    }
    if (c[0] == 0xff && c[1] == 0x25) {
        int32_t d;
        memcpy(&d, c + 2, 4);
        uint64_t slot = (uint64_t)(uintptr_t)(c + 6) + (uint64_t)(int64_t)d;
        t[0] = 0x49, t[1] = 0xbb;                       /* movabs $slot, %r11 */
        memcpy(t + 2, &slot, 8);
        t[10] = 0x41, t[11] = 0xff, t[12] = 0x23;       /* jmp *(%r11) */
        return 1;
    }
    return 0;
}

/* Replaces the head old of entry by a jump to stub, in one aligned 8-byte store: a thread
 * fetching the entry meanwhile sees all of the old first instruction or all of the new
 * one (a locked store within one cache line; instruction fetch is coherent with it), and
 * membarrier then makes every thread serialise before it runs user code again, so none
 * executes bytes it decoded earlier. Only bytes 0-7 change (5-7 keep their values): with
 * a two-instruction foreign jump (movabs; jmp *%reg) a thread already past the movabs
 * runs the unchanged jmp at offset 10 into the other hook, as it would have a moment
 * earlier. Returns the new head, or 0 if the page could not be written or the bytes
 * changed meanwhile (whoever changed them makes the page executable again: we are
 * called again then). */
static uint64_t swap_head(uint8_t *entry, uint64_t old, const uint8_t *stub)
{
    uint8_t b[8];
    memcpy(b, &old, 8);
    int32_t rel = (int32_t)((intptr_t)stub - (intptr_t)(entry + 5));
    b[0] = 0xe9;
    memcpy(b + 1, &rel, 4);
    uint64_t head;
    memcpy(&head, b, 8);
    uintptr_t lo;
    size_t len;
    code_pages(entry, 8, &lo, &len);
    if (sys_mprotect((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC))
        return 0;
    int ok = __atomic_compare_exchange_n((uint64_t *)entry, &old, head, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    sync_cores();
    sys_mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
    return ok ? head : 0;
}

static const char *fn_name(int fn)
{
    return fn == FN_SBRK ? "sbrk" : targets[fn].name;
}

/* Whose code a jump at c leads to, for the log. */
static const char *jump_owner(const uint8_t *c)
{
    uint8_t t[16] = { 0 };
    uint64_t to = 0;
    Dl_info di;
    if (!move_jump(c, t))
        return "unknown code";
    memcpy(&to, t[0] == 0xff ? t + 6 : t + 2, 8);
    if (t[0] == 0x49 && t[12] == 0x23)
        to = *(const uint64_t *)(uintptr_t)to;          /* through a slot */
    return dladdr((void *)(uintptr_t)to, &di) && di.dli_fname ? di.dli_fname : "anonymous memory";
}

static void give_up(int fn, uint8_t *entry)
{
    const uint8_t *c = entry;
    __atomic_store_n(&entry_of[fn], NULL, __ATOMIC_RELEASE);
    if (fn < MRC_FN_COUNT) {
        __atomic_fetch_and(&mrc_monitor_patched, ~(1u << fn), __ATOMIC_SEQ_CST);
        patched_mask &= ~(1u << fn);
        patched_count--;
    }
    /* Calls through the preload hook now reach whatever sits at the entry, as they would
     * without us; the guard in o_* stops a loop if that ends in a copy of our jump. */
    if (fn < MRC_FN_COUNT && targets[fn].real) {
        __atomic_store_n(&orig_of[fn], entry, __ATOMIC_RELEASE);
        __atomic_store_n(targets[fn].real, via_orig_of[fn], __ATOMIC_RELEASE);
    }
    int resumed = 0, unrouted = 0;
    if (mrc_g.malloc_usable)   /* the allocator hooks predict free's and trimming's unmaps */
        resumed = !__atomic_exchange_n(&mrc_g.watch_malloc, 1, __ATOMIC_SEQ_CST);
    /* The program's frees must reach those hooks again. */
    if (resumed && mrc_route_free_back())
        unrouted = 1;
    /* What the other library's code unmapped since it overwrote ours went unseen (and
     * frees through routed slots until now): nothing cached before may be trusted. */
    if (__atomic_load_n(&mrc_g.cache.active, __ATOMIC_RELAXED))
        mrc_cache_invalidate(&mrc_g.cache, 0, UINT64_MAX, MRC_INVAL_SOURCE_LOST);
    char m[400];
    snprintf(m, sizeof(m),
             "patch: %s was overwritten by another library after libmrcache patched it (bytes %02x %02x %02x %02x, "
             "code that cannot be chained); %s are NO LONGER SEEN%s; %s",
             fn_name(fn), c[0], c[1], c[2], c[3], lost_of[fn],
             resumed ? " (the allocator hooks are back on: free's unmaps and heap trimming are predicted)"
             : mrc_g.watch_malloc ? " (the allocator hooks still predict free's unmaps and heap trimming)"
                                  : " (MRCACHE_MALLOC_HOOKS=0 or no preload source: nothing predicts them)",
             fn == FN_SBRK ? "calls to sbrk itself go to the other library" : fallback());
    if (__atomic_load_n(&mrc_g.cache.active, __ATOMIC_RELAXED))
        MRC_WARN("%s", m);        /* the first registration has passed: say it now */
    else
        note("%s", m);
    if (unrouted)
        mrc_stop_caching("patch: the PLT calls of free cannot all be sent back through the allocator hooks "
                         "(a read-only page could not be made writable, or another library rebound one), "
                         "so free's unmaps would go unseen");
}

static void chain(int fn, uint8_t *entry, uint64_t now)
{
    uint8_t *slot = fn != MRC_FN_LDSO_MUNMAP ? near_slot(entry) : NULL;
    if (!slot || !move_jump(entry, slot + 16)) {
        if (slot)
            near_used -= 32;
        if (near_page)
            sys_mprotect(near_page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC);
        give_up(fn, entry);
        return;
    }
    abs_jump(slot, (uint64_t)(uintptr_t)hook_of[fn]);
    sys_mprotect(near_page, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_EXEC);
    /* The original path first: from here calls through the preload hooks reach the other
     * library too, and once the entry lands in our hook again its calls go there. */
    __atomic_store_n(&orig_of[fn], slot + 16, __ATOMIC_RELEASE);
    if (fn < MRC_FN_COUNT)
        __atomic_store_n(targets[fn].real, via_orig_of[fn], __ATOMIC_RELEASE);
    uint64_t head = swap_head(entry, now, slot);
    if (!head) {
        /* Changed again under us, or not writable: the next check decides. */
        head_of[fn] = 0;
        return;
    }
    head_of[fn] = head;
    if (mrc_log_level >= MRC_LOG_INFO) {
        uint8_t was[8];
        memcpy(was, &now, 8);
        MRC_INFO("patch: %s was patched by %s after libmrcache (%02x %02x %02x %02x %02x); chained: our hook runs "
                 "first, then theirs",
                 fn_name(fn), jump_owner(slot + 16), was[0], was[1], was[2], was[3], was[4]);
    }
}

static int check_wanted, check_busy;

void mrc_patch_code_changed(const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    int touched = 0;
    for (int fn = 0; fn < NFN && !touched; fn++) {
        uintptr_t e = (uintptr_t)__atomic_load_n(&entry_of[fn], __ATOMIC_ACQUIRE) & ~(pg - 1);
        touched = e && a < e + pg && a + len > e;
    }
    if (!touched)
        return;
    /* One thread checks at a time; a call arriving meanwhile (another thread, a signal
     * handler) leaves a request that the checking thread sees before it stops. */
    __atomic_store_n(&check_wanted, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&check_wanted, __ATOMIC_SEQ_CST) && !__atomic_exchange_n(&check_busy, 1, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&check_wanted, 0, __ATOMIC_SEQ_CST);
        for (int fn = 0; fn < NFN; fn++) {
            uint8_t *e = entry_of[fn];
            uint64_t now = e ? __atomic_load_n((uint64_t *)e, __ATOMIC_ACQUIRE) : 0;
            if (e && now != head_of[fn])
                chain(fn, e, now);
        }
        __atomic_store_n(&check_busy, 0, __ATOMIC_RELEASE);
    }
}

/* ---- start-up self-test ---- */

static void arm(const void *p, size_t len)
{
    __atomic_store_n(&probe_seen, 0, __ATOMIC_SEQ_CST);
    probe_lo = (uintptr_t)p;
    __atomic_store_n(&probe_hi, (uintptr_t)p + len, __ATOMIC_SEQ_CST);
}

static unsigned disarm(void)
{
    __atomic_store_n(&probe_hi, 0, __ATOMIC_SEQ_CST);
    return __atomic_load_n(&probe_seen, __ATOMIC_SEQ_CST);
}

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

unsigned mrc_patch_selftest(int preload)
{
    if (!patched_count) {
        if (preload)
            note("unmap coverage incomplete: libc not patched; unmaps glibc and ld.so make themselves "
                 "(thread stacks, dlclose%s) are unseen", mrc_g.watch_malloc ? "" : ", free, heap trimming");
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
    long pg = sysconf(_SC_PAGESIZE);
    size_t len = 4 * (size_t)pg;
    char *p = raw_mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return 0;
    p[0] = 1;
    arm(p, len);
    l_madvise(p, (size_t)pg, MADV_DONTNEED);
    ok |= disarm() & (1u << MRC_FN_MADVISE);
    arm(p, len);
    l_mmap(p, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ok |= disarm() & (1u << MRC_FN_MMAP);
    arm(p, len);
    l_mremap(p + 2 * pg, 2 * (size_t)pg, (size_t)pg, 0);      /* shrink in place */
    ok |= disarm() & (1u << MRC_FN_MREMAP);
    arm(p, len);
    l_munmap(p, len);
    ok |= disarm() & (1u << MRC_FN_MUNMAP);
    /* glibc's free of an mmapped chunk: munmap from inside libc. 40 MiB is above the
     * largest dynamic mmap threshold, so glibc's threshold does not move. */
    size_t big = 40u << 20;
    char *m = __libc_malloc(big);
    if (m) {
        arm(m - 4096, big + 8192);
        __libc_free(m);
        if (disarm() & (1u << MRC_FN_MUNMAP))
            ok |= 1u << MRC_FN_COUNT;     /* marker: the internal path arrived */
    }
    if ((patched_mask & (1u << MRC_FN_BRK)) && l_sbrk && mrc_thread_single()) {
        /* Another thread's malloc could move the break between our two steps. */
        char *cur = l_sbrk(0);
        if (cur != (void *)-1 && l_sbrk(pg) == cur) {
            arm(cur, (size_t)pg + 1);
            l_sbrk(-pg);
            ok |= disarm() & (1u << MRC_FN_BRK);
        }
    }
    static const char *const names[] = { "munmap", "mmap(MAP_FIXED)", "mremap", "madvise", "shmat",
                                         "shmdt", "brk", "dlclose" };
    char line[512];
    size_t n = 0;
    unsigned missing = 0;
    for (int fn = 0; fn < MRC_FN_COUNT; fn++) {
        const char *how;
        if (patched_mask & (1u << fn))
            how = (fn == MRC_FN_SHMAT || fn == MRC_FN_SHMDT || fn == MRC_FN_LDSO_MUNMAP ||
                   (fn == MRC_FN_BRK && !(ok & (1u << fn))))
                      ? "patched"
                      : (ok & (1u << fn)) ? "patched, tested" : "patched, test FAILED";
        else if (preload && fn != MRC_FN_LDSO_MUNMAP)
            how = "preload only";
        else
            how = "unseen";
        if ((patched_mask & (1u << fn)) && strstr(how, "FAILED"))
            missing |= 1u << fn;
        if (!(patched_mask & (1u << fn)))
            missing |= 1u << fn;
        int k = snprintf(line + n, sizeof(line) - n, "%s%s: %s", n ? "; " : "", names[fn], how);
        if (k > 0 && (size_t)k < sizeof(line) - n)
            n += (size_t)k;
    }
    snprintf(line + n, sizeof(line) - n, "; glibc-internal free: %s",
             (ok & (1u << MRC_FN_COUNT)) ? "seen" : "NOT seen");
    if (!(ok & (1u << MRC_FN_COUNT)))
        missing |= 1u << MRC_FN_MUNMAP;
    MRC_INFO("unmap coverage: %s", line);
    if (missing)
        note("unmap coverage incomplete: %s", line);
    return ok;
}
