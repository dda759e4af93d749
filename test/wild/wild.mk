# wild.mk - ways memory changes under a registration that libmrcache's sources may not
# see (test/wild/*.c). Each program registers, deregisters, changes the memory, registers
# again and checks where a write lands. Run by `make test`: hugetlb, files, advice, shmdt,
# shared, uring, each preloaded, preloaded with the userfaultfd source, preloaded with
# MRCACHE_SHARED=cache (shared memory cached: the run that proves the hooks on it), the
# same with the userfaultfd source, and without the preload (the reference: a fresh MR
# must see every write, so each test's change and check are real). A change no source of
# a run can see is a known limit there, reported as TODO. Run only by `make test WILD=1`
# (three runs each: preloaded, with the userfaultfd source, without the preload): ucx and
# fork, where libmrcache still misses changes.
WILD ?= 0
WILD_DEFAULT_NAMES := hugetlb files advice shmdt shared uring
WILD_GATED_NAMES := ucx fork
WILD_DEFAULT_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_DEFAULT_NAMES))
WILD_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_GATED_NAMES))
WILD_HDRS := test/wild/wild.h test/preload/common.h test/preload/stale.h test/preload/rdma_loop.h test/check.h
WILD_ENV := LD_LIBRARY_PATH=$(SNIC_DIR) MRCACHE_STATS=off
WILD_PRELOAD := LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))
WILD_TIMEOUT := timeout 300
# libucs linked into the program, when UCX is installed (libucx0 has no dev symlink).
WILD_UCS_SO := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libucs.so.0 /usr/lib64/libucs.so.0 /usr/lib/libucs.so.0))

$(BUILD)/test/test_wild_%: test/wild/test_wild_%.c $(WILD_HDRS) $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload -Itest/wild $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread -luring

ifneq ($(WILD_UCS_SO),)
$(BUILD)/test/test_wild_ucx_linked: test/wild/test_wild_ucx.c $(WILD_HDRS) $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -DWILD_UCX_LINKED $(SNIC_CFLAGS) -Itest -Itest/preload -Itest/wild $< -o $@ $(LDFLAGS) \
	    $(SNIC_LINK) -Wl,--no-as-needed $(WILD_UCS_SO) -Wl,--as-needed -ldl -lpthread
WILD_BINS += $(BUILD)/test/test_wild_ucx_linked
endif

TEST_BINS += $(WILD_DEFAULT_BINS) $(WILD_BINS)
WILD_UFFD := MRCACHE_MONITOR=patch,preload,uffd
TEST_CMDS += $(foreach b,$(WILD_DEFAULT_BINS),"$(WILD_ENV) $(WILD_PRELOAD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) $(WILD_UFFD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) MRCACHE_SHARED=cache $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) MRCACHE_SHARED=cache $(WILD_UFFD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_TIMEOUT) $(b)")
ifeq ($(WILD),1)
TEST_CMDS += $(foreach b,$(WILD_BINS),"$(WILD_ENV) $(WILD_PRELOAD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) $(WILD_UFFD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_TIMEOUT) $(b)")
endif
