#!/bin/sh
# check-plt.sh LIB - build-time check of the software NIC: fails unless ibv_reg_mr and
# ibv_reg_mr_iova in LIB reach ibv_reg_mr_iova2 through its PLT entry, as rdma-core's do,
# so a preload defining ibv_reg_mr_iova2 is entered again from them. Needs objdump.
set -eu
lib=$1
found=$(objdump -d --no-show-raw-insn "$lib" | awk '
    /^[0-9a-f]+ <.*>:$/ { fn = $2; sub(/^</, "", fn); sub(/>:$/, "", fn); sub(/@.*/, "", fn); next }
    /(call|jmp)[a-z]*[ \t]+[0-9a-f]+ <ibv_reg_mr_iova2@plt>/ { print fn }' | sort -u)
for fn in ibv_reg_mr ibv_reg_mr_iova; do
    if ! printf '%s\n' "$found" | grep -qx "$fn"; then
        echo "check-plt.sh: $fn in $lib does not call ibv_reg_mr_iova2@plt" >&2
        exit 1
    fi
done
