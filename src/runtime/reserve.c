/* reserve.c - the pools' reserves: the cache's entries and the front-end's handles come
 * from memory the helper thread touched beforehand, so that a registration rarely pays a
 * page's first touch (tens of microseconds in some VMs): that work moves to the helper,
 * it does not go away. Invariants: the reserves exist only while the helper runs (a pool
 * running low asks it, through mrc_helper_refill, for more); only the helper refills. */
#include "runtime/helper.h"
#include "runtime/state.h"

void mrc_rt_reserve_give(void)
{
    mrc_cache_set_reserve(&mrc_rt.cache, mrc_helper_refill, NULL);
    mrc_verbs_set_reserve(&mrc_rt.verbs, mrc_helper_refill, NULL);
    mrc_helper_refill(NULL);   /* filled before the first miss needs them */
}

void mrc_rt_reserve_refill(void)
{
    mrc_cache_refill(&mrc_rt.cache);
    mrc_verbs_refill(&mrc_rt.verbs);
}

void mrc_rt_reserve_take_back(void)
{
    mrc_cache_set_reserve(&mrc_rt.cache, NULL, NULL);
    mrc_verbs_set_reserve(&mrc_rt.verbs, NULL, NULL);
}
