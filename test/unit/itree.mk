# itree.mk - builds the interval-tree unit test (tree vs brute-force model) from
# test/unit/test_itree.c and the tree object alone, and registers it with `make test`.
# The full 1e6 random ops run in every build (about 0.3 s plain, 0.4 s ASan, 1 s TSan);
# `make bench` (itree-bench) times insert/remove/lookup at 10k and 1M nodes.

ITREE_TEST := $(BUILD)/test/test_itree

$(ITREE_TEST): test/unit/test_itree.c $(BUILD)/obj/core/itree.o src/core/itree.h test/lib/check.h
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $(filter %.c %.o,$^) $(LDFLAGS)

TEST_BINS += $(ITREE_TEST)
TEST_CMDS += $(ITREE_TEST)

.PHONY: itree-bench
itree-bench: $(ITREE_TEST)
	$(ITREE_TEST) --bench
bench: itree-bench
