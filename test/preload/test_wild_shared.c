/* test_wild_shared.c - memory shared with another process, changed by it (the MPI
 * intra-node pattern: shm_open/memfd/SysV/shared anonymous segments among local ranks).
 * Its munmap and remap change only its own mappings (tested: our pages stay); what frees
 * ours is truncating or punching the shared file, or MADV_REMOVE of the shared memory.
 * No hook in our process sees those: only the kernel knows; truncation drops a private
 * mapping's copies of the file's pages too. So registrations over shared memory and file
 * mappings are not cached by default (MRCACHE_SHARED=register: these pass); under
 * MRCACHE_SHARED=cache the discarding ones are the documented limit (TODO). */
#include <linux/falloc.h>
#include <sys/ipc.h>
#include <sys/shm.h>

#include <sys/syscall.h>

#include "wild.h"

#define LEN (1u << 20)

/* Runs other(arg) in another process (a copy: it has the same mappings and files) and
 * waits for it; its nonzero result fails the test. The system call instruction, not
 * fork or _Fork: libmrcache releases idle registrations before those, and the other
 * process stands for an unrelated one (another rank on the node), whose start releases
 * nothing here. */
static void in_other_process(int (*other)(void *), void *arg)
{
    fflush(NULL);
    pid_t pid = (pid_t)RAW_SYSCALL(SYS_fork);
    if (pid == 0)
        _exit(other(arg));
    int st = 0;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other process failed: status %#x", st);
}

/* Register p, let the other process act, register p again: the write must be in our
 * current pages. discarding: the action frees our pages (SKIP if it did not). */
static void shared_case(char *p, int (*other)(void *), void *arg, int discarding, const char *what)
{
    if (!p || !first_registration(p, LEN))
        return;
    uint64_t frame = page_frame(p);
    in_other_process(other, arg);
    if (discarding && !page_replaced(p, frame)) {
        check_skipf("%s left our pages in place", what);
        return;
    }
    if (!discarding)
        CHECKF(!page_replaced(p, frame), "%s changed our pages", what);
    if (discarding && wild_shared_cached())
        wild_todo("MRCACHE_SHARED=cache: another process's change to shared memory is seen by no hook here");
    registered_again(p, LEN, what);
}

struct file_arg {
    int fd;
    char *map;
    const char *path;   /* the name the other process opens, if any */
};

static int other_ftruncate(void *a)
{
    const struct file_arg *f = a;
    return ftruncate(f->fd, 0) || ftruncate(f->fd, LEN) ? errno : 0;
}

static int other_truncate_path(void *a)
{
    const struct file_arg *f = a;
    return truncate(f->path, 0) || truncate(f->path, LEN) ? errno : 0;
}

static int other_punch_by_name(void *a)
{
    const struct file_arg *f = a;
    int fd = shm_open(f->path, O_RDWR, 0);
    if (fd < 0)
        return errno;
    int rc = fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, LEN) ? errno : 0;
    close(fd);
    return rc;
}

static int other_madv_remove(void *a)
{
    const struct file_arg *f = a;
    return madvise(f->map, LEN, MADV_REMOVE) ? errno : 0;
}

static int other_madv_dontneed(void *a)
{
    const struct file_arg *f = a;
    return madvise(f->map, LEN, MADV_DONTNEED) ? errno : 0;
}

/* Its own mapping there goes and a new one takes its place, written all over. */
static int other_munmap_remap(void *a)
{
    const struct file_arg *f = a;
    if (munmap(f->map, LEN) || map_anon(f->map, LEN, MAP_FIXED_NOREPLACE) != f->map)
        return errno ? errno : EIO;
    memset(f->map, 0x5a, LEN);
    return 0;
}

static char *map_fd(int fd)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static char *map_fd_private(int fd)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    return p == MAP_FAILED ? NULL : p;
}

static char *map_shared_anon(void)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void test_other_process_truncates_shared_memfd(void)
{
    struct file_arg f = { .fd = memfd_create("wild-shared", 0) };
    CHECK(f.fd >= 0 && ftruncate(f.fd, LEN) == 0);
    f.map = map_fd(f.fd);
    shared_case(f.map, other_ftruncate, &f, 1, "a memfd truncated by another process");
    if (f.map)
        munmap(f.map, LEN);
    close(f.fd);
}

/* A private mapping: truncation drops its private copies too (POSIX: no pages past the
 * end), whoever truncates. */
static void test_other_process_truncates_privately_mapped_memfd(void)
{
    struct file_arg f = { .fd = memfd_create("wild-private", 0) };
    CHECK(f.fd >= 0 && ftruncate(f.fd, LEN) == 0);
    f.map = map_fd_private(f.fd);
    shared_case(f.map, other_ftruncate, &f, 1, "a privately mapped memfd truncated by another process");
    if (f.map)
        munmap(f.map, LEN);
    close(f.fd);
}

static void test_other_process_truncates_privately_mapped_file_by_path(void)
{
    char path[] = "/tmp/wild-private-XXXXXX";
    struct file_arg f = { .fd = mkstemp(path), .path = path };
    CHECK(f.fd >= 0 && ftruncate(f.fd, LEN) == 0);
    f.map = map_fd_private(f.fd);
    shared_case(f.map, other_truncate_path, &f, 1, "a privately mapped file another process truncated by path");
    if (f.map)
        munmap(f.map, LEN);
    close(f.fd);
    unlink(path);
}

static void test_other_process_punches_hole_in_shm_open_object(void)
{
    char name[64];
    snprintf(name, sizeof(name), "/wild-shared-%d", (int)getpid());
    struct file_arg f = { .fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600), .path = name };
    CHECK(f.fd >= 0 && ftruncate(f.fd, LEN) == 0);
    f.map = map_fd(f.fd);
    shared_case(f.map, other_punch_by_name, &f, 1, "a shm_open object another process opened by name and punched");
    if (f.map)
        munmap(f.map, LEN);
    close(f.fd);
    shm_unlink(name);
}

static void test_other_process_truncates_tmpfs_file_by_path(void)
{
    char path[] = "/dev/shm/wild-shared-XXXXXX";
    struct file_arg f = { .fd = mkstemp(path), .path = path };
    CHECK(f.fd >= 0 && ftruncate(f.fd, LEN) == 0);
    f.map = map_fd(f.fd);
    shared_case(f.map, other_truncate_path, &f, 1, "a tmpfs file another process truncated by path");
    if (f.map)
        munmap(f.map, LEN);
    close(f.fd);
    unlink(path);
}

static void test_other_process_madv_remove_of_shared_anonymous_memory(void)
{
    struct file_arg f = { .fd = -1, .map = map_shared_anon() };
    shared_case(f.map, other_madv_remove, &f, 1, "shared anonymous memory another process MADV_REMOVEd");
    if (f.map)
        munmap(f.map, LEN);
}

/* The other process attaches the segment itself, as a peer rank does. */
static int other_attach_remove(void *a)
{
    int id = *(const int *)a;
    char *q = shmat(id, NULL, 0);
    if (q == (void *)-1)
        return errno;
    int rc = madvise(q, LEN, MADV_REMOVE) ? errno : 0;
    shmdt(q);
    return rc;
}

static void test_other_process_madv_remove_of_sysv_segment(void)
{
    int id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
    CHECK(id >= 0);
    char *p = id >= 0 ? shmat(id, NULL, 0) : (void *)-1;
    if (p != (void *)-1)
        shared_case(p, other_attach_remove, &id, 1, "a System V segment another process attached and MADV_REMOVEd");
    if (p != (void *)-1)
        shmdt(p);
    if (id >= 0)
        shmctl(id, IPC_RMID, NULL);
}

/* Not a hazard: the other process's unmap and new mapping are its own. */
static void test_other_process_munmap_and_remap_keeps_our_pages(void)
{
    struct file_arg f = { .fd = -1, .map = map_shared_anon() };
    shared_case(f.map, other_munmap_remap, &f, 0, "shared anonymous memory another process unmapped and mapped anew");
    if (f.map)
        munmap(f.map, LEN);
}

/* Not a hazard: MADV_DONTNEED drops only the other process's page table entries. */
static void test_other_process_madv_dontneed_keeps_our_pages(void)
{
    struct file_arg f = { .fd = -1, .map = map_shared_anon() };
    shared_case(f.map, other_madv_dontneed, &f, 0, "shared anonymous memory another process MADV_DONTNEEDed");
    if (f.map)
        munmap(f.map, LEN);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    WILD_RUN(test_other_process_truncates_shared_memfd);
    WILD_RUN(test_other_process_truncates_privately_mapped_memfd);
    WILD_RUN(test_other_process_truncates_privately_mapped_file_by_path);
    WILD_RUN(test_other_process_punches_hole_in_shm_open_object);
    WILD_RUN(test_other_process_truncates_tmpfs_file_by_path);
    WILD_RUN(test_other_process_madv_remove_of_shared_anonymous_memory);
    WILD_RUN(test_other_process_madv_remove_of_sysv_segment);
    WILD_RUN(test_other_process_munmap_and_remap_keeps_our_pages);
    WILD_RUN(test_other_process_madv_dontneed_keeps_our_pages);
    CHECK_EXIT();
}
