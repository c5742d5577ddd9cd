#!/usr/bin/env bash
# Parallel training equals single-process training (data, tensor, sequence,
# context and pipeline parallelism, ZeRO-1 on and off, GPipe and 1F1B): 20 steps of a small model
# in each layout give per-step losses and final weights (every tensor, norm of
# the difference over the norm) within 1e-5 relative of one process.
#   equivalence_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20 --log-every 20)

OMP_NUM_THREADS=1 "$ladder" "${train[@]}" --out "$tmp/single" 2>/dev/null || { echo "FAIL: single run"; exit 1; }
failures=0
# "ranks flags...": every parallel dimension alone and combined, ZeRO-1 on and
# off, both pipeline schedules, more microbatches than the reference's one,
# activation recomputation, and sequence and context parallelism with each
# of them.
for layout in "1 --microbatches 4" "1 --microbatches 4 --pp-schedule gpipe" \
    "2 --dp 2" "2 --dp 2 --zero 1" "2 --tp 2" "4 --dp 2 --tp 2" \
    "4 --dp 2 --tp 2 --zero 1" "4 --tp 4" "8 --dp 2 --tp 4 --zero 1" \
    "2 --pp 2 --microbatches 4" "2 --pp 2 --microbatches 4 --pp-schedule gpipe" \
    "4 --dp 2 --pp 2 --microbatches 2 --zero 1 --pp-schedule gpipe" \
    "4 --dp 2 --pp 2 --microbatches 4 --zero 1" \
    "4 --tp 2 --pp 2 --microbatches 4" \
    "4 --pp 4 --microbatches 8" "4 --pp 4 --microbatches 2 --pp-schedule gpipe" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 2" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 4 --zero 1 --pp-schedule gpipe" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1" \
    "8 --dp 2 --pp 4 --microbatches 4 --zero 1" \
    "8 --dp 2 --tp 2 --pp 2 --microbatches 4 --recompute layer" \
    "2 --tp 2 --sp" "4 --tp 4 --sp --recompute gelu" "4 --dp 2 --tp 2 --sp --zero 1" \
    "4 --tp 2 --sp --pp 2 --microbatches 4" \
    "8 --dp 2 --tp 2 --sp --pp 2 --microbatches 4 --zero 1 --recompute layer" \
    "2 --cp 2" "4 --cp 4" "4 --dp 2 --cp 2 --zero 1" "4 --cp 2 --tp 2 --sp" \
    "4 --cp 2 --pp 2 --microbatches 4 --recompute layer" "8 --cp 8" \
    "8 --dp 2 --cp 2 --tp 2 --zero 1 --recompute gelu" \
    "8 --cp 2 --tp 2 --sp --pp 2 --microbatches 4 --pp-schedule gpipe" \
    "8 --dp 2 --cp 2 --pp 2 --microbatches 2 --zero 1"; do
  set -- $layout
  np=$1
  shift
  out="$tmp/run_np${np}_$(echo "$*" | tr -d ' -')"
  start=$(date +%s%N)
  if ! "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" "$@" --out "$out" \
      >"$out.log" 2>&1; then
    echo "FAIL: mpirun -np $np ladder train $*"; cat "$out.log"; failures=$((failures + 1)); continue
  fi
  printf '%-72s %6d ms  ' "np $np $*" $((($(date +%s%N) - start) / 1000000))
  python3 "$src/tests/parallel/compare_runs.py" "$tmp/single" "$out" 1e-5 || failures=$((failures + 1))
  if [[ " $* " == *" --pp "* ]] && ! grep -qE "^pipeline bubble: [0-9.]+% of the schedule \(mean over ranks\), textbook" "$out.log"; then
    echo "FAIL: no pipeline bubble report"; failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] && echo "all layouts equal the single-process run" || exit 1
