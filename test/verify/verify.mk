# verify.mk - MRCACHE_VERIFY on the software NIC: with no monitor (MRCACHE_MONITOR=none)
# verification alone must catch each remapping (and without it the same writes must land
# in stale pages: the tests can fail); with the monitor on, hits are checked, one in N per
# thread, never found stale; without CAP_SYS_ADMIN it says once that it is off.
# `make verify-bench` prints the cost of a verified hit (not a test: times are not asserted).
VERIFY_BIN := $(BUILD)/test/test_verify
VERIFY_BENCH := $(BUILD)/test/bench_verify
VERIFY_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off

$(VERIFY_BIN): test/verify/test_verify.c test/preload/common.h test/preload/stale.h test/preload/rdma_loop.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

$(VERIFY_BENCH): test/verify/bench_verify.c test/preload/common.h test/preload/rdma_loop.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(VERIFY_BIN)
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_MONITOR=none MRCACHE_VERIFY=1 $(VERIFY_BIN)"
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_MONITOR=none MRCACHE_VERIFY=0 MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(VERIFY_BIN) 2>/dev/null"
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_VERIFY=1 $(VERIFY_BIN)"
TEST_CMDS += "test/verify/test_verify.sh $(BUILD) '$(PRELOAD_PREFIX)'"

.PHONY: verify-bench
verify-bench: $(LIB) $(VERIFY_BENCH)
	@for v in 0 1; do $(VERIFY_RUN) MRCACHE_VERIFY=$$v $(VERIFY_BENCH); done
