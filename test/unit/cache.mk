# cache.mk - the cache core's unit tests, linked with the core objects only (no verbs).
$(BUILD)/test/test_cache: test/unit/test_cache.c test/unit/fake_backend.h $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(if $(SAN),-DSTRESS_OPS=50000) -Isrc -Itest -Itest/unit -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
TEST_BINS += $(BUILD)/test/test_cache
TEST_CMDS += $(BUILD)/test/test_cache

# make bench: the cache core's hit and miss cost (reported, never asserted).
$(BUILD)/test/bench_cache: test/unit/bench_cache.c $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
cache-bench: $(BUILD)/test/bench_cache
	$(BUILD)/test/bench_cache
bench: cache-bench
.PHONY: cache-bench
