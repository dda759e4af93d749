# build.mk - the build's own conventions, by test_build.sh: flags the build needs survive
# the user's CFLAGS/LDFLAGS, quiet output (V=1 for commands), `make help`, and the test
# runner keeping a passing test's error output in its log.
TEST_CMDS += "test/package/test_build.sh $(BUILD)"
