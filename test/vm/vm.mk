# test/vm/vm.mk - `make vm-test`: the Soft-RoCE (rdma_rxe) tests in a qemu VM (issue 9).
# Builds the guest test programs against the host's real libibverbs, then the VM (kernel +
# initramfs from Debian packages, cached in $(VM_DIR)) and boots it; the guest's TAP lines
# are counted by scripts/run-tests.sh. Not part of TEST_CMDS: CI runs it as its own target.

VM_DIR     ?= $(BUILD)/vm
VM_TIMEOUT ?= 600
VM_TESTS   ?= all
VM_BIN     := $(BUILD)/test/vm
VM_PROGS   := $(VM_BIN)/vm_stale_mr $(VM_BIN)/vm_regcost
# Project test programs (e.g. from test/preload/) the guest also runs under the preload
# against rxe; they must use the system libibverbs, not the software NIC.
VM_PRELOAD_TESTS ?=

$(VM_BIN)/%: test/vm/%.c test/vm/vm_verbs.h test/check.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itest -Itest/vm -o $@ $< $(LDFLAGS) -libverbs

vm-progs: $(VM_PROGS)

vm-test: $(LIB) $(VM_PROGS) $(VM_PRELOAD_TESTS)
	scripts/vm-build.sh -o $(VM_DIR) -l $(LIB) $(addprefix -p ,$(VM_PRELOAD_TESTS)) $(VM_PROGS)
	@scripts/run-tests.sh -- "scripts/vm-run.sh -d $(VM_DIR) -t $(VM_TIMEOUT) -T '$(VM_TESTS)'"

.PHONY: vm-progs
