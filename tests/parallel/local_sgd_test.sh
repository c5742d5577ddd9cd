#!/usr/bin/env bash
# Local SGD (--local-sgd H, src/train/trainer.h) under mpirun, 2
# data-parallel ranks of tests/parallel/equivalence.conf, 4 steps:
#  - step 1's loss is synchronous training's, bit for bit (the same weights
#    see the same rows); later steps differ (each replica applied its own
#    gradient);
#  - the data axis carries only the loss on steps 1 and 3 and the loss and
#    the weights on steps 2 and 4 (the averages), as many bytes as the
#    synchronous step's loss and gradients;
#  - --local-sgd with ZeRO-1 or with checkpoints is refused with one line,
#    exit 2.
#   local_sgd_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# shellcheck source=SCRIPTDIR/training_run.sh
source "$(dirname "$0")/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 4
       --dp 2 --microbatches 1)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --out "$tmp/sync" >"$tmp/sync.log" 2>&1 ||
  { cat "$tmp/sync.log"; fail "the synchronous run failed"; }
"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --local-sgd 2 --out "$tmp/local" \
  >"$tmp/local.log" 2>&1 || { cat "$tmp/local.log"; fail "the local SGD run failed"; }
python3 - "$tmp/sync" "$tmp/local" <<'PY' || fail "local SGD's losses or traffic are not as expected"
import json, sys
sync, local = ([json.loads(l) for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:3])
assert len(sync) == len(local) == 4
assert local[0]["loss"] == sync[0]["loss"], (local[0]["loss"], sync[0]["loss"])
assert all(l["loss"] != s["loss"] for l, s in zip(local[1:], sync[1:])), [r["loss"] for r in local]
data = lambda r: r["comm"]["data"]["bytes"]
step_bytes = data(sync[0])
assert all(data(r) == step_bytes for r in sync), [data(r) for r in sync]
assert [data(r) for r in local] == [4, step_bytes, 4, step_bytes], [data(r) for r in local]
PY

refused() {  # WHAT EXPECTED-MESSAGE FLAGS...
  local what=$1 message=$2
  shift 2
  local err code
  err=$("$ladder" "${train[@]}" --dp 1 "$@" --out "$tmp/refused" 2>&1)
  code=$?
  [ "$code" -eq 2 ] && grep -q -- "$message" <<<"$err" || fail "$what: exit $code, '$err'"
}
refused "with checkpoints" "--local-sgd does not checkpoint" --local-sgd 2 --save-every 2
refused "negative" "--local-sgd must be >= 0" --local-sgd -1
"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --local-sgd 2 --zero 1 \
  --out "$tmp/zero" >"$tmp/zero.log" 2>&1
grep -q "not with --zero 1" "$tmp/zero.log" || { cat "$tmp/zero.log"; fail "--zero 1 was not refused"; }
[ "$failures" -eq 0 ] && echo "local SGD averages every H steps and refuses what it cannot do" || exit 1
