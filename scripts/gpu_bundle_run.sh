#!/usr/bin/env bash
# Runs a program of the GPU bundle (scripts/gpu_bundle.sh packs it; this file
# travels as gpu-bundle/run) on the bundle's own glibc and libraries, so that
# a build made on Debian 12 runs on another distribution:
#   gpu-bundle/run PROGRAM [ARGS...]     PROGRAM: a name in gpu-bundle/bin, or a path
#   eval "$(gpu-bundle/run --blas-env)"  export the OpenBLAS choice (below) once, for many runs
#   gpu-bundle/run --unpack              only unpack
# bin/ and lib/ travel as payload.tar.gz (the device machine takes at most
# 64 MiB; OpenBLAS alone is 36 MiB): the first call unpacks them into
# gpu-bundle.unpacked/ beside it (again when the payload is newer), or, where
# that cannot be written, into a fresh temporary directory; --unpack prints
# the directory, whose own `run` then starts the programs without a look at
# the payload.
# which is
#   gpu-bundle/lib/ld-linux-x86-64.so.2 --library-path gpu-bundle/lib:CUDA_DIRS PROGRAM ARGS
# CUDA_DIRS: $LADDER_CUDA_LIB_DIRS (colon separated) if set, else those of
# /usr/local/cuda/lib64, /usr/local/cuda/targets/x86_64-linux/lib and the
# entries of $LD_LIBRARY_PATH that exist (the explicit loader ignores
# LD_LIBRARY_PATH itself). libcublasLt.so.13 and libnccl.so.2 come from there,
# and what is still missing (the driver's libcuda.so.1, which the CUDA runtime
# opens on first use) from the system's ld.so.cache and /lib, /usr/lib. The
# bundle's directory comes first, so its glibc, libstdc++, OpenBLAS, Open MPI
# and Abseil win over any copy on the machine.
#
# OpenBLAS's kernels: `ladder` may restart itself with OPENBLAS_CORETYPE set
# (src/backend/cpu/blas_kernels.h, EnsureBlasKernels) through execv of
# /proc/self/exe, which under an explicit loader is the loader, started
# without --library-path and the program. So unless OPENBLAS_CORETYPE is set
# already, this wrapper asks ladder once: it runs `ladder --help`; when
# EnsureBlasKernels wants a restart it prints
#   ladder: OpenBLAS chose its DETECTED kernels on a CPU with ISA; restarting with OPENBLAS_CORETYPE=CORE
# and execs the loader with argv [ladder, --help], which prints the loader's
# own help, harmlessly. The wrapper then exports OPENBLAS_CORETYPE=CORE and
# LADDER_BLAS_DETECTED=DETECTED, the two variables EnsureBlasKernels sets
# before its execv, so the real run starts on the kernels it would have
# restarted into and `ladder version` reports "set by ladder". With
# LADDER_BUNDLE_BLAS_PROBED=1 in the environment (--blas-env prints it) the
# question is not asked again.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -f "$here/payload.tar.gz" ]; then
  # gpu-bundle/ itself stays as it travels; the programs live beside it.
  dest=$here.unpacked
  if [ ! -f "$dest/bin/.unpacked" ] || [ "$here/payload.tar.gz" -nt "$dest/bin/.unpacked" ]; then
    if ! { rm -rf "$dest" && mkdir -p "$dest"; } 2>/dev/null; then
      dest=$(mktemp -d "${TMPDIR:-/tmp}/ladder-gpu-bundle.XXXXXX")
    fi
    tar -C "$dest" -xzf "$here/payload.tar.gz"
    cp "$here/run" "$here/MANIFEST" "$dest/"
    touch "$dest/bin/.unpacked"
  fi
  here=$dest
fi
loader=$here/lib/ld-linux-x86-64.so.2

if [ -n "${LADDER_CUDA_LIB_DIRS+set}" ]; then
  cuda_dirs=$LADDER_CUDA_LIB_DIRS
else
  cuda_dirs=
  IFS=: read -r -a candidates <<<"/usr/local/cuda/lib64:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
  for d in "${candidates[@]}"; do
    [ -n "$d" ] && [ -d "$d" ] && cuda_dirs=$cuda_dirs:$d
  done
  cuda_dirs=${cuda_dirs#:}
fi
libpath=$here/lib${cuda_dirs:+:$cuda_dirs}

# Sets OPENBLAS_CORETYPE and LADDER_BLAS_DETECTED as EnsureBlasKernels would.
blas_probe() {
  export LADDER_BUNDLE_BLAS_PROBED=1
  [ -z "${OPENBLAS_CORETYPE:-}" ] || return 0
  # Without the launcher's rank variables: the line is printed by rank 0 only.
  local note re='chose its ([A-Za-z0-9_]+) kernels .*restarting with OPENBLAS_CORETYPE=([A-Za-z0-9_]+)'
  note=$(env -u OMPI_COMM_WORLD_RANK -u PMIX_RANK -u PMI_RANK -u SLURM_PROCID \
         "$loader" --library-path "$libpath" "$here/bin/ladder" --help 2>&1 >/dev/null </dev/null || true)
  if [[ $note =~ $re ]]; then
    export OPENBLAS_CORETYPE=${BASH_REMATCH[2]} LADDER_BLAS_DETECTED=${BASH_REMATCH[1]}
    echo "gpu-bundle: OpenBLAS chose its ${BASH_REMATCH[1]} kernels; running with" \
         "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE, as ladder would restart" >&2
  fi
}

if [ $# -lt 1 ]; then
  echo "usage: $0 PROGRAM [ARGS...] | --blas-env   (programs: $(ls "$here/bin" | tr '\n' ' '))" >&2
  exit 2
fi
if [ -z "${LADDER_BUNDLE_BLAS_PROBED:-}" ] && [ "$1" != --unpack ]; then
  blas_probe
fi
if [ "$1" = --unpack ]; then
  echo "$here"
  exit 0
fi
if [ "$1" = --blas-env ]; then
  echo "export LADDER_BUNDLE_BLAS_PROBED=1"
  [ -z "${OPENBLAS_CORETYPE:-}" ] || echo "export OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE"
  [ -z "${LADDER_BLAS_DETECTED:-}" ] || echo "export LADDER_BLAS_DETECTED=$LADDER_BLAS_DETECTED"
  exit 0
fi
prog=$1
shift
case $prog in
  */*) ;;
  *) prog=$here/bin/$prog ;;
esac

exec "$loader" --library-path "$libpath" "$prog" "$@"
