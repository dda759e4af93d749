/* patch.c - rewrites the first 13 bytes of libc's munmap, mmap, mremap, madvise, shmat,
 * shmdt, brk (sbrk calls brk directly) and ld.so's private munmap into
 * "movabs $hook, %r11; jmp *%r11". The hooks run monitor.c's logic, whose mrc_real
 * pointers then make the system call inline: the original code never runs again.
 * Invariants: a function is patched only if its first bytes are the syscall-wrapper
 * shape this file knows (anything else, e.g. another library's jump, is refused and
 * left alone); a thread entering during the write sees either the old entry, a
 * two-byte spin loop, or the whole jump; hooks never allocate and keep errno. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
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

#include "interpose/real.h"
#include "interpose/state.h"
#include "monitor/monitor.h"
#include "monitor/patch.h"
#include "util/log.h"

#ifndef MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE (1 << 5)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE (1 << 6)
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
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
    void *new_addr = NULL;
    if (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
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
    void *new_addr = NULL;
    if (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
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
static int write_jump(uint8_t *entry, void *hook)
{
    uint8_t code[PATCH_LEN] = { 0x49, 0xbb };           /* movabs $hook, %r11 */
    uint64_t h = (uint64_t)(uintptr_t)hook;
    memcpy(code + 2, &h, 8);
    code[10] = 0x41, code[11] = 0xff, code[12] = 0xe3;  /* jmp *%r11 */

    long psz = sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)entry & ~(uintptr_t)(psz - 1);
    size_t len = (((uintptr_t)entry + PATCH_LEN + (uintptr_t)psz - 1) & ~(uintptr_t)(psz - 1)) - lo;
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

/* A few threads already running make the brk step unsafe: another thread's malloc
 * could move the break between our two steps. */
static int single_threaded(void)
{
    char buf[2048];
    int fd = (int)SC(SYS_open, "/proc/self/status", O_RDONLY | O_CLOEXEC, 0, 0, 0, 0);
    if (fd < 0)
        return 0;
    long n = SC(SYS_read, fd, buf, sizeof(buf) - 1, 0, 0, 0);
    SC(SYS_close, fd, 0, 0, 0, 0, 0);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    const char *t = strstr(buf, "\nThreads:");
    return t && strtol(t + 9, NULL, 10) == 1;
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
    if ((patched_mask & (1u << MRC_FN_BRK)) && l_sbrk && single_threaded()) {
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
