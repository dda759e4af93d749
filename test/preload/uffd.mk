# uffd.mk - the userfaultfd source (src/monitor/uffd.c): raw system calls on registered
# memory must be seen with it (alone, and added to patch,preload) and must come out stale
# without it (EXPECT_STALE: the tests can fail); the preload suite's raw-syscall tests
# both ways; the VMA budget, and the program's own mappings at vm.max_map_count; refusal, exit, an unprivileged user, the auto rule (test_uffd.sh).
# Every run is under timeout: a thread left waiting on an unmap is a failure.
UFFD_BIN := $(BUILD)/test/test_uffd
UFFD_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off

$(UFFD_BIN): test/preload/test_uffd.c test/lib/common.h test/preload/stale.h test/lib/rdma_loop.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(UFFD_BIN)
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=uffd timeout 300 $(UFFD_BIN)"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload,uffd timeout 300 $(UFFD_BIN)"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload MRCACHE_LARGE=1/1 EXPECT_STALE=1 timeout 300 $(UFFD_BIN) 2>/dev/null"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=uffd timeout 300 $(UFFD_BIN) budget"
TEST_CMDS += $(foreach m,uffd patch+preload+uffd,"$(UFFD_RUN) MRCACHE_MONITOR=$(m) timeout 300 $(UFFD_BIN) maplimit")
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload,uffd timeout 300 $(BUILD)/test/test_unmap_paths"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload timeout 300 $(BUILD)/test/test_unmap_paths"
TEST_CMDS += "test/preload/test_uffd.sh $(BUILD) '$(PRELOAD_PREFIX)'"
