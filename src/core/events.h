/* events.h - the cache core's contract with the sources of memory events. Sources
 * publish through the sink: a range whose pages are about to go or change (begin), the
 * same range once they have (done), and a source that can no longer see what it watched
 * (source_lost); what an event means is decided by whoever filled the sink: the cache
 * core answers begin and done (mrc_cache_sink), the runtime source_lost. The core asks
 * of the sources what it needs around the registrations it makes (mrc_event_sources):
 * a range watched before it is pinned and let go once its registration is gone, events
 * read but not yet published flushed before a lookup, a check of the sources before
 * each back-end registration, and what is known of the memory a miss registers (struct
 * mrc_range). The causes of an invalidation are named here too (each has its counter:
 * util/stats.h).
 * Invariants: begin and done are safe in any hook (they never allocate, deregister or
 * wait for a registration); a source calls done once for each begin, after the change;
 * every watch is matched by one unwatch of the same range, never from a hook. */
#ifndef MRC_EVENTS_H
#define MRC_EVENTS_H

#include <stdint.h>

#include "util/procmaps.h"
#include "util/stats.h"

/* Why entries were invalidated. */
enum mrc_inval_cause {
    MRC_INVAL_MUNMAP,
    MRC_INVAL_MREMAP,
    MRC_INVAL_MADVISE,
    MRC_INVAL_MMAP_FIXED,
    MRC_INVAL_SHM,
    MRC_INVAL_BRK,
    MRC_INVAL_FREE,      /* free/realloc of a chunk the allocator gives back with munmap/mremap */
    MRC_INVAL_TRIM,      /* heap trimming inside free, malloc_trim */
    MRC_INVAL_API,       /* asked for by the program or the tests */
    MRC_INVAL_SOURCE_LOST,   /* everything, when an unmap source is lost (a patch given up) */
    MRC_INVAL_FILE,      /* pages of a mapped file dropped: truncation, fallocate */
    MRC_INVAL_LAST
};
_Static_assert(MRC_INVAL_LAST == MRC_STAT_INVAL_CAUSES, "one counter per cause (util/stats.h)");

/* The cause's name: its counter's, without "inval_". */
static inline const char *mrc_inval_cause_name(enum mrc_inval_cause cause)
{
    return mrc_stat_names[MRC_STAT_INVAL_BASE + cause] + sizeof "inval_" - 1;
}

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

/* What is known of memory a miss registers, [first, last]: asked of the sources at most
 * once per miss and per question (mrc_range_ask), and handed along to the admission,
 * the expansion and the back-end, each of which asks only what it needs. */
#define MRC_RANGE_HUGE_OK 1u    /* huge_ok: huge pages may be advised there (no special
                                 * mapping, and the program refused huge pages nowhere) */
#define MRC_RANGE_VMA 2u        /* vma_ok and vma: the kernel's mapping holding first */
#define MRC_RANGE_PAGEABLE 4u   /* pageable: on-demand paging can serve every page */
struct mrc_range {
    uint64_t first, last;
    uint32_t asked;             /* the questions answered so far */
    uint32_t huge_ok, vma_ok, pageable;
    struct mrc_vma vma;
    /* Answers the questions of ask (sets their fields; asked is the caller's). */
    void (*describe)(struct mrc_range *r, uint32_t ask);
};

static inline void mrc_range_init(struct mrc_range *r, uint64_t first, uint64_t last,
                                  void (*describe)(struct mrc_range *r, uint32_t ask))
{
    *r = (struct mrc_range){ .first = first, .last = last, .describe = describe };
}

/* r, with the questions of ask answered (each asked once in r's life). */
static inline const struct mrc_range *mrc_range_ask(struct mrc_range *r, uint32_t ask)
{
    uint32_t todo = ask & ~r->asked;
    if (todo) {
        r->describe(r, todo);
        r->asked |= todo;
    }
    return r;
}

/* What the core asks of the sources (each member optional: NULL, never asked). Filled
 * by whoever started the sources; the core calls them without its lock. */
struct mrc_event_sources {
    /* Non-zero while a source holds events it has read and not yet published: a get
     * then calls quiesce, which waits until they are, before its lookup (an unmapper
     * whose call has returned may be registering the address again). One load per get
     * otherwise. quiesce may block: never called with the cache lock held. */
    const uint32_t *pending;
    void (*quiesce)(void);
    /* Before each back-end registration: a source makes sure it still sees what it
     * watches (a patch someone wrote over is found here). Must not call into the cache
     * but through the sink. */
    void (*check)(void);
    /* [addr, addr+len) is about to be registered (watch, before the pin: an unmap
     * during the NIC call is then seen), and its registration is gone: failed,
     * deregistered, or handed out of the cache to a caller of its own (unwatch). Never
     * fail the registration; keep errno. */
    void (*watch)(uint64_t addr, uint64_t len);
    void (*unwatch)(uint64_t addr, uint64_t len);
    /* What is known of a range (struct mrc_range); without it, nothing is: huge pages
     * may be advised, nothing is known to be pageable, no mapping is known. Without the
     * cache lock; never called in a hook. */
    void (*describe)(struct mrc_range *r, uint32_t ask);
};

#endif
