# wild.mk - ways memory changes under a registration behind the program's back
# (test/preload/test_wild_*.c). Each program registers, deregisters, changes the memory, registers
# again and checks where a write lands, and runs in every `make test`:
# - fork, ucx (and ucx_linked, when UCX is installed): preloaded, preloaded with the
#   userfaultfd source, and without the preload;
# - hugetlb, files, advice, shmdt, shared, uring: the same three runs plus two with
#   MRCACHE_SHARED=cache (shared memory cached: the runs that prove the hooks on it).
# The run without the preload is the reference: a fresh MR must see every write, so each
# test's change and check are real. A change no source of a run can see is a known limit
# there, reported as TODO.
WILD_THREE := fork ucx
WILD_FIVE := hugetlb files advice shmdt shared uring
WILD_HDRS := test/preload/wild.h test/preload/ucm_watch.h test/lib/common.h test/preload/stale.h test/lib/rdma_loop.h test/lib/check.h
WILD_ENV := LD_LIBRARY_PATH=$(SNIC_DIR) MRCACHE_STATS=off
WILD_PRELOAD := LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))
WILD_TIMEOUT := timeout 300
WILD_UFFD := MRCACHE_MONITOR=patch,preload,uffd
# libucs linked into the program, when UCX is installed (libucx0 has no dev symlink).
WILD_UCS_SO := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/libucs.so.0 /usr/lib64/libucs.so.0 /usr/lib/libucs.so.0))

$(BUILD)/test/test_wild_%: test/preload/test_wild_%.c $(WILD_HDRS) $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread -luring

ifneq ($(WILD_UCS_SO),)
$(BUILD)/test/test_wild_ucx_linked: test/preload/test_wild_ucx.c $(WILD_HDRS) $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -DWILD_UCX_LINKED $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) \
	    $(SNIC_LINK) -Wl,--no-as-needed $(WILD_UCS_SO) -Wl,--as-needed -ldl -lpthread
WILD_THREE += ucx_linked
endif

WILD_THREE_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_THREE))
WILD_FIVE_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_FIVE))
TEST_BINS += $(WILD_THREE_BINS) $(WILD_FIVE_BINS)
WILD_RUNS = $(foreach b,$(1),"$(WILD_ENV) $(WILD_PRELOAD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) $(WILD_UFFD) $(WILD_TIMEOUT) $(b)" \
    $(if $(2),"$(WILD_ENV) $(WILD_PRELOAD) MRCACHE_SHARED=cache $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) MRCACHE_SHARED=cache $(WILD_UFFD) $(WILD_TIMEOUT) $(b)") \
    "$(WILD_ENV) $(WILD_TIMEOUT) $(b)")
TEST_CMDS += $(call WILD_RUNS,$(WILD_THREE_BINS),) $(call WILD_RUNS,$(WILD_FIVE_BINS),1)
# Fork-safe mode on a NIC without copy-on-fork: the pages of released registrations must
# be in children made by every call (fork's, _Fork's, clone's, the raw system calls').
WILD_FORK_SAFE_ENV := SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 WILD_FORK_SAFE=1
TEST_CMDS += "$(WILD_ENV) $(WILD_PRELOAD) $(WILD_FORK_SAFE_ENV) $(WILD_TIMEOUT) $(BUILD)/test/test_wild_fork" \
    "$(WILD_ENV) $(WILD_PRELOAD) $(WILD_UFFD) $(WILD_FORK_SAFE_ENV) $(WILD_TIMEOUT) $(BUILD)/test/test_wild_fork" \
    "$(WILD_ENV) $(WILD_FORK_SAFE_ENV) $(WILD_TIMEOUT) $(BUILD)/test/test_wild_fork"
