#!/usr/bin/env bash
# `ladder bench ops` on one device at a small size: every op's row is in the
# TSV (on a device backend also the two bf16 attention rows, the two W8A16
# int8 matmul rows and the bf16 matmul rate they are held to), each measured time and ratio to the floor
# is a finite positive number, and bad flags are refused with one line and
# exit code 2.
#   bench_ops_test.sh LADDER_BINARY DEVICE
set -u
ladder=$1
device=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! "$ladder" bench ops --device "$device" --tokens 64 --reps 1 --out "$tmp/ops.tsv" \
  >"$tmp/out" 2>"$tmp/err"; then
  fail "bench ops --device $device failed: $(cat "$tmp/err")"
fi
cat "$tmp/out"
grep -q "^bench ops: device $device" "$tmp/out" || fail "no header line naming $device"
grep -qE "^copy bandwidth: [0-9.]+ GB/s" "$tmp/out" || fail "no copy bandwidth line"
grep -qE "^matmul rate: +[0-9.]+ TFLOP/s" "$tmp/out" || fail "no matmul rate line"
want_rows=21
if [ "$device" != cpu ]; then
  want_rows=25
  grep -qE "^bf16 matmul rate: [0-9.]+ TFLOP/s" "$tmp/out" || fail "no bf16 matmul rate line"
fi
grep -qE "^geometric mean of floor/measured: [0-9.]+ over $want_rows ops" "$tmp/out" ||
  fail "no geometric mean over $want_rows ops"

ops="EmbeddingForward EmbeddingBackward ResidualLayerNormForward ResidualLayerNormBackward
ResidualAdd GeluForward GeluBackward AttentionForward AttentionBackward CrossEntropyForward
CrossEntropyBackward CrossEntropyFused SumOfSquares AdamWUpdate MatmulInt8Forward KvCacheWrite
PagedAttentionForward"
if [ -f "$tmp/ops.tsv" ]; then
  head -1 "$tmp/ops.tsv" | grep -qP "^op\tshape\tms\tgb_per_s\ttflop_per_s\tbound\tfloor_ms\tof_floor$" ||
    fail "TSV header: $(head -1 "$tmp/ops.tsv")"
  extra=()
  [ "$device" != cpu ] && extra=("AttentionForward bf16" "AttentionBackward bf16"
    "MatmulInt8Forward W8A16")
  for op in $ops "MatmulForward qkv" "MatmulForward fc" "MatmulBackward qkv" "MatmulBackward fc" \
    "${extra[@]}"; do
    grep -qP "^$op\t" "$tmp/ops.tsv" || fail "no row for $op"
  done
  rows=$(($(wc -l <"$tmp/ops.tsv") - 1))
  [ "$rows" -eq "$want_rows" ] || fail "$rows rows, want $want_rows"
  # ms (3), floor ms (7) and of floor (8): finite and positive; bound (6)
  # memory or compute.
  bad=$(awk -F'\t' 'NR > 1 {
      for (i = 3; i <= 8; i += (i == 3 ? 4 : 1)) {
        if ($i !~ /^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ || $i + 0 <= 0) print $1 ": column " i " is " $i
      }
      if ($6 != "memory" && $6 != "compute") print $1 ": bound " $6
    }' "$tmp/ops.tsv")
  [ -z "$bad" ] || fail "bad values: $bad"
else
  fail "no TSV written"
fi

# expect_error NEEDLE -- ARGS...: exit 2 and one stderr line containing NEEDLE.
expect_error() {
  local needle=$1
  shift 2
  "$ladder" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
  local got=$?
  if [ "$got" -ne 2 ]; then
    fail "ladder $* exited $got, want 2 (stderr: $(cat "$tmp/err"))"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ]; then
    fail "ladder $* printed $(wc -l <"$tmp/err") stderr lines, want 1: $(cat "$tmp/err")"
  elif ! grep -qF -- "$needle" "$tmp/err"; then
    fail "ladder $* stderr does not name '$needle': $(cat "$tmp/err")"
  fi
}
expect_error "--tokens" -- bench ops --device "$device" --tokens 0
expect_error "--tokens" -- bench ops --device "$device" --tokens 1500
expect_error "--reps" -- bench ops --device "$device" --reps 0
expect_error "--vocab" -- bench ops --device "$device" --vocab -1
expect_error "--nope" -- bench ops --device "$device" --nope 1

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "bench ops on $device: all checks passed"
