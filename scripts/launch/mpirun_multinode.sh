#!/usr/bin/env bash
# mpirun across the nodes of a hostfile (scripts/launch/hostfile.example), 8
# ranks per node: ranks fill node by node (--map-by ppr:8:node) and tensor
# parallelism is innermost in ladder's grid, so every tensor-parallel group
# (--tp 4, dividing gpt2-124m's 12 heads) stays inside a node and its
# all-reduces never cross the network; data parallelism (2 per node) runs
# between nodes. dp must divide the config's batch_size (4): up to 2 nodes.
#   scripts/launch/mpirun_multinode.sh HOSTFILE [extra ladder train flags]
set -euo pipefail
cd "$(dirname "$0")/../.."
hostfile=${1:?usage: mpirun_multinode.sh HOSTFILE [flags]}
shift
nodes=$(grep -cv '^\s*\(#\|$\)' "$hostfile")
exec mpirun --hostfile "$hostfile" -np $((nodes * 8)) --map-by ppr:8:node --bind-to core \
  -x OMP_NUM_THREADS=4 build/ladder train --config configs/gpt2-124m.conf \
  --dp $((nodes * 2)) --tp 4 --zero 1 --out runs/gpt2-124m-multinode "$@"
