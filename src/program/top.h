/* top.h - the viewer of the live segments (mrcache --top, --once, --flush), for main.c. */
#ifndef MRC_TOP_H
#define MRC_TOP_H

/* argv[0] is the mode (--top, --once or --flush), the rest its options; returns the exit
 * status (2 for a usage error). */
int mrc_top_main(int argc, char **argv);

#endif
