/* test_wild_uring.c - the program's own io_uring changes registered memory with no libc
 * call at all: IORING_OP_MADVISE (DONTNEED, REMOVE, GUARD_INSTALL/REMOVE),
 * IORING_OP_FALLOCATE (punch hole), IORING_OP_FTRUNCATE (Linux 6.9) and IORING_OP_OPENAT
 * with O_TRUNC. The kernel runs them in the ring's context or its io-wq workers, threads
 * of this process. What each run proves:
 * - the userfaultfd source sees MADVISE(DONTNEED) and (REMOVE) (measured: its only
 *   events among these); without it they are a known limit (TODO);
 * - guard advice through the ring is seen by nothing (TODO in every preloaded run), but a
 *   guarded range must be made usable again, and GUARD_REMOVE through libc invalidates;
 * - a file's truncation or hole makes no userfaultfd event: on shared memory it is not
 *   cached by default (MRCACHE_SHARED=register: these pass), under MRCACHE_SHARED=cache
 *   it is a known limit, and on a MAP_PRIVATE file mapping (cached) it is one always.
 * An opcode the kernel lacks is SKIP. */
#include <linux/falloc.h>
#include <liburing.h>

#include "wild.h"

#define LEN (1u << 20)
#define OP_FTRUNCATE 55         /* IORING_OP_FTRUNCATE, after liburing 2.3's headers */
#define ADV_GUARD_INSTALL 102   /* uapi asm-generic/mman-common.h, Linux 6.13 */
#define ADV_GUARD_REMOVE 103

static struct io_uring ring;
static struct io_uring_probe *probe;

/* Submits the one prepared entry and waits: its result (>= 0, or -errno). */
static int uring_run(void)
{
    struct io_uring_cqe *cqe;
    int rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0)
        return rc;
    rc = io_uring_wait_cqe(&ring, &cqe);
    if (rc < 0)
        return rc;
    rc = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    return rc;
}

static int op_supported(int op, const char *name)
{
    if (probe && io_uring_opcode_supported(probe, op))
        return 1;
    check_skipf("this kernel's io_uring has no %s", name);
    return 0;
}

/* The running test's known limit in this run, if any: excuses only the final check. */
static const char *limit;

static void after_change(char *p, uint64_t frame, int rc, const char *what)
{
    if (rc < 0) {
        check_skipf("%s: %s", what, strerror(-rc));
        return;
    }
    if (!page_replaced(p, frame)) {
        check_skipf("%s left the pages in place", what);
        return;
    }
    if (limit)
        wild_todo("%s", limit);
    registered_again(p, LEN, what);
}

/* The known limits of this run. */
#define NO_LIBC_CALL "no libc call"
static void limit_without_uffd(void)
{
    limit = wild_preloaded() && !uffd_on() ? NO_LIBC_CALL ": only the userfaultfd source sees this advice" : NULL;
}

static void limit_if_shared_cached(void)
{
    limit = wild_shared_cached()
                ? NO_LIBC_CALL " and no userfaultfd event: MRCACHE_SHARED=cache caches this shared memory"
                : NULL;
}

/* The advice through the ring; remove_by: the guard removed through the ring (1) or
 * through libc (0), after GUARD_INSTALL. */
static void madvise_case(char *p, int advice, int remove_by_ring, const char *what)
{
    if (!p || !op_supported(IORING_OP_MADVISE, "IORING_OP_MADVISE") || !first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    io_uring_prep_madvise(io_uring_get_sqe(&ring), p, LEN, advice);
    int rc = uring_run();
    if (rc == 0 && advice == ADV_GUARD_INSTALL && remove_by_ring) {
        io_uring_prep_madvise(io_uring_get_sqe(&ring), p, LEN, ADV_GUARD_REMOVE);
        CHECK(uring_run() == 0);
    } else if (rc == 0 && advice == ADV_GUARD_INSTALL) {
        CHECK(madvise(p, LEN, ADV_GUARD_REMOVE) == 0);
    }
    after_change(p, frame, rc, what);
}

static void test_io_uring_madvise_dontneed(void)
{
    char *p = map_anon(NULL, LEN, 0);
    limit_without_uffd();
    madvise_case(p, MADV_DONTNEED, 0, "IORING_OP_MADVISE(MADV_DONTNEED)");
    munmap(p, LEN);
}

/* Shared: not cached by default; cached, seen only by the userfaultfd source. */
static void test_io_uring_madvise_remove_of_shared_memory(void)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    limit = NULL;
    if (wild_shared_cached())
        limit_without_uffd();
    madvise_case(p == MAP_FAILED ? NULL : p, MADV_REMOVE, 0, "IORING_OP_MADVISE(MADV_REMOVE) of shared memory");
    if (p != MAP_FAILED)
        munmap(p, LEN);
}

/* What makes the range usable again is madvise(MADV_GUARD_REMOVE) through libc: seen. */
static void test_io_uring_madvise_guard_install_then_libc_guard_remove(void)
{
    char *p = map_anon(NULL, LEN, 0);
    limit = NULL;
    madvise_case(p, ADV_GUARD_INSTALL, 0, "IORING_OP_MADVISE(MADV_GUARD_INSTALL) then madvise(MADV_GUARD_REMOVE)");
    munmap(p, LEN);
}

/* Both through the ring: nothing sees either. */
static void test_io_uring_madvise_guard_install_and_remove(void)
{
    char *p = map_anon(NULL, LEN, 0);
    limit = wild_preloaded() ? NO_LIBC_CALL ", and no userfaultfd event for guard advice" : NULL;
    madvise_case(p, ADV_GUARD_INSTALL, 1, "IORING_OP_MADVISE(MADV_GUARD_INSTALL, then MADV_GUARD_REMOVE)");
    munmap(p, LEN);
}

/* A memfd mapped with flags, changed through the ring by fd. */
static void memfd_case(void (*prep)(struct io_uring_sqe *sqe, int fd), int op, const char *opname, int flags,
                       const char *what)
{
    int fd = memfd_create("wild-uring", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, LEN) == 0);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, flags, fd, 0);
    CHECK(p != MAP_FAILED);
    if (p != MAP_FAILED && op_supported(op, opname) && first_registration(p, LEN)) {
        uint64_t frame = page_frame(p);
        prep(io_uring_get_sqe(&ring), fd);
        int rc = uring_run();
        if (rc >= 0)
            CHECK(ftruncate(fd, LEN) == 0);   /* a truncation to 0 is grown back */
        after_change(p, frame, rc, what);
    }
    if (p != MAP_FAILED)
        munmap(p, LEN);
    close(fd);
}

static void prep_punch(struct io_uring_sqe *sqe, int fd)
{
    io_uring_prep_fallocate(sqe, fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN);
}

/* liburing 2.3 has no io_uring_prep_ftruncate: its layout (fd, off = the new length). */
static void prep_ftruncate(struct io_uring_sqe *sqe, int fd)
{
    io_uring_prep_rw(OP_FTRUNCATE, sqe, fd, NULL, 0, 0);
}

static void test_io_uring_fallocate_punch_hole_of_memfd(void)
{
    limit_if_shared_cached();
    memfd_case(prep_punch, IORING_OP_FALLOCATE, "IORING_OP_FALLOCATE", MAP_SHARED,
               "IORING_OP_FALLOCATE(PUNCH_HOLE) of a MAP_SHARED memfd");
}

static void test_io_uring_ftruncate_of_memfd(void)
{
    limit_if_shared_cached();
    memfd_case(prep_ftruncate, OP_FTRUNCATE, "IORING_OP_FTRUNCATE", MAP_SHARED,
               "IORING_OP_FTRUNCATE of a MAP_SHARED memfd to 0, grown back");
}

/* Truncation drops a MAP_PRIVATE mapping's copies too: such memory is cached only under
 * MRCACHE_SHARED=cache. */
static void test_io_uring_ftruncate_of_private_file_mapping(void)
{
    limit = wild_shared_cached() ? NO_LIBC_CALL ", and no userfaultfd event for a file's truncation" : NULL;
    memfd_case(prep_ftruncate, OP_FTRUNCATE, "IORING_OP_FTRUNCATE", MAP_PRIVATE,
               "IORING_OP_FTRUNCATE of a memfd mapped MAP_PRIVATE to 0, grown back");
}

static void test_io_uring_openat_o_trunc_of_tmpfs_file(void)
{
    char path[] = "/dev/shm/wild-uring-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && ftruncate(fd, LEN) == 0);
    char *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(p != MAP_FAILED);
    limit_if_shared_cached();
    if (p != MAP_FAILED && op_supported(IORING_OP_OPENAT, "IORING_OP_OPENAT") && first_registration(p, LEN)) {
        uint64_t frame = page_frame(p);
        io_uring_prep_openat(io_uring_get_sqe(&ring), AT_FDCWD, path, O_RDWR | O_TRUNC, 0);
        int rc = uring_run();
        if (rc >= 0) {
            close(rc);
            CHECK(ftruncate(fd, LEN) == 0);
        }
        after_change(p, frame, rc, "IORING_OP_OPENAT(O_TRUNC) of a MAP_SHARED tmpfs file, grown back");
    }
    if (p != MAP_FAILED)
        munmap(p, LEN);
    close(fd);
    unlink(path);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    int rc = io_uring_queue_init(4, &ring, 0);
    if (rc) {
        check_skip("test_wild_uring", strerror(-rc));
        return 0;
    }
    probe = io_uring_get_probe_ring(&ring);
    WILD_RUN(test_io_uring_madvise_dontneed);
    WILD_RUN(test_io_uring_madvise_remove_of_shared_memory);
    WILD_RUN(test_io_uring_madvise_guard_install_then_libc_guard_remove);
    WILD_RUN(test_io_uring_madvise_guard_install_and_remove);
    WILD_RUN(test_io_uring_fallocate_punch_hole_of_memfd);
    WILD_RUN(test_io_uring_ftruncate_of_memfd);
    WILD_RUN(test_io_uring_ftruncate_of_private_file_mapping);
    WILD_RUN(test_io_uring_openat_o_trunc_of_tmpfs_file);
    CHECK_EXIT();
}
