/* pagescan.c - the kernel's PAGEMAP_SCAN over /proc/self/pagemap: runs of present pages
 * and whether they are huge, and the page-size mix a registration is made over; mincore
 * where the kernel lacks the scan (residency only).
 * Invariants: the file is opened for each scan and closed before returning, so a
 * program's close_range or a fork never leaves us reading another file; the result
 * vector is on the stack (no allocation); once the kernel refuses the call it is never
 * asked again. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/pagescan.h"
#include "util/range.h"
#include "util/sys.h"

/* linux/fs.h of Linux 6.7 (the build's headers may be older; the ABI is fixed). */
struct mrc_page_region {
    uint64_t start, end, categories;
};
struct mrc_pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
             category_anyof_mask, return_mask;
};
#define MRC_PAGEMAP_SCAN _IOWR('f', 16, struct mrc_pm_scan_arg)
#define MRC_PAGE_IS_PRESENT (1u << 3)
#define MRC_PAGE_IS_SWAPPED (1u << 4)
#define MRC_PAGE_IS_HUGE (1u << 6)

#define SCAN_VEC 64   /* runs per call: 1.5 KiB of stack */

static int scan_missing;   /* the kernel lacks PAGEMAP_SCAN */

/* [*start, *end) widened to whole 4 KiB pages: what the kernel reports on. */
static void whole_pages(uint64_t *start, uint64_t *end)
{
    uint64_t len;
    mrc_range_round(*start, *end - *start, 4096, start, &len);
    *end = *start + len;
}

/* Without PAGEMAP_SCAN (before Linux 6.7): residency from mincore(2), one 2 MiB window
 * at a time (a 512-byte vector), in runs of resident pages; huge pages are not told. */
#define WINDOW_PAGES 512

int mrc_pagescan_mincore(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg)
{
    unsigned char vec[WINDOW_PAGES];
    whole_pages(&start, &end);
    uint64_t run = 0;   /* start of the resident run under way, 0: none */
    for (uint64_t at = start; at < end; at += WINDOW_PAGES * 4096ull) {
        uint64_t n = (end - at) / 4096 < WINDOW_PAGES ? (end - at) / 4096 : WINDOW_PAGES;
        if (mincore((void *)(uintptr_t)at, n * 4096, vec) != 0)
            return -errno;   /* a hole: the caller registers as is */
        for (uint64_t i = 0; i < n; i++) {
            uint64_t page = at + i * 4096;
            if ((vec[i] & 1) && !run)
                run = page;
            if (!(vec[i] & 1) && run) {
                int rc = fn(run, page, MRC_PAGES_PRESENT, arg);
                if (rc)
                    return rc;
                run = 0;
            }
        }
    }
    return run ? fn(run, end, MRC_PAGES_PRESENT, arg) : 0;
}

int mrc_pagescan_resident(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg)
{
    int rc = mrc_pagescan(start, end, fn, arg);
    if (rc != -EOPNOTSUPP)
        return rc;
    return mrc_pagescan_mincore(start, end, fn, arg);
}

static unsigned flags_of(uint64_t categories)
{
    return MRC_PAGES_PRESENT | (categories & MRC_PAGE_IS_HUGE ? MRC_PAGES_HUGE : 0);
}

int mrc_pagescan(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg)
{
    if (__atomic_load_n(&scan_missing, __ATOMIC_RELAXED))
        return -EOPNOTSUPP;
    whole_pages(&start, &end);
    int fd = mrc_sys_open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct mrc_page_region vec[SCAN_VEC];
    int rc = 0;
    while (start < end && !rc) {
        struct mrc_pm_scan_arg a = {
            .size = sizeof(a),
            .start = start,
            .end = end,
            .vec = (uintptr_t)vec,
            .vec_len = SCAN_VEC,
            .category_anyof_mask = MRC_PAGE_IS_PRESENT | MRC_PAGE_IS_SWAPPED,
            .return_mask = MRC_PAGE_IS_PRESENT | MRC_PAGE_IS_SWAPPED | MRC_PAGE_IS_HUGE,
        };
        int n = mrc_sys_ioctl(fd, MRC_PAGEMAP_SCAN, &a);
        if (n < 0) {
            rc = -errno;
            if (rc == -ENOTTY) {
                __atomic_store_n(&scan_missing, 1, __ATOMIC_RELAXED);
                rc = -EOPNOTSUPP;
            }
            break;
        }
        for (int i = 0; i < n && !rc; i++)
            rc = fn(vec[i].start, vec[i].end, flags_of(vec[i].categories), arg);
        /* A full vector may have stopped short: the kernel says where it got to. */
        if (n < SCAN_VEC || a.walk_end <= start)
            break;
        start = a.walk_end;
    }
    mrc_sys_close(fd);
    return rc;
}

/* The huge pages [s, e) touches: one translation entry each. */
static uint64_t huge_pages(uint64_t s, uint64_t e)
{
    return ((e + MRC_HUGE_SIZE - 1) / MRC_HUGE_SIZE) - s / MRC_HUGE_SIZE;
}

static int mix_fn(uint64_t s, uint64_t e, unsigned flags, void *arg)
{
    struct mrc_page_mix *m = arg;
    if (flags & MRC_PAGES_HUGE) {
        m->huge_bytes += e - s;
        m->entries += huge_pages(s, e);
    } else {
        m->small_bytes += e - s;
        m->entries += (e - s) / 4096;
    }
    return 0;
}

int mrc_pagescan_mix(uint64_t start, uint64_t end, struct mrc_page_mix *mix)
{
    *mix = (struct mrc_page_mix){ 0 };
    whole_pages(&start, &end);
    int rc = mrc_pagescan(start, end, mix_fn, mix);
    if (rc)
        return rc;
    uint64_t len = end - start;
    mix->absent_bytes = len - mix->small_bytes - mix->huge_bytes;
    mix->entries += mix->absent_bytes / 4096;   /* faulted in by the pin as base pages */
    mix->entries_4k = len / 4096;
    return 0;
}
