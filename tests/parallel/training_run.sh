# Sourced by the parallel training and bench tests, called as
#   SCRIPT LADDER SOURCE_ROOT MPIRUN [mpirun args...]
# Sets $ladder, $src, $mpirun and the array mpirun_args, and a temporary
# directory $tmp (removed on exit) holding a small corpus, $tmp/corpus.txt.
set -u
ladder=$1
src=$2
mpirun=$3
shift 3
mpirun_args=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for i in $(seq 1 300); do echo "In the beginning God created the heaven and the earth. $i"; done >"$tmp/corpus.txt"
