#!/usr/bin/env bash
# Lesson 7, parallelism: what each axis sends per step (measured against the
# plan's formulas), the pipeline bubble as microbatches grow against
# (P-1)/(M+P-1), and ZeRO-1's optimizer memory per rank against the DP degree.
source "$(dirname "$0")/lib.sh"
exp_init 07-parallelism "Parallelism: bytes per axis, the bubble, ZeRO-1" "$@"

width=$(exp_pick 64 128 256)
steps=$(exp_pick 2 4 6)
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
train() {  # NAME NP FLAGS...: one run, its log in $EXP_WORK/NAME.log
  local name=$1 np=$2
  shift 2
  exp_mpirun "$np" "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_CORPUS" \
    --steps "$steps" --device "$EXP_DEVICE" --out "$EXP_WORK/$name" "$@" \
    >"$EXP_WORK/$name.log" 2>&1 || { cat "$EXP_WORK/$name.log"; exit 1; }
}

exp_columns part setting measured predicted ratio
# Bytes per axis: rank 0's payload in the first step against the plan.
for layout in "2 --dp 2" "2 --dp 2 --zero 1" "2 --tp 2" "2 --tp 2 --sp" \
    "2 --pp 2 --microbatches 4" "2 --cp 2"; do
  set -- $layout
  np=$1
  shift
  name="comm_$(echo "$*" | tr -d ' -')"
  train "$name" "$np" "$@"
  exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" "$@" --json >"$EXP_WORK/$name.plan.json"
  for axis in data tensor pipeline context; do
    measured=$(exp_json "$EXP_WORK/$name/ranks.json" "j[0]['comm_bytes']['$axis']")
    [ "$measured" = 0 ] && continue
    predicted=$(exp_json "$EXP_WORK/$name.plan.json" "j['stages'][0]['comm_bytes']['$axis']")
    exp_row bytes "$* ($axis)" "$measured" "$predicted" "$(exp_calc "round($measured / $predicted, 4)")"
  done
  # What the tensor axis puts on the wire with ring algorithms (the plan's).
  if [[ " $* " == *" --tp "* ]]; then
    exp_row wire "$* (tensor, ring)" - \
      "$(exp_json "$EXP_WORK/$name.plan.json" "j['stages'][0]['tensor_wire_bytes']")" -
  fi
done

# The bubble of a 2-stage pipeline (a rank per core) as the microbatches grow.
EXP_PLOT_TSV="$EXP_WORK/bubble.tsv"
printf 'M\tmeasured_pct\ttextbook_pct\n' >"$EXP_PLOT_TSV"
for m in $(exp_pick "1 4" "1 2 4 8" "1 2 4 8"); do
  for schedule in 1f1b; do
    train "bubble_m$m" 2 --pp 2 --microbatches "$m" --pp-schedule "$schedule"
    line=$(grep "^pipeline bubble:" "$EXP_WORK/bubble_m$m.log")
    measured=$(sed -n 's/^pipeline bubble: \([0-9.]*\)%.*/\1/p' <<<"$line")
    textbook=$(sed -n 's/.*= \([0-9.]*\)%$/\1/p' <<<"$line")
    exp_row bubble "pp 2, M = $m" "$measured%" "$textbook%" \
      "$(exp_calc "round($measured / $textbook, 3)")"
    printf '%s\t%s\t%s\n' "$m" "$measured" "$textbook" >>"$EXP_PLOT_TSV"
  done
done
exp_plot --x M --y measured_pct,textbook_pct --title "Pipeline bubble, 2 stages (1F1B)" \
  --x-label "microbatches M" --y-label "% of the schedule"

# ZeRO-1: the optimizer state per rank falls as 1/D.
for d in $(exp_pick "1 2" "1 2 4" "1 2 4"); do
  train "zero_d$d" "$d" --dp "$d" --zero 1
  measured=$(exp_json "$EXP_WORK/zero_d$d/ranks.json" "j[0]['memory']['optimizer']")
  [ "$d" = 1 ] && whole=$measured
  exp_row zero1 "dp $d, optimizer bytes per rank" "$measured" \
    "$(exp_calc "round($whole / $d)")" "$(exp_calc "round($measured * $d / $whole, 4)")"
done

exp_finish "
**Claims.** Each way of splitting the model costs its own communication:
data parallelism all-reduces every gradient once a step (4 bytes per
parameter; ZeRO-1 a reduce-scatter and an all-gather of the same buffer),
tensor parallelism all-reduces activations inside every layer (2 per layer
and direction; with sequence parallelism all-gathers and reduce-scatters of
the same bytes), a pipeline passes one activation and one gradient per
microbatch and stage boundary, and context parallelism passes every layer's
keys and values around its ring. A pipeline idles for the textbook bubble
(P-1)/(M+P-1) of its schedule; ZeRO-1 divides the optimizer state by the
data-parallel degree.

A model of 4 layers, $width wide, trains $steps steps per layout under mpirun on
this machine (ranks oversubscribe its cores). \`bytes\` rows: rank 0's
payload per axis in one step (\`ranks.json\`) against \`ladder plan\`'s
formulas (src/tools/plan.h); \`bubble\` rows: the idle share of the
schedule the run reports against the textbook; \`zero1\` rows: AdamW's state
per rank against 1/D of one rank's.
" "
**Bytes.** Every axis's payload is the plan's to the byte (ratio 1): the
formulas in src/tools/plan.h are what the communicators count. The payload
counts each call's whole buffer, so sequence parallelism's all-gathers and
reduce-scatters count more than the all-reduces they replace; on the wire
(\`wire\` rows, ring algorithms: an all-reduce sends 2(t-1)/t of its buffer,
an all-gather or reduce-scatter (t-1)/t) the two differ only by the extra
gather the backward's weight gradients need, and sequence parallelism
divides the LayerNorm regions' activations by t.

**Bubble.** The measured idle share went from $(sed -n 2p "$EXP_PLOT_TSV" | cut -f2)% at
M = $(sed -n 2p "$EXP_PLOT_TSV" | cut -f1) to $(tail -1 "$EXP_PLOT_TSV" | cut -f2)% at M = $(tail -1 "$EXP_PLOT_TSV" | cut -f1), where the
textbook says $(sed -n 2p "$EXP_PLOT_TSV" | cut -f3)% and $(tail -1 "$EXP_PLOT_TSV" | cut -f3)%. It exceeds the textbook because stages are not equal here (the first
holds the embedding, the last the head and loss), the backward takes longer
than the forward, and each microbatch's hand-over costs a message whose
latency the textbook leaves out: with a model this small a microbatch
computes for about as long as its messages take, so the waiting does not
shrink as the formula's does. A larger model (\`--size full\`, or a GPU)
brings the two together.

**ZeRO-1.** The optimizer state per rank is 1/D of the whole (ratio 1, up
to the padding that makes the shards equal).

Not measured here: the traffic of two nestings of the same axes (ladder's
grid order is fixed, \`[pp][dp][cp][tp]\`, TP innermost: a choice made in
src/parallel/grid.h, not a flag), and GPipe against 1F1B's activation memory
(\`ladder plan --pp-schedule gpipe\` shows M slots instead of P).
"
