# ucs.mk - another library patching libc's unmap entry points after libmrcache did:
# UCX's libucs/libucm (bistro hooks, default settings) loaded once the cache is in use,
# with the allocator hooks off. Chained, both see every unmap (data must be visible, UCX's
# callback must fire); under MRCACHE_MONITOR=none every check must come out stale. Also
# the same paths with nothing loaded late, and test_ucs.sh: a late patch that cannot be
# chained is given up (said once, allocator hooks back on), one that can is chained.
UCS_BIN := $(BUILD)/test/test_ucs
UCS_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off MRCACHE_MALLOC_HOOKS=0

$(UCS_BIN): test/preload/test_ucs.c test/preload/ucm_watch.h test/lib/common.h test/preload/stale.h test/lib/rdma_loop.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(UCS_BIN)
TEST_CMDS += "$(UCS_RUN) $(UCS_BIN)"
TEST_CMDS += "$(UCS_RUN) MRCACHE_MONITOR=patch $(UCS_BIN)"
TEST_CMDS += "$(UCS_RUN) MRCACHE_MONITOR=none MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(UCS_BIN) 2>/dev/null"
TEST_CMDS += "$(UCS_RUN) LATE_LIB=none $(UCS_BIN)"
TEST_CMDS += "test/preload/test_ucs.sh $(BUILD) '$(PRELOAD_PREFIX)'"
