# monitor.mk - the patch source (src/monitor/patch*.c): unmaps glibc and ld.so make
# themselves, run with the allocator hooks off, under auto and patch (data must be
# visible), and under preload and none (must be stale: the tests can fail); plus
# refusal to overwrite another library's patch, the start-up self-test's report, and
# another library patching libmrcache's own exports late (test_patched_exports).
MON_BIN := $(BUILD)/test/test_monitor_paths
MON_LIB := $(BUILD)/test/libmrc_bigbss.so
MON_FAKE := $(BUILD)/test/libmrc_fakepatch.so
# preload.mk is included after this fragment: its $(PRELOAD) is not defined yet.
MON_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off MRCACHE_MALLOC_HOOKS=0

$(MON_BIN): test/preload/test_monitor_paths.c test/lib/common.h test/preload/stale.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

$(MON_LIB): test/preload/bigbss.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS)

$(MON_FAKE): test/preload/fakepatch.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -ldl

$(BUILD)/test/test_patched_exports: test/preload/test_patched_exports.c test/lib/common.h test/preload/stale.h \
                                     test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(MON_BIN) $(MON_LIB) $(MON_FAKE) $(BUILD)/test/test_patched_exports
TEST_CMDS += "$(MON_RUN) $(MON_BIN) $(abspath $(MON_LIB))"
TEST_CMDS += "$(MON_RUN) MRCACHE_MONITOR=patch $(MON_BIN) $(abspath $(MON_LIB))"
TEST_CMDS += "$(MON_RUN) MRCACHE_MONITOR=preload MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(MON_BIN) $(abspath $(MON_LIB)) 2>/dev/null"
TEST_CMDS += "$(MON_RUN) MRCACHE_MONITOR=none MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(MON_BIN) $(abspath $(MON_LIB)) 2>/dev/null"
TEST_CMDS += "test/preload/test_patch.sh $(BUILD) '$(PRELOAD_PREFIX)'"
