/* test_route.c - where the program's calls of free go (src/runtime/route.c). With libc
 * patched and the allocator hooks idle, the PLT slots of free in this program and in
 * libmrc_lazyfree.so (linked for lazy binding, so unbound when libmrcache starts) must
 * hold glibc's free: EXPECT_ROUTE=1. Otherwise (MRCACHE_DIRECT_FREE=0, the hooks running,
 * a sanitizer's or another free resolved first) they must hold the free the process
 * resolves first, and a counting free of the test's own (ownfree.c, preloaded first or
 * compiled in with -DOWN_FREE) must still receive every call.
 * LATE_PATCH names a library that patches libc's munmap after libmrcache, in a form that
 * cannot be chained (fakepatch.c): the hooks resume, the slots must come back through
 * libmrcache's free, and a free that unmaps registered memory must leave no stale MR
 * (EXPECT_STALE=1 inverts that verdict). REFUSE=1 first forbids making memory writable
 * without execute (seccomp); the slot of a program linked with -z now is then on a page
 * that cannot be made writable again, and caching must stop: EXPECT_OFF=1; so too
 * THIRD_PARTY=1, a GOT hook of the program's free taken while it was routed. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include "deny.h"
#include "stale.h"

void mrc_lazyfree(void *p);

#ifdef OWN_FREE
#include "ownfree.c"
#endif

static int env_flag(const char *name)
{
    const char *v = getenv(name);
    return v && atoi(v);
}

struct slot_query {
    const char *name;      /* a part of the object's path; "" for the program */
    void **slot;
};

static int find_slot(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct slot_query *q = arg;
    (void)size;
    const char *n = info->dlpi_name ? info->dlpi_name : "";
    if (*q->name ? !strstr(n, q->name) : *n != 0)
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    uintptr_t rel = 0, sym = 0, str = 0, n_rel = 0;
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        uintptr_t v = dyn->d_un.d_ptr;
        if (dyn->d_tag == DT_JMPREL)
            rel = v;
        else if (dyn->d_tag == DT_PLTRELSZ)
            n_rel = dyn->d_un.d_val / sizeof(ElfW(Rela));
        else if (dyn->d_tag == DT_SYMTAB)
            sym = v;
        else if (dyn->d_tag == DT_STRTAB)
            str = v;
    }
    for (uintptr_t i = 0; rel && sym && str && i < n_rel; i++) {
        const ElfW(Rela) *r = (const ElfW(Rela) *)rel + i;
        const ElfW(Sym) *s = (const ElfW(Sym) *)sym + ELF64_R_SYM(r->r_info);
        if (ELF64_R_TYPE(r->r_info) == R_X86_64_JUMP_SLOT && !strcmp((const char *)str + s->st_name, "free"))
            q->slot = (void **)(info->dlpi_addr + r->r_offset);
    }
    return 1;
}

/* The JUMP_SLOT of free in the object whose path contains name ("" = the program). */
static void **free_slot(const char *name)
{
    struct slot_query q = { name, NULL };
    dl_iterate_phdr(find_slot, &q);
    return q.slot;
}

static void *libc_free, *first_free;
static unsigned long *own_calls;   /* ownfree.c's counter, if a free of ours comes first */

static const char *owner(void *fn)
{
    Dl_info di;
    return dladdr(fn, &di) && di.dli_fname ? di.dli_fname : "?";
}

/* The permissions /proc/self/maps gives the page holding a ("r--p", ...), or "". */
static const char *perms_of(const void *a, char out[8])
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long lo, hi;
    out[0] = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, out) == 3 && (uintptr_t)a >= lo && (uintptr_t)a < hi)
            break;
        else
            out[0] = 0;
    if (f)
        fclose(f);
    return out;
}

static int program_relro(struct dl_phdr_info *info, size_t size, void *arg)
{
    uintptr_t *range = arg;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            range[0] = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr) & ~(uintptr_t)4095;
            range[1] = (info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz) & ~(uintptr_t)4095;
        }
    return 1;   /* the program comes first */
}

/* A slot ld.so made read-only (RELRO) is read-only still: routing keeps the hardening. */
static void check_protection(void **slot)
{
    uintptr_t range[2] = { 0, 0 }, a = (uintptr_t)slot;
    char perms[8];
    dl_iterate_phdr(program_relro, range);
    if (a >= range[0] && a < range[1])
        CHECKF(!strcmp(perms_of(slot, perms), "r--p"), "the program's slot is on a %s page, not r--p", perms);
}

/* Each slot holds glibc's free (routed) or the process's first free. */
static void check_slots(int routed)
{
    void *volatile nothing = NULL;   /* opaque: the compiler drops a plain free(NULL) */
    free(nothing);          /* binds the program's and the library's slots now if nothing did */
    mrc_lazyfree(nothing);
    void **prog = free_slot(""), **lib = free_slot("libmrc_lazyfree");
    void *want = routed ? libc_free : first_free;
    CHECK(lib != NULL);
#ifndef OWN_FREE
    CHECK(prog != NULL);    /* with a free of its own, the program calls it directly */
#endif
    if (prog) {
        CHECKF(*prog == want, "the program's free goes to %s, not %s", owner(*prog), owner(want));
        check_protection(prog);
    }
    if (lib)
        CHECKF(*lib == want, "the library's free goes to %s, not %s", owner(*lib), owner(want));
}

static void test_initial_slots(void)
{
    int routed = env_flag("EXPECT_ROUTE");
    CHECK(first_free != libc_free);   /* a preload's free comes first */
    int m = mrcache_monitors();
    if (routed)
        CHECKF(m >= 0 && !(m & MRCACHE_MONITOR_MALLOC), "monitors 0x%x: the allocator hooks run", m);
    check_slots(routed);
}

/* Every call still arrives where the process resolved free, and frees. */
static void test_frees_reach_their_free(void)
{
    unsigned long before = own_calls ? *own_calls : 0;
    for (int i = 0; i < 1000; i++) {
        void *p = malloc((size_t)(i * 37 % 4096) + 1);
        CHECK(p != NULL);
        if (i % 2)
            free(p);
        else
            mrc_lazyfree(p);
    }
    if (own_calls)
        CHECKF(*own_calls - before >= 1000, "ownfree saw %lu of 1000 frees", *own_calls - before);
}

/* Forbids mprotect to make memory writable without execute; what a container policy may
 * do. The library's patching makes code writable and executable at once, so it still
 * can; a RELRO page cannot be made writable again. */
static void refuse_writable(void)
{
    CHECK(deny_syscall(SYS_mprotect, 1, PROT_READ | PROT_WRITE, EACCES) == 0);
}

static int caching_on(void)
{
    struct mrcache_stats s;
    return mrcache_stats_read(sizeof(s), &s) == 0 && s.enabled;
}

/* A GOT hook of the program's free taken after routing, as a profiler's plthook would:
 * it passes the calls on to what it found in the slot, glibc's free. */
static void (*hooked_next)(void *);
static void hooked_free(void *q)
{
    hooked_next(q);
}

static void hook_own_free(void)
{
    void **s = free_slot("");
    void *page = (void *)((uintptr_t)s & ~(uintptr_t)4095);
    CHECK(s && mprotect(page, 4096, PROT_READ | PROT_WRITE) == 0);
    hooked_next = (void (*)(void *))*s;
    *s = (void *)hooked_free;
    mprotect(page, 4096, PROT_READ);
}

static void test_late_patch(void)
{
    /* The cache in use first, as when a transport plugin loads after registrations. */
    char *p = map_anon(NULL, 1u << 20, 0);
    struct ibv_mr *a = ibv_reg_mr(pd, p, 1u << 20, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    CHECK(a && write_visible(a, p, 1u << 20, 0x11));
    ibv_dereg_mr(a);
    if (env_flag("THIRD_PARTY"))
        hook_own_free();
    if (env_flag("REFUSE"))
        refuse_writable();
    CHECKF(dlopen(getenv("LATE_PATCH"), RTLD_NOW | RTLD_LOCAL) != NULL, "%s", dlerror());
    int m = mrcache_monitors();
    if (env_flag("MALLOC_HOOKS_OFF")) {
        munmap(p, 1u << 20);
        return;
    }
    CHECKF(m >= 0 && (m & MRCACHE_MONITOR_MALLOC), "monitors 0x%x: the allocator hooks did not resume", m);
    if (env_flag("EXPECT_OFF")) {
        CHECK(!caching_on());
        /* Every registration reaches the NIC now, the same buffer's too, and the
         * statistics count them as uncached. */
        struct mrcache_stats s0, s1;
        CHECK(mrcache_stats_read(sizeof(s0), &s0) == 0);
        uint64_t r0 = nic_regs();
        for (int i = 0; i < 2; i++) {
            struct ibv_mr *b = ibv_reg_mr(pd, p, 1u << 20, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
            CHECK(b && write_visible(b, p, 1u << 20, (unsigned char)(0x30 + i)));
            ibv_dereg_mr(b);
        }
        CHECK(mrcache_stats_read(sizeof(s1), &s1) == 0);
        CHECKF(s1.uncached - s0.uncached == 2, "%llu of 2 counted as uncached", (unsigned long long)(s1.uncached - s0.uncached));
        if (!nic.real)
            CHECKF(nic_regs() - r0 == 2, "%llu NIC registrations for 2 requests", (unsigned long long)(nic_regs() - r0));
    } else {
        CHECK(caching_on());
        check_slots(0);
        /* What the late library's code unmapped before we noticed went unseen: the
         * entry cached before it is gone, and the same buffer registers anew. */
        uint64_t r0 = nic_regs();
        struct ibv_mr *b = ibv_reg_mr(pd, p, 1u << 20, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
        CHECK(b && write_visible(b, p, 1u << 20, 0x33));
        ibv_dereg_mr(b);
        CHECKF(nic_regs() - r0 == 1, "%llu NIC registrations: the entry cached before the patch was served",
               (unsigned long long)(nic_regs() - r0));
    }
    munmap(p, 1u << 20);
}

int main(void)
{
    expect_stale = env_flag("EXPECT_STALE");
    libc_free = dlsym(dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD), "free");
    first_free = dlsym(RTLD_DEFAULT, "free");
#ifdef OWN_FREE
    own_calls = &mrc_test_free_calls;
#else
    own_calls = dlsym(RTLD_DEFAULT, "mrc_test_free_calls");
#endif
    open_nic();
    new_pd();
#undef RUN
#define RUN(fn) (new_pd(), check_run(#fn, fn))
    RUN(test_initial_slots);
    RUN(test_frees_reach_their_free);
    if (getenv("LATE_PATCH")) {
        RUN(test_late_patch);
        /* glibc unmaps the chunk inside free, through the other library's munmap: only
         * the allocator hooks can see it, and only if the program's free reaches them. */
        RUN(test_free_of_mmapped_chunk);
    }
    CHECK_EXIT();
}
