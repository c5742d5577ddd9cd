#!/usr/bin/env bash
# Resilient training: run a training job and, when it fails, run it again
# until it succeeds or the restarts run out.
#   scripts/train_resilient.sh [--max-restarts N] [--backoff SECONDS]
#       [--nodes-file FILE --ranks-per-node K] -- COMMAND...
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
#
# Elastic mode: --nodes-file FILE --ranks-per-node K. FILE lists the live
# nodes, one name per line (blank lines and # comments ignored); a resource
# manager (or a test) deletes a dead node's line and adds it back when the
# node returns. The job's ranks fill the listed nodes in order, K each, so
# node i of the job holds ranks [i K, (i+1) K). COMMAND must then be
#   MPIRUN [ARGS] -np N [ARGS] LADDER train [ARGS]
# and before each attempt the supervisor reads FILE, asks
# `LADDER plan --largest-layout L*K` for the largest layout of the L live
# nodes' ranks (fewer data-parallel replicas first, tp and pp kept while they
# fit, the global batch unchanged: src/cli/parallel_layout.h), and runs
# COMMAND with -np set to that layout's ranks and its --dp --tp --pp
# --microbatches appended (and --sp=false when a job with --sp is left
# without a tensor group). The command's own --dp --tp --pp --microbatches
# are the job's full layout: a job grows back to it when nodes return (at
# its next restart). Resuming from OUT's checkpoints in the new layout is
# ladder's resharding. The job gets LADDER_NODES_FILE and
# LADDER_RANKS_PER_NODE in its environment. Exit 75 from the job
# (`train --straggler-action restart-without`) names a node to leave out in
# OUT/leave_out.json: the supervisor deletes that node's line and restarts at
# once. While a smaller layout runs, the supervisor checks the nodes file
# twice a second; once the live nodes hold a larger layout it sends the job
# SIGUSR1, and the job checkpoints, exits 75 and is restarted on them. Each attempt's layout ("layout") and each restart ("restart") are
# appended to OUT/events.jsonl. Without elastic mode, exit 75 is not restarted.
set -euo pipefail

prog=train_resilient
max_backoff=300

usage() {
  echo "usage: scripts/train_resilient.sh [--max-restarts N (default 3)]" \
    "[--backoff SECONDS (default 5, doubling, at most $max_backoff)]" \
    "[--nodes-file FILE --ranks-per-node K] -- COMMAND..."
}
bad_usage() {  # MESSAGE: one line, exit 2 like ladder's own flag errors
  echo "$prog: $1" >&2
  usage >&2
  exit 2
}

max_restarts=3
backoff=5
nodes_file=""
per_node=""
while [ $# -gt 0 ]; do
  case $1 in
    --nodes-file)
      [ $# -ge 2 ] || bad_usage "$1 needs a value"
      nodes_file=$2
      shift 2
      ;;
    --ranks-per-node)
      [ $# -ge 2 ] || bad_usage "$1 needs a value"
      [[ $2 =~ ^[1-9][0-9]*$ ]] || bad_usage "$1: '$2' is not a positive integer"
      per_node=$2
      shift 2
      ;;
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
if [ -n "$nodes_file" ] || [ -n "$per_node" ]; then
  if [ -z "$nodes_file" ] || [ -z "$per_node" ]; then
    bad_usage "--nodes-file and --ranks-per-node go together"
  fi
  [ -r "$nodes_file" ] || bad_usage "--nodes-file '$nodes_file' cannot be read"
fi

# ---- elastic mode: the command's parts and the job's full layout ----------
job=("$@")
np_at=-1       # index of -np's value in the command
ladder_at=-1   # index of LADDER (followed by `train`)
config="" out="" ckpt_dir=""
want=()        # the command's --dp --tp --pp --cp --microbatches --sp, for ladder plan
if [ -n "$nodes_file" ]; then
  for ((i = 0; i < ${#job[@]}; i++)); do
    if [ "$ladder_at" -lt 0 ] && [ "${job[i]}" = train ] && [ "$i" -gt 0 ]; then
      ladder_at=$((i - 1))
    elif [ "$ladder_at" -lt 0 ] && [ "$np_at" -lt 0 ] && [ "${job[i]}" = -np ]; then
      np_at=$((i + 1))
    elif [ "$ladder_at" -ge 0 ]; then
      value=${job[i + 1]:-}
      case ${job[i]} in
        --config) config=$value ;;
        --out) out=$value ;;
        --checkpoint-dir) ckpt_dir=$value ;;
        --dp | --tp | --pp | --cp | --microbatches) want+=("${job[i]}" "$value") ;;
        --sp | --sp=*) want+=("${job[i]}") ;;
        --config=* | --out=* | --checkpoint-dir=* | --dp=* | --tp=* | --pp=* | --cp=* | --microbatches=*)
          bad_usage "elastic mode reads '${job[i]%%=*} VALUE', not '${job[i]}'" ;;
      esac
    fi
  done
  if [ "$np_at" -lt 0 ] || [ "$ladder_at" -le "$np_at" ]; then
    bad_usage "elastic mode needs COMMAND as 'MPIRUN ... -np N ... LADDER train ...'"
  fi
  if [ -z "$config" ] || [ -z "$out" ]; then
    bad_usage "elastic mode needs the job's --config and --out"
  fi
  [ -n "$ckpt_dir" ] || ckpt_dir=$out/checkpoints
  export LADDER_NODES_FILE=$nodes_file LADDER_RANKS_PER_NODE=$per_node
fi

live_nodes() {  # the nodes file's names into the array $live
  live=()
  local line
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}
    line=${line//[[:space:]]/}
    [ -n "$line" ] && live+=("$line")
  done <"$nodes_file"
}

checkpoint_step() {  # the step of the job's latest checkpoint, 0 if none
  local latest=""
  [ -f "$ckpt_dir/latest" ] && latest=$(<"$ckpt_dir/latest")
  if [[ $latest =~ step-0*([0-9]+)$ ]]; then echo "${BASH_REMATCH[1]}"; else echo 0; fi
}

event() {  # KIND DETAIL: one line of OUT/events.jsonl (docs/formats.md); elastic mode only
  [ -n "$out" ] || return 0
  local detail=${2//\\/\\\\}  # JSON: backslashes and quotes escaped (node names are free text)
  detail=${detail//\"/\\\"}
  mkdir -p "$out"
  printf '{"time":%s,"step":%d,"kind":"%s","detail":"%s"}\n' "$(date +%s.%3N)" \
    "$(checkpoint_step)" "$1" "$detail" >>"$out/events.jsonl"
}

layout=""  # the last attempt's train flags

ranks_of() {  # FLAGS: the ranks a `plan --largest-layout` line's layout takes
  local -a f
  read -r -a f <<<"$1"
  local n=1 i
  for ((i = 0; i < ${#f[@]}; i++)); do
    case ${f[i]} in --dp | --tp | --pp | --cp) n=$((n * f[i + 1])) ;; esac
  done
  echo "$n"
}
# Sets $command for this attempt: the job as given, or in elastic mode on
# the live nodes' ranks in the largest layout that fits them.
prepare_attempt() {
  command=("${job[@]}")
  [ -n "$nodes_file" ] || return 0
  live_nodes
  local world=$((${#live[@]} * per_node)) flags
  if [ "$world" -eq 0 ]; then
    echo "$prog: no live node in $nodes_file; not starting the job" >&2
    exit 1
  fi
  if ! flags=$("${job[ladder_at]}" plan --config "$config" "${want[@]}" --largest-layout "$world"); then
    echo "$prog: no layout of the job fits the $world rank(s) of ${#live[@]} live node(s)" >&2
    exit 2
  fi
  local -a f
  read -r -a f <<<"$flags"  # --dp D --tp T --pp P --microbatches M [--sp=B] [--cp C]
  command[np_at]=$(ranks_of "$flags")
  command+=("${f[@]}")
  if [ "$flags" != "$layout" ]; then
    echo "$prog: layout dp ${f[1]} x tp ${f[3]} x pp ${f[5]}, ${f[7]} microbatches, on" \
      "${command[np_at]} of the $world ranks of ${#live[@]} live node(s)" >&2
    event layout "dp ${f[1]} x tp ${f[3]} x pp ${f[5]}, ${f[7]} microbatches, ${command[np_at]} ranks on ${#live[@]} node(s): ${live[*]}"
    layout=$flags
  fi
}

# Exit 75: the job stopped to be restarted in another layout: without the
# node OUT/leave_out.json names (its index among the live nodes; its line is
# deleted and $left_out set to its name), or, with no such file, on the
# nodes now live (it was asked to, by SIGUSR1; $left_out empty).
leave_out_node() {
  local json="" node
  left_out=""
  [ -f "$out/leave_out.json" ] || return 0
  json=$(<"$out/leave_out.json")
  if ! [[ $json =~ \"node\":([0-9]+) ]]; then
    echo "$prog: $out/leave_out.json names no node; not restarting" >&2
    exit 75
  fi
  node=${BASH_REMATCH[1]}
  live_nodes
  if [ "$node" -ge "${#live[@]}" ]; then
    echo "$prog: $out/leave_out.json names node $node, but $nodes_file lists ${#live[@]}" >&2
    exit 75
  fi
  printf '%s\n' "${live[@]:0:node}" "${live[@]:node+1}" | grep -v '^$' >"$nodes_file.tmp" || true
  mv "$nodes_file.tmp" "$nodes_file"
  rm -f "$out/leave_out.json"
  left_out=${live[node]}
}

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

# Elastic mode, while an attempt runs: once the live nodes would hold a
# larger layout than the attempt's RANKS, SIGUSR1 to the job (mpirun passes
# it to every rank), which checkpoints and exits 75 to be restarted on them.
watch_for_nodes() {  # JOB_PID RANKS
  trap - INT TERM HUP  # the supervisor's traps are not the watcher's
  local flags
  while kill -0 "$1" 2>/dev/null; do
    sleep 0.5
    live_nodes
    flags=$("${job[ladder_at]}" plan --config "$config" "${want[@]}" \
      --largest-layout $((${#live[@]} * per_node)) 2>/dev/null) || continue
    if [ "$(ranks_of "$flags")" -gt "$2" ]; then
      echo "$prog: ${#live[@]} live node(s) hold a larger layout; asking the job to stop" >&2
      kill -USR1 "$1" 2>/dev/null
      return
    fi
  done
}

run_job() {  # sets $code to the job's exit status
  "$@" <&0 &
  child=$!
  local watcher=""
  if [ -n "$nodes_file" ]; then
    watch_for_nodes "$child" "${command[np_at]}" &
    watcher=$!
  fi
  while :; do
    code=0
    wait "$child" || code=$?
    # A trapped signal interrupts `wait` (status > 128) while the job may still
    # be running: wait again for its own status.
    if [ "$code" -gt 128 ] && kill -0 "$child" 2>/dev/null; then continue; fi
    break
  done
  child=""
  if [ -n "$watcher" ]; then
    kill "$watcher" 2>/dev/null || true
    wait "$watcher" 2>/dev/null || true
  fi
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
why=""
while :; do
  attempt=$((restarts + 1))
  [ -z "$why" ] || event restart "$why"
  prepare_attempt
  run_job "${command[@]}"
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
  if [ "$code" -eq 75 ] && [ -z "$nodes_file" ]; then
    echo "$prog: attempt $attempt asked to be restarted without a node (exit 75), which needs" \
      "--nodes-file; not restarting" >&2
    exit 75
  fi
  if [ "$restarts" -ge "$max_restarts" ]; then
    echo "$prog: giving up after $restarts restarts (last exit $code)" >&2
    exit "$code"
  fi
  restarts=$((restarts + 1))
  if [ "$code" -eq 75 ]; then
    leave_out_node
    why="attempt $attempt stopped to leave out straggling node $left_out"
    [ -n "$left_out" ] || why="attempt $attempt stopped to grow onto the live nodes"
    echo "$prog: $why; restarting at once ($restarts of $max_restarts restarts)" >&2
    continue
  fi
  why="attempt $attempt failed (exit $code)"
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
