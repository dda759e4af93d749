# libc_bind.mk - code whose libc calls bypass the preload.
# - A library in a link-map namespace of its own (dlmopen) changes memory the program
#   registered (test/preload/test_dlmopen.c): preloaded (that namespace's libc patched),
#   with the userfaultfd source, with MRCACHE_MONITOR=preload (nothing can patch it:
#   caching must stop, so the data is still right), under EXPECT_STALE=1 with no source
#   (proof the checks fail), and without the preload (the reference).
NS_BIN := $(BUILD)/test/test_dlmopen
NS_LIB := $(BUILD)/test/libmrc_nslib.so
NS_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) MRCACHE_STATS=off

$(NS_BIN): test/preload/test_dlmopen.c test/lib/common.h test/preload/stale.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

$(NS_LIB): test/preload/nslib.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS)

NS_PRELOAD = LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))
# In the plain build only: a sanitizer's runtime cannot be loaded into a second namespace
# (the library there, instrumented, aborts without it).
ifeq ($(SANFLAGS),)
TEST_BINS += $(NS_BIN) $(NS_LIB)
TEST_CMDS += "$(NS_RUN) $(NS_PRELOAD) $(NS_BIN) $(abspath $(NS_LIB))"
TEST_CMDS += "$(NS_RUN) $(NS_PRELOAD) MRCACHE_MONITOR=patch,preload,uffd $(NS_BIN) $(abspath $(NS_LIB))"
TEST_CMDS += "$(NS_RUN) $(NS_PRELOAD) MRCACHE_MONITOR=preload $(NS_BIN) $(abspath $(NS_LIB)) 2>/dev/null"
TEST_CMDS += "$(NS_RUN) $(NS_PRELOAD) MRCACHE_MONITOR=none MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(NS_BIN) $(abspath $(NS_LIB)) 2>/dev/null"
TEST_CMDS += "$(NS_RUN) $(NS_BIN) $(abspath $(NS_LIB))"
endif

# A program with its own munmap, mmap and madvise (test/preload/test_own_wrappers.c),
# its definitions local and exported (-rdynamic): default sources (the userfaultfd source
# added), the sources without it (stale: the checks can fail), and without the preload.
OWN_BINS := $(BUILD)/test/test_own_wrappers $(BUILD)/test/test_own_wrappers_exported
$(BUILD)/test/test_own_wrappers: test/preload/test_own_wrappers.c test/lib/common.h test/preload/stale.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
$(BUILD)/test/test_own_wrappers_exported: test/preload/test_own_wrappers.c test/lib/common.h test/preload/stale.h \
                                           $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) -rdynamic \
	    $(SNIC_LINK) -ldl -lpthread
TEST_BINS += $(OWN_BINS)
TEST_CMDS += $(foreach b,$(OWN_BINS),"$(NS_RUN) $(NS_PRELOAD) $(b)" \
    "$(NS_RUN) $(NS_PRELOAD) MRCACHE_MONITOR=patch,preload EXPECT_STALE=1 $(b) 2>/dev/null" "$(NS_RUN) $(b)")
