#!/usr/bin/env bash
# Context parallelism's point: a context whose activations do not fit a
# rank's memory cap trains when its sequences are split over ranks.
# tests/parallel/long_context.conf under --max-rank-memory 8 MiB: refused
# in one process (one line naming the cap and the activations, exit 2, as
# `ladder plan` predicts), accepted and trained under --cp 4, where every
# rank's measured memory and ring traffic are the plan's. And the layout
# rules: a ring that does not cut the context into equal chunks is refused.
#   context_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
config="$src/tests/parallel/long_context.conf"
# Enough text that the validation split holds a 1024-token window.
for i in $(seq 1 1500); do echo "In the beginning God created the heaven and the earth. $i"; done \
  >"$tmp/corpus.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cap=(--max-rank-memory 8)

# One process: refused before anything is allocated, and plan says why.
"$ladder" train "${stated_peak[@]}" --config "$config" --data "$tmp/corpus.txt" --out "$tmp/one" "${cap[@]}" \
  >"$tmp/one.log" 2>&1
code=$?
[ "$code" -eq 2 ] || fail "one process over the cap exited $code, want 2: $(cat "$tmp/one.log")"
grep -q "over --max-rank-memory 8.0 MiB; --cp" "$tmp/one.log" || fail "no cap message: $(cat "$tmp/one.log")"
[ -e "$tmp/one/model.bin" ] && fail "a refused run wrote a model"
"$ladder" plan --config "$config" "${cap[@]}" >"$tmp/plan1.txt" 2>&1 && fail "plan accepts one process under the cap"
grep -q "over --max-rank-memory" "$tmp/plan1.txt" || fail "plan does not name the cap: $(cat "$tmp/plan1.txt")"

# Four ring ranks: the plan fits, the run trains, and measures what was planned.
"$ladder" plan --config "$config" --cp 4 "${cap[@]}" >"$tmp/plan4.txt" 2>&1 ||
  fail "plan --cp 4 does not fit the cap: $(cat "$tmp/plan4.txt")"
"$ladder" plan --config "$config" --cp 4 --json >"$tmp/plan4.json" || fail "plan --cp 4 --json"
if "$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" train "${stated_peak[@]}" --config "$config" --data "$tmp/corpus.txt" \
    --out "$tmp/ring" --cp 4 "${cap[@]}" >"$tmp/ring.log" 2>&1; then
  grep -q "^layout: dp 1 x cp 4 x tp 1 x pp 1 (4 ranks)" "$tmp/ring.log" || fail "no cp layout line"
  python3 "$src/tests/parallel/compare_plan.py" "$tmp/plan4.json" "$tmp/ring/ranks.json" 0.05 ||
    fail "--cp 4 against its plan"
  python3 - "$tmp/ring/metrics.jsonl" <<'PY' || fail "--cp 4 metrics"
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) == 2 and all(math.isfinite(r["loss"]) for r in rows), rows
assert rows[0]["comm"]["context"]["bytes"] > 0, rows[0]["comm"]
PY
else
  fail "--cp 4 under the cap: $(cat "$tmp/ring.log")"
fi

# Layout rules, one line each, exit 2.
"$mpirun" "${mpirun_args[@]}" -np 3 "$ladder" train "${stated_peak[@]}" --config "$config" --data "$tmp/corpus.txt" \
  --out "$tmp/bad" --cp 3 >"$tmp/bad.log" 2>&1
code=$?
[ "$code" -eq 2 ] || fail "--cp 3 exited $code, want 2"
grep -q "cuts each sequence into 2 x cp = 6 chunks, which does not divide the context (1024)" \
  "$tmp/bad.log" || fail "--cp 3 message: $(cat "$tmp/bad.log")"
[ "$failures" -eq 0 ] && echo "a context over one rank's cap trains on a ring of four" || exit 1
