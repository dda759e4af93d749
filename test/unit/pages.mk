# pages.mk - huge-page advice, collapse, parallel population and the NIC's page-size
# statistics on this process's own memory (test_pages.c), linked with the back-end's
# preparation objects, the runtime's description of memory and the monitors it asks: no
# NIC, no cache, no preload.
PAGES_UNIT_OBJS := $(addprefix $(BUILD)/obj/,backend/pagescan.o backend/prepare.o backend/populate.o backend/nicview.o runtime/describe.o \
                     monitor/unmap.o monitor/maps.o monitor/files.o monitor/glibc_heap.o util/procmaps.o util/real.o \
                     util/log.o util/stats.o util/clock.o util/sys.o)
$(BUILD)/test/test_pages: test/unit/test_pages.c test/lib/check.h $(PAGES_UNIT_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -Itest/lib -o $@ $< $(PAGES_UNIT_OBJS) $(LDFLAGS) -ldl -lpthread
TEST_BINS += $(BUILD)/test/test_pages
TEST_CMDS += $(BUILD)/test/test_pages
