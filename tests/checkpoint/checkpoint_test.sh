#!/usr/bin/env bash
# Checkpoints end to end, against uninterrupted runs of
# tests/parallel/equivalence.conf (20 steps):
#  - a rank killed mid-run, the same command rerun: it resumes from the last
#    checkpoint and ends with bitwise-identical losses and model.bin (one
#    process, and dp2 x tp2 x pp2 with ZeRO-1); this fails unless weights,
#    AdamW moments, the step and the data position are all restored
#  - resharding: 2x2x2 (ZeRO-1) -> 1x4x2 (sequence parallel) -> cp2 x tp2
#    -> 1x1x1 -> 2x1x1 (ZeRO-1), each
#    killed and resumed in the next layout: within 1e-5 of one process
#  - a crash between the shard writes and the commit leaves the previous
#    checkpoint the latest, and the rerun resumes from it; a crash right
#    after the commit finds the step's metrics line already written
#  - corruption: a flipped byte in a shard and a truncated manifest are named;
#    --strict refuses (exit 2), otherwise the run falls back to an earlier one
#  - guards: a NaN gradient skips its update; with --max-bad-steps 1 the run
#    rolls back to the last checkpoint and ends where it would have
#  - a failing write (ENOSPC, injected) is reported and commits nothing; a
#    straggler (slow:RANK:MS) makes the others wait
#  - checkpoint inspect verifies, convert writes a model generate can read
#   checkpoint_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/../parallel/training_run.sh"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20
       --log-every 20)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
run() {  # NP OUT FLAGS... (expects success)
  local np=$1 out=$2
  shift 2
  "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" --out "$out" "$@" \
    >>"$out.log" 2>&1 || { fail "np $np $* (see below)"; cat "$out.log"; }
}
crash() {  # NP OUT FLAGS... (expects the injected fault to end it)
  local np=$1 out=$2
  shift 2
  if "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" --out "$out" "$@" \
      >>"$out.log" 2>&1; then
    fail "np $np $* survived its fault"
  fi
}
same() {  # A B: bitwise-identical losses and model.bin
  python3 - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:])
sys.exit(0 if a == b and len(a) == 20 else 1)
PY
  cmp -s "$1/model.bin" "$2/model.bin" || fail "$1/model.bin and $2/model.bin differ"
}

run 1 "$tmp/ref"

# Exact resume, one process: killed after step 12, saved every 5.
crash 1 "$tmp/one" --save-every 5 --inject-fault kill:0@12
run 1 "$tmp/one" --save-every 5
grep -q "resumed from $tmp/one/checkpoints/step-00000010 at step 10" "$tmp/one.log" || fail "no resume line"
same "$tmp/ref" "$tmp/one"

# Exact resume, dp2 x tp2 x pp2 with ZeRO-1 and asynchronous saves: rank 5
# killed after step 8.
layout3d=(--dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1)
run 8 "$tmp/full3d" "${layout3d[@]}"
crash 8 "$tmp/cut3d" "${layout3d[@]}" --save-every 5 --async-save --inject-fault kill:5@8
run 8 "$tmp/cut3d" "${layout3d[@]}" --save-every 5 --async-save
grep -q "checkpoint of step 5: snapshot in .*, written in the background" "$tmp/cut3d.log" ||
  fail "no asynchronous save"
grep -q "resumed from $tmp/cut3d/checkpoints/step-00000005 at step 5" "$tmp/cut3d.log" ||
  fail "the asynchronous checkpoint was not committed and resumed"
same "$tmp/full3d" "$tmp/cut3d"

# Resharding through five layouts, one output directory.
crash 8 "$tmp/reshard" --dp 2 --tp 2 --pp 2 --microbatches 2 --zero 1 --save-every 4 --inject-fault kill:3@6
crash 8 "$tmp/reshard" --tp 4 --sp --pp 2 --microbatches 2 --save-every 4 --inject-fault kill:0@10
crash 4 "$tmp/reshard" --cp 2 --tp 2 --save-every 4 --inject-fault kill:1@14
crash 1 "$tmp/reshard" --save-every 4 --inject-fault kill:0@18
run 2 "$tmp/reshard" --dp 2 --zero 1 --save-every 4
for step in 4 8 12 16; do
  grep -q "resumed from $tmp/reshard/checkpoints/step-000000$(printf %02d $step) at step $step" "$tmp/reshard.log" ||
    fail "reshard: no resume at step $step"
done
python3 "$src/tests/parallel/compare_runs.py" "$tmp/ref" "$tmp/reshard" 1e-5 || fail "resharded run"

# A crash inside the checkpoint of step 10: step 5 stays the latest.
crash 1 "$tmp/torn" --save-every 5 --inject-fault crash-during-save@10
[ "$(cat "$tmp/torn/checkpoints/latest")" = step-00000005 ] || fail "latest moved past a torn save"
[ -d "$tmp/torn/checkpoints/step-00000010.tmp" ] || fail "the torn save left no .tmp directory"
run 1 "$tmp/torn" --save-every 5
grep -q "resumed from $tmp/torn/checkpoints/step-00000005 at step 5" "$tmp/torn.log" || fail "torn: resume"
same "$tmp/ref" "$tmp/torn"

# A crash right after the commit of step 10: the rerun resumes from it, and
# metrics.jsonl, kept through step 10, already holds step 10's line.
crash 1 "$tmp/committed" --save-every 5 --inject-fault crash-after-save@10
run 1 "$tmp/committed" --save-every 5
grep -q "resumed from $tmp/committed/checkpoints/step-00000010 at step 10" "$tmp/committed.log" ||
  fail "committed: resume"
same "$tmp/ref" "$tmp/committed"

# Corruption: a flipped byte in the newest checkpoint (step 15).
crash 1 "$tmp/bad" --save-every 5 --inject-fault kill:0@17
shard="$tmp/bad/checkpoints/step-00000015/rank-00000.bin"
python3 -c "
import sys; p = sys.argv[1]; b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x10
open(p, 'wb').write(b)" "$shard"
err=$("$ladder" "${train[@]}" --out "$tmp/bad" --save-every 5 --strict 2>&1 >/dev/null)
code=$?
[ "$code" -eq 2 ] || fail "--strict on a corrupt shard: exit $code, expected 2"
grep -qF "shard '$shard': checksum mismatch" <<<"$err" || fail "--strict: the bad shard is not named: $err"
"$ladder" checkpoint inspect "$tmp/bad/checkpoints" >/dev/null 2>"$tmp/inspect.err" && fail "inspect passed a corrupt shard"
grep -qF "$shard" "$tmp/inspect.err" || fail "inspect does not name the corrupt shard"
run 1 "$tmp/bad" --save-every 5
grep -qF "warning: shard '$shard': checksum mismatch" "$tmp/bad.log" || fail "no fallback warning"
grep -q "resumed from $tmp/bad/checkpoints/step-00000010 at step 10" "$tmp/bad.log" || fail "no fallback to step 10"
same "$tmp/ref" "$tmp/bad"

# Guards: a NaN gradient at step 5 skips that update and training goes on.
run 1 "$tmp/nan" --inject-fault nan@5
python3 - "$tmp/nan/metrics.jsonl" <<'PY' || fail "nan: step 5 not skipped, or a later loss is not finite"
import json, math, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
assert [r["step"] for r in rs if r.get("skipped")] == [5] and rs[4]["grad_norm"] is None
assert all(math.isfinite(r["loss"]) for r in rs)
PY
# With --max-bad-steps 1 the run rolls back to step 10 instead; the NaN was
# transient, so the replay ends exactly where the uninterrupted run does.
run 1 "$tmp/rollback" --inject-fault nan@12 --max-bad-steps 1 --save-every 5
grep -q "rolled back to $tmp/rollback/checkpoints/step-00000010 after 1 consecutive bad steps" \
  "$tmp/rollback.log" || fail "no rollback"
same "$tmp/ref" "$tmp/rollback"

# A full disk during the checkpoint of step 10: reported, nothing committed,
# the run goes on and later checkpoints succeed.
run 1 "$tmp/full" --save-every 5 --inject-fault enospc@10
grep -q "warning: checkpoint step-00000010 not written (.*No space left on device.*); the previous checkpoint is still the latest" \
  "$tmp/full.log" || fail "enospc: not reported"
[ ! -e "$tmp/full/checkpoints/step-00000010" ] && [ ! -e "$tmp/full/checkpoints/step-00000010.tmp" ] ||
  fail "enospc: a partial checkpoint was left"
[ "$(cat "$tmp/full/checkpoints/latest")" = step-00000020 ] || fail "enospc: later saves failed"
same "$tmp/ref" "$tmp/full"

# A garbled `latest` falls back to the newest committed step.
echo "step-99999999" >"$tmp/one/checkpoints/latest"
"$ladder" "${train[@]}" --out "$tmp/one" --save-every 5 --steps 20 >"$tmp/latest.log" 2>&1 ||
  fail "garbled latest: run failed"
grep -q "warning: .*step-99999999.*; trying an earlier checkpoint" "$tmp/latest.log" ||
  fail "garbled latest: no warning"
grep -q "resumed from $tmp/one/checkpoints/step-00000020 at step 20" "$tmp/latest.log" ||
  fail "garbled latest: no fallback"
echo "step-00000020" >"$tmp/one/checkpoints/latest"

# A truncated manifest is refused by name.
manifest="$tmp/bad/checkpoints/step-00000020/manifest"
head -c 300 "$manifest" >"$manifest.cut" && mv "$manifest.cut" "$manifest"
err=$("$ladder" checkpoint inspect "$tmp/bad/checkpoints" 2>&1 >/dev/null)
grep -qF "$manifest" <<<"$err" || fail "truncated manifest not named: $err"

# inspect and convert a good one.
"$ladder" checkpoint inspect "$tmp/one/checkpoints" | grep -q "every file size and checksum verified" ||
  fail "inspect"
"$ladder" checkpoint convert "$tmp/one/checkpoints" "$tmp/converted" >/dev/null || fail "convert"
cmp -s "$tmp/converted/model.bin" "$tmp/ref/model.bin" || fail "converted model differs from the run's"
"$ladder" generate --model "$tmp/converted" --max-tokens 8 --seed 1 >/dev/null || fail "generate on a converted checkpoint"
# The tokenizer has no checksum in the manifest, but it must load: an empty
# one fails inspect and convert, and convert leaves its output as it was.
cp -r "$tmp/one/checkpoints" "$tmp/no_tokenizer"
: >"$tmp/no_tokenizer/$(cat "$tmp/no_tokenizer/latest")/tokenizer.bpe"
"$ladder" checkpoint inspect "$tmp/no_tokenizer" >/dev/null 2>&1 && fail "inspect passed an empty tokenizer"
cp "$tmp/converted/tokenizer.bpe" "$tmp/tokenizer.good"
"$ladder" checkpoint convert "$tmp/no_tokenizer" "$tmp/converted" >/dev/null 2>&1 &&
  fail "convert passed an empty tokenizer"
cmp -s "$tmp/converted/tokenizer.bpe" "$tmp/tokenizer.good" || fail "a failed convert changed its output"
# bench checkpoint removes its --dir afterwards, so it refuses one that exists.
mkdir -p "$tmp/keep" && echo precious >"$tmp/keep/notes"
"$ladder" bench checkpoint --config "$src/tests/parallel/equivalence.conf" --dir "$tmp/keep" >/dev/null 2>&1 &&
  fail "bench checkpoint took an existing --dir"
[ -f "$tmp/keep/notes" ] || fail "bench checkpoint removed an existing --dir"

# A straggler: rank 1 sleeps 100 ms after every step, so rank 0 waits about
# that long in each later step's data-parallel all-reduce.
"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" "${train[@]}" --out "$tmp/slow" --dp 2 --steps 4 \
  --inject-fault slow:1:100 >"$tmp/slow.log" 2>&1 || fail "straggler run"
python3 - "$tmp/slow/metrics.jsonl" <<'PY' || fail "straggler: rank 0 did not wait for rank 1"
import json, sys
# (after step 1, rank 0 waits in the rank report's gather instead)
waits = [json.loads(l)["comm"]["data"]["seconds"] for l in open(sys.argv[1])][2:]
sys.exit(0 if len(waits) == 2 and min(waits) > 0.08 else 1)
PY

# The checkpoint benchmark: both stalls, the ratio to the disk rate, and the
# memory checkpoint's save and restore against a disk restore.
bench=$(LADDER_MEM_CHECKPOINT_ROOT="$tmp/shm" "$ladder" bench checkpoint --config "$src/tests/parallel/equivalence.conf" --dir "$tmp/bench")
tail -1 <<<"$bench" | grep -qE '^\{"bytes":[0-9]+,"disk_bytes_per_s":[0-9]+,"sync_s":[0-9.]+,"async_stall_s":[0-9.]+,"async_total_s":[0-9.]+,"fraction":[0-9.]+,"mem_save_s":[0-9.]+,"mem_restore_s":[0-9.]+,"disk_restore_s":[0-9.]+\}$' ||
  fail "bench checkpoint: $bench"
[ ! -e "$tmp/bench" ] && [ -z "$(ls -A "$tmp/shm")" ] || fail "bench checkpoint left its scratch directory or memory area"

[ "$failures" -eq 0 ] && echo "checkpoints: exact resume, resharding, torn saves and corruption all pass" || exit 1
