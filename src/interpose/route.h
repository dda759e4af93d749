/* route.h - where the loaded objects' calls of free go: straight to the next allocator
 * while libmrcache's free only passes them on, through it while the allocator hooks
 * run. */
#ifndef MRC_ROUTE_H
#define MRC_ROUTE_H

/* direct: the PLT slots of free that hold libmrcache's free (or are not bound yet) get
 * the next allocator's; !direct: those holding the next allocator's get ours back.
 * Returns how many slots changed. Objects loaded later bind to ours. Not from a
 * signal handler (dl_iterate_phdr). */
unsigned mrc_route_free(int direct);

/* libmrcache's own free (hooks_malloc.c). */
void mrc_free_self(void *p);

#endif
