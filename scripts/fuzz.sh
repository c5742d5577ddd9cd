#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer + ASan + UBSan) and runs each
# for a while: the checkpoint manifest parser, seeded with a real manifest,
# and the safetensors reader, seeded with a small file.
#   scripts/fuzz.sh [SECONDS] [manifest|safetensors|all]   (default 60 each, all)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/packages.sh
install_missing_packages clang libclang-rt-14-dev libabsl-dev nlohmann-json3-dev
seconds=${1:-60}
which=${2:-all}
case "$which" in manifest | safetensors | all) ;; *)
  echo "fuzz.sh: unknown target '$which' (manifest, safetensors or all)" >&2
  exit 2
  ;;
esac
out=build-fuzz
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -I.)
# shellcheck disable=SC2207
absl=($(pkg-config --cflags --libs absl_status absl_statusor absl_strings absl_str_format))

if [ "$which" != safetensors ]; then
  mkdir -p "$out/corpus"
  clang++ "${flags[@]}" \
    tests/checkpoint/manifest_fuzz.cc src/checkpoint/manifest.cc src/core/crc32.cc \
    src/core/config.cc src/core/philox.cc src/model/gpt_config.cc src/model/parameters.cc \
    "${absl[@]}" -o "$out/manifest_fuzz"
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
fi

if [ "$which" != manifest ]; then
  mkdir -p "$out/safetensors-corpus"
  clang++ "${flags[@]}" \
    tests/formats/safetensors_fuzz.cc src/formats/safetensors.cc src/core/file_util.cc \
    "${absl[@]}" -o "$out/safetensors_fuzz"
  # Seed: a header (the target puts the length in front of the bytes up to the
  # first NUL) with metadata, a scalar, an empty tensor and two F32s, then its
  # 16 bytes of data.
  if [ ! -s "$out/safetensors-corpus/seed" ]; then
    printf '%s' '{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},"c":{"dtype":"I64","shape":[0,3],"data_offsets":[10,10]},"d":{"dtype":"U8","shape":[2,3],"data_offsets":[10,16]}}  ' \
      >"$out/safetensors-corpus/seed"
    head -c 16 /dev/zero >>"$out/safetensors-corpus/seed"
  fi
  "$out/safetensors_fuzz" -max_total_time="$seconds" -max_len=65536 "$out/safetensors-corpus"
fi
