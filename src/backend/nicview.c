/* nicview.c - what the NIC is handed at each pin: the bytes in base and in huge pages
 * and the translation entries they need, counted into the statistics, with one warning
 * for a registration past 2^20 4 KiB pages (EFA's limit per MR; far beyond what a NIC's
 * translation cache holds). Invariant: ranges below a huge page are not scanned (a scan
 * costs about 3 us, more than such a pin on the software NIC) and count as base pages. */
#include <stddef.h>
#include <stdint.h>

#include "backend/pagescan.h"
#include "backend/prepare.h"
#include "util/hot.h"
#include "util/log.h"
#include "util/range.h"
#include "util/stats.h"

#define MANY_PAGES (1ull << 20)

static int warned;

MRC_HOT void mrc_prepare_account(uint64_t addr, uint64_t len)
{
    struct mrc_page_mix m;
    if (len < MRC_HUGE_SIZE || mrc_pagescan_mix(addr, addr + len, &m) != 0) {
        uint64_t first, span;
        mrc_range_round(addr, len, 4096, &first, &span);
        uint64_t pages = span / 4096;
        m = (struct mrc_page_mix){ .small_bytes = pages * 4096, .entries = pages, .entries_4k = pages };
    }
    /* One load of the thread's block for the four: every miss counts them. */
    uint64_t *v = mrc_stats_block()->v;
    mrc_stats_bump(&v[MRC_STAT_SMALL_PAGE_BYTES], m.small_bytes + m.absent_bytes);
    mrc_stats_bump(&v[MRC_STAT_HUGE_PAGE_BYTES], m.huge_bytes);
    mrc_stats_bump(&v[MRC_STAT_NIC_ENTRIES], m.entries);
    mrc_stats_bump(&v[MRC_STAT_NIC_ENTRIES_4K], m.entries_4k);
    if (m.entries_4k <= MANY_PAGES)
        return;
    mrc_stat_add(MRC_STAT_REGS_OVER_1M_PAGES, 1);
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        MRC_WARN("a registration of %llu MiB spans %llu 4 KiB pages, more than 2^20 (some NICs refuse that "
                 "many per MR); it has %llu MiB in huge pages, %llu translation entries "
                 "(MRCACHE_HUGEPAGES can give it more; said once, counted in regs_over_1m_pages)",
                 (unsigned long long)(len >> 20), (unsigned long long)m.entries_4k,
                 (unsigned long long)(m.huge_bytes >> 20), (unsigned long long)m.entries);
}
