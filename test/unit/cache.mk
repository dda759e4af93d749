# cache.mk - the cache core's unit tests (the cache; its contract with the sources of
# memory events), linked with the core objects only (no verbs).
$(BUILD)/test/test_cache: test/unit/test_cache.c test/unit/fake_backend.h $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(if $(SAN),-DSTRESS_OPS=50000) -Isrc -Itest/lib -Itest/unit -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
TEST_BINS += $(BUILD)/test/test_cache
TEST_CMDS += $(BUILD)/test/test_cache
$(BUILD)/test/test_events: test/unit/test_events.c test/unit/fake_backend.h $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -Itest/unit -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
TEST_BINS += $(BUILD)/test/test_events
TEST_CMDS += $(BUILD)/test/test_events
