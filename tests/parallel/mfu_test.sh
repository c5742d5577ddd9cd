#!/usr/bin/env bash
# MFU of a parallel run divides the job's FLOP rate by the job's GEMM
# ceiling: every rank measures its own at the same moment and the rates are
# summed (cli/parallel_layout.h, JobGemmCeiling). For one process and for
# two (dp2, tp2):
#  - the ceiling line of two ranks says it is their sum and names the
#    slowest and fastest rank's own rate, and the sum lies between 2 x each;
#  - the FLOPs per token that the records imply through that ceiling,
#    mfu x ceiling / tokens_per_s, are the model's, as in one process: MFU
#    divides by the ceiling the line shows.
# And with a stated peak (--peak-gflops, per rank) under dp2 the line says
# so, MFU divides by twice the stated figure, and a negative one is refused.
#   mfu_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 6
       --log-every 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
flops_per_token() {  # LOG RUN_DIR: the median over steps of mfu x ceiling / tokens_per_s
  python3 - "$@" <<'PY'
import json, re, statistics, sys
m = re.search(r"GEMM ceiling ([0-9.]+) GFLOP/s", open(sys.argv[1]).read())
if not m:
    sys.exit(f"no GEMM ceiling line in {sys.argv[1]}")
ceiling = float(m.group(1)) * 1e9
records = [json.loads(l) for l in open(f"{sys.argv[2]}/metrics.jsonl")]
print(statistics.median(r["mfu"] * ceiling / r["tokens_per_s"] for r in records))
PY
}

"$ladder" "${train[@]}" --out "$tmp/one" >"$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
one=$(flops_per_token "$tmp/one.log" "$tmp/one") || exit 1
for layout in "--dp 2" "--tp 2"; do
  name=$(tr -d ' -' <<<"$layout")
  "$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" $layout --out "$tmp/$name" \
    >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "mpirun -np 2 $layout"; continue; }
  python3 - "$tmp/$name.log" <<'PY' || fail "$layout: the ceiling line is not the sum over 2 ranks"
import re, sys
line = next((l for l in open(sys.argv[1]) if "GEMM ceiling" in l), "")
m = re.search(r"GEMM ceiling ([0-9.]+) GFLOP/s \(summed over 2 ranks running at once, "
              r"([0-9.]+) to ([0-9.]+) each\)$", line.rstrip())
if not m:
    sys.exit(f"FAIL: no summed ceiling in: {line.strip()}")
total, low, high = map(float, m.groups())
if not (low <= high and 2 * low - 0.1 <= total <= 2 * high + 0.1):
    sys.exit(f"FAIL: {total} is not the sum of two rates between {low} and {high}")
PY
  two=$(flops_per_token "$tmp/$name.log" "$tmp/$name") || { fail "$layout: no records"; continue; }
  python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(b / a - 1) > 0.02)" "$one" "$two" ||
    fail "$layout: MFU implies $two FLOPs per token, one process $one"
  echo "$layout: $two FLOPs per token implied by MFU, one process $one"
done

"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --dp 2 --peak-gflops 1000 \
  --out "$tmp/stated" >"$tmp/stated.log" 2>&1 || { cat "$tmp/stated.log"; fail "--peak-gflops 1000"; }
grep -q "GEMM ceiling 2000.0 GFLOP/s (stated by --peak-gflops: 1000.0 per rank x 2 ranks)$" \
  "$tmp/stated.log" || fail "the stated ceiling's line: $(grep "GEMM ceiling" "$tmp/stated.log")"
stated=$(flops_per_token "$tmp/stated.log" "$tmp/stated") || fail "--peak-gflops: no records"
python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(b / a - 1) > 0.02)" "$one" "$stated" ||
  fail "--peak-gflops: MFU implies $stated FLOPs per token, one process $one"
err=$("$ladder" "${train[@]}" --peak-gflops -5 --out "$tmp/refused" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "--peak-gflops -5 exited $code, expected 2"
[ "$err" = "ladder train: --peak-gflops must be >= 0 (GFLOP/s per rank; 0 measures the ceiling), got -5" ] ||
  fail "--peak-gflops -5: '$err'"
[ "$failures" -eq 0 ] && echo "parallel MFU divides by the ranks' summed or stated ceiling" || exit 1
