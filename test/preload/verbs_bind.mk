# verbs_bind.mk - verbs bound from a library handle and from a deep-bound plugin (test_bind.c):
# the program does not link libibverbs, so it is built without $(SNIC_LINK).
$(BUILD)/test/test_bind: test/preload/test_bind.c test/lib/check.h test/snic/snic.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) -ldl

$(BUILD)/test/libmrc_bindplugin.so: test/preload/bind_plugin.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fPIC -fvisibility=hidden $< -o $@ $(LDFLAGS) $(SNIC_LINK)

BIND_RUN := $(BUILD)/test/test_bind
BIND_PLUGIN := $(abspath $(BUILD)/test/libmrc_bindplugin.so)
TEST_BINS += $(BUILD)/test/test_bind $(BUILD)/test/libmrc_bindplugin.so $(SNIC_DEPS)
# A sanitizer runtime refuses RTLD_DEEPBIND, and Python does not load it first: those
# cells run in the plain build only.
BIND_ROUTES := dlvsym dlsym $(if $(SANFLAGS),,deepbind)
TEST_CMDS += $(foreach r,$(BIND_ROUTES),"$(PRELOAD) MRCACHE_STATS=off EXPECT_CACHED=1 $(BIND_RUN) $(r) $(BIND_PLUGIN)")
# Another allocator after the cache, and the userfaultfd source beside the others.
TEST_CMDS += $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off EXPECT_CACHED=1 $(BIND_RUN) dlvsym $(BIND_PLUGIN) 2>/dev/null")
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=patch,preload,uffd EXPECT_CACHED=1 $(BIND_RUN) $(lastword $(BIND_ROUTES)) $(BIND_PLUGIN)"
# Children in fork-safe mode, by fork and by _Fork, on every route and after every
# allocator (the NIC without copy-on-fork, so registered pages are left out of them).
BIND_FORK := SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1
TEST_CMDS += $(foreach h,fork _Fork,$(foreach r,$(BIND_ROUTES),"$(PRELOAD) MRCACHE_STATS=off $(BIND_FORK) FORK_HOW=$(h) EXPECT_CACHED=1 $(BIND_RUN) $(r) $(BIND_PLUGIN) 2>/dev/null"))
TEST_CMDS += $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off $(BIND_FORK) FORK_HOW=_Fork EXPECT_CACHED=1 $(BIND_RUN) dlvsym $(BIND_PLUGIN) 2>/dev/null")
TEST_CMDS += $(foreach h,fork _Fork,"LD_LIBRARY_PATH=$(SNIC_DIR) $(BIND_FORK) FORK_HOW=$(h) EXPECT_CACHED=0 $(BIND_RUN) $(lastword $(BIND_ROUTES)) $(BIND_PLUGIN)")
# The controls: the same programs without the preload, every registration to the NIC.
TEST_CMDS += $(foreach r,$(BIND_ROUTES),"LD_LIBRARY_PATH=$(SNIC_DIR) EXPECT_CACHED=0 $(BIND_RUN) $(r) $(BIND_PLUGIN)")
# Python's ctypes: every verb bound from the library's handle.
ifeq ($(SANFLAGS),)
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off EXPECT_CACHED=1 /usr/bin/python3 test/preload/test_bind_ctypes.py"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) EXPECT_CACHED=0 /usr/bin/python3 test/preload/test_bind_ctypes.py"
endif

# The MR verbs from a library handle in a program that links libibverbs too
# (test_handle_verbs.c): its data path is the device's, so the same program runs on rxe
# in the VM (test/vm/vm.mk). Under the preload, after every allocator, and without it.
$(BUILD)/test/test_handle_verbs: test/preload/test_handle_verbs.c test/lib/common.h test/preload/stale.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_handle_verbs
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_handle_verbs" \
    $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off $(BUILD)/test/test_handle_verbs 2>/dev/null") \
    "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_handle_verbs"

# Everything started at the first registration of a program that loads libibverbs
# late, while three threads run through the entry points being rewritten
# (test_late_start.c), in 200 children, and 50 after each allocator.
$(BUILD)/test/test_late_start: test/preload/test_late_start.c test/lib/check.h test/snic/snic.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_late_start
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off EXPECT_STARTED=1 timeout 300 $(BUILD)/test/test_late_start 200" \
    $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off EXPECT_STARTED=1 timeout 300 $(BUILD)/test/test_late_start 50 2>/dev/null") \
    "LD_LIBRARY_PATH=$(SNIC_DIR) timeout 300 $(BUILD)/test/test_late_start 50"
