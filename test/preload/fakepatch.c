/* fakepatch.c - stands in for another library that patches libc (UCX's bistro hooks,
 * libfabric's memhooks): its constructor rewrites libc's madvise entry (FAKEPATCH_FN=
 * munmap: munmap's) into "movabs $hook,%rax; jmp *%rax" (FAKEPATCH_FORM=nop: the same
 * after a nop, which libmrcache cannot move elsewhere). Loaded before libmrcache, it
 * must be left alone; loaded after, chained (or given up with FAKEPATCH_FORM=nop). With
 * FAKEPATCH_TARGET=name it patches whatever the name resolves to instead (under the
 * preload: libmrcache's own export, as UCX's lookup finds it), and with
 * FAKEPATCH_PROTECT=raw it changes page protections with the system call, which no
 * mprotect hook sees. At exit this checks that its hook still receives the calls of what
 * it patched and prints "fakepatch: intact". */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static unsigned long calls;
static int (*libc_madvise)(void *, size_t, int);
static int (*libc_munmap)(void *, size_t);
static long nr = SYS_madvise;
static int raw_protect;

static int protect(void *p, size_t len, int prot)
{
    return raw_protect ? (int)syscall(SYS_mprotect, p, len, prot) : mprotect(p, len, prot);
}

/* Both targets take (addr, len[, advice]) and return 0 or -1. */
static int hook(void *a, size_t len, int advice)
{
    calls++;
    long r;
    register long r10 __asm__("r10") = 0;
    __asm__ volatile("syscall" : "=a"(r) : "0"(nr), "D"(a), "S"(len), "d"((long)advice), "r"(r10)
                     : "rcx", "r11", "memory");
    return r < 0 ? -1 : 0;
}

__attribute__((constructor)) static void fake_patch(void)
{
    void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    const char *target = getenv("FAKEPATCH_TARGET");
    void *from = target && !strcmp(target, "name") ? RTLD_DEFAULT : libc;
    libc_madvise = (int (*)(void *, size_t, int))dlsym(from, "madvise");
    libc_munmap = (int (*)(void *, size_t))dlsym(from, "munmap");
    const char *how = getenv("FAKEPATCH_PROTECT");
    raw_protect = how && !strcmp(how, "raw");
    const char *fn = getenv("FAKEPATCH_FN");
    if (fn && !strcmp(fn, "munmap"))
        nr = SYS_munmap;
    uint8_t *p = nr == SYS_munmap ? (uint8_t *)libc_munmap : (uint8_t *)libc_madvise;
    uint8_t code[13] = { 0x90, 0x48, 0xb8 };
    uint64_t h = (uint64_t)(uintptr_t)hook;
    memcpy(code + 3, &h, 8);
    code[11] = 0xff, code[12] = 0xe0;
    const char *form = getenv("FAKEPATCH_FORM");
    int nop = form && !strcmp(form, "nop");
    long pg = sysconf(_SC_PAGESIZE);
    uint8_t *page = (uint8_t *)((uintptr_t)p & ~(uintptr_t)(pg - 1));
    if (protect(page, 2 * (size_t)pg, PROT_READ | PROT_WRITE | PROT_EXEC) == 0) {
        memcpy(p, code + !nop, sizeof(code) - !nop);
        protect(page, 2 * (size_t)pg, PROT_READ | PROT_EXEC);
    }
}

__attribute__((destructor)) static void fake_check(void)
{
    unsigned long before = calls;
    char *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (nr == SYS_munmap) {
        libc_munmap(m, 4096);
    } else {
        libc_madvise(m, 4096, MADV_DONTNEED);
        munmap(m, 4096);
    }
    fprintf(stderr, "fakepatch: %s\n", calls == before + 1 ? "intact" : "OVERWRITTEN");
}
