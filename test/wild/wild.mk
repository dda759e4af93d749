# wild.mk - ways memory changes under a registration behind the program's back
# (test/wild/*.c). Each program runs three times: preloaded, preloaded with the
# userfaultfd source added, and without the preload (the reference: a fresh MR must see
# every write, so each test's change and check are real). Those libmrcache handles run in
# every `make test`; the rest are built always and run by `make test WILD=1`.
WILD ?= 0
WILD_HANDLED = fork ucx $(if $(WILD_UCS_SO),ucx_linked)
WILD_NAMES := ucx hugetlb files advice shmdt fork shared uring
WILD_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_NAMES))
WILD_HDRS := test/wild/wild.h test/preload/common.h test/preload/stale.h test/preload/rdma_loop.h test/check.h
WILD_ENV := LD_LIBRARY_PATH=$(SNIC_DIR) MRCACHE_STATS=off
WILD_PRELOAD := LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))
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

TEST_BINS += $(WILD_BINS)
WILD_TIMEOUT := timeout 300
WILD_RUN = $(foreach b,$(1),"$(WILD_ENV) $(WILD_PRELOAD) $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_PRELOAD) MRCACHE_MONITOR=patch,preload,uffd $(WILD_TIMEOUT) $(b)" \
    "$(WILD_ENV) $(WILD_TIMEOUT) $(b)")
WILD_HANDLED_BINS := $(addprefix $(BUILD)/test/test_wild_,$(WILD_HANDLED))
TEST_CMDS += $(call WILD_RUN,$(WILD_HANDLED_BINS))
ifeq ($(WILD),1)
TEST_CMDS += $(call WILD_RUN,$(filter-out $(WILD_HANDLED_BINS),$(WILD_BINS)))
endif
