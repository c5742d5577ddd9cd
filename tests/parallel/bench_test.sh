#!/usr/bin/env bash
# `ladder bench train` under mpirun: a per-rank table (step, compute, tensor
# and data communication, bubble), the measured and textbook pipeline bubble
# and the final JSON line, for tp2 x pp2 with 4 microbatches.
#   bench_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
set -u
ladder=$1
src=$2
mpirun=$3
shift 3
out=$("$mpirun" "$@" -np 4 "$ladder" bench train --config "$src/tests/parallel/equivalence.conf" \
  --steps 2 --tp 2 --pp 2 --microbatches 4 2>&1) || { echo "FAIL: bench exited non-zero"; echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "rank  (pp,dp,tp)  step ms  compute ms  tensor comm ms  data comm ms  embed comm ms  bubble ms" <<<"$out" ||
  fail "no per-rank table"
for row in "0  (0,0,0)" "1  (0,0,1)" "2  (1,0,0)" "3  (1,0,1)"; do
  grep -qF "   $row " <<<"$out" || fail "no row '$row'"
done
grep -qE '^pipeline bubble: [0-9.]+% of the schedule \(mean over ranks\), textbook \(P-1\)/\(M\+P-1\) = 20\.0% \(P = 2, M = 4\)$' <<<"$out" ||
  fail "no bubble line with the textbook 20.0%"
tail -1 <<<"$out" | grep -qE '^\{"tokens_per_s":[0-9.]+,"gflops":[0-9.]+,"gemm_gflops":[0-9.]+,"fraction":[0-9.]+\}$' ||
  fail "last line is not the JSON summary"
