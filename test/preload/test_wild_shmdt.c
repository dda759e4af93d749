/* test_wild_shmdt.c - shmdt of a System V segment whose attachment a munmap split in two:
 * the kernel detaches every piece of that attachment (all mappings of the segment's file
 * at the matching offsets, up to its size), gap or not. A buffer registered in the piece
 * past the gap is changed by it, then mapped again and registered again. A segment is
 * shared memory, cached only under MRCACHE_SHARED=cache: the run that proves the hook. */
#include <sys/ipc.h>
#include <sys/shm.h>

#include "wild.h"

#define SEG (1u << 20)

static long pg;

/* The segment attached, its middle page unmapped; the buffer in the tail registered
 * before the shmdt, and again after something else is mapped there. */
static void split_case(int tail_first, const char *what)
{
    int id = shmget(IPC_PRIVATE, SEG, IPC_CREAT | 0600);
    CHECK(id >= 0);
    char *p = id >= 0 ? shmat(id, NULL, 0) : (void *)-1;
    CHECK(p != (void *)-1);
    if (p == (void *)-1)
        goto out;
    char *tail = p + SEG / 2 + pg;
    size_t tail_len = SEG / 2 - (size_t)pg;
    if (!tail_first && !first_registration(tail, tail_len))
        goto out;
    CHECK(munmap(p + SEG / 2, (size_t)pg) == 0);   /* the gap */
    if (tail_first && !first_registration(tail, tail_len))
        goto out;
    CHECK(shmdt(p) == 0);
    /* Precondition: the tail went too (the kernel detaches past the gap). */
    if (map_anon(tail, tail_len, MAP_FIXED_NOREPLACE) != tail) {
        check_skipf("shmdt left the piece past the gap attached");
        goto out;
    }
    registered_again(tail, tail_len, what);
    munmap(tail, tail_len);
out:
    if (id >= 0)
        shmctl(id, IPC_RMID, NULL);
}

/* Registered before the split: the munmap of the gap leaves it cached (it is not in the gap). */
static void test_shmdt_of_split_segment_detaches_past_the_gap(void)
{
    split_case(0, "the piece past the gap, after shmdt of the split attachment");
}

/* Registered after the split. */
static void test_shmdt_of_split_segment_registered_after_split(void)
{
    split_case(1, "the piece past the gap registered after the split, after shmdt");
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    pg = sysconf(_SC_PAGESIZE);
    open_nic();
    WILD_RUN(test_shmdt_of_split_segment_detaches_past_the_gap);
    WILD_RUN(test_shmdt_of_split_segment_registered_after_split);
    CHECK_EXIT();
}
