#!/usr/bin/env bash
# `ladder bench train` under mpirun: a per-rank table (step, compute, tensor
# and data communication, bubble), the measured and textbook pipeline bubble
# and the final JSON line, for tp2 x pp2 with 4 microbatches. Then layouts
# that do not fit are refused on every rank.
#   bench_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
out=$("$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" bench train --config "$src/tests/parallel/equivalence.conf" \
  --steps 2 --tp 2 --pp 2 --microbatches 4 2>&1) || { echo "FAIL: bench exited non-zero"; echo "$out"; exit 1; }
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "rank  (pp,dp,cp,tp)  step ms  compute ms  tensor comm ms  context comm ms  data comm ms  embed comm ms  bubble ms" <<<"$out" ||
  fail "no per-rank table"
for row in "0  (0,0,0,0)" "1  (0,0,0,1)" "2  (1,0,0,0)" "3  (1,0,0,1)"; do
  grep -qF "   $row " <<<"$out" || fail "no row '$row'"
done
grep -qE '^pipeline bubble: [0-9.]+% of the schedule \(mean over ranks\), textbook \(P-1\)/\(M\+P-1\) = 20\.0% \(P = 2, M = 4\)$' <<<"$out" ||
  fail "no bubble line with the textbook 20.0%"
tail -1 <<<"$out" | grep -qE '^\{"tokens_per_s":[0-9.]+,"gflops":[0-9.]+,"gemm_gflops":[0-9.]+,"fraction":[0-9.]+\}$' ||
  fail "last line is not the JSON summary"

# A layout the model cannot take is refused before any work: one line from
# rank 0, exit code 2 from every rank (so from mpirun), no hang.
refused() {  # EXPECTED_LINE MPIRUN_ARGS...
  local want=$1
  shift
  local err code
  err=$("$mpirun" "$@" 2>&1 >/dev/null)
  code=$?
  [ "$code" -eq 2 ] || fail "exit code $code, expected 2, for: $*"
  [ "$(grep -c "^ladder train: " <<<"$err")" -eq 1 ] || fail "not one error line for: $*"
  grep -qF "ladder train: $want" <<<"$err" || fail "no '$want' in: $err"
}
train=(train --config "$src/tests/parallel/equivalence.conf" --data "$src/README.md" --out /nonexistent/x)
refused "n_layer (4) is smaller than pp (8): a stage needs a layer" \
  "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --pp 8
refused "dp x tp x pp = 2 x 2 x 2 = 8 but the job has 4 ranks" \
  "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --dp 2 --tp 2 --pp 2
refused "the global batch of 8 sequences does not split into dp (2) x microbatches (3) equal parts" \
  "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --dp 2 --pp 2 --microbatches 3
refused "dp x cp x tp x pp = 1 x 2 x 2 x 1 = 4 but the job has 2 ranks" \
  "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --cp 2 --tp 2
refused "--sp needs --tp 2 or more: sequence parallelism splits the tokens of the tensor-parallel group" \
  "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --dp 2 --sp
echo "bad layouts refused on every rank with exit code 2"
