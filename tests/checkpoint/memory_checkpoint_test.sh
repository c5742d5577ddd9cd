#!/usr/bin/env bash
# In-memory checkpoints end to end: 4 ranks (tp2 x pp2) on two simulated
# nodes (LADDER_RANKS_PER_NODE=2), a memory checkpoint every 2 steps and a
# disk one every 10, a rank killed after step 13. Each rerun must end with
# losses and model.bin bitwise equal to the uninterrupted run:
#  - killed rank 1: the rerun restores step 12 from its own node's memory
#  - killed rank 3 and its node's area deleted (a lost node): step 12 from
#    the replicas on the next node
#  - killed rank 3 and both copies of its shard corrupted: the rerun says
#    why and restores step 10 from disk
#   memory_checkpoint_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/../parallel/training_run.sh"
export LADDER_RANKS_PER_NODE=2 LADDER_MEM_CHECKPOINT_ROOT="$tmp/shm"
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20
       --log-every 20 --tp 2 --pp 2 --microbatches 2)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
launch() {  # OUT FLAGS...
  local out=$1
  shift
  "$mpirun" "${mpirun_args[@]}" -x LADDER_RANKS_PER_NODE -x LADDER_MEM_CHECKPOINT_ROOT -np 4 \
    "$ladder" "${train[@]}" --out "$out" "$@" >>"$out.log" 2>&1
}
run() { launch "$@" || { fail "$* (see below)"; cat "$1.log"; }; }
crash() { ! launch "$@" || fail "$* survived its fault"; }
same() {  # A B: bitwise-identical losses and model.bin
  python3 - "$1" "$2" <<'PY' || fail "$1 and $2 differ"
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f"{d}/metrics.jsonl")] for d in sys.argv[1:])
sys.exit(0 if a == b and len(a) == 20 else 1)
PY
  cmp -s "$1/model.bin" "$2/model.bin" || fail "$1/model.bin and $2/model.bin differ"
}
saves=(--mem-save-every 2 --save-every 10)
area() { echo "$LADDER_MEM_CHECKPOINT_ROOT"/ladder-*; }  # the one job area left by a crash
restored() {  # OUT LINE: the rerun's resume line and its restore event
  grep -qF "$2" "$1.log" || { fail "$1: no line '$2'"; cat "$1.log"; }
}

run "$tmp/ref"

# A killed rank: its node's memory still holds step 12 and 8 (two kept; 10
# went to disk instead).
crash "$tmp/own" "${saves[@]}" --inject-fault kill:1@13
a=$(area)
for f in latest step-00000012/manifest step-00000012/rank-00001.bin step-00000012/replica-rank-00003.bin \
         step-00000008/rank-00000.bin; do
  [ -f "$a/node-0/$f" ] || fail "node 0's area lacks $f"
done
[ "$(cat "$a/node-1/latest")" = step-00000012 ] || fail "node 1's latest is not step 12"
[ ! -e "$a/node-0/step-00000006" ] || fail "node 0 keeps more than two memory checkpoints"
run "$tmp/own" "${saves[@]}"
restored "$tmp/own" "resumed from memory step-00000012 (own node's copies) at step 12"
grep -q '"kind":"restore","detail":"memory step-00000012 (own node' "$tmp/own/events.jsonl" ||
  fail "no memory restore event"
[ "$(grep -c '"kind":"mem_save"' "$tmp/own/events.jsonl")" -eq 8 ] ||
  fail "expected 8 mem_save events (steps 2-8, 12, 14-18 minus disk steps, before and after the kill)"
same "$tmp/ref" "$tmp/own"
[ -z "$(ls -A "$LADDER_MEM_CHECKPOINT_ROOT")" ] || fail "a finished run left its memory area"

# A lost node: rank 3 killed and node 1's memory gone with it.
crash "$tmp/node" "${saves[@]}" --inject-fault kill:3@13
rm -rf "$(area)/node-1"
run "$tmp/node" "${saves[@]}"
restored "$tmp/node" "resumed from memory step-00000012 (2 shards from the next node's replicas) at step 12"
same "$tmp/ref" "$tmp/node"

# Both copies of rank 3's shard corrupt: memory is refused, disk is used.
crash "$tmp/bad" "${saves[@]}" --inject-fault kill:3@13
a=$(area)
for f in "$a/node-1/step-00000012/rank-00003.bin" "$a/node-0/step-00000012/replica-rank-00003.bin"; do
  printf '\377' | dd of="$f" bs=1 seek=200 conv=notrunc status=none
done
run "$tmp/bad" "${saves[@]}"
restored "$tmp/bad" "not restoring from memory: rank 3's shard of memory step-00000012 has no intact copy (its node's and the next node's are missing or corrupt); restoring from disk"
restored "$tmp/bad" "resumed from $tmp/bad/checkpoints/step-00000010 at step 10"
same "$tmp/ref" "$tmp/bad"

[ "$failures" -eq 0 ] && echo "memory checkpoints: own copy, neighbour's copy and disk fallback all bitwise equal" || exit 1
