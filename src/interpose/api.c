/* api.c - the exported public API (include/mrcache.h); each call forwards to its logic
 * in runtime/control.c, which initialises libmrcache if the call arrives before our
 * constructor (from another library's). Invariants: these symbols are ABI (their names
 * and signatures never change incompatibly: see the header); every call returns 0 or a
 * count, or -errno, and leaves errno as it found it (an allocator calling from free must
 * not see it change). */
#include <errno.h>

#define MRCACHE_BUILDING_LIBRARY
#include "mrcache.h"

#include "interpose/export.h"
#include "runtime/runtime.h"

#define KEEP_ERRNO(call)                                                       \
    do {                                                                       \
        int saved_errno_ = errno;                                              \
        int rc_ = (call);                                                      \
        errno = saved_errno_;                                                  \
        return rc_;                                                            \
    } while (0)

MRC_EXPORT int mrcache_version(unsigned *major, unsigned *minor)
{
    if (major)
        *major = MRCACHE_VERSION_MAJOR;
    if (minor)
        *minor = MRCACHE_VERSION_MINOR;
    return 0;
}

MRC_EXPORT int mrcache_monitors(void)
{
    KEEP_ERRNO(mrc_rt_api_monitors());
}

MRC_EXPORT int mrcache_invalidate(const void *addr, size_t len, unsigned flags)
{
    KEEP_ERRNO(mrc_rt_api_invalidate(addr, len, flags));
}

MRC_EXPORT int mrcache_flush(struct ibv_pd *pd, unsigned flags)
{
    KEEP_ERRNO(mrc_rt_api_flush(pd, flags));
}

MRC_EXPORT int mrcache_stats_read(size_t size, struct mrcache_stats *out)
{
    KEEP_ERRNO(mrc_rt_api_stats_read(size, out));
}

MRC_EXPORT int mrcache_stats_dump(int fd, unsigned flags)
{
    KEEP_ERRNO(mrc_rt_api_stats_dump(fd, flags));
}
