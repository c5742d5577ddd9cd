#!/usr/bin/env bash
# Lesson 6, offload: device memory saved by --offload optimizer and
# --offload params against the bytes they move over the host-device link
# and the time that costs at a link's speed.
source "$(dirname "$0")/lib.sh"
exp_init 06-offload "Offload: device memory for link traffic" "$@"

# Offload needs a device backend: the simulator by default (its device
# memory is apart from the host's by accounting), a GPU with --device cuda.
device=$EXP_DEVICE
[ "$device" = cpu ] && device=cuda-sim
layers=$(exp_pick 2 8 12)
width=$(exp_pick 32 128 768)
micro=$(exp_pick 2 4 4)
batch=$(exp_pick 2 8 8)
steps=$(exp_pick 1 2 2)
link_gbps=25  # PCIe 4.0 x16, about what a GPU's host link moves
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = $layers
n_head = 4
n_embd = $width
context = 64
vocab_size = 256
batch_size = $batch
steps = $steps
lr = 1e-3
eval_every = 0
CONF

exp_columns offload device_MiB saved_pct host_MiB link_MiB_per_step link_s_at_${link_gbps}GBps \
  step_s predicted_link_MiB
base_device=0
for mode in none optimizer params; do
  exp_run "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_CORPUS" --steps "$steps" \
    --microbatches "$micro" --device "$device" --precision bf16 --offload "$mode" \
    --out "$EXP_WORK/$mode" >"$EXP_WORK/$mode.log" 2>&1 || { cat "$EXP_WORK/$mode.log"; exit 1; }
  exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" --microbatches "$micro" --precision bf16 \
    --offload "$mode" --json >"$EXP_WORK/$mode.plan.json"
  r="$EXP_WORK/$mode/ranks.json"
  dev=$(exp_json "$r" "j[0]['memory']['allocated']")
  host=$(exp_json "$r" "j[0]['memory']['host']")
  link=$(exp_json "$r" "j[0].get('link_bytes', {}).get('to_host', 0) + j[0].get('link_bytes', {}).get('to_device', 0)")
  predicted=$(exp_json "$EXP_WORK/$mode.plan.json" \
    "sum(j['stages'][0].get('link_bytes', {}).values())")
  step=$(python3 -c "import json, sys; print([json.loads(l) for l in open(sys.argv[1])][-1]['time_s']['step'])" \
    "$EXP_WORK/$mode/metrics.jsonl")
  [ "$mode" = none ] && base_device=$dev
  exp_row "$mode" "$(exp_calc "round($dev / 2**20, 3)")" \
    "$(exp_calc "round(100 * (1 - $dev / $base_device), 1)")" "$(exp_calc "round($host / 2**20, 3)")" \
    "$(exp_calc "round($link / 2**20, 3)")" "$(exp_calc "round($link / ($link_gbps * 1e9), 6)")" \
    "$(exp_fmt "$step" 3)" "$(exp_calc "round($predicted / 2**20, 3)")"
done
exp_plot --x link_MiB_per_step --y saved_pct --title "Offload: device memory saved vs link traffic" \
  --x-label "MiB over the link per step" --y-label "device memory saved, %"

row() { sed -n "$1p" "$EXP_TSV"; }
exp_finish "
**Claim.** Offloading trades device memory for traffic over a link an order
of magnitude slower than device memory: ZeRO-Offload moves the optimizer
state and master weights to the host and runs the update there; parameter
offload keeps even the weights on the host and brings each layer's block to
the device when it runs.

A model of $layers layers, $width wide, trains $steps steps in bf16 on \`$device\`
with $micro microbatches per step, with each \`--offload\` mode. Device memory
is everything the backend allocated (\`ranks.json\`), host memory what the
offload's host side allocated, link bytes the copies of one step each way,
beside \`ladder plan\`'s prediction. The link time is those bytes at
$link_gbps GB/s.
" "
**Measured.** \`optimizer\` saves $(row 3 | cut -f3)% of the device memory
(the moments and the fp32 masters: 12 bytes per parameter) for
$(row 3 | cut -f5) MiB over the link per step (the gradients to the host, the
bf16 copy back to the device); \`params\` saves $(row 4 | cut -f3)% for
$(row 4 | cut -f5) MiB, because every layer's weights cross twice per
microbatch (forward and backward) and its gradient goes back and forth. The
plan predicts the link's bytes exactly (last column). So parameter offload's
traffic grows with the microbatches while optimizer offload's does not:
at $link_gbps GB/s the copies cost $(row 4 | cut -f6) s against
$(row 3 | cut -f6) s per step. Whether that is affordable depends on the
step's compute time; on a GPU the prefetch of the next layer overlaps the
current one's compute, on the simulator nothing overlaps and the step times
(\`step_s\`) measure the simulator, not a link. The weights of every mode
are bitwise equal (tests/parallel/offload_test.sh).
"
