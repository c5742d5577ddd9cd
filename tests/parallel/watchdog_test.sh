#!/usr/bin/env bash
# The hang watchdog: in a 4-rank job (dp 2 x tp 2) rank 1 never joins a
# data-axis all-reduce. Its data peer, rank 3, must give up after the 2 s
# timeout with exactly one line naming the op, the axis and the missing rank,
# and the whole job must end non-zero within a few seconds. (-q drops Open
# MPI's own MPI_ABORT banner, leaving the rank's line alone.)
#   watchdog_test.sh MPIRUN COMM_MPI_TEST [MPIRUN_ARGS...]
set -u
mpirun=$1
prog=$2
shift 2
err=$(mktemp)
trap 'rm -f "$err"' EXIT

start=$(date +%s%N)
timeout 40 "$mpirun" -q "$@" -np 4 "$prog" --dp 2 --tp 2 --timeout 2 --skip-allreduce-rank 1 \
  2>"$err"
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$err"
echo "exit code $rc after ${elapsed_ms} ms"

want='ladder: rank 3 timed out after 2s in all-reduce on the data axis waiting for world rank 1'
fail=0
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
  echo "FAIL: expected the job to abort with a non-zero exit code, got $rc"
  fail=1
fi
if ! grep -qxF "$want" "$err"; then
  echo "FAIL: missing the line: $want"
  fail=1
fi
if [ "$(grep -c 'timed out' "$err")" -ne 1 ]; then
  echo "FAIL: expected exactly one 'timed out' line"
  fail=1
fi
if [ "$elapsed_ms" -gt 15000 ]; then
  echo "FAIL: took ${elapsed_ms} ms; the timeout is 2 s"
  fail=1
fi
exit $fail
