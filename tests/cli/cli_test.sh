#!/usr/bin/env bash
# End-to-end checks of the `ladder` command line: the happy path of every
# subcommand on a micro model, and every error path: one line on stderr that
# names the bad thing, and exit code 2.
#   cli_test.sh LADDER_BINARY SOURCE_ROOT
set -u
ladder=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error CODE NEEDLE -- ARGS...: exit code CODE, exactly one stderr
# line, and that line contains NEEDLE.
expect_error() {
  local code=$1 needle=$2
  shift 3
  "$ladder" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local got=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  if [ "$got" -ne "$code" ]; then
    fail "ladder $* exited $got, want $code (stderr: $(cat "$tmp/err"))"
  elif [ "$lines" -ne 1 ]; then
    fail "ladder $* printed $lines stderr lines, want 1: $(cat "$tmp/err")"
  elif ! grep -qF -- "$needle" "$tmp/err"; then
    fail "ladder $* stderr does not name '$needle': $(cat "$tmp/err")"
  fi
}

expect_ok() {
  if ! "$ladder" "$@" >"$tmp/out" 2>"$tmp/err"; then
    fail "ladder $* failed: $(cat "$tmp/err")"
  fi
}

# A small corpus: repeated, so the micro model learns it.
for i in $(seq 1 200); do echo "In the beginning God created the heaven and the earth. $i"; done >"$tmp/corpus.txt"
printf 'caf\xc3\xa9 \xff\x00 bytes' >"$tmp/odd.bin"

# ---- help and version -------------------------------------------------------
for cmd in train eval generate "tokenizer train" "tokenizer encode" "tokenizer decode" \
           "data prepare" "bench train" "bench checkpoint" "bench decode" "bench matmul" plan "checkpoint inspect" \
           "checkpoint convert" report version; do
  # shellcheck disable=SC2086
  if ! "$ladder" $cmd --help >"$tmp/out" 2>&1 || ! grep -q "usage:" "$tmp/out"; then
    fail "ladder $cmd --help"
  fi
done
expect_ok --help
expect_ok version
grep -q "^ladder " "$tmp/out" || fail "version line"
grep -qE "^cpu: .*ladder kernels (portable|avx2|avx512) \(this CPU supports (portable|avx2|avx512)\)" \
  "$tmp/out" || fail "version prints no ladder ISA level: $(cat "$tmp/out")"
# The BLAS line. Where OpenBLAS picks its kernels right (here), ladder says
# "detected" and prints nothing on stderr; where it picks older kernels than
# the CPU runs, ladder restarts itself once, says so in one stderr line, and
# the BLAS line names what OpenBLAS detected.
env -u OPENBLAS_CORETYPE -u LADDER_BLAS_DETECTED "$ladder" version >"$tmp/out" 2>"$tmp/err" ||
  fail "ladder version failed: $(cat "$tmp/err")"
grep -qE "^blas: OpenBLAS [0-9.]+ \([a-zA-Z ]+\), kernels [A-Za-z0-9_]+ \(" "$tmp/out" ||
  fail "version prints no BLAS line: $(cat "$tmp/out")"
if grep -q "(detected)" "$tmp/out"; then
  [ -s "$tmp/err" ] && fail "version with detected BLAS kernels printed on stderr: $(cat "$tmp/err")"
elif ! grep -q "(set by ladder: OpenBLAS detected " "$tmp/out" ||
     [ "$(grep -c "restarting with OPENBLAS_CORETYPE=" "$tmp/err")" -ne 1 ]; then
  fail "BLAS kernels neither detected nor set by ladder with one line: $(cat "$tmp/out" "$tmp/err")"
fi
# A user's OPENBLAS_CORETYPE stands, even for kernels older than the CPU's.
OPENBLAS_CORETYPE=Prescott "$ladder" version >"$tmp/out" 2>"$tmp/err" || fail "version with OPENBLAS_CORETYPE"
grep -q "^blas: .*kernels Prescott (OPENBLAS_CORETYPE=Prescott)$" "$tmp/out" ||
  fail "OPENBLAS_CORETYPE=Prescott not respected: $(cat "$tmp/out")"
[ -s "$tmp/err" ] && fail "version with OPENBLAS_CORETYPE printed on stderr: $(cat "$tmp/err")"

# ---- happy path --------------------------------------------------------------
expect_ok train --config "$src/tests/cli/micro.conf" --data "$tmp/corpus.txt" --out "$tmp/run" --steps 20
for f in model.bin tokenizer.bpe metrics.jsonl ranks.json; do
  [ -s "$tmp/run/$f" ] || fail "train did not write $f"
done
[ "$(wc -l <"$tmp/run/metrics.jsonl")" -eq 20 ] || fail "metrics.jsonl should have 20 lines"
grep -q '"step":20,"loss":' "$tmp/run/metrics.jsonl" || fail "metrics.jsonl step 20"
grep -q '"val_loss":' "$tmp/run/metrics.jsonl" || fail "metrics.jsonl has no val_loss"
# MFU is at most 1: the ceiling is the best GEMM rate, raised to any faster step.
grep -o '"mfu":[^,]*' "$tmp/run/metrics.jsonl" | cut -d: -f2 |
  awk '{ if (!($1 > 0 && $1 <= 1)) bad = 1 } END { exit bad }' || fail "an MFU outside (0, 1]"
# Same seed, same binary: bitwise-identical losses.
expect_ok train --config "$src/tests/cli/micro.conf" --data "$tmp/corpus.txt" --out "$tmp/run_again" --steps 20
cmp -s <(grep -o '"loss":[^,]*' "$tmp/run/metrics.jsonl") \
       <(grep -o '"loss":[^,]*' "$tmp/run_again/metrics.jsonl") || fail "same seed, different losses"
cmp -s "$tmp/run/model.bin" "$tmp/run_again/model.bin" || fail "same seed, different weights"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 20 --seed 3
grep -q "^In the" "$tmp/out" || fail "generate output does not start with the prompt"
cp "$tmp/out" "$tmp/gen1"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 20 --seed 3
cmp -s "$tmp/out" "$tmp/gen1" || fail "generate with the same seed differs"
expect_ok eval --model "$tmp/run" --text "$tmp/corpus.txt"
grep -q '^{"loss":[0-9.]*,"perplexity":' "$tmp/out" || fail "eval JSON line: $(cat "$tmp/out")"
# The serving formats score within 1% of fp32 (eval through the KV-cached forward).
loss_of() { grep -o '"loss":[0-9.]*' "$tmp/out" | cut -d: -f2; }
fp32_loss=$(loss_of)
expect_ok eval --model "$tmp/run" --text "$tmp/corpus.txt" --weights int8 --kv int8
awk -v a="$fp32_loss" -v b="$(loss_of)" 'BEGIN { d = (a - b) / a; exit !(d < 0.01 && d > -0.01) }' ||
  fail "int8 eval loss $(loss_of) vs fp32 $fp32_loss"
# --kl: the formats' next-token distributions against fp32's: zero for fp32
# itself, small but not zero for int8.
kl_of() { grep -o '"kl":[-0-9.e]*' "$tmp/out" | cut -d: -f2; }
expect_ok eval --model "$tmp/run" --text "$tmp/corpus.txt" --kl
[ "$(kl_of)" = 0 ] || fail "fp32 against itself: kl $(kl_of)"
expect_ok eval --model "$tmp/run" --text "$tmp/corpus.txt" --weights int8 --kv int8 --kl
awk -v k="$(kl_of)" 'BEGIN { exit !(k > 0 && k < 0.01) }' || fail "int8 kl $(kl_of)"
expect_ok eval --model "$tmp/run" --text "$tmp/corpus.txt" --weights bf16
awk -v a="$fp32_loss" -v b="$(loss_of)" 'BEGIN { d = (a - b) / a; exit !(d < 0.01 && d > -0.01) }' ||
  fail "bf16 eval loss $(loss_of) vs fp32 $fp32_loss"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 20 --weights bf16
# A model file alone (tokenizer beside it) and int8 formats through generate.
expect_ok generate --model "$tmp/run/model.bin" --prompt "In the" --max-tokens 20 --seed 3
cmp -s "$tmp/out" "$tmp/gen1" || fail "generate from the model file differs from the run directory"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 40 --weights int8-channel --kv int8
# Speculative decoding with the model as its own draft: greedy text unchanged.
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 30 --temperature 0
cp "$tmp/out" "$tmp/greedy"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 30 --temperature 0 \
  --draft "$tmp/run" --speculate 3
cmp -s "$tmp/out" "$tmp/greedy" || fail "greedy generate with a draft differs"
# A stop string ends the text before it.
stop=$(head -c 12 "$tmp/greedy" | tail -c 3)
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 30 --temperature 0 --stop "$stop"
generated=$(tail -c +7 "$tmp/greedy")  # after the 6-byte prompt
[ "$(cat "$tmp/out")" = "In the${generated%%"$stop"*}" ] ||
  fail "generate --stop '$stop': '$(cat "$tmp/out")' is not the greedy text cut before it"
# (--device cpu: the default, auto, announces its choice on stderr before
# these errors, which come once the backend exists.)
expect_error 2 "--speculate needs --draft" -- generate --model "$tmp/run" --speculate 2 --device cpu
expect_error 2 "unknown weight format 'int9'" -- eval --model "$tmp/run" --text "$tmp/corpus.txt" --weights int9
expect_error 2 "unknown KV cache format 'fp16'" -- generate --model "$tmp/run" --kv fp16
# --device: auto (the default) names its choice and why in one stderr line,
# cpu says nothing; an unknown name or an unusable device is one line, exit 2.
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 20 --seed 3 --device cpu
cmp -s "$tmp/out" "$tmp/gen1" || fail "generate --device cpu differs from --device auto"
[ -s "$tmp/err" ] && fail "generate --device cpu printed on stderr: $(cat "$tmp/err")"
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 5
[ "$(grep -c "^ladder: device auto: cpu (.*)$" "$tmp/err")" -eq 1 ] ||
  fail "--device auto did not name its choice in one line: $(cat "$tmp/err")"
for cmd in "train --config $src/tests/cli/micro.conf --data $tmp/corpus.txt --out $tmp/x" \
           "eval --model $tmp/run --text $tmp/corpus.txt" "generate --model $tmp/run" \
           "serve --model $tmp/run" "bench train --config $src/tests/cli/micro.conf --steps 1" \
           "bench decode --config $src/tests/cli/micro.conf --tokens 8" \
           "bench serve --config $src/tests/cli/micro.conf --concurrency 1"; do
  # shellcheck disable=SC2086
  expect_error 2 "unknown device 'bogus' (expected auto, cpu, cuda or cuda-sim)" -- $cmd --device bogus
done
if "$ladder" version | grep -qE "^cuda: (not compiled|.*no device)"; then
  expect_error 2 "--device cuda: no usable GPU (" -- generate --model "$tmp/run" --device cuda
fi
expect_ok generate --model "$tmp/run" --prompt "In the" --max-tokens 5 --device cuda-sim
[ -s "$tmp/err" ] && fail "generate --device cuda-sim printed on stderr: $(cat "$tmp/err")"
# bf16 weights are the CPU's serving format: the CUDA backend refuses them
# when the model loads (the server exits before it listens).
for cmd in "serve --model $tmp/run" "generate --model $tmp/run --prompt In"; do
  # shellcheck disable=SC2086
  expect_error 2 "bf16 weights are a CPU serving format" -- $cmd --weights bf16 --device cuda-sim
done
# Tokenizer round trip through the CLI, on bytes that are not valid UTF-8.
"$ladder" tokenizer encode --tokenizer "$tmp/run/tokenizer.bpe" <"$tmp/odd.bin" >"$tmp/ids" ||
  fail "tokenizer encode"
"$ladder" tokenizer decode --tokenizer "$tmp/run/tokenizer.bpe" <"$tmp/ids" >"$tmp/back" ||
  fail "tokenizer decode"
cmp -s "$tmp/odd.bin" "$tmp/back" || fail "tokenizer encode | decode is not the identity"
expect_ok data prepare --input "$tmp/corpus.txt" --out "$tmp/shards" --vocab-size 300
expect_ok train --config "$src/tests/cli/micro.conf" --data "$tmp/shards" --out "$tmp/run2" --steps 2

# ---- error paths: one line naming the problem, exit 2 -------------------------
expect_error 2 "unknown command 'bogus'" -- bogus
expect_error 2 "--bogus" -- train --bogus
expect_error 2 "nope.conf" -- train --config "$tmp/nope.conf" --out "$tmp/x"
expect_error 2 "--steps" -- train --config "$src/tests/cli/micro.conf" --steps abc --out "$tmp/x"
expect_error 2 "missing --out" -- train --config "$src/tests/cli/micro.conf"
expect_error 2 "/nonexistent/corpus.txt" -- train --config "$src/tests/cli/micro.conf" \
  --data /nonexistent/corpus.txt --out "$tmp/x"
printf 'n_layer = 2\nn_layers = 3\n' >"$tmp/typo.conf"
expect_error 2 "unknown key 'n_layers'" -- train --config "$tmp/typo.conf" --out "$tmp/x"
printf 'n_layer = two\n' >"$tmp/badval.conf"
expect_error 2 "'n_layer' expects an integer" -- train --config "$tmp/badval.conf" --out "$tmp/x"
printf 'n_embd = 30\nn_head = 4\n' >"$tmp/badshape.conf"
expect_error 2 "n_embd (30) must be divisible by n_head (4)" -- train --config "$tmp/badshape.conf" --out "$tmp/x"
expect_error 2 "dp x tp x pp = 2 x 1 x 1 = 2 but the job has 1 ranks" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --dp 2
expect_error 2 "--zero must be 0 or 1" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --zero 2
expect_error 2 "dp x tp x pp = 1 x 4 x 1 = 4 but the job has 1 ranks" -- bench train --config "$src/tests/cli/micro.conf" --tp 4
expect_error 2 "unknown pipeline schedule 'zigzag' (gpipe or 1f1b)" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --pp-schedule zigzag
expect_error 2 "the global batch of 4 sequences does not split into dp (1) x microbatches (3) equal parts" \
  -- train --config "$src/tests/cli/micro.conf" --data "$tmp/corpus.txt" --out "$tmp/x" --microbatches 3 \
  --device cpu
expect_error 2 "missing --config FILE" -- plan
# Typos and values that used to pass silently (or abort).
expect_error 2 "unexpected argument '-max-tokens' (see 'ladder generate --help')" -- \
  generate --model "$tmp/run" -max-tokens 5
expect_error 2 "unexpected argument 'extra'" -- plan --config "$src/tests/cli/micro.conf" extra
expect_error 2 "config file: '$src/tests/cli' is a directory, not a file" -- plan --config "$src/tests/cli"
sed 's/^lr = .*/lr = inf/' "$src/tests/cli/micro.conf" >"$tmp/lrinf.conf"
grep -q "^lr = inf" "$tmp/lrinf.conf" || echo "lr = inf" >>"$tmp/lrinf.conf"
expect_error 2 "need 0 <= min_lr <= lr and lr > 0, got lr inf" -- plan --config "$tmp/lrinf.conf"
printf 'n_layer = 1073741824\n' >"$tmp/deep.conf"
expect_error 2 "n_layer must be at most 65536, got 1073741824" -- plan --config "$tmp/deep.conf"
printf 'n_layer = 60000\nn_embd = 16384\nn_head = 16\n' >"$tmp/huge.conf"
expect_error 2 "parameters, past the 1e+13 ladder handles" -- plan --config "$tmp/huge.conf"
expect_error 2 "flag --spike-z expects a finite number, got 'nan'" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --spike-z nan
expect_error 2 "--max-bad-steps must be in [1, 2147483647], got 0" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --max-bad-steps 0
expect_error 2 "--top-k must be in [0, 2147483647], got 4294967297" -- generate --model "$tmp/run" --top-k 4294967297
[ -e "$tmp/x" ] && fail "a refused train left its --out directory"
# Refused by the trainer, after the output directory was made: it goes again.
expect_error 2 "--overlap-grad-reduce overlaps the bucketed all-reduce: not with --zero 1" -- \
  train --config "$src/tests/cli/micro.conf" --data "$tmp/shards" --out "$tmp/y/deep" --device cpu \
  --overlap-grad-reduce --zero 1
[ -e "$tmp/y" ] && fail "a train refused by the trainer left its --out directory"
: >"$tmp/empty.txt"
expect_error 2 "--input '$tmp/empty.txt' is empty" -- data prepare --input "$tmp/empty.txt" --out "$tmp/empty_shards"
[ -e "$tmp/empty_shards" ] && fail "a refused data prepare left its --out directory"
expect_error 2 "--inject-fault 'boom@3' is not one of kill:RANK@STEP" -- train --config "$src/tests/cli/micro.conf" \
  --data "$tmp/corpus.txt" --out "$tmp/x" --inject-fault boom@3
expect_error 2 "cannot open '/nonexistent/ck/latest'" -- checkpoint inspect /nonexistent/ck
expect_error 2 "expected two arguments: DIR OUT" -- checkpoint convert /nonexistent/ck
expect_error 2 "--precision must be fp32 or bf16, got 'fp16'" -- plan --config "$src/tests/cli/micro.conf" --precision fp16
expect_error 2 "--recompute must be none, gelu or layer, got 'all'" -- plan --config "$src/tests/cli/micro.conf" --recompute all
expect_error 2 "--precision must be auto, fp32 or bf16, got 'fp8'" -- train --config "$src/tests/cli/micro.conf" --device cpu --precision fp8 --out "$tmp/fp8"
expect_error 2 "n_head (2) is not divisible by tp (4)" -- plan --config "$src/tests/cli/micro.conf" --tp 4
expect_error 2 "n_layer (2) is smaller than pp (3): a stage needs a layer" -- plan --config "$src/tests/cli/micro.conf" --pp 3
expect_error 2 "/nonexistent/model" -- generate --model /nonexistent/model
expect_error 2 "temperature" -- generate --model "$tmp/run" --temperature -1
expect_error 2 "top_p" -- generate --model "$tmp/run" --top-p 2
expect_error 2 "--max-tokens" -- generate --model "$tmp/run" --max-tokens x
expect_error 2 "/nonexistent/text" -- eval --model "$tmp/run" --text /nonexistent/text
expect_error 2 "missing --text" -- eval --model "$tmp/run"
expect_error 2 "/nonexistent/tok" -- tokenizer encode --tokenizer /nonexistent/tok
expect_error 2 "bogus" -- tokenizer bogus
expect_error 2 "/nonexistent/in.txt" -- data prepare --input /nonexistent/in.txt --out "$tmp/y"
expect_error 2 "/nonexistent/b.conf" -- bench train --config /nonexistent/b.conf
expect_ok bench decode --config "$src/tests/cli/micro.conf" --tokens 8
tail -1 "$tmp/out" | grep -qE '^\{"tokens_per_s":[0-9.]+,"bound_tokens_per_s":[0-9.]+,"fraction":[0-9.]+\}$' ||
  fail "bench decode: no JSON summary"
expect_error 2 "--tokens must be in [2, 31], got 32" -- bench decode --config "$src/tests/cli/micro.conf" --tokens 32
expect_ok bench decode --config "$src/tests/cli/micro.conf" --tokens 8 --weights bf16
grep -q "^kernels: OpenBLAS .*; ladder's own: " "$tmp/out" || fail "bench decode names no kernel set"
expect_ok bench matmul --config "$src/tests/cli/micro.conf" --tokens 1,17 --reps 1
tail -1 "$tmp/out" | grep -q '^\[{"tokens":1,"path":"sgemm",' || fail "bench matmul: no JSON summary"
grep -c '^ *17  int8 ' "$tmp/out" | grep -q 1 || fail "bench matmul: no int8 prefill row"
expect_error 2 "--tokens must be a comma-separated list" -- bench matmul --config "$src/tests/cli/micro.conf" --tokens 1,x
# The training benchmark's fraction of the GEMM ceiling is at most 1, with
# the BLAS library's kernels or with its oldest ones (a misdetected CPU's).
for coretype in detected Prescott; do
  (if [ $coretype != detected ]; then export OPENBLAS_CORETYPE=$coretype; fi
   exec "$ladder" bench train --config "$src/tests/cli/micro.conf" --steps 3) \
    >"$tmp/out" 2>"$tmp/err" || fail "bench train (kernels $coretype): $(cat "$tmp/err")"
  grep -q "^kernels: OpenBLAS .*; ladder's own: " "$tmp/out" || fail "bench train names no kernel set"
  tail -1 "$tmp/out" | grep -o '"fraction":[0-9.]*' | cut -d: -f2 |
    awk '{ exit !($1 > 0 && $1 <= 1) }' || fail "bench train fraction above 1: $(tail -1 "$tmp/out")"
done
expect_error 2 "'fast'" -- bench fast
echo "not a model" >"$tmp/run/model.bin"
expect_error 2 "model.bin" -- generate --model "$tmp/run"
echo "12 x 7" | "$ladder" tokenizer decode --tokenizer "$tmp/run/tokenizer.bpe" >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "'x'" "$tmp/err" || fail "decode of a non-integer id: $(cat "$tmp/err")"

if [ "$failures" -ne 0 ]; then
  echo "$failures CLI checks failed"
  exit 1
fi
echo "all CLI checks passed"
