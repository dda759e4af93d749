/* route.c - points the loaded objects' PLT calls of free straight at the next
 * allocator's free while libmrcache's free would only pass them on (the allocator hooks
 * idle: libc's entry points, patched, see the allocator's unmaps), and back at ours when
 * the hooks resume. An exported free costs every call a second indirect jump (measured:
 * +0.3 cycles per free in this VM's fast mode, +1.7 in its slow one), for nothing while
 * the hooks idle. libc's own calls use a GLOB_DAT slot, and stay ours.
 * Invariants: only JUMP_SLOT relocations of free change (a GLOB_DAT slot is the address
 * a program may compare, and stays ours); a slot changes only if it holds the address
 * being replaced, or (lazy binding) still points into its own object's PLT; libmrcache's
 * own slots are left alone; RELRO pages are made writable for the one store, with raw
 * system calls (the mprotect hook is not involved), and read-only again. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "interpose/real.h"
#include "interpose/route.h"

struct route {
    void *from, *to;
    uintptr_t self;      /* libmrcache's load address */
    int lazy;            /* unbound slots (still in their own PLT) change too */
    unsigned changed;
};

/* Dynamic-section pointers: glibc relocates them in place, except in objects it maps
 * read-only (the vDSO); an unrelocated one lies below the load address. */
static uintptr_t dyn_ptr(const struct dl_phdr_info *info, ElfW(Addr) p)
{
    return p < info->dlpi_addr ? info->dlpi_addr + p : p;
}

static int in_object(const struct dl_phdr_info *info, uintptr_t a)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

/* ld.so made the whole pages of the RELRO segment read-only after relocating (a last
 * partial page stays writable): a slot on one of those is written between two
 * mprotects. */
static void store_slot(const struct dl_phdr_info *info, void **slot, void *to)
{
    uintptr_t s = (uintptr_t)slot, pg = (uintptr_t)sysconf(_SC_PAGESIZE), page = s & ~(pg - 1);
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = (info->dlpi_addr + ph->p_vaddr) & ~(pg - 1);
        uintptr_t hi = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz) & ~(pg - 1);
        if (ph->p_type != PT_GNU_RELRO || page < lo || page >= hi)
            continue;
        if (syscall(SYS_mprotect, page, pg, PROT_READ | PROT_WRITE))
            return;          /* left as it is: still correct, only slower */
        __atomic_store_n(slot, to, __ATOMIC_RELEASE);
        syscall(SYS_mprotect, page, pg, PROT_READ);
        return;
    }
    __atomic_store_n(slot, to, __ATOMIC_RELEASE);
}

static int route_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    struct route *r = arg;
    (void)size;
    if (info->dlpi_addr == r->self)
        return 0;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    if (!dyn)
        return 0;
    uintptr_t jmprel = 0, symtab = 0, strtab = 0;
    size_t pltrelsz = 0;
    ElfW(Sxword) pltrel = 0;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_JMPREL: jmprel = dyn_ptr(info, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: pltrelsz = dyn->d_un.d_val; break;
        case DT_PLTREL: pltrel = dyn->d_un.d_val; break;
        case DT_SYMTAB: symtab = dyn_ptr(info, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strtab = dyn_ptr(info, dyn->d_un.d_ptr); break;
        default: break;
        }
    }
    if (!jmprel || !symtab || !strtab || pltrel != DT_RELA)
        return 0;
    const ElfW(Rela) *rel = (const ElfW(Rela) *)jmprel;
    for (size_t i = 0; i < pltrelsz / sizeof(*rel); i++) {
        if (ELF64_R_TYPE(rel[i].r_info) != R_X86_64_JUMP_SLOT)
            continue;
        const ElfW(Sym) *sym = (const ElfW(Sym) *)symtab + ELF64_R_SYM(rel[i].r_info);
        if (strcmp((const char *)strtab + sym->st_name, "free"))
            continue;
        void **slot = (void **)(info->dlpi_addr + rel[i].r_offset);
        void *cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (cur == r->from || (r->lazy && cur != r->to && in_object(info, (uintptr_t)cur))) {
            store_slot(info, slot, r->to);
            r->changed++;
        }
    }
    return 0;
}

unsigned mrc_route_free(int direct)
{
    void (*next)(void *) = __atomic_load_n(&mrc_real.free, __ATOMIC_ACQUIRE);
    Dl_info self;
    /* Only while ours is the free the name resolves to: a free preloaded before us (a
     * sanitizer's) owns the calls, and an unbound slot would go to it, not to next. */
    if (!next || dlsym(RTLD_DEFAULT, "free") != (void *)mrc_free_self ||
        !dladdr((void *)mrc_route_free, &self))
        return 0;
    struct route r = {
        .from = direct ? (void *)mrc_free_self : (void *)next,
        .to = direct ? (void *)next : (void *)mrc_free_self,
        .self = (uintptr_t)self.dli_fbase,
        .lazy = direct,
    };
    dl_iterate_phdr(route_object, &r);
    return r.changed;
}
