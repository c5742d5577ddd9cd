#!/usr/bin/env bash
# Lesson 8, topology: which parallel axis crosses the slow link between two
# nodes. Four ranks train with data parallelism 2 x tensor parallelism 2;
# `--slow-link AXES:US:GBPS` (src/parallel/slow_link.h) makes the named
# axis's groups wait, after every call, what the call would take over a
# link of that latency and bandwidth (the alpha-beta model of a ring). Two
# nodes of two ranks each, placed two ways: tensor parallelism inside a
# node and the data-parallel gradient reduction across (the usual
# placement), or tensor parallelism across and data parallelism inside.
# Step time against the alpha-beta prediction from the calls and bytes each
# axis makes per step, and against the claim that placing TP across nodes
# cost one team ~20% of its speed.
source "$(dirname "$0")/lib.sh"
exp_init 08-topology "Topology: which axis crosses the slow link" "$@"

width=$(exp_pick 64 64 256)
steps=$(exp_pick 4 20 40)
# Every setting runs this many times, the rounds interleaved, so that a
# burst of another process's work lands on one run of a setting, not all.
rounds=$(exp_pick 1 6 5)
# The inter-node links, LABEL:US:GBPS. A 200 Gb/s InfiniBand port: 5 us and
# 25 GB/s. These cores compute the step ten to twenty times slower than a
# GPU would (a GPU runs a model this small in about a millisecond, bound by
# kernel launches), so the link's time is a far smaller share of the step
# here than beside a GPU; the same link slowed 20 times keeps about a GPU's
# ratio of link to compute, slowed 100 times exaggerates it so that both
# placements' costs stand clear of the noise.
links=$(exp_pick "x100:500:0.25" "ib:5:25 x20:100:1.25 x100:500:0.25" \
  "ib:5:25 x20:100:1.25 x100:500:0.25")
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = 4
n_head = 4
n_embd = $width
context = 64
vocab_size = 256
batch_size = 8
lr = 1e-3
eval_every = 0
CONF
layout=(--dp 2 --tp 2)
exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" "${layout[@]}" --json >"$EXP_WORK/plan.json"

# Open MPI as exp_mpirun starts it, but each rank pinned to a core (rank r
# on core r mod the cores): left to the scheduler, 4 ranks on 2 cores now and
# then fall into a placement in which a step takes twice as long, a noise
# larger than the effects measured here. quiet_mpirun: the same, unrecorded.
pinned=(mpirun --allow-run-as-root --oversubscribe --map-by core --bind-to core:overload-allowed
  --mca btl self,vader --mca pml ob1 -x OMP_NUM_THREADS=1)
pinned_mpirun() { local np=$1; shift; exp_run "${pinned[@]}" -np "$np" "$@"; }
quiet_mpirun() { local np=$1; shift; "${pinned[@]}" -np "$np" "$@"; }

# The settings: NAME:AXIS:LINK, AXIS the one that crosses the link.
settings=(base:none:none)
for link in $links; do
  label=${link%%:*}
  settings+=("data_$label:data:$link" "tensor_$label:tensor:$link")
done
for round in $(seq "$rounds"); do
  for s in "${settings[@]}"; do
    IFS=: read -r name axis label us gbps <<<"$s"
    flags=()
    [ "$axis" != none ] && flags+=(--slow-link "$axis:$us:$gbps")
    # The first round's commands are the page's; it traces step 3.
    if [ "$round" = 1 ]; then
      flags+=(--trace "$EXP_WORK/$name.trace.json" --trace-steps 3:3)
      run=pinned_mpirun
    else
      run=quiet_mpirun
    fi
    $run 4 "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_CORPUS" \
      --steps "$steps" --log-every "$steps" --device "$EXP_DEVICE" "${layout[@]}" "${flags[@]}" \
      --out "$EXP_WORK/${name}_r$round" >"$EXP_WORK/${name}_r$round.log" 2>&1 ||
      { cat "$EXP_WORK/${name}_r$round.log"; exit 1; }
  done
done

# One Python for the whole table (each start costs a noticeable fraction of
# a second on a busy machine). Per setting: the median step over every
# round's steps after the first (a median ignores a step another process
# slowed), rank 0's comm seconds and bytes per axis per step
# (metrics.jsonl), and the prediction: the calls each axis made in the
# baseline's traced step (rank 0), each costing what slow_link.h's formula
# says for p = 2 members, e.g. an all-reduce of n bytes 2 (p - 1) (a + n / (p b)).
# traced_wait_ms: what the slowed calls of the traced step actually waited,
# each the slow-link span less the real call's span nested in it.
exp_columns placement link step_ms rounds_ms slowdown_pct predicted_slowdown_pct tensor_comm_ms \
  tensor_KiB data_comm_ms data_KiB predicted_extra_ms step_extra_ms comm_extra_ms traced_wait_ms
python3 - "$EXP_WORK" "$rounds" "$EXP_TSV" "$EXP_WORK/plot.tsv" "${settings[@]}" <<'PY'
import json, statistics, sys
work, rounds, tsv, plot = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
settings = [s.split(":") for s in sys.argv[5:]]
P = 2  # members of each tensor and data group

def runs(name):
    for r in range(1, rounds + 1):
        yield [json.loads(l) for l in open(f"{work}/{name}_r{r}/metrics.jsonl")][1:]

def spread(name):  # the lowest and highest of the rounds' median steps, ms
    m = [statistics.median(x["time_s"]["step"] for x in run) for run in runs(name)]
    return f"{1000 * min(m):.0f}-{1000 * max(m):.0f}"

def comm_spans(name):
    j = json.load(open(f"{work}/{name}.trace.json"))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in j["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    return sorted((e for e in j["traceEvents"] if e["ph"] == "X" and e["pid"] == 0
                   and names.get((0, e["tid"])) == "comm"), key=lambda e: e["ts"])

def wait(op, n, a, b):  # slow_link.h's alpha-beta model
    if op in ("all-reduce",):
        return 2 * (P - 1) * (a + n / (P * b))
    if op in ("reduce-scatter", "all-gather"):
        return (P - 1) * (a + n / (P * b))
    if op == "broadcast":
        return (P - 1) * a + n / b
    if op in ("send", "recv"):
        return a + n / b
    raise SystemExit(f"08-topology: no formula for {op}")

base_calls = {}  # axis -> [(op, bytes)] of the baseline's traced step
for e in comm_spans("base"):
    axis, op = e["name"].split(" ", 1)
    base_calls.setdefault(axis, []).append((op, e["args"]["bytes"]))

def traced_wait(name, axis):
    spans = [e for e in comm_spans(name) if e["name"].startswith(axis + " ")]
    total, pairs, i = 0.0, 0, 0
    while i + 1 < len(spans):
        outer, inner = spans[i], spans[i + 1]
        if inner["ts"] >= outer["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]:
            total += outer["dur"] - inner["dur"]
            pairs += 1
            i += 2
        else:
            i += 1
    return total / 1000 if pairs else None

labels = {"ib": "25 GB/s, 5 us", "x20": "1.25 GB/s, 100 us (x20)",
          "x100": "0.25 GB/s, 500 us (x100)"}
scale = {"ib": 1, "x20": 20, "x100": 100}
placement = {"none": "one node (no slow link)", "data": "TP inside, DP across",
             "tensor": "TP across, DP inside"}
rows, base_step, base_comm, plot_rows = [], None, None, {}
for name, axis, *link in settings:
    steps = [x for run in runs(name) for x in run]
    step = statistics.median(x["time_s"]["step"] for x in steps)
    comm = {a: (statistics.median(x["comm"][a]["seconds"] for x in steps),
                statistics.median(x["comm"][a]["bytes"] for x in steps))
            for a in ("tensor", "data")}
    if axis == "none":
        base_step, base_comm = step, comm
        rows.append([placement[axis], "-", f"{1000 * step:.1f}", spread(name), "0.0", "0.0",
                     f"{1000 * comm['tensor'][0]:.2f}", f"{comm['tensor'][1] / 1024:.1f}",
                     f"{1000 * comm['data'][0]:.2f}", f"{comm['data'][1] / 1024:.1f}",
                     "0.00", "0.0", "-", "-"])
        continue
    label, us, gbps = link
    a, b = float(us) * 1e-6, float(gbps) * 1e9
    predicted = sum(wait(op, n, a, b) for op, n in base_calls[axis])
    measured = step - base_step
    comm_extra = comm[axis][0] - base_comm[axis][0]
    tw = traced_wait(name, axis)
    rows.append([placement[axis], labels[label], f"{1000 * step:.1f}", spread(name),
                 f"{100 * measured / base_step:.1f}", f"{100 * predicted / base_step:.1f}",
                 f"{1000 * comm['tensor'][0]:.2f}", f"{comm['tensor'][1] / 1024:.1f}",
                 f"{1000 * comm['data'][0]:.2f}", f"{comm['data'][1] / 1024:.1f}",
                 f"{1000 * predicted:.2f}", f"{1000 * measured:.1f}", f"{1000 * comm_extra:.2f}",
                 "-" if tw is None else f"{tw:.2f}"])
    p = plot_rows.setdefault(scale[label], {})
    p[axis] = (100 * measured / base_step, 100 * predicted / base_step)
with open(f"{work}/calls", "w") as f:  # for the notes
    for axis in ("tensor", "data"):
        calls = base_calls.get(axis, [])
        f.write(f"{axis} {len(calls)} {sum(n for _, n in calls)} "
                f"{max((n for _, n in calls), default=0)} {int(base_comm[axis][1])}\n")
with open(tsv, "a") as f:
    for r in rows:
        f.write("\t".join(r) + "\n")
with open(plot, "w") as f:
    f.write("link_slowdown\tTP_across_pct\tDP_across_pct\tTP_across_predicted_pct\t"
            "DP_across_predicted_pct\n")
    for k in sorted(plot_rows):
        p = plot_rows[k]
        f.write(f"{k}\t{p['tensor'][0]:.2f}\t{p['data'][0]:.2f}\t{p['tensor'][1]:.2f}\t"
                f"{p['data'][1]:.2f}\n")
PY
EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
exp_plot --x link_slowdown --y TP_across_pct,DP_across_pct,TP_across_predicted_pct,DP_across_predicted_pct \
  --log-x --title "Slowdown by which axis crosses the slow link" \
  --x-label "times slower than 25 GB/s, 5 us" --y-label "step time over one node's, +%"

# The figures the notes quote.
read -r _ tensor_calls tensor_bytes tensor_largest measured_tensor < <(grep '^tensor' "$EXP_WORK/calls")
read -r _ data_calls data_bytes _ measured_data < <(grep '^data' "$EXP_WORK/calls")
plan_tensor=$(exp_json "$EXP_WORK/plan.json" "j['stages'][0]['comm_bytes']['tensor']")
plan_data=$(exp_json "$EXP_WORK/plan.json" "j['stages'][0]['comm_bytes']['data']")
[ "$measured_tensor" = "$plan_tensor" ] && [ "$measured_data" = "$plan_data" ] &&
  bytes_text="to the byte what \`ladder plan\` predicts for this layout" ||
  bytes_text="where \`ladder plan\` predicts $plan_tensor and $plan_data bytes"
cell() {  # PLACEMENT-START LINK-START COLUMN
  awk -F'\t' -v p="$1" -v l="$2" -v c="$3" 'index($1, p) == 1 && index($2, l) == 1 { print $c }' \
    "$EXP_TSV"
}
per_link=()
for link in $links; do
  IFS=: read -r label us gbps <<<"$link"
  l="$gbps GB/s"
  per_link+=("at $gbps GB/s and $us µs, TP across $(cell "TP across" "$l" 5)% (predicted
$(cell "TP across" "$l" 6)%), DP across $(cell "TP inside" "$l" 5)% (predicted $(cell "TP inside" "$l" 6)%)")
done
measured_text=$(printf '%s; ' "${per_link[@]}" | sed 's/; $//')
first=$(echo "$links" | awk '{print $1}' | cut -d: -f3)
last=$(echo "$links" | awk '{print $NF}' | cut -d: -f3)
# What each slowed TP call waited beyond the formula, at the first link.
overshoot=$(awk -F'\t' -v l="$first GB/s" -v n="$tensor_calls" \
  'index($1, "TP across") == 1 && index($2, l) == 1 { printf "%.0f", 1000 * ($14 - $11) / n }' \
  "$EXP_TSV")
ratio_last=$(awk -F'\t' -v l="$last GB/s" 'index($2, l) == 1 && index($1, "TP across") == 1 { t = $12 }
  index($2, l) == 1 && index($1, "TP inside") == 1 { d = $12 } END { printf "%.1f", t / d }' "$EXP_TSV")
# The middle link (x20), about a GPU's ratio of link to compute here.
mid_text=""
if [ "$(echo "$links" | wc -w)" -ge 3 ]; then
  mid=$(echo "$links" | awk '{print $2}' | cut -d: -f3)
  mid_text=" At $mid GB/s, about a GPU's ratio for this model, TP across cost
$(cell "TP across" "$mid GB/s" 5)% (predicted $(cell "TP across" "$mid GB/s" 6)%), more than the claim's 20%, because the model is tiny: a
layer's compute per token grows with the square of its width, its
all-reduce only with the width, and each call's latency not at all, so a
large model computes far longer per byte it all-reduces."
fi
# Whether TP across cost more than DP across at every link.
inverted=$(awk -F'\t' 'NR > 1 && index($1, "TP across") == 1 { t[$2] = $5 }
  NR > 1 && index($1, "TP inside") == 1 { d[$2] = $5 }
  END { for (l in t) if (t[l] + 0 <= d[l] + 0) { sub(/ \(.*/, "", l); printf "%s; ", l } }' "$EXP_TSV")
if [ -z "$inverted" ]; then
  order_text="What holds at every link is the order: TP across costs more than DP across."
else
  order_text="TP across cost more than DP across at every link but ${inverted%; }, where the two
differ by less than the noise."
fi
lat_bw=$(exp_calc "round($tensor_largest / 25e9 * 1e6, 1)")
ratio_pred=$(awk -F'\t' -v l="$last GB/s" 'index($2, l) == 1 && index($1, "TP across") == 1 { t = $11 }
  index($2, l) == 1 && index($1, "TP inside") == 1 { d = $11 } END { printf "%.1f", t / d }' "$EXP_TSV")

exp_finish "
**Claim.** Tensor parallelism belongs inside a node: one team lost about
20% of its speed by placing its tensor-parallel groups across nodes instead
of inside one. TP all-reduces activations inside every layer, forward and
backward, and the next layer cannot start until each is done; data
parallelism reduces the gradients once per step.

Four ranks train a model of 4 layers, $width wide, with \`--dp 2 --tp 2\`, as
two nodes of two ranks: ladder's grid (src/parallel/grid.h) puts TP innermost,
so ranks 0 and 1 form a TP group and ranks 0 and 2 a DP group. \`--slow-link
data:US:GBPS\` makes the DP groups cross the link (the nodes are ranks {0, 1}
and {2, 3}: TP inside, DP across, the usual placement); \`--slow-link
tensor:...\` the TP groups (nodes {0, 2} and {1, 3}: TP across). The links:
a 200 Gb/s InfiniBand port (25 GB/s, 5 µs), and the same link slowed 20
and 100 times. These cores compute a step ten to twenty times slower than
a GPU would (a GPU runs a model this small in about a millisecond, bound by
kernel launches), so beside them a real link's time is a far smaller share
of the step than beside a GPU: slowed 20 times, the link takes about the
share of the step it would take beside a GPU; slowed 100 times, it
exaggerates, so that both placements' costs stand clear of the noise.

Medians over the steps after the first of $rounds interleaved runs per setting
(rounds_ms: the lowest and highest of the runs' medians; other jobs shared
the machine's 2 cores, and the 4 ranks, each pinned to a core, oversubscribe
them). Rank 0's
\`comm\` seconds and bytes per axis and step come from metrics.jsonl. The
prediction: in the baseline's traced step rank 0 made $tensor_calls tensor all-reduces
($tensor_bytes bytes) and $data_calls data all-reduces ($data_bytes bytes); each all-reduce of n
bytes over p = 2 members waits 2 (p - 1) (a + n / (p b)) (src/parallel/slow_link.h),
so TP across adds $((2 * tensor_calls)) a + $tensor_bytes / b per step and DP across
$((2 * data_calls)) a + $data_bytes / b. step_extra_ms is the step's growth over the
baseline, comm_extra_ms the slowed axis's comm seconds' growth, and
traced_wait_ms what the slowed calls of the traced step (step 3 of the first
run) actually slept.
" "
**Measured.** Per step, rank 0's TP group moved $measured_tensor bytes and its DP group
$measured_data in every setting, $bytes_text. The step grew by
$measured_text.
At $last GB/s TP across costs ${ratio_last} times what DP across does (predicted
${ratio_pred}): TP makes $tensor_calls calls a step to DP's $data_calls,
with more bytes as well. Each TP all-reduce is mostly latency (the largest,
$((tensor_largest / 1024)) KiB, spends 10 µs on a 25 GB/s, 5 µs link's latency and $lat_bw µs on its
bandwidth), while DP's one gradient all-reduce is mostly bandwidth.

The step grew by about what the slowed calls waited (step_extra_ms against
comm_extra_ms, the growth of the slowed axis's comm time, and
traced_wait_ms, the sleeps of the one traced step): nothing overlapped the
waits, TP's because the next layer needs the reduced
activations, DP's because ladder reduces the gradients after the backward
(src/train/trainer.cc; all in one bucket here, \`--bucket-mb 25\` holds
them), where a GPU framework would overlap the buckets with the backward
and hide part of DP's cost.

**Where measurement and prediction differ.** At the real link the formula
predicts almost nothing (the link's time beside this machine's slow compute):
$(cell "TP across" "$first GB/s" 6)% for TP across, which measured $(cell "TP across" "$first GB/s" 5)%. In the traced step each
slowed call slept about $overshoot µs longer than asked (traced_wait_ms against
predicted_extra_ms), the granularity of a sleep on a busy machine, and TP's
$tensor_calls calls pay that $tensor_calls times a step where DP's pay it $data_calls times. A fixed cost
per call is latency, so this is the lesson again in small: software
overheads per call (a real stack's are several to tens of µs) hurt TP across nodes the
same way. DP's calls are few, so there the same error is small and what
remains is the machine: at $first GB/s DP across measured $(cell "TP inside" "$first GB/s" 5)% for calls that
slept $(cell "TP inside" "$first GB/s" 14) ms a step in all. That is noise, and about the resolution of
this page: other jobs shared the 2 cores, and the runs of one setting
differed by as much as rounds_ms shows. The slowest link's effects stand
well clear of it.

**Against the claim.** TP across cost $(cell "TP across" "$first GB/s" 5)% here at $first GB/s and
$(cell "TP across" "$last GB/s" 5)% at $last GB/s, DP across $(cell "TP inside" "$first GB/s" 5)% and $(cell "TP inside" "$last GB/s" 5)%: the claim's ~20% is not a
property of a link but a ratio of the link's time to the compute's, and
the same placement's cost grows with that ratio. What TP across cost at the
real link here is mostly the sleeps' overshoot per call, not the link: it
stands for a real stack's per-call latency, not for the claim's figure.$mid_text
$order_text For a large model on
GPUs each TP all-reduce carries a whole layer's activations (B·T·C values)
and the GPU computes fast, so TP across nodes costs a share of that order
even on a fast network, while DP's one reduction per step overlaps the
backward there. Keep TP inside the node, on its fastest links, and put DP
(or the pipeline) across.
"
