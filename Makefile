# Makefile - builds build/libmrcache.so, the software NIC (a stand-in libibverbs.so.1)
# and the tests; installs the library, its header, pkg-config file, commands and manual
# pages. `make help` lists the targets. Test fragments live beside their tests
# (test/*/*.mk) and append to TEST_CMDS. Quiet by default; V=1 prints every command.

BUILD   ?= build
PREFIX  ?= /usr/local
DESTDIR ?=
LIBDIR  ?= $(PREFIX)/lib
SAN     ?=
CC      ?= cc
V       ?= 0

# The flags the build needs are kept whatever the user passes: CFLAGS and LDFLAGS from
# the command line or the environment are the user's part (default -O2 -g), placed after
# ours so that their -O level wins, and never replace -std, -D_GNU_SOURCE, -fPIC or the
# warnings. Sub-makes get the user's part only (SUBMAKE_FLAGS).
WARN     := -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes -Wformat=2 \
            -Wstrict-prototypes -Wpointer-arith -Wcast-qual -Wundef -Wvla
BASEFLAGS := -std=gnu11 $(WARN) -fPIC -D_GNU_SOURCE
CFLAGS   ?= -O2 -g
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
USER_CFLAGS  := $(CFLAGS)
USER_LDFLAGS := $(LDFLAGS)
override CFLAGS  := $(BASEFLAGS) $(USER_CFLAGS) $(SANFLAGS)
override LDFLAGS := $(USER_LDFLAGS) $(SANFLAGS) -Wl,--no-undefined -Wl,-z,now
unexport CFLAGS LDFLAGS
SUBMAKE_FLAGS := --no-print-directory CFLAGS="$(USER_CFLAGS)" LDFLAGS="$(USER_LDFLAGS)"

# Quiet output: one short line per step ("  CC      build/obj/core/cache.o"); V=1 shows
# the commands instead; make -s prints neither. Recipes start with $(call say,TAG,TARGET)
# or $(Q).
ifeq ($(V),1)
Q   :=
say  =
else ifneq ($(findstring s,$(firstword -$(MAKEFLAGS))),)
Q   := @
say  = @
else
Q   := @
say  = @printf '  %-7s %s\n' '$(1)' '$(2)';
endif
# make test V=1: every test's whole output on the terminal, not only in $(BUILD)/test-logs.
TEST_V := $(if $(filter 1,$(V)),-v)

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
CORE_SRCS := $(sort $(wildcard src/core/*.c)) src/util/clock.c src/util/log.c src/util/pool.c src/util/stats.c \
             src/util/sys.c
CORE_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(CORE_SRCS))

TEST_BINS :=
TEST_CMDS :=

.PHONY: all test check tsan tsan-run bench vm-test man install uninstall help clean deps
all: $(LIB)

deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@for h in $(DEP_HEADERS); do [ -f $$h ] || { scripts/install-deps.sh || exit 1; break; }; done
	@mkdir -p $(@D) && touch $@

$(BUILD)/obj/%.o: src/%.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	$(call say,CC,$@)$(CC) $(CFLAGS) -fvisibility=hidden -ftls-model=initial-exec -Isrc -Iinclude -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJS)
	$(call say,LD,$@)$(CC) -shared -o $@ $^ $(LDFLAGS) -Wl,-soname,$(MRC_SONAME) -Wl,-e,mrc_main -ldl -lpthread

# The software NIC's fragment first: the others use its variables.
include test/snic/snic.mk
include $(filter-out test/snic/snic.mk,$(sort $(wildcard test/*/*.mk)))

test: all $(TEST_BINS)
	@scripts/run-tests.sh $(TEST_V) -l $(BUILD)/test-logs $(foreach e,$(TEST_ENV),-e $(e)) -- $(TEST_CMDS)

check:
	$(Q)$(MAKE) $(SUBMAKE_FLAGS) BUILD=build-asan SAN=address test

# Threads under ThreadSanitizer: the unit suites (cache stress, tree, the monitors'
# registry read without a lock), which run the concurrency directly; the preload under
# TSan would report glibc itself.
TSAN_CMDS := $(BUILD)/test/test_cache $(BUILD)/test/test_itree $(BUILD)/test/test_monitor
tsan:
	$(Q)$(MAKE) $(SUBMAKE_FLAGS) BUILD=build-tsan SAN=thread tsan-run
tsan-run: $(TSAN_CMDS)
	@scripts/run-tests.sh $(TEST_V) -l $(BUILD)/test-logs $(foreach e,$(TEST_ENV),-e $(e)) -- $(TSAN_CMDS)

# Where `make install` puts things (DESTDIR is prepended to each, for staged installs).
BINDIR      ?= $(PREFIX)/bin
DATAROOTDIR ?= $(PREFIX)/share
MANDIR      ?= $(DATAROOTDIR)/man
DOCDIR      ?= $(DATAROOTDIR)/doc/libmrcache
MRC_VERSION := $(MRC_MAJOR).$(MRC_MINOR)
# mrcache finds the library relative to its own directory, so a staged or moved tree works.
LIBDIR_REL   = $(shell realpath -ms --relative-to=$(BINDIR) $(LIBDIR))

# Manual pages: man/*.[137] with the version filled in, under $(BUILD)/man; the public
# calls each get a page that includes mrcache(3), so `man mrcache_flush` finds it.
MAN_SRCS  := man/libmrcache.7 man/mrcache.1 man/mrcache-report.1 man/mrcache.3
MAN_BUILT := $(patsubst man/%,$(BUILD)/man/%,$(MAN_SRCS))
MAN3_CALLS := mrcache_version mrcache_monitors mrcache_invalidate mrcache_flush \
              mrcache_stats_read mrcache_stats_dump
man: $(MAN_BUILT)
$(BUILD)/man/%: man/% include/mrcache.h
	@mkdir -p $(@D)
	$(call say,GEN,$@)sed -e 's|@VERSION@|$(MRC_VERSION)|g' $< >$@

# Every path `make install` creates (its directories aside); `make uninstall` removes
# exactly these.
INSTALLED := $(LIBDIR)/$(MRC_SONAME).$(MRC_MINOR) $(LIBDIR)/$(MRC_SONAME) $(LIBDIR)/libmrcache.so \
             $(INCLUDEDIR)/mrcache.h $(PKGCONFIGDIR)/mrcache.pc \
             $(BINDIR)/mrcache $(BINDIR)/mrcache-report \
             $(MANDIR)/man1/mrcache.1 $(MANDIR)/man1/mrcache-report.1 $(MANDIR)/man7/libmrcache.7 \
             $(MANDIR)/man3/mrcache.3 $(foreach c,$(MAN3_CALLS),$(MANDIR)/man3/$(c).3) \
             $(DOCDIR)/LICENSE
# ldconfig only for the live system: nothing staged in a DESTDIR, and as root.
LDCONFIG = if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" -eq 0 ]; then $(if $(Q),echo '  LDCONFIG';) ldconfig; fi

# The library as libmrcache.so.MAJOR.MINOR with the soname link (what LD_PRELOAD names)
# and the dev link; the header and mrcache.pc (a header-only binding: `pkg-config
# --cflags --libs mrcache`); the mrcache and mrcache-report commands; the manual pages.
# The directories install makes; uninstall removes those it leaves empty, except under
# the system's own prefixes (/usr, /usr/local), whose directories other packages share.
INSTALL_DIRS := $(LIBDIR) $(INCLUDEDIR) $(PKGCONFIGDIR) $(BINDIR) $(addprefix $(MANDIR)/man,1 3 7) $(DOCDIR)
SYSTEM_PREFIX := $(if $(DESTDIR),,$(filter /usr /usr/local,$(PREFIX)))

install: $(LIB) $(MAN_BUILT)
	@d=$(DESTDIR)$(PREFIX); while [ ! -e "$$d" ]; do d=$$(dirname "$$d"); done; [ -w "$$d" ] || { \
	    echo "make install: $$d is not writable by $$(id -un): run it as root, or give PREFIX=\$$HOME/.local" \
	        "(or DESTDIR=DIR to stage it)" >&2; exit 1; }
	$(Q)install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(BINDIR) \
	    $(addprefix $(DESTDIR)$(MANDIR)/man,1 3 7) $(DESTDIR)$(DOCDIR)
	$(call say,INSTALL,$(DESTDIR)$(LIBDIR)/$(MRC_SONAME).$(MRC_MINOR))install -m 0755 $(LIB) $(DESTDIR)$(LIBDIR)/$(MRC_SONAME).$(MRC_MINOR)
	$(Q)ln -sf $(MRC_SONAME).$(MRC_MINOR) $(DESTDIR)$(LIBDIR)/$(MRC_SONAME)
	$(Q)ln -sf $(MRC_SONAME) $(DESTDIR)$(LIBDIR)/libmrcache.so
	$(call say,INSTALL,$(DESTDIR)$(INCLUDEDIR)/mrcache.h)install -m 0644 include/mrcache.h $(DESTDIR)$(INCLUDEDIR)/
	$(call say,INSTALL,$(DESTDIR)$(PKGCONFIGDIR)/mrcache.pc)sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@MAJOR@|$(MRC_MAJOR)|g' -e 's|@VERSION@|$(MRC_VERSION)|g' \
	    -e '/^#/d' scripts/mrcache.pc.in >$(DESTDIR)$(PKGCONFIGDIR)/mrcache.pc
	$(Q)chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/mrcache.pc
	$(call say,INSTALL,$(DESTDIR)$(BINDIR)/mrcache)sed -e "s|@LIBDIR_REL@|$(LIBDIR_REL)|" -e 's|@MAJOR@|$(MRC_MAJOR)|' \
	    -e 's|@VERSION@|$(MRC_VERSION)|' scripts/mrcache >$(DESTDIR)$(BINDIR)/mrcache
	$(Q)chmod 0755 $(DESTDIR)$(BINDIR)/mrcache
	$(call say,INSTALL,$(DESTDIR)$(BINDIR)/mrcache-report)sed -e 's|@VERSION@|$(MRC_VERSION)|' scripts/mrcache-report \
	    >$(DESTDIR)$(BINDIR)/mrcache-report
	$(Q)chmod 0755 $(DESTDIR)$(BINDIR)/mrcache-report
	$(call say,INSTALL,$(DESTDIR)$(MANDIR)/man[137])install -m 0644 $(BUILD)/man/mrcache.1 $(BUILD)/man/mrcache-report.1 \
	    $(DESTDIR)$(MANDIR)/man1/
	$(Q)install -m 0644 $(BUILD)/man/mrcache.3 $(DESTDIR)$(MANDIR)/man3/
	$(Q)for c in $(MAN3_CALLS); do echo '.so man3/mrcache.3' >$(DESTDIR)$(MANDIR)/man3/$$c.3 || exit 1; \
	    chmod 0644 $(DESTDIR)$(MANDIR)/man3/$$c.3; done
	$(Q)install -m 0644 $(BUILD)/man/libmrcache.7 $(DESTDIR)$(MANDIR)/man7/
	$(call say,INSTALL,$(DESTDIR)$(DOCDIR)/LICENSE)install -m 0644 LICENSE $(DESTDIR)$(DOCDIR)/
	$(Q)$(LDCONFIG)

# The files, then the directories they leave empty, up to the prefix (under /usr and
# /usr/local only libmrcache's own doc directory: the others are shared).
uninstall:
	$(call say,RM,$(words $(INSTALLED)) files under $(DESTDIR)$(PREFIX))rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	$(Q)rmdir $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	$(Q)$(if $(SYSTEM_PREFIX),:,for d in $(addprefix $(DESTDIR),$(INSTALL_DIRS)); do \
	    while [ "$$d" != "$(DESTDIR)$(PREFIX)" ] && [ "$${d#$(DESTDIR)$(PREFIX)/}" != "$$d" ]; do \
	        if [ -d "$$d" ]; then rmdir "$$d" 2>/dev/null || break; fi; d=$$(dirname "$$d"); done; done; \
	    rmdir "$(DESTDIR)$(PREFIX)" 2>/dev/null || true)
	$(Q)$(LDCONFIG)

# One write, so that `make help | head` never meets a closed pipe midway.
help:
	@printf '%s\n' \
	    'Targets (V=1 prints full command lines; BUILD=DIR builds elsewhere; CC=, CFLAGS=,' \
	    'LDFLAGS= add to the flags the build needs):' \
	    '  all (default)  build $(LIB)' \
	    '  test           build and run the tests ("N passed, N failed"; each test'"'"'s output in' \
	    '                 $(BUILD)/test-logs/, shown on the terminal when it fails)' \
	    '  check          the tests under ASan and UBSan (in build-asan/)' \
	    '  tsan           the cache core'"'"'s threaded tests under ThreadSanitizer (build-tsan/)' \
	    '  layers         the layer check (part of test): includes, system calls, PLT calls' \
	    '  demo           a program that registers every message, without and with the cache' \
	    '  bench          benchmarks against UCX'"'"'s rcache and no cache (not part of test)' \
	    '  bench-compare  bench'"'"'s table alone (no cache, libmrcache, UCX), without its parts' \
	    '  bench-deps     install UCX'"'"'s headers for bench (scripts/install-deps.sh --bench)' \
	    '  bench-ladder   the miss workload with ever less of the miss path, beside UCX' \
	    '  cache-bench, itree-bench, uffd-bench, idle-bench, audit-bench, verify-bench' \
	    '                 one part each (bench runs all but verify-bench)' \
	    '  vm-test        the Soft-RoCE tests in a qemu VM' \
	    '  vm-progs       build the VM'"'"'s test programs only, without the VM' \
	    '  man            the manual pages, with the version filled in, in $(BUILD)/man/' \
	    '  install        library, header, mrcache.pc, mrcache, mrcache-report, manual pages' \
	    '                 (PREFIX=$(PREFIX) DESTDIR=; also LIBDIR, BINDIR, INCLUDEDIR, MANDIR)' \
	    '  uninstall      remove exactly what install installed (same PREFIX and DESTDIR)' \
	    '  deps           install the Debian packages the build needs (scripts/install-deps.sh)' \
	    '  clean          remove build/, build-asan/, build-tsan/'

clean:
	rm -rf build build-asan build-tsan

-include $(LIB_OBJS:.o=.d)
