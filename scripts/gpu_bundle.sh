#!/usr/bin/env bash
# Packs ladder's CUDA build into gpu-bundle/, a directory that runs on a GPU
# machine which has the CUDA image (driver, cuBLASLt, NCCL) but none of
# ladder's Debian packages and no network; scripts/gpu_check.sh there uses it
# instead of building (docs/ARCHITECTURE.md, "CUDA": "The GPU bundle").
#
#   scripts/gpu_bundle.sh             build (build-gpu-bundle, -Dcuda=enabled), pack, self-test
#   scripts/gpu_bundle.sh --pack      pack an existing build, then self-test
#   scripts/gpu_bundle.sh --selftest  only the self-test of an existing gpu-bundle/
# GPU_BUNDLE_BUILD_DIR (default build-gpu-bundle) and GPU_ARCH (default 90)
# choose the build.
#
# gpu-bundle/
#   run          the wrapper (scripts/gpu_bundle_run.sh): loader + library path;
#                its first call unpacks payload.tar.gz into gpu-bundle.unpacked/
#   MANIFEST     what is inside, and where each library came from
#   payload.tar.gz:
#   bin/         ladder and every *_gpu_test (the gpu suite's programs under
#                tests/: the kernel tests, the op tests' cuda instances and
#                the NCCL communicator), stripped
#   lib/         the ldd closure of bin/ from this machine, glibc's loader and
#                libc, libm, libdl, libpthread, librt (what the CUDA libraries
#                name) included, libcuda, libcudart, libcublas(Lt) and libnccl
#                excluded: those come from the GPU machine's driver and image
# The build is -Dnative=false: the GPU machine's CPU is not this one.
#
# Self-test (here, no GPU): a copy of the bundle in a fresh directory runs
# under `env -i` through its own loader with --library-path naming only its
# lib/ and a directory holding links to this machine's libcublasLt.so.13 and
# libnccl.so.2 (standing in for the image's), and must:
#   - resolve every library of every program inside the bundle (the loader's
#     --list), the two CUDA libraries excepted;
#   - run `ladder version`, `ladder train --device cpu` (5 steps) and one
#     *_gpu_test, which must SKIP (exit 77: no device), with LD_DEBUG=libs
#     showing every library initialized from the bundle (or the two CUDA ones);
#   - the same three through gpu-bundle/run, the two training runs equal;
#   - with a stand-in ladder that asks for EnsureBlasKernels' restart, the
#     wrapper runs it once with the variables the restart would have set.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_dir=${GPU_BUNDLE_BUILD_DIR:-build-gpu-bundle}
bundle=gpu-bundle
mode=${1:-all}
case $mode in
  all | --pack | --selftest) ;;
  *) echo "usage: $0 [--pack | --selftest]" >&2; exit 2 ;;
esac

# Never bundled: the driver's and the CUDA image's libraries.
excluded_re='^(libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libnvidia-)'
# glibc's libraries the CUDA libraries name (ldd of ladder does not list them
# since glibc 2.34 merged them into libc): a host copy of another glibc
# version next to the bundle's libc would fail to load.
glibc_extra=(libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libresolv.so.2 libanl.so.1 libmvec.so.1)

programs() {  # the build's programs that travel, relative to the build dir
  echo ladder
  (cd "$build_dir" && find tests -name '*_gpu_test' -type f | sort) || true
}

build() {
  if [ ! -f "$build_dir/build.ninja" ]; then
    nice meson setup "$build_dir" -Dcuda=enabled -Dnative=false -Dgpu_arch="${GPU_ARCH:-90}"
  fi
  local targets
  targets=$(meson introspect "$build_dir" --targets | python3 -c '
import json, os, sys
for t in json.load(sys.stdin):
    name = t["name"]
    if t["type"] == "executable" and (name == "ladder" or name.endswith("_gpu_test")):
        print(os.path.relpath(t["filename"][0], sys.argv[1]))' "$build_dir")
  # shellcheck disable=SC2086
  nice ninja -C "$build_dir" $targets
}

pack() {
  [ -x "$build_dir/ladder" ] || { echo "gpu_bundle: no $build_dir/ladder (build first)" >&2; exit 1; }
  grep -q "LADDER_HAVE_CUDA" "$build_dir/compile_commands.json" ||
    { echo "gpu_bundle: $build_dir is not a CUDA build" >&2; exit 1; }
  local tmp=$bundle.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp/bin" "$tmp/lib"
  local p
  for p in $(programs); do
    strip --strip-unneeded -o "$tmp/bin/$(basename "$p")" "$build_dir/$p"
  done
  # The closure, as this machine's loader resolves it.
  local libs
  libs=$(for p in "$tmp"/bin/*; do ldd "$p"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u)
  local missing
  missing=$(for p in "$tmp"/bin/*; do ldd "$p"; done | grep 'not found' | awk '{print $1}' | sort -u |
            grep -Ev "$excluded_re" || true)
  [ -z "$missing" ] || { echo "gpu_bundle: unresolved here: $missing" >&2; exit 1; }
  local libdir
  libdir=$(dirname "$(ldd "$build_dir/ladder" | awk '$1 == "libc.so.6" {print $3}')")
  for p in "${glibc_extra[@]}"; do
    [ -e "$libdir/$p" ] && libs+=$'\n'"$libdir/$p"
  done
  {
    echo "ladder GPU bundle: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)," \
         "built $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME")," \
         "glibc $(ldd --version | head -1 | awk '{print $NF}'), gpu_arch ${GPU_ARCH:-90}"
    echo "run: gpu-bundle/run PROGRAM [ARGS] (gpu-bundle/run has the details)"
    echo "programs:"
    for p in $(programs); do echo "  bin/$(basename "$p")  from $p"; done
    echo "libraries:"
  } >"$tmp/MANIFEST"
  local lib name
  for lib in $(echo "$libs" | sort -u); do
    name=$(basename "$lib")
    if [[ $name =~ $excluded_re ]]; then
      echo "  (not bundled: $name, from the GPU machine)" >>"$tmp/MANIFEST"
      continue
    fi
    # Follow symlinks: the file under the soname ldd printed.
    cp -L "$lib" "$tmp/lib/$name"
    chmod u+w "$tmp/lib/$name"
    strip --strip-unneeded "$tmp/lib/$name" 2>/dev/null || true
    echo "  lib/$name  from $(readlink -f "$lib")" >>"$tmp/MANIFEST"
  done
  # The loader under its usual name, whatever path ldd printed.
  [ -e "$tmp/lib/ld-linux-x86-64.so.2" ] || { echo "gpu_bundle: no loader found" >&2; exit 1; }
  local nprog nlib unpacked
  nprog=$(ls "$tmp/bin" | wc -l)
  nlib=$(ls "$tmp/lib" | wc -l)
  unpacked=$(du -sm "$tmp" | cut -f1)
  tar -C "$tmp" -cf - bin lib | nice gzip -6 >"$tmp/payload.tar.gz"
  rm -rf "${tmp:?}/bin" "${tmp:?}/lib"
  cp scripts/gpu_bundle_run.sh "$tmp/run"
  chmod +x "$tmp/run"
  rm -rf "$bundle" "$bundle.unpacked"
  mv "$tmp" "$bundle"
  echo "gpu_bundle: packed $bundle/: $nprog programs, $nlib libraries, $unpacked MiB unpacked," \
       "$(du -sm "$bundle" | cut -f1) MiB as it travels (payload.tar.gz)"
}

selftest() {
  [ -x "$bundle/run" ] || { echo "gpu_bundle: no $bundle/ (pack first)" >&2; exit 1; }
  local t fails=0
  t=$(mktemp -d)
  trap 'rm -rf "$t"' RETURN
  cp -a "$bundle" "$t/gpu-bundle"
  local b ld
  b=$(cd "$t" && env -i PATH=/usr/bin:/bin gpu-bundle/run --unpack)
  ld=$b/lib/ld-linux-x86-64.so.2
  # Stand-ins for the GPU image's CUDA libraries: links to this machine's.
  mkdir "$t/cuda"
  local name path
  for name in libcublasLt.so.13 libnccl.so.2; do
    path=$(ldconfig -p | awk -v n="$name" '$1 == n {print $NF; exit}')
    [ -n "$path" ] || path=$(ls /usr/local/cuda/lib64/"$name" 2>/dev/null || true)
    [ -n "$path" ] && ln -s "$(readlink -f "$path")" "$t/cuda/$name"
  done
  for i in $(seq 1 100); do echo "In the beginning God created the heaven and the earth. $i"; done >"$t/corpus.txt"
  cp tests/parallel/equivalence.conf "$t/tiny.conf"
  local lp=$b/lib:$t/cuda
  # Where a library may come from: the bundle, or the stand-in CUDA directory.
  allowed() { [[ $1 == "$b/lib/"* || $1 == "$t/cuda/"* || $1 == "$(readlink -f "$t/cuda")"/* ]] ||
              { [[ $(basename "$1") =~ $excluded_re ]] && [ -e "$t/cuda/$(basename "$1")" ]; }; }
  check_paths() {  # label, then one resolved path a line on stdin
    local p bad=0 n=0
    while read -r p; do
      n=$((n + 1))
      allowed "$p" || { echo "  FAIL: $1: $p is outside the bundle"; bad=1; }
    done
    [ "$n" -gt 0 ] || { echo "  FAIL: $1: no library resolved"; bad=1; }
    [ "$bad" -eq 0 ] && echo "  ok: $1: $n libraries, all from the bundle or the CUDA directory"
    return $bad
  }
  echo "== self-test in $t (env -i, loader $ld, --library-path $lp)"
  local p out rc
  for p in "$b"/bin/*; do
    out=$(cd "$t" && env -i "$ld" --library-path "$lp" --list "$p" 2>&1) ||
      { echo "  FAIL: --list $(basename "$p"): $out"; fails=$((fails + 1)); continue; }
    if grep -q "not found" <<<"$out"; then
      echo "  FAIL: --list $(basename "$p"): $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
      fails=$((fails + 1)); continue
    fi
    awk '$2 == "=>" {print $3}' <<<"$out" | check_paths "--list $(basename "$p")" ||
      fails=$((fails + 1))
  done

  # Runs one command under env -i through the bundle's loader, with
  # LD_DEBUG=libs; checks its exit status and where its libraries came from.
  run_case() {  # label, expected rc, program, args...
    local label=$1 want=$2 prog=$3
    shift 3
    local log=$t/$label.log dbg=$t/$label.ld
    rc=0
    (cd "$t" && env -i HOME="$t" LD_DEBUG=libs LD_DEBUG_OUTPUT="$dbg" \
       "$ld" --library-path "$lp" "$b/bin/$prog" "$@" >"$log" 2>&1) || rc=$?
    if [ "$rc" -ne "$want" ]; then
      echo "  FAIL: $label: exit $rc, expected $want"; tail -5 "$log" | sed 's/^/    /'
      fails=$((fails + 1)); return
    fi
    echo "  ok: $label: exit $rc: $(grep -v '^\s*$' "$log" | tail -1 | cut -c1-110)"
    cat "$dbg".* | sed -n 's/.*calling init: //p' | sort -u | check_paths "$label (LD_DEBUG=libs)" ||
      fails=$((fails + 1))
  }
  local gpu_test
  gpu_test=$(cd "$b/bin" && ls *_gpu_test | head -1)
  run_case version 0 ladder version
  run_case train-cpu 0 ladder train --config "$t/tiny.conf" --data "$t/corpus.txt" --steps 5 \
    --log-every 5 --device cpu --out "$t/run-cpu"
  run_case "$gpu_test" 77 "$gpu_test"
  cat "$t/version.log" | sed 's/^/    | /'
  grep -q "no device\|no NVIDIA driver" "$t/version.log" ||
    { echo "  FAIL: ladder version does not report the missing device"; fails=$((fails + 1)); }

  # The wrapper, as scripts/gpu_check.sh calls it (PATH only for bash and coreutils).
  rc=0
  out=$(cd "$t" && env -i PATH=/usr/bin:/bin LADDER_CUDA_LIB_DIRS="$t/cuda" gpu-bundle/run ladder version 2>&1) || rc=$?
  [ "$rc" -eq 0 ] && echo "  ok: gpu-bundle/run ladder version" ||
    { echo "  FAIL: gpu-bundle/run ladder version: exit $rc: $out"; fails=$((fails + 1)); }
  rc=0
  (cd "$t" && env -i PATH=/usr/bin:/bin LADDER_CUDA_LIB_DIRS="$t/cuda" gpu-bundle/run ladder train \
     --config tiny.conf --data corpus.txt --steps 5 --log-every 5 --device cpu --out run-wrapper \
     >"$t/wrapper-train.log" 2>&1) || rc=$?
  [ "$rc" -eq 0 ] && echo "  ok: gpu-bundle/run ladder train --device cpu" ||
    { echo "  FAIL: gpu-bundle/run ladder train: exit $rc"; tail -5 "$t/wrapper-train.log"; fails=$((fails + 1)); }
  rc=0
  (cd "$t" && env -i PATH=/usr/bin:/bin LADDER_CUDA_LIB_DIRS="$t/cuda" gpu-bundle/run "$gpu_test" \
     >/dev/null 2>&1) || rc=$?
  [ "$rc" -eq 77 ] && echo "  ok: gpu-bundle/run $gpu_test: exit 77 (SKIP, no device)" ||
    { echo "  FAIL: gpu-bundle/run $gpu_test: exit $rc, expected 77"; fails=$((fails + 1)); }
  # Both runs of the same 5 steps: the same losses and weights, bitwise.
  if python3 tests/parallel/compare_runs.py "$t/run-cpu" "$t/run-wrapper" 0 >/dev/null; then
    echo "  ok: the loader run and the wrapper run ended with the same losses and weights"
  else
    echo "  FAIL: the two CPU runs differ"; fails=$((fails + 1))
  fi

  # The OpenBLAS restart under the explicit loader (this CPU needs none, so a
  # stand-in ladder does what EnsureBlasKernels does when one is needed: its
  # line on stderr, the two variables, execv of /proc/self/exe). The wrapper
  # must run the program once, on the core the restart would have chosen.
  if ! grep -q 'chose its %s kernels' src/backend/cpu/blas_kernels.cc ||
     ! grep -q 'OPENBLAS_CORETYPE=%s' src/backend/cpu/blas_kernels.cc; then
    echo "  FAIL: EnsureBlasKernels' restart line changed: update gpu-bundle/run's probe"
    fails=$((fails + 1))
  else
    mkdir "$t/stub"
    cp -a "$b/run" "$b/lib" "$t/stub/"
    mkdir "$t/stub/bin"
    cat >"$t/stub.cc" <<'STUB'
#include <cstdio>
#include <cstdlib>
#include <unistd.h>
int main(int argc, char** argv) {
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  if (core != nullptr && *core != '\0') {
    std::printf("core %s detected %s args", core, std::getenv("LADDER_BLAS_DETECTED"));
    for (int i = 1; i < argc; ++i) std::printf(" %s", argv[i]);
    std::printf("\n");
    return 0;
  }
  std::fprintf(stderr, "ladder: OpenBLAS chose its Prescott kernels on a CPU with avx512; "
                       "restarting with OPENBLAS_CORETYPE=SkylakeX\n");
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  setenv("LADDER_BLAS_DETECTED", "Prescott", 1);
  execv("/proc/self/exe", argv);
  return 1;
}
STUB
    g++ -o "$t/stub/bin/ladder" "$t/stub.cc"
    out=$(cd "$t" && env -i PATH=/usr/bin:/bin LADDER_CUDA_LIB_DIRS= stub/run ladder version a 2>/dev/null) || true
    if [ "$out" = "core SkylakeX detected Prescott args version a" ]; then
      echo "  ok: a restart wanted by EnsureBlasKernels: gpu-bundle/run starts the program once with OPENBLAS_CORETYPE=SkylakeX, LADDER_BLAS_DETECTED=Prescott"
    else
      echo "  FAIL: OpenBLAS restart through gpu-bundle/run: '$out'"; fails=$((fails + 1))
    fi
  fi

  if [ "$fails" -ne 0 ]; then
    echo "gpu_bundle: self-test FAILED ($fails)"
    return 1
  fi
  echo "gpu_bundle: self-test passed: $bundle/ ($(du -sm "$bundle" | cut -f1) MiB as it travels) starts and runs its CPU-side checks on its own libraries"
}

case $mode in
  all) build; pack; selftest ;;
  --pack) pack; selftest ;;
  --selftest) selftest ;;
esac
