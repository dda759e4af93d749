# verify.mk - MRCACHE_VERIFY on the software NIC: with no monitor (MRCACHE_MONITOR=none)
# verification alone must catch each remapping (and without it the same writes must land
# in stale pages: the tests can fail); with the monitor on, hits are checked, one in N per
# thread, never found stale; without CAP_SYS_ADMIN it says once that it is off.
VERIFY_BIN := $(BUILD)/test/test_verify
VERIFY_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off

$(VERIFY_BIN): test/preload/test_verify.c test/lib/common.h test/preload/stale.h test/lib/rdma_loop.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(VERIFY_BIN)
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_MONITOR=none MRCACHE_VERIFY=1 $(VERIFY_BIN)"
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_MONITOR=none MRCACHE_VERIFY=0 MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(VERIFY_BIN) 2>/dev/null"
TEST_CMDS += "$(VERIFY_RUN) MRCACHE_VERIFY=1 $(VERIFY_BIN)"
TEST_CMDS += "test/preload/test_verify.sh $(BUILD) '$(PRELOAD_PREFIX)'"
