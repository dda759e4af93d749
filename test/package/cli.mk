# cli.mk - the mrcache command run from the source tree (scripts/mrcache), by test_mrcache.sh:
# options to variables, LD_PRELOAD kept and ordered, exec (pid, status, signals), errors
# and their statuses, --config and --version; the library file run as a program
# (test_library_run.sh); the installed copy is tested by test_api.sh.
TEST_CMDS += "test/package/test_mrcache.sh $(BUILD) '$(PRELOAD_PREFIX)'"
TEST_CMDS += "test/package/test_library_run.sh $(BUILD) '$(PRELOAD_PREFIX)'"
