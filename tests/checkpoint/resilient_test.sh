#!/usr/bin/env bash
# scripts/train_resilient.sh end to end, against an uninterrupted dp2 x tp2 x
# pp2 run of tests/parallel/equivalence.conf (20 steps):
#  - for a few seeds, one randomly chosen rank of the supervised job is
#    killed (SIGKILL) at a random step in [2, 15]; mpirun tears the job down,
#    the supervisor restarts it once, ladder resumes from its last checkpoint
#    (or starts over when the kill came before the first one) and the run ends
#    with bitwise-identical losses and model.bin
#  - a command that keeps failing is restarted --max-restarts times and the
#    supervisor gives up with its exit code; exit 2 (bad input, here ladder
#    under mpirun with a missing config) is never restarted
#   resilient_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# shellcheck source=SCRIPTDIR/../parallel/training_run.sh
source "$(dirname "$0")/../parallel/training_run.sh"
supervisor=$src/scripts/train_resilient.sh
# Kills at steps 2 (before the first checkpoint: the rerun starts over), 9 (the
# step of a checkpoint, whose save it may hit) and 15.
seeds=(10 1 3)
layout=(--dp 2 --tp 2 --pp 2 --microbatches 2)
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20
       --log-every 20 "${layout[@]}")
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
same() {  # A B: bitwise-identical losses (20 of them) and model.bin
  python3 - "$1" "$2" <<'PY' || fail "$1 and $2: the losses differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:])
sys.exit(0 if a == b and len(a) == 20 else 1)
PY
  cmp -s "$1/model.bin" "$2/model.bin" || fail "$1/model.bin and $2/model.bin differ"
}
last_step() {  # METRICS: the step of its last line, 0 if none (builtins only: it is polled)
  local line="" last="" step=0
  if [ -f "$1" ]; then
    while IFS= read -r line || [ -n "$line" ]; do last=$line; done <"$1"
  fi
  [[ $last =~ \"step\":([0-9]+) ]] && step=${BASH_REMATCH[1]}
  echo "$step"
}
# shellcheck disable=SC2001,SC2016  # a sed expression, quoted on purpose
ere_quote() { sed 's/[][\.|$(){}?+*^]/\\&/g' <<<"$1"; }

# The reference: uninterrupted, no checkpoints.
"$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --out "$tmp/ref" >"$tmp/ref.log" 2>&1 ||
  { cat "$tmp/ref.log"; echo "FAIL: the reference run"; exit 1; }

for seed in "${seeds[@]}"; do
  RANDOM=$seed
  k=$((2 + RANDOM % 14))
  victim=$((RANDOM % 8))
  out=$tmp/seed$seed
  failed_before=$failures
  bash "$supervisor" --max-restarts 3 --backoff 1 -- \
    "$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --save-every 3 --out "$out" \
    >"$out.log" 2>&1 &
  sup=$!
  # The ranks' command lines start with ladder's path and end with --out OUT
  # (mpirun's and the supervisor's start with their own).
  pattern="^$(ere_quote "$ladder") train .* --out $(ere_quote "$out")\$"
  pids=()
  for _ in $(seq 1 600); do
    mapfile -t pids < <(pgrep -f -- "$pattern")
    [ "${#pids[@]}" -eq 8 ] && break
    sleep 0.05
  done
  if [ "${#pids[@]}" -ne 8 ]; then
    fail "seed $seed: found ${#pids[@]} ladder ranks, expected 8"
    kill -TERM "$sup" 2>/dev/null; wait "$sup"; cat "$out.log"
    continue
  fi
  # Steps take about 10 ms: poll with builtins, then kill at once.
  for _ in $(seq 1 3000); do
    [ "$(last_step "$out/metrics.jsonl")" -ge "$k" ] && break
    sleep 0.01
  done
  seen=$(last_step "$out/metrics.jsonl")
  if ! kill -9 "${pids[$victim]}" 2>/dev/null; then
    fail "seed $seed: rank process ${pids[$victim]} was gone before the kill (step $seen)"
  fi
  latest=$(cat "$out/checkpoints/latest" 2>/dev/null || echo none)
  code=0
  wait "$sup" || code=$?
  echo "seed $seed: killed pid ${pids[$victim]} (index $victim of 8) at step $seen (wanted $k," \
    "latest checkpoint $latest); supervisor exit $code"
  [ "$code" -eq 0 ] || fail "seed $seed: the supervisor exited $code"
  restarts=$(grep -c '^train_resilient: attempt 1 failed (exit [0-9]*); restarting in 1s (1 of 3 restarts)$' \
    "$out.log")
  if [ "$restarts" -ne 1 ] || [ "$(grep -c 'restarting in' "$out.log")" -ne 1 ]; then
    fail "seed $seed: expected exactly one restart in the supervisor's log"
  fi
  grep -q '^train_resilient: attempt 2 succeeded after 1 restart(s)$' "$out.log" ||
    fail "seed $seed: no success after the restart"
  if [ "$latest" != none ]; then
    # A checkpoint was committed before the kill: the rerun resumes from it
    # (or from a later one, committed while the job was torn down).
    resumed=$(grep -o "resumed from $out/checkpoints/step-[0-9]* at step [0-9]*" "$out.log")
    from=${resumed##* }
    if [ -z "$resumed" ]; then
      fail "seed $seed: no 'resumed from' line although $latest was committed"
    elif [ "$from" -lt "$((10#${latest#step-}))" ]; then
      fail "seed $seed: resumed at step $from, before the committed $latest"
    fi
  fi
  same "$tmp/ref" "$out"
  [ "$failures" -eq "$failed_before" ] || { echo "--- $out.log"; cat "$out.log"; }
done

# Keeps failing: --max-restarts N restarts, then it gives up with the exit code.
err=$(bash "$supervisor" --max-restarts 0 -- false 2>&1)
code=$?
[ "$code" -eq 1 ] || fail "--max-restarts 0 -- false: exit $code, expected 1"
[ "$err" = "train_resilient: giving up after 0 restarts (last exit 1)" ] ||
  fail "--max-restarts 0 -- false: unexpected output: $err"
err=$(bash "$supervisor" --max-restarts 2 --backoff 0 -- bash -c "echo run >>'$tmp/runs3'; exit 3" 2>&1)
code=$?
[ "$code" -eq 3 ] || fail "a command exiting 3: exit $code, expected 3"
[ "$(wc -l <"$tmp/runs3")" -eq 3 ] || fail "a command exiting 3 ran $(wc -l <"$tmp/runs3") times, expected 3"
if ! grep -q "restarting in 0s (2 of 2 restarts)" <<<"$err" ||
   ! grep -q "giving up after 2 restarts (last exit 3)" <<<"$err"; then
  fail "a command exiting 3: unexpected output: $err"
fi

# Exit 2 is bad input: never restarted.
err=$(bash "$supervisor" --backoff 0 -- bash -c "echo run >>'$tmp/runs2'; exit 2" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "a command exiting 2: exit $code, expected 2"
[ "$(wc -l <"$tmp/runs2")" -eq 1 ] || fail "a command exiting 2 was restarted"
grep -q "not restarting" <<<"$err" || fail "a command exiting 2: no reason given: $err"
err=$(bash "$supervisor" --backoff 0 -- "$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" train \
  --config "$tmp/missing.conf" --out "$tmp/missing" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "ladder with a missing config under mpirun: exit $code, expected 2"
grep -q "restarting in" <<<"$err" && fail "ladder with a missing config was restarted"

[ "$failures" -eq 0 ] && echo "resilient: ${#seeds[@]} killed ranks restarted to bitwise-identical runs;" \
  "give-up and exit-2 rules hold" || exit 1
