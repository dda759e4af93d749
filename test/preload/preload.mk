# preload.mk - unmodified verbs programs run on the software NIC with libmrcache.so
# preloaded (and some without, as controls), plus shell-level tests of the process.
PRELOAD_BINS := $(BUILD)/test/test_unmap_paths $(BUILD)/test/test_verbs $(BUILD)/test/test_expand \
                $(BUILD)/test/test_start_locked
PRELOAD := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB))

$(BUILD)/test/test_%: test/preload/test_%.c test/lib/common.h test/preload/stale.h test/lib/rdma_loop.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(PRELOAD_BINS)
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_unmap_paths"
# Shared memory cached: the shm and MADV_REMOVE paths must then invalidate it themselves.
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_SHARED=cache $(BUILD)/test/test_unmap_paths"
# Every stale control (EXPECT_STALE=1, here and in the other directories) keeps all its
# registrations, MRCACHE_LARGE=1/1: one the size admission gives back at its release
# (over 2 MiB where RLIMIT_MEMLOCK is 8 MiB) is registered afresh, and cannot go stale.
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=none MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(BUILD)/test/test_unmap_paths 2>/dev/null"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_verbs"
# Another allocator after the cache: each exports names of glibc's (tcmalloc and mimalloc
# their own __libc_free), and none of their memory is glibc's chunks.
ALLOCATORS := /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4 \
              /usr/lib/x86_64-linux-gnu/libmimalloc.so.2
TEST_CMDS += $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off $(BUILD)/test/test_verbs 2>/dev/null")
TEST_CMDS += $(foreach a,$(ALLOCATORS),"$(PRELOAD):$(a) MRCACHE_STATS=off MRCACHE_MONITOR=patch,preload,uffd $(BUILD)/test/test_verbs 2>/dev/null")
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_verbs"
# The first registration made under the program's own allocator lock: helper threads'
# starts must not wait for it forever (the userfaultfd handler's too). Not under a
# sanitizer, whose allocator the program's malloc cannot stand in for.
ifeq ($(SAN),)
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off timeout 60 $(BUILD)/test/test_start_locked"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MONITOR=patch,preload,uffd timeout 60 $(BUILD)/test/test_start_locked"
endif
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MAX_DEFERRED=512K DEFERRED_ONLY=1 $(BUILD)/test/test_verbs"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 FORK_SAFE_ONLY=1 $(BUILD)/test/test_verbs"
# Released before fork whatever MRCACHE_FORK says, also where rdma-core (before 35) has
# no ibv_is_fork_initialized and RDMAV_FORK_SAFE alone turns the mode on.
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_FORK=keep SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 FORK_SAFE_ONLY=1 $(BUILD)/test/test_verbs"
TEST_CMDS += "$(PRELOAD) LD_LIBRARY_PATH=$(SNIC34_DIR) MRCACHE_STATS=off MRCACHE_FORK=keep SNIC_COPY_ON_FORK=0 RDMAV_FORK_SAFE=1 FORK_SAFE_ONLY=1 $(BUILD)/test/test_verbs"
# MRCACHE_EXPAND on, off (the control: every piece its own registration), and with the
# monitor off, where the remapped pieces of an expanded range must come out stale.
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_EXPAND=1M EXPAND=on $(BUILD)/test/test_expand"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off EXPAND=off $(BUILD)/test/test_expand"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_EXPAND=1M MRCACHE_MONITOR=none MRCACHE_LARGE=1/1 EXPECT_STALE=1 $(BUILD)/test/test_expand 2>/dev/null"
# Pinned memory that comes back: after MRCACHE_IDLE_TIMEOUT, and for registrations past
# MRCACHE_LARGE at their release; each beside a control in which it stays.
TEST_BINS += $(BUILD)/test/test_pinned_back
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_IDLE_TIMEOUT=1s $(BUILD)/test/test_pinned_back idle"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_IDLE_TIMEOUT=0 $(BUILD)/test/test_pinned_back kept"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MAX_BYTES=8M $(BUILD)/test/test_pinned_back large"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_MAX_BYTES=8M MRCACHE_LARGE=1/1 $(BUILD)/test/test_pinned_back large-kept"

$(BUILD)/test/libmrc_testplugin.so: test/preload/plugin.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) $(SNIC_LINK)

$(BUILD)/test/plugin_host: test/preload/plugin_host.c test/lib/check.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) -ldl

$(BUILD)/test/memlock: test/preload/memlock.c test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK)

TEST_BINS += $(BUILD)/test/libmrc_testplugin.so $(BUILD)/test/plugin_host $(BUILD)/test/memlock
TEST_CMDS += "test/preload/test_process.sh $(BUILD) '$(PRELOAD_PREFIX)'"

$(BUILD)/test/warn_workload: test/preload/warn_workload.c test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

TEST_BINS += $(BUILD)/test/warn_workload
TEST_CMDS += "test/preload/test_warnings.sh $(BUILD) '$(PRELOAD_PREFIX)'"
# MRCACHE_ODP against every ODP capability the software NIC can report.
TEST_BINS += $(BUILD)/test/test_odp
TEST_CMDS += "test/preload/test_odp.sh $(BUILD) '$(PRELOAD_PREFIX)'"
# The program's MRs that outlive their memory: reported, counted, never changed; also
# where remote-access registrations are their caller's alone.
TEST_BINS += $(BUILD)/test/test_inuse
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off $(BUILD)/test/test_inuse"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_REMOTE=never REMOTE=1 $(BUILD)/test/test_inuse"
# MRCACHE_AUDIT over the software NIC's loopback QPs, and its control with audit off.
TEST_BINS += $(BUILD)/test/test_audit
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off MRCACHE_AUDIT=warn $(BUILD)/test/test_audit"
TEST_CMDS += "$(PRELOAD) MRCACHE_STATS=off AUDIT_OFF=1 $(BUILD)/test/test_audit"
