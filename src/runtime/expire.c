/* expire.c - MRCACHE_IDLE_TIMEOUT: pinned memory the program released comes back even if
 * it makes no further verbs call. The helper thread sweeps the cache every period (an
 * eighth of the timeout), and a registration idle for the whole timeout goes at the
 * sweep after, so it stays at most an eighth longer. Invariants: only the helper thread
 * sweeps (outside any hook, so it may deregister); a hit pays for none of it but a
 * load and a compare in its release (the idle clock's tick, see mrc_cache_put); off
 * (0), the helper sleeps as before. */
#include <time.h>

#include "runtime/state.h"
#include "util/clock.h"

#define MIN_PERIOD_NS 1000000ull   /* a timeout below 8 ms still sweeps at most every ms */

static uint64_t period_ns;         /* 0: off */
static uint32_t ticks;             /* periods an entry must stay unused */
static uint64_t next_ns;

void mrc_rt_expire_init(void)
{
    uint64_t timeout_ns = mrc_rt.cfg.idle_timeout_ms * 1000000ull;
    if (!timeout_ns)
        return;
    period_ns = timeout_ns / 8 > MIN_PERIOD_NS ? timeout_ns / 8 : MIN_PERIOD_NS;
    /* An entry stamped at tick s was released before tick s + 1: at tick s + ticks it
     * has been idle more than (ticks - 1) periods, which must cover the timeout. */
    ticks = (uint32_t)((timeout_ns + period_ns - 1) / period_ns) + 1;
    next_ns = mrc_now_ns() + period_ns;
}

uint64_t mrc_rt_expire_period_ns(void)
{
    return period_ns;
}

const struct timespec *mrc_rt_expire_wait(struct timespec *ts)
{
    if (!period_ns)
        return NULL;
    uint64_t now = mrc_now_ns(), left = next_ns > now ? next_ns - now : 0;
    ts->tv_sec = (time_t)(left / 1000000000u);
    ts->tv_nsec = (long)(left % 1000000000u);
    return ts;
}

void mrc_rt_expire_due(void)
{
    if (!period_ns)
        return;
    uint64_t now = mrc_now_ns();
    if (now < next_ns)
        return;
    /* A late sweep (the machine suspended, the thread starved) counts as one tick: an
     * entry is then kept longer than the timeout, never shorter. */
    next_ns = now + period_ns;
    if (mrc_rt_cache_live())
        mrc_cache_expire(&mrc_rt.cache, ticks);
}
