#!/usr/bin/env bash
# GPU check, one call on a machine with an NVIDIA GPU:
#   scripts/gpu_check.sh [BUILD_DIR]
# - With gpu-bundle/ present (scripts/gpu_bundle.sh made it on a build
#   machine: ladder, the GPU tests and their libraries, run through
#   gpu-bundle/run), it uses that and builds nothing: for a machine that has
#   the CUDA image but none of ladder's packages and no network.
# - Otherwise it installs the Debian packages if missing and builds
#   BUILD_DIR (default build-gpu) with -Dcuda=enabled, as before.
# Then: nvidia-smi; `ladder version`; every *_gpu_test (each kernel against
# the CPU reference, the cuda instances of the op tests that run on every
# backend, and the NCCL communicator); the equivalence model
# (tests/parallel/equivalence.conf, 20 steps on a small generated corpus)
# trained with --device cuda and with --device cpu, compared by
# tests/parallel/compare_runs.py within 1e-4; `ladder bench ops --device
# cuda`, every backend op timed against its floor (its table printed before
# the summary, its TSV copied to $OUT/bench_ops.tsv); the same model in
# bf16 mixed precision against the CPU, and GPT-2 124M's bf16 training
# throughput against the bf16 GEMM ceiling (`ladder bench train`); GPT-2
# 124M's int8 serving, batch-1 decode against the HBM bound (`ladder bench
# decode`) and 32 streams against one (`ladder bench serve`); CUDA graphs:
# the equivalence model trained with --cuda-graph bitwise the eager cuda
# run, a small model's step time with graphs over without, and the batch-1
# decode again with --cuda-graph; W8A16: the batch-1 decode with bf16
# activations (and graphs). It ends with a summary
# table (test, result, seconds), also written to $OUT/gpu_check_summary.txt
# when $OUT is set (with the logs of what failed under $OUT/gpu_check_logs/).
# Each test has 90 s, each training run and the benchmark 120 s
# (GPU_CHECK_TEST_TIMEOUT, GPU_CHECK_TRAIN_TIMEOUT, GPU_CHECK_BENCH_TIMEOUT),
# so that a hang cannot eat a short device loan.
# Exit 1 if anything failed, or if a GPU test skipped although nvidia-smi
# sees a GPU (a driver/runtime mismatch, a missing device node, ...). Without
# a GPU the tests report SKIP, the CUDA run and the benchmark are skipped,
# and it exits 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build_dir=${1:-build-gpu}
test_timeout=${GPU_CHECK_TEST_TIMEOUT:-90}
train_timeout=${GPU_CHECK_TRAIN_TIMEOUT:-120}
bench_timeout=${GPU_CHECK_BENCH_TIMEOUT:-120}
start_all=$(date +%s.%N)

rows=()      # "name|result|seconds"
failed=0
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
row() { rows+=("$1|$2|$3"); case $2 in FAIL*) failed=1 ;; esac; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }
keep_log() {  # a failed step's log, for $OUT
  if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT/gpu_check_logs" && cp "$2" "$OUT/gpu_check_logs/$1.log"
  fi
}
# run_bench ROW LOG ARGS...: `ladder ARGS` under the bench timeout, its
# output in $logs/LOG.log, t0 set to its start. On failure: the log's tail,
# the log kept, ROW's FAIL row, and status 1 (the caller adds the row of a
# success from the log).
run_bench() {
  local name=$1 log=$2
  shift 2
  t0=$(date +%s.%N)
  timeout "$bench_timeout" "${ladder_cmd[@]}" "$@" >"$logs/$log.log" 2>&1 && return 0
  tail -n 30 "$logs/$log.log"; keep_log "$log" "$logs/$log.log"
  row "$name" "FAIL (exit or timeout $bench_timeout s)" "$(since "$t0")"
  return 1
}
# json_number LOG KEY: the number after "KEY": in $logs/LOG.log.
json_number() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" "$logs/$1.log"; }

echo "== nvidia-smi"
gpus=0
t0=$(date +%s.%N)
if command -v nvidia-smi >/dev/null && nvidia-smi; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
echo "gpu_check: nvidia-smi sees $gpus GPU(s)"
row nvidia-smi "$gpus GPU(s)" "$(since "$t0")"

# run PROGRAM ARGS: ladder or a test, from the bundle or the build.
if [ -x gpu-bundle/run ]; then
  echo "== gpu-bundle/ (no build): $(head -1 gpu-bundle/MANIFEST 2>/dev/null)"
  t0=$(date +%s.%N)
  bundle_dir=$(gpu-bundle/run --unpack) || { echo "gpu_check: FAIL: gpu-bundle/ does not unpack"; exit 1; }
  # OpenBLAS's kernels, chosen once as ladder would (gpu-bundle/run explains).
  eval "$("$bundle_dir/run" --blas-env)"
  run() { "$bundle_dir/run" "$@"; }
  ladder_cmd=("$bundle_dir/run" ladder)
  run_test() { timeout "$test_timeout" "$bundle_dir/run" "$1"; }
  tests=$(cd "$bundle_dir/bin" && for f in *_gpu_test; do [ -x "$f" ] && echo "$f"; done)
  row "unpack gpu-bundle" ok "$(since "$t0")"
else
  # Build dependencies (Debian packages), installed only if missing.
  source scripts/lib/packages.sh
  install_missing_packages meson ninja-build g++ pkg-config libabsl-dev libgtest-dev libgmock-dev \
    libopenblas-openmp-dev libcpp-httplib-dev nlohmann-json3-dev libicu-dev curl
  echo "== build ($build_dir, -Dcuda=enabled)"
  t0=$(date +%s.%N)
  if [ -f "$build_dir/build.ninja" ]; then
    meson configure "$build_dir" -Dcuda=enabled >/dev/null
  else
    meson setup "$build_dir" -Dcuda=enabled >/dev/null
  fi || { echo "gpu_check: FAIL: meson could not configure $build_dir"; exit 1; }
  # Only the gpu suite's programs, plus the binary.
  gpu_paths=$(meson introspect "$build_dir" --tests | python3 -c '
import json, os, sys
print(" ".join(os.path.relpath(t["cmd"][0], sys.argv[1])
               for t in json.load(sys.stdin) if "ladder:gpu" in t["suite"]))' "$build_dir")
  if [ -z "$gpu_paths" ]; then
    echo "gpu_check: FAIL: no tests in the gpu suite (was CUDA compiled?)"
    exit 1
  fi
  # shellcheck disable=SC2086
  ninja -C "$build_dir" ladder $gpu_paths || { echo "gpu_check: FAIL: the build"; exit 1; }
  declare -A test_path
  tests=
  for p in $gpu_paths; do
    test_path[$(basename "$p")]=$build_dir/$p
    tests+="$(basename "$p") "
  done
  run() {
    local prog=$1
    shift
    if [ "$prog" = ladder ]; then "$build_dir/ladder" "$@"; else "${test_path[$prog]}" "$@"; fi
  }
  run_test() { timeout "$test_timeout" "${test_path[$1]}"; }
  ladder_cmd=("$build_dir/ladder")
  row "build $build_dir" ok "$(since "$t0")"
fi

echo "== ladder version"
t0=$(date +%s.%N)
if run ladder version; then
  row "ladder version" ok "$(since "$t0")"
else
  row "ladder version" FAIL "$(since "$t0")"
fi

echo "== gpu tests"
if [ -z "$tests" ]; then
  row "gpu tests" "FAIL (none found)" -
fi
skips=0
for name in $tests; do
  t0=$(date +%s.%N)
  rc=0
  run_test "$name" >"$logs/$name.log" 2>&1 || rc=$?
  secs=$(since "$t0")
  case $rc in
    0) result=PASS ;;
    77)
      skips=$((skips + 1))
      if [ "$gpus" -gt 0 ]; then result="FAIL (skipped with $gpus GPU(s) visible)"; else result="SKIP (no GPU)"; fi
      ;;
    124) result="FAIL (timeout $test_timeout s)" ;;
    *) result="FAIL (exit $rc)" ;;
  esac
  echo "$name: $result ($secs s)"
  case $result in
    PASS | SKIP*) ;;
    *) tail -n 30 "$logs/$name.log"; keep_log "$name" "$logs/$name.log" ;;
  esac
  [ "$rc" -ne 77 ] || grep -h "SKIP\|no CUDA device" "$logs/$name.log" | head -2
  row "$name" "$result" "$secs"
done

# train_compare ROW OUT REF TOLERANCE... -- FLAGS...: the equivalence model
# trained with FLAGS into $work/OUT (under the train timeout), compared with
# the run $work/REF by compare_runs.py; ROW says PASS with the comparison's
# first words, or FAIL with the training log kept.
train_compare() {
  local name=$1 out=$2 ref=$3 tolerances=()
  shift 3
  while [ "$1" != -- ]; do tolerances+=("$1"); shift; done
  shift
  t0=$(date +%s.%N)
  if timeout "$train_timeout" "${ladder_cmd[@]}" "${train[@]}" "$@" --out "$work/$out" \
       >"$logs/train_$out.log" 2>&1 && [ -f "$work/$ref/model.bin" ] &&
     python3 tests/parallel/compare_runs.py "$work/$ref" "$work/$out" "${tolerances[@]}" \
       >"$logs/compare_$out.log" 2>&1; then
    row "$name" "PASS ($(head -c 60 "$logs/compare_$out.log"))" "$(since "$t0")"
  else
    tail -n 30 "$logs/train_$out.log"; cat "$logs/compare_$out.log" 2>/dev/null
    keep_log "train_$out" "$logs/train_$out.log"
    row "$name" FAIL "$(since "$t0")"
  fi
}

echo "== training: equivalence.conf, 20 steps, --device cuda vs --device cpu"
work=$logs/train
mkdir -p "$work"
for i in $(seq 1 300); do echo "In the beginning God created the heaven and the earth. $i"; done >"$work/corpus.txt"
train=(train --config tests/parallel/equivalence.conf --data "$work/corpus.txt" --steps 20 --log-every 20)
t0=$(date +%s.%N)
if OMP_NUM_THREADS=1 timeout "$train_timeout" "${ladder_cmd[@]}" "${train[@]}" --device cpu --out "$work/cpu" >"$logs/train_cpu.log" 2>&1; then
  row "train --device cpu" ok "$(since "$t0")"
  cpu_ok=1
else
  tail -n 30 "$logs/train_cpu.log"; keep_log train_cpu "$logs/train_cpu.log"
  row "train --device cpu" FAIL "$(since "$t0")"
  cpu_ok=0
fi
if [ "$gpus" -eq 0 ]; then
  row "train --device cuda" "SKIP (no GPU)" -
  row "compare cuda vs cpu (1e-4)" "SKIP (no GPU)" -
else
  t0=$(date +%s.%N)
  if timeout "$train_timeout" "${ladder_cmd[@]}" "${train[@]}" --device cuda --out "$work/cuda" >"$logs/train_cuda.log" 2>&1 &&
     grep -q "backend cuda" "$logs/train_cuda.log"; then
    row "train --device cuda" ok "$(since "$t0")"
    t0=$(date +%s.%N)
    if [ "$cpu_ok" -eq 1 ] && python3 tests/parallel/compare_runs.py "$work/cpu" "$work/cuda" 1e-4 \
         >"$logs/compare.log" 2>&1; then
      row "compare cuda vs cpu (1e-4)" PASS "$(since "$t0")"
    else
      cat "$logs/compare.log"; keep_log compare "$logs/compare.log"
      row "compare cuda vs cpu (1e-4)" FAIL "$(since "$t0")"
    fi
    grep -h "backend\|step" "$logs/train_cuda.log" | tail -n 3
  else
    tail -n 30 "$logs/train_cuda.log"; keep_log train_cuda "$logs/train_cuda.log"
    row "train --device cuda" FAIL "$(since "$t0")"
    row "compare cuda vs cpu (1e-4)" "FAIL (no cuda run)" -
  fi
fi

# CUDA graphs (--cuda-graph): the same 20 steps recorded and replayed give
# the eager run's losses and weights bit for bit; then the step time of a
# small model, where launches dominate, with graphs over without, both
# measured here (bench train prints each; the row is their ratio).
echo "== CUDA graphs: train --cuda-graph vs eager (bitwise); bench train graphs vs eager"
if [ "$gpus" -eq 0 ]; then
  row "train --device cuda --cuda-graph (bitwise)" "SKIP (no GPU)" -
  row "bench train graphs / eager step time" "SKIP (no GPU)" -
else
  train_compare "train --device cuda --cuda-graph (bitwise)" cuda_graph cuda 0 -- \
    --device cuda --cuda-graph
  name="bench train graphs / eager step time"
  graph_bench=(bench train --config tests/parallel/equivalence.conf --device cuda --steps 20 --warmup 2)
  if run_bench "$name" bench_train_eager "${graph_bench[@]}" &&
     run_bench "$name" bench_train_graph "${graph_bench[@]}" --cuda-graph; then
    eager=$(json_number bench_train_eager tokens_per_s)
    graph=$(json_number bench_train_graph tokens_per_s)
    ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$eager" "$graph" 2>/dev/null)
    row "$name" "${ratio:-?} (eager $eager, graphs $graph tokens/s)" "$(since "$t0")"
    grep -h "step .* ms" "$logs/bench_train_eager.log" "$logs/bench_train_graph.log"
  fi
fi

# Mixed precision: the same model in bf16 against the CPU's fp32 (losses
# within 2e-2, master weights within 5e-2, as tests/parallel/bf16_model_test.sh
# holds the simulator), then GPT-2 124M at T = 1024 timed in bf16 against the
# bf16 GEMM ceiling measured in the same run (issue target: 0.60).
echo "== training in bf16: equivalence.conf --precision bf16 vs cpu; bench train gpt2-124m"
if [ "$gpus" -eq 0 ]; then
  row "train --device cuda --precision bf16" "SKIP (no GPU)" -
  row "bench train gpt2-124m bf16" "SKIP (no GPU)" -
else
  train_compare "train --device cuda --precision bf16" cuda_bf16 cpu 2e-2 5e-2 -- \
    --device cuda --precision bf16
  name="bench train gpt2-124m bf16"
  if run_bench "$name" bench_train_bf16 bench train --config configs/gpt2-124m.conf \
       --device cuda --precision bf16 --batch-size 8 --steps 5 --warmup 2; then
    fraction=$(json_number bench_train_bf16 fraction)
    row "$name" "${fraction:-?} of the bf16 GEMM ceiling (target 0.60)" "$(since "$t0")"
    grep -h "GEMM ceiling\|tokens/s\|step .* ms" "$logs/bench_train_bf16.log"
  fi
fi

# Serving GPT-2 124M with int8 weights and KV: batch-1 decode against the
# HBM bound (weight bytes / read bandwidth, measured in the same run; issue
# target 0.60), and 32 concurrent streams' throughput against one at a time
# (issue target 10x). Tokens are drawn on the device (Gpt::ForwardSample).
echo "== serving: bench decode (batch 1), bench serve (32 streams vs 1)"
if [ "$gpus" -eq 0 ]; then
  row "bench decode gpt2-124m int8" "SKIP (no GPU)" -
  row "bench decode gpt2-124m int8 --cuda-graph" "SKIP (no GPU)" -
  row "bench decode gpt2-124m int8 bf16 activations" "SKIP (no GPU)" -
  row "bench serve 32 streams int8" "SKIP (no GPU)" -
else
  name="bench decode gpt2-124m int8"
  if run_bench "$name" bench_decode bench decode --config configs/gpt2-124m.conf \
       --weights int8 --kv int8 --device cuda --tokens 256; then
    fraction=$(json_number bench_decode fraction)
    row "$name" "${fraction:-?} of the HBM bound (target 0.60)" "$(since "$t0")"
    grep -h "tokens/s" "$logs/bench_decode.log"
  fi
  # The same decode with each step replayed as one graph.
  name="bench decode gpt2-124m int8 --cuda-graph"
  if run_bench "$name" bench_decode_graph bench decode --config configs/gpt2-124m.conf \
       --weights int8 --kv int8 --device cuda --tokens 256 --cuda-graph; then
    fraction=$(json_number bench_decode_graph fraction)
    eager=$(json_number bench_decode tokens_per_s)
    graph=$(json_number bench_decode_graph tokens_per_s)
    row "$name" "${fraction:-?} of the HBM bound; ${graph:-?} vs ${eager:-?} tokens/s eager" "$(since "$t0")"
    grep -h "tokens/s\|cuda graphs" "$logs/bench_decode_graph.log"
  fi
  # W8A16: bf16 activations, the int8 matmuls on the tensor cores.
  name="bench decode gpt2-124m int8 bf16 activations"
  if run_bench "$name" bench_decode_bf16 bench decode --config configs/gpt2-124m.conf \
       --weights int8 --kv int8 --activations bf16 --device cuda --tokens 256 --cuda-graph; then
    fraction=$(json_number bench_decode_bf16 fraction)
    row "$name" "${fraction:-?} of the HBM bound (target 0.60), with graphs" "$(since "$t0")"
    grep -h "tokens/s" "$logs/bench_decode_bf16.log"
  fi
  name="bench serve 32 streams int8"
  if run_bench "$name" bench_serve bench serve --config configs/gpt2-124m.conf \
       --weights int8 --kv int8 --device cuda --requests 64 --concurrency 32 --prompt-tokens 32 \
       --output-tokens 64 --temperature 0 --compare-batch1; then
    ratio=$(json_number bench_serve batch1_ratio)
    row "$name" "${ratio:-?}x batch 1 (target 10x)" "$(since "$t0")"
  fi
fi

# Every backend op on a GPT-2 124M layer's shapes against its floor (bytes /
# copy bandwidth, FLOPs / matmul rate, both measured in the same run): the
# table is printed before the summary, the TSV kept under $OUT.
echo "== bench ops --device cuda: every op against its floor"
if [ "$gpus" -eq 0 ]; then
  row "bench ops" "SKIP (no GPU)" -
else
  t0=$(date +%s.%N)
  if timeout "$bench_timeout" "${ladder_cmd[@]}" bench ops --device cuda --out "$logs/bench_ops.tsv" \
       >"$logs/bench_ops.log" 2>&1 && [ -s "$logs/bench_ops.tsv" ]; then
    # "geomean G, worst OP R" from the TSV's of_floor column (the last).
    bench_result=$(awk -F'\t' 'NR > 1 && $NF > 0 {
        n++; s += log($NF); if (worst == "" || $NF < w) { w = $NF; worst = $1 } }
      END { if (n) printf "%.3f of floor (geomean), worst %s %.3f", exp(s / n), worst, w }' \
      "$logs/bench_ops.tsv")
    row "bench ops" "${bench_result:-FAIL (empty table)}" "$(since "$t0")"
    # The tensor-core attention at T = 1024, head size 64, against the bf16
    # matmul rate (issue targets: forward 0.40, backward 0.30).
    for pass in Forward:0.40 Backward:0.30; do
      ratio=$(awk -F'\t' -v op="Attention${pass%%:*} bf16" '$1 == op { print $NF }' "$logs/bench_ops.tsv")
      row "attention ${pass%%:*} bf16" "${ratio:-missing} of the bf16 matmul rate (target ${pass##*:})" -
    done
    if [ -n "${OUT:-}" ]; then mkdir -p "$OUT" && cp "$logs/bench_ops.tsv" "$OUT/bench_ops.tsv"; fi
  else
    tail -n 30 "$logs/bench_ops.log"; keep_log bench_ops "$logs/bench_ops.log"
    row "bench ops" "FAIL (exit or timeout $bench_timeout s)" "$(since "$t0")"
  fi
fi

# The summary, last.
summary=$logs/summary.txt
{
  echo "== gpu_check summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $gpus GPU(s), $([ -n "${bundle_dir:-}" ] && echo gpu-bundle || echo "build $build_dir"))"
  printf '%-34s %-44s %8s\n' test result seconds
  for r in "${rows[@]}"; do
    IFS='|' read -r name result secs <<<"$r"
    printf '%-34s %-44s %8s\n' "$name" "$result" "$secs"
  done
  printf '%-34s %-44s %8s\n' total "" "$(since "$start_all")"
  if [ "$failed" -ne 0 ]; then
    echo "gpu_check: FAIL"
  elif [ "$gpus" -eq 0 ]; then
    echo "gpu_check: no GPU here: the programs start and the CPU side runs; the kernels were not run"
  else
    echo "gpu_check: OK: every gpu test passed and the cuda run equals the cpu run on $gpus GPU(s)"
  fi
} >"$summary"
echo
if [ -s "$logs/bench_ops.tsv" ]; then
  echo "== bench ops: every op against its floor (of floor = floor / measured; 1.0 = at the floor)"
  cat "$logs/bench_ops.log"
  echo
fi
cat "$summary"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" && cp "$summary" "$OUT/gpu_check_summary.txt"
fi
exit "$failed"
