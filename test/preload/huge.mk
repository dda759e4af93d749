# huge.mk - registrations after huge-page advice, collapse and parallel population on
# the software NIC (test_huge.c): each MRCACHE_HUGEPAGES mode (collapse also with the
# userfaultfd source watching), population on, and the program without the preload (the reference: its data checks must hold without us).
$(BUILD)/test/test_huge: test/preload/test_huge.c test/lib/mrc_counter.h test/lib/common.h test/lib/rdma_loop.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_huge
# (preload.mk, which defines PRELOAD, comes later in the include order.)
HUGE_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off \
            MRCACHE_POPULATE_THREADS=2
TEST_CMDS += "$(HUGE_RUN) $(BUILD)/test/test_huge"
TEST_CMDS += "$(HUGE_RUN) MRCACHE_HUGEPAGES=advise MRCACHE_POPULATE=64M $(BUILD)/test/test_huge"
TEST_CMDS += "$(HUGE_RUN) MRCACHE_HUGEPAGES=collapse $(BUILD)/test/test_huge"
TEST_CMDS += "$(HUGE_RUN) MRCACHE_HUGEPAGES=collapse MRCACHE_MONITOR=patch,preload,uffd $(BUILD)/test/test_huge"
TEST_CMDS += "$(HUGE_RUN) MRCACHE_POPULATE=64M $(BUILD)/test/test_huge"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_huge"
