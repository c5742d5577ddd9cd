#!/usr/bin/env bash
# `ladder plan` predicts what runs measure: for several layouts, every rank's
# memory (weights, gradients, optimizer, activations, and all the backend
# allocated) and its communication bytes per axis in a step are within 10% of
# the plan. And the textbook case: Adam in mixed precision, 16 bytes per
# parameter before activations.
#   plan_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
config="$src/tests/parallel/equivalence.conf"
failures=0
for layout in "1" "2 --dp 2 --zero 1" "4 --dp 2 --tp 2 --bucket-mb 0.01" "4 --tp 2 --pp 2 --microbatches 4" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1 --pp-schedule gpipe --recompute" \
    "4 --pp 4 --microbatches 8"; do
  set -- $layout
  np=$1
  shift
  out="$tmp/run_np${np}_$(echo "$*" | tr -d ' -')"
  if ! "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" train --config "$config" \
      --data "$tmp/corpus.txt" --steps 2 "$@" --out "$out" >"$out.log" 2>&1; then
    echo "FAIL: mpirun -np $np ladder train $*"; cat "$out.log"; failures=$((failures + 1)); continue
  fi
  # The plan takes the layout flags; the bucket size changes no byte count.
  plan_args=()
  while [ $# -gt 0 ]; do
    if [ "$1" = --bucket-mb ]; then shift 2; else plan_args+=("$1"); shift; fi
  done
  "$ladder" plan --config "$config" "${plan_args[@]}" --json >"$out.plan.json" ||
    { echo "FAIL: ladder plan $*"; failures=$((failures + 1)); continue; }
  printf '%-80s ' "-np $layout"
  python3 "$src/tests/parallel/compare_plan.py" "$out.plan.json" "$out/ranks.json" 0.10 ||
    failures=$((failures + 1))
done
seven=$("$ladder" plan --config "$src/configs/gpt-7b.conf" --precision bf16)
grep -q "weights 6 (fp32 master, bf16 copy) + gradients 4 + AdamW 8 (m, v) bytes per parameter = 18.00 bytes" <<<"$seven" ||
  { echo "FAIL: 7B in bf16 is not 18 bytes per parameter"; echo "$seven"; failures=$((failures + 1)); }
# The Young/Daly interval: sqrt(2 x 5.25 s x 24 h) = 952 s.
"$ladder" plan --config "$src/configs/gpt2-124m.conf" --mtbf-hours 24 --checkpoint-seconds 5.25 |
  grep -q "checkpoint interval (Young/Daly) sqrt(2 C MTBF) = 952 s" ||
  { echo "FAIL: Young/Daly interval"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ] && echo "every layout's measured memory and traffic match the plan" || exit 1
