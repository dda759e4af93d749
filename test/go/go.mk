# go.mk - a cgo program registering Go heap memory (test/go/goheap.go): the Go runtime
# discards its heap with raw madvise calls, so libmrcache must add the userfaultfd
# source by itself. Runs: preloaded with the default sources, with sources that leave
# the userfaultfd out (EXPECT_STALE=1: the check can fail), and without the preload.
# Built with Debian's golang-go (scripts/install-deps.sh), in the plain build only (a
# sanitizer's runtime does not follow cgo's threads); without go the test says SKIP.
GO := $(shell command -v go 2>/dev/null)
GO_BIN := $(BUILD)/test/goheap
GO_ENV := GOCACHE=$(abspath $(BUILD))/gocache GOPATH=$(abspath $(BUILD))/gopath GOFLAGS=-buildvcs=false \
    CC="$(CC)" CGO_CFLAGS="-O2 -Wno-error" CGO_LDFLAGS="-L$(abspath $(SNIC_DIR)) -libverbs"
GO_RUN := LD_LIBRARY_PATH=$(SNIC_DIR) MRCACHE_STATS=off

ifeq ($(SANFLAGS),)
ifneq ($(GO),)
$(GO_BIN): test/go/goheap.go test/lib/common.h test/lib/check.h $(SNIC_DEPS)
	@mkdir -p $(@D)
	$(call say,GO,$@)$(GO_ENV) $(GO) build -o $@ $< 2>$@.log || { cat $@.log >&2; exit 1; }
TEST_BINS += $(GO_BIN)
TEST_CMDS += "$(GO_RUN) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) $(GO_BIN)" \
    "$(GO_RUN) LD_PRELOAD=$(PRELOAD_PREFIX)$(abspath $(LIB)) MRCACHE_MONITOR=patch,preload EXPECT_STALE=1 $(GO_BIN) 2>/dev/null" \
    "$(GO_RUN) $(GO_BIN)"
else
TEST_CMDS += "echo 'ok - test_go_heap_discarded_and_reused \# SKIP go is not installed (golang-go: scripts/install-deps.sh)'"
endif
endif
