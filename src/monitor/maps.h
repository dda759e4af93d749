/* maps.h - the registry of special mappings: ranges that are hugetlb (their page size),
 * shared (another process may change their pages) or a regular file's (identity, offset);
 * seeded from the lines of /proc/self/maps (util/procmaps.h parses them), kept by
 * unmap.c. What it lacks is private anonymous memory.
 * Invariants: no malloc; readers take no lock, writers a short one over its own memory;
 * a record goes only by a change begun after it was made; errno is kept. */
#ifndef MRC_MAPS_H
#define MRC_MAPS_H

#include <stdint.h>

#define MRC_MAP_SHARED 0x1u   /* VM_SHARED: MAP_SHARED, System V shm, shared anonymous */
#define MRC_MAP_FILE 0x2u     /* dev, ino and off say which bytes of which file it maps */
#define MRC_MAP_SYSV 0x4u     /* a System V attachment: ino is the segment's id */

struct mrc_map_attr {
    uint32_t flags;           /* MRC_MAP_* */
    uint32_t page_shift;      /* log2 of its page size; 0: the base page */
    uint64_t dev, ino, off;   /* off: the file offset of the range's first byte */
};

/* The words the hooks read (one load each while they are 0). */
struct mrc_maps_words {
    uint32_t on;              /* the registry is kept (not under MRCACHE_MONITOR=none) */
    uint32_t n;               /* records */
    uint32_t nhuge;           /* ... with a page size above the base page */
    uint32_t nrefused;        /* ... shared, where shared registrations are not cached */
    uint32_t nfile;           /* ... of files, where registrations over them are cached */
    uint32_t files_cached;    /* a registration was cached over a file's mapping: a
                               * truncation must look (set once, by mrc_maps_admit) */
    uint32_t interest;        /* nrefused, and nfile until files_cached: what an admission
                               * must look at (see mrc_maps_admit) */
    uint32_t lost;            /* a record could not be kept: every answer is the worst case */
    uint64_t gen;             /* records made so far */
    uint64_t lo, hi;          /* the records' bounds: what lies outside needs no look */
};
extern struct mrc_maps_words mrc_maps;

/* Starts the registry (on: whether to keep it at all): has the hugetlb page sizes and
 * their file systems learned (mrc_procmaps_learn_hugetlb), and seeds it from
 * /proc/self/maps. shared_cached: registrations over shared memory will be cached (then
 * truncating a shared file must look too). From the constructor, before the program's
 * threads exist. */
void mrc_maps_start(uint64_t base_page, int shared_cached, int on);

/* In a forked child (one thread): the lock is made anew, and the registry read again
 * from /proc/self/maps if a thread of the parent was changing it. */
void mrc_maps_child_reset(void);

static inline int mrc_maps_any(void)
{
    return __atomic_load_n(&mrc_maps.n, __ATOMIC_RELAXED) != 0;
}

/* The generation to pass to mrc_maps_set/mrc_maps_clear for a change made by a call that
 * begins now: read before the call. */
static inline uint64_t mrc_maps_gen(void)
{
    return __atomic_load_n(&mrc_maps.gen, __ATOMIC_ACQUIRE);
}

/* [start, end) is now mapped as a says (a NULL: nothing special): records made at or
 * before gen over it go, then a's is made. */
void mrc_maps_set(uint64_t start, uint64_t end, const struct mrc_map_attr *a, uint64_t gen);

/* [start, end) is no longer mapped: records made at or before gen over it go (cut at the
 * ends). sysv_id >= 0: only the attachments of that System V segment. */
void mrc_maps_clear(uint64_t start, uint64_t end, uint64_t gen, int64_t sysv_id);

/* The largest page size of the mappings overlapping [start, end): the base page unless
 * a hugetlb record is there (one load while there is none). */
uint64_t mrc_maps_page_size(uint64_t start, uint64_t end);

/* Whether [start, end) may hold memory other than private anonymous memory of the base
 * page: a record overlaps it, or the registry is not kept or lost. */
int mrc_maps_special(uint64_t start, uint64_t end);

/* The record holding addr: 1 and its range and attributes, or 0. */
int mrc_maps_at(uint64_t addr, uint64_t *start, uint64_t *end, struct mrc_map_attr *a);

/* The end of the last attachment of System V segment id in [addr, limit), or 0. */
uint64_t mrc_maps_sysv_end(uint64_t addr, uint64_t limit, uint64_t id);

/* For a registration about to be made over [first, last]: 1 if part of it is shared
 * memory and shared registrations are not cached (the registration is then its caller's
 * alone), else 0, after setting files_cached if it lies over a file's mapping (from then
 * on truncations look). Called only while mrc_maps.interest is non-zero. */
int mrc_maps_admit(uint64_t first, uint64_t last);

/* The address ranges of the records mapping bytes [lo, hi) of file (dev, ino), rounded
 * to their page size: up to max (1 to MRC_FILE_RANGES) of them in start[]/len[] (more
 * are folded into the last). Returns how many. */
#define MRC_FILE_RANGES 8
unsigned mrc_maps_file_ranges(uint64_t dev, uint64_t ino, uint64_t lo, uint64_t hi, uint64_t *start, uint64_t *len,
                              unsigned max);

/* What mmap(flags, fd, off) maps, in a: 1 if it is special (hugetlb, shared, a regular
 * file), 0 if private anonymous memory of the base page (or device memory). Asks
 * fstat(2) about a file. */
int mrc_maps_describe(int flags, int fd, uint64_t off, struct mrc_map_attr *a);

#endif
