#!/usr/bin/env bash
# `ladder bench train` under mpirun: a per-rank table (step, compute, tensor
# and data communication, bubble) and the final JSON line, for dp2 x tp2.
#   bench_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
set -u
ladder=$1
src=$2
mpirun=$3
shift 3
out=$("$mpirun" "$@" -np 4 "$ladder" bench train --config "$src/tests/parallel/equivalence.conf" \
  --steps 2 --dp 2 --tp 2 2>&1) || { echo "FAIL: bench exited non-zero"; echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "rank  (pp,dp,tp)  step ms  compute ms  tensor comm ms  data comm ms  bubble ms" <<<"$out" ||
  fail "no per-rank table"
[ "$(grep -cE '^ +[0-3]  \(0,[01],[01]\)' <<<"$out")" -eq 4 ] || fail "not one row per rank"
tail -1 <<<"$out" | grep -qE '^\{"tokens_per_s":[0-9.]+,"gflops":[0-9.]+,"gemm_gflops":[0-9.]+,"fraction":[0-9.]+\}$' ||
  fail "last line is not the JSON summary"
