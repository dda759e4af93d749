/* range.h - address ranges as start and length, with the top of memory as a hard stop:
 * an end or a rounding that would wrap saturates there instead. */
#ifndef MRC_RANGE_H
#define MRC_RANGE_H

#include <stdint.h>

/* The end of [start, start+len), or the top of memory. */
static inline uint64_t mrc_range_end(uint64_t start, uint64_t len)
{
    return start + len < start ? UINT64_MAX : start + len;
}

/* [a, a+len) widened to whole pages of psz (a power of two), up to the top of memory. */
static inline void mrc_range_round(uint64_t a, uint64_t len, uint64_t psz, uint64_t *start, uint64_t *plen)
{
    uint64_t m = psz - 1, end = mrc_range_end(a, len);
    end = (end + m) < end ? UINT64_MAX : ((end + m) & ~m);
    *start = a & ~m;
    *plen = end - *start;
}

/* The smallest range holding both [*start, +*len) and [s, +l), into *start and *len. */
static inline void mrc_range_union(uint64_t *start, uint64_t *len, uint64_t s, uint64_t l)
{
    uint64_t e = mrc_range_end(*start, *len), e2 = mrc_range_end(s, l);
    *start = *start < s ? *start : s;
    *len = (e > e2 ? e : e2) - *start;
}

#endif
