#!/usr/bin/env bash
# scripts/train_resilient.sh's elastic mode, on one machine with simulated
# nodes (LADDER_RANKS_PER_NODE):
#  - a dp2 x tp2 x pp2 run of tests/parallel/equivalence.conf on two nodes of
#    4 ranks loses node 1 for good (kill-node: its line leaves the nodes file
#    after step 12, its ranks die in step 13); the supervisor restarts on the
#    4 ranks left as dp1 x tp2 x pp2 (4 microbatches: the global batch is kept),
#    resumes from the step-10 checkpoint with resharding and finishes; its
#    losses after the restart are within 1e-5 of a run that used dp1 x tp2 x
#    pp2 from the same checkpoint; events.jsonl tells both layouts and the
#    restart
#  - a dp2 x tp2 run on two nodes of 2 ranks whose rank 2 is slow, with
#    --straggler-action restart-without, checkpoints, exits 75 naming node 1;
#    the supervisor deletes that node and the run ends on the 2 ranks left
#  - a job started on one node of two grows back when the other is listed
#    again: the supervisor sends SIGUSR1, the job checkpoints and exits 75,
#    and the restart in dp2 x tp2 x pp2 matches that layout resumed from the
#    same checkpoint within 1e-5
#  - bad elastic usage is refused with one line, exit 2
#   elastic_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# shellcheck source=SCRIPTDIR/../parallel/training_run.sh
source "$(dirname "$0")/../parallel/training_run.sh"
supervisor=$src/scripts/train_resilient.sh
train=(train "${stated_peak[@]}" --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20
       --log-every 20)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# ---- a node lost for good --------------------------------------------------
printf 'node-a\nnode-b\n' >"$tmp/nodes"
bash "$supervisor" --max-restarts 2 --backoff 0 --nodes-file "$tmp/nodes" --ranks-per-node 4 -- \
  "$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --dp 2 --tp 2 --pp 2 \
  --microbatches 2 --save-every 5 --inject-fault kill-node:1@12 --out "$tmp/lost" \
  >"$tmp/lost.log" 2>&1 || fail "the supervised run exited $?"
[ "$(cat "$tmp/nodes")" = node-a ] || fail "the nodes file still lists: $(cat "$tmp/nodes")"
grep -q "^resumed from $tmp/lost/checkpoints/step-0*10 at step 10$" "$tmp/lost.log" ||
  fail "the restarted job did not resume from step 10"
grep -q '^layout: dp 1 x tp 2 x pp 2 (4 ranks), ZeRO-0, 4 microbatches of 2 sequences' \
  "$tmp/lost.log" || fail "the restarted job did not run as dp1 x tp2 x pp2"
# The same checkpoint, resumed in that layout directly.
"$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --dp 1 --tp 2 --pp 2 \
  --microbatches 4 --resume "$tmp/lost/checkpoints/step-00000010" --out "$tmp/direct" \
  >"$tmp/direct.log" 2>&1 || fail "the direct dp1 x tp2 x pp2 run failed"
python3 - "$tmp/lost" "$tmp/direct" <<'PY' || fail "the elastic run differs from the direct one"
import json, sys
lost, direct = ({r["step"]: r for r in map(json.loads, open(f"{d}/metrics.jsonl"))}
                for d in sys.argv[1:])
assert sorted(lost) == list(range(1, 21)), sorted(lost)
assert sorted(direct) == list(range(11, 21)), sorted(direct)
for s in range(11, 21):
    assert abs(lost[s]["loss"] - direct[s]["loss"]) <= 1e-5, (s, lost[s]["loss"], direct[s]["loss"])
    assert len(lost[s]["rank_seconds"]) == 4, lost[s]
assert len(lost[10]["rank_seconds"]) == 8, lost[10]
events = [json.loads(l) for l in open(f"{sys.argv[1]}/events.jsonl")]
kinds = [(e["kind"], e["step"]) for e in events if e["kind"] in ("layout", "restart", "restore")]
assert kinds == [("layout", 0), ("restart", 10), ("layout", 10), ("restore", 10)], kinds
layouts = [e["detail"] for e in events if e["kind"] == "layout"]
assert layouts[0].startswith("dp 2 x tp 2 x pp 2, 2 microbatches, 8 ranks on 2 node(s)"), layouts
assert layouts[1] == "dp 1 x tp 2 x pp 2, 4 microbatches, 4 ranks on 1 node(s): node-a", layouts
PY

# ---- a straggler left out --------------------------------------------------
printf 'node-a\nnode-b\n' >"$tmp/nodes2"
bash "$supervisor" --max-restarts 1 --backoff 0 --nodes-file "$tmp/nodes2" --ranks-per-node 2 -- \
  "$mpirun" "${mpirun_args[@]}" -np 4 "$ladder" "${train[@]}" --steps 8 --dp 2 --tp 2 \
  --microbatches 1 --inject-fault slow:2:300 --straggler-window 3 --straggler-factor 4 \
  --straggler-action restart-without --out "$tmp/slow" >"$tmp/slow.log" 2>&1 ||
  fail "the supervised straggler run exited $?"
[ "$(cat "$tmp/nodes2")" = node-a ] || fail "node-b was not left out: $(cat "$tmp/nodes2")"
grep -q '^train_resilient: attempt 1 stopped to leave out straggling node node-b; restarting at once' \
  "$tmp/slow.log" || fail "no restart without node-b"
[ ! -e "$tmp/slow/leave_out.json" ] || fail "leave_out.json was left behind"
python3 - "$tmp/slow" <<'PY' || fail "the straggler run's records are wrong"
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert [r["step"] for r in recs] == list(range(1, 9)), [r["step"] for r in recs]
assert recs[4]["straggler"]["rank"] == 2 and len(recs[4]["rank_seconds"]) == 4, recs[4]
assert all(len(r["rank_seconds"]) == 2 for r in recs[5:]), recs[5:]
events = [json.loads(l) for l in open(f"{d}/events.jsonl")]
kinds = [(e["kind"], e["step"]) for e in events if e["kind"] != "save"]
assert kinds == [("layout", 0), ("start", 0), ("straggler", 5), ("restart", 5), ("layout", 5),
                 ("start", 0), ("restore", 5), ("end", 8)], kinds
PY
[ -f "$tmp/slow/model.bin" ] || fail "the straggler run did not finish"

# ---- nodes that come back --------------------------------------------------
# The job starts on node-a alone (dp1 x tp2 x pp2); once node-b is listed
# the supervisor asks it to stop (SIGUSR1), and it grows back to dp2 x tp2 x
# pp2 from the checkpoint it wrote then. Rank 0 sleeps 100 ms a step so the
# first attempt outlasts the supervisor's polling.
printf 'node-a\n' >"$tmp/nodes3"
bash "$supervisor" --max-restarts 1 --backoff 0 --nodes-file "$tmp/nodes3" --ranks-per-node 4 -- \
  "$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --steps 30 --dp 2 --tp 2 --pp 2 \
  --microbatches 2 --save-every 10 --keep 5 --inject-fault slow:0:100 --straggler-factor 1000 \
  --out "$tmp/grow" >"$tmp/grow.log" 2>&1 &
sup=$!
for _ in $(seq 1 600); do
  [ -f "$tmp/grow/metrics.jsonl" ] && [ "$(wc -l <"$tmp/grow/metrics.jsonl")" -ge 3 ] && break
  sleep 0.1
done
echo node-b >>"$tmp/nodes3"
wait "$sup" || fail "the growing run exited $?"
grep -q '^train_resilient: attempt 1 stopped to grow onto the live nodes; restarting at once' \
  "$tmp/grow.log" || fail "the job was not restarted to grow"
from=$(grep -o "^resumed from $tmp/grow/checkpoints/step-[0-9]*" "$tmp/grow.log" | head -1)
from=${from#resumed from }
if [ -z "$from" ]; then
  fail "the grown job did not resume"
else
  "$mpirun" "${mpirun_args[@]}" -np 8 "$ladder" "${train[@]}" --steps 30 --dp 2 --tp 2 --pp 2 \
    --microbatches 2 --resume "$from" --out "$tmp/grown" >"$tmp/grown.log" 2>&1 ||
    fail "the direct dp2 x tp2 x pp2 run failed"
  python3 - "$tmp/grow" "$tmp/grown" <<'PY' || fail "the grown run differs from the direct one"
import json, sys
grow, direct = ({r["step"]: r for r in map(json.loads, open(f"{d}/metrics.jsonl"))}
                for d in sys.argv[1:])
assert sorted(grow) == list(range(1, 31)), sorted(grow)
first = min(direct)
assert 3 <= first - 1 < 30 and sorted(direct) == list(range(first, 31)), sorted(direct)
assert len(grow[first - 1]["rank_seconds"]) == 4 and len(grow[30]["rank_seconds"]) == 8
for s in range(first, 31):
    assert abs(grow[s]["loss"] - direct[s]["loss"]) <= 1e-5, (s, grow[s]["loss"], direct[s]["loss"])
layouts = [e["detail"] for e in map(json.loads, open(f"{sys.argv[1]}/events.jsonl"))
           if e["kind"] == "layout"]
assert [l.split(",")[0] for l in layouts] == ["dp 1 x tp 2 x pp 2", "dp 2 x tp 2 x pp 2"], layouts
PY
fi

# ---- usage -------------------------------------------------------------------
expect_usage() {  # MESSAGE ARGS...: exit 2 and MESSAGE as the first line
  local message=$1 err code=0
  shift
  err=$(bash "$supervisor" "$@" 2>&1) || code=$?
  [ "$code" -eq 2 ] || fail "$*: exit $code, expected 2"
  [ "$(head -1 <<<"$err")" = "train_resilient: $message" ] || fail "$*: unexpected output: $err"
}
expect_usage "--nodes-file and --ranks-per-node go together" --nodes-file "$tmp/nodes" -- true
expect_usage "elastic mode needs COMMAND as 'MPIRUN ... -np N ... LADDER train ...'" \
  --nodes-file "$tmp/nodes" --ranks-per-node 4 -- "$ladder" train --config c --out o
err=$(bash "$supervisor" --backoff 0 -- bash -c 'exit 75' 2>&1)
code=$?
[ "$code" -eq 75 ] || fail "exit 75 without elastic mode: exit $code, expected 75"
grep -q "needs --nodes-file; not restarting" <<<"$err" || fail "exit 75 without elastic mode: $err"

if [ "$failures" -ne 0 ]; then
  for f in lost direct slow grow grown; do echo "--- $f.log"; cat "$tmp/$f.log"; done
  exit 1
fi
echo "elastic: a lost node continued as dp1 x tp2 x pp2 and a returned one grew back to dp2," \
  "both within 1e-5 of the direct runs; a straggler's node left out; usage errors refused"
