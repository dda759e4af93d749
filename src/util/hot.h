/* hot.h - MRC_HOT marks the functions a registration and its release run through, so
 * that the linker packs them together (.text.hot): after the NIC's system call every
 * code page is a TLB miss again, and fewer pages mean fewer misses. */
#ifndef MRC_HOT_H
#define MRC_HOT_H
#define MRC_HOT __attribute__((hot))
#endif
