/* patch_x86.h - the x86-64 machine code behind the patch source: matching an entry
 * point's first bytes against a known shape, writing an absolute jump
 * over them, recognising and moving another library's jump, moving a function's first
 * instructions into a trampoline, and the pages of stubs near the code they serve.
 * Knows nothing of which functions are patched or why.
 * Invariants: code is changed only through RWX pages (other threads may run elsewhere on
 * them), a thread entering an entry point being rewritten sees whole instructions only,
 * and nothing here allocates or uses libc's patched wrappers (its system calls are
 * util/sys.h's). */
#ifndef MRC_PATCH_X86_H
#define MRC_PATCH_X86_H

#include <stddef.h>
#include <stdint.h>

/* The jump mrc_x86_write_jump writes: movabs $hook, %r11; jmp *%r11. */
#define MRC_X86_JUMP_LEN 13

/* Whether code matches shape (hex bytes separated by spaces, "??" any byte); returns the
 * number of bytes the shape covers, or 0. */
size_t mrc_x86_shape_match(const uint8_t *code, const char *shape);

/* Whether code starts with a jump someone else wrote: jmp rel32/rel8, jmp *mem,
 * movabs $x,%reg (UCX bistro, libfabric memhooks, Open MPI's patcher), push+ret, or a
 * debugger's int3. */
int mrc_x86_foreign_jump(const uint8_t *code);

/* Makes later code changes serialise every thread (membarrier), where the kernel can. */
void mrc_x86_sync_init(void);

/* Makes entry jump to hook: where entry is 8-byte aligned and a stub page can be had
 * near it, a jmp rel32 to a stub, swapped into the first 8 bytes in one store (bytes 5-7
 * kept); else the absolute jump written over the first MRC_X86_JUMP_LEN bytes (2-byte
 * aligned), a thread arriving meanwhile spinning on a two-byte loop. Either way no
 * thread runs half-old, half-new bytes at the entry; a thread stopped between two of
 * the first instructions inside the first 5 bytes would (libc's wrappers whose first
 * instruction is shorter: mmap, mremap). 0 or -errno (the page could not be made
 * writable). */
int mrc_x86_write_jump(uint8_t *entry, void *hook);

#define MRC_X86_STUB_SIZE 32

/* A 32-byte stub slot in a page within a rel32 jump of entry, left writable (and still
 * executable: stubs already there may be running) until mrc_x86_stub_seal; NULL if none
 * can be had. mrc_x86_stub_seal(slot, keep) makes the page executable only again, and
 * gives the slot back unless keep. */
uint8_t *mrc_x86_stub_alloc(const uint8_t *entry);
void mrc_x86_stub_seal(uint8_t *slot, int keep);

/* jmp *0(%rip); .quad target at at (14 bytes): an absolute jump that clobbers no
 * register. */
void mrc_x86_abs_jump(uint8_t *at, uint64_t target);

/* Moves the jump at code into to (16 bytes). 1 if code starts with one that still works
 * elsewhere: jmp rel32 (made absolute), movabs $x,%reg; jmp *%reg (copied: UCX when its
 * hook is far, libfabric, Open MPI, our own), jmp *disp32(%rip) (through the same slot,
 * which its owner may change later). 0 for anything else. */
int mrc_x86_move_jump(const uint8_t *code, uint8_t *to);

/* Where the jump at code leads (through its slot for an indirect one), or 0 if
 * mrc_x86_move_jump would not move it. */
uint64_t mrc_x86_jump_target(const uint8_t *code);

/* Replaces the first 8 bytes at entry, if they are still old, by a jmp rel32 to stub,
 * in one aligned 8-byte compare-and-swap followed by a serialisation of every thread.
 * Returns the new head, or 0 if the page could not be written or the bytes changed. */
uint64_t mrc_x86_swap_head(uint8_t *entry, uint64_t old, const uint8_t *stub);

/* Copies the whole instructions that cover the first need bytes of code into to (room
 * bytes, within a rel32 jump of code), with RIP-relative operands and branches made to
 * point where they did and short branches made near, followed by a jump back to the
 * first instruction not copied: a trampoline that runs the original function. Returns
 * its length, or 0 if an instruction is not one this knows or does not fit. */
size_t mrc_x86_relocate(const uint8_t *code, size_t need, uint8_t *to, size_t room);

#endif
