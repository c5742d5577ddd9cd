#!/usr/bin/env bash
# Installs what ladder needs (Debian packages only), writes the default
# corpus and builds. Safe to rerun: it skips what is already there.
#   scripts/setup.sh [BUILD_DIR] [extra meson options...]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
shift || true

source scripts/lib/packages.sh
install_missing_packages meson ninja-build g++ pkg-config libabsl-dev libgtest-dev libgmock-dev \
  libopenblas-openmp-dev openmpi-bin libopenmpi-dev bible-kjv python3

# The default corpus: the King James Bible from Debian's bible-kjv (data/README.md).
if [ ! -s data/kjv.txt ]; then
  bible -f "Genesis 1:1-Revelation 22:21" > data/kjv.txt.tmp
  mv data/kjv.txt.tmp data/kjv.txt
  echo "setup: wrote data/kjv.txt ($(wc -c < data/kjv.txt) bytes)"
fi

if [ ! -f "$build_dir/build.ninja" ]; then
  meson setup "$build_dir" "$@" >/dev/null
else
  meson configure "$build_dir" "$@" >/dev/null
fi
ninja -C "$build_dir" >/dev/null
echo "setup: built $build_dir/ladder"
