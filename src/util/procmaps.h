/* procmaps.h - what the kernel says of this process's mappings: the lines of
 * /proc/self/maps parsed, the mapping holding an address, a System V attachment, what
 * on-demand paging can serve, and the hugetlb page sizes and their file systems, without
 * which a line's page size cannot be read. Invariants: no malloc (files are read into a
 * stack buffer); every call keeps errno; the readers open a file, so none is for a hook's
 * path, while the hugetlb answers are plain loads of what was learned at start. */
#ifndef MRC_PROCMAPS_H
#define MRC_PROCMAPS_H

#include <stdint.h>

/* One line of /proc/self/maps: "start-end perms off maj:min ino path". */
struct mrc_procmaps_line {
    uint64_t start, end;
    uint64_t off;             /* the file offset of the mapping's first byte */
    uint64_t dev, ino;        /* 0, 0 for anonymous memory */
    char perms[5];            /* "rwxp", "rw-s": read, write, exec, s(hared) or p(rivate) */
    const char *path;         /* the rest of the line ("", "[stack]", a path): the call's only */
};

/* Calls fn(line, arg) for each line of path (a file in /proc/PID/maps' format) that
 * parses, until fn returns non-zero. 0, or -errno if path cannot be opened. */
int mrc_procmaps_each_line(const char *path, int (*fn)(const struct mrc_procmaps_line *l, void *arg), void *arg);

/* Whether a mapping of path is a device's memory (VM_IO/VM_PFNMAP: no page to fault in
 * or pin): a file under /dev/ other than shm, /dev/zero and hugetlbfs mounted there. */
int mrc_procmaps_device_path(const char *path);

/* The kernel's mapping (VMA) holding an address, as the kernel has it now. */
struct mrc_vma {
    uint64_t start, end;
    uint64_t page_size;       /* the mapping's page size (hugetlb: its huge page) */
    uint32_t readable, writable;
    uint32_t shared;          /* VM_SHARED, or memory a file or shmem backs: not private anonymous */
};

/* Asks the kernel which mapping holds addr (PROCMAP_QUERY, else a read of
 * /proc/self/maps): 0 and *v, or -1 where nothing is mapped or neither answers. */
int mrc_procmaps_read_vma(uint64_t addr, struct mrc_vma *v);

/* The same answer from /proc/self/maps alone: what mrc_procmaps_read_vma falls back on
 * where the kernel lacks PROCMAP_QUERY. */
int mrc_procmaps_read_vma_text(uint64_t addr, struct mrc_vma *v);

/* Whether every page of [first, last] is mapped readable and writable and none is a
 * device's, read from /proc/self/maps: what on-demand paging can serve (a fault on a
 * read-only page fails the device's access). */
int mrc_procmaps_demand_pageable(uint64_t first, uint64_t last);

/* The System V attachment starting at addr, read from /proc/self/maps: 1 and its end,
 * segment id and page shift, or 0. */
int mrc_procmaps_read_sysv(uint64_t addr, uint64_t *end, uint64_t *id, uint32_t *page_shift);

/* Learns the hugetlb page sizes there are and the file systems (devices) that have them:
 * /proc/meminfo's default size, a hugetlb memfd of each size, /proc/self/mountinfo's
 * hugetlbfs mounts. Once, from the constructor, before the program's threads exist;
 * until then every mapping is of the base page. */
void mrc_procmaps_learn_hugetlb(void);

/* The page shift of the hugetlb file system on dev, or 0 (not hugetlb). */
uint32_t mrc_procmaps_huge_shift(uint64_t dev);

/* The page shift of the default hugetlb page size (0: no hugetlb). */
uint32_t mrc_procmaps_huge_default(void);

/* The page shift of the largest hugetlb page size there is (0: none). */
uint32_t mrc_procmaps_huge_shift_max(void);

#endif
