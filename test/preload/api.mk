# api.mk - the public API (include/mrcache.h): a program built against the header only,
# run preloaded (every call works), preloaded without the invalidate call (the raw remap
# must be stale: the test can fail), and without the library (every call -ENOSYS). The
# header from outside and `make install` are test/package/api.mk's.
API_BIN := $(BUILD)/test/test_api
API_RUN := LD_LIBRARY_PATH=$(SNIC_DIR)
API_PRELOAD := $(API_RUN) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))

# Never linked with libmrcache: the header's dlsym binding is what is under test.
$(API_BIN): test/preload/test_api.c include/mrcache.h test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Iinclude -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(API_BIN)
TEST_CMDS += "$(API_PRELOAD) MRCACHE_STATS=off $(API_BIN)"
TEST_CMDS += "$(API_PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=preload MRCACHE_MALLOC_HOOKS=0 API_EXPECT_MONITORS=1 $(API_BIN)"
TEST_CMDS += "$(API_PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=none API_EXPECT_MONITORS=0 $(API_BIN) 2>/dev/null"
TEST_CMDS += "$(API_PRELOAD) MRCACHE_STATS=off API_NO_INVALIDATE=1 $(API_BIN)"
TEST_CMDS += "$(API_RUN) API_ABSENT=1 $(API_BIN)"
