# bench.mk - `make bench`: the same workloads through (a) no cache, (b) libmrcache
# preloaded and (c) UCX's rcache, alternated by test/bench/run-bench.sh; the table goes to
# stdout, $(BUILD)/bench/results.json and results.md. Not part of `make test`. UCX's
# headers are checked (and installed) by the bench-deps step before anything is built.
# `make bench-ladder` splits row 6 (see ladder.sh).

BENCH_DIR  := $(BUILD)/bench
BENCH_BINS := $(BENCH_DIR)/bench_verbs $(BENCH_DIR)/bench_ucx $(BENCH_DIR)/bench_report
# Expanded when the recipe runs, after bench-deps has installed libucx-dev.
BENCH_UCX_CFLAGS = $(shell pkg-config --cflags ucx-ucs 2>/dev/null)
BENCH_UCX_LIBS   = $(shell pkg-config --libs ucx-ucs 2>/dev/null || echo -lucs -lucm)

.PHONY: bench-deps bench-compare bench-ladder
bench-deps:
	@scripts/install-deps.sh --bench

# The verbs binary reads the NIC's view of its large registrations with the back-end's
# page scan (row 10).
$(BENCH_DIR)/bench_verbs: test/bench/bench.c test/bench/sys_verbs.h include/mrcache.h test/snic/snic.h \
                          test/lib/mrc_counter.h src/backend/pagescan.c src/backend/pagescan.h src/util/sys.c \
                          $(SNIC_DEPS) | bench-deps
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Iinclude -Isrc -Itest/lib -DBENCH_UCX=0 $< src/backend/pagescan.c \
	    src/util/sys.c -o $@ \
	    $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread

$(BENCH_DIR)/bench_ucx: test/bench/bench.c test/bench/sys_ucx.h test/snic/snic.h $(SNIC_DEPS) | bench-deps
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) $(BENCH_UCX_CFLAGS) -DBENCH_UCX=1 $< -o $@ $(LDFLAGS) $(SNIC_LINK) \
	    $(BENCH_UCX_LIBS) -lpthread

$(BENCH_DIR)/bench_report: test/bench/bench_report.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $< -o $@ $(LDFLAGS) -lm

bench-compare: $(LIB) $(SNIC_DEPS) $(BENCH_BINS)
	test/bench/run-bench.sh $(BUILD)
bench: bench-compare

# Row 6's ladder: the miss workload through libmrcache built with ever less of its miss
# path (test/bench/ladder.patch), beside UCX. Separate from `make bench`: it builds six
# libraries in a scratch worktree.
TEST_CMDS += "test/bench/ladder.sh --check"
bench-ladder: $(SNIC_DEPS) $(BENCH_DIR)/bench_verbs $(BENCH_DIR)/bench_ucx
	test/bench/ladder.sh $(BUILD)
