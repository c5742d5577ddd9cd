#!/usr/bin/env bash
# Resilient training: run a training job and, when it fails, run it again
# until it succeeds or the restarts run out.
#   scripts/train_resilient.sh [--max-restarts N] [--backoff SECONDS] -- COMMAND...
# COMMAND is the whole job, e.g.
#   scripts/train_resilient.sh -- mpirun -np 8 build/ladder train --config C \
#       --dp 2 --tp 2 --pp 2 --out runs/x --save-every 100
# A node that dies, a rank killed by the OOM killer or a hung collective that
# --comm-timeout aborts ends the whole job with a non-zero exit; rerunning the
# same command resumes from OUT/checkpoints/latest by itself, and because
# resume is exact the result is bitwise the one of an uninterrupted run. So
# this supervisor only has to rerun the command: it restarts on any non-zero
# exit, up to --max-restarts N times (default 3), sleeping --backoff seconds
# first (default 5, doubling each restart, at most 300). It never restarts on
# exit 2: ladder's one-line errors about a bad flag, config or file, which a
# rerun cannot fix. Each failure is one line on stderr prefixed
# "train_resilient:"; the exit status is the job's last one. SIGINT, SIGTERM
# and SIGHUP are passed to the job (as SIGTERM) and stop the restarts.
set -euo pipefail

prog=train_resilient
max_backoff=300

usage() {
  echo "usage: scripts/train_resilient.sh [--max-restarts N (default 3)]" \
    "[--backoff SECONDS (default 5, doubling, at most $max_backoff)] -- COMMAND..."
}
bad_usage() {  # MESSAGE: one line, exit 2 like ladder's own flag errors
  echo "$prog: $1" >&2
  usage >&2
  exit 2
}

max_restarts=3
backoff=5
while [ $# -gt 0 ]; do
  case $1 in
    --max-restarts | --backoff)
      [ $# -ge 2 ] || bad_usage "$1 needs a value"
      [[ $2 =~ ^[0-9]+$ ]] || bad_usage "$1: '$2' is not a non-negative integer"
      if [ "$1" = --backoff ]; then backoff=$((10#$2)); else max_restarts=$((10#$2)); fi
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    --)
      shift
      break
      ;;
    *) bad_usage "unknown flag '$1' (the command follows --)" ;;
  esac
done
[ $# -gt 0 ] || bad_usage "no command after --"
[ "$backoff" -le "$max_backoff" ] || backoff=$max_backoff

# The job runs in the background so that a signal to the supervisor reaches
# it at once (bash runs traps only between commands, and `wait` is one).
child=""
stopped_by=""
on_signal() {  # SIGNAL
  stopped_by=$1
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null || true; fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

run_job() {  # sets $code to the job's exit status
  "$@" <&0 &
  child=$!
  while :; do
    code=0
    wait "$child" || code=$?
    # A trapped signal interrupts `wait` (status > 128) while the job may still
    # be running: wait again for its own status.
    if [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi
    break
  done
  child=""
}

stop_if_signalled() {  # EXIT_CODE
  if [ -n "$stopped_by" ]; then
    echo "$prog: stopped by SIG$stopped_by; not restarting (exit $1)" >&2
    exit "$1"
  fi
}

restarts=0
delay=$backoff
code=0
while :; do
  attempt=$((restarts + 1))
  run_job "$@"
  if [ "$code" -eq 0 ]; then
    if [ "$restarts" -gt 0 ]; then
      echo "$prog: attempt $attempt succeeded after $restarts restart(s)" >&2
    fi
    exit 0
  fi
  stop_if_signalled "$code"
  if [ "$code" -eq 2 ]; then
    echo "$prog: attempt $attempt failed (exit 2: bad input, such as a flag, config or" \
      "file; a rerun cannot fix it); not restarting" >&2
    exit 2
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "$prog: giving up after $restarts restarts (last exit $code)" >&2
    exit "$code"
  fi
  restarts=$((restarts + 1))
  echo "$prog: attempt $attempt failed (exit $code); restarting in ${delay}s" \
    "($restarts of $max_restarts restarts)" >&2
  sleep "$delay" &
  child=$!
  wait "$child" || true
  child=""
  stop_if_signalled "$code"
  delay=$((delay * 2))
  [ "$delay" -le "$max_backoff" ] || delay=$max_backoff
done
