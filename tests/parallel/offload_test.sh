#!/usr/bin/env bash
# Offload (--offload optimizer|params, src/train/offload.h and
# src/model/layer_stream.h) on the CUDA simulator, whose device memory is
# apart from the host's by accounting:
#  - fp32 and bf16, with 2 microbatches: 8 steps end with bitwise the
#    weights and losses of the same run without offload (the same arithmetic
#    in another place);
#  - the same under mpirun with dp2 and ZeRO-1 in bf16 (the host shards
#    all-gathered), pp2 in fp32 (the tied embedding on two stages) and tp2
#    with sequence parallelism in bf16;
#  - optimizer: the device holds no optimizer state and, in bf16, no fp32
#    masters: its allocated bytes drop by 12 per parameter (8 in fp32);
#  - params: a --max-rank-memory cap between the two predictions refuses
#    the run without offload and lets it run with;
#  - killed after step 7 and resumed from step 5 in another mode, a run ends
#    with the same bits;
#  - --offload on the CPU backend and an unknown mode are refused with one
#    line and exit code 2.
#   offload_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/training_run.sh"
train=(train --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" --steps 8
       --log-every 8 --device cuda-sim --microbatches 2)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
same() {  # REFERENCE OTHER: losses and weights bit for bit
  python3 "$src/tests/parallel/compare_runs.py" "$1" "$2" 0 0 || fail "$2 differs from $1"
}
allocated() {  # RUN: rank 0's device bytes
  python3 -c "import json, sys; print(json.load(open(sys.argv[1]))[0]['memory']['allocated'])" \
    "$1/ranks.json"
}

for prec in fp32 bf16; do
  for mode in none optimizer params; do
    "$ladder" "${train[@]}" --precision "$prec" --offload "$mode" --out "$tmp/${prec}_$mode" \
      >"$tmp/${prec}_$mode.log" 2>&1 || { cat "$tmp/${prec}_$mode.log"; fail "$prec --offload $mode"; }
  done
  same "$tmp/${prec}_none" "$tmp/${prec}_optimizer"
  same "$tmp/${prec}_none" "$tmp/${prec}_params"
  # The device saves the moments, and in bf16 the fp32 masters too.
  params=$(sed -n 's/.*: \([0-9.]*\)M parameters.*/\1/p' "$tmp/${prec}_none.log")
  saved=$(($(allocated "$tmp/${prec}_none") - $(allocated "$tmp/${prec}_optimizer")))
  per=$([ "$prec" = bf16 ] && echo 12 || echo 8)
  python3 -c "import sys; s, p, k = map(float, sys.argv[1:]); sys.exit(abs(s / (p * 1e6) / k - 1) > 0.02)" \
    "$saved" "$params" "$per" || fail "$prec: offload saved $saved device bytes for ${params}M parameters, expected $per each"
done

for layout in "2 --dp 2 --zero 1 --precision bf16" "2 --pp 2 --precision fp32" \
    "2 --tp 2 --sp --precision bf16"; do
  set -- $layout
  np=$1
  shift
  name="np${np}_$(echo "$*" | tr -d ' -')"
  for mode in none optimizer params; do
    "$mpirun" "${mpirun_args[@]}" -np "$np" "$ladder" "${train[@]}" "$@" --offload "$mode" \
      --out "$tmp/${name}_$mode" >"$tmp/${name}_$mode.log" 2>&1 ||
      { cat "$tmp/${name}_$mode.log"; fail "mpirun -np $np $* --offload $mode"; }
  done
  same "$tmp/${name}_none" "$tmp/${name}_optimizer"
  same "$tmp/${name}_none" "$tmp/${name}_params"
done

# The device cap: halfway between the plans with and without parameter
# offload, the run is refused without and trains with it.
cap=$(for mode in none params; do
  "$ladder" plan --config "$src/tests/parallel/equivalence.conf" --microbatches 2 \
    --precision bf16 --offload "$mode" --json
done | python3 -c "import json, sys; t = [json.loads(l)['stages'][0]['memory']['total'] for l in sys.stdin]; print(sum(t) / 2 / 2**20)")
err=$("$ladder" "${train[@]}" --precision bf16 --max-rank-memory "$cap" --out "$tmp/capped" 2>&1) &&
  fail "no offload under a cap of $cap MiB was not refused"
grep -q "over --max-rank-memory" <<<"$err" || fail "the cap's refusal: '$err'"
"$ladder" "${train[@]}" --precision bf16 --max-rank-memory "$cap" --offload params \
  --out "$tmp/capped_params" >"$tmp/capped_params.log" 2>&1 ||
  { cat "$tmp/capped_params.log"; fail "--offload params under a cap of $cap MiB"; }

# Checkpoints: the moments and masters come back from the host and go there.
resume() {  # NAME FIRST_MODE SECOND_MODE
  local out="$tmp/resume_$1"
  "$ladder" "${train[@]}" --precision bf16 --offload "$2" --out "$out" --save-every 5 \
    --inject-fault kill:0@7 >"$out.log" 2>&1 && fail "$1: the first run was not killed"
  "$ladder" "${train[@]}" --precision bf16 --offload "$3" --out "$out" --save-every 5 \
    >>"$out.log" 2>&1 || { cat "$out.log"; fail "$1: resuming"; return; }
  grep -q "resumed from $out/checkpoints/step-00000005 at step 5" "$out.log" ||
    fail "$1: no resume at step 5"
  same "$tmp/bf16_none" "$out"
}
resume optimizer_to_none optimizer none
resume params_to_optimizer params optimizer
resume none_to_params none params

err=$("$ladder" train --config "$src/tests/parallel/equivalence.conf" --data "$tmp/corpus.txt" \
  --device cpu --offload optimizer --out "$tmp/refused" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "--offload on the CPU exited $code, expected 2"
grep -q "offload needs --device cuda or cuda-sim" <<<"$err" || fail "--offload on the CPU: '$err'"
err=$("$ladder" "${train[@]}" --offload disk --out "$tmp/refused2" 2>&1)
code=$?
[ "$code" -eq 2 ] || fail "--offload disk exited $code, expected 2"
grep -q "offload must be none, optimizer or params, got 'disk'" <<<"$err" ||
  fail "--offload disk: '$err'"

[ "$failures" -eq 0 ] && echo "offload trains and resumes bit for bit as without it" || exit 1
