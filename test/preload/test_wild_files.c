/* test_wild_files.c - a file's pages leave its MAP_SHARED mapping with no unmap at all:
 * truncation (ftruncate, truncate, open with O_TRUNC, fopen "w", in the forms glibc 2.36
 * exports) and fallocate (punch hole, collapse, insert, zero range), on a memfd, a
 * shm_open object, a tmpfs file, a disk file and a hugetlbfs memfd; and a MAP_PRIVATE
 * file mapping truncated under its private copies. A mode the file system lacks is SKIP.
 * Registrations over a file's mappings, shared or private, are cached only under
 * MRCACHE_SHARED=cache (the run that proves the file hooks on them). openat2 has no libc
 * function (syscall(2) only): a known limit (TODO) where the mapping is cached. */
#include <linux/falloc.h>
#include <sys/syscall.h>

#include "wild.h"

/* ---- where the file lives ---- */

enum backing_kind { MEMFD, SHM_OPEN, TMPFS_FILE, DISK_FILE, HUGETLBFS_MEMFD };

static const char *const backing_name[] = {
    [MEMFD] = "memfd", [SHM_OPEN] = "shm_open", [TMPFS_FILE] = "tmpfs_file",
    [DISK_FILE] = "disk_file", [HUGETLBFS_MEMFD] = "hugetlbfs_memfd",
};

/* One file of UNITS units (a page, or a huge page on hugetlbfs), mapped whole; the buffer
 * under test is units 1 and 2. */
#define UNITS 4
struct file {
    enum backing_kind kind;
    int fd;
    size_t unit, size;
    char path[128];     /* a name that reaches the same file (memfd: /proc/self/fd/N) */
    char shm_name[64];  /* shm_open's name, for shm_unlink */
    char *map;
};

static char huge_why[256];

/* A directory on a disk file system for DISK_FILE: WILD_DISK_DIR, else /var/tmp, /tmp. */
static int disk_file(char *path, size_t len)
{
    const char *dirs[] = { getenv("WILD_DISK_DIR"), "/var/tmp", "/tmp" };
    for (unsigned i = 0; i < 3; i++) {
        if (!dirs[i])
            continue;
        snprintf(path, len, "%s/wild-file-XXXXXX", dirs[i]);
        int fd = mkstemp(path);
        if (fd < 0)
            continue;
        if (!fd_on_tmpfs(fd))
            return fd;
        close(fd);
        unlink(path);
    }
    return -1;
}

/* Creates and maps the file (flags: MAP_SHARED or MAP_PRIVATE). 0 and a SKIP if this
 * machine has no such file. */
static int file_open(struct file *f, enum backing_kind kind, int map_flags)
{
    memset(f, 0, sizeof(*f));
    f->kind = kind;
    f->fd = -1;
    f->unit = (size_t)sysconf(_SC_PAGESIZE);
    switch (kind) {
    case MEMFD:
        f->fd = memfd_create("wild", MFD_CLOEXEC);
        break;
    case SHM_OPEN:
        snprintf(f->shm_name, sizeof(f->shm_name), "/wild-shm-%d", (int)getpid());
        f->fd = shm_open(f->shm_name, O_RDWR | O_CREAT | O_EXCL, 0600);
        snprintf(f->path, sizeof(f->path), "/dev/shm%s", f->shm_name);
        break;
    case TMPFS_FILE:
        /* A file opened by path on a tmpfs (here /dev/shm), not through shm_open. */
        snprintf(f->path, sizeof(f->path), "/dev/shm/wild-file-XXXXXX");
        f->fd = mkstemp(f->path);
        if (f->fd >= 0 && !fd_on_tmpfs(f->fd)) {
            check_skipf("/dev/shm is not a tmpfs here");
            return 0;
        }
        break;
    case DISK_FILE:
        f->fd = disk_file(f->path, sizeof(f->path));
        if (f->fd < 0) {
            check_skipf("no disk file system among WILD_DISK_DIR, /var/tmp, /tmp");
            return 0;
        }
        break;
    case HUGETLBFS_MEMFD:
        f->unit = huge_size();
        if (!f->unit || !hugepages_reserve(2 * UNITS, huge_why, sizeof(huge_why))) {
            check_skipf("%s", huge_why[0] ? huge_why : "no huge pages");
            return 0;
        }
        f->fd = memfd_create("wild-huge", MFD_CLOEXEC | MFD_HUGETLB);
        break;
    }
    CHECKF(f->fd >= 0, "%s: %s", backing_name[kind], strerror(errno));
    if (f->fd < 0)
        return 0;
    if (!f->path[0])
        snprintf(f->path, sizeof(f->path), "/proc/self/fd/%d", f->fd);
    f->size = UNITS * f->unit;
    CHECK(ftruncate(f->fd, (off_t)f->size) == 0);
    f->map = mmap(NULL, f->size, PROT_READ | PROT_WRITE, map_flags, f->fd, 0);
    CHECK(f->map != MAP_FAILED);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        return 0;
    }
    return 1;
}

static void file_close(struct file *f)
{
    if (f->map)
        munmap(f->map, f->size);
    if (f->fd >= 0)
        close(f->fd);
    if (f->shm_name[0])
        shm_unlink(f->shm_name);
    else if (f->kind == TMPFS_FILE || f->kind == DISK_FILE)
        unlink(f->path);
}

/* ---- the changes: each returns 0 or an errno value, and leaves the file UNITS long ---- */

typedef int (*change_fn)(struct file *f);

static int err(int rc) { return rc == 0 ? 0 : errno; }

static int regrow(struct file *f) { return err(ftruncate(f->fd, (off_t)f->size)); }

static int ch_ftruncate(struct file *f) { return err(ftruncate(f->fd, 0)) ?: regrow(f); }
static int ch_ftruncate64(struct file *f) { return err(ftruncate64(f->fd, 0)) ?: err(ftruncate64(f->fd, (off64_t)f->size)); }
static int ch_truncate(struct file *f) { return err(truncate(f->path, 0)) ?: err(truncate(f->path, (off_t)f->size)); }
static int ch_truncate64(struct file *f) { return err(truncate64(f->path, 0)) ?: err(truncate64(f->path, (off64_t)f->size)); }

/* Opened again by name with O_TRUNC, closed, grown back. */
static int reopened(struct file *f, int fd)
{
    if (fd < 0)
        return errno;
    close(fd);
    return regrow(f);
}

static int ch_open_trunc(struct file *f) { return reopened(f, open(f->path, O_RDWR | O_TRUNC)); }
static int ch_open64_trunc(struct file *f) { return reopened(f, open64(f->path, O_RDWR | O_TRUNC)); }
static int ch_openat_trunc(struct file *f) { return reopened(f, openat(AT_FDCWD, f->path, O_RDWR | O_TRUNC)); }
static int ch_openat64_trunc(struct file *f) { return reopened(f, openat64(AT_FDCWD, f->path, O_RDWR | O_TRUNC)); }
static int ch_creat(struct file *f) { return reopened(f, creat(f->path, 0600)); }
static int ch_creat64(struct file *f) { return reopened(f, creat64(f->path, 0600)); }
static int ch_shm_open_trunc(struct file *f) { return reopened(f, shm_open(f->shm_name, O_RDWR | O_TRUNC, 0600)); }
/* openat2 has no glibc wrapper in 2.36: the system call, as programs make it. */
static int ch_openat2_trunc(struct file *f)
{
    struct { uint64_t flags, mode, resolve; } how = { .flags = O_RDWR | O_TRUNC };
    return reopened(f, (int)syscall(SYS_openat2, AT_FDCWD, f->path, &how, sizeof(how)));
}

static int closed_stream(struct file *f, FILE *s)
{
    if (!s)
        return errno;
    fclose(s);
    return regrow(f);
}

static int ch_fopen_w(struct file *f) { return closed_stream(f, fopen(f->path, "w")); }
static int ch_fopen64_w(struct file *f) { return closed_stream(f, fopen64(f->path, "w")); }
static int ch_freopen_w(struct file *f)
{
    FILE *s = fopen(f->path, "r");
    if (!s)
        return errno;
    return closed_stream(f, freopen(f->path, "w", s));
}
static int ch_freopen64_w(struct file *f)
{
    FILE *s = fopen(f->path, "r");
    if (!s)
        return errno;
    return closed_stream(f, freopen64(f->path, "w", s));
}

/* The buffer's two units: offset 1 unit, length 2. */
static int ch_punch_hole(struct file *f)
{
    return err(fallocate(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)f->unit, (off_t)(2 * f->unit)));
}
static int ch_punch_hole64(struct file *f)
{
    return err(fallocate64(f->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off64_t)f->unit, (off64_t)(2 * f->unit)));
}
/* Unit 1 cut out: what follows moves down, the file's cache from there is dropped. */
static int ch_collapse_range(struct file *f)
{
    return err(fallocate(f->fd, FALLOC_FL_COLLAPSE_RANGE, (off_t)f->unit, (off_t)f->unit)) ?: regrow(f);
}
/* A unit inserted at 1: what follows moves up; then cut back to UNITS. */
static int ch_insert_range(struct file *f)
{
    return err(fallocate(f->fd, FALLOC_FL_INSERT_RANGE, (off_t)f->unit, (off_t)f->unit)) ?: regrow(f);
}
static int ch_zero_range(struct file *f)
{
    return err(fallocate(f->fd, FALLOC_FL_ZERO_RANGE, (off_t)f->unit, (off_t)(2 * f->unit)));
}
static int ch_zero_range_keep_size(struct file *f)
{
    return err(fallocate(f->fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)f->unit, (off_t)(2 * f->unit)));
}

/* ---- the check ---- */

/* The kernel (Linux 6.5 on) refuses a long-term writable pin (FOLL_LONGTERM|FOLL_WRITE,
 * what ib_umem_get asks for a writable MR, and io_uring for the software NIC's) of a
 * MAP_SHARED mapping of a file system that writes pages back: EFAULT. Such memory has no
 * MR that could go stale, so the test SKIPs (a read-only MR on a real NIC is pinned
 * without FOLL_WRITE and is not covered here). */
static int registrable(struct file *f, void *p, size_t len)
{
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, TEST_ACCESS(IBV_ACCESS_LOCAL_WRITE));
    if (mr) {
        CHECK(ibv_dereg_mr(mr) == 0);
        return 1;
    }
    if (errno == EFAULT && f->kind == DISK_FILE) {
        check_skipf("the kernel refuses a writable long-term pin of a disk file's shared pages: %s", strerror(errno));
        return 0;
    }
    CHECKF(0, "registering %s: %s", backing_name[f->kind], strerror(errno));
    return 0;
}

/* A change made with no libc function to hook (syscall(2)): a known limit wherever the
 * mapping is cached (under MRCACHE_SHARED=cache). */
static int no_libc_function(change_fn change);

/* Register the buffer, change the file, register the buffer again. */
static void file_case(enum backing_kind kind, int map_flags, change_fn change, const char *what)
{
    struct file f;
    if (!file_open(&f, kind, map_flags))
        goto out;
    char *buf = f.map + f.unit;
    size_t len = 2 * f.unit;
    if (!registrable(&f, buf, len) || !first_registration(buf, len))
        goto out;
    uint64_t frame = page_frame(buf);
    int rc = change(&f);
    if (rc) {
        check_skipf("%s on %s: %s", what, backing_name[kind], strerror(rc));
        goto out;
    }
    if (!page_replaced(buf, frame)) {
        check_skipf("%s on %s left the mapped pages in place", what, backing_name[kind]);
        goto out;
    }
    if (no_libc_function(change) && wild_shared_cached())
        wild_todo("syscall(SYS_openat2) calls no libc function a preload can see");
    registered_again(buf, len, what);
out:
    file_close(&f);
}

static int no_libc_function(change_fn change)
{
    return change == ch_openat2_trunc;
}

/* ---- the table: every change on every backing it applies to ---- */

struct change {
    const char *name;
    change_fn fn;
    unsigned backings;      /* bit per enum backing_kind */
};

#define ALL (1u << MEMFD | 1u << SHM_OPEN | 1u << TMPFS_FILE | 1u << DISK_FILE | 1u << HUGETLBFS_MEMFD)
/* Entry points that differ only in the symbol the program calls: one backing each. */
#define ONE (1u << TMPFS_FILE)

static const struct change changes[] = {
    { "ftruncate_down_up", ch_ftruncate, ALL },
    { "truncate_down_up", ch_truncate, ALL },
    { "open_o_trunc", ch_open_trunc, ALL },
    { "fallocate_punch_hole", ch_punch_hole, ALL },
    { "fallocate_collapse_range", ch_collapse_range, ALL },
    { "fallocate_insert_range", ch_insert_range, ALL },
    { "fallocate_zero_range", ch_zero_range, ALL },
    { "fallocate_zero_range_keep_size", ch_zero_range_keep_size, ALL },
    { "ftruncate64_down_up", ch_ftruncate64, ONE },
    { "truncate64_down_up", ch_truncate64, ONE },
    { "fallocate64_punch_hole", ch_punch_hole64, ONE },
    { "open64_o_trunc", ch_open64_trunc, ONE },
    { "openat_o_trunc", ch_openat_trunc, ONE },
    { "openat64_o_trunc", ch_openat64_trunc, ONE },
    { "openat2_o_trunc", ch_openat2_trunc, ONE },
    { "creat", ch_creat, ONE },
    { "creat64", ch_creat64, ONE },
    { "fopen_w", ch_fopen_w, ONE },
    { "fopen64_w", ch_fopen64_w, ONE },
    { "freopen_w", ch_freopen_w, ONE },
    { "freopen64_w", ch_freopen64_w, ONE },
    { "shm_open_o_trunc", ch_shm_open_trunc, 1u << SHM_OPEN },
};

static const struct change *cur_change;
static enum backing_kind cur_backing;
static int cur_map_flags;

static void run_current(void) { file_case(cur_backing, cur_map_flags, cur_change->fn, cur_change->name); }

/* A MAP_PRIVATE mapping: the software NIC pins for writing, so the registration itself
 * makes private copies of the file's pages (a read-only MR on a real NIC would pin the
 * file's own pages). Truncation unmaps private copies too (POSIX: the pages past the end
 * are gone): the buffer gets the file's new pages. */
static void test_private_file_mapping_truncated_on_memfd(void)
{
    file_case(MEMFD, MAP_PRIVATE, ch_ftruncate, "ftruncate under a MAP_PRIVATE mapping");
}

static void test_private_file_mapping_truncated_on_disk_file(void)
{
    file_case(DISK_FILE, MAP_PRIVATE, ch_ftruncate, "ftruncate under a MAP_PRIVATE mapping");
}

/* Not a hazard for a writable registration: a hole punched under a MAP_PRIVATE mapping
 * keeps its private copies (the kernel unmaps only the file's pages), so the test SKIPs
 * with "left the mapped pages in place". */
static void test_private_file_mapping_punch_hole_on_memfd(void)
{
    file_case(MEMFD, MAP_PRIVATE, ch_punch_hole, "fallocate(PUNCH_HOLE) under a MAP_PRIVATE mapping");
}

static void test_private_file_mapping_punch_hole_on_disk_file(void)
{
    file_case(DISK_FILE, MAP_PRIVATE, ch_punch_hole, "fallocate(PUNCH_HOLE) under a MAP_PRIVATE mapping");
}

/* The fallocate modes only a disk file system has (ext4 here), on the one mapping of such
 * a file that can be registered for writing: MAP_PRIVATE. Collapse and insert drop the
 * file's cache from the offset with private copies too, as truncation does; zeroing a
 * range keeps them (then SKIP: not a hazard for a writable registration). */
static void test_private_file_mapping_collapse_range_on_disk_file(void)
{
    file_case(DISK_FILE, MAP_PRIVATE, ch_collapse_range, "fallocate(COLLAPSE_RANGE) under a MAP_PRIVATE mapping");
}

static void test_private_file_mapping_insert_range_on_disk_file(void)
{
    file_case(DISK_FILE, MAP_PRIVATE, ch_insert_range, "fallocate(INSERT_RANGE) under a MAP_PRIVATE mapping");
}

static void test_private_file_mapping_zero_range_on_disk_file(void)
{
    file_case(DISK_FILE, MAP_PRIVATE, ch_zero_range, "fallocate(ZERO_RANGE) under a MAP_PRIVATE mapping");
}

static void test_private_file_mapping_openat2_o_trunc_on_memfd(void)
{
    file_case(MEMFD, MAP_PRIVATE, ch_openat2_trunc, "openat2(O_TRUNC) under a MAP_PRIVATE mapping");
}

/* A MAP_PRIVATE mapping read before its registration (the file's pages mapped, not yet
 * copied): the registration's copy and the truncation both happen to it. */
static void test_private_file_mapping_read_first_then_truncated(void)
{
    struct file f;
    if (!file_open(&f, MEMFD, MAP_PRIVATE))
        goto out;
    CHECK(pwrite(f.fd, "\x44", 1, (off_t)f.unit) == 1);
    char *buf = f.map + f.unit;
    CHECK(*(volatile char *)buf == 0x44);   /* the file's page, mapped read-only */
    if (!first_registration(buf, 2 * f.unit))
        goto out;
    uint64_t frame = page_frame(buf);
    CHECK(ch_ftruncate(&f) == 0);
    if (!page_replaced(buf, frame)) {
        check_skipf("ftruncate left the MAP_PRIVATE mapping's pages in place");
        goto out;
    }
    registered_again(buf, 2 * f.unit, "ftruncate under a MAP_PRIVATE mapping read before registering");
out:
    file_close(&f);
}

int main(void)
{
    expect_stale = getenv("EXPECT_STALE") && atoi(getenv("EXPECT_STALE"));
    open_nic();
    for (unsigned i = 0; i < sizeof(changes) / sizeof(changes[0]); i++)
        for (int k = MEMFD; k <= HUGETLBFS_MEMFD; k++) {
            if (!(changes[i].backings & (1u << k)))
                continue;
            char name[128];
            snprintf(name, sizeof(name), "test_%s_on_%s", changes[i].name, backing_name[k]);
            cur_change = &changes[i];
            cur_backing = (enum backing_kind)k;
            cur_map_flags = MAP_SHARED;
            wild_run(name, run_current);
        }
    WILD_RUN(test_private_file_mapping_truncated_on_memfd);
    WILD_RUN(test_private_file_mapping_truncated_on_disk_file);
    WILD_RUN(test_private_file_mapping_read_first_then_truncated);
    WILD_RUN(test_private_file_mapping_openat2_o_trunc_on_memfd);
    WILD_RUN(test_private_file_mapping_punch_hole_on_memfd);
    WILD_RUN(test_private_file_mapping_punch_hole_on_disk_file);
    WILD_RUN(test_private_file_mapping_collapse_range_on_disk_file);
    WILD_RUN(test_private_file_mapping_insert_range_on_disk_file);
    WILD_RUN(test_private_file_mapping_zero_range_on_disk_file);
    hugepages_give_back();
    CHECK_EXIT();
}
