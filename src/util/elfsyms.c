/* elfsyms.c - a function's definition looked up in an ELF file's symbol tables, read in
 * blocks with pread: 64-bit little-endian files only (the others define nothing here);
 * a note looked up in the loaded objects' PT_NOTE segments.
 * Invariants: bounded memory (two blocks of a raw mapping); every offset read is checked
 * against the file's size; a malformed file defines nothing. */
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/stat.h>

#include "util/elfsyms.h"
#include "util/sys.h"

#define BLOCK 4096

struct file {
    int fd;
    uint64_t size;
};

static int read_at(const struct file *f, uint64_t off, void *buf, uint64_t len)
{
    if (off > f->size || len > f->size - off)
        return -1;
    return mrc_sys_pread(f->fd, buf, len, (off_t)off) == (ssize_t)len ? 0 : -1;
}

/* The string table, a block at a time: symbols name strings mostly in the table's order,
 * so one block serves many in turn. */
struct strings {
    const Elf64_Shdr *sh;
    uint64_t at, len;   /* the block held: [at, at+len) of the table */
    char buf[BLOCK];
};

/* The index in names of the string at off in the table, or -1. */
static int name_index(const struct file *f, struct strings *t, uint32_t off, const char *const *names, unsigned n)
{
    enum { LONGEST = 64 };   /* longer than any name asked for */
    if (off >= t->sh->sh_size)
        return -1;
    uint64_t want = t->sh->sh_size - off < LONGEST ? t->sh->sh_size - off : LONGEST;
    if (off < t->at || off + want > t->at + t->len) {
        uint64_t len = t->sh->sh_size - off < BLOCK ? t->sh->sh_size - off : BLOCK;
        if (read_at(f, t->sh->sh_offset + off, t->buf, len))
            return -1;
        t->at = off;
        t->len = len;
    }
    const char *str = t->buf + (off - t->at);
    for (unsigned i = 0; i < n; i++) {
        size_t l = strlen(names[i]);
        if (l < want && !memcmp(str, names[i], l) && str[l] == 0)
            return (int)i;
    }
    return -1;
}

static unsigned scan(const struct file *f, const Elf64_Shdr *symtab, const Elf64_Shdr *strtab,
                     const char *const *names, unsigned n)
{
    unsigned found = 0;
    struct block {
        struct strings t;
        Elf64_Sym syms[BLOCK / sizeof(Elf64_Sym)];
    } *m = mrc_raw_map(sizeof(struct block), 0);   /* 8 KiB: not on a caller's stack */
    if (!m)
        return 0;
    struct strings *t = &m->t;
    Elf64_Sym *syms = m->syms;
    t->sh = strtab;
    uint64_t count = symtab->sh_size / sizeof(Elf64_Sym);
    for (uint64_t i = 0; i < count;) {
        uint64_t k = count - i < BLOCK / sizeof(Elf64_Sym) ? count - i : BLOCK / sizeof(Elf64_Sym);
        if (read_at(f, symtab->sh_offset + i * sizeof(Elf64_Sym), syms, k * sizeof(Elf64_Sym))) {
            found = 0;
            break;
        }
        for (uint64_t j = 0; j < k; j++) {
            const Elf64_Sym *s = &syms[j];
            if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_shndx == SHN_UNDEF || !s->st_value)
                continue;
            int x = name_index(f, t, s->st_name, names, n);
            if (x >= 0)
                found |= 1u << x;
        }
        i += k;
    }
    mrc_raw_unmap(m, sizeof(struct block));
    return found;
}

unsigned mrc_elf_defines(const char *path, const char *const *names, unsigned n)
{
    struct file f = { mrc_sys_open(path, O_RDONLY | O_CLOEXEC, 0), 0 };
    if (f.fd < 0)
        return 0;
    unsigned found = 0;
    struct stat st;
    Elf64_Ehdr eh;
    if (mrc_sys_fstat(f.fd, &st) || (f.size = (uint64_t)st.st_size, read_at(&f, 0, &eh, sizeof(eh))) ||
        memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_shentsize != sizeof(Elf64_Shdr))
        goto out;
    /* .symtab when present (it has every definition), else .dynsym. */
    Elf64_Shdr best = { .sh_type = SHT_NULL }, link = { .sh_type = SHT_NULL };
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        if (read_at(&f, eh.e_shoff + (uint64_t)i * sizeof(sh), &sh, sizeof(sh)))
            goto out;
        if ((sh.sh_type == SHT_SYMTAB || (sh.sh_type == SHT_DYNSYM && best.sh_type != SHT_SYMTAB)) &&
            sh.sh_link < eh.e_shnum)
            best = sh;
    }
    if (best.sh_type == SHT_NULL ||
        read_at(&f, eh.e_shoff + (uint64_t)best.sh_link * sizeof(link), &link, sizeof(link)) ||
        link.sh_type != SHT_STRTAB)
        goto out;
    found = scan(&f, &best, &link, names, n);
out:
    mrc_sys_close(f.fd);
    return found;
}

struct note_find {
    const char *owner;
    uint32_t type;
    const char *found;
};

static int note_in(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct note_find *nf = arg;
    size_t olen = strlen(nf->owner) + 1;
    for (unsigned i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        size_t align = ph->p_align == 8 ? 8 : 4;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof(*nh);
            size_t nsz = (nh->n_namesz + align - 1) & ~(align - 1), dsz = (nh->n_descsz + align - 1) & ~(align - 1);
            if (nsz > (size_t)(end - name) || dsz > (size_t)(end - name) - nsz)
                break;
            /* At least the owner and its NUL: Go pads its name with NULs. */
            if (nh->n_type == nf->type && nh->n_namesz >= olen && !memcmp(name, nf->owner, olen)) {
                nf->found = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : "the program";
                return 1;
            }
            p = name + nsz + dsz;
        }
    }
    return 0;
}

const char *mrc_elf_loaded_note(const char *owner, uint32_t type)
{
    struct note_find nf = { owner, type, NULL };
    dl_iterate_phdr(note_in, &nf);
    return nf.found;
}
