# cache.mk - the cache core's unit tests, linked with the core objects only (no verbs).
$(BUILD)/test/test_cache: test/unit/test_cache.c test/unit/fake_backend.h $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(if $(SAN),-DSTRESS_OPS=50000) -Isrc -Itest/lib -Itest/unit -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
TEST_BINS += $(BUILD)/test/test_cache
TEST_CMDS += $(BUILD)/test/test_cache
