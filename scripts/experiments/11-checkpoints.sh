#!/usr/bin/env bash
# Lesson 11, checkpoints: what a save costs (`ladder bench checkpoint`: the
# stall of a synchronous save, of an asynchronous one's snapshot, of a
# memory checkpoint, and a restore from memory against one from disk) over
# model sizes, with the Young/Daly interval sqrt(2 C MTBF) and the time it
# loses; then what a resume must restore: a run killed after step N
# (--inject-fault kill:0@N) and rerun continues bitwise as if never killed,
# while a resume that leaves out the data position or the shuffle's random
# state (--resume-forget data|rng) trains on other batches and diverges.
source "$(dirname "$0")/lib.sh"
exp_init 11-checkpoints "Checkpoints: what a save costs and what a resume must restore" "$@"

# Checkpoint cost: models LAYERSxWIDTH (12 bytes a parameter: the weights
# and AdamW's two moments), up to about 300 MiB at --size small.
sizes=$(exp_pick "2x64 2x128" "4x256 6x384 8x512" "8x512 12x768 24x1024")
mtbf_h=24
# The resume: a model trained 2N steps straight, killed after step N and
# resumed; the corpus is cut so that the 2N steps stay inside one epoch
# (each window is read at most once, so a replayed batch is one the run has
# seen exactly once before).
layers=$(exp_pick 1 4 6)
width=$(exp_pick 32 192 384)
context=$(exp_pick 32 64 64)
batch=$(exp_pick 4 16 16)
n=$(exp_pick 6 150 300)
steps=$((2 * n))

exp_columns model params_M checkpoint_MiB disk_MiB_per_s sync_s async_stall_s async_commit_s \
  mem_save_s mem_restore_s disk_restore_s interval_min lost_pct
for size in $sizes; do
  l=${size%x*} w=${size#*x}
  cat >"$EXP_WORK/ckpt_$size.conf" <<CONF
n_layer = $l
n_head = 4
n_embd = $w
context = 256
vocab_size = 256
batch_size = 1
CONF
  exp_run "$LADDER" bench checkpoint --config "$EXP_WORK/ckpt_$size.conf" --mtbf-hours "$mtbf_h" \
    --dir "$EXP_WORK/bench" >"$EXP_WORK/bench_$size.log" 2>&1 || { cat "$EXP_WORK/bench_$size.log"; exit 1; }
  tail -1 "$EXP_WORK/bench_$size.log" >"$EXP_WORK/bench_$size.json"
  params=$(sed -n 's/.*, \([0-9.]*\)M parameters.*/\1/p' "$EXP_WORK/bench_$size.log")
  # Young/Daly: save every sqrt(2 C M); the share of time lost is then the
  # saves' C / interval plus the half interval redone per failure,
  # interval / (2 M): sqrt(2 C / M) in all.
  python3 - "$EXP_WORK/bench_$size.json" "$size" "$params" "$mtbf_h" >>"$EXP_TSV" <<'PY'
import json, sys
j, size, params, mtbf = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], float(sys.argv[4]) * 3600
c = j["sync_s"]
print("\t".join([size, params, f"{j['bytes'] / 2**20:.1f}", f"{j['disk_bytes_per_s'] / 2**20:.0f}",
                 f"{c:.3f}", f"{j['async_stall_s']:.3f}", f"{j['async_total_s']:.3f}",
                 f"{j['mem_save_s']:.3f}", f"{j['mem_restore_s']:.3f}", f"{j['disk_restore_s']:.3f}",
                 f"{(2 * c * mtbf) ** 0.5 / 60:.1f}", f"{100 * (2 * c / mtbf) ** 0.5:.2f}"]))
PY
done

# The resume.
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = $layers
n_head = 4
n_embd = $width
context = $context
vocab_size = 256
batch_size = $batch
steps = $steps
lr = 3e-3
min_lr = 3e-4
warmup_steps = $((steps / 20))
eval_every = 0
eval_batches = 16
log_every = $n
CONF
# About 10% more text than 2N batches read: the validation share and a margin.
head -c $((steps * batch * context * 110 / 100 + 4 * context)) "$EXP_CORPUS" >"$EXP_WORK/corpus.txt"
train() {  # NAME FLAGS...: one run into $EXP_WORK/NAME, its log NAME.log (appended)
  local name=$1
  shift
  exp_run "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_WORK/corpus.txt" \
    --out "$EXP_WORK/$name" "$@" >>"$EXP_WORK/$name.log" 2>&1 || { cat "$EXP_WORK/$name.log"; exit 1; }
}
killed() {  # NAME FLAGS...: a run whose rank 0 kills itself (SIGKILL, exit 137)
  local name=$1 rc=0
  shift
  { exp_run "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_WORK/corpus.txt" \
    --out "$EXP_WORK/$name" "$@" >>"$EXP_WORK/$name.log" 2>&1; } 2>/dev/null || rc=$?
  [ "$rc" = 137 ] || { cat "$EXP_WORK/$name.log"; echo "expected the kill (137), got $rc" >&2; exit 1; }
}
train reference
# Synchronous saves every N steps, killed after step N (its save done), rerun.
killed resumed --save-every "$n" --inject-fault "kill:0@$n"
cp -r "$EXP_WORK/resumed/checkpoints" "$EXP_WORK/at_n"
train resumed --save-every "$n"
# Asynchronous saves every N/2 steps, killed after step N: the save of step
# N is still being written, so the rerun resumes from step N/2.
killed async --save-every $((n / 2)) --async-save --inject-fault "kill:0@$n"
train async --save-every $((n / 2)) --async-save
# From the same checkpoint of step N (the killed run's, copied to $WORK/at_n
# before its rerun), forgetting the data position, then the shuffle's random
# state.
train forget_data --resume "$EXP_WORK/at_n" --resume-forget data
train forget_rng --resume "$EXP_WORK/at_n" --resume-forget rng

# Each run against the reference over the steps after its resume: the
# largest and the mean loss difference, and the correlation of the steps'
# wiggles (each loss less its running mean over 11 steps: a batch's own
# difficulty) with those of steps 1..N, which a run that replays the first
# N batches repeats. Then the validation loss, and the final weights.
EXP_PLOT_TSV="$EXP_WORK/divergence.tsv"
python3 - "$EXP_WORK" "$n" "$EXP_PLOT_TSV" >"$EXP_WORK/resume.md" <<'PY'
import json, re, statistics, sys
work, n, plot = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def metrics(name):  # the last record of each step (a rerun logs a step again)
    return {j["step"]: j for j in map(json.loads, open(f"{work}/{name}/metrics.jsonl"))}
def wiggles(losses):
    k = 5
    return [x - statistics.mean(losses[max(0, i - k):i + k + 1]) for i, x in enumerate(losses)]
ref = metrics("reference")
last = max(ref)
first = wiggles([ref[s]["loss"] for s in range(1, n + 1)])
ref_model = open(f"{work}/reference/model.bin", "rb").read()
diffs = {}
print("| run | resumed at step | steps compared | max abs loss diff | mean loss diff | "
      "its standard error | wiggle corr with steps 1..N | val loss | val diff | final weights |")
print("|---|---|---|---|---|---|---|---|---|---|")
for name in ["reference", "resumed", "async", "forget_data", "forget_rng"]:
    m = metrics(name)
    log = open(f"{work}/{name}.log").read()
    at = re.findall(r"resumed from \S+ at step (\d+)", log)
    start = int(at[-1]) if at else 0
    if name == "reference":
        start = n  # its own second half, for the wiggles' baseline
    steps = [s for s in range(start + 1, last + 1)]
    d = [m[s]["loss"] - ref[s]["loss"] for s in steps]
    diffs[name] = {s: m[s]["loss"] - ref[s]["loss"] for s in m if s > (start if at else 0)}
    second = wiggles([m[s]["loss"] for s in range(n + 1, last + 1)])
    cut = max(1, n // 10)  # the steepest start of the curve left out
    corr = (f"{statistics.correlation(first[cut:], second[cut:]):.2f}"
            if n - cut >= 8 else "-")
    same = open(f"{work}/{name}/model.bin", "rb").read() == ref_model
    val, rval = m[last]["val_loss"], ref[last]["val_loss"]
    if name == "reference":
        print(f"| {name} | - | {steps[0]}..{steps[-1]} | - | - | - | {corr} | {val:.4f} | - | - |")
        continue
    print(f"| {name} | {at[-1] if at else '-'} | {steps[0]}..{steps[-1]} | "
          f"{max(abs(x) for x in d):.4g} | {statistics.mean(d):+.4f} | "
          f"{statistics.stdev(d) / len(d) ** 0.5:.4f} | {corr} | {val:.4f} | "
          f"{val - rval:+.4f} | {'bitwise equal' if same else 'differ'} |")
# The plot's table: each resumed run's loss less the reference's, per step.
names = ["resumed", "async", "forget_data", "forget_rng"]
with open(plot, "w") as f:
    f.write("\t".join(["step"] + names) + "\n")
    for s in range(1, last + 1):
        f.write("\t".join([str(s)] + [f"{diffs[k][s]:.5f}" if s in diffs[k] else "-"
                                      for k in names]) + "\n")
PY
exp_plot --x step --y async,forget_data,forget_rng,resumed \
  --title "Loss after a resume, less the uninterrupted run's" --x-label "step" \
  --y-label "loss - reference loss"

# Figures for the notes.
row() { sed -n "$1p" "$EXP_TSV"; }
last=$(wc -l <"$EXP_TSV")
res() { grep "^| $1 |" "$EXP_WORK/resume.md" | cut -d'|' -f"$2" | tr -d ' '; }
train_tokens=$(sed -n 's/^data: \([0-9]*\) train.*/\1/p' "$EXP_WORK/reference.log" | head -1)
windows=$(( (train_tokens - 1) / context ))
big_sync=$(row "$last" | cut -f5) big_async=$(row "$last" | cut -f6)
read -r epoch_pct half_pct rng_pct big_interval_async save_pct async_pct restore_pct < <(python3 - <<PY
w, n, b, steps = $windows, $n, $batch, $steps
sync, async_, mib, rate = $big_sync, $big_async, $(row "$last" | cut -f3), $(row "$last" | cut -f4)
print(round(100 * steps * b / w), round(100 * n * b / w),
      round(100 * (n * b + n * b * (1 - n * b / w)) / w),
      round((2 * async_ * $mtbf_h * 3600) ** 0.5 / 60, 1), round(100 * mib / sync / rate),
      round(100 * async_ / sync), round(100 * $(row "$last" | cut -f9) / $(row "$last" | cut -f10)))
PY
)
data_pct=$half_pct
exp_finish "
**Claims.** A checkpoint stalls training for as long as it takes to write
the model and optimizer state (12 bytes a parameter in fp32 with AdamW) at
the disk's speed; an asynchronous save stalls only for the copy into host
memory, and a checkpoint in memory restores faster than one from disk.
Saving every sqrt(2 C MTBF) (Young/Daly, for a save costing C seconds and a
mean time between failures MTBF) balances the time spent saving against
the work redone after a failure, and loses sqrt(2 C / MTBF) of the time.
A resume that restores everything (weights, moments, step, data position,
random state) continues bitwise as if the run had never stopped; one that
loses the data position replays data already seen (its training loss looks
better than it is), and one that loses the random state draws other
batches.

The table: \`ladder bench checkpoint\` (src/cli/bench_checkpoint.cc) on
models of LAYERSxWIDTH, with the disk's rate for one fsync'ed file of the
same size measured in the same run; the interval and the share of time lost
are Young/Daly's for the synchronous stall at an MTBF of $mtbf_h h. Below
it, a $layers-layer, $width-wide model trains $steps steps ($batch sequences of
$context bytes a step, $epoch_pct% of one epoch of the corpus) straight, and
again killed after step $n (\`--inject-fault kill:0@$n\`) and rerun.
" "
**Cost.** The largest model's checkpoint, $(row "$last" | cut -f3) MiB, stalls a
synchronous save for $big_sync s; the disk took one file of that size at
$(row "$last" | cut -f4) MiB/s, so the save ran at $save_pct% of the disk's rate: the
state is gathered, copied and checksummed piece by piece into host memory
(\`TakeSnapshot\`, src/checkpoint/checkpoint.h) before a byte is written.
That snapshot is the asynchronous save's whole stall, $big_async s or
$async_pct% of the synchronous one, so saving asynchronously saved less here
than the claim suggests: the copy into memory should take a small part of
the write, but a profile (perf) of the bench on this virtual machine puts
most of the snapshot's time in page faults and zeroing of the freshly
allocated buffers it fills, not in the copy or the checksums. The writing
then finished $(row "$last" | cut -f7) s after the save began, in the background.
The memory checkpoint's save stalled for $(row "$last" | cut -f8) s (the same snapshot, then
the files in /dev/shm), and its restore took $(row "$last" | cut -f9) s against the disk's
$(row "$last" | cut -f10) s ($restore_pct% of it): the restore from memory reads at memory
speed, so nearly all of its time is the work both restores do, verifying
every checksum and setting every tensor, and one machine's local disk adds
little to that (which of the two is faster changes between runs). What memory saves is the trip to a shared file system, which
one machine does not have. Young/Daly for the synchronous save at an MTBF of
$mtbf_h h: every $(row "$last" | cut -f11) minutes, losing $(row "$last" | cut -f12)% of the time (half in
saves, half in redone work); the asynchronous stall would allow every
$big_interval_async minutes. The interval grows as the square root of the cost:
a save 8 times as costly is made about 3 times less often. (The figures
vary by tens of percent between runs on a shared 2-core machine.)

**Resume.** Each run's loss at every step after its resume, less the
uninterrupted run's. The wiggle correlation tells which batches a run read:
each step's loss less its running mean over 11 steps (how hard that step's
batch was) is correlated with the same of the reference's steps 1..N, whose
pattern a run that reads those batches again repeats (\`reference\`'s row
correlates its own second half, the baseline for other batches):

$(cat "$EXP_WORK/resume.md")

The killed run, rerun with the same command, finds \`OUT/checkpoints\` and
continues from step $(res resumed 3): every later loss and the final weights
are bitwise the uninterrupted run's (difference $(res resumed 5)). The
asynchronous run was killed while step $n's save was still being written,
so no checkpoint of step $n was committed (its \`.tmp\` directory is
ignored) and the rerun went back to step $(res async 3): $((n - n / 2)) steps redone,
and still bitwise equal, because ladder's other random numbers are keyed
by (seed, step) and the batches by the saved position. Forgetting the data
position (\`--resume-forget data\`, \`Trainer::ForgetOnResume\` in
src/train/trainer.h; from a copy of the killed run's checkpoints, \`\$WORK/at_n\`)
restarts the batches at the stream's beginning: steps
$((n + 1))..$steps replay steps 1..$n's batches, which the wiggle correlation
shows ($(res forget_data 8) against $(res forget_rng 8) for the run that
forgot the random state instead). Replayed
batches were already learned once, so their loss should be lower: the mean
difference was $(res forget_data 6) (standard error $(res forget_data 7)), against
$(res forget_rng 6) for the run that read fresh batches in another order. That is
a hundredth of a nat or so, where single steps differ from the reference by up to
$(res forget_data 5) either way: which batch a step reads moves its loss far more
than having read it once, $n steps earlier, does. A model this small
memorizes little of one reading; a larger one, or a corpus read many
times, would show the replay plainly in the training loss, which is then
a flattering number. Whether the run was harmed only the validation loss
says: here it differs by $(res forget_data 10) (the other order's by
$(res forget_rng 10)), so no harm shows at this size, where half an epoch read
twice taught about as much as the whole epoch read once; a model that
memorizes would show a training loss falling on replayed data and a
validation loss that does not follow. Forgetting the random state (\`rng\`) keeps
the position but draws the epoch's order from another seed, so the second
half reads windows at random from the whole epoch, about $half_pct% of them
read already: over the $steps steps that run read about $rng_pct% of the epoch's
windows, the one that forgot the data position $data_pct%, the reference
$epoch_pct%. Neither forgotten run is the run that was killed: they differ from it
at every step, and only the full resume can be checked bitwise. In the
plot the two full resumes lie on zero from the step they resumed at; the
forgetful ones wander around it.
"
