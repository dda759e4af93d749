# never.mk - "never worse than no cache": each program here runs without libmrcache (the
# reference: exit status, return values, errno, data, pinned memory) and with it, in
# every `make test`. All are always built. The software NIC's failure injector has a test
# of its own.
NEVER_SRCS := $(addprefix test/preload/,exit_paths.c rereg_table.c test_dereg_failure.c test_idle_pinned.c \
                 test_snic_faults.c test_uffd_side_effects.c)
NEVER_BINS := $(patsubst test/preload/%.c,$(BUILD)/test/never_%,$(NEVER_SRCS))
NEVER_REF  := LD_LIBRARY_PATH=$(SNIC_DIR) timeout -s KILL 300
NEVER_PRE  := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off
NEVER_TMO  := timeout -s KILL 300
NEVER_UFFD := $(NEVER_PRE) MRCACHE_MONITOR=patch,preload,uffd

$(BUILD)/test/never_%: test/preload/%.c test/preload/never.h test/lib/common.h test/lib/rdma_loop.h \
                       test/lib/check.h test/snic/snic.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(NEVER_BINS)
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_snic_faults"

# Exit paths: status or signal as without the cache (a hang meets a 30 s timeout).
TEST_CMDS += "test/preload/test_exit_paths.sh $(BUILD) '$(PRELOAD_PREFIX)'"
# Deregistrations the NIC refuses: kept, counted, retried; refused registrations.
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_dereg_failure"
TEST_CMDS += "$(NEVER_PRE) $(NEVER_TMO) $(BUILD)/test/never_test_dereg_failure"
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_dereg_failure exit"
TEST_CMDS += "$(NEVER_PRE) $(NEVER_TMO) $(BUILD)/test/never_test_dereg_failure exit"
# Released registrations: limits at release, fork copies, MADV_COLLAPSE.
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_idle_pinned limits"
TEST_CMDS += "$(NEVER_PRE) MRCACHE_MAX_ENTRIES=8 MRCACHE_MAX_BYTES=1M $(NEVER_TMO) $(BUILD)/test/never_test_idle_pinned limits"
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_idle_pinned fork"
TEST_CMDS += "$(NEVER_PRE) $(NEVER_TMO) $(BUILD)/test/never_test_idle_pinned fork"
TEST_CMDS += "$(NEVER_REF) $(BUILD)/test/never_test_idle_pinned collapse"
TEST_CMDS += "$(NEVER_PRE) $(NEVER_TMO) $(BUILD)/test/never_test_idle_pinned collapse"
# ibv_rereg_mr case by case against libibverbs, with remote registrations cached and not.
TEST_CMDS += "test/preload/test_rereg_table.sh $(BUILD) '$(PRELOAD_PREFIX)'"
TEST_CMDS += "test/preload/test_rereg_table.sh $(BUILD) '$(PRELOAD_PREFIX)' MRCACHE_REMOTE=never"
# The userfaultfd source's side effects.
NEVER_UFFD_MODES := vma rereg mremap own_uffd close_range close_range_unmap
TEST_CMDS += $(foreach m,$(NEVER_UFFD_MODES),"$(NEVER_REF) $(BUILD)/test/never_test_uffd_side_effects $(m)")
TEST_CMDS += $(foreach m,$(NEVER_UFFD_MODES),"$(NEVER_UFFD) $(NEVER_TMO) $(BUILD)/test/never_test_uffd_side_effects $(m)")
