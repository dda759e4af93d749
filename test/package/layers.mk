# layers.mk - `make layers`: no file of src/ includes a header of a layer above its own,
# none but util/sys.c makes a system call, and the library calls none of its own
# interposed functions through its PLT but those the table allows (scripts/check-layers.sh);
# `make test` runs it, and test_layers.sh shows it can fail.
.PHONY: layers
layers: $(LIB)
	@scripts/check-layers.sh src $(LIB)
TEST_CMDS += "scripts/check-layers.sh src $(LIB)" "test/package/test_layers.sh $(LIB)"
