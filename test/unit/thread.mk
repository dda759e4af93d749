# thread.mk (unit) - libmrcache's helper threads (util/thread.c) with the statistics they
# map for themselves.
THREAD_OBJS := $(addprefix $(BUILD)/obj/,util/thread.o util/stats.o util/clock.o util/real.o util/log.o util/sys.o)
$(BUILD)/test/test_thread: test/unit/test_thread.c test/lib/check.h $(THREAD_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $< $(THREAD_OBJS) $(LDFLAGS) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_thread
TEST_CMDS += $(BUILD)/test/test_thread
