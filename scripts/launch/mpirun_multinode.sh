#!/usr/bin/env bash
# mpirun across the nodes of a hostfile (scripts/launch/hostfile.example), 8
# ranks per node: ranks fill node by node (--map-by ppr:8:node) and ladder's
# grid is [pp][dp][tp] with tensor parallelism innermost, so with --tp 4
# --dp 2 each node holds exactly one pipeline stage: every tensor-parallel
# group (4 ranks, dividing gpt2-124m's 12 heads) and every data-parallel
# all-reduce stays inside a node, and only the pipeline's activations and
# gradients (one [B,T,C] tensor per microbatch and hand-over) cross the
# network. --pp is the node count (at most 12, gpt2-124m's layers); 16
# microbatches per DP rank keep the bubble at (P-1)/(16+P-1).
#   scripts/launch/mpirun_multinode.sh HOSTFILE [extra ladder train flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
hostfile=${1:?usage: mpirun_multinode.sh HOSTFILE [flags]}
shift
nodes=$(grep -cv '^\s*\(#\|$\)' "$hostfile")
exec mpirun --hostfile "$hostfile" -np $((nodes * 8)) --map-by ppr:8:node --bind-to core \
  -x OMP_NUM_THREADS=4 build/ladder train --config configs/gpt2-124m.conf \
  --tp 4 --dp 2 --pp "$nodes" --microbatches 16 --pp-schedule 1f1b --zero 1 \
  --out runs/gpt2-124m-multinode "$@"
