# test/vm/vm.mk - `make vm-test`: the Soft-RoCE (rdma_rxe) tests in a qemu VM.
# Builds the guest test programs against the host's real libibverbs, then the VM (kernel +
# initramfs from Debian packages, cached in $(VM_DIR)) and boots it; the guest's TAP lines
# are counted by scripts/run-tests.sh. Not part of TEST_CMDS: CI runs it as its own target.

VM_DIR     ?= $(BUILD)/vm
# The second kernel every group also runs on: Debian unstable's, whose rxe has on-demand
# paging (its image and modules from that suite, Debian 12's userspace). Pinned here; if
# the suite has moved on, vm-build.sh takes the newest 7.x and says which. VM_KERNELS=1
# runs Debian 12's alone.
VM_KERNEL_UNSTABLE ?= 7.2.13+deb14
VM_KERNELS ?= 2
VM_TIMEOUT ?= 600
VM_TESTS   ?= all
VM_BIN     := $(BUILD)/test/vm
VM_PROGS   := $(VM_BIN)/vm_stale_mr $(VM_BIN)/vm_regcost $(VM_BIN)/vm_e2e $(VM_BIN)/vm_prep $(VM_BIN)/vm_mpi \
              $(VM_BIN)/vm_odpcost
# mpicc and the Open MPI runtime come from scripts/install-deps.sh --vm.
VM_DEPS_STAMP := $(BUILD)/.vm-deps-ok
# The test/preload/ programs built against the system libibverbs: with no software NIC
# to find, test/lib/common.h writes through a loopback RDMA WRITE on the device.
VM_PBIN    := $(VM_BIN)/preload
# Runs of project programs the guest makes under the preload against rxe, each
# PROGRAM[:VAR=VALUE,...]; the monitor-off run must see every write land in stale pages,
# and with the userfaultfd source (Debian's 6.1 kernel) raw system calls must be seen.
# test_route: free's PLT slots routed past libmrcache, and back after a late patch of
# munmap (the free of registered memory must stay fresh, stale without the allocator
# hooks), caching stopped when seccomp refuses the write-back: on Debian's own kernel.
# test_handle_verbs: the MR verbs from a library handle (NCCL's route) on rxe's provider.
VM_LATE := LATE_PATCH=libmrc_fakepatch.so,FAKEPATCH_FN=munmap,FAKEPATCH_FORM=nop
VM_PRELOAD_TESTS ?= $(VM_PBIN)/test_unmap_paths \
                    $(VM_PBIN)/test_unmap_paths:MRCACHE_MONITOR=patch+preload+uffd \
                    $(VM_PBIN)/test_unmap_paths:MRCACHE_MONITOR=none,EXPECT_STALE=1 \
                    $(VM_PBIN)/test_verbs \
                    $(VM_PBIN)/test_inuse \
                    $(VM_PBIN)/test_audit:MRCACHE_AUDIT=warn \
                    $(VM_PBIN)/test_wild_advice \
                    $(VM_PBIN)/test_odp_real \
                    $(VM_PBIN)/test_odp_real:MRCACHE_ODP=fallback \
                    $(VM_PBIN)/test_odp_real:MRCACHE_ODP=implicit \
                    $(VM_PBIN)/test_handle_verbs \
                    $(VM_PBIN)/test_handle_verbs:MRCACHE_MONITOR=patch+preload+uffd \
                    $(VM_PBIN)/test_route:EXPECT_ROUTE=1 \
                    $(VM_PBIN)/test_route:EXPECT_ROUTE=1,$(VM_LATE) \
                    $(VM_PBIN)/test_route:EXPECT_ROUTE=1,$(VM_LATE),MRCACHE_MALLOC_HOOKS=0,MALLOC_HOOKS_OFF=1,EXPECT_STALE=1 \
                    $(VM_PBIN)/test_route:EXPECT_ROUTE=1,$(VM_LATE),REFUSE=1,EXPECT_OFF=1
# Libraries those programs load, copied beside them: the host tests' own (route.mk,
# monitor.mk), which link nothing but libc.
VM_PRELOAD_FILES := $(BUILD)/test/libmrc_lazyfree.so $(BUILD)/test/libmrc_fakepatch.so
VM_PRELOAD_PROGS := $(sort $(foreach r,$(VM_PRELOAD_TESTS),$(firstword $(subst :, ,$(r)))))

$(VM_BIN)/%: test/vm/%.c test/vm/vm_verbs.h test/lib/rdma_loop.h test/lib/check.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest/lib -Itest/vm -Itest/preload -o $@ $< $(LDFLAGS) -libverbs

# snic.h only for its declarations: common.h looks the software NIC's API up at run time,
# and linking against the system libibverbs proves nothing calls it directly.
$(VM_PBIN)/test_%: test/preload/test_%.c test/lib/common.h test/lib/rdma_loop.h \
                   include/mrcache.h test/lib/check.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest/lib -Itest/preload -Itest/snic -o $@ $< $(LDFLAGS) -libverbs -ldl -lpthread

$(VM_PBIN)/test_route: test/preload/test_route.c test/preload/ownfree.c test/preload/deny.h test/lib/common.h test/preload/stale.h \
                       include/mrcache.h test/lib/check.h $(BUILD)/test/libmrc_lazyfree.so | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Itest/lib -Itest/preload -Itest/snic -o $@ $< $(LDFLAGS) -L$(BUILD)/test -lmrc_lazyfree \
	    -Wl,-rpath,'$$ORIGIN' -libverbs -ldl -lpthread

$(VM_DEPS_STAMP):
	@[ -x /usr/bin/mpicc ] || scripts/install-deps.sh --vm
	@mkdir -p $(@D) && touch $@

# An MPI program, built as users build them (mpicc); mrcache.h only for mrcache_monitors().
$(VM_BIN)/vm_mpi: test/vm/vm_mpi.c include/mrcache.h | $(DEPS_STAMP) $(VM_DEPS_STAMP)
	@mkdir -p $(@D)
	mpicc $(CFLAGS) -Iinclude -o $@ $< $(LDFLAGS)

vm-progs: $(VM_PROGS) $(VM_PRELOAD_PROGS) $(VM_PRELOAD_FILES)

VM_BUILD_ARGS = -l $(LIB) $(addprefix -p ,$(VM_PRELOAD_TESTS)) $(addprefix -s ,$(VM_PRELOAD_FILES)) \
    $(VM_PROGS) $(BUILD)/demo/mrc_demo
VM_RUN = "scripts/vm-run.sh -d $(1) -t $(VM_TIMEOUT) -T '$(VM_TESTS)'"

vm-test: $(LIB) $(VM_PROGS) $(VM_PRELOAD_PROGS) $(VM_PRELOAD_FILES) $(BUILD)/demo/mrc_demo
	@echo "vm-test: the VM is built in $(VM_DIR) from Debian packages (scripts/install-deps.sh --vm installs" \
	    "what is missing; the kernel packages are downloaded once), then booted with qemu, on Debian 12's" \
	    "kernel$(if $(filter 2,$(VM_KERNELS)), and on unstable's $(VM_KERNEL_UNSTABLE) ($(VM_DIR)-unstable))"
	scripts/vm-build.sh -o $(VM_DIR) $(VM_BUILD_ARGS)
	$(if $(filter 2,$(VM_KERNELS)),scripts/vm-build.sh -o $(VM_DIR)-unstable -k unstable:$(VM_KERNEL_UNSTABLE) $(VM_BUILD_ARGS))
	@scripts/run-tests.sh $(TEST_V) -l $(VM_DIR)/logs -- $(call VM_RUN,$(VM_DIR)) \
	    $(if $(filter 2,$(VM_KERNELS)),$(call VM_RUN,$(VM_DIR)-unstable))

.PHONY: vm-progs
