/* sink.h - the one interface every source of memory events reports through: a range
 * whose pages are about to go or change (begin), the same range once they have (done),
 * and a source that can no longer see what it watched (source_lost). Sources publish;
 * what an event means for the process is decided by whoever filled the sink: the cache
 * core answers begin and done (mrc_cache_sink), the runtime source_lost.
 * Invariants: begin and done are safe in any hook (they never allocate, deregister or
 * wait for a registration); a source calls done once for each begin, after the change. */
#ifndef MRC_SINK_H
#define MRC_SINK_H

#include <stdint.h>

#include "util/stats.h"

struct mrc_inval_sink {
    /* Non-zero once anything may need invalidating: until then a source drops its
     * events at the cost of this one load. */
    const uint32_t *armed;
    /* [addr, addr+len) is about to change: returns a ticket for done. */
    uint64_t (*begin)(void *arg, uint64_t addr, uint64_t len, enum mrc_inval_cause cause);
    /* The change has happened (whether or not the call succeeded). */
    void (*done)(void *arg, uint64_t ticket, uint64_t addr, uint64_t len, enum mrc_inval_cause cause);
    void *arg;
    /* A source stopped seeing what it watched: lost names what goes unseen from now on,
     * still what (if anything) still sees it; NULL when nothing sees any unmap of
     * registered memory any more. Any thread, any hook; never allocates. */
    void (*source_lost)(const char *lost, const char *still);
};

static inline int mrc_sink_armed(const struct mrc_inval_sink *s)
{
    return s->armed && __atomic_load_n(s->armed, __ATOMIC_RELAXED) != 0;
}

static inline uint64_t mrc_sink_begin(const struct mrc_inval_sink *s, uint64_t addr, uint64_t len,
                                      enum mrc_inval_cause cause)
{
    return s->begin(s->arg, addr, len, cause);
}

static inline void mrc_sink_done(const struct mrc_inval_sink *s, uint64_t ticket, uint64_t addr, uint64_t len,
                                 enum mrc_inval_cause cause)
{
    s->done(s->arg, ticket, addr, len, cause);
}

/* Both at once, for a source that learns of a change after it happened (the
 * userfaultfd handler, an allocator's prediction checked afterwards). */
static inline void mrc_sink_changed(const struct mrc_inval_sink *s, uint64_t addr, uint64_t len,
                                    enum mrc_inval_cause cause)
{
    s->done(s->arg, s->begin(s->arg, addr, len, cause), addr, len, cause);
}

#endif
