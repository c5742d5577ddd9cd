#!/usr/bin/env bash
# Lesson 18, hiding the pipeline's transfers: two stages over a slow link
# pass each microbatch's activations forward and its gradient back, either
# waiting for every transfer between passes or with the sends started and
# the next gradient's receive posted early (--overlap-p2p-comm), so that the
# transfers travel while the stage computes. The step's split shows the
# compute, the schedule's waiting (the bubble, transfers included) and the
# link's alpha-beta prediction, for several microbatch counts.
source "$(dirname "$0")/lib.sh"
exp_init 18-pipeline-overlap "Overlap: hiding the pipeline's transfers behind compute" "$@"

steps=$(exp_pick 3 8 20)
width=$(exp_pick 64 128 256)
micros=$(exp_pick "4" "4 8 16" "4 8 16 32")
# The link between the stages: 1 ms and 0.1 GB/s, so that a microbatch's
# transfer takes about as long as its forward.
latency_us=1000 link_gbps=0.1
batch=16 context=64
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = 4
n_head = 4
n_embd = $width
context = $context
vocab_size = 256
batch_size = $batch
steps = $steps
lr = 1e-3
warmup_steps = 1
eval_every = 0
eval_batches = 1
CONF
head -c 400000 "$EXP_CORPUS" >"$EXP_WORK/corpus.txt"

exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" --pp 2 --json >"$EXP_WORK/plan.json"
params=$(exp_json "$EXP_WORK/plan.json" "j['parameters']")

exp_columns microbatches mode step_s compute_s bubble_s predicted_link_s textbook_bubble_s \
  saved_pct
plot_rows=()
for m in $micros; do
  step_blocking=0
  for mode in blocking overlap; do
    flags=()
    [ "$mode" = overlap ] && flags=(--overlap-p2p-comm)
    out="$EXP_WORK/$mode-$m"
    exp_mpirun 2 "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_WORK/corpus.txt" \
      --device "$EXP_DEVICE" --pp 2 --microbatches "$m" \
      --slow-link "pipeline:$latency_us:$link_gbps" "${flags[@]}" --log-every "$steps" \
      --out "$out" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
    # The first stage's medians over the steps after the first (warm-up).
    read -r step compute bubble < <(exp_step_medians "$out/metrics.jsonl" 't["step"]' \
      't["forward"] + t["backward"]' 't["bubble"]')
    # The first stage sends m activations and receives m gradients a step,
    # each B/m x T x C floats: alpha + n / beta apiece, one after another.
    predicted=$(exp_calc "2 * $m * ($latency_us * 1e-6 + 4 * $batch / $m * $context * $width / ($link_gbps * 1e9))")
    # GPipe's and 1F1B's idle share without transfers: (P - 1) / m of the
    # compute, for P = 2.
    textbook=$(exp_calc "$compute / $m")
    [ "$mode" = blocking ] && step_blocking=$step
    saved=$(exp_calc "round(100 * (1 - $step / $step_blocking), 1)")
    exp_row "$m" "$mode" "$(exp_fmt "$step" 4)" "$(exp_fmt "$compute" 4)" "$(exp_fmt "$bubble" 4)" \
      "$(exp_fmt "$predicted" 4)" "$(exp_fmt "$textbook" 4)" "$saved"
    plot_rows+=("$m $mode $step")
  done
done

EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
printf '%s\n' "${plot_rows[@]}" | python3 -c "
import sys
by = {}
for m, mode, step in (l.split() for l in sys.stdin if l.strip()):
    by.setdefault(m, {})[mode] = float(step)
print('microbatches\twaiting for each transfer\toverlapped')
for m, v in by.items():
    print(f\"{m}\t{v['blocking']:.4f}\t{v['overlap']:.4f}\")
" >"$EXP_PLOT_TSV"
exp_plot --x microbatches --y "waiting for each transfer,overlapped" --log-x \
  --title "Two pipeline stages over a slow link: step time" \
  --x-label "microbatches per step" --y-label "step time (s)"

exp_finish "
**Claim.** A pipeline stage that waits for each transfer before it computes
pays the link on top of the bubble: every activation sent forward and every
gradient sent back. Started early, a send travels while the stage computes
its next microbatch, and a gradient posted for receipt one backward ahead
arrives while the stage runs the backward before; only the transfers the
schedule has no work to hide behind stay exposed (Megatron's overlapped
point-to-point communication).

Two stages (a 4-layer model of width $width, $params parameters) train $batch sequences of $context
tokens a step in 1F1B, split into m microbatches, over a link of
$latency_us µs and $link_gbps GB/s (\`--slow-link pipeline:$latency_us:$link_gbps\`).
*blocking*: each send and receive completes before the stage goes on;
*overlap*: \`--overlap-p2p-comm\` (\`pp::RunStage\`'s overlap). Both run the
same passes on the same data, bit for bit the same losses and weights.
*compute_s* is the first stage's forward and backward, *bubble_s* the rest
of its schedule (waiting for the other stage and for transfers);
*predicted_link_s* the alpha-beta time of its 2m transfers had each
crossed alone, m (α + n/β) each way, n = $batch/m x $context x $width
floats (1F1B's steady state pairs a send with a receive in one full-duplex
call, so the link costs less than this where many pairs form);
*textbook_bubble_s* the pipeline's own idle time, (P - 1)/m of the compute
for P = 2, without any link. *saved_pct*: the step time overlap saves.
Medians of the first stage over the steps after the first.
" "
**Measured.** Waiting for each transfer, the bubble is about the textbook
idle time plus the link's seconds at few microbatches; at many, 1F1B's
paired full-duplex transfers keep it below that sum. Either way the
blocking step grows with m: more microbatches shrink the textbook bubble
but pay the link's latency once per transfer. Overlap saves less than the
link's seconds, a few percent of the step here (0.5 to 14% over repeated
runs: two ranks share two cores, and the noise is a few milliseconds): a
started send frees the sender, but the receiver cannot start its pass
before the data is there, so every microbatch's dependency from one stage
to the other still crosses the link once on the schedule's critical path.
What overlap removes is the sender's wait and the receive's posting; what
it cannot remove is the latency of a dependency. Fewer, larger transfers
(fewer microbatches) or a faster link are what shorten that.

On a GPU the pipeline group runs on NCCL, which does not start
point-to-point transfers yet, so \`--overlap-p2p-comm\` is refused there;
these figures are the CPU's (MPI).
"
