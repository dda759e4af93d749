/* start.c - the constructor: the runtime sets everything up before main (a hook entered
 * earlier, inside another library's constructor, may have done it already), learns which
 * of our exports the patch source must watch and which of libibverbs' entry points are
 * to lead to ours, then lets the PLT calls of free skip
 * libmrcache's own free while its allocator hooks idle. */
#include "interpose/hooks.h"
#include "monitor/patch.h"
#include "runtime/runtime.h"
#include "util/config.h"
#include "util/real.h"

/* The exports the unmap path relies on, the table's guarded rows: a patcher that finds
 * these by name and writes over them would take the program's calls away from our hooks. */
#define GUARDED_NOGUARD(sym, id)
#define GUARDED_GUARD(sym, id) { #sym, (void *)mrc_own_##id, -1 },
#define GUARDED_CHAIN(sym, id, kind) { #sym, (void *)mrc_own_##id, MRC_EXPORT_##kind },
#define GUARDED(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(GUARDED_, guard, sym, id)
static const struct mrc_export exports[] = { MRC_FNS(GUARDED) };

/* The rows whose libibverbs entry point jumps to our export (runtime/bind.c). */
#define ENTRY_NOPATCH(sym, id)
#define ENTRY_SYSCALL(sym, id, ...)
#define ENTRY_ENTRY(sym, id) { #sym, (void **)&mrc_real.id, (void *)mrc_entry_##id },
#define ENTRY(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(ENTRY_, patch, sym, id)
static const struct mrc_rt_entry verbs_entries[] = { MRC_FNS(ENTRY) };

__attribute__((constructor)) static void mrc_start(void)
{
    mrc_init();
    mrc_config_pass_on();   /* here, not in mrc_init, which a hook may run */
    mrc_rt_verbs_entries(verbs_entries, sizeof(verbs_entries) / sizeof(verbs_entries[0]));
    mrc_rt_guard_exports(exports, sizeof(exports) / sizeof(exports[0]));
    mrc_rt_free_direct(mrc_own_free);
}
