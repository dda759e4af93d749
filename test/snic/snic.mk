# snic.mk - builds the software NIC $(SNIC_LIB), a stand-in libibverbs.so.1 for tests
# (test/snic/snic.h), and its tests. Other fragments build test programs with
# $(SNIC_CFLAGS) ... $(SNIC_LINK), make them depend on $(SNIC_LIB) $(SNIC_DIR)/libibverbs.so,
# and run them with LD_LIBRARY_PATH=$(SNIC_DIR).

SNIC_DIR    := $(BUILD)/snic
SNIC_LIB    := $(SNIC_DIR)/libibverbs.so.1
SNIC_LINK   := -L$(SNIC_DIR) -libverbs
SNIC_CFLAGS := -Itest/snic
SNIC_SRCS   := $(addprefix test/snic/,snic_cq.c snic_device.c snic_fork.c snic_log.c \
                 snic_nic.c snic_odp.c snic_pin.c snic_qp.c snic_qpx.c snic_strs.c \
                 snic_stubs.c snic_verbs.c)
SNIC_OBJS   := $(patsubst test/snic/%.c,$(SNIC_DIR)/obj/%.o,$(SNIC_SRCS))
SNIC_DEPS   := $(SNIC_LIB) $(SNIC_DIR)/libibverbs.so

$(SNIC_DIR)/obj/%.o: test/snic/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) -fvisibility=hidden -MMD -MP -c $< -o $@

# Linked under a temporary name: a library failing the PLT check never looks built.
$(SNIC_LIB): $(SNIC_OBJS) test/snic/snic.map test/snic/check-plt.sh
	$(call say,LD,$@)$(CC) -shared -o $@.tmp $(SNIC_OBJS) $(LDFLAGS) -Wl,-soname,libibverbs.so.1 \
	    -Wl,--version-script=test/snic/snic.map -luring -lpthread
	$(Q)test/snic/check-plt.sh $@.tmp || { rm -f $@.tmp; exit 1; }
	$(Q)mv -f $@.tmp $@

$(SNIC_DIR)/libibverbs.so: $(SNIC_LIB)
	$(Q)ln -sf libibverbs.so.1 $@

# The same NIC as rdma-core before 35 exports it: no ibv_is_fork_initialized, so fork-safe
# mode is whatever RDMAV_FORK_SAFE or IBV_FORK_SAFE asks for. Run with
# LD_LIBRARY_PATH=$(SNIC34_DIR) in place of $(SNIC_DIR).
SNIC34_DIR := $(BUILD)/snic34
$(SNIC34_DIR)/libibverbs.so.1: $(SNIC_OBJS) test/snic/snic.map
	@mkdir -p $(@D)
	$(Q)sed '/ibv_is_fork_initialized;/d' test/snic/snic.map >$(@D)/snic.map
	$(call say,LD,$@)$(CC) -shared -o $@ $(SNIC_OBJS) $(LDFLAGS) -Wl,-soname,libibverbs.so.1 \
	    -Wl,--version-script=$(@D)/snic.map -luring -lpthread

$(BUILD)/test/test_snic: test/snic/test_snic.c test/snic/snic.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) $(SNIC_LINK) -lpthread

$(BUILD)/test/test_snic_odp: test/snic/test_snic_odp.c test/snic/snic.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) $(SNIC_LINK)

# Defines ibv_reg_mr_iova2 itself; exported so the NIC's PLT slot binds to it.
$(BUILD)/test/test_snic_plt: test/snic/test_snic_plt.c test/snic/snic.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) \
	    -Wl,--export-dynamic-symbol=ibv_reg_mr_iova2 $(SNIC_LINK) -ldl

# Linked against the system's libibverbs, run against ours by test_abi.sh.
$(BUILD)/test/snic_linkcheck: test/snic/snic_linkcheck.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -libverbs -ldl

TEST_BINS += $(SNIC_DEPS) $(SNIC34_DIR)/libibverbs.so.1 $(BUILD)/test/test_snic $(BUILD)/test/test_snic_plt \
             $(BUILD)/test/snic_linkcheck $(BUILD)/test/test_snic_odp
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_snic"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_snic_plt"
# On-demand paging: none, explicit only, and implicit with a page fault's cost modelled.
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) $(BUILD)/test/test_snic_odp"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) SNIC_ODP=explicit $(BUILD)/test/test_snic_odp"
TEST_CMDS += "LD_LIBRARY_PATH=$(SNIC_DIR) SNIC_ODP=implicit SNIC_ODP_FAULT_NS=100000 $(BUILD)/test/test_snic_odp"
TEST_CMDS += "test/snic/test_abi.sh $(SNIC_DIR) $(BUILD)/test/snic_linkcheck '$(PRELOAD_PREFIX)'"

-include $(SNIC_OBJS:.o=.d)
