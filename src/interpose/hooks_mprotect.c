/* hooks_mprotect.c - the exported mprotect: after a call that leaves memory executable,
 * the patch source checks whether another library has just rewritten one of libc's
 * entry points it patched (patchers make the page writable, write their jump, and make
 * it executable again, through the PLT: UCX's libucm does so in its constructor). Not
 * dlopen: a wrapper would become dlopen's caller, whose RUNPATH, $ORIGIN and namespace
 * glibc uses to find the library. A call refused for want of mappings is made again once
 * the cache's watches gave theirs back (monitor/unmap.h). Invariants: the real call's
 * result and errno are the caller's; while nothing is patched the check is a few
 * compares. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "interpose/export.h"
#include "interpose/hooks.h"
#include "monitor/patch.h"
#include "monitor/unmap.h"
#include "util/real.h"
#include "util/sys.h"

MRC_EXPORT int mprotect(void *addr, size_t len, int prot)
{
    int (*real)(void *, size_t, int) = __atomic_load_n(&mrc_real.mprotect, __ATOMIC_RELAXED);
    int rc = real ? real(addr, len, prot) : mrc_sys_mprotect(addr, len, prot);
    /* Splitting a mapping needs a VMA more: our watches may hold the ones it lacks. */
    if (rc != 0 && real && mrc_monitor_maps_again())
        rc = real(addr, len, prot);
    if (rc == 0 && (prot & PROT_EXEC)) {
        int saved = errno;
        mrc_patch_code_changed(addr, len);
        errno = saved;
    }
    return rc;
}

MRC_OWN_ALL(MRC_FNS_MPROTECT)
