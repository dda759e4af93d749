/* test_wild_hugetlb.c - the kernel changes hugetlb memory a whole huge page at a time:
 * mmap(MAP_FIXED|MAP_HUGETLB), mremap and shmat(SHM_REMAP) of a SHM_HUGETLB segment given
 * 4 KiB lengths replace a whole 2 MiB page, beyond the range the call named. Each test
 * registers a buffer inside the huge page but outside those 4 KiB, changes it so, and
 * registers it again. Huge pages are reserved for the run (vm.nr_hugepages), else SKIP. */
#include <sys/ipc.h>
#include <sys/shm.h>

#include "wild.h"

static size_t H;            /* the huge page size */
static char huge_why[256];  /* why there are none, if so */

/* A buffer inside a huge page that misses its first 4 KiB, where the calls below point. */
#define BUF_OFF (64u << 10)
#define BUF_LEN (960u << 10)

static char *huge_map(void *at, size_t len, int flags)
{
    void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* len bytes of address space aligned to the huge page, mapped PROT_NONE (a place to put
 * things with MAP_FIXED); raw and rawlen: what to unmap later. */
static char *huge_aligned_hole(size_t len, char **raw, size_t *rawlen)
{
    *rawlen = len + H;
    *raw = mmap(NULL, *rawlen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (*raw == MAP_FAILED)
        return NULL;
    return (char *)(((uintptr_t)*raw + H - 1) & ~(uintptr_t)(H - 1));
}

static int need_huge(long n)
{
    if (!H || !hugepages_reserve(n, huge_why, sizeof(huge_why))) {
        check_skipf("%s", huge_why[0] ? huge_why : "no huge pages");
        return 0;
    }
    return 1;
}

/* The precondition of each test: the buffer's pages really were replaced (the first
 * registration left 0x11 there). */
static int replaced(const char *p, const char *how)
{
    if (p[0] != 0x11)
        return 1;
    check_skipf("%s left the buffer's pages in place", how);
    return 0;
}

static void test_hugetlb_mmap_fixed_4k_replaces_whole_huge_page(void)
{
    if (!need_huge(2))
        return;
    char *p = huge_map(NULL, H, 0);
    CHECK(p != NULL);
    if (!p || !first_registration(p + BUF_OFF, BUF_LEN))
        goto out;
    /* 4 KiB at the huge page's start: the kernel maps (and unmaps) a whole one. */
    CHECK(huge_map(p, 4096, MAP_FIXED) == p);
    if (replaced(p + BUF_OFF, "mmap(MAP_FIXED|MAP_HUGETLB, 4096)"))
        registered_again(p + BUF_OFF, BUF_LEN, "a buffer in the huge page replaced by mmap(MAP_FIXED|MAP_HUGETLB, 4096)");
out:
    if (p)
        munmap(p, H);
}

static void test_hugetlb_mremap_4k_moves_whole_huge_page(void)
{
    if (!need_huge(2))
        return;
    char *raw, *p = huge_map(NULL, H, 0);
    size_t rawlen;
    char *to = huge_aligned_hole(H, &raw, &rawlen);
    CHECK(p && to);
    if (!p || !to || !first_registration(p + BUF_OFF, BUF_LEN))
        goto out;
    /* 4 KiB named, a whole huge page moved: the buffer's address is left unmapped. */
    CHECK(mremap(p, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, to) == to);
    CHECK(huge_map(p, H, MAP_FIXED_NOREPLACE) == p);
    if (replaced(p + BUF_OFF, "mremap(4096) of a huge page"))
        registered_again(p + BUF_OFF, BUF_LEN, "a buffer in a huge page moved away by mremap(4096), mapped again");
out:
    if (p)
        munmap(p, H);
    if (to)
        munmap(raw, rawlen);
}

static void test_hugetlb_mremap_4k_target_replaces_whole_huge_page(void)
{
    if (!need_huge(3))
        return;
    char *from = huge_map(NULL, H, 0), *q = huge_map(NULL, H, 0);
    CHECK(from && q);
    if (!from || !q)
        goto out;
    memset(from, 0x55, H);
    if (!first_registration(q + BUF_OFF, BUF_LEN))
        goto out;
    /* The target of a 4 KiB move over our buffer's huge page: all of it is replaced. */
    CHECK(mremap(from, 4096, 4096, MREMAP_MAYMOVE | MREMAP_FIXED, q) == q);
    from = NULL;
    if (replaced(q + BUF_OFF, "a 4 KiB mremap onto the huge page"))
        registered_again(q + BUF_OFF, BUF_LEN, "a buffer in the huge page a 4 KiB mremap(MREMAP_FIXED) landed on");
out:
    if (from)
        munmap(from, H);
    if (q)
        munmap(q, H);
}

static void test_hugetlb_shmat_remap_small_segment_replaces_huge_page(void)
{
    if (!need_huge(1))
        return;
    char *raw;
    size_t rawlen;
    char *p = huge_aligned_hole(H, &raw, &rawlen);
    CHECK(p && mprotect(p, H, PROT_READ | PROT_WRITE) == 0);
    /* A 4 KiB segment: shm_segsz says 4096, its file (and the attach) is a huge page. */
    int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | SHM_HUGETLB | 0600);
    if (id < 0)
        check_skipf("shmget(SHM_HUGETLB): %s", strerror(errno));
    if (!p || id < 0 || !first_registration(p + BUF_OFF, BUF_LEN))
        goto out;
    CHECK(shmat(id, p, SHM_REMAP) == p);
    if (replaced(p + BUF_OFF, "shmat(SHM_REMAP) of a 4 KiB SHM_HUGETLB segment"))
        registered_again(p + BUF_OFF, BUF_LEN, "a buffer under shmat(SHM_REMAP) of a 4 KiB SHM_HUGETLB segment");
    shmdt(p);
out:
    if (id >= 0)
        shmctl(id, IPC_RMID, NULL);
    if (p)
        munmap(raw, rawlen);
}

/* munmap of part of a huge page: the kernel refuses (EINVAL) rather than round it; if it
 * ever rounds, the buffer in the rest of the page is changed and must be seen. */
static void test_hugetlb_munmap_part_of_huge_page(void)
{
    if (!need_huge(2))
        return;
    char *p = huge_map(NULL, H, 0);
    CHECK(p != NULL);
    if (!p || !first_registration(p + BUF_OFF, BUF_LEN))
        goto out;
    if (munmap(p, 4096) != 0) {
        check_skipf("the kernel refuses to unmap part of a huge page: %s", strerror(errno));
        goto out;
    }
    huge_map(p, H, MAP_FIXED_NOREPLACE);
    if (replaced(p + BUF_OFF, "munmap(4096) of a huge page"))
        registered_again(p + BUF_OFF, BUF_LEN, "a buffer in a huge page after munmap(4096) of it, mapped again");
out:
    if (p)
        munmap(p, H);
}

/* madvise(MADV_DONTNEED) of part of a huge page: the kernel rounds the length down, so it
 * discards less than named (never more); if it ever rounds up, that must be seen. */
static void test_hugetlb_madvise_dontneed_part_of_huge_page(void)
{
    if (!need_huge(1))
        return;
    char *p = huge_map(NULL, H, 0);
    CHECK(p != NULL);
    if (!p || !first_registration(p + BUF_OFF, BUF_LEN))
        goto out;
    CHECK(madvise(p, 4096, MADV_DONTNEED) == 0);
    if (replaced(p + BUF_OFF, "madvise(MADV_DONTNEED, 4096) of a huge page (the kernel rounds down)"))
        registered_again(p + BUF_OFF, BUF_LEN, "a buffer in a huge page after madvise(MADV_DONTNEED, 4096)");
out:
    if (p)
        munmap(p, H);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    H = huge_size();
    open_nic();
    WILD_RUN(test_hugetlb_mmap_fixed_4k_replaces_whole_huge_page);
    WILD_RUN(test_hugetlb_mremap_4k_moves_whole_huge_page);
    WILD_RUN(test_hugetlb_mremap_4k_target_replaces_whole_huge_page);
    WILD_RUN(test_hugetlb_shmat_remap_small_segment_replaces_huge_page);
    WILD_RUN(test_hugetlb_munmap_part_of_huge_page);
    WILD_RUN(test_hugetlb_madvise_dontneed_part_of_huge_page);
    hugepages_give_back();
    CHECK_EXIT();
}
