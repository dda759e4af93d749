# uffd.mk - the userfaultfd source (src/monitor/uffd.c): raw system calls on registered
# memory must be seen with it (alone, and added to patch,preload) and must come out stale
# without it (EXPECT_STALE: the tests can fail); the preload suite's raw-syscall tests
# both ways; the VMA budget; refusal, exit, an unprivileged user, the auto rule (test_uffd.sh).
# Every run is under timeout: a thread left waiting on an unmap is a failure.
UFFD_BIN := $(BUILD)/test/test_uffd
UFFD_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off

$(UFFD_BIN): test/uffd/test_uffd.c test/preload/common.h test/preload/stale.h test/preload/rdma_loop.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(UFFD_BIN)
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=uffd timeout 300 $(UFFD_BIN)"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload,uffd timeout 300 $(UFFD_BIN)"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload MRCACHE_LARGE=1/1 EXPECT_STALE=1 timeout 300 $(UFFD_BIN) 2>/dev/null"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=uffd timeout 300 $(UFFD_BIN) budget"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload,uffd timeout 300 $(BUILD)/test/test_unmap_paths"
TEST_CMDS += "$(UFFD_RUN) MRCACHE_MONITOR=patch,preload timeout 300 $(BUILD)/test/test_unmap_paths"
TEST_CMDS += "test/uffd/test_uffd.sh $(BUILD) '$(PRELOAD_PREFIX)'"

# make bench: the source's costs, with and without it (reported, never asserted).
$(BUILD)/test/bench_uffd: test/uffd/bench_uffd.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Iinclude $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
uffd-bench: $(LIB) $(BUILD)/test/bench_uffd
	@echo "-- kernel alone"; $(BUILD)/test/bench_uffd kernel
	@for m in patch,preload patch,preload,uffd; do echo "-- MRCACHE_MONITOR=$$m"; \
	    $(UFFD_RUN) MRCACHE_MONITOR=$$m MRCACHE_MAX_ENTRIES=16 $(BUILD)/test/bench_uffd verbs; \
	    $(UFFD_RUN) MRCACHE_MONITOR=$$m $(BUILD)/test/bench_uffd munmap; done
	@echo "-- the descriptor hooks: without, then with the preload"; $(BUILD)/test/bench_uffd hooks; \
	    $(UFFD_RUN) MRCACHE_MONITOR=patch,preload,uffd $(BUILD)/test/bench_uffd hooks
bench: uffd-bench
.PHONY: uffd-bench
