# Makefile - builds build/libmrcache.so, the software NIC (a stand-in libibverbs.so.1)
# and the tests. Targets: all, test, check (ASan/UBSan), tsan, bench, vm-test, install,
# clean. Test fragments live beside their tests (test/*/*.mk) and append to TEST_CMDS.

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
SAN     ?=
CC      ?= cc

WARN     := -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes -Wformat=2 \
            -Wstrict-prototypes -Wpointer-arith -Wcast-qual -Wundef -Wvla
BASEFLAGS := -std=gnu11 -O2 -g $(WARN) -fPIC -D_GNU_SOURCE
ifeq ($(SAN),address)
SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
# Preloaded sanitized code needs the sanitizer runtime loaded first.
PRELOAD_PREFIX := $(shell $(CC) -print-file-name=libasan.so):
TEST_ENV := ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
else ifeq ($(SAN),thread)
SANFLAGS := -fsanitize=thread -fno-omit-frame-pointer
PRELOAD_PREFIX := $(shell $(CC) -print-file-name=libtsan.so):
TEST_ENV := TSAN_OPTIONS=halt_on_error=1
else
SANFLAGS :=
PRELOAD_PREFIX :=
TEST_ENV :=
endif
CFLAGS   ?=
CFLAGS   += $(BASEFLAGS) $(SANFLAGS)
LDFLAGS  += $(SANFLAGS) -Wl,--no-undefined -Wl,-z,now

# The dependency check is a stamp, so a fresh machine installs packages once, and
# only when a header is missing.
DEPS_STAMP := $(BUILD)/.deps-ok
DEP_HEADERS := /usr/include/infiniband/verbs.h /usr/include/uthash.h \
               /usr/include/liburing.h /usr/include/x86_64-linux-gnu/libunwind.h

LIB      := $(BUILD)/libmrcache.so
# The version is the public header's (include/mrcache.h, "ABI"): the soname carries its
# major number, bumped only if an exported symbol is ever removed; the file both numbers.
MRC_MAJOR  := $(shell awk '$$2 == "MRCACHE_VERSION_MAJOR" {print $$3}' include/mrcache.h)
MRC_MINOR  := $(shell awk '$$2 == "MRCACHE_VERSION_MINOR" {print $$3}' include/mrcache.h)
MRC_SONAME := libmrcache.so.$(MRC_MAJOR)
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
LIB_SRCS := $(sort $(wildcard src/*/*.c))
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
# The cache core and what it uses: linked into unit tests with no verbs and no hooks.
CORE_SRCS := $(sort $(wildcard src/core/*.c)) src/util/clock.c src/util/log.c src/util/pool.c src/util/stats.c
CORE_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(CORE_SRCS))

TEST_BINS :=
TEST_CMDS :=

.PHONY: all test check tsan tsan-run bench vm-test install clean deps
all: $(LIB)

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@for h in $(DEP_HEADERS); do [ -f $$h ] || { scripts/install-deps.sh || exit 1; break; }; done
	@mkdir -p $(@D) && touch $@

$(BUILD)/obj/%.o: src/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -fvisibility=hidden -ftls-model=initial-exec -Isrc -Iinclude -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	$(CC) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,$(MRC_SONAME) -ldl -lpthread

# The software NIC's fragment first: the others use its variables.
include test/snic/snic.mk
include $(filter-out test/snic/snic.mk,$(sort $(wildcard test/*/*.mk)))

test: all $(TEST_BINS)
	@scripts/run-tests.sh $(foreach e,$(TEST_ENV),-e $(e)) -- $(TEST_CMDS)

check:
	$(MAKE) BUILD=build-asan SAN=address test

# Threads under ThreadSanitizer: the unit suites (cache stress, tree, the monitors'
# registry read without a lock), which run the concurrency directly; the preload under
# TSan would report glibc itself.
TSAN_CMDS := $(BUILD)/test/test_cache $(BUILD)/test/test_itree $(BUILD)/test/test_monitor
tsan:
	$(MAKE) BUILD=build-tsan SAN=thread tsan-run
tsan-run: $(TSAN_CMDS)
	@scripts/run-tests.sh $(foreach e,$(TEST_ENV),-e $(e)) -- $(TSAN_CMDS)

# libmrcache.so.MAJOR.MINOR, the soname link (what LD_PRELOAD names), the dev link; the
# header and mrcache.pc (a header-only binding: `pkg-config --cflags --libs mrcache`).
install: $(LIB)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(LIB) $(DESTDIR)$(LIBDIR)/$(MRC_SONAME).$(MRC_MINOR)
	ln -sf $(MRC_SONAME).$(MRC_MINOR) $(DESTDIR)$(LIBDIR)/$(MRC_SONAME)
	ln -sf $(MRC_SONAME) $(DESTDIR)$(LIBDIR)/libmrcache.so
	install -m 0644 include/mrcache.h $(DESTDIR)$(INCLUDEDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@MAJOR@|$(MRC_MAJOR)|g' -e 's|@VERSION@|$(MRC_MAJOR).$(MRC_MINOR)|g' \
	    scripts/mrcache.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/mrcache.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/mrcache.pc

clean:
	rm -rf build build-asan build-tsan

-include $(LIB_OBJS:.o=.d)
