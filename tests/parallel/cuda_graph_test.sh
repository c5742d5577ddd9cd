#!/usr/bin/env bash
# --cuda-graph (Gpt::UseGraphs) on the CUDA simulator: each microbatch's
# forward and backward recorded once and replayed give the losses and final
# weights of the same run without graphs, bit for bit:
#  - one process, fp32: 2 graphs recorded (forward, backward) after the
#    first step's eager warm-up, replayed in each later step (validation
#    passes stay eager);
#  - bf16 with whole-layer recomputation, and with optimizer offload;
#  - dp2 with --overlap-grad-reduce (the last microbatch's backward, which
#    reduces buckets as it goes, runs eagerly) and pp2 (1F1B, 4 microbatches,
#    a graph per activation slot);
#  - refusals, each a one-line error and exit code 2: the CPU backend,
#    tensor parallelism, parameter offload;
#  - decoding: `ladder generate --cuda-graph` (decode steps replayed) prints
#    the eager run's text, greedy and sampled, fp32 and int8 weights and KV,
#    and int8 with bf16 activations (W8A16); on the CPU backend it is
#    refused, and so are --activations bf16 on the CPU, with fp32 weights
#    and --activations of another value.
#   cuda_graph_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 6
       --log-every 6 --device cuda-sim)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME NP FLAGS...: the run without and with --cuda-graph, compared
# exactly; prints the graph counts line.
run() {
  local name=$1 np=$2
  shift 2
  local launch=("$ladder")
  [ "$np" -gt 1 ] && launch=("$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder")
  for mode in eager graph; do
    local extra=()
    [ $mode = graph ] && extra=(--cuda-graph)
    "${launch[@]}" "${train[@]}" "$@" "${extra[@]}" --out "$tmp/$name-$mode" \
      >"$tmp/$name-$mode.log" 2>&1 || { cat "$tmp/$name-$mode.log"; fail "$name ($mode)"; return; }
  done
  python3 "$src/tests/parallel/compare_runs.py" "$tmp/$name-eager" "$tmp/$name-graph" 0 >&2 ||
    fail "$name: --cuda-graph changes the results"
  grep "cuda graphs" "$tmp/$name-graph.log"
}

# 6 steps of 1 microbatch: step 1 runs eagerly, step 2 records, steps 2-6
# replay the forward and the backward.
counts=$(run fp32 1)
echo "$counts"
[ "$counts" = "cuda graphs (rank 0): 2 recorded, 10 passes replayed" ] ||
  fail "fp32: expected 2 graphs replayed 10 times, got '$counts'"
for flags in "--precision bf16 --recompute layer" "--offload optimizer"; do
  counts=$(run "$(echo "$flags" | tr -d ' -')" 1 $flags)
  echo "$counts"
  [ "$counts" = "cuda graphs (rank 0): 2 recorded, 10 passes replayed" ] || fail "$flags: '$counts'"
done
# dp2, 4 sequences a rank in one microbatch: its backward is the step's
# last and reduces as it goes, so only the forward replays.
counts=$(run dp2 2 --dp 2 --overlap-grad-reduce)
echo "$counts"
[ "$counts" = "cuda graphs (rank 0): 1 recorded, 5 passes replayed" ] || fail "dp2: '$counts'"
counts=$(run pp2 2 --pp 2 --microbatches 4)
echo "$counts"
replays=$(echo "$counts" | sed -n 's/.*, \([0-9]*\) passes replayed/\1/p')
[ "${replays:-0}" -gt 0 ] || fail "pp2: nothing replayed ('$counts')"

# refuse NAME NP EXPECTED FLAGS...
refuse() {
  local name=$1 np=$2 want=$3
  shift 3
  local launch=("$ladder")
  [ "$np" -gt 1 ] && launch=("$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder")
  "${launch[@]}" "${train[@]}" --cuda-graph "$@" --out "$tmp/$name" >"$tmp/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 2 ] || fail "$name: exit code $rc, not 2"
  grep -qF "ladder train: --cuda-graph: cannot record graphs: $want" "$tmp/$name.log" ||
    { cat "$tmp/$name.log"; fail "$name: no error naming '$want'"; }
  [ -e "$tmp/$name/model.bin" ] && fail "$name: a model was written"
}
refuse cpu 1 "the cpu backend has none (cuda and cuda-sim do)" --device cpu
refuse tp2 2 "tensor parallelism calls the communicator between the ops" --tp 2
refuse offload 1 "parameter offload streams each layer in between the ops" --offload params

# Decoding with graphs: the model trained above, 40 new tokens.
for opts in "--temperature 0" "--temperature 0.8 --seed 3" "--temperature 0 --weights int8 --kv int8" \
  "--temperature 0 --weights int8 --kv int8 --activations bf16"; do
  gen=(generate --model "$tmp/fp32-eager" --prompt "In the beginning" --max-tokens 40 --device cuda-sim
       $opts)
  "$ladder" "${gen[@]}" >"$tmp/gen_eager.txt" 2>"$tmp/gen.log" || { cat "$tmp/gen.log"; fail "generate $opts"; }
  "$ladder" "${gen[@]}" --cuda-graph >"$tmp/gen_graph.txt" 2>"$tmp/gen.log" ||
    { cat "$tmp/gen.log"; fail "generate --cuda-graph $opts"; }
  [ -s "$tmp/gen_eager.txt" ] || fail "generate $opts printed nothing"
  replays=$(sed -n 's/^cuda graphs: [0-9]* recorded, \([0-9]*\) decode steps replayed$/\1/p' "$tmp/gen.log")
  [ "${replays:-0}" -ge 30 ] || fail "generate --cuda-graph $opts: ${replays:-no} decode steps replayed"
  cmp -s "$tmp/gen_eager.txt" "$tmp/gen_graph.txt" ||
    fail "generate $opts: --cuda-graph gives '$(cat "$tmp/gen_graph.txt")', eager '$(cat "$tmp/gen_eager.txt")'"
done
"$ladder" generate --model "$tmp/fp32-eager" --prompt "In" --device cpu --cuda-graph \
  >"$tmp/gen_cpu.txt" 2>"$tmp/gen.log"
rc=$?
[ $rc -eq 2 ] || fail "generate --cuda-graph on the CPU: exit code $rc, not 2"
grep -qF "ladder generate: --cuda-graph: cannot record graphs: the cpu backend has none" "$tmp/gen.log" ||
  { cat "$tmp/gen.log"; fail "generate --cuda-graph on the CPU: no error naming the backend"; }
# refuse_activations WHY EXPECTED FLAGS...: generate exits 2 with EXPECTED.
refuse_activations() {
  local why=$1 expected=$2
  shift 2
  "$ladder" generate --model "$tmp/fp32-eager" --prompt "In" --max-tokens 2 "$@" \
    >"$tmp/gen_act.txt" 2>"$tmp/gen.log"
  local rc=$?
  [ $rc -eq 2 ] || fail "--activations $why: exit code $rc, not 2"
  grep -qF "ladder generate: $expected" "$tmp/gen.log" ||
    { cat "$tmp/gen.log"; fail "--activations $why: no error '$expected'"; }
}
refuse_activations "on the CPU" "--activations bf16: bf16 activations need a device backend" \
  --device cpu --weights int8 --activations bf16
refuse_activations "with fp32 weights" \
  "--activations bf16: bf16 activations need int8 weights (the W8A16 matmul); this model holds fp32" \
  --device cuda-sim --activations bf16
refuse_activations "fp16" "--activations: expected fp32 or bf16, got 'fp16'" \
  --device cuda-sim --weights int8 --activations fp16

[ $failures -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "PASS"
