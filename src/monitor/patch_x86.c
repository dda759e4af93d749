/* patch_x86.c - x86-64 code writing for the patch source (see patch_x86.h): shapes,
 * jumps, moving another library's jump into a stub near libc, and the store that swaps an
 * entry point's head.
 * Invariants: every write goes to a page made RWX, never RW; the entry's head changes
 * only by aligned stores (2 bytes while writing a jump, 8 bytes when swapping one), each
 * followed by a serialisation of every thread (membarrier) where the kernel offers it. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "monitor/patch_x86.h"
#include "monitor/unmap.h"
#include "util/sys.h"

#ifndef MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE (1 << 5)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE (1 << 6)
#endif

#define STUB_SIZE MRC_X86_STUB_SIZE

size_t mrc_x86_shape_match(const uint8_t *code, const char *shape)
{
    size_t i = 0;
    for (const char *s = shape; *s; s += (s[2] ? 3 : 2), i++) {
        if (s[0] == '?')
            continue;
        unsigned v = (unsigned)strtoul((char[3]){ s[0], s[1], 0 }, NULL, 16);
        if (code[i] != v)
            return 0;
    }
    return i;
}

int mrc_x86_foreign_jump(const uint8_t *c)
{
    return c[0] == 0xe9 || c[0] == 0xeb || (c[0] == 0xff && c[1] == 0x25) || c[0] == 0xcc ||
           c[0] == 0x68 || ((c[0] == 0x48 || c[0] == 0x49) && (c[1] & 0xf8) == 0xb8);
}

/* Set by mrc_monitor_init before anything here runs: jumps are written at the patch
 * source's install, stubs and swaps once something it watches has changed. */
static long page_size(void)
{
    return (long)mrc_monitor.page_size;
}

/* 0 or -errno; errno is kept. */
static int sys_mprotect(void *a, size_t len, int prot)
{
    int saved = errno, rc = mrc_sys_mprotect(a, len, prot) ? -errno : 0;
    errno = saved;
    return rc;
}

static int membarrier_ok;

void mrc_x86_sync_init(void)
{
    int saved = errno;
    membarrier_ok = mrc_sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE, 0) == 0;
    errno = saved;
}

static void sync_cores(void)
{
    /* Other threads may hold stale decoded instructions: make each serialise. */
    if (membarrier_ok)
        mrc_sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE, 0);
}

/* The pages holding the code bytes [p, p + n): their start and length, for mprotect. */
static void code_pages(const uint8_t *p, size_t n, uintptr_t *lo, size_t *len)
{
    uintptr_t psz = (uintptr_t)page_size();
    *lo = (uintptr_t)p & ~(psz - 1);
    *len = (((uintptr_t)p + n + psz - 1) & ~(psz - 1)) - *lo;
}

int mrc_x86_write_jump(uint8_t *entry, void *hook)
{
    /* Near first: a jmp rel32 to a stub that jumps on, swapped in as one aligned 8-byte
     * word whose last three bytes stay as they were. A thread inside the system call a
     * plain wrapper makes returns to the instruction after it, within those 8 bytes: it
     * must find it intact (the long form below overwrites it). */
    if (!((uintptr_t)entry & 7)) {
        uint8_t *stub = mrc_x86_stub_alloc(entry);
        if (stub) {
            mrc_x86_abs_jump(stub, (uint64_t)(uintptr_t)hook);
            mrc_x86_stub_seal(stub, 1);
            if (mrc_x86_swap_head(entry, __atomic_load_n((uint64_t *)entry, __ATOMIC_ACQUIRE), stub))
                return 0;
        }
    }
    uint8_t code[MRC_X86_JUMP_LEN] = { 0x49, 0xbb };    /* movabs $hook, %r11 */
    uint64_t h = (uint64_t)(uintptr_t)hook;
    memcpy(code + 2, &h, 8);
    code[10] = 0x41, code[11] = 0xff, code[12] = 0xe3;  /* jmp *%r11 */

    uintptr_t lo;
    size_t len;
    code_pages(entry, MRC_X86_JUMP_LEN, &lo, &len);
    /* RWX, never RW: other threads may be executing elsewhere on these pages. */
    int rc = sys_mprotect((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC);
    if (rc)
        return rc;
    /* 1: a spin loop at the entry (one aligned 2-byte store), so a thread arriving now
     * waits instead of running half-old, half-new bytes; 2: the rest; 3: the first two
     * bytes, again in one store. */
    __atomic_store_n((uint16_t *)entry, (uint16_t)0xfeeb, __ATOMIC_SEQ_CST);
    sync_cores();
    memcpy(entry + 2, code + 2, MRC_X86_JUMP_LEN - 2);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    sync_cores();
    uint16_t head;
    memcpy(&head, code, 2);
    __atomic_store_n((uint16_t *)entry, head, __ATOMIC_SEQ_CST);
    sync_cores();
    sys_mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
    return 0;
}

/* Stubs and trampolines live in pages within a rel32 jump of the entry they serve (the
 * new head of an entry must be a single instruction inside its first 8 bytes): one page
 * near libc, one near libmrcache, a few to spare. */
#define STUB_PAGES 4
static struct {
    uint8_t *page;
    size_t used;
} near_pages[STUB_PAGES];
static uint8_t *open_page;   /* the page stub_alloc made writable, until stub_seal */

static int near(const uint8_t *from, const uint8_t *to)
{
    int64_t d = (int64_t)((intptr_t)to - (intptr_t)from);
    return d > INT32_MIN / 2 && d < INT32_MAX / 2;
}

/* A fresh page within reach of entry, or NULL. Keeps errno (most tries fail). */
static uint8_t *map_near(const uint8_t *entry)
{
    long pg = page_size();
    int saved = errno;
    uint8_t *found = NULL;
    for (uintptr_t d = 1ul << 20; d < (1ul << 30) && !found; d <<= 1)
        for (int s = -1; s <= 1 && !found; s += 2) {
            uintptr_t hint = ((uintptr_t)entry + (uintptr_t)(s * (intptr_t)d)) & ~(uintptr_t)(pg - 1);
            uint8_t *p = mrc_sys_mmap((void *)hint, (size_t)pg, PROT_READ | PROT_EXEC,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (p == MAP_FAILED)
                continue;
            if (near(p, entry))
                found = p;
            else
                mrc_sys_munmap(p, (size_t)pg);   /* a kernel that took the hint as a hint */
        }
    errno = saved;
    return found;
}

uint8_t *mrc_x86_stub_alloc(const uint8_t *entry)
{
    long pg = page_size();
    int k = -1;
    for (int i = 0; i < STUB_PAGES && k < 0; i++) {
        if (!near_pages[i].page) {
            if (!(near_pages[i].page = map_near(entry)))
                return NULL;
            k = i;
        } else if (near_pages[i].used + STUB_SIZE <= (size_t)pg &&
                   near(near_pages[i].page + near_pages[i].used, entry)) {
            k = i;
        }
    }
    if (k < 0 || sys_mprotect(near_pages[k].page, (size_t)pg, PROT_READ | PROT_WRITE | PROT_EXEC))
        return NULL;
    open_page = near_pages[k].page;
    near_pages[k].used += STUB_SIZE;
    return near_pages[k].page + near_pages[k].used - STUB_SIZE;
}

void mrc_x86_stub_seal(uint8_t *slot, int keep)
{
    for (int i = 0; i < STUB_PAGES; i++)
        if (slot && !keep && near_pages[i].page && slot == near_pages[i].page + near_pages[i].used - STUB_SIZE)
            near_pages[i].used -= STUB_SIZE;
    if (open_page)
        sys_mprotect(open_page, (size_t)page_size(), PROT_READ | PROT_EXEC);
    open_page = NULL;
}

void mrc_x86_abs_jump(uint8_t *at, uint64_t target)
{
    static const uint8_t op[6] = { 0xff, 0x25, 0, 0, 0, 0 };
    memcpy(at, op, 6);
    memcpy(at + 6, &target, 8);
}

int mrc_x86_move_jump(const uint8_t *c, uint8_t *t)
{
    if (c[0] == 0xe9) {
        int32_t d;
        memcpy(&d, c + 1, 4);
        mrc_x86_abs_jump(t, (uint64_t)(uintptr_t)(c + 5) + (uint64_t)(int64_t)d);
        return 1;
    }
    if ((c[0] == 0x48 || c[0] == 0x49) && (c[1] & 0xf8) == 0xb8) {
        uint8_t reg = c[1] & 7;
        size_t n = c[0] == 0x48 ? (c[10] == 0xff && c[11] == (0xe0 | reg) ? 12 : 0)
                                : (c[10] == 0x41 && c[11] == 0xff && c[12] == (0xe0 | reg) ? 13 : 0);
        memcpy(t, c, n);
        return n != 0;
    }
    if (c[0] == 0xff && c[1] == 0x25) {
        int32_t d;
        memcpy(&d, c + 2, 4);
        uint64_t slot = (uint64_t)(uintptr_t)(c + 6) + (uint64_t)(int64_t)d;
        t[0] = 0x49, t[1] = 0xbb;                       /* movabs $slot, %r11 */
        memcpy(t + 2, &slot, 8);
        t[10] = 0x41, t[11] = 0xff, t[12] = 0x23;       /* jmp *(%r11) */
        return 1;
    }
    return 0;
}

uint64_t mrc_x86_jump_target(const uint8_t *c)
{
    uint8_t t[16] = { 0 };
    uint64_t to = 0;
    if (!mrc_x86_move_jump(c, t))
        return 0;
    memcpy(&to, t[0] == 0xff ? t + 6 : t + 2, 8);
    if (t[0] == 0x49 && t[12] == 0x23)
        to = *(const uint64_t *)(uintptr_t)to;          /* through a slot */
    return to;
}

/* A thread fetching the entry meanwhile sees all of the old first instruction or all of
 * the new one (a locked store within one cache line; instruction fetch is coherent with
 * it), and membarrier then makes every thread serialise before it runs user code again,
 * so none executes bytes it decoded earlier. Only bytes 0-7 change (5-7 keep their
 * values): with a two-instruction foreign jump (movabs; jmp *%reg) a thread already past
 * the movabs runs the unchanged jmp at offset 10 into the other hook, as it would have a
 * moment earlier. Whoever changed the bytes meanwhile makes the page executable again,
 * so the caller hears of it again. */
uint64_t mrc_x86_swap_head(uint8_t *entry, uint64_t old, const uint8_t *stub)
{
    uint8_t b[8];
    memcpy(b, &old, 8);
    int32_t rel = (int32_t)((intptr_t)stub - (intptr_t)(entry + 5));
    b[0] = 0xe9;
    memcpy(b + 1, &rel, 4);
    uint64_t head;
    memcpy(&head, b, 8);
    uintptr_t lo;
    size_t len;
    code_pages(entry, 8, &lo, &len);
    if (sys_mprotect((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC))
        return 0;
    int ok = __atomic_compare_exchange_n((uint64_t *)entry, &old, head, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    sync_cores();
    sys_mprotect((void *)lo, len, PROT_READ | PROT_EXEC);
    return ok ? head : 0;
}

/* One instruction's layout, as far as moving it needs: its length, and where a
 * displacement relative to the next instruction sits (RIP-relative operand or branch). */
struct insn {
    size_t len;
    size_t rel_at;      /* 0: none */
    int rel_size;       /* 1 or 4 */
    int kind;           /* 0 plain, 1 jcc rel8, 2 jmp rel8, 3 ends the function (ret, jmp) */
};

/* The ModRM operand's bytes after the ModRM byte itself; *rip set if RIP-relative. */
static size_t modrm_extra(const uint8_t *m, int *rip)
{
    unsigned mod = m[0] >> 6, rm = m[0] & 7;
    *rip = mod == 0 && rm == 5;
    if (mod == 3)
        return 0;
    size_t n = 0;
    if (rm == 4) {
        n = 1;
        if (mod == 0 && (m[1] & 7) == 5)
            return n + 4;
    }
    return n + (mod == 1 ? 1 : mod == 2 || *rip ? 4 : 0);
}

/* Decodes the compiler prologue instructions seen at libibverbs' entry points and
 * those like them (moves, pushes, arithmetic, tests, lea, branches); 0 for anything
 * else, which is then left alone. */
static int decode(const uint8_t *c, struct insn *in)
{
    size_t i = 0;
    int opsize16 = 0;
    memset(in, 0, sizeof(*in));
    while (i < 4 && (c[i] == 0x66 || c[i] == 0xf2 || c[i] == 0xf3 || c[i] == 0x2e || c[i] == 0x3e ||
                     c[i] == 0x26 || c[i] == 0x64 || c[i] == 0x65 || c[i] == 0x36))
        opsize16 |= c[i++] == 0x66;
    int rexw = 0;
    if ((c[i] & 0xf0) == 0x40)
        rexw = (c[i++] & 8) != 0;
    uint8_t op = c[i++];
    int modrm = 0, rip = 0;
    size_t imm = 0;
    if (op == 0x0f) {
        uint8_t op2 = c[i++];
        if ((op2 & 0xf0) == 0x80) {          /* jcc rel32 */
            in->len = i + 4, in->rel_at = i, in->rel_size = 4;
            return 1;
        }
        if (op2 == 0x1e || op2 == 0x1f || (op2 & 0xf0) == 0x40 || op2 == 0xaf || op2 == 0xb6 || op2 == 0xb7 ||
            op2 == 0xbe || op2 == 0xbf)
            modrm = 1;
        else
            return 0;
    } else if ((op & 0xf0) == 0x50 || op == 0x90) {   /* push, pop, nop */
    } else if ((op & 0xf8) == 0xb8) {
        imm = rexw ? 8 : 4;
    } else if ((op & 0xf0) == 0x70) {
        in->len = i + 1, in->rel_at = i, in->rel_size = 1, in->kind = 1;
        return 1;
    } else if (op == 0xeb || op == 0xe9 || op == 0xe8) {
        in->len = i + (op == 0xeb ? 1 : 4), in->rel_at = i, in->rel_size = op == 0xeb ? 1 : 4;
        in->kind = op == 0xeb ? 2 : op == 0xe9 ? 3 : 0;
        return 1;
    } else if (op == 0xc3) {
        in->len = i, in->kind = 3;
        return 1;
    } else if ((op < 0x40 && (op & 7) < 4) || (op >= 0x84 && op <= 0x8b) || op == 0x8d || op == 0x63 ||
               op == 0xff || op == 0xd1 || op == 0xd3) {
        modrm = 1;
    } else if (op < 0x40 && (op & 7) == 4) {
        imm = 1;
    } else if (op < 0x40 && (op & 7) == 5) {
        imm = opsize16 ? 2 : 4;
    } else if (op == 0xa8) {
        imm = 1;
    } else if (op == 0xa9) {
        imm = opsize16 ? 2 : 4;
    } else if (op == 0x80 || op == 0x83 || op == 0xc0 || op == 0xc1 || op == 0xc6 || op == 0x6b) {
        modrm = 1, imm = 1;
    } else if (op == 0x81 || op == 0xc7 || op == 0x69) {
        modrm = 1, imm = opsize16 ? 2 : 4;
    } else if (op == 0xf6 || op == 0xf7) {
        modrm = 1, imm = ((c[i] >> 3) & 7) < 2 ? (op == 0xf6 ? 1 : opsize16 ? 2 : 4) : 0;
    } else {
        return 0;
    }
    if (modrm) {
        size_t at = i;
        i += 1 + modrm_extra(c + i, &rip);
        if (rip)
            in->rel_at = at + 1, in->rel_size = 4;
        if (op == 0xff && ((c[at] >> 3) & 7) == 4)
            in->kind = 3;                             /* jmp *r/m */
    }
    in->len = i + imm;
    return 1;
}

size_t mrc_x86_relocate(const uint8_t *code, size_t need, uint8_t *to, size_t room)
{
    size_t from = 0, out = 0;
    while (from < need) {
        struct insn in;
        if (!decode(code + from, &in))
            return 0;
        size_t emit = in.kind == 1 ? 6 : in.kind == 2 ? 5 : in.len;   /* short branches grow */
        if (out + emit + 5 > room)
            return 0;
        const uint8_t *src = code + from;
        uint8_t *dst = to + out;
        if (in.kind == 1 || in.kind == 2) {
            /* A short branch becomes a near one: the stub is far from the target. */
            uint64_t target = (uint64_t)(uintptr_t)(src + in.len) + (uint64_t)(int64_t)(int8_t)src[in.rel_at];
            size_t n = emit;
            if (in.kind == 1)
                dst[0] = 0x0f, dst[1] = (uint8_t)(0x80 | (src[in.rel_at - 1] & 0x0f));
            else
                dst[0] = 0xe9;
            int64_t d = (int64_t)target - (int64_t)(uintptr_t)(dst + n);
            if (d != (int32_t)d)
                return 0;
            int32_t d32 = (int32_t)d;
            memcpy(dst + n - 4, &d32, 4);
            out += n;
        } else {
            memcpy(dst, src, in.len);
            if (in.rel_size == 4) {
                /* The displacement follows the instruction, and so must point where it did. */
                int32_t d;
                memcpy(&d, src + in.rel_at, 4);
                int64_t nd = (int64_t)d + ((intptr_t)src - (intptr_t)dst);
                if (nd != (int32_t)nd)
                    return 0;
                d = (int32_t)nd;
                memcpy(dst + in.rel_at, &d, 4);
            }
            out += in.len;
        }
        from += in.len;
        if (in.kind == 3)
            return from >= need ? out : 0;           /* no way back into the function */
    }
    int64_t back = (int64_t)(uintptr_t)(code + from) - (int64_t)(uintptr_t)(to + out + 5);
    if (back != (int32_t)back)
        return 0;
    int32_t b = (int32_t)back;
    to[out] = 0xe9;
    memcpy(to + out + 1, &b, 4);
    return out + 5;
}
