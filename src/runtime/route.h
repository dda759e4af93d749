/* route.h - where the PLT calls of free in the objects loaded at start-up go: straight
 * to the next allocator's free while libmrcache's would only pass them on (the
 * allocator hooks idle), and through libmrcache's once the hooks resume. */
#ifndef MRC_ROUTE_H
#define MRC_ROUTE_H

/* Points the bound PLT slots of free that hold self (libmrcache's own free, whatever the
 * name free resolves to) at the next allocator's. Only from the constructor; does nothing
 * unless the process runs one thread. Returns how many slots now skip libmrcache. */
unsigned mrc_route_free_direct(void (*self)(void *));

/* Puts libmrcache's free back into every slot mrc_route_free_direct changed. Safe in
 * any hook: no allocation, no ld.so call, no lock; callers serialize (the patch source's
 * check; a forked child runs alone). 0, or -errno if a slot could not be written, or -EBUSY if
 * another library rebound one meanwhile: its calls may still skip the allocator hooks,
 * and the caller must stop trusting the cache. Repeatable: only what is left is done. */
int mrc_route_free_back(void);

#endif
