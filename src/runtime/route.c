/* route.c - while libmrcache's free would only pass every call on (the allocator hooks
 * idle: libc's patched entry points see the allocator's unmaps themselves), the PLT
 * calls of free in the objects loaded before our constructor go straight to the next
 * allocator's free, and come back when the hooks resume. Interposing free costs every
 * call a second jump (about +0.5 cycles here, +1.7 in this VM's slow mode: 1-5% of a
 * malloc-heavy program), for nothing while the hooks idle.
 * Invariants: only JUMP_SLOT relocations of free that ld.so bound to libmrcache's free
 * change (a GLOB_DAT slot, where code reads free's address, never does); a lazy slot is
 * first bound by ld.so itself, through its own PLT stub, so each object's lookup rules
 * (symbolic, an earlier preload's free, an auditor) decide; routing runs once, in the
 * constructor, while the process has one thread, on objects pinned with RTLD_NODELETE,
 * so a recorded slot stays its object's; the way back writes only recorded slots (no
 * ld.so call, no allocation, no lock): safe inside any hook. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/route.h"
#include "util/log.h"
#include "util/real.h"
#include "util/sys.h"
#include "util/thread.h"

#define ROUTE_MAX 64

struct slot {
    void **at;
    uintptr_t ro_page;    /* its page, if ld.so made it read-only after relocating (RELRO) */
};

/* Found while ld.so's object list is locked, acted on after (dlopen takes its lock). */
struct candidate {
    const char *name;     /* the object's, as ld.so knows it ("" for the program) */
    uintptr_t base;
    struct slot s;
    uintptr_t stub;       /* the slot's own lazy PLT stub, if it points there: unbound */
};

static struct candidate cands[ROUTE_MAX];
static unsigned ncands;
static struct slot routed[ROUTE_MAX];
static unsigned nrouted;
static int route_on;
static uintptr_t page_size;
static void (*self)(void *);    /* libmrcache's own free */

/* Writes one slot, keeping its page's protection. Returns 0 or -errno. */
static int store_slot(const struct slot *s, void *to)
{
    if (!s->ro_page) {
        __atomic_store_n(s->at, to, __ATOMIC_RELEASE);
        return 0;
    }
    int saved = errno, rc = 0;
    /* The system call itself: the exported mprotect would look for patched code. */
    if (mrc_sys_mprotect((void *)s->ro_page, page_size, PROT_READ | PROT_WRITE)) {
        rc = -errno;
    } else {
        __atomic_store_n(s->at, to, __ATOMIC_RELEASE);
        /* If refused (a split past vm.max_map_count) the page stays writable and the
         * slot is still right: only ld.so's hardening of that page is lost. */
        if (mrc_sys_mprotect((void *)s->ro_page, page_size, PROT_READ))
            MRC_WARN("free: the read-only page at %p stays writable (mprotect: errno %d)", (void *)s->ro_page, errno);
    }
    errno = saved;
    return rc;
}

/* The same while no other thread runs: a slot on a read-only page is written through
 * /proc/self/mem (mem, open; else -1), as a debugger would, and the protection is never
 * touched. Measured: after the two mprotects of store_slot every later mmap+munmap of
 * the process was ~1.5% slower (6.49 vs 6.31 us for 64 KiB; through /proc/self/mem 6.38
 * vs 6.43). Not with other threads: the kernel copies the bytes with no promise of one
 * 8-byte store, and a thread calling free could read half a pointer. */
static int store_slot_alone(int mem, const struct slot *s, void *to)
{
    if (!s->ro_page || mem < 0)
        return store_slot(s, to);
    long n = mrc_sys_pwrite(mem, &to, sizeof(to), (off_t)(uintptr_t)s->at);
    return n == (long)sizeof(to) ? 0 : store_slot(s, to);
}

/* The first segment of the type, or (PT_LOAD) the executable one holding [a, a+len). */
static const ElfW(Phdr) *segment(const struct dl_phdr_info *info, uint32_t type, uintptr_t a, size_t len)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == type &&
            (type != PT_LOAD || ((ph->p_flags & PF_X) && ph->p_memsz >= len && a >= lo && a - lo <= ph->p_memsz - len)))
            return ph;
    }
    return NULL;
}

/* Whether v is relocation index's own lazy PLT stub, where an unbound slot points:
 * "push $index" (after an endbr64 in an IBT PLT), in an executable segment. */
static int lazy_stub(const struct dl_phdr_info *info, uintptr_t v, size_t index)
{
    if (!segment(info, PT_LOAD, v, 9))
        return 0;
    const uint8_t *p = (const uint8_t *)v;
    static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
    if (!memcmp(p, endbr64, 4))
        p += 4;
    uint32_t pushed;
    memcpy(&pushed, p + 1, 4);
    return p[0] == 0x68 && pushed == index;
}

static int collect(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size, (void)arg;
    const ElfW(Phdr) *dyn = segment(info, PT_DYNAMIC, 0, 0), *relro = segment(info, PT_GNU_RELRO, 0, 0);
    if (!dyn || segment(info, PT_LOAD, (uintptr_t)self, 1))
        return 0;     /* no dynamic section, or libmrcache itself */
    uintptr_t jmprel = 0, symtab = 0, strtab = 0;
    size_t pltrelsz = 0;
    ElfW(Sxword) pltrel = 0;
    for (const ElfW(Dyn) *d = (const ElfW(Dyn) *)(info->dlpi_addr + dyn->p_vaddr); d->d_tag != DT_NULL; d++) {
        /* ld.so relocates these in place, except in objects it maps read-only (the
         * vDSO): an unrelocated one lies below the load address. */
        uintptr_t v = d->d_un.d_ptr < info->dlpi_addr ? info->dlpi_addr + d->d_un.d_ptr : d->d_un.d_ptr;
        switch (d->d_tag) {
        case DT_JMPREL: jmprel = v; break;
        case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
        case DT_PLTREL: pltrel = d->d_un.d_val; break;
        case DT_SYMTAB: symtab = v; break;
        case DT_STRTAB: strtab = v; break;
        default: break;
        }
    }
    if (!jmprel || !symtab || !strtab || pltrel != DT_RELA)
        return 0;
    /* ld.so's RELRO rule: whole pages from the start's page to the end's page. */
    uintptr_t ro_lo = 0, ro_hi = 0;
    if (relro) {
        ro_lo = (info->dlpi_addr + relro->p_vaddr) & ~(page_size - 1);
        ro_hi = (info->dlpi_addr + relro->p_vaddr + relro->p_memsz) & ~(page_size - 1);
    }
    const ElfW(Rela) *rel = (const ElfW(Rela) *)jmprel;
    for (size_t i = 0; i < pltrelsz / sizeof(*rel) && ncands < ROUTE_MAX; i++) {
        if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT)
            continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab + ELF64_R_SYM(rel[i].r_info);
        if (strcmp((const char *)strtab + sym->st_name, "free"))
            continue;
        uintptr_t at = info->dlpi_addr + rel[i].r_offset, page = at & ~(page_size - 1);
        uintptr_t v = (uintptr_t)__atomic_load_n((void **)at, __ATOMIC_ACQUIRE);
        cands[ncands++] = (struct candidate){
            .name = info->dlpi_name ? info->dlpi_name : "",
            .base = info->dlpi_addr,
            .s = { (void **)at, page >= ro_lo && page < ro_hi ? page : 0 },
            .stub = lazy_stub(info, v, i) ? v : 0,
        };
    }
    return 0;
}

/* Keeps the object loaded for good, so that its slot stays where we recorded it. The
 * program itself is never unloaded. */
static int pin(const struct candidate *c)
{
    if (!*c->name)
        return 1;
    void *h = dlopen(c->name, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    if (!h) {
        dlerror();   /* the program's next dlerror() must not find ours */
        return 0;
    }
    struct link_map *lm = NULL;
    int same = dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_addr == c->base;
    dlclose(h);
    return same;
}

unsigned mrc_route_free_direct(void (*self_free)(void *))
{
    void (*next)(void *) = __atomic_load_n(&mrc_real.free, __ATOMIC_ACQUIRE);
    long pg = sysconf(_SC_PAGESIZE);
    /* Alone, no other thread can load or unload objects, or call free, meanwhile. */
    if (!next || pg <= 0 || nrouted || !mrc_thread_single())
        return 0;
    int saved = errno;
    page_size = (uintptr_t)pg;
    self = self_free;
    ncands = 0;
    dl_iterate_phdr(collect, NULL);
    int mem = mrc_sys_open("/proc/self/mem", O_RDWR | O_CLOEXEC, 0);
    for (unsigned i = 0; i < ncands; i++) {
        const struct candidate *c = &cands[i];
        uintptr_t v = (uintptr_t)__atomic_load_n(c->s.at, __ATOMIC_ACQUIRE);
        if (v && v == c->stub) {
            /* ld.so binds it as the program's first call would, to whatever that
             * object's lookup finds; free(NULL) does nothing in any allocator. */
            ((void (*)(void *))v)(NULL);
            v = (uintptr_t)__atomic_load_n(c->s.at, __ATOMIC_ACQUIRE);
        }
        /* Pinned only if routed: an object we leave alone stays unloadable. */
        if (v == (uintptr_t)self && pin(c) && !store_slot_alone(mem, &c->s, (void *)next))
            routed[nrouted++] = c->s;
    }
    if (mem >= 0)
        mrc_sys_close(mem);
    __atomic_store_n(&route_on, nrouted != 0, __ATOMIC_RELEASE);
    errno = saved;
    return nrouted;
}

int mrc_route_free_back(void)
{
    if (!__atomic_load_n(&route_on, __ATOMIC_ACQUIRE))
        return 0;
    void *next = (void *)__atomic_load_n(&mrc_real.free, __ATOMIC_ACQUIRE);
    int rc = 0;
    for (unsigned i = 0; i < nrouted; i++) {
        void *v = __atomic_load_n(routed[i].at, __ATOMIC_ACQUIRE);
        if (v == (void *)self)
            continue;   /* back already (a call cut short by fork, say) */
        /* Rebound since by someone else (a GOT hooker) who may pass the calls on to
         * the allocator's free it found there: those frees would skip the hooks. */
        int r = v == next ? store_slot(&routed[i], (void *)self) : -EBUSY;
        if (r)
            rc = r;
    }
    /* On failure it stays on: a later call (a forked child's) tries again. */
    if (!rc)
        __atomic_store_n(&route_on, 0, __ATOMIC_RELEASE);
    return rc;
}
