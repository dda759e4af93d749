# demo.mk - the demo program, built against libibverbs' headers and ABI (the software
# NIC's copy, which a real libibverbs replaces at run time). scripts/demo.sh runs it.
$(BUILD)/demo/mrc_demo: test/demo/mrc_demo.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl

demo: all $(BUILD)/demo/mrc_demo
	@scripts/demo.sh $(BUILD)
.PHONY: demo
