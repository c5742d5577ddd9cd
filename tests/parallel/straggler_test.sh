#!/usr/bin/env bash
# Straggler detection under mpirun, 4 data-parallel ranks of
# tests/parallel/equivalence.conf:
#  - with --inject-fault slow:2:300 rank 2 is named: its compute seconds
#    (rank_seconds) exceed the median rank's by about the 300 ms it sleeps,
#    so the sleep counts as its compute and the others' wait for it does
#    not; it is named from step 5, once a window of 3 steps holds it
#    (factor 4: step 4's window holds the sleep twice in three steps, about
#    2.7x); the record's ratio and wait_share are those of the last window
#    of rank_seconds; the progress line names it; events.jsonl has one
#    "straggler" event (one episode)
#  - without a fault nobody is named (factor 5 over 6 steps: robust on a
#    loaded machine)
#  - a bad --straggler-action is refused with one line, exit 2
#   straggler_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# shellcheck source=SCRIPTDIR/training_run.sh
source "$(dirname "$0")/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 12
       --log-every 4 --dp 4 --microbatches 1 --straggler-window 3)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --inject-fault slow:2:300 \
  --straggler-factor 4 --out "$tmp/slow" >"$tmp/slow.log" 2>&1 || fail "the slow run failed"
python3 - "$tmp/slow" <<'PY' || fail "the slow rank was not named as it should be"
import json, statistics, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert len(recs) == 12, len(recs)
# Rank 2 sleeps after each step's gather: from step 3 on its compute time
# carries the sleep (step 2's is matched by the others' wait in step 1's
# rank report, which is no collective of the step).
assert all(len(r["rank_seconds"]) == 4 for r in recs)
for r in recs[2:]:
    extra = r["rank_seconds"][2] - statistics.median(r["rank_seconds"])
    assert 0.25 < extra < 0.6, f"step {r['step']}: rank 2 is {extra:.3f}s above the median"
named = [r for r in recs if "straggler" in r]
assert [r["step"] for r in named] == list(range(5, 13)), [r["step"] for r in named]
for r in named:
    s = r["straggler"]
    assert s["rank"] == 2, s
    window = [q["rank_seconds"] for q in recs[r["step"] - 3:r["step"]]]
    mean = [sum(w[k] for w in window) / 3 for k in range(4)]
    ratio = mean[2] / statistics.median(mean)
    assert abs(s["ratio"] - ratio) < 1e-6 * ratio, (s, ratio)
    assert 4 < s["ratio"], s
    assert 0.5 < s["wait_share"] <= 1, s
events = [json.loads(l) for l in open(f"{d}/events.jsonl")]
stragglers = [e for e in events if e["kind"] == "straggler"]
assert len(stragglers) == 1 and stragglers[0]["step"] == 5, stragglers
assert stragglers[0]["detail"].startswith("rank 2: "), stragglers
PY
grep -Eq '^step 8/12 \| .* \| straggler rank 2: [0-9.]+x median, waiting cost [0-9]+% of the step \| ETA' \
  "$tmp/slow.log" || fail "no progress line names rank 2"

"$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --straggler-factor 5 --straggler-window 6 \
  --out "$tmp/even" >"$tmp/even.log" 2>&1 || fail "the run without a fault failed"
python3 - "$tmp/even" <<'PY' || fail "a straggler was named without a fault"
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert len(recs) == 12 and all(len(r["rank_seconds"]) == 4 for r in recs)
assert not [r for r in recs if "straggler" in r], [r["rank_seconds"] for r in recs]
assert not [l for l in open(f"{d}/events.jsonl") if '"straggler"' in l]
PY

err=$("$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --straggler-action retry \
  --out "$tmp/bad" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "--straggler-action retry: exit $code, expected 2"
grep -qx "ladder train: --straggler-action must be warn or restart-without, got 'retry'" <<<"$err" ||
  fail "--straggler-action retry: unexpected output: $err"

if [ "$failures" -ne 0 ]; then
  for f in slow even; do echo "--- $f.log"; cat "$tmp/$f.log"; done
  exit 1
fi
echo "straggler: rank 2 named from step 5 with its sleep as its extra compute; nobody named" \
  "without a fault; a bad action refused"
