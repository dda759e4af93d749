/* verify.h - MRCACHE_VERIFY: cache hits checked against /proc/self/pagemap. The page frame
 * numbers under a registration are recorded when it is made; a checked hit whose pages
 * now map other frames is stale (the monitors missed an unmap): it is reported, counted,
 * invalidated and replaced by a fresh registration, never handed out.
 * Invariants: off (MRCACHE_VERIFY=0, or turned off for lack of privileges) the hit path
 * pays one load and one predictable branch (mrc_verify_on); no malloc anywhere (the side
 * table is mmap'ed); errno is preserved on success.
 *
 * Privileges: the kernel shows frame numbers only to a pagemap file opened with
 * CAP_SYS_ADMIN (in the initial user namespace); without it every frame reads as 0. The
 * first pagemap read that finds a present page at frame 0 says so once ("verification is
 * off") and turns verification off for the life of the process: nothing more is checked
 * or counted. The file is opened at start-up, so a program that drops privileges later
 * keeps verification. */
#ifndef MRC_VERIFY_H
#define MRC_VERIFY_H

#include <stdint.h>

#include "core/cache.h"

/* Check one hit in this many per thread; 0 = off. Read on every registration. */
extern uint64_t mrc_verify_period;

/* Sets verification up from MRCACHE_VERIFY (period) and MRCACHE_MAX_ENTRIES (sizes the
 * side table). At start-up, before the first registration. Logs and stays off if the
 * table cannot be mapped or the pagemap cannot be opened. */
void mrc_verify_init(uint64_t period, uint64_t max_entries);

static inline int mrc_verify_on(void)
{
    return __builtin_expect(__atomic_load_n(&mrc_verify_period, __ATOMIC_RELAXED) != 0, 0);
}

/* mrc_cache_get with verification: records a new registration's frames; checks one hit
 * in mrc_verify_period against them and, if stale, invalidates it and gets again (a miss:
 * a registration of the current pages). Same contract as mrc_cache_get. */
int mrc_verify_get(struct mrc_cache *c, void *domain, uint64_t addr, uint64_t len, uint64_t iova,
                   uint32_t access, struct mrc_entry **out);

#endif
