/* start.c - the constructor: the runtime sets everything up before main (a hook entered
 * earlier, inside another library's constructor, may have done it already), then the
 * PLT calls of free may skip libmrcache's own free while its allocator hooks idle. */
#include "interpose/hooks.h"
#include "runtime/runtime.h"

__attribute__((constructor)) static void mrc_start(void)
{
    mrc_init();
    mrc_rt_free_direct(mrc_hooks_free);
}
