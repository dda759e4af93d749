# report.mk - the statistics' time-saved estimate on made-up reports (test_report.c),
# linked with the report and what it writes through.
REPORT_UNIT_OBJS := $(addprefix $(BUILD)/obj/,util/report.o util/report_ext.o util/report_mrs.o util/callsite.o util/leaks.o \
                      util/outpath.o util/clock.o util/log.o util/stats.o util/pool.o util/sys.o)
$(BUILD)/test/test_report: test/unit/test_report.c test/lib/check.h $(REPORT_UNIT_OBJS)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $< $(REPORT_UNIT_OBJS) $(LDFLAGS) -ldl -lpthread -lm
TEST_BINS += $(BUILD)/test/test_report
TEST_CMDS += $(BUILD)/test/test_report
