# parts.mk - `make bench`'s benchmarks of one part each (reported, never asserted): the
# cache core's hit and miss cost (cache-bench), the userfaultfd source's costs with and
# without it (uffd-bench), a verified hit (verify-bench), a process that never registers
# (idle-bench).
BENCH_PRELOAD := LD_LIBRARY_PATH=$(SNIC_DIR) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_STATS=off

$(BUILD)/test/bench_cache: test/bench/bench_cache.c $(CORE_OBJS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) -Isrc -o $@ $< $(CORE_OBJS) $(LDFLAGS) -lpthread
cache-bench: $(BUILD)/test/bench_cache
	$(BUILD)/test/bench_cache
bench: cache-bench
.PHONY: cache-bench

$(BUILD)/test/bench_uffd: test/bench/bench_uffd.c $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Iinclude $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
uffd-bench: $(LIB) $(BUILD)/test/bench_uffd
	@echo "-- kernel alone"; $(BUILD)/test/bench_uffd kernel
	@for m in patch,preload patch,preload,uffd; do echo "-- MRCACHE_MONITOR=$$m"; \
	    $(BENCH_PRELOAD) MRCACHE_MONITOR=$$m MRCACHE_MAX_ENTRIES=16 $(BUILD)/test/bench_uffd verbs; \
	    $(BENCH_PRELOAD) MRCACHE_MONITOR=$$m $(BUILD)/test/bench_uffd munmap; done
	@echo "-- the descriptor hooks: without, then with the preload"; $(BUILD)/test/bench_uffd hooks; \
	    $(BENCH_PRELOAD) MRCACHE_MONITOR=patch,preload,uffd $(BUILD)/test/bench_uffd hooks
bench: uffd-bench
.PHONY: uffd-bench

$(BUILD)/test/bench_verify: test/bench/bench_verify.c test/lib/common.h test/lib/rdma_loop.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
verify-bench: $(LIB) $(BUILD)/test/bench_verify
	@for v in 0 1; do $(BENCH_PRELOAD) MRCACHE_VERIFY=$$v $(BUILD)/test/bench_verify; done
.PHONY: verify-bench

# What a process that never loads libibverbs pays for the preload (test/bench/idle.sh).
idle-bench: $(LIB)
	@test/bench/idle.sh $(abspath $(LIB))
bench: idle-bench
.PHONY: idle-bench

# What MRCACHE_AUDIT=warn costs a post (bench_audit over the software NIC's loopback QPs):
# five alternated pairs of processes, off then warn, each the median of its rounds.
$(BUILD)/test/bench_audit: test/bench/bench_audit.c test/lib/common.h test/lib/rdma_loop.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,LD,$@)$(CC) $(CFLAGS) $(SNIC_CFLAGS) -Itest/lib $< -o $@ $(LDFLAGS) $(SNIC_LINK) -ldl -lpthread
audit-bench: $(LIB) $(BUILD)/test/bench_audit
	@for i in 1 2 3 4 5; do \
	    $(BENCH_PRELOAD) $(BUILD)/test/bench_audit | sed 's/^/off /'; \
	    $(BENCH_PRELOAD) MRCACHE_AUDIT=warn $(BUILD)/test/bench_audit | sed 's/^/warn /'; \
	done | awk '{ r[$$1] = r[$$1] " " $$3; w[$$1] = w[$$1] " " $$5; print "audit:", $$0 } \
	    function med(l,  v, n, i, j, t) { n = split(l, v, " "); \
	        for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t } \
	        return v[int((n + 1) / 2)] } \
	    END { printf "audit: medians of 5 alternated pairs: ibv_post_recv %d ns off, %d ns warn (+%d ns); 64 B WRITE %d ns off, %d ns warn\n", \
	        med(r["off"]), med(r["warn"]), med(r["warn"]) - med(r["off"]), med(w["off"]), med(w["warn"]) }'
bench: audit-bench
.PHONY: audit-bench
