# man.mk - the manual pages under test: test_man.sh renders each built page (with groff
# -ww and man -l: no warning allowed), compares libmrcache(7)'s variables with the
# library's MRCACHE_HELP table, and checks the pages against the commands and the header.
TEST_BINS += $(MAN_BUILT)
TEST_CMDS += "test/package/test_man.sh $(BUILD) '$(PRELOAD_PREFIX)'"
