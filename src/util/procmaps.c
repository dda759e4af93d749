/* procmaps.c - the kernel readers (procmaps.h): /proc files read line by line into a
 * stack buffer and parsed in place; PROCMAP_QUERY asked first for the mapping holding an
 * address, the text read only where the kernel cannot answer; the hugetlb file systems
 * in a small static table written once at start. Invariants: no malloc, no lock (the
 * table is written before the program's threads exist); errno is kept; a line longer
 * than the buffer is dropped, never half parsed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "util/procmaps.h"
#include "util/sys.h"

/* ---- reading /proc files line by line, into a stack buffer ---- */

static unsigned long hex(const char **s)
{
    unsigned long v = 0;
    for (;; (*s)++) {
        char c = **s;
        unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0') : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10) : 16;
        if (d == 16)
            return v;
        v = v * 16 + d;
    }
}

static unsigned long dec(const char **s)
{
    unsigned long v = 0;
    for (; **s >= '0' && **s <= '9'; (*s)++)
        v = v * 10 + (unsigned long)(**s - '0');
    return v;
}

static void skip_spaces(const char **s)
{
    while (**s == ' ' || **s == '\t')
        (*s)++;
}

static int prefix(const char *s, const char *p)
{
    return strncmp(s, p, strlen(p)) == 0;
}

/* Calls fn(line, arg) for each line of path until it returns non-zero; 0, or -errno if
 * the file cannot be opened. Keeps errno. */
static int read_lines(const char *path, int (*fn)(const char *line, void *arg), void *arg)
{
    int saved = errno;
    int fd = mrc_sys_open(path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) {
        int err = errno;
        errno = saved;
        return -err;
    }
    char buf[8192];
    size_t have = 0;
    int stop = 0;
    while (!stop) {
        ssize_t got = mrc_sys_read(fd, buf + have, sizeof(buf) - 1 - have);
        if (got <= 0)
            break;
        have += (size_t)got;
        buf[have] = 0;
        char *line = buf, *nl;
        while (!stop && (nl = strchr(line, '\n'))) {
            *nl = 0;
            stop = fn(line, arg);
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        if (have == sizeof(buf) - 1)
            have = 0;   /* a line longer than the buffer: dropped */
        memmove(buf, line, have);
    }
    mrc_sys_close(fd);
    errno = saved;
    return 0;
}

static int parse_line(const char *s, struct mrc_procmaps_line *l)
{
    l->start = hex(&s);
    if (*s++ != '-')
        return -1;
    l->end = hex(&s);
    skip_spaces(&s);
    for (int i = 0; i < 4; i++)
        l->perms[i] = *s ? *s++ : '-';
    l->perms[4] = 0;
    skip_spaces(&s);
    l->off = hex(&s);
    skip_spaces(&s);
    unsigned long maj = hex(&s);
    if (*s++ != ':')
        return -1;
    unsigned long min = hex(&s);
    l->dev = makedev(maj, min);
    skip_spaces(&s);
    l->ino = dec(&s);
    skip_spaces(&s);
    l->path = s;
    return 0;
}

struct each {
    int (*fn)(const struct mrc_procmaps_line *l, void *arg);
    void *arg;
};

static int each_fn(const char *line, void *arg)
{
    const struct each *e = arg;
    struct mrc_procmaps_line l;
    return parse_line(line, &l) == 0 && e->fn(&l, e->arg);
}

int mrc_procmaps_each_line(const char *path, int (*fn)(const struct mrc_procmaps_line *l, void *arg), void *arg)
{
    struct each e = { fn, arg };
    return read_lines(path, each_fn, &e);
}

int mrc_procmaps_device_path(const char *path)
{
    return prefix(path, "/dev/") && !prefix(path, "/dev/shm/") && !prefix(path, "/dev/zero") &&
           !prefix(path, "/dev/hugepages");
}

/* ---- hugetlb: the page sizes there are, and the file systems that have them ---- */

#define MAX_HUGE_FS 8
static struct { uint64_t dev; uint32_t shift; } huge_fs[MAX_HUGE_FS];
static unsigned nhuge_fs;
static uint32_t huge_default, huge_max;   /* page shifts (0: no hugetlb) */

static void huge_fs_add(uint64_t dev, uint32_t shift)
{
    for (unsigned i = 0; i < nhuge_fs; i++)
        if (huge_fs[i].dev == dev)
            return;
    if (nhuge_fs < MAX_HUGE_FS) {
        huge_fs[nhuge_fs].dev = dev;
        huge_fs[nhuge_fs++].shift = shift;
    }
    huge_max = shift > huge_max ? shift : huge_max;
}

uint32_t mrc_procmaps_huge_shift(uint64_t dev)
{
    for (unsigned i = 0; i < nhuge_fs; i++)
        if (huge_fs[i].dev == dev)
            return huge_fs[i].shift;
    return 0;
}

uint32_t mrc_procmaps_huge_default(void)
{
    return huge_default;
}

uint32_t mrc_procmaps_huge_shift_max(void)
{
    return huge_max;
}

static uint32_t log2_of(uint64_t v)
{
    return v ? 63u - (uint32_t)__builtin_clzll(v) : 0;
}

/* hugetlbfs mounts: "... maj:min root mountpoint ... - hugetlbfs source opts,pagesize=2M" */
static int mount_line(const char *line, void *arg)
{
    (void)arg;
    const char *s = line, *fs = strstr(line, " - hugetlbfs ");
    if (!fs)
        return 0;
    dec(&s);
    skip_spaces(&s);
    dec(&s);
    skip_spaces(&s);
    unsigned long maj = dec(&s);
    if (*s++ != ':')
        return 0;
    unsigned long min = dec(&s);
    uint32_t shift = huge_default;
    const char *ps = strstr(fs, "pagesize=");
    if (ps) {
        ps += 9;
        unsigned long v = dec(&ps);
        shift = log2_of(v) + (*ps == 'G' ? 30u : *ps == 'M' ? 20u : *ps == 'K' ? 10u : 0u);
    }
    if (shift)
        huge_fs_add(makedev(maj, min), shift);
    return 0;
}

static int meminfo_line(const char *line, void *arg)
{
    (void)arg;
    if (!prefix(line, "Hugepagesize:"))
        return 0;
    const char *s = line + 13;
    skip_spaces(&s);
    unsigned long kb = dec(&s);
    huge_default = kb ? log2_of(kb) + 10 : 0;
    return 1;
}

#ifndef MFD_HUGETLB
#define MFD_HUGETLB 4u
#endif
#define MFD_HUGE_SHIFT_ 26

/* The file system of hugetlb memory of page shift (0: the default size): what anonymous
 * hugetlb mappings, SHM_HUGETLB segments and hugetlb memfds live on. */
static void probe_huge(uint32_t shift)
{
    int fd = mrc_sys_memfd_create("mrc-probe", 1u /* MFD_CLOEXEC */ | MFD_HUGETLB | (shift << MFD_HUGE_SHIFT_));
    if (fd < 0)
        return;
    struct stat st;
    if (mrc_sys_fstat(fd, &st) == 0)
        huge_fs_add(st.st_dev, shift ? shift : huge_default);
    mrc_sys_close(fd);
}

void mrc_procmaps_learn_hugetlb(void)
{
    int saved = errno;
    read_lines("/proc/meminfo", meminfo_line, NULL);
    if (huge_default) {
        probe_huge(0);
        probe_huge(21);   /* x86-64's sizes */
        probe_huge(30);
        read_lines("/proc/self/mountinfo", mount_line, NULL);
    }
    errno = saved;
}

/* ---- a System V attachment ---- */

struct sysv_find {
    uint64_t addr, end, id;
    uint32_t shift;
    int found;
};

static int sysv_line(const struct mrc_procmaps_line *l, void *arg)
{
    struct sysv_find *f = arg;
    if (l->start != f->addr)
        return 0;
    f->found = prefix(l->path, "/SYSV");
    f->end = l->end;
    f->id = l->ino;
    f->shift = mrc_procmaps_huge_shift(l->dev);
    return 1;
}

int mrc_procmaps_read_sysv(uint64_t addr, uint64_t *end, uint64_t *id, uint32_t *page_shift)
{
    struct sysv_find f = { .addr = addr };
    mrc_procmaps_each_line("/proc/self/maps", sysv_line, &f);
    if (!f.found)
        return 0;
    *end = f.end;
    *id = f.id;
    *page_shift = f.shift;
    return 1;
}

/* ---- the mapping holding an address ---- */

/* PROCMAP_QUERY (Linux 6.11) answers for one address without formatting every line of
 * /proc/self/maps; its ABI, for headers that predate it. */
struct procmap_query {
    uint64_t size, query_flags, query_addr;
    uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY _IOWR('f', 17, struct procmap_query)
#define PROCMAP_READABLE 0x1u
#define PROCMAP_WRITABLE 0x2u
#define PROCMAP_SHARED 0x8u

static int query_vma(int fd, uint64_t addr, struct mrc_vma *v)
{
    struct procmap_query q = { .size = sizeof(q), .query_addr = addr };
    if (mrc_sys_ioctl(fd, PROCMAP_QUERY, &q) != 0)
        return -1;
    v->start = q.vma_start;
    v->end = q.vma_end;
    v->page_size = q.vma_page_size;
    v->readable = !!(q.vma_flags & PROCMAP_READABLE);
    v->writable = !!(q.vma_flags & PROCMAP_WRITABLE);
    v->shared = (q.vma_flags & PROCMAP_SHARED) || q.inode || q.dev_major || q.dev_minor;
    return 0;
}

struct vma_find {
    uint64_t addr;
    struct mrc_vma *v;
    int found;
};

static int vma_line(const struct mrc_procmaps_line *l, void *arg)
{
    struct vma_find *f = arg;
    if (f->addr < l->start || f->addr >= l->end)
        return 0;
    struct mrc_vma *v = f->v;
    v->start = l->start;
    v->end = l->end;
    uint32_t shift = mrc_procmaps_huge_shift(l->dev);
    v->page_size = shift ? UINT64_C(1) << shift : (uint64_t)sysconf(_SC_PAGESIZE);
    v->readable = l->perms[0] == 'r';
    v->writable = l->perms[1] == 'w';
    v->shared = l->perms[3] == 's' || l->ino || l->dev;
    f->found = 1;
    return 1;
}

int mrc_procmaps_read_vma_text(uint64_t addr, struct mrc_vma *v)
{
    struct vma_find f = { addr, v, 0 };
    mrc_procmaps_each_line("/proc/self/maps", vma_line, &f);
    return f.found ? 0 : -1;
}

int mrc_procmaps_read_vma(uint64_t addr, struct mrc_vma *v)
{
    int saved = errno, rc = -1;
    int fd = mrc_sys_open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
        rc = query_vma(fd, addr, v);
        mrc_sys_close(fd);
    }
    if (rc != 0 && errno != ENOENT)   /* ENOENT: the kernel's answer, nothing there */
        rc = mrc_procmaps_read_vma_text(addr, v);
    errno = saved;
    return rc;
}

/* ---- memory a device may page on demand ---- */

struct demand_walk {
    uint64_t next, last;   /* the first byte not yet seen mapped; the range's last */
    int ok;
};

static int demand_line(const struct mrc_procmaps_line *l, void *arg)
{
    struct demand_walk *w = arg;
    if (l->end <= w->next)
        return 0;
    if (l->start > w->next || l->perms[0] != 'r' || l->perms[1] != 'w' || mrc_procmaps_device_path(l->path))
        return 1;   /* a hole, a page it could not write, or a device's */
    w->next = l->end;
    w->ok = l->end == 0 || l->end - 1 >= w->last;
    return w->ok;
}

int mrc_procmaps_demand_pageable(uint64_t first, uint64_t last)
{
    struct demand_walk w = { .next = first, .last = last };
    mrc_procmaps_each_line("/proc/self/maps", demand_line, &w);
    return w.ok;
}
