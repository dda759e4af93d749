# stats.mk - the statistics modules: the call-site, leak, output-path and dump-signal
# modules on their own (test_callsite, through a shim library exporting them), then
# test_stats.sh: a verbs workload under the preload (call sites, leaks, %r files, the
# dump signal, 4 ranks merged by scripts/mrcache-report).
STATS_SHIM := $(BUILD)/test/libmrc_statsshim.so
STATS_SHIM_OBJS := $(addprefix $(BUILD)/obj/,util/callsite.o util/leaks.o util/outpath.o util/report_ext.o util/report_mrs.o \
                     util/clock.o util/dumpsig.o util/log.o util/stats.o util/pool.o util/sys.o)

$(STATS_SHIM): test/stats/stats_shim.c $(STATS_SHIM_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden -Isrc $< $(STATS_SHIM_OBJS) -o $@ $(LDFLAGS) -ldl -lpthread

$(BUILD)/test/test_callsite: test/stats/test_callsite.c test/check.h $(STATS_SHIM)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest -Isrc $< -o $@ $(LDFLAGS) $(STATS_SHIM) -Wl,-rpath,$(abspath $(BUILD)/test)

$(BUILD)/test/stats_workload: test/stats/stats_workload.c test/preload/common.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK)

$(BUILD)/test/largest_mrs: test/stats/largest_mrs.c test/preload/common.h test/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl

TEST_BINS += $(STATS_SHIM) $(BUILD)/test/test_callsite $(BUILD)/test/stats_workload $(BUILD)/test/largest_mrs
TEST_CMDS += "$(BUILD)/test/test_callsite"
TEST_CMDS += "test/stats/test_stats.sh $(BUILD) '$(PRELOAD_PREFIX)'"
