#!/usr/bin/env bash
# Lesson 10, synchronous against asynchronous updates: data-parallel
# replicas over a slow link, synchronous (every step's gradients summed)
# and local SGD (--local-sgd H: each replica applies its own gradients and
# the weights are averaged every H steps). Time per step and traffic
# against the alpha-beta model of the link; the loss curve against H.
source "$(dirname "$0")/lib.sh"
exp_init 10-local-sgd "Synchronous and local updates: speed for staleness" "$@"

steps=$(exp_pick 4 120 400)
width=$(exp_pick 32 96 256)
layers=$(exp_pick 1 2 4)
hs=$(exp_pick "1 2" "1 2 4 8" "1 2 4 8 16")
# A slow link between the two replicas, as between two clusters: 1 ms and
# 0.1 GB/s (a 0.8 Gbit/s share of a wide-area link), slow enough that the
# link, not the two ranks sharing the cores, dominates the communication.
latency_us=1000 link_gbps=0.1
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = $layers
n_head = 4
n_embd = $width
context = 64
vocab_size = 256
batch_size = 8
steps = $steps
lr = 2e-3
min_lr = 2e-4
warmup_steps = $((steps / 10))
eval_every = 0
eval_batches = 4
CONF
# A corpus of a few hundred kilobytes: enough for every step to see new text.
head -c 600000 "$EXP_CORPUS" >"$EXP_WORK/corpus.txt"

# The synchronous step's data-axis payload as the plan counts it: the
# loss (4 bytes) and one gradient all-reduce (4 bytes per parameter).
exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" --dp 2 --json >"$EXP_WORK/plan.json"
sync_bytes=$(exp_json "$EXP_WORK/plan.json" "j['stages'][0]['comm_bytes']['data']")
params=$(exp_json "$EXP_WORK/plan.json" "j['parameters']")

exp_columns H step_s data_MiB_per_step predicted_MiB comm_s_per_step predicted_comm_s final_loss val_loss \
  val_vs_sync_pct
curves=()
sync_val=0
for h in $hs; do
  exp_mpirun 2 "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_WORK/corpus.txt" \
    --dp 2 --local-sgd "$h" --slow-link "data:$latency_us:$link_gbps" --log-every "$steps" \
    --out "$EXP_WORK/h$h" >"$EXP_WORK/h$h.log" 2>&1 || { cat "$EXP_WORK/h$h.log"; exit 1; }
  # Means over the steps after the first (warm-up); the loss as the mean of
  # the last tenth of the steps (one step's loss is noisy).
  read -r step bytes comm final < <(python3 - "$EXP_WORK/h$h/metrics.jsonl" <<'PY'
import json, statistics, sys
r = [json.loads(l) for l in open(sys.argv[1])]
later = r[1:] or r
tail = r[-max(1, len(r) // 10):]
data = lambda x: x.get("comm", {}).get("data", {"bytes": 0, "seconds": 0})
print(statistics.mean(x["time_s"]["step"] for x in later),
      statistics.mean(data(x)["bytes"] for x in r),
      statistics.mean(data(x)["seconds"] for x in later),
      statistics.mean(x["loss"] for x in tail))
PY
  )
  val=$(python3 -c "import json, sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['val_loss'])" \
    "$EXP_WORK/h$h/metrics.jsonl")
  [ "$h" = 1 ] && sync_val=$val
  # Every step: the loss's all-reduce (4 bytes, latency-bound); every H-th:
  # one all-reduce of the params floats (weights, or gradients when H = 1).
  predicted=$(exp_calc "2 * ($latency_us * 1e-6 + 4 / (2 * $link_gbps * 1e9)) + \
(2 * ($latency_us * 1e-6 + 4 * $params / (2 * $link_gbps * 1e9))) / $h")
  exp_row "$h" "$(exp_fmt "$step" 4)" "$(exp_calc "round($bytes / 2**20, 3)")" \
    "$(exp_calc "round((4 + ($sync_bytes - 4) / $h) / 2**20, 3)")" "$(exp_fmt "$comm" 4)" \
    "$(exp_fmt "$predicted" 4)" "$(exp_fmt "$final" 4)" "$(exp_fmt "$val" 4)" \
    "$(exp_calc "round(100 * ($val / $sync_val - 1), 2)")"
  curves+=("$EXP_WORK/h$h/metrics.jsonl")
done

# The plot: the training loss (a running mean over a tenth of the run) of
# each H against the step.
EXP_PLOT_TSV="$EXP_WORK/curves.tsv"
python3 - "$EXP_PLOT_TSV" "$hs" "${curves[@]}" <<'PY'
import json, sys
out, hs, files = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
losses = [[json.loads(l)["loss"] for l in open(f)] for f in files]
k = max(1, len(losses[0]) // 10)
with open(out, "w") as f:
    f.write("\t".join(["step"] + [f"H={h}" for h in hs]) + "\n")
    for i in range(k - 1, len(losses[0])):
        f.write("\t".join([str(i + 1)] + [f"{sum(l[i - k + 1:i + 1]) / k:.4f}" for l in losses]) + "\n")
PY
exp_plot --x step --y "$(printf 'H=%s,' $hs | sed 's/,$//')" \
  --title "Local SGD: training loss for each averaging interval H" --x-label "step" \
  --y-label "training loss (running mean)"

row() { sed -n "$1p" "$EXP_TSV"; }
last=$(wc -l <"$EXP_TSV")
exp_finish "
**Claim.** A synchronous step waits for every replica's gradients to be
summed; asynchronous or less frequent synchronization is faster but each
replica works on stale weights, which costs some loss per step.

Two data-parallel replicas train a $layers-layer, $width-wide model for
$steps steps over a link of ${latency_us} µs and $link_gbps GB/s between them
(\`--slow-link data:$latency_us:$link_gbps\`, src/parallel/slow_link.h).
\`H = 1\` is synchronous training: every step all-reduces the gradients.
\`--local-sgd H\` (src/train/trainer.h) lets each replica apply its own
gradient with its own AdamW moments and all-reduces the weights every H
steps. Step time and the data axis's seconds are means over the steps after
the first; bytes are the axis's payload per step, predicted from
\`ladder plan\`'s synchronous payload ($params parameters: the loss every
step, one weight-sized all-reduce every H); the time's prediction is the
link's alpha-beta time for the loss's all-reduce every step and one
weight- or gradient-sized all-reduce every H steps. The loss is the mean of
the last tenth of the steps; the validation loss is measured at the end,
right after an average.
" "
**Measured.** The data axis's bytes fall exactly as 1/H, as the plan
predicts; its seconds less steeply, from $(row 2 | cut -f5) s per
step synchronously to $(row "$last" | cut -f5) s at H = $(row "$last" | cut -f1),
above the link's prediction: the measurement adds the real transfer over
shared memory and, on two shared cores, each rank's wait for the other,
whose compute varies from step to step, to the link's sleep. The step time
goes from $(row 2 | cut -f2) s to $(row "$last" | cut -f2) s. The price is in the
loss: at H = $(row "$last" | cut -f1) the final validation loss is
$(row "$last" | cut -f9)% above synchronous training's. Each replica's
update uses half the batch's gradient, so between averages each takes
noisier steps, and the average of two models that drifted apart is not the
model one synchronous run would have reached. How much that costs grows
with H and with the learning rate; methods built on local updates (local
SGD, DiLoCo) average more cleverly (an outer optimizer over the averaged
change) to win the loss back. On a GPU cluster the saving is the
communication the step could not hide; here the link is simulated by
sleeping, so the compute does not overlap it and the whole saving shows.
"
