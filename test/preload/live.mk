# live.mk - the live view (mrcache --top, --once, --flush; src/runtime/live.c and
# src/program/top.c) on the software NIC, by test_live.sh with live_prog.
$(BUILD)/test/live_prog: test/preload/live_prog.c include/mrcache.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl

TEST_BINS += $(BUILD)/test/live_prog
TEST_CMDS += "test/preload/test_live.sh $(BUILD) '$(PRELOAD_PREFIX)'"
