#!/usr/bin/env bash
# Overlapped gradient reduction (--overlap-grad-reduce,
# src/parallel/data_parallel/gradient_buckets.h) under mpirun, on
# tests/parallel/equivalence.conf with buckets of about a layer:
#  - dp2, dp2 x tp2 and dp2 x pp2: the losses, gradient norms and final
#    weights equal the run without overlap's, bit for bit (the same buckets,
#    reduced in the same order);
#  - with overlap some bucket is in flight before the backward ends
#    (time_s.grad_overlapped > 0 on every step); without, none is (0);
#  - with ZeRO-1, --sp or --local-sgd it is refused with one line, exit 2;
#  - overlapped pipeline transfers (--overlap-p2p-comm): pp2 and pp4, 1F1B
#    and GPipe, on the CPU and the CUDA simulator, equal the runs without,
#    bit for bit.
#   overlap_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# shellcheck source=SCRIPTDIR/training_run.sh
source "$(dirname "$0")/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 3
       --microbatches 2 --bucket-mb 0.05)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

run() {  # NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" "$@" --out "$tmp/$name" \
    >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; fail "$name failed"; }
}

# same_bits NAME PLAIN OTHER [buckets]: the weights, losses and gradient
# norms of two runs equal bit for bit; with `buckets`, also the split (no
# bucket overlapped in PLAIN, some in OTHER, both waited for some).
same_bits() {
  local name=$1 plain=$2 other=$3 buckets=${4:-}
  cmp -s "$tmp/$plain/model.bin" "$tmp/$other/model.bin" || fail "$name: the weights differ"
  python3 - "$tmp/$plain" "$tmp/$other" "$buckets" <<'PY' || fail "$name: losses or the split"
import json, sys
plain, over = ([json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:3])
assert len(plain) == len(over) == 3
for p, o in zip(plain, over):
    assert (p["loss"], p["grad_norm"]) == (o["loss"], o["grad_norm"]), (p, o)
    if sys.argv[3]:
        assert p["time_s"]["grad_overlapped"] == 0, p["time_s"]
        assert o["time_s"]["grad_overlapped"] > 0, o["time_s"]
        assert o["time_s"]["grad_exposed"] > 0 and p["time_s"]["grad_exposed"] > 0
PY
}

for layout in "dp2:2:--dp 2" "tp2:4:--dp 2 --tp 2" "pp2:4:--dp 2 --pp 2"; do
  IFS=: read -r name np flags <<<"$layout"
  # shellcheck disable=SC2086
  run "$name-plain" "$np" $flags
  # shellcheck disable=SC2086
  run "$name-overlap" "$np" $flags --overlap-grad-reduce
  same_bits "$name with overlap" "$name-plain" "$name-overlap" buckets
done

# Overlapped pipeline transfers (--overlap-p2p-comm, pp::RunStage): the
# same messages, so the same bits, in both schedules, with four stages, and
# on the CUDA simulator (its hand-over buffers through the routed group).
for layout in "pp2-1f1b:2:--pp 2" "pp4-1f1b:4:--pp 4" "pp4-gpipe:4:--pp 4 --pp-schedule gpipe" \
              "pp2-sim:2:--pp 2 --device cuda-sim"; do
  IFS=: read -r name np flags <<<"$layout"
  # shellcheck disable=SC2086
  run "$name-plain" "$np" $flags --microbatches 4
  # shellcheck disable=SC2086
  run "$name-p2p" "$np" $flags --microbatches 4 --overlap-p2p-comm
  same_bits "$name with overlapped transfers" "$name-plain" "$name-p2p"
done

refused() {  # WHAT FLAGS...
  local what=$1
  shift
  local err code
  err=$("$ladder" "${train[@]}" --overlap-grad-reduce "$@" --out "$tmp/refused" 2>&1)
  code=$?
  [ "$code" -eq 2 ] && grep -q -- "--overlap-grad-reduce overlaps the bucketed all-reduce" <<<"$err" ||
    fail "$what: exit $code, '$err'"
}
refused "ZeRO-1" --zero 1
refused "local SGD" --local-sgd 2
"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --dp 1 --tp 2 --sp \
  --overlap-grad-reduce --out "$tmp/sp" >"$tmp/sp.log" 2>&1
grep -q "overlaps the bucketed all-reduce" "$tmp/sp.log" || { cat "$tmp/sp.log"; fail "--sp was not refused"; }
[ "$failures" -eq 0 ] && echo "overlapped gradient buckets and pipeline transfers give the same bits; what cannot overlap is refused" || exit 1
