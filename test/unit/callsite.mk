# callsite.mk - the statistics' call-site, leak, output-path and dump-signal modules on
# their own (test_callsite.c), through a shim library exporting them.
STATS_SHIM := $(BUILD)/test/libmrc_statsshim.so
STATS_SHIM_OBJS := $(addprefix $(BUILD)/obj/,util/callsite.o util/leaks.o util/outpath.o util/report_ext.o util/report_mrs.o \
                     util/clock.o util/dumpsig.o util/log.o util/stats.o util/pool.o util/sys.o)

$(STATS_SHIM): test/unit/stats_shim.c $(STATS_SHIM_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden -Isrc $< $(STATS_SHIM_OBJS) -o $@ $(LDFLAGS) -ldl -lpthread

$(BUILD)/test/test_callsite: test/unit/test_callsite.c test/lib/check.h $(STATS_SHIM)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest/lib -Isrc $< -o $@ $(LDFLAGS) $(STATS_SHIM) -Wl,-rpath,$(abspath $(BUILD)/test)

TEST_BINS += $(STATS_SHIM) $(BUILD)/test/test_callsite
TEST_CMDS += "$(BUILD)/test/test_callsite"
