/* test_monitor.c - the monitors on their own, against a fake sink that records what they
 * publish: no cache, no runtime, no preload. Each munmap-family call must announce the
 * range the kernel takes (rounded to pages, to huge pages where the registry of special
 * mappings says so) before the call and the same range after it with the same ticket;
 * calls that take nothing (mmap without MAP_FIXED, advice known to keep pages, growing
 * in place) announce nothing; nothing at all while the sink is not armed; glibc's free of
 * an mmapped chunk announces the chunk's mapping; shmdt announces every piece of a split
 * attachment; the registry keeps, cuts and moves its records and says when a
 * registration was cached over a file's mapping, after which truncation and fallocate
 * announce the mappings they change. */
#include <fcntl.h>
#include <linux/falloc.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "check.h"
#include "monitor/files.h"
#include "monitor/glibc_heap.h"
#include "monitor/maps.h"
#include "monitor/unmap.h"
#include "util/procmaps.h"
#include "util/real.h"

#define MAXEV 32

struct event {
    int done;                   /* 0: begin, 1: done */
    uint64_t addr, len, ticket;
    enum mrc_inval_cause cause;
};

static struct {
    uint32_t armed;
    unsigned n;
    uint64_t next_ticket;
    struct event ev[MAXEV];
    const char *lost;
} fs;

static uint64_t fake_begin(void *arg, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    (void)arg;
    uint64_t t = ++fs.next_ticket;
    if (fs.n < MAXEV)
        fs.ev[fs.n++] = (struct event){ 0, addr, len, t, cause };
    return t;
}

static void fake_done(void *arg, uint64_t ticket, uint64_t addr, uint64_t len, enum mrc_inval_cause cause)
{
    (void)arg;
    if (fs.n < MAXEV)
        fs.ev[fs.n++] = (struct event){ 1, addr, len, ticket, cause };
}

static void fake_lost(const char *lost, const char *still)
{
    (void)still;
    fs.lost = lost;
}

static long pg;

static void reset(int armed)
{
    memset(&fs, 0, sizeof(fs));
    fs.armed = (uint32_t)armed;
}

/* The events must be exactly one begin and one done of [addr, addr+len) for cause. */
static void expect_pair(uintptr_t addr, size_t len, enum mrc_inval_cause cause)
{
    CHECKF(fs.n == 2, "%u events, want a begin and a done", fs.n);
    if (fs.n != 2)
        return;
    for (int i = 0; i < 2; i++) {
        CHECKF(fs.ev[i].done == i && fs.ev[i].addr == addr && fs.ev[i].len == len && fs.ev[i].cause == cause,
               "event %d: %s [%#llx, +%#llx) cause %d, want %s [%#llx, +%#llx) cause %d", i,
               fs.ev[i].done ? "done" : "begin", (unsigned long long)fs.ev[i].addr,
               (unsigned long long)fs.ev[i].len, fs.ev[i].cause, i ? "done" : "begin", (unsigned long long)addr,
               (unsigned long long)len, cause);
    }
    CHECK(fs.ev[0].ticket == fs.ev[1].ticket);
}

static char *map(size_t len)
{
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return p == MAP_FAILED ? NULL : p;
}

static void test_nothing_while_not_armed(void)
{
    reset(0);
    char *p = map(4 * (size_t)pg);
    CHECK(p && mrc_on_munmap(p, 4 * (size_t)pg) == 0);
    CHECK(fs.n == 0);
}

static void test_munmap_rounded_to_pages(void)
{
    reset(1);
    char *p = map(4 * (size_t)pg);
    if (!p)
        return;
    /* From the second page to a byte inside the third: the kernel takes both whole. */
    CHECK(mrc_on_munmap(p + pg, (size_t)pg + 100) == 0);
    expect_pair((uintptr_t)p + (uintptr_t)pg, 2 * (size_t)pg, MRC_INVAL_MUNMAP);
    munmap(p, 4 * (size_t)pg);
}

static void test_mmap_only_fixed_replaces(void)
{
    reset(1);
    char *p = mrc_on_mmap(NULL, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED && fs.n == 0);
    char *q = mrc_on_mmap(p, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(q == p);
    expect_pair((uintptr_t)p, (size_t)pg, MRC_INVAL_MMAP_FIXED);
    munmap(p, (size_t)pg);
}

static void test_mremap_takes_the_tail_or_the_whole(void)
{
    reset(1);
    char *p = map(4 * (size_t)pg);
    if (!p)
        return;
    CHECK(mrc_on_mremap(p, 4 * (size_t)pg, 2 * (size_t)pg, 0, NULL) == p);   /* shrink in place */
    expect_pair((uintptr_t)p + 2 * (uintptr_t)pg, 2 * (size_t)pg, MRC_INVAL_MREMAP);
    reset(1);
    CHECK(mrc_on_mremap(p, 2 * (size_t)pg, (size_t)pg, MREMAP_MAYMOVE, NULL) != MAP_FAILED);
    expect_pair((uintptr_t)p, 2 * (size_t)pg, MRC_INVAL_MREMAP);   /* may move: all of it */
    munmap(p, (size_t)pg);
}

static void test_madvise_discards_only(void)
{
    reset(1);
    char *p = map(2 * (size_t)pg);
    if (!p)
        return;
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_FREE) == 0);
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_WILLNEED) == 0);
    CHECK(fs.n == 0);
    CHECK(mrc_on_madvise(p, (size_t)pg, MADV_DONTNEED) == 0);
    expect_pair((uintptr_t)p, (size_t)pg, MRC_INVAL_MADVISE);
    munmap(p, 2 * (size_t)pg);
}

static void test_shmdt_takes_the_segment(void)
{
    reset(1);
    int id = shmget(IPC_PRIVATE, 2 * (size_t)pg, IPC_CREAT | 0600);
    CHECK(id >= 0);
    if (id < 0)
        return;
    char *p = shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    CHECK(p != (void *)-1);
    if (p == (void *)-1)
        return;
    CHECK(mrc_on_shmdt(p) == 0);
    expect_pair((uintptr_t)p, 2 * (size_t)pg, MRC_INVAL_SHM);
}

/* Advice measured to keep pinned pages announces nothing; everything else, advice this
 * build does not know included, announces its range. */
static void test_madvise_rule_is_default_deny(void)
{
    static const int keeps[] = { MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_FREE,
                                 MADV_DONTFORK, MADV_DOFORK, MADV_MERGEABLE, MADV_UNMERGEABLE, MADV_HUGEPAGE,
                                 MADV_NOHUGEPAGE, MADV_DONTDUMP, MADV_DODUMP, MADV_WIPEONFORK, MADV_KEEPONFORK,
                                 MADV_COLD, MADV_PAGEOUT, 22 /* POPULATE_READ */, 23 /* POPULATE_WRITE */,
                                 25 /* COLLAPSE */ };
    /* HWPOISON and SOFT_OFFLINE would act on real pages: they are tried on a hole. */
    static const int discards[] = { MADV_DONTNEED, MADV_REMOVE, 24 /* DONTNEED_LOCKED */,
                                    102 /* GUARD_INSTALL */, 103 /* GUARD_REMOVE */, 77 /* unknown */, -1,
                                    MADV_HWPOISON, 101 /* SOFT_OFFLINE */ };
    char *p = map(2 * (size_t)pg);
    if (!p)
        return;
    char *hole = map((size_t)pg);
    CHECK(hole && munmap(hole, (size_t)pg) == 0);
    for (unsigned i = 0; i < sizeof(keeps) / sizeof(keeps[0]); i++) {
        reset(1);
        mrc_on_madvise(p, (size_t)pg, keeps[i]);
        CHECKF(fs.n == 0, "advice %d announced %u events", keeps[i], fs.n);
    }
    for (unsigned i = 0; i < sizeof(discards) / sizeof(discards[0]); i++) {
        int a = discards[i];
        char *at_ = a == MADV_HWPOISON || a == 101 ? hole : p;
        reset(1);
        mrc_on_madvise(at_ + 10, 100, a);
        expect_pair((uintptr_t)at_, (size_t)pg, MRC_INVAL_MADVISE);
    }
    munmap(p, 2 * (size_t)pg);
}

/* process_madvise: the same rule, each range announced. */
static void test_process_madvise_announces_each_range(void)
{
    char *p = map(4 * (size_t)pg);
    if (!p)
        return;
    struct iovec iov[2] = { { p, (size_t)pg }, { p + 2 * pg, (size_t)pg } };
    int self = (int)syscall(SYS_pidfd_open, getpid(), 0);
    reset(1);
    mrc_on_process_madvise(self, iov, 2, MADV_COLD, 0);
    CHECK(fs.n == 0);
    reset(1);
    mrc_on_process_madvise(self, iov, 2, MADV_DONTNEED, 0);
    CHECKF(fs.n == 4 && !fs.ev[0].done && !fs.ev[1].done && fs.ev[2].done && fs.ev[3].done &&
               fs.ev[0].addr == (uintptr_t)p && fs.ev[1].addr == (uintptr_t)p + 2 * (uintptr_t)pg &&
               fs.ev[0].len == (uint64_t)pg && fs.ev[3].ticket == fs.ev[1].ticket,
           "%u events", fs.n);
    close(self);
    munmap(p, 4 * (size_t)pg);
}

#define HUGE (2ul << 20)

/* A 2 MiB-aligned stretch of 2 huge pages' worth of ordinary memory. */
static char *map_huge_aligned(char **raw)
{
    *raw = map(3 * HUGE);
    return *raw ? (char *)(((uintptr_t)*raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1)) : NULL;
}

/* The registry says [p, p+2M) has 2 MiB pages (as hugetlb memory would): a 4 KiB munmap,
 * mremap or madvise there is announced as the whole huge page, and the record goes or
 * moves with the memory. */
static void test_hugetlb_record_widens_to_the_huge_page(void)
{
    char *raw, *p = map_huge_aligned(&raw);
    if (!p)
        return;
    struct mrc_map_attr huge = { .page_shift = 21 };
    mrc_maps_set((uintptr_t)p, (uintptr_t)p + HUGE, &huge, mrc_maps_gen());
    CHECK(mrc_maps_page_size((uintptr_t)p + 8192, (uintptr_t)p + 12288) == HUGE);
    reset(1);
    CHECK(mrc_on_madvise(p + 4096, 4096, MADV_DONTNEED) == 0);
    expect_pair((uintptr_t)p, HUGE, MRC_INVAL_MADVISE);
    /* Moved by a 4 KiB mremap: the record (the page size) goes with it. */
    char *q = p + HUGE;
    reset(1);
    CHECK(mrc_on_mremap(p, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, q) == q);
    CHECKF(fs.n == 4 && fs.ev[0].addr == (uintptr_t)p && fs.ev[0].len == HUGE && fs.ev[1].addr == (uintptr_t)q &&
               fs.ev[1].len == HUGE,
           "%u events: [%#llx, +%#llx) [%#llx, +%#llx)", fs.n, (unsigned long long)fs.ev[0].addr,
           (unsigned long long)fs.ev[0].len, (unsigned long long)fs.ev[1].addr, (unsigned long long)fs.ev[1].len);
    CHECK(mrc_maps_page_size((uintptr_t)q, (uintptr_t)q + 1) == HUGE);
    CHECK(mrc_maps_page_size((uintptr_t)p, (uintptr_t)p + 1) == (uint64_t)pg);
    /* A 4 KiB mmap(MAP_FIXED) of ordinary memory over it: the huge page it lands in. */
    reset(1);
    CHECK(mrc_on_mmap(q + 4096, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == q + 4096);
    expect_pair((uintptr_t)q, HUGE, MRC_INVAL_MMAP_FIXED);
    reset(1);
    CHECK(mrc_on_munmap(q, 4096) == 0);
    expect_pair((uintptr_t)q, HUGE, MRC_INVAL_MUNMAP);
    CHECK(!mrc_maps_any());
    munmap(raw, 3 * HUGE);
}

/* mmap(MAP_FIXED|MAP_HUGETLB, 4096) replaces a whole huge page (announced whether or not
 * the kernel has one to give). */
static void test_mmap_fixed_hugetlb_announces_the_huge_page(void)
{
    if (!mrc_procmaps_huge_shift_max()) {
        SKIP_TEST("no hugetlb in this kernel");
        return;
    }
    char *raw, *p = map_huge_aligned(&raw);
    if (!p)
        return;
    reset(1);
    void *r = mrc_on_mmap(p, 4096, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT), -1, 0);
    expect_pair((uintptr_t)p, HUGE, MRC_INVAL_MMAP_FIXED);
    if (r != MAP_FAILED)
        CHECK(mrc_maps_page_size((uintptr_t)p, (uintptr_t)p + 1) == HUGE);
    mrc_on_munmap(raw, 3 * HUGE);
    CHECK(!mrc_maps_any());
}

/* A System V attachment split by a munmap: shmdt detaches every piece, and announces the
 * segment's whole span, whether it was removed (IPC_RMID) before or not. */
static void shmdt_split_case(int removed_first)
{
    int id = shmget(IPC_PRIVATE, 4 * (size_t)pg, IPC_CREAT | 0600);
    CHECK(id >= 0);
    if (id < 0)
        return;
    char *p = mrc_on_shmat(id, NULL, 0);
    CHECK(p != (void *)-1);
    if (removed_first)
        shmctl(id, IPC_RMID, NULL);
    if (p != (void *)-1) {
        CHECK(mrc_on_munmap(p + pg, (size_t)pg) == 0);
        reset(1);
        CHECK(mrc_on_shmdt(p) == 0);
        expect_pair((uintptr_t)p, 4 * (size_t)pg, MRC_INVAL_SHM);
        /* The piece past the gap went with it: its address is free again. */
        char *q = mmap(p + 2 * pg, 2 * (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        CHECK(q == p + 2 * pg);
        if (q != MAP_FAILED)
            munmap(q, 2 * (size_t)pg);
        CHECK(!mrc_maps_any());
    }
    if (!removed_first)
        shmctl(id, IPC_RMID, NULL);
}

static void test_shmdt_of_a_split_attachment_takes_every_piece(void) { shmdt_split_case(0); }
static void test_shmdt_of_a_split_removed_segment_takes_every_piece(void) { shmdt_split_case(1); }

/* The registry's own rules: a record is cut where something else is mapped over part of
 * it (file offsets follow), and only records older than the change go. */
static void test_registry_cuts_and_keeps_newer_records(void)
{
    char *raw = map(8 * (size_t)pg);
    if (!raw)
        return;
    uint64_t a = (uintptr_t)raw, P = (uint64_t)pg;
    struct mrc_map_attr f = { .flags = MRC_MAP_FILE, .dev = 7, .ino = 9, .off = 0 };
    mrc_maps_set(a, a + 8 * P, &f, mrc_maps_gen());
    uint64_t s, e;
    struct mrc_map_attr got;
    /* Something private over pages 2-3: the record is cut in two, the second part at
     * file offset 4 pages. */
    mrc_maps_set(a + 2 * P, a + 4 * P, NULL, mrc_maps_gen());
    CHECK(mrc_maps_at(a + 5 * P, &s, &e, &got) && s == a + 4 * P && e == a + 8 * P && got.off == 4 * P &&
          got.ino == 9);
    CHECK(!mrc_maps_at(a + 3 * P, &s, &e, &got));
    CHECK(mrc_maps_at(a, &s, &e, &got) && s == a && e == a + 2 * P);
    /* A change that began before a record was made leaves that record alone. */
    uint64_t before = mrc_maps_gen();
    struct mrc_map_attr shared = { .flags = MRC_MAP_SHARED };
    mrc_maps_set(a + 2 * P, a + 4 * P, &shared, mrc_maps_gen());
    mrc_maps_clear(a, a + 8 * P, before, -1);
    CHECK(mrc_maps_at(a + 2 * P, &s, &e, &got) && got.flags == MRC_MAP_SHARED);
    CHECK(!mrc_maps_at(a, &s, &e, &got) && !mrc_maps_at(a + 4 * P, &s, &e, &got));
    mrc_maps_clear(a, a + 8 * P, mrc_maps_gen(), -1);
    CHECK(!mrc_maps_any());
    munmap(raw, 8 * (size_t)pg);
}

/* The registry anew under a policy (MRCACHE_SHARED=cache or not): its counts hold only
 * for records made under the policy that counts them out again. */
static void registry_policy(int cache_shared)
{
    mrc_maps_clear(0, UINT64_MAX, mrc_maps_gen(), -1);
    mrc_maps_start((uint64_t)pg, cache_shared, 1);
    mrc_maps_clear(0, UINT64_MAX, mrc_maps_gen(), -1);
}

/* Admission: shared memory and file mappings, private ones too, are refused (not cached
 * by default); under MRCACHE_SHARED=cache a registration over a file's mapping sets
 * files_cached (truncations look from then on), after which file mappings no longer
 * count in interest. */
static void test_registry_admission_and_files_cached(void)
{
    registry_policy(0);
    char *raw = map(4 * (size_t)pg);
    if (!raw)
        return;
    uint64_t a = (uintptr_t)raw, P = (uint64_t)pg;
    struct mrc_map_attr shared = { .flags = MRC_MAP_SHARED }, file = { .flags = MRC_MAP_FILE, .dev = 1, .ino = 2 };
    mrc_maps_set(a, a + P, &shared, mrc_maps_gen());
    mrc_maps_set(a + 2 * P, a + 4 * P, &file, mrc_maps_gen());
    CHECK(mrc_maps.interest == 2 && !mrc_maps.files_cached);
    CHECK(mrc_maps_admit(a + P, a + 2 * P - 1) == 0);         /* neither */
    CHECK(mrc_maps_admit(a, a + 3 * P - 1) == 1);             /* touches shared: refused */
    CHECK(mrc_maps_admit(a + 3 * P, a + 3 * P + 10) == 1);    /* a private file mapping: refused too */
    CHECK(!mrc_maps.files_cached);
    registry_policy(1);                                       /* MRCACHE_SHARED=cache */
    mrc_maps_set(a, a + P, &shared, mrc_maps_gen());
    mrc_maps_set(a + 2 * P, a + 4 * P, &file, mrc_maps_gen());
    CHECK(mrc_maps.interest == 1 && !mrc_maps.files_cached);
    CHECK(mrc_maps_admit(a, a + 3 * P - 1) == 0);
    CHECK(mrc_maps_admit(a + 3 * P, a + 3 * P + 10) == 0);    /* the file's: cached, and said */
    CHECK(mrc_maps.files_cached && mrc_maps.interest == 0 && mrc_files_watching());
    uint64_t st[2], ln[2];
    CHECK(mrc_maps_file_ranges(1, 2, P, UINT64_MAX, st, ln, 2) == 1 && st[0] == a + 3 * P && ln[0] == P);
    CHECK(mrc_maps_file_ranges(1, 2, 2 * P, UINT64_MAX, st, ln, 2) == 0);   /* past the mapping */
    CHECK(mrc_maps_file_ranges(1, 3, 0, UINT64_MAX, st, ln, 2) == 0);       /* another file */
    mrc_maps_clear(a, a + 4 * P, mrc_maps_gen(), -1);
    CHECK(!mrc_maps_any() && mrc_maps.interest == 0);
    munmap(raw, 4 * (size_t)pg);
    registry_policy(0);
}

/* mmap records what it maps: a MAP_SHARED memfd is shared and a file's, a MAP_PRIVATE one
 * a file's only; an ordinary mapping over part of one cuts it. */
static void test_mmap_records_shared_and_file_mappings(void)
{
    int fd = memfd_create("test-monitor", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, 4 * pg) == 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    char *sh = mrc_on_mmap(NULL, 4 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *pr = mrc_on_mmap(NULL, 4 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(sh != MAP_FAILED && pr != MAP_FAILED);
    uint64_t s, e;
    struct mrc_map_attr a;
    CHECK(mrc_maps_at((uintptr_t)sh + 100, &s, &e, &a) && a.flags == (MRC_MAP_SHARED | MRC_MAP_FILE) &&
          a.ino == st.st_ino && e - s == 4 * (uint64_t)pg);
    CHECK(mrc_maps_at((uintptr_t)pr, &s, &e, &a) && a.flags == MRC_MAP_FILE);
    CHECK(mrc_maps_admit((uintptr_t)sh, (uintptr_t)sh + 10) == 1);
    reset(1);
    CHECK(mrc_on_mmap(pr + pg, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == pr + pg);
    CHECK(mrc_maps_at((uintptr_t)pr + 2 * pg, &s, &e, &a) && s == (uintptr_t)pr + 2 * pg && a.off == 2 * (uint64_t)pg);
    CHECK(!mrc_maps_at((uintptr_t)pr + pg, &s, &e, &a));
    mrc_on_munmap(sh, 4 * (size_t)pg);
    mrc_on_munmap(pr, 4 * (size_t)pg);
    close(fd);
    CHECK(!mrc_maps_any());
}

/* Truncation and fallocate announce the mappings of the bytes they drop, before and
 * after, once a registration was cached over a file's mapping (MRCACHE_SHARED=cache);
 * until then, and for growing or allocating, nothing; a registration cached while the
 * call runs makes its end announce them. */
static void test_truncation_announces_file_mappings(void)
{
    registry_policy(1);   /* MRCACHE_SHARED=cache: file mappings are cached */
    int fd = memfd_create("test-monitor", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, 4 * pg) == 0);
    char *pr = mrc_on_mmap(NULL, 4 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(pr != MAP_FAILED);
    if (pr == MAP_FAILED)
        return;
    uintptr_t p = (uintptr_t)pr;
    struct mrc_file_op op;
    reset(1);
    mrc_file_begin_fd(&op, fd, (uint64_t)pg);      /* no registration over a file: nothing to do */
    mrc_file_done(&op, fd);
    CHECK(fs.n == 0);
    /* Cached over it between the start and the end of a truncation: announced at its end. */
    mrc_file_begin_fd(&op, fd, (uint64_t)pg);
    CHECK(mrc_maps_admit(p, p + 4 * (uint64_t)pg - 1) == 0 && mrc_files_watching());
    mrc_file_done(&op, fd);
    expect_pair(p + (uintptr_t)pg, 3 * (size_t)pg, MRC_INVAL_FILE);
    reset(1);
    mrc_file_begin_fd(&op, fd, 2 * (uint64_t)pg + 1);   /* the page holding the new end too */
    mrc_file_done(&op, fd);
    expect_pair(p + 2 * (uintptr_t)pg, 2 * (size_t)pg, MRC_INVAL_FILE);
    reset(1);
    mrc_file_begin_fd(&op, fd, 8 * (uint64_t)pg);       /* growing */
    mrc_file_done(&op, fd);
    mrc_file_begin_fallocate(&op, fd, FALLOC_FL_KEEP_SIZE, 0, 4 * (uint64_t)pg);
    mrc_file_done(&op, fd);
    CHECK(fs.n == 0);
    mrc_file_begin_fallocate(&op, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (uint64_t)pg, (uint64_t)pg);
    mrc_file_done(&op, fd);
    expect_pair(p + (uintptr_t)pg, (size_t)pg, MRC_INVAL_FILE);
    reset(1);
    mrc_file_begin_fallocate(&op, fd, FALLOC_FL_COLLAPSE_RANGE, (uint64_t)pg, (uint64_t)pg);
    mrc_file_done(&op, fd);
    expect_pair(p + (uintptr_t)pg, 3 * (size_t)pg, MRC_INVAL_FILE);
    /* By name, as open(O_TRUNC) and truncate name it. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    reset(1);
    mrc_file_begin_path(&op, AT_FDCWD, path, 0, 0);
    mrc_file_done(&op, -1);
    expect_pair(p, 4 * (size_t)pg, MRC_INVAL_FILE);
    mrc_on_munmap(pr, 4 * (size_t)pg);
    CHECK(mrc_maps.nfile == 0);
    close(fd);
    registry_policy(0);
}

/* Readers take no lock: while another thread makes, cuts and removes records beside
 * them, a record that stays is always seen, with its page size and its sharing. */
#define CHURN_ROUNDS 20000
static uint64_t churn_base;
static int churn_stop;

static void *churn(void *arg)
{
    (void)arg;
    struct mrc_map_attr sh = { .flags = MRC_MAP_SHARED | MRC_MAP_FILE, .dev = 3, .ino = 4 }, huge = { .page_shift = 21 };
    uint64_t P = (uint64_t)pg;
    for (int i = 0; i < CHURN_ROUNDS; i++) {
        uint64_t a = churn_base + (uint64_t)(i % 64) * 4 * P;
        mrc_maps_set(a, a + 3 * P, i & 1 ? &sh : &huge, mrc_maps_gen());
        mrc_maps_set(a + P, a + 2 * P, NULL, mrc_maps_gen());        /* cut in two */
        if (i % 3 == 0)
            mrc_maps_clear(a, a + 3 * P, mrc_maps_gen(), -1);
    }
    __atomic_store_n(&churn_stop, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void test_registry_readers_during_writes(void)
{
    char *raw, *stay = map_huge_aligned(&raw);
    char *region = map(256 * (size_t)pg);
    if (!stay || !region)
        return;
    churn_base = (uintptr_t)region;
    struct mrc_map_attr huge_shared = { .flags = MRC_MAP_SHARED, .page_shift = 21 };
    mrc_maps_set((uintptr_t)stay, (uintptr_t)stay + HUGE, &huge_shared, mrc_maps_gen());
    pthread_t t;
    CHECK(pthread_create(&t, NULL, churn, NULL) == 0);
    unsigned long looks = 0, wrong = 0;
    while (!__atomic_load_n(&churn_stop, __ATOMIC_ACQUIRE) || looks < 1000) {
        uint64_t s, e;
        struct mrc_map_attr a;
        wrong += mrc_maps_page_size((uintptr_t)stay + 4096, (uintptr_t)stay + 8192) != HUGE;
        wrong += mrc_maps_admit((uintptr_t)stay + 100, (uintptr_t)stay + 200) != 1;
        wrong += !mrc_maps_at((uintptr_t)stay + 5000, &s, &e, &a) || s != (uintptr_t)stay || a.page_shift != 21;
        looks++;
    }
    pthread_join(t, NULL);
    CHECKF(wrong == 0, "%lu of %lu looks missed the record that stayed", wrong, looks);
    mrc_maps_clear(0, UINT64_MAX, mrc_maps_gen(), -1);
    CHECK(!mrc_maps_any() && mrc_maps.interest == 0 && mrc_maps.nhuge == 0);
    munmap(region, 256 * (size_t)pg);
    munmap(raw, 3 * HUGE);
}

static void test_free_of_mmapped_chunk(void)
{
    if (!mrc_glibc_heap_init()) {
        SKIP_TEST("the allocator is not glibc's");
        return;
    }
    mrc_glibc_heap_watch(1);
    size_t big = 4u << 20;       /* above the mmap threshold: a mapping of its own */
    char *m = malloc(big);
    CHECK(m != NULL);
    if (!m)
        return;
    reset(1);
    mrc_on_free(m);
    CHECKF(fs.n == 2 && fs.ev[0].addr <= (uintptr_t)m && fs.ev[0].addr + fs.ev[0].len >= (uintptr_t)m + big &&
               fs.ev[0].cause == MRC_INVAL_FREE,
           "%u events; the first [%#llx, +%#llx) cause %d for a chunk at %p", fs.n,
           (unsigned long long)fs.ev[0].addr, (unsigned long long)fs.ev[0].len, fs.ev[0].cause, (void *)m);
    reset(1);
    mrc_glibc_heap_watch(0);    /* off: free only forwards */
    mrc_on_free(malloc(big));
    CHECK(fs.n == 0);
}

/* The mapping holding an address, from PROCMAP_QUERY and from /proc/self/maps: the two
 * agree, on private anonymous memory (its ends cut by PROT_NONE pages), a read-only
 * page, a shared mapping, a file's and the stack (whose start moves as it grows), and on
 * an unmapped page (none). */
static void test_read_vma(void)
{
    char *p = mmap(NULL, 8 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    char *s = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED && s != MAP_FAILED);
    if (p == MAP_FAILED || s == MAP_FAILED)
        return;
    CHECK(mprotect(p, (size_t)pg, PROT_NONE) == 0);
    CHECK(mprotect(p + 6 * pg, (size_t)pg, PROT_READ) == 0);
    CHECK(munmap(p + 7 * pg, (size_t)pg) == 0);
    volatile char on_stack = 0;
    struct { uint64_t addr; int found; uint64_t start, end; uint32_t r, w, shared; } want[] = {
        { (uintptr_t)p + 2 * pg + 5, 1, (uintptr_t)p + pg, (uintptr_t)p + 6 * pg, 1, 1, 0 },
        { (uintptr_t)p, 1, (uintptr_t)p, (uintptr_t)p + pg, 0, 0, 0 },
        { (uintptr_t)p + 6 * pg, 1, (uintptr_t)p + 6 * pg, (uintptr_t)p + 7 * pg, 1, 0, 0 },
        { (uintptr_t)s, 1, (uintptr_t)s, (uintptr_t)s + pg, 1, 1, 1 },
        { (uintptr_t)&test_read_vma, 1, 0, 0, 1, 0, 1 },   /* this program's text: a file's */
        { (uintptr_t)&on_stack, 1, 0, 0, 1, 1, 0 },
        { (uintptr_t)p + 7 * pg, 0, 0, 0, 0, 0, 0 },
    };
    for (unsigned i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct mrc_vma q = { 0 };
        for (int text = 0; text < 2; text++) {
            struct mrc_vma v = { 0 };
            int rc = text ? mrc_procmaps_read_vma_text(want[i].addr, &v) : mrc_procmaps_read_vma(want[i].addr, &v);
            CHECKF((rc == 0) == want[i].found, "case %u, %s: rc %d", i, text ? "text" : "query", rc);
            if (rc || !want[i].found)
                continue;
            CHECKF((!want[i].end || (v.start == want[i].start && v.end == want[i].end)) && v.readable == want[i].r &&
                       v.writable == want[i].w && v.shared == want[i].shared && v.page_size == (uint64_t)pg,
                   "case %u, %s: %#llx-%#llx r%u w%u shared %u page %llu", i, text ? "text" : "query",
                   (unsigned long long)v.start, (unsigned long long)v.end, v.readable, v.writable, v.shared,
                   (unsigned long long)v.page_size);
            /* Where the ends are not known beforehand, the two agree on the end (a
             * stack's start moves down as it grows). */
            CHECKF(!text || want[i].end || v.end == q.end, "case %u: text ends at %#llx, query at %#llx", i,
                   (unsigned long long)v.end, (unsigned long long)q.end);
            q = v;
        }
    }
    munmap(p, 7 * (size_t)pg);
    munmap(s, (size_t)pg);
}

int main(void)
{
    pg = sysconf(_SC_PAGESIZE);
    mrc_real_resolve_libc();
    struct mrc_inval_sink sink = { &fs.armed, fake_begin, fake_done, NULL, fake_lost };
    mrc_monitor_init(&sink, (uint64_t)pg, 1);
    mrc_maps_start((uint64_t)pg, 0, 1);
    /* What the seed found (this program's own mappings) is not what the tests look at. */
    mrc_maps_clear(0, UINT64_MAX, mrc_maps_gen(), -1);
    RUN(test_nothing_while_not_armed);
    RUN(test_munmap_rounded_to_pages);
    RUN(test_mmap_only_fixed_replaces);
    RUN(test_mremap_takes_the_tail_or_the_whole);
    RUN(test_madvise_discards_only);
    RUN(test_shmdt_takes_the_segment);
    RUN(test_madvise_rule_is_default_deny);
    RUN(test_process_madvise_announces_each_range);
    RUN(test_hugetlb_record_widens_to_the_huge_page);
    RUN(test_mmap_fixed_hugetlb_announces_the_huge_page);
    RUN(test_shmdt_of_a_split_attachment_takes_every_piece);
    RUN(test_shmdt_of_a_split_removed_segment_takes_every_piece);
    RUN(test_registry_cuts_and_keeps_newer_records);
    RUN(test_registry_admission_and_files_cached);
    RUN(test_mmap_records_shared_and_file_mappings);
    RUN(test_truncation_announces_file_mappings);
    RUN(test_registry_readers_during_writes);
    RUN(test_free_of_mmapped_chunk);
    RUN(test_read_vma);
    CHECK_EXIT();
}
