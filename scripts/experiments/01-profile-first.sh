#!/usr/bin/env bash
# Lesson 1, profile first: the step-time split of metrics.jsonl (data,
# forward, backward, optimizer) and a Chrome trace of one step say where a
# step's time goes. A deliberately slow loader (--inject-fault slow-data:MS,
# every batch MS milliseconds late, as a loader waiting on storage) moves
# the bottleneck into "data", and the split shows it; loading the next batch
# on a background thread while the step computes (--prefetch) takes it away
# again, up to the compute's worth. Measured against baseline + MS without
# prefetch and max(baseline, MS) with it; the losses and final weights must
# be bitwise equal with and without prefetch (the same batches).
source "$(dirname "$0")/lib.sh"
exp_init 01-profile-first "Profile first: the split says where the time goes" "$@"

layers=$(exp_pick 2 4 6)
width=$(exp_pick 64 128 256)
context=$(exp_pick 32 128 128)
batch=$(exp_pick 4 16 16)
steps=$(exp_pick 4 30 40)
# One BLAS thread: on a shared 2-core machine a step's compute then varies
# by a few percent between runs, where two threads' varies by tens.
export OMP_NUM_THREADS=1
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = $layers
n_head = 4
n_embd = $width
context = $context
vocab_size = 256
batch_size = $batch
steps = $steps
lr = 1e-3
eval_every = 0
CONF
tokens=$((batch * context))

# Every setting runs $rounds times, the rounds interleaved, so that a burst
# of another process's work on the shared machine lands on one run of a
# setting, not on all of them.
rounds=$(exp_pick 1 3 3)
train() {  # SETTING ROUND: one run, MS_PREFETCH (e.g. 100_yes)
  local s=$1 round=$2 ms=${1%_*} prefetch=${1#*_} run=exp_run
  local name="d${s}_r$round"
  local flags=()
  [ "$ms" != 0 ] && flags+=(--inject-fault "slow-data:$ms")
  [ "$prefetch" = yes ] && flags+=(--prefetch)
  # The first round's commands are the page's; it traces step 3.
  if [ "$round" = 1 ]; then
    flags+=(--trace "$EXP_WORK/d$s.trace.json" --trace-steps 3:3)
  else
    run=""
  fi
  $run "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_CORPUS" --steps "$steps" \
    --log-every "$steps" "${flags[@]}" --out "$EXP_WORK/$name" >"$EXP_WORK/$name.log" 2>&1 ||
    { cat "$EXP_WORK/$name.log"; exit 1; }
}
# The loader's delays, from the baseline's step (c, its median, in ms; about
# 85 ms at --size small on one core of a quiet machine): none, c/2 (under
# the compute), c (about equal to it) and 2c (twice it), rounded to 10 ms
# (1 ms under a 50 ms step; a delay that comes out twice runs once); with
# --size test, 10 ms only. The notes read the trace of the c runs.
train 0_no 1
c=$(exp_step_medians "$EXP_WORK/d0_no_r1/metrics.jsonl" '1000 * t["step"]')
delay() {  # F: c * F, rounded to 10 ms (to 1 ms where c is under 50 ms), at least 1
  awk -v c="$c" -v f="$1" 'BEGIN { u = c < 50 ? 1 : 10; d = int(c * f / u + 0.5) * u
    print d < 1 ? 1 : d }'
}
if [ "$EXP_SIZE" = test ]; then
  delays="0 10" traced=10
else
  traced=$(delay 1)
  delays=$(printf '%s\n' 0 "$(delay 0.5)" "$traced" "$(delay 2)" | awk '!seen[$0]++' | xargs)
fi
settings=()
for ms in $delays; do settings+=("${ms}_no" "${ms}_yes"); done
for round in $(seq "$rounds"); do
  for s in "${settings[@]}"; do
    [ "$s/$round" = 0_no/1 ] || train "$s" "$round"
  done
done

# One setting's row, in one Python (each start costs a noticeable fraction
# of a second on a busy machine): means of metrics.jsonl's split over the
# steps after the first of every round (the first loads its batch
# synchronously even with --prefetch, and warms the caches; means, unlike
# medians, add up to the step); the prediction from the
# baseline's; the data span's share of the traced step (rank 0's step
# track: data, forward, backward, optimizer inside "step N"); and whether
# every run's losses equal the baseline's, as written (9 digits).
row() {  # SETTING MS PREFETCH
  python3 - "$EXP_WORK" "$@" "$tokens" "$rounds" <<'PY'
import json, statistics, sys
work, setting, ms, prefetch, tokens, rounds = sys.argv[1:]
ms, tokens, rounds = float(ms), int(tokens), int(rounds)
def load(s, r):
    return [json.loads(l) for l in open(f"{work}/d{s}_r{r}/metrics.jsonl")]
def split(s):
    later = [x for r in range(1, rounds + 1) for x in load(s, r)[1:]]
    return {k: statistics.mean(x["time_s"][k] for x in later)
            for k in ("data", "forward", "backward", "optimizer", "step")}
s = f"{ms:g}_{prefetch}"
t, base = split(s), split("0_no")
# Without prefetch the delay adds to the step; with it, the step takes the
# longer of the compute and the load.
if prefetch == "no":
    predicted = base["step"] + ms / 1000
else:
    predicted = max(base["step"], ms / 1000 + base["data"])
j = json.load(open(f"{work}/d{s}.trace.json"))
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in j["traceEvents"]
         if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in j["traceEvents"] if e["ph"] == "X" and e["pid"] == 0
         and names.get((0, e["tid"])) == "step"]
step_us = sum(e["dur"] for e in spans if e["name"].startswith("step "))
data_us = sum(e["dur"] for e in spans if e["name"] == "data")
top = []
for e in spans:
    n = "step N" if e["name"].startswith("step ") else e["name"]
    if n not in top:
        top.append(n)
every = {e["name"] for e in j["traceEvents"] if e["ph"] == "X"}
with open(f"{work}/d{s}.spans", "w") as f:
    f.write(", ".join(f"`{n}`" for n in top) + f"\t{len(every)}\n")
base_losses = [x["loss"] for x in load("0_no", 1)]
same = all([x["loss"] for x in load(s, r)] == base_losses for r in range(1, rounds + 1))
ms_ = lambda s: f"{1000 * s:.1f}"
print("\t".join([setting, f"{ms:g}", prefetch, ms_(t["data"]), ms_(t["forward"]),
                 ms_(t["backward"]), ms_(t["optimizer"]), ms_(t["step"]),
                 f"{100 * (t['forward'] + t['backward'] + t['optimizer']) / t['step']:.1f}",
                 f"{tokens / t['step']:.0f}", ms_(predicted), f"{t['step'] / predicted:.3f}",
                 f"{100 * data_us / step_us:.1f}", "equal" if same else "DIFFER"]))
PY
}

exp_columns setting slow_data_ms prefetch data_ms forward_ms backward_ms optimizer_ms step_ms \
  busy_pct tokens_per_s predicted_step_ms measured_vs_predicted trace_data_pct losses_vs_baseline
for s in "${settings[@]}"; do
  ms=${s%_*} prefetch=${s#*_}
  setting="slow-data $ms ms"
  [ "$ms" = 0 ] && setting=baseline
  [ "$prefetch" = yes ] && setting="$setting + prefetch"
  line=$(row "$setting" "$ms" "$prefetch")
  # The final weights too, byte for byte.
  for round in $(seq "$rounds"); do
    cmp -s "$EXP_WORK/d0_no_r1/model.bin" "$EXP_WORK/d${s}_r$round/model.bin" ||
      { line="$line, weights DIFFER"; break; }
  done
  exp_row "$line"
done

# The plot: step time against the delay, with and without prefetch, beside
# the predictions.
EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
awk -F'\t' 'BEGIN { OFS = "\t"; print "slow_data_ms", "synchronous_ms", "prefetch_ms",
    "predicted_sync_ms", "predicted_prefetch_ms" }
  NR > 1 && $3 == "no" { sync[$2] = $8; psync[$2] = $11; order[++n] = $2 }
  NR > 1 && $3 == "yes" { pre[$2] = $8; ppre[$2] = $11 }
  END { for (i = 1; i <= n; i++) { d = order[i]; print d, sync[d], pre[d], psync[d], ppre[d] } }' \
  "$EXP_TSV" >"$EXP_PLOT_TSV"
exp_plot --x slow_data_ms --y synchronous_ms,prefetch_ms,predicted_sync_ms,predicted_prefetch_ms \
  --title "Step time against the loader's delay" --x-label "slow-data delay per batch, ms" \
  --y-label "mean step time, ms"

# The rows by setting, for the notes.
col() { awk -F'\t' -v s="$1" -v c="$2" '$1 == s { print $c }' "$EXP_TSV"; }
big=$(echo "$delays" | awk '{print $NF}')
t="slow-data $traced ms"
b="slow-data $big ms"
IFS=$'\t' read -r top_spans every_spans <"$EXP_WORK/d${traced}_no.spans"
trace_no=$(col "$t" 13) trace_yes=$(col "$t + prefetch" 13)
small=$(echo "$delays" | awk '{print $2}')
s="slow-data $small ms"
compute() { awk -F'\t' -v s="$1" '$1 == s { printf "%.1f", $5 + $6 + $7 }' "$EXP_TSV"; }
compute_range=$(awk -F'\t' 'NR > 1 && $2 > 0 { c = $5 + $6 + $7; if (!n++ || c < lo) lo = c
  if (c > hi) hi = c } END { printf "%.1f to %.1f", lo, hi }' "$EXP_TSV")
read -r ratio_min ratio_max < <(awk -F'\t' 'NR > 2 { if (!n++ || $12 < lo) lo = $12
  if ($12 > hi) hi = $12 } END { print lo, hi }' "$EXP_TSV")
own_dev=$(awk -F'\t' 'NR > 1 { c = $5 + $6 + $7; p = ($3 == "no") ? $2 + c : (c > $2 ? c : $2)
  d = $8 - p; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.1f", m }' "$EXP_TSV")
speedup=$(awk -F'\t' -v a="$t + prefetch" -v b="$t" '$1 == a { x = $10 } $1 == b { y = $10 }
  END { printf "%.2f", x / y }' "$EXP_TSV")
all_equal=$(awk -F'\t' 'NR > 1 && $14 != "equal" { bad = 1 } END { print bad ? "no" : "yes" }' "$EXP_TSV")
if [ "$all_equal" = yes ]; then
  equal_text="Every run's losses, step by step, and its final weights (\`model.bin\`)
are bitwise equal to the baseline's (last column): the delay and the
prefetch change when a batch is read, never which."
else
  equal_text="**Not every run's losses or weights equal the baseline's** (last column):
prefetching should change when a batch is read, never which; this is a bug."
fi
unset OMP_NUM_THREADS  # the machine line's core count is nproc's, which honours it
exp_finish "
**Claim.** Before optimizing anything, measure where a step's time goes.
One team found its GPU busy 30% of the time, waiting on host-to-device
copies of the input, and doubled its throughput by loading data
asynchronously. A slow input pipeline shows up in the step-time split as
\"data\", not as compute; loading the next batch while the current one
computes hides the loading up to the compute's worth: a step takes the
longer of the two instead of their sum.

A model of $layers layers, $width wide, trains $steps steps of $tokens tokens on
\`$EXP_DEVICE\`. \`--inject-fault slow-data:MS\` (src/train/fault_env.h) makes
every batch MS ms late, as a loader waiting on storage, with MS set from the
baseline's step c (its first run's median, here $(printf '%.0f' "$c") ms): c/2, c and 2c,
rounded to 10 ms; \`--prefetch\`
(src/train/batch_reader.h) loads the next batch on a background thread
while the step computes. One BLAS thread, as steadier on a shared machine,
and every setting run $rounds times, interleaved. The columns are the means, over the steps after
the first, of metrics.jsonl's \`time_s\` split; busy % is the share of the
step spent in forward, backward and the optimizer; the prediction is the
baseline's step plus MS without prefetch, the longer of the baseline's step
and MS with it. \`--trace\` wrote step 3 of every run as a Chrome trace
(src/train/step_trace.h); trace_data_pct is the \`data\` span's share of
that step's span.
" "
**Measured.** The baseline spends $(col baseline 4) ms of its $(col baseline 8) ms step loading data: it
is busy $(col baseline 9)% of the step, all compute, and nothing but a smaller model or a
faster machine would speed it up. A $traced ms loader, about one step's
compute, turns the same model into the claim's case: the step takes
$(col "$t" 8) ms (predicted $(col "$t" 11)), of which \`data\` is $(col "$t" 4) ms, the largest part of
the split; busy falls to $(col "$t" 9)% ($(col "$b" 9)% at $big ms; the anecdote's GPU was busy 30%).
Prefetching takes the delay off the step wherever it is shorter than the
compute: at $small ms nothing is left of it (data $(col "$s + prefetch" 4) ms, step $(col "$s + prefetch" 8) ms),
and at $traced ms the step falls to $(col "$t + prefetch" 8) ms, busy $(col "$t + prefetch" 9)%: $(col "$t + prefetch" 10) tokens/s
against $(col "$t" 10): ${speedup}x, where the team saw 2x. Where the load takes longer than
the compute, prefetching can hide only the compute's worth: at $big ms the
step falls from $(col "$b" 8) to $(col "$b + prefetch" 8) ms (predicted $(col "$b + prefetch" 11)), and the rest,
$(col "$b + prefetch" 4) ms, shows as data again; the cure is then a faster loader or more
loading threads, not overlap.

**Where the prediction missed.** measured/predicted runs from $ratio_min to
$ratio_max. The predictions take the baseline's step as the compute, but the
compute was not the same in every run: forward, backward and optimizer took
$(compute baseline) ms in the baseline and $compute_range ms in the runs with a slow loader.
Two other jobs shared the machine's 2 cores while this ran, and how much of
them a run met decided its compute time; the predictions are off by about
that difference (the rounds only narrow it). Against each
run's own compute (forward, backward, optimizer), the step is the
loader's delay plus the compute without prefetch, and the longer of the two
with it, to within $own_dev ms in every row.

**The trace.** Step 3's spans on the step track are $top_spans ($every_spans
distinct span names in all, with every layer's matmuls and attention on the
compute track). In the $traced ms run, the \`data\` span is $trace_no% of
the step; with prefetch the step's \`data\` span, now only the wait for the
batch loaded ahead (\`wait for the prefetched batch\`), is $trace_yes%. One
traced step agrees with the means of the split, so either view finds the
bottleneck; the trace also shows what the split cannot, where inside
forward and backward the time goes.

$equal_text
"
