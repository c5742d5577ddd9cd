#!/usr/bin/env bash
# ladder train --trace: one process, pipeline parallel (pp2, 4 microbatches)
# and tensor parallel (tp2, on the CPU and on cuda-sim) runs write a Chrome trace of steps 2..3 that
# check_trace.py holds to metrics.jsonl (one process per rank, every kind of
# span, proper nesting, the parts of each step adding up to time_s.step
# within 2%, aligned clocks); a one-step run traces its only step; bad flags
# are one-line errors that leave nothing behind.
#   trace_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 4
       --log-every 4)
check="$src/tests/parallel/check_trace.py"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# "ranks | flags | kinds of span beyond the common ones"; on cuda-sim the
# compute spans come again on the device track, from CUDA events. Step 3's
# checkpoint goes to disk; step 2's, where asked, to memory.
export LADDER_MEM_CHECKPOINT_ROOT="$tmp/shm"
while IFS='|' read -r np flags kinds; do
  out="$tmp/run_np${np}_$(echo "$flags" | tr -d ' -')"
  if ! "$mpirun" "${mpirun_args[@]}" -x LADDER_MEM_CHECKPOINT_ROOT -np $np "$ladder" "${train[@]}" $flags --save-every 3 \
      --trace "$out.json" --trace-steps 2:3 --out "$out" </dev/null >"$out.log" 2>&1; then
    fail "np $np $flags"; cat "$out.log"; continue
  fi
  grep -q "^trace of steps 2 to 3: $out.json (open it in https://ui.perfetto.dev" "$out.log" ||
    fail "np $np $flags: no line naming the trace"
  python3 "$check" "$out.json" "$out/metrics.jsonl" $np 2 3 4 $kinds || fail "np $np $flags"
done <<'RUNS'
1|--mem-save-every 2|checkpoint memory
2|--pp 2 --microbatches 4|checkpoint bubble comm
2|--tp 2|checkpoint comm
2|--tp 2 --device cuda-sim|checkpoint comm device
RUNS

# The default window (2:3) cut to a one-step run.
if "$ladder" "${train[@]}" --steps 1 --trace "$tmp/one.json" --out "$tmp/one" >"$tmp/one.log" 2>&1; then
  python3 "$check" "$tmp/one.json" "$tmp/one/metrics.jsonl" 1 1 1 4 || fail "one-step run"
else
  fail "one-step run"; cat "$tmp/one.log"
fi

# Bad flags: the exact line, a non-zero exit, no output directory.
expect_error() {
  local want=$1
  shift
  local got
  got=$("$ladder" "${train[@]}" --out "$tmp/bad" "$@" 2>&1 >/dev/null) && fail "$* succeeded"
  [[ "$got" == "$want" ]] || fail "$*: got '$got', want '$want'"
  [[ ! -e "$tmp/bad" ]] || fail "$*: left $tmp/bad behind"
}
expect_error "ladder train: --trace-steps needs --trace FILE" --trace-steps 2:3
expect_error "ladder train: --trace-steps '3-4': expected A:B, the first and last step to trace (1 <= A <= B)" \
  --trace "$tmp/t.json" --trace-steps 3-4
expect_error "ladder train: --trace-steps '3:2': expected A:B, the first and last step to trace (1 <= A <= B)" \
  --trace "$tmp/t.json" --trace-steps 3:2
expect_error "ladder train: --trace-steps 5:9 has no step in this run (steps 1 to 4)" \
  --trace "$tmp/t.json" --trace-steps 5:9
expect_error "ladder train: --trace $tmp/nodir/t.json: directory '$tmp/nodir' does not exist" \
  --trace "$tmp/nodir/t.json"

[[ $failures -eq 0 ]] || exit 1
echo "trace test ok"
