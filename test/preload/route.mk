# route.mk - where the PLT calls of free go (src/runtime/route.c): past libmrcache
# while the allocator hooks idle, in a program linked with -z now, one linked lazily, and
# a library linked lazily; left alone where another free comes first (a preload's, the
# program's own); back through libmrcache when a late patch makes the hooks resume (the
# data of a free that unmaps registered memory must be fresh), and caching stopped when
# a slot cannot be written back (or another library rebound it); not while a thread
# runs at start-up; through mprotect when pwrite is refused. Run by test_route.sh.
ROUTE_T    := $(BUILD)/test
ROUTE_LIBS := $(ROUTE_T)/libmrc_lazyfree.so $(ROUTE_T)/libmrc_ownfree.so $(ROUTE_T)/libmrc_early.so
ROUTE_PROGS := $(ROUTE_T)/test_route $(ROUTE_T)/test_route_lazy $(ROUTE_T)/test_route_ownfree
ROUTE_SRC_DEPS := test/preload/test_route.c test/preload/ownfree.c test/preload/deny.h test/lib/common.h test/preload/stale.h \
                  test/lib/check.h $(SNIC_DEPS) $(ROUTE_T)/libmrc_lazyfree.so
ROUTE_LINK = $(LDFLAGS) $(SNIC_LINK) -L$(ROUTE_T) -lmrc_lazyfree -Wl,-rpath,'$$ORIGIN' -ldl -lpthread

$(ROUTE_T)/libmrc_lazyfree.so: test/preload/lazyfree.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -Wl,-z,lazy

$(ROUTE_T)/libmrc_ownfree.so: test/preload/ownfree.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS)

$(ROUTE_T)/libmrc_early.so: test/preload/early.c test/preload/deny.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -shared -fvisibility=hidden $< -o $@ $(LDFLAGS) -lpthread

$(ROUTE_T)/test_route: $(ROUTE_SRC_DEPS)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(ROUTE_LINK)

$(ROUTE_T)/test_route_lazy: $(ROUTE_SRC_DEPS)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload $< -o $@ $(ROUTE_LINK) -Wl,-z,lazy

$(ROUTE_T)/test_route_ownfree: $(ROUTE_SRC_DEPS)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib -Itest/preload -DOWN_FREE $< -o $@ $(ROUTE_LINK)

TEST_BINS += $(ROUTE_LIBS) $(ROUTE_PROGS)
TEST_CMDS += "test/preload/test_route.sh $(BUILD) '$(PRELOAD_PREFIX)'"
