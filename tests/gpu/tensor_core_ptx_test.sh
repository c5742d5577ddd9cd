#!/usr/bin/env bash
# The tensor-core kernels compile to the instructions they were written for:
# nvcc's PTX of each file (for the newest architecture of the build) holds
# mma.sync m16n8k16 with bf16 inputs and fp32 accumulators, ldmatrix (plain
# and transposed) and cp.async with its commit and wait groups (the W8A16
# matmul of int8_matmul.cu: mma.sync). A kernel that
# silently fell back to scalar code, or a wrapper whose inline PTX the
# compiler dropped, fails here without a GPU. (The SASS, HMMA and LDSM, needs
# cuobjdump, which the build machine's toolkit may lack; ptxas's own report
# already fails the build on spills, kernels/nvcc_checked.py.)
#   tensor_core_ptx_test.sh NVCC SOURCE_ROOT ARCH
set -u
nvcc=$1
src=$2
arch=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
# check FILE INSTR...: kernels/FILE.cu's PTX holds each INSTR at least once.
check() {
  local file=$1
  shift
  local ptx="$tmp/$file.ptx"
  if ! "$nvcc" -std=c++20 -O3 -ptx "-arch=compute_$arch" "-I$src" "$src/kernels/$file.cu" -o "$ptx"; then
    echo "FAIL: nvcc -ptx kernels/$file.cu"; failures=$((failures + 1)); return
  fi
  local line="kernels/$file.cu:" instr n
  for instr in "$@"; do
    n=$(grep -c -F "$instr" "$ptx")
    line="$line $instr x$n;"
    [ "$n" -gt 0 ] || { echo "FAIL: kernels/$file.cu has no $instr in its PTX"; failures=$((failures + 1)); }
  done
  echo "$line"
}
mma="mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
for file in flash_attention_tc tensor_core_selftest; do
  check "$file" "$mma" "ldmatrix.sync.aligned.m8n8.x4.shared.b16" \
    "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" "cp.async.cg.shared.global" \
    "cp.async.commit_group" "cp.async.wait_group"
done
# The W8A16 matmul: fragments loaded from global memory, mma only.
check int8_matmul "$mma"
[ "$failures" -eq 0 ] && echo "the tensor-core kernels' PTX holds mma.sync, ldmatrix and cp.async" || exit 1
