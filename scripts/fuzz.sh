#!/usr/bin/env bash
# Builds the checkpoint manifest fuzz target with clang (libFuzzer + ASan +
# UBSan) and runs it for a while, seeded with a real manifest.
#   scripts/fuzz.sh [SECONDS]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/packages.sh
install_missing_packages clang libclang-rt-14-dev libabsl-dev
seconds=${1:-60}
out=build-fuzz
mkdir -p "$out/corpus"
# shellcheck disable=SC2046
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I. \
  tests/checkpoint/manifest_fuzz.cc src/checkpoint/manifest.cc src/core/crc32.cc \
  src/core/config.cc src/core/philox.cc src/model/gpt_config.cc src/model/parameters.cc \
  $(pkg-config --cflags --libs absl_status absl_statusor absl_strings absl_str_format) \
  -o "$out/manifest_fuzz"
# Seed: a real manifest of a tiny model, without its checksum line.
if [ -x build/ladder ] && [ ! -s "$out/corpus/seed" ]; then
  tmp=$(mktemp -d)
  for i in $(seq 1 300); do echo "In the beginning $i"; done >"$tmp/c.txt"
  build/ladder train --config tests/parallel/equivalence.conf --data "$tmp/c.txt" --out "$tmp/run" \
    --steps 1 --save-every 1 >/dev/null 2>&1
  sed '$d' "$tmp"/run/checkpoints/step-*/manifest >"$out/corpus/seed"
  rm -rf "$tmp"
fi
"$out/manifest_fuzz" -max_total_time="$seconds" -max_len=65536 "$out/corpus"
