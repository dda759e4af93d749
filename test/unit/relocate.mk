# relocate.mk (unit) - the code mover of libibverbs' rewritten entry points, on Debian's
# libibverbs and on the software NIC's (where the trampolines are also run).
RELOCATE_OBJS := $(addprefix $(BUILD)/obj/,monitor/patch_x86.o monitor/unmap.o monitor/maps.o monitor/files.o \
                   monitor/glibc_heap.o util/procmaps.o util/real.o util/log.o util/sys.o)
$(BUILD)/test/test_relocate: test/unit/test_relocate.c test/lib/check.h $(RELOCATE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $< $(RELOCATE_OBJS) $(LDFLAGS) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_relocate $(SNIC_DEPS)
TEST_CMDS += "$(BUILD)/test/test_relocate /usr/lib/x86_64-linux-gnu/libibverbs.so.1"
TEST_CMDS += "$(BUILD)/test/test_relocate $(abspath $(SNIC_LIB)) run"
