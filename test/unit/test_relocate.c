/* test_relocate.c - the code mover behind libibverbs' rewritten entry points
 * (monitor/patch_x86.c, mrc_x86_relocate), on the library named by argv[1]: every entry
 * point libmrcache rewrites must move into a trampoline, and on the software NIC (argv[2]
 * "run") each trampoline must behave as its original. Also code it must refuse. */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include "check.h"
#include "monitor/patch_x86.h"
#include "monitor/unmap.h"

static void *lib;
static int run;

static const struct {
    const char *name, *version;
} entries[] = {
    { "ibv_reg_mr", "IBVERBS_1.1" },       { "ibv_reg_mr_iova", "IBVERBS_1.7" },
    { "ibv_reg_mr_iova2", "IBVERBS_1.8" }, { "ibv_reg_dmabuf_mr", "IBVERBS_1.12" },
    { "ibv_dereg_mr", "IBVERBS_1.1" },     { "ibv_rereg_mr", "IBVERBS_1.1" },
    { "ibv_dealloc_pd", "IBVERBS_1.1" },   { "ibv_close_device", "IBVERBS_1.1" },
};

static uint8_t *trampoline(const char *name, const char *version)
{
    uint8_t *entry = dlvsym(lib, name, version);
    CHECKF(entry != NULL, "%s@%s", name, version);
    if (!entry)
        return NULL;
    uint8_t *t = mrc_x86_stub_alloc(entry);
    CHECK(t != NULL);
    size_t n = t ? mrc_x86_relocate(entry, 5, t, MRC_X86_STUB_SIZE) : 0;
    mrc_x86_stub_seal(t, n != 0);
    CHECKF(n > 0, "%s: first bytes %02x %02x %02x %02x %02x %02x not moved", name, entry[0], entry[1], entry[2],
           entry[3], entry[4], entry[5]);
    return n ? t : NULL;
}

static void test_every_entry_moves(void)
{
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
        trampoline(entries[i].name, entries[i].version);
}

/* The software NIC's entry points check their arguments first: the same answer, and the
 * same errno, through the trampoline as through the original. */
static void test_trampolines_run_the_original(void)
{
    if (!run) {
        SKIP_TEST("not the software NIC: its originals cannot be called without a device");
        return;
    }
    int (*dereg)(struct ibv_mr *) = (int (*)(struct ibv_mr *))dlvsym(lib, "ibv_dereg_mr", "IBVERBS_1.1");
    int (*dereg_t)(struct ibv_mr *) = (int (*)(struct ibv_mr *))trampoline("ibv_dereg_mr", "IBVERBS_1.1");
    int (*dealloc)(struct ibv_pd *) = (int (*)(struct ibv_pd *))dlvsym(lib, "ibv_dealloc_pd", "IBVERBS_1.1");
    int (*dealloc_t)(struct ibv_pd *) = (int (*)(struct ibv_pd *))trampoline("ibv_dealloc_pd", "IBVERBS_1.1");
    typedef struct ibv_mr *iova2_fn(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
    iova2_fn *iova2 = (iova2_fn *)dlvsym(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8");
    iova2_fn *iova2_t = (iova2_fn *)trampoline("ibv_reg_mr_iova2", "IBVERBS_1.8");
    if (!dereg_t || !dealloc_t || !iova2_t)
        return;
    errno = 0;
    int a = dereg(NULL), ea = errno;
    errno = 0;
    int b = dereg_t(NULL), eb = errno;
    CHECKF(a == b && ea == eb, "ibv_dereg_mr(NULL): %d/%d, errno %d/%d", a, b, ea, eb);
    errno = 0;
    a = dealloc(NULL), ea = errno;
    errno = 0;
    b = dealloc_t(NULL), eb = errno;
    CHECKF(a == b && ea == eb, "ibv_dealloc_pd(NULL): %d/%d, errno %d/%d", a, b, ea, eb);
    errno = 0;
    void *m = iova2(NULL, NULL, 0, 0, 0);
    ea = errno;
    errno = 0;
    void *mt = iova2_t(NULL, NULL, 0, 0, 0);
    eb = errno;
    CHECKF(m == mt && ea == eb, "ibv_reg_mr_iova2(NULL...): %p/%p, errno %d/%d", m, mt, ea, eb);
}

/* Code the mover does not know is refused, never half-copied. */
static void test_unknown_code_is_refused(void)
{
    uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t out[MRC_X86_STUB_SIZE];
    static const uint8_t int3[] = { 0x53, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc };     /* push %rbx; int3 */
    static const uint8_t ret[] = { 0x31, 0xc0, 0xc3, 0xcc, 0xcc, 0xcc };      /* ends before 5 bytes */
    static const uint8_t sys[] = { 0xb8, 0x0b, 0, 0, 0, 0x0f, 0x05 };         /* mov $11,%eax; syscall */
    memcpy(page, int3, sizeof(int3));
    CHECK(mrc_x86_relocate(page, 5, out, sizeof(out)) == 0);
    memcpy(page, ret, sizeof(ret));
    CHECK(mrc_x86_relocate(page, 5, out, sizeof(out)) == 0);
    /* mov $11,%eax alone covers 5 bytes: moved, then a jump back to the syscall. */
    memcpy(page, sys, sizeof(sys));
    CHECK(mrc_x86_relocate(page, 5, page + 64, 32) == 10 && page[69] == 0xe9);
    munmap(page, 4096);
}

int main(int argc, char **argv)
{
    mrc_monitor.page_size = 4096;
    lib = dlopen(argc > 1 ? argv[1] : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    run = argc > 2 && !strcmp(argv[2], "run");
    CHECKF(lib != NULL, "%s", dlerror());
    if (lib) {
        RUN(test_every_entry_moves);
        RUN(test_trampolines_run_the_original);
    }
    RUN(test_unknown_code_is_refused);
    CHECK_EXIT();
}
