# uffd_ranges.mk (unit) - the userfaultfd source's count of watches per page against a
# brute-force model, linked with that object and the node pool's alone.
UFFD_RANGES_TEST := $(BUILD)/test/test_uffd_ranges
$(UFFD_RANGES_TEST): test/unit/test_uffd_ranges.c $(BUILD)/obj/monitor/uffd_ranges.o $(BUILD)/obj/util/pool.o $(BUILD)/obj/util/sys.o \
                     src/monitor/uffd_ranges.h test/lib/check.h
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $(filter %.c %.o,$^) $(LDFLAGS) -lpthread
TEST_BINS += $(UFFD_RANGES_TEST)
TEST_CMDS += $(UFFD_RANGES_TEST)
