#!/usr/bin/env bash
# End to end: train configs/tiny.conf on the default corpus for STEPS steps
# and require the validation loss to have fallen below BOUND (from ln(512) =
# 6.24 at initialization), then sample from the result.
#   train_tiny_test.sh LADDER_BINARY SOURCE_ROOT STEPS BOUND
set -eu
ladder=$1
src=$2
steps=$3
bound=$4
corpus="$src/data/kjv.txt"
[ -s "$corpus" ] || { echo "missing $corpus: run scripts/setup.sh first"; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

"$ladder" train --config "$src/configs/tiny.conf" --data "$corpus" --steps "$steps" \
  --eval-every 0 --out "$out"
val=$(grep -o '"val_loss":[0-9.]*' "$out/metrics.jsonl" | tail -1 | cut -d: -f2)
echo "final validation loss after $steps steps: $val (bound $bound)"
awk -v v="$val" -v b="$bound" 'BEGIN { exit !(v != "" && v < b) }' || {
  echo "FAIL: validation loss $val is not below $bound"
  exit 1
}
"$ladder" generate --model "$out" --prompt "And God said" --max-tokens 40 --temperature 0.8 --seed 1
