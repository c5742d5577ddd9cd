#!/usr/bin/env bash
# The CUDA backend, run on the CUDA simulator, trains, generates and resumes
# as the CPU backend does:
#  - 20 steps of a small model: per-step losses and final weights within 1e-4
#    relative of the CPU run (the kernels sum in other orders than the CPU);
#  - the same under mpirun with dp2 x tp2 and with pp2 (the communicators run
#    on the simulator's device memory, which is host memory, through MPI);
#  - a checkpoint written on cuda-sim resumes on the CPU and one written on
#    the CPU resumes on cuda-sim, each ending within 1e-4 of the CPU run;
#  - greedy generation from the trained model gives the CPU's tokens, and
#    `ladder serve` answers two concurrent requests as on the CPU, with fp32
#    and with int8 weights and KV cache (paged attention, int8 kernels).
#   cuda_sim_model_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 20
       --log-every 20)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
compare() { python3 "$src/tests/parallel/compare_runs.py" "$1" "$2" 1e-4 || fail "$2 differs from $1"; }

OMP_NUM_THREADS=1 "$ladder" "${train[@]}" --device cpu --out "$tmp/cpu" >"$tmp/cpu.log" 2>&1 ||
  { cat "$tmp/cpu.log"; echo "FAIL: the CPU run"; exit 1; }
"$ladder" "${train[@]}" --device cuda-sim --out "$tmp/sim" >"$tmp/sim.log" 2>&1 ||
  { cat "$tmp/sim.log"; echo "FAIL: the cuda-sim run"; exit 1; }
grep -q "backend cuda-sim" "$tmp/sim.log" || fail "the run does not name the cuda-sim backend"
compare "$tmp/cpu" "$tmp/sim"

for layout in "4 --dp 2 --tp 2" "2 --pp 2 --microbatches 4"; do
  set -- $layout
  np=$1
  shift
  out="$tmp/sim_np${np}_$(echo "$*" | tr -d ' -')"
  if "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" "$@" --device cuda-sim \
      --out "$out" >"$out.log" 2>&1; then
    compare "$tmp/cpu" "$out"
  else
    cat "$out.log"; fail "mpirun -np $np ladder train $* --device cuda-sim"
  fi
done

# Cross-device resume: killed after step 12 (saved every 5), rerun on the
# other device, which resumes from step 10.
for pair in "cuda-sim cpu" "cpu cuda-sim"; do
  set -- $pair
  out="$tmp/resume_$1_$2"
  "$ladder" "${train[@]}" --device "$1" --out "$out" --save-every 5 --inject-fault kill:0@12 \
    >"$out.log" 2>&1 && fail "the run on $1 was not killed"
  "$ladder" "${train[@]}" --device "$2" --out "$out" --save-every 5 >>"$out.log" 2>&1 ||
    { cat "$out.log"; fail "resuming on $2"; continue; }
  grep -q "resumed from $out/checkpoints/step-00000010 at step 10" "$out.log" ||
    fail "$1 -> $2: no resume at step 10"
  compare "$tmp/cpu" "$out"
done

# Greedy generation: the same tokens on both devices.
gen=(generate --model "$tmp/cpu" --prompt "In the beginning" --max-tokens 24 --temperature 0)
"$ladder" "${gen[@]}" --device cpu >"$tmp/gen_cpu.txt" 2>/dev/null || fail "generate on cpu"
"$ladder" "${gen[@]}" --device cuda-sim >"$tmp/gen_sim.txt" 2>/dev/null || fail "generate on cuda-sim"
if ! cmp -s "$tmp/gen_cpu.txt" "$tmp/gen_sim.txt"; then
  fail "greedy generation differs: cpu '$(cat "$tmp/gen_cpu.txt")' vs cuda-sim '$(cat "$tmp/gen_sim.txt")'"
fi
[ -s "$tmp/gen_cpu.txt" ] || fail "generate printed nothing"

# serve: two concurrent greedy completions (one batch), their texts printed.
# The prompts are short so that a step never holds more than 16 tokens, how
# many the two requests share depending on timing: up to 16 tokens the CPU's
# matmuls compute each token the same way whatever the batch (above, it
# switches to sgemm, and int8 to fp32 activations), so the answers cannot
# depend on when the second request arrives.
serve_answers() {
  local log="$tmp/serve.log" port= server curls=() i=0
  rm -f "$log" "$log".*
  "$ladder" serve --model "$tmp/cpu" --port 0 "$@" >/dev/null 2>"$log" &
  server=$!
  for _ in $(seq 1 300); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  [ -n "$port" ] || { kill -KILL $server 2>/dev/null; echo "no server: $(cat "$log")"; return 1; }
  for prompt in "In the" "God"; do
    i=$((i + 1))
    curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"$prompt\", \"max_tokens\": 12, \"temperature\": 0}" >"$log.$i" &
    curls+=($!)
  done
  wait "${curls[@]}"
  kill -TERM $server
  wait $server
  python3 -c 'import json, sys
for path in sys.argv[1:]: print(json.load(open(path))["choices"][0]["text"])' "$log".[0-9]*
}
for weights in "--weights fp32 --kv fp32" "--weights int8 --kv int8"; do
  cpu=$(serve_answers --device cpu $weights) || fail "serve on cpu ($weights): $cpu"
  sim=$(serve_answers --device cuda-sim $weights) || fail "serve on cuda-sim ($weights): $sim"
  [ -n "$cpu" ] && [ "$cpu" = "$sim" ] || fail "serve ($weights): cpu '$cpu' vs cuda-sim '$sim'"
done

[ "$failures" -eq 0 ] && echo "cuda-sim trains, resumes and generates as the CPU does" || exit 1
