/* hooks_process.c - the exported fork: deregisters idle cached MRs first, as
 * MRCACHE_FORK says or rdma-core's fork-safe mode needs (see mrc_rt_before_fork), then
 * forks. posix_spawn and system do not come here: they exec at once, so what the child
 * inherits does not matter; _Fork, clone and syscall(SYS_fork) do not either. */
#include <errno.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "runtime/runtime.h"
#include "util/real.h"

MRC_EXPORT pid_t fork(void)
{
    if (!mrc_real_ensure_libc() || !mrc_real.fork) {
        errno = ENOSYS;
        return -1;
    }
    mrc_rt_before_fork();
    return mrc_real.fork();
}

MRC_OWN_ALL(MRC_FNS_PROCESS)
