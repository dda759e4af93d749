# preload.mk - unmodified verbs programs run on the software NIC with libmrcache.so
# preloaded (and some without, as controls), plus shell-level tests of the process.
PRELOAD_BINS := $(BUILD)/test/test_unmap_paths $(BUILD)/test/test_verbs
PRELOAD := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))

$(BUILD)/test/test_%: test/preload/test_%.c test/preload/common.h test/preload/stale.h test/preload/rdma_loop.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(PRELOAD_BINS)
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_unmap_paths"
# Shared memory cached: the shm and MADV_REMOVE paths must then invalidate it themselves.
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_SHARED=cache $(BUILD)/test/test_unmap_paths"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=none EXPECT_STALE=1 $(BUILD)/test/test_unmap_paths 2>/dev/null"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_verbs"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_verbs"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MAX_DEFERRED=512K DEFERRED_ONLY=1 $(BUILD)/test/test_verbs"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 FORK_SAFE_ONLY=1 $(BUILD)/test/test_verbs"

$(BUILD)/test/libmrc_testplugin.so: test/preload/plugin.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) $(SNIC_LINK)

$(BUILD)/test/plugin_host: test/preload/plugin_host.c test/check.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest $< -o $@ $(LDFLAGS) -ldl

$(BUILD)/test/memlock: test/preload/memlock.c test/preload/common.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK)

TEST_BINS += $(BUILD)/test/libmrc_testplugin.so $(BUILD)/test/plugin_host $(BUILD)/test/memlock
TEST_CMDS += "test/preload/test_process.sh $(BUILD) '$(PRELOAD_PREFIX)'"

# MRCACHE_ODP against every ODP capability the software NIC can report.
TEST_BINS += $(BUILD)/test/test_odp
TEST_CMDS += "test/preload/test_odp.sh $(BUILD) '$(PRELOAD_PREFIX)'"
