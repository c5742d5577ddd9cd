# The common part of the teaching experiments (scripts/experiments/NN-name.sh).
# Each experiment measures ladder itself and sets the measurement beside the
# formula or claim it tests. A script:
#
#   source "$(dirname "$0")/lib.sh"
#   exp_init 04-memory-anatomy "Memory anatomy" "$@"   # parses the flags below
#   steps=$(exp_pick 1 3 10)                           # by --size: test, small, full
#   exp_columns setting predicted measured ratio       # the table's header
#   exp_run "$LADDER" train ... --out "$EXP_WORK/run"  # run and record a command
#   exp_row fp32 100 101 1.01                          # one row per setting
#   exp_plot --x setting --y measured --title ...      # `ladder plot` of the table
#   exp_finish "$claim" "$notes"                       # the results page; prints the table
#
# Flags every experiment takes:
#   --size test|small|full  test: seconds (what tests/experiments runs);
#                           small (default): the committed results, at most
#                           10 minutes on 2 CPU cores; full: larger, for a GPU
#   --device cpu|cuda|cuda-sim  where ladder runs (default cpu)
#   --out DIR               where NN-name.md and NN-name.png go (default docs/results)
# LADDER names the binary (default build/ladder, as scripts/setup.sh builds it).
set -euo pipefail

exp_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

exp_init() {  # NAME TITLE FLAGS...
  EXP_NAME=$1 EXP_TITLE=$2
  shift 2
  EXP_SIZE=small EXP_DEVICE=cpu EXP_OUT="$exp_root/docs/results"
  while [ $# -gt 0 ]; do
    case $1 in
      --size | --device | --out)
        [ $# -ge 2 ] || { echo "$EXP_NAME: $1 needs a value" >&2; exit 2; }
        case $1 in --size) EXP_SIZE=$2 ;; --device) EXP_DEVICE=$2 ;; --out) EXP_OUT=$2 ;; esac
        shift 2 ;;
      -h | --help)
        echo "usage: $0 [--size test|small|full] [--device cpu|cuda|cuda-sim] [--out DIR]"
        exit 0 ;;
      *) echo "$EXP_NAME: unknown flag '$1' (--size, --device, --out)" >&2; exit 2 ;;
    esac
  done
  case $EXP_SIZE in test | small | full) ;; *)
    echo "$EXP_NAME: --size must be test, small or full, got '$EXP_SIZE'" >&2; exit 2 ;;
  esac
  case $EXP_DEVICE in cpu | cuda | cuda-sim) ;; *)
    echo "$EXP_NAME: --device must be cpu, cuda or cuda-sim, got '$EXP_DEVICE'" >&2; exit 2 ;;
  esac
  LADDER=${LADDER:-$exp_root/build/ladder}
  [ -x "$LADDER" ] || {
    echo "$EXP_NAME: no ladder binary at $LADDER (scripts/setup.sh build makes it; or set LADDER)" >&2
    exit 2
  }
  mkdir -p "$EXP_OUT"
  EXP_WORK=$(mktemp -d)
  trap 'rm -rf "$EXP_WORK"' EXIT
  # exp_calc and friends start python3 for every figure: Debian's, fast.
  source "$exp_root/scripts/lib/python.sh"
  use_debian_python "$EXP_WORK/bin"
  EXP_TSV="$EXP_WORK/table.tsv"
  EXP_COMMANDS=()
  export OMP_WAIT_POLICY=PASSIVE
  # A corpus every experiment may train on: the setup's Bible, or the docs.
  EXP_CORPUS="$exp_root/data/kjv.txt"
  if [ ! -s "$EXP_CORPUS" ]; then
    EXP_CORPUS="$EXP_WORK/corpus.txt"
    cat "$exp_root"/README.md "$exp_root"/docs/*.md >"$EXP_CORPUS"
  fi
}

# The value for this --size: exp_pick TEST SMALL FULL.
exp_pick() {
  case $EXP_SIZE in test) echo "$1" ;; small) echo "$2" ;; full) echo "$3" ;; esac
}

# Runs a command and records it for the results page (the binary written as
# `ladder`, the scratch directory as $WORK, paths in the repository relative
# to its root).
exp_run() {
  local line
  line=$(printf '%q ' "$@")
  line=${line//"$LADDER"/ladder}
  line=${line//"$EXP_WORK"/\$WORK}
  EXP_COMMANDS+=("${line//"$exp_root/"/}")
  "$@"
}

exp_columns() { (IFS=$'\t'; echo "$*") >"$EXP_TSV"; }
exp_row() { (IFS=$'\t'; echo "$*") >>"$EXP_TSV"; }

# `ladder plot` of the table (or of EXP_PLOT_TSV, a second table in the same
# form, where the plot shows a part of the measurements) into NN-name.png;
# the arguments are its flags (--x, --y, --title, --x-label, --y-label,
# --log-x, --log-y).
exp_plot() {
  "$LADDER" plot --table "${EXP_PLOT_TSV:-$EXP_TSV}" --out "$EXP_OUT/$EXP_NAME.png" "$@" >/dev/null
}

# Writes NN-name.md: the title, the claim (markdown), the table, the notes
# (markdown: what matched, what did not and why), the plot, the commands and
# the machine; then prints the table.
exp_finish() {  # CLAIM NOTES
  local machine
  machine="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, \
$(free -g | awk '/^Mem:/ {print $2}') GiB; $("$LADDER" version 2>/dev/null | grep -E '^(blas|cuda):' |
    tr '\n' ';' | sed 's/;$//; s/;/; /g'); --size $EXP_SIZE, --device $EXP_DEVICE; $(date -u +%Y-%m-%d)"
  python3 - "$EXP_TSV" "$EXP_OUT/$EXP_NAME.md" "$EXP_NAME" "$EXP_TITLE" "$1" "$2" "$machine" \
    "${EXP_COMMANDS[@]}" <<'PY'
import os, sys
tsv, out, name, title, claim, notes, machine = sys.argv[1:8]
commands = sys.argv[8:]
rows = [line.rstrip("\n").split("\t") for line in open(tsv) if line.strip()]
table = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
table += ["| " + " | ".join(r) + " |" for r in rows[1:]]
page = [f"# {name[:2]}. {title}", "", claim.strip(), "", *table, "", notes.strip(), ""]
if os.path.exists(os.path.join(os.path.dirname(out), name + ".png")):
    page += [f"![{title}]({name}.png)", ""]
page += ["Commands (`$WORK` is a scratch directory):", "", "```", *commands, "```", "",
         f"Machine: {machine}.", ""]
tmp = out + ".tmp"
open(tmp, "w").write("\n".join(page))
os.replace(tmp, out)
PY
  column -t -s $'\t' "$EXP_TSV"
  echo "results: $EXP_OUT/$EXP_NAME.md"
}

# Open MPI as the experiments launch ranks on one machine (oversubscribed,
# one thread each): exp_mpirun NP COMMAND...
exp_mpirun() {
  local np=$1
  shift
  exp_run mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader \
    --mca pml ob1 -x OMP_NUM_THREADS=1 -np "$np" "$@"
}

# A JSON field of a file, by a Python expression over `j` (the parsed file):
# exp_json FILE "j[0]['memory']['weights']".
exp_json() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); print($2)" "$1"; }
# Arithmetic in Python: exp_calc "2 * 3 / 4" -> 1.5; exp_fmt VALUE DIGITS.
# Medians over a run's steps after the first (which warms the caches and
# the BLAS) of expressions over each step's split, `t` its time_s:
#   exp_step_medians RUN/metrics.jsonl 't["step"]' 't["forward"] + t["backward"]'
# prints them on one line.
exp_step_medians() {
  python3 - "$@" <<'PY'
import json, statistics, sys
steps = [json.loads(l)["time_s"] for l in open(sys.argv[1])]
later = steps[1:] or steps
print(*(statistics.median(eval(e, {}, {"t": t}) for t in later) for e in sys.argv[2:]))
PY
}
exp_calc() { python3 -c "print($1)"; }
exp_fmt() { python3 -c "print(f'{float(\"$1\"):.$2f}')"; }
