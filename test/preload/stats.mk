# stats.mk - the statistics under the preload, by test_stats.sh: a verbs workload (call
# sites, leaks, %r files, the dump signal), the largest registrations, 4 ranks merged by
# scripts/mrcache-report. The modules on their own are test/unit/callsite.mk's.
$(BUILD)/test/stats_workload: test/preload/stats_workload.c test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK)

$(BUILD)/test/largest_mrs: test/preload/largest_mrs.c test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl

TEST_BINS += $(BUILD)/test/stats_workload $(BUILD)/test/largest_mrs
TEST_CMDS += "test/preload/test_stats.sh $(BUILD) '$(PRELOAD_PREFIX)'"
