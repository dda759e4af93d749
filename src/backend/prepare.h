/* prepare.h - what a miss does to its memory before the NIC pins it: huge pages under
 * large registrations of private anonymous memory (MRCACHE_HUGEPAGES) and parallel
 * population of large ranges not yet resident (MRCACHE_POPULATE), and what the NIC is
 * then handed (the page-size statistics). Never makes a registration fail: any refusal
 * of the kernel leaves the memory as it was, for the pin to fault in as usual. */
#ifndef MRC_PREPARE_H
#define MRC_PREPARE_H

#include <stdint.h>

#include "core/events.h"

enum mrc_huge_mode {
    MRC_HUGE_OFF,
    MRC_HUGE_ADVISE,     /* MADV_HUGEPAGE over 2 MiB extents not yet populated */
    MRC_HUGE_COLLAPSE,   /* ... and MADV_COLLAPSE over populated ones */
};

struct mrc_prepare_params {
    int huge_mode;             /* enum mrc_huge_mode */
    uint64_t huge_min;         /* registrations at least this long get huge pages */
    uint64_t populate_min;     /* bytes not resident from which a miss populates first; 0 off */
    unsigned populate_threads; /* threads that populate, the registering one included */
};

/* At start-up, before any registration. */
void mrc_prepare_init(const struct mrc_prepare_params *p);

/* From now on, a writable pin's first page is faulted in before the range is watched:
 * a source that watches by splitting the mapping (the userfaultfd one) is on. A piece
 * split off a private anonymous mapping never touched gets an anon_vma of its own at
 * its first fault and can no longer merge with its neighbours, so each watch would
 * leave a VMA behind. */
void mrc_prepare_touch_first(void);

/* Before the pin of [addr, addr + len), which r describes: writable, whether the NIC may
 * write (populated for writing, so that the pin breaks no copy-on-write itself). Huge
 * pages are advised only where r says they may be. */
void mrc_prepare(uint64_t addr, uint64_t len, int writable, struct mrc_range *r);

/* After a pin of [addr, addr + len): counts its page-size mix and translation entries,
 * and warns (once) about a registration of more than 2^20 4 KiB pages. */
void mrc_prepare_account(uint64_t addr, uint64_t len);

/* Populates [start, end) with up to threads threads, the caller one of them, each a
 * 2 MiB-aligned share. 0, or -errno of the first share that failed (-EOPNOTSUPP once
 * the kernel lacks MADV_POPULATE_READ/WRITE). */
int mrc_populate(uint64_t start, uint64_t end, int writable, unsigned threads);

#endif
