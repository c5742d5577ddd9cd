#!/usr/bin/env bash
# GPU check: build ladder with the CUDA kernels and run the `gpu` test suite
# (every kernel against the CPU reference). Run it on a machine with an NVIDIA
# GPU:   scripts/gpu_check.sh [BUILD_DIR]      (default build-gpu)
# Fails (non-zero) if the build or a test fails, or if the GPU tests skipped
# although nvidia-smi sees a GPU (a driver/runtime mismatch, a missing device
# node, ...). Without a GPU it still builds, reports the skip and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-gpu}

# Build dependencies (Debian packages), installed only if missing.
source scripts/lib/packages.sh
install_missing_packages meson ninja-build g++ pkg-config libabsl-dev libgtest-dev libgmock-dev \
  libopenblas-openmp-dev libcpp-httplib-dev nlohmann-json3-dev curl

echo "== nvidia-smi"
gpus=0
if command -v nvidia-smi >/dev/null && nvidia-smi; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
echo "gpu_check: nvidia-smi sees $gpus GPU(s)"

echo "== build ($build_dir, -Dcuda=enabled)"
if [ -f "$build_dir/build.ninja" ]; then
  meson configure "$build_dir" -Dcuda=enabled >/dev/null
else
  meson setup "$build_dir" -Dcuda=enabled >/dev/null
fi
# Only what the gpu suite runs, plus the binary (its `version` line).
gpu_tests=$(meson introspect "$build_dir" --tests | python3 -c '
import json, os, sys
print(" ".join(os.path.relpath(t["cmd"][0], sys.argv[1])
               for t in json.load(sys.stdin) if "ladder:gpu" in t["suite"]))' "$build_dir")
if [ -z "$gpu_tests" ]; then
  echo "gpu_check: FAIL: no tests in the gpu suite (was CUDA compiled?)"
  exit 1
fi
ninja -C "$build_dir" ladder $gpu_tests
"$build_dir/ladder" version

echo "== gpu tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
meson test -C "$build_dir" --suite gpu --no-rebuild --print-errorlogs | tee "$log" || status=$?
skipped=$(sed -n 's/^Skipped: *\([0-9]*\).*/\1/p' "$log")
if [ "$status" -ne 0 ]; then
  echo "gpu_check: FAIL: gpu tests failed (meson test exit $status)"
  exit 1
fi
if [ "${skipped:-0}" -ne 0 ]; then
  if [ "$gpus" -gt 0 ]; then
    echo "gpu_check: FAIL: $skipped gpu test(s) skipped although nvidia-smi sees $gpus GPU(s)"
    grep -h "no CUDA device" "$build_dir/meson-logs/testlog.txt" | sort -u || true
    exit 1
  fi
  echo "gpu_check: no GPU here: the build is checked, the kernels were not run"
  exit 0
fi
echo "gpu_check: OK: all gpu tests passed on $gpus GPU(s)"
