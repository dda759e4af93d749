# monitor.mk (unit) - the monitors against a fake sink, linked with the monitor and
# utility objects only: no cache, no runtime, no preload.
MONITOR_UNIT_OBJS := $(addprefix $(BUILD)/obj/,monitor/unmap.o monitor/maps.o monitor/files.o monitor/glibc_heap.o \
                       util/procmaps.o util/real.o util/log.o util/sys.o)
$(BUILD)/test/test_monitor: test/unit/test_monitor.c test/lib/check.h $(MONITOR_UNIT_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $< $(MONITOR_UNIT_OBJS) $(LDFLAGS) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_monitor
TEST_CMDS += $(BUILD)/test/test_monitor
