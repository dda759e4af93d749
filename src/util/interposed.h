/* interposed.h - the one table of the functions libmrcache interposes (and the few it
 * only calls or reads), one row each. What follows from a row is generated from it: the
 * typed pointer to the next definition (util/real.h) and its lookup (real.c), the hidden
 * alias of our own export (interpose/hooks.h), the exports guarded against other
 * patchers (interpose/start.c), the entry-point and export-kind enums (monitor/unmap.h,
 * monitor/patch.h), the libc patch targets (monitor/patch.c, patch_chain.c,
 * patch_exports.c, patch_selftest.c) and the PLT rule `make layers` checks
 * (scripts/check-layers.sh). Adding an interposed function is a row here and its hook's
 * body in the group's file; the compiler names anything a row asks for and is missing.
 * Only macros: no header is included, so scripts can expand the table with cpp alone.
 *
 * A function row, in the list of the interposition file that defines it:
 *   F(sym, id, ret, params, where, patch, guard, plt)
 *   sym     the symbol, as exported                         munmap, __open_2
 *   id      its identifier inside libmrcache: mrc_real.<id>, mrc_own_<id>, and the
 *           patch source's hooks p_<id> (patch.c), o_<id> (patch_chain.c) and
 *           x_<id> (patch_exports.c)                        munmap, open_2
 *   ret, params   its prototype                             int, (void *, size_t)
 *   where   where the next definition is found:
 *           LIBC                   dlsym(RTLD_NEXT) in the constructor (mrc_real_resolve_libc)
 *           VERBS(version, need)   libibverbs, lazily, by dlvsym (mrc_real_resolve_verbs);
 *                                  need REQUIRED (without it nothing is registered) or
 *                                  OPTIONAL (NULL where rdma-core lacks it)
 *           OWN                    none: libmrcache serves the call itself
 *           LDSO                   not exported: ld.so's private copy, found by its shape
 *   patch   NOPATCH, or SYSCALL(ID, sys, shape, follow, label, lost): an entry point
 *           whose first bytes (shape, hex with ?? for any byte; follow: bytes that must
 *           start within its first 96, or NULL) are a system call wrapper, rewritten to
 *           jump into p_<id>; the mrc_real pointer then becomes sys, the direct system
 *           call (util/sys.h). ID names MRC_FN_<ID>; label is the self-test's name for
 *           it, lost what goes unseen if another library's patch takes it; or ENTRY:
 *           a libibverbs entry point made to jump to our export (runtime/bind.c).
 *   guard   NOGUARD; GUARD (our export is watched against patchers that find it by name,
 *           and reported lost if overwritten); CHAIN(KIND) (the same, chained instead:
 *           MRC_EXPORT_<KIND>, our logic first in x_<id>, then theirs)
 *   plt     PLT_NO, or PLT_OK where libmrcache calls its own export through the PLT on
 *           purpose (util/sys.h says why free does); `make layers` refuses a JUMP_SLOT
 *           of any other
 *
 * A data row (read, never interposed): D(sym, id, type, version): mrc_real.<id> is a
 * const type *, found by dlvsym(RTLD_NEXT, sym, version) with libc's functions.
 *
 * Kinds the table is ready for: more libc functions (rows of
 * LIBC with hooks of their own), and the same rows patched in a second libc (the patch
 * source finds each LIBC row's entry in whichever libc it is given). The order of the
 * rows is the order of mrc_real's fields and of the enums. */
#ifndef MRC_INTERPOSED_H
#define MRC_INTERPOSED_H

/* glibc 2.36's plain wrappers: mov $nr,%eax; syscall; cmp $-4095,%rax; jae error; ret. */
#define MRC_SHAPE_WRAPPER(nr) "b8 " nr " 00 00 00 0f 05 48 3d ?? f0 ff ff ?? ?? c3"

/* interpose/hooks_mem.c: the munmap family and the calls that discard or replace pages. */
#define MRC_FNS_MEM(F)                                                                                      \
    F(munmap, munmap, int, (void *, size_t), LIBC,                                                          \
      SYSCALL(MUNMAP, mrc_sys_munmap, MRC_SHAPE_WRAPPER("0b"), NULL, "munmap",                              \
              "glibc's own munmap calls (free of mmapped chunks, thread arenas)"),                          \
      CHAIN(MUNMAP), PLT_NO)                                                                                \
    /* mov %ecx,%r10d; test $0xfff,%r9d; jne einval; mov $9,%eax; syscall */                                \
    F(mmap, mmap, void *, (void *, size_t, int, int, int, off_t), LIBC,                                     \
      SYSCALL(MMAP, mrc_sys_mmap, "41 89 ca 41 f7 c1 ff 0f 00 00 75 ?? b8 09 00 00 00 0f 05", NULL,        \
              "mmap(MAP_FIXED)", "glibc's own MAP_FIXED mappings (thread arenas)"),                        \
      CHAIN(MMAP), PLT_NO)                                                                                  \
    F(mmap64, mmap64, void *, (void *, size_t, int, int, int, off_t), OWN, NOPATCH, CHAIN(MMAP64), PLT_NO)  \
    /* sub $n,%rsp; mov %r8,n(%rsp); mov %fs:0x28,%rax (a compiled C wrapper), then the                     \
     * mremap system call: mov $25,%eax; syscall */                                                         \
    F(mremap, mremap, void *, (void *, size_t, size_t, int, ...), LIBC,                                     \
      SYSCALL(MREMAP, mrc_sys_mremap, "48 83 ec ?? 4c 89 44 24 ?? 64 48 8b 04 25 28 00 00 00",              \
              "b8 19 00 00 00 0f 05", "mremap", "glibc's own mremap calls (realloc of mmapped chunks)"),     \
      CHAIN(MREMAP), PLT_NO)                                                                                \
    F(madvise, madvise, int, (void *, size_t, int), LIBC,                                                   \
      SYSCALL(MADVISE, mrc_sys_madvise, MRC_SHAPE_WRAPPER("1c"), NULL, "madvise",                           \
              "glibc's own madvise calls (thread stacks at thread exit, malloc_trim)"),                     \
      CHAIN(MADVISE), PLT_NO)                                                                               \
    F(shmat, shmat, void *, (int, const void *, int), LIBC,                                                 \
      SYSCALL(SHMAT, mrc_sys_shmat, "b8 1e 00 00 00 0f 05 48 3d ?? f0 ff ff ?? ?? c3", NULL, "shmat",       \
              "shmat(SHM_REMAP) not made through the PLT"),                                                 \
      CHAIN(SHMAT), PLT_NO)                                                                                 \
    F(shmdt, shmdt, int, (const void *), LIBC,                                                              \
      SYSCALL(SHMDT, mrc_sys_shmdt, MRC_SHAPE_WRAPPER("43"), NULL, "shmdt", "shmdt not made through the PLT"), \
      CHAIN(SHMDT), PLT_NO)                                                                                 \
    /* mov $12,%eax; syscall; mov __curbrk@GOT,%rdx; mov %rax,(%rdx) */                                     \
    F(brk, brk, int, (void *), LIBC,                                                                        \
      SYSCALL(BRK, mrc_sys_brk, "b8 0c 00 00 00 0f 05 48 8b 15 ?? ?? ?? ?? 48 89 02", NULL, "brk",         \
              "heap trimming in free"),                                                                     \
      CHAIN(BRK), PLT_NO)                                                                                   \
    /* Not patched (glibc's sbrk calls brk, which is); watched once brk is (patch_priv.h). */               \
    F(sbrk, sbrk, void *, (intptr_t), LIBC, NOPATCH, CHAIN(SBRK), PLT_NO)                                   \
    F(process_madvise, process_madvise, ssize_t, (int, const struct iovec *, size_t, int, unsigned), LIBC,  \
      NOPATCH, NOGUARD, PLT_NO)                                                                             \
    F(remap_file_pages, remap_file_pages, int, (void *, size_t, int, size_t, int), LIBC, NOPATCH, NOGUARD,  \
      PLT_NO)

/* ld.so's private munmap, which dlclose unmaps with: patched, never exported. */
#define MRC_FNS_LDSO(F)                                                                                     \
    F(munmap, ldso_munmap, int, (void *, size_t), LDSO,                                                     \
      SYSCALL(LDSO_MUNMAP, NULL, MRC_SHAPE_WRAPPER("0b"), NULL, "dlclose", "dlclose's unmaps"), NOGUARD,    \
      PLT_NO)

/* interpose/hooks_mprotect.c: code made executable again may be another patcher's. */
#define MRC_FNS_MPROTECT(F) F(mprotect, mprotect, int, (void *, size_t, int), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_file.c: what drops pages of a file, each as the program names it. */
#define MRC_FNS_FILE(F)                                                                                     \
    F(ftruncate, ftruncate, int, (int, off_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                              \
    F(ftruncate64, ftruncate64, int, (int, off64_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                        \
    F(truncate, truncate, int, (const char *, off_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                       \
    F(truncate64, truncate64, int, (const char *, off64_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                 \
    F(fallocate, fallocate, int, (int, int, off_t, off_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                  \
    F(fallocate64, fallocate64, int, (int, int, off64_t, off64_t), LIBC, NOPATCH, NOGUARD, PLT_NO)          \
    F(open, open, int, (const char *, int, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)                            \
    F(open64, open64, int, (const char *, int, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)                        \
    F(openat, openat, int, (int, const char *, int, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)                   \
    F(openat64, openat64, int, (int, const char *, int, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)               \
    /* the fortified opens, called for an open whose flags the compiler could not see */                    \
    F(__open_2, open_2, int, (const char *, int), LIBC, NOPATCH, NOGUARD, PLT_NO)                           \
    F(__open64_2, open64_2, int, (const char *, int), LIBC, NOPATCH, NOGUARD, PLT_NO)                       \
    F(__openat_2, openat_2, int, (int, const char *, int), LIBC, NOPATCH, NOGUARD, PLT_NO)                  \
    F(__openat64_2, openat64_2, int, (int, const char *, int), LIBC, NOPATCH, NOGUARD, PLT_NO)              \
    F(creat, creat, int, (const char *, mode_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                            \
    F(creat64, creat64, int, (const char *, mode_t), LIBC, NOPATCH, NOGUARD, PLT_NO)                        \
    F(fopen, fopen, FILE *, (const char *, const char *), LIBC, NOPATCH, NOGUARD, PLT_NO)                   \
    F(fopen64, fopen64, FILE *, (const char *, const char *), LIBC, NOPATCH, NOGUARD, PLT_NO)               \
    F(freopen, freopen, FILE *, (const char *, const char *, FILE *), LIBC, NOPATCH, NOGUARD, PLT_NO)       \
    F(freopen64, freopen64, FILE *, (const char *, const char *, FILE *), LIBC, NOPATCH, NOGUARD, PLT_NO)   \
    F(shm_open, shm_open, int, (const char *, int, mode_t), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_malloc.c: the allocator calls that can give memory back to the kernel
 * (the next allocator in the chain: glibc's, or one preloaded after us). */
#define MRC_FNS_MALLOC(F)                                                                                   \
    F(free, free, void, (void *), LIBC, NOPATCH, GUARD, PLT_OK)                                             \
    F(realloc, realloc, void *, (void *, size_t), LIBC, NOPATCH, GUARD, PLT_NO)                             \
    F(reallocarray, reallocarray, void *, (void *, size_t, size_t), LIBC, NOPATCH, GUARD, PLT_NO)           \
    F(posix_memalign, posix_memalign, int, (void **, size_t, size_t), LIBC, NOPATCH, GUARD, PLT_NO)         \
    F(aligned_alloc, aligned_alloc, void *, (size_t, size_t), LIBC, NOPATCH, GUARD, PLT_NO)                 \
    F(memalign, memalign, void *, (size_t, size_t), LIBC, NOPATCH, GUARD, PLT_NO)                           \
    F(valloc, valloc, void *, (size_t), LIBC, NOPATCH, GUARD, PLT_NO)                                       \
    F(pvalloc, pvalloc, void *, (size_t), LIBC, NOPATCH, GUARD, PLT_NO)                                     \
    F(malloc_trim, malloc_trim, int, (size_t), LIBC, NOPATCH, GUARD, PLT_NO)                                \
    F(mallopt, mallopt, int, (int, int), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_process.c: every way to make a child that gets a copy of the memory
 * (the ones that share it, CLONE_VM, need nothing). _Fork is glibc 2.34's. */
#define MRC_FNS_PROCESS(F)                                                                                  \
    F(fork, fork, pid_t, (void), LIBC, NOPATCH, NOGUARD, PLT_NO)                                            \
    F(_Fork, fork_bare, pid_t, (void), LIBC, NOPATCH, NOGUARD, PLT_NO)                                      \
    F(clone, clone, int, (int (*)(void *), void *, int, void *, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_syscall.c: the generic wrapper, for the numbers of the calls above. */
#define MRC_FNS_SYSCALL(F) F(syscall, syscall, long, (long, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_fd.c: the descriptor calls the userfaultfd source must see first. */
#define MRC_FNS_FD(F)                                                                                       \
    F(close, close, int, (int), LIBC, NOPATCH, NOGUARD, PLT_NO)                                             \
    F(close_range, close_range, int, (unsigned int, unsigned int, int), LIBC, NOPATCH, NOGUARD, PLT_NO)     \
    F(closefrom, closefrom, void, (int), LIBC, NOPATCH, NOGUARD, PLT_NO)                                    \
    F(dup2, dup2, int, (int, int), LIBC, NOPATCH, NOGUARD, PLT_NO)                                          \
    F(dup3, dup3, int, (int, int, int), LIBC, NOPATCH, NOGUARD, PLT_NO)                                     \
    F(ioctl, ioctl, int, (int, unsigned long, ...), LIBC, NOPATCH, NOGUARD, PLT_NO)

/* interpose/hooks_verbs.c: libibverbs' MR entry points. ibv_reg_mr and ibv_reg_mr_iova
 * are served here without the real ones, which would re-enter through
 * ibv_reg_mr_iova2@plt: their mrc_real pointers are looked up to be patched, never
 * called. The versions named are rdma-core's, never the IBVERBS_1.0 compatibility ones.
 * ENTRY: libibverbs' own entry point is rewritten to jump to our export, for callers that
 * bound it from a library handle or a deep-bound plugin; mrc_real then runs the original
 * through a trampoline (runtime/bind.c). */
#define MRC_FNS_VERBS(F)                                                                                    \
    F(ibv_reg_mr, reg_mr, struct ibv_mr *, (struct ibv_pd *, void *, size_t, int),                          \
      VERBS("IBVERBS_1.1", OPTIONAL), ENTRY, NOGUARD, PLT_NO)                                               \
    F(ibv_reg_mr_iova, reg_mr_iova, struct ibv_mr *, (struct ibv_pd *, void *, size_t, uint64_t, int),      \
      VERBS("IBVERBS_1.7", OPTIONAL), ENTRY, NOGUARD, PLT_NO)                                               \
    F(ibv_reg_mr_iova2, reg_mr_iova2, struct ibv_mr *, (struct ibv_pd *, void *, size_t, uint64_t, unsigned int), \
      VERBS("IBVERBS_1.8", REQUIRED), ENTRY, NOGUARD, PLT_NO)                                               \
    F(ibv_reg_dmabuf_mr, reg_dmabuf_mr, struct ibv_mr *, (struct ibv_pd *, uint64_t, size_t, uint64_t, int, int), \
      VERBS("IBVERBS_1.12", OPTIONAL), ENTRY, NOGUARD, PLT_NO)                                              \
    F(ibv_dereg_mr, dereg_mr, int, (struct ibv_mr *), VERBS("IBVERBS_1.1", REQUIRED), ENTRY, NOGUARD,       \
      PLT_NO)                                                                                               \
    F(ibv_rereg_mr, rereg_mr, int, (struct ibv_mr *, int, struct ibv_pd *, void *, size_t, int),            \
      VERBS("IBVERBS_1.1", OPTIONAL), ENTRY, NOGUARD, PLT_NO)                                               \
    F(ibv_dealloc_pd, dealloc_pd, int, (struct ibv_pd *), VERBS("IBVERBS_1.1", REQUIRED), ENTRY, NOGUARD,   \
      PLT_NO)                                                                                               \
    F(ibv_close_device, close_device, int, (struct ibv_context *), VERBS("IBVERBS_1.1", REQUIRED), ENTRY,   \
      NOGUARD, PLT_NO)                                                                                      \
    /* Only called, not interposed: MRCACHE_AUDIT's view of an extended QP's builders. */                  \
    F(ibv_qp_to_qp_ex, qp_to_qp_ex, struct ibv_qp_ex *, (struct ibv_qp *), VERBS("IBVERBS_1.6", OPTIONAL),  \
      NOPATCH, NOGUARD, PLT_NO)                                                                             \
    /* Only called, not interposed: enum ibv_fork_status; absent before rdma-core 35. */                    \
    F(ibv_is_fork_initialized, is_fork_initialized, int, (void), VERBS("IBVERBS_1.13", OPTIONAL), NOPATCH,  \
      NOGUARD, PLT_NO)

/* glibc's count of its threads (what libthread_db reads; the process ends when it
 * reaches 0), or NULL with another libc. */
#define MRC_DATA(D) D(__nptl_nthreads, nptl_nthreads, unsigned, "GLIBC_PRIVATE")

/* Every function row, in the order of mrc_real's fields and of the enums. */
#define MRC_FNS(F)                                                                                          \
    MRC_FNS_MEM(F) MRC_FNS_LDSO(F) MRC_FNS_MPROTECT(F) MRC_FNS_FILE(F) MRC_FNS_MALLOC(F) MRC_FNS_PROCESS(F) \
    MRC_FNS_SYSCALL(F) MRC_FNS_FD(F) MRC_FNS_VERBS(F)

/* ---- reading the table ----
 * A column holds a kind, bare (LIBC) or with arguments (VERBS("IBVERBS_1.8", REQUIRED)).
 * MRC_CASE(P, col, extra...) is P<kind>(extra..., the kind's arguments): a generator
 * defines P<kind> for every kind the column can hold. A P<kind> must not use MRC_CASE
 * itself (the preprocessor expands no macro inside itself); a value that depends on a
 * second column is computed by an MRC_CASE among the extra arguments instead. */
#define MRC_K_LIBC LIBC, ()
#define MRC_K_VERBS(...) VERBS, (__VA_ARGS__)
#define MRC_K_OWN OWN, ()
#define MRC_K_LDSO LDSO, ()
#define MRC_K_NOPATCH NOPATCH, ()
#define MRC_K_SYSCALL(...) SYSCALL, (__VA_ARGS__)
#define MRC_K_ENTRY ENTRY, ()
#define MRC_K_NOGUARD NOGUARD, ()
#define MRC_K_GUARD GUARD, ()
#define MRC_K_CHAIN(...) CHAIN, (__VA_ARGS__)
#define MRC_K_PLT_NO PLT_NO, ()
#define MRC_K_PLT_OK PLT_OK, ()
#define MRC_CASE(P, col, ...) MRC_CASE_I(P, MRC_K_##col, __VA_ARGS__)
#define MRC_CASE_I(P, ...) MRC_CASE_J(P, __VA_ARGS__)
#define MRC_CASE_J(P, kind, args, ...) MRC_CALL(P##kind, __VA_ARGS__ MRC_MORE args)
#define MRC_MORE(...) , ##__VA_ARGS__
#define MRC_CALL(m, ...) m(__VA_ARGS__)

/* For scripts/check-layers.sh: the symbols no JUMP_SLOT of libmrcache may name. */
#define MRC_PLT_FORBIDDEN_PLT_NO(sym) sym
#define MRC_PLT_FORBIDDEN_PLT_OK(sym)
#define MRC_PLT_FORBIDDEN_ROW(sym, id, ret, params, where, patch, guard, plt) MRC_CASE(MRC_PLT_FORBIDDEN_, plt, sym)
#define MRC_PLT_FORBIDDEN MRC_FNS(MRC_PLT_FORBIDDEN_ROW)

#endif
