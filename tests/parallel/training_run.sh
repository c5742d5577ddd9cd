# Sourced by the parallel training and bench tests, called as
#   SCRIPT LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# Sets $ladder, $src, $mpirun and the array mpirun_args, and a temporary
# directory $tmp (removed on exit) holding a small corpus, $tmp/corpus.txt,
# and stated_peak, flags for the runs whose MFU is not under test: a stated
# GEMM peak spares every rank the ceiling measurement at start-up (0.1 to
# 0.2 s of CPU each, an eighth of the suite's time before it was used).
# tests/parallel/mfu_test.sh and tests/cli/cli_test.sh measure it.
set -u
ladder=$1
src=$2
mpirun=$3
shift 3
mpirun_args=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 300); do echo "In the beginning God created the heaven and the earth. $i"; done >"$tmp/corpus.txt"
stated_peak=(--peak-gflops 100)
