#!/usr/bin/env bash
# CUDA builds: ladder does not link cuBLASLt but opens it on first use
# (src/backend/cuda/cublaslt_library.h), so a process that never multiplies
# on a GPU starts as fast as a CPU build's:
#  - the binary names no libcublasLt among its needed libraries;
#  - `ladder version`, which loads it, names the version it found;
#  - `ladder help` does not load it (the loader's own record, LD_DEBUG=libs).
#   cublaslt_library_test.sh LADDER
set -u
ladder=$1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
needed=$(readelf -d "$ladder" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || fail "readelf lists no needed library of $ladder"
grep -q '^libcublasLt' <<<"$needed" && fail "ladder links cuBLASLt: $(grep '^libcublasLt' <<<"$needed")"
line=$("$ladder" version 2>/dev/null | grep '^cuda: ')
grep -qE '^cuda: compiled for .*\(runtime [0-9.]+, cuBLASLt [0-9]+\.[0-9]+\.[0-9]+\)' <<<"$line" ||
  fail "ladder version does not name a loaded cuBLASLt: '$line'"
loads=$(LD_DEBUG=libs "$ladder" help 2>&1 >/dev/null | grep -c 'calling init: .*libcublasLt')
[ "$loads" -eq 0 ] || fail "ladder help loaded cuBLASLt"
loads=$(LD_DEBUG=libs "$ladder" version 2>&1 >/dev/null | grep -c 'calling init: .*libcublasLt')
[ "$loads" -ge 1 ] || fail "LD_DEBUG=libs saw no cuBLASLt initialized by ladder version"
[ "$failures" -eq 0 ] && echo "cuBLASLt is loaded on first use, not at start" || exit 1
