#!/usr/bin/env bash
# `ladder plan` predicts what runs measure: for several layouts, every rank's
# memory (weights, gradients, optimizer, activations, and all the backend
# allocated; with optimizer offload the host memory and the link's bytes) and
# its communication bytes per axis in a step are within 10% of the plan (fp32 within 10%, bf16 mixed precision with each recomputation
# level within 5%), and metrics.jsonl reports the same memory categories.
# And the textbook case: Adam in bf16, 18 bytes per parameter before
# activations (fp32 master, bf16 copy, fp32 gradients, m, v).
#   plan_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
config="$src/tests/parallel/equivalence.conf"
failures=0
# fp32 on the CPU within 10%; bf16 mixed precision on the simulator, with
# every recomputation level, within 5%.
for layout in "1" "2 --dp 2 --zero 1" "4 --dp 2 --tp 2 --bucket-mb 0.01" "4 --tp 2 --pp 2 --microbatches 4" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1 --pp-schedule gpipe --recompute layer" \
    "4 --pp 4 --microbatches 8" "4 --tp 2 --sp --pp 2 --microbatches 4" \
    "8 --dp 2 --tp 2 --sp --pp 2 --microbatches 2 --zero 1 --recompute layer" \
    "1 --device cuda-sim --precision bf16" "1 --device cuda-sim --precision bf16 --recompute gelu" \
    "2 --dp 2 --zero 1 --device cuda-sim --precision bf16 --recompute layer" \
    "2 --tp 2 --device cuda-sim --precision bf16 --recompute gelu" \
    "2 --tp 2 --sp --device cuda-sim --precision bf16" \
    "4 --cp 2 --tp 2 --sp --recompute layer" "8 --dp 2 --cp 2 --pp 2 --microbatches 2 --zero 1" \
    "2 --cp 2 --device cuda-sim --precision bf16" \
    "2 --dp 2 --zero 1 --device cuda-sim --precision bf16 --offload optimizer" \
    "2 --pp 2 --microbatches 2 --device cuda-sim --offload optimizer" \
    "2 --dp 2 --zero 1 --microbatches 2 --device cuda-sim --precision bf16 --offload params" \
    "2 --pp 2 --microbatches 4 --device cuda-sim --offload params"; do
  set -- $layout
  tol=0.10
  case "$*" in *bf16*) tol=0.05 ;; esac
  np=$1
  shift
  out="$tmp/run_np${np}_$(echo "$*" | tr -d ' -')"
  if ! "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" train "${stated_peak[@]}" --config "$config" \
      --data "$tmp/corpus.txt" --steps 2 "$@" --out "$out" >"$out.log" 2>&1; then
    echo "FAIL: mpirun -np $np ladder train $*"; cat "$out.log"; failures=$((failures + 1)); continue
  fi
  # The plan takes the layout flags; the bucket size changes no byte count.
  plan_args=()
  while [ $# -gt 0 ]; do
    case $1 in
      --bucket-mb | --device) shift 2 ;;
      *) plan_args+=("$1"); shift ;;
    esac
  done
  "$ladder" plan --config "$config" "${plan_args[@]}" --json >"$out.plan.json" ||
    { echo "FAIL: ladder plan $*"; failures=$((failures + 1)); continue; }
  printf '%-80s ' "-np $layout"
  python3 "$src/tests/parallel/compare_plan.py" "$out.plan.json" "$out/ranks.json" "$tol" ||
    failures=$((failures + 1))
  # metrics.jsonl carries the same memory categories as the rank report.
  python3 - "$out/metrics.jsonl" "$out/ranks.json" <<'PY' || { echo "FAIL: metrics memory"; failures=$((failures + 1)); }
import json, sys
record = json.loads(open(sys.argv[1]).readline())["memory"]
rank0 = json.load(open(sys.argv[2]))[0]["memory"]
bad = [k for k in record if record[k] != rank0[k]]
sys.exit(f"metrics memory {record} differs from rank 0's report {rank0}" if bad else 0)
PY
done
seven=$("$ladder" plan --config "$src/configs/gpt-7b.conf" --precision bf16)
grep -q "weights 6 (fp32 master, bf16 copy) + gradients 4 + AdamW 8 (m, v) bytes per parameter = 18.00 bytes" <<<"$seven" ||
  { echo "FAIL: 7B in bf16 is not 18 bytes per parameter"; echo "$seven"; failures=$((failures + 1)); }
# The Young/Daly interval: sqrt(2 x 5.25 s x 24 h) = 952 s.
"$ladder" plan --config "$src/configs/gpt2-124m.conf" --mtbf-hours 24 --checkpoint-seconds 5.25 |
  grep -q "checkpoint interval (Young/Daly) sqrt(2 C MTBF) = 952 s" ||
  { echo "FAIL: Young/Daly interval"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ] && echo "every layout's measured memory and traffic match the plan" || exit 1
