# api.mk - the public header from outside, by test_api.sh: strict header compiles, a
# configured stats file (with test/preload/api.mk's test_api), `make install` (and the
# installed mrcache) and `make uninstall`.
TEST_CMDS += "test/package/test_api.sh $(BUILD) '$(PRELOAD_PREFIX)'"
