/* patch.h - the 'patch' unmap source: libc's munmap-family entry points (and ld.so's
 * private munmap, which dlclose uses) rewritten to jump into unmap.c, so calls glibc
 * makes to itself are seen; a later patcher of the same entry points is chained, or the
 * source's loss is reported to the sink. x86-64 only. Internal functions return 0 or
 * -errno. */
#ifndef MRC_PATCH_H
#define MRC_PATCH_H

#include <stddef.h>

#include "util/interposed.h"

/* Patches every entry point whose first bytes have the expected syscall-wrapper shape;
 * refuses (one note each) the others, including any already patched by another library.
 * Steps aside under a sanitizer or valgrind. Call once, after mrc_monitor_init, from the
 * constructor, before the program's threads exist. Returns the mask of patched mrc_fn
 * bits. */
unsigned mrc_patch_install(void);

/* Why patching must not happen in this process (a sanitizer, valgrind, not x86-64), or
 * NULL. */
const char *mrc_patch_step_aside_reason(void);

/* Another libc of the process (the one a dlmopen'd namespace loads, libc being its link
 * map, which is also its handle): every entry point of the libc rows made to jump into
 * the same hooks as the first libc's. Not chained or guarded against later patchers.
 * Returns 0, or -errno with *missing naming the entry point left as it was (or why
 * patching steps aside). Any thread, outside any hook. */
int mrc_patch_install_more(void *libc, const char **missing);

/* Start-up self-test (patch_selftest.c): triggers each kind of unmap once on private
 * memory through libc's own entry points (as glibc's internal calls reach them) and
 * checks that the patched hooks saw it. Logs coverage at info level, notes what is
 * incomplete. preload: whether the preload hooks are on (they cover calls through the
 * PLT). Returns the mask of mrc_fn bits whose arrival was confirmed, plus bit
 * MRC_FN_COUNT if glibc's free was seen unmapping from inside libc. */
unsigned mrc_patch_selftest(int preload);

/* Called after an mprotect that made [addr, addr+len) executable (another library may
 * just have patched code there; patch_chain.c): if that covers a watched entry point,
 * each one is checked, and one whose first bytes are no longer ours is chained (its new
 * jump moved into a trampoline that our hook calls after invalidating) or, if that code
 * cannot be moved, given up: the sink's source_lost hears what is lost. Any thread, any
 * time after install; never allocates; may change errno. */
void mrc_patch_code_changed(const void *addr, size_t len);

/* libmrcache's own exported functions on the unmap path, which another library may patch
 * (patch_exports.c). The kinds that can be chained (their jump moved aside, our logic
 * run first, then theirs): the table's CHAIN rows (util/interposed.h); the GUARD rows,
 * if patched, are reported lost. */
#define MRC_EXPORT_ENUM_NOGUARD(id)
#define MRC_EXPORT_ENUM_GUARD(id)
#define MRC_EXPORT_ENUM_CHAIN(id, kind) MRC_EXPORT_##kind,
#define MRC_EXPORT_ENUM(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_EXPORT_ENUM_, guard, id)
enum mrc_export_kind { MRC_FNS(MRC_EXPORT_ENUM) MRC_EXPORT_KINDS };

struct mrc_export {
    const char *name;
    void *entry;          /* our own code (not whatever the name resolves to) */
    int kind;             /* enum mrc_export_kind, or -1 */
};

/* Starts watching these: each one's first bytes are held against our file's, and one
 * found changed later is chained or given up (mrc_patch_check_all, which the caller
 * runs next for a patcher whose constructor ran before ours). From the constructor,
 * after mrc_monitor_init. */
void mrc_patch_guard_exports(const struct mrc_export *list, unsigned n);

/* Looks at every watched entry point, libc's and ours, and chains (or gives up) each one
 * whose first bytes changed. Any thread, any time after install; never allocates. */
void mrc_patch_check_all(void);

/* The cheap look of the registration path: one watched entry point (libc's and ours, in
 * turn), and one found changed handled as mrc_patch_code_changed does. For a patcher
 * that writes without making the page executable through our mprotect. Not from a hook. */
void mrc_patch_check(void);

/* "patch" when every entry point is patched, "patch(k/n)" when some, "" when none. */
const char *mrc_patch_summary(void);

#endif
