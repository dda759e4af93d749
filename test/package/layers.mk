# layers.mk - `make layers`: no file of src/ includes a header of a layer above its own
# (scripts/check-layers.sh); `make test` runs it, and test_layers.sh shows it can fail.
.PHONY: layers
layers:
	@scripts/check-layers.sh src
TEST_CMDS += "scripts/check-layers.sh src" "test/package/test_layers.sh"
