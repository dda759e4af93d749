/* leaks.c - the leak section of the dump: live MR handles (made minus released, from the
 * per-thread counters of util/stats.c, which never lose a count) and, with call sites on,
 * where they were registered. A handle made on one thread may be released on another:
 * only the sums are meaningful. */
#include <string.h>

#include "util/callsite.h"
#include "util/leaks.h"
#include "util/outpath.h"

void mrc_leaks_site_add(struct mrc_leak_tag *t, int dir)
{
    mrc_callsite_live_add(t->site, t->len, t->from_hit, dir);
}

void mrc_leaks_sum(struct mrc_leaks_summary *out)
{
    struct mrc_stats_block s;
    mrc_stats_sum(&s);
    out->created = s.v[MRC_STAT_HANDLES_MADE];
    out->released = s.v[MRC_STAT_HANDLES_RELEASED];
    out->count = out->created - out->released;
    out->bytes = s.v[MRC_STAT_HANDLE_BYTES_MADE] - s.v[MRC_STAT_HANDLE_BYTES_RELEASED];
}

void mrc_leaks_write(struct mrc_wbuf *w, int json)
{
    struct mrc_leaks_summary s;
    mrc_leaks_sum(&s);
    if (json) {
        mrc_wbuf_printf(w, "\"leaks\": {\"count\": %llu, \"bytes\": %llu, \"created\": %llu, \"released\": %llu, \"callsites\": ",
                        (unsigned long long)s.count, (unsigned long long)s.bytes, (unsigned long long)s.created,
                        (unsigned long long)s.released);
        mrc_callsite_write_list(w, MRC_CALLSITE_BY_LIVE, 1);
        mrc_wbuf_printf(w, "}");
        return;
    }
    mrc_wbuf_printf(w, "  MR handles registered and not deregistered (leaks, if this is the exit dump): %llu, %llu B (of %llu made)\n",
                    (unsigned long long)s.count, (unsigned long long)s.bytes, (unsigned long long)s.created);
    if (s.count)
        mrc_callsite_write_list(w, MRC_CALLSITE_BY_LIVE, 0);
}
