/* pagescan.h - what backs a range of this process's memory, page by page, as the NIC
 * will see it when it pins the range: which pages are present and which of them are
 * mapped as huge pages (the kernel's PAGEMAP_SCAN, Linux 6.7+; no privilege needed).
 * Internal functions return 0 or -errno; -EOPNOTSUPP once the kernel lacks the call. */
#ifndef MRC_PAGESCAN_H
#define MRC_PAGESCAN_H

#include <stdint.h>

#define MRC_PAGES_PRESENT 1u   /* in memory (or in swap): the pin will not fault it in */
#define MRC_PAGES_HUGE 2u      /* mapped by one PMD (a transparent huge page) or hugetlb */
#define MRC_HUGE_SIZE (2ull << 20)

/* Calls fn(start, end, flags, arg) for each run of present pages of [start, end) (page
 * aligned) in address order; what lies between runs is not populated. A non-zero return
 * of fn stops the scan and is returned. */
typedef int (*mrc_pagescan_fn)(uint64_t start, uint64_t end, unsigned flags, void *arg);
int mrc_pagescan(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg);

/* The same, falling back to mincore(2) where the kernel lacks PAGEMAP_SCAN: runs of
 * resident pages then never say MRC_PAGES_HUGE. For what needs residency only. */
int mrc_pagescan_resident(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg);
/* The fallback itself: runs of resident pages from mincore(2), never huge. */
int mrc_pagescan_mincore(uint64_t start, uint64_t end, mrc_pagescan_fn fn, void *arg);

/* The page-size mix of [start, end): bytes present in base pages and in huge pages, and
 * the NIC's translation entries, one per base page or per huge page found (entries_4k:
 * one per 4 KiB page, what it needs without huge pages). */
struct mrc_page_mix {
    uint64_t small_bytes, huge_bytes, absent_bytes;
    uint64_t entries, entries_4k;
};
int mrc_pagescan_mix(uint64_t start, uint64_t end, struct mrc_page_mix *mix);

#endif
