#!/usr/bin/env bash
# Installs what ladder needs (Debian packages only), writes the default
# corpus and builds. Safe to rerun: it skips what is already there.
#   scripts/setup.sh [--target NAME] [BUILD_DIR] [extra meson options...]
# --target builds that ninja target alone (the quick start builds `ladder`,
# about half the build: none of the test programs); by default, everything.
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
if [ "${1:-}" = --target ]; then
  [ -n "${2:-}" ] || { echo "setup: --target needs a ninja target, e.g. ladder" >&2; exit 2; }
  targets=("$2")
  shift 2
fi
build_dir=${1:-build}
shift || true

source scripts/lib/packages.sh
install_missing_packages meson ninja-build g++ pkg-config libabsl-dev libgtest-dev libgmock-dev \
  libopenblas-openmp-dev openmpi-bin libopenmpi-dev bible-kjv python3 \
  libcpp-httplib-dev nlohmann-json3-dev libicu-dev zlib1g-dev curl

# The default corpus: the King James Bible from Debian's bible-kjv (data/README.md).
if [ ! -s data/kjv.txt ]; then
  bible -f "Genesis 1:1-Revelation 22:21" > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
  echo "setup: wrote data/kjv.txt ($(wc -c < data/kjv.txt) bytes)"
fi

# Quiet when it works; on failure, what meson or the compiler said.
run_quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    rm -f "$log"
    echo "setup: failed: $*" >&2
    return 1
  fi
  rm -f "$log"
}
if [ ! -f "$build_dir/build.ninja" ]; then
  run_quietly meson setup "$build_dir" "$@"
else
  run_quietly meson configure "$build_dir" "$@"
fi
run_quietly ninja -C "$build_dir" "${targets[@]}"
echo "setup: built $build_dir/ladder"
