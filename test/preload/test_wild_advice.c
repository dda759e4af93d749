/* test_wild_advice.c - advice the madvise hook does not act on, and the calls that give
 * advice without madvise: MADV_GUARD_INSTALL/REMOVE (Linux 6.13), MADV_PAGEOUT, MADV_COLD,
 * MADV_COLLAPSE, posix_madvise, process_madvise on our own pidfd and from another process,
 * and remap_file_pages. Where the kernel keeps pinned pages the test passes and says so;
 * where it refuses the advice, SKIP. Prints which advice process_madvise accepts. */
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/uio.h>

#include <sys/syscall.h>

#include "wild.h"

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
#define ADV_GUARD_INSTALL 102   /* uapi asm-generic/mman-common.h, Linux 6.13 */
#define ADV_GUARD_REMOVE 103

#define LEN (1u << 20)

static long pg;

static char *map_shared_anon(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* A memfd of len bytes mapped with flags; *fd for closing. */
static char *map_memfd(size_t len, int flags, int *fd)
{
    *fd = memfd_create("wild-advice", MFD_CLOEXEC);
    if (*fd < 0 || ftruncate(*fd, (off_t)len) != 0)
        return NULL;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, *fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* The advice changed the buffer's pages (then they must be seen) or it did not (said, and
 * the registration again must still see them: the kernel kept the pinned pages). */
static void after_advice(char *p, size_t len, uint64_t frame, const char *what)
{
    if (page_replaced(p, frame))
        wild_note("%s: the pages were replaced", what);
    else
        wild_note("%s: the kernel kept the pages", what);
    registered_again(p, len, what);
}

/* The advice must replace the pages for the test to mean anything: SKIP otherwise. */
static void after_discarding_advice(char *p, size_t len, uint64_t frame, const char *what)
{
    if (!page_replaced(p, frame)) {
        check_skipf("%s left the pages in place", what);
        return;
    }
    registered_again(p, len, what);
}

/* ---- MADV_GUARD_INSTALL zaps the range (an access would fault); GUARD_REMOVE lets it be
 * faulted in afresh. Pinned pages do not stop it. ---- */

static int guard(char *p, size_t len, const char *what)
{
    if (madvise(p, len, ADV_GUARD_INSTALL) != 0) {
        check_skipf("madvise(MADV_GUARD_INSTALL) on %s: %s (Linux 6.13+)", what, strerror(errno));
        return 0;
    }
    CHECK(madvise(p, len, ADV_GUARD_REMOVE) == 0);
    return 1;
}

static void test_madvise_guard_install_on_anonymous_memory(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    if (guard(p, LEN, "anonymous memory"))
        after_discarding_advice(p, LEN, frame, "MADV_GUARD_INSTALL then REMOVE on anonymous memory");
    munmap(p, LEN);
}

/* The registration made private copies (the NIC pins for writing); guards drop them and
 * the file's pages come back. */
static void test_madvise_guard_install_on_private_file_mapping(void)
{
    int fd;
    char *p = map_memfd(LEN, MAP_PRIVATE, &fd);
    CHECK(p != NULL);
    if (p && first_registration(p, LEN)) {
        uint64_t frame = page_frame(p);
        if (guard(p, LEN, "a MAP_PRIVATE file mapping"))
            after_discarding_advice(p, LEN, frame, "MADV_GUARD_INSTALL then REMOVE on a MAP_PRIVATE file mapping");
    }
    if (p)
        munmap(p, LEN);
    close(fd);
}

/* Not a hazard: the file keeps its pages; the guard only unmapped them. */
static void test_madvise_guard_install_on_shared_file_mapping(void)
{
    int fd;
    char *p = map_memfd(LEN, MAP_SHARED, &fd);
    CHECK(p != NULL);
    if (p && first_registration(p, LEN)) {
        uint64_t frame = page_frame(p);
        if (guard(p, LEN, "a MAP_SHARED file mapping"))
            after_advice(p, LEN, frame, "MADV_GUARD_INSTALL then REMOVE on a MAP_SHARED memfd");
    }
    if (p)
        munmap(p, LEN);
    close(fd);
}

/* ---- reclaim advice: pinned pages are not freed (anonymous ones are not even unmapped;
 * a file's are unmapped and fault back in, the same pages) ---- */

static void reclaim_case(char *p, int advice, const char *what)
{
    if (!p || !first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    CHECKF(madvise(p, LEN, advice) == 0, "%s: %s", what, strerror(errno));
    after_advice(p, LEN, frame, what);
}

static void test_madvise_pageout_anonymous_memory(void)
{
    char *p = map_anon(NULL, LEN, 0);
    reclaim_case(p, MADV_PAGEOUT, "MADV_PAGEOUT of anonymous memory");
    munmap(p, LEN);
}

static void test_madvise_pageout_shared_memfd(void)
{
    int fd;
    char *p = map_memfd(LEN, MAP_SHARED, &fd);
    reclaim_case(p, MADV_PAGEOUT, "MADV_PAGEOUT of a MAP_SHARED memfd");
    if (p)
        munmap(p, LEN);
    close(fd);
}

static void test_madvise_cold_anonymous_memory(void)
{
    char *p = map_anon(NULL, LEN, 0);
    reclaim_case(p, MADV_COLD, "MADV_COLD of anonymous memory");
    munmap(p, LEN);
}

static void test_madvise_cold_shared_memfd(void)
{
    int fd;
    char *p = map_memfd(LEN, MAP_SHARED, &fd);
    reclaim_case(p, MADV_COLD, "MADV_COLD of a MAP_SHARED memfd");
    if (p)
        munmap(p, LEN);
    close(fd);
}

/* MADV_COLLAPSE copies small pages into a new huge page; a cached MR's pins make it fail
 * (EAGAIN). Without the preload nothing pins them and it succeeds: either way the buffer
 * registered again must see the pages mapped now. */
static void test_madvise_collapse_of_registered_pages(void)
{
    size_t huge = huge_size() ? huge_size() : 2u << 20;
    char *raw = map_anon(NULL, 2 * huge, 0);
    CHECK(raw != NULL);
    if (!raw)
        return;
    char *p = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    madvise(p, huge, MADV_NOHUGEPAGE);   /* small pages first, so there is something to collapse */
    memset(p, 1, huge);
    madvise(p, huge, MADV_HUGEPAGE);
    char *buf = p + pg;
    if (first_registration(buf, 16 * (size_t)pg)) {
        uint64_t frame = page_frame(buf);
        int rc = madvise(p, huge, MADV_COLLAPSE);
        wild_note("MADV_COLLAPSE of the huge page around the buffer: %s", rc ? strerror(errno) : "collapsed");
        after_advice(buf, 16 * (size_t)pg, frame, "MADV_COLLAPSE over registered pages");
    }
    munmap(raw, 2 * huge);
}

/* glibc's posix_madvise(POSIX_MADV_DONTNEED) does nothing (it may not discard, by POSIX). */
static void test_posix_madvise_dontneed(void)
{
    char *p = map_anon(NULL, LEN, 0);
    if (!first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    CHECK(posix_madvise(p, LEN, POSIX_MADV_DONTNEED) == 0);
    after_advice(p, LEN, frame, "posix_madvise(POSIX_MADV_DONTNEED)");
    munmap(p, LEN);
}

/* ---- process_madvise: on our own pidfd Linux 6.13+ takes any advice ---- */

static int self_pidfd = -1;

static int process_advise(int pidfd, void *p, size_t len, int advice)
{
    struct iovec iov = { p, len };
    ssize_t n = process_madvise(pidfd, &iov, 1, advice, 0);
    return n == (ssize_t)len ? 0 : n < 0 ? errno : EIO;
}

static void self_case(char *p, int advice, const char *what)
{
    if (!p || !first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    int rc = process_advise(self_pidfd, p, LEN, advice);
    if (rc) {
        check_skipf("%s: %s", what, strerror(rc));
        return;
    }
    if (advice == ADV_GUARD_INSTALL)
        CHECK(madvise(p, LEN, ADV_GUARD_REMOVE) == 0);
    after_discarding_advice(p, LEN, frame, what);
}

static void test_process_madvise_self_dontneed(void)
{
    char *p = map_anon(NULL, LEN, 0);
    self_case(p, MADV_DONTNEED, "process_madvise(own pidfd, MADV_DONTNEED)");
    munmap(p, LEN);
}

static void test_process_madvise_self_dontneed_locked(void)
{
    char *p = map_anon(NULL, LEN, 0);
    self_case(p, MADV_DONTNEED_LOCKED, "process_madvise(own pidfd, MADV_DONTNEED_LOCKED)");
    munmap(p, LEN);
}

static void test_process_madvise_self_remove_shared_memory(void)
{
    char *p = map_shared_anon(LEN);
    self_case(p, MADV_REMOVE, "process_madvise(own pidfd, MADV_REMOVE) of shared memory");
    munmap(p, LEN);
}

static void test_process_madvise_self_guard_install(void)
{
    char *p = map_anon(NULL, LEN, 0);
    self_case(p, ADV_GUARD_INSTALL, "process_madvise(own pidfd, MADV_GUARD_INSTALL) then REMOVE");
    munmap(p, LEN);
}

/* Another process advising ours (it needs ptrace rights over us: root, or the same user
 * with ptrace_scope 0). The kernel takes only non-destructive advice from it. */
static void other_case(char *p, int advice, int discarding, const char *what)
{
    if (!p || !first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    pid_t parent = getpid();
    int pipefd[2];
    CHECK(pipe(pipefd) == 0);
    fflush(NULL);
    pid_t pid = (pid_t)RAW_SYSCALL(SYS_fork);   /* nothing released first: an unrelated process, see test_wild_shared.c */
    if (pid == 0) {
        int fd = pidfd_open(parent, 0);
        int rc = fd < 0 ? errno : process_advise(fd, p, LEN, advice);
        _exit(write(pipefd[1], &rc, sizeof(rc)) == sizeof(rc) ? 0 : 1);
    }
    int rc = -1, st = 0;
    CHECK(read(pipefd[0], &rc, sizeof(rc)) == sizeof(rc));
    CHECK(waitpid(pid, &st, 0) == pid);
    close(pipefd[0]);
    close(pipefd[1]);
    if (rc) {
        check_skipf("%s: %s", what, strerror(rc));
        return;
    }
    if (discarding)
        after_discarding_advice(p, LEN, frame, what);
    else
        after_advice(p, LEN, frame, what);
}

static void test_process_madvise_other_process_dontneed(void)
{
    char *p = map_anon(NULL, LEN, 0);
    other_case(p, MADV_DONTNEED, 1, "process_madvise(MADV_DONTNEED) from another process");
    munmap(p, LEN);
}

static void test_process_madvise_other_process_pageout(void)
{
    int fd;
    char *p = map_memfd(LEN, MAP_SHARED, &fd);
    other_case(p, MADV_PAGEOUT, 0, "process_madvise(MADV_PAGEOUT) of a MAP_SHARED memfd from another process");
    if (p)
        munmap(p, LEN);
    close(fd);
}

/* Which advice process_madvise takes, on our pidfd and from another process (each on a
 * fresh, populated 2 MiB-aligned range, so no advice sees another's effect; the two that
 * act on physical pages, HWPOISON and SOFT_OFFLINE, are not tried). */
static void report_process_madvise_advice(void)
{
    static const int advice[] = { 0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                                  23, 24, 25, ADV_GUARD_INSTALL, ADV_GUARD_REMOVE };
    char self_ok[256] = "", other_ok[256] = "";
    size_t huge = 2u << 20;
    for (unsigned i = 0; i < sizeof(advice) / sizeof(advice[0]); i++) {
        int a = advice[i], result[2];
        /* MADV_REMOVE needs shared memory; the rest are tried on private memory. */
        int flags = a == MADV_REMOVE ? MAP_SHARED | MAP_ANONYMOUS : MAP_PRIVATE | MAP_ANONYMOUS;
        for (int who = 0; who < 2; who++) {
            char *raw = mmap(NULL, 2 * huge, PROT_READ | PROT_WRITE, flags, -1, 0);
            if (raw == MAP_FAILED)
                return;
            char *where = (char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
            memset(where, 1, huge);
            fflush(NULL);
            pid_t child = who ? fork() : 0;
            if (child == 0 && who) {
                pause();
                _exit(0);
            }
            int fd = who ? pidfd_open(child, 0) : self_pidfd;
            result[who] = fd < 0 ? EBADF : process_advise(fd, where, huge, a);
            if (who) {
                kill(child, SIGKILL);
                waitpid(child, NULL, 0);
                if (fd >= 0)
                    close(fd);
            }
            munmap(raw, 2 * huge);
        }
        if (!result[0])
            snprintf(self_ok + strlen(self_ok), sizeof(self_ok) - strlen(self_ok), " %d", a);
        if (!result[1])
            snprintf(other_ok + strlen(other_ok), sizeof(other_ok) - strlen(other_ok), " %d", a);
    }
    wild_note("process_madvise accepts on its own pidfd:%s", self_ok);
    wild_note("process_madvise accepts from another process:%s", other_ok);
}

/* ---- remap_file_pages: emulated by an mmap over the range, no munmap family call ---- */

static void test_remap_file_pages_replaces_pages(void)
{
    int fd;
    char *p = map_memfd(2 * LEN, MAP_SHARED, &fd);
    CHECK(p != NULL);
    if (p && first_registration(p, LEN)) {
        uint64_t frame = page_frame(p);
        /* The buffer's range now maps the file's second megabyte. */
        if (remap_file_pages(p, LEN, 0, (size_t)LEN / (size_t)pg, 0) != 0)
            check_skipf("remap_file_pages: %s", strerror(errno));
        else
            after_discarding_advice(p, LEN, frame, "remap_file_pages over the buffer");
    }
    if (p)
        munmap(p, 2 * LEN);
    close(fd);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    pg = sysconf(_SC_PAGESIZE);
    self_pidfd = pidfd_open(getpid(), 0);
    open_nic();
    report_process_madvise_advice();
    WILD_RUN(test_madvise_guard_install_on_anonymous_memory);
    WILD_RUN(test_madvise_guard_install_on_private_file_mapping);
    WILD_RUN(test_madvise_guard_install_on_shared_file_mapping);
    WILD_RUN(test_madvise_pageout_anonymous_memory);
    WILD_RUN(test_madvise_pageout_shared_memfd);
    WILD_RUN(test_madvise_cold_anonymous_memory);
    WILD_RUN(test_madvise_cold_shared_memfd);
    WILD_RUN(test_madvise_collapse_of_registered_pages);
    WILD_RUN(test_posix_madvise_dontneed);
    WILD_RUN(test_process_madvise_self_dontneed);
    WILD_RUN(test_process_madvise_self_dontneed_locked);
    WILD_RUN(test_process_madvise_self_remove_shared_memory);
    WILD_RUN(test_process_madvise_self_guard_install);
    WILD_RUN(test_process_madvise_other_process_dontneed);
    WILD_RUN(test_process_madvise_other_process_pageout);
    WILD_RUN(test_remap_file_pages_replaces_pages);
    CHECK_EXIT();
}
