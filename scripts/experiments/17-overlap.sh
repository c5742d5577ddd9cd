#!/usr/bin/env bash
# Lesson 17, overlapping communication with compute: two data-parallel
# replicas over a slow link sum their gradients in buckets, either after the
# backward (every second of the link exposed) or with each bucket started
# as soon as the backward has passed it (--overlap-grad-reduce). The step's
# split shows the gradient sum's exposed and overlapped seconds beside the
# link's alpha-beta prediction, for several bucket sizes.
source "$(dirname "$0")/lib.sh"
exp_init 17-overlap "Overlap: hiding the gradient sum behind the backward" "$@"

steps=$(exp_pick 3 12 30)
width=$(exp_pick 32 128 256)
layers=$(exp_pick 2 6 8)
buckets=$(exp_pick "0.01 1" "0.125 0.5 4" "0.25 1 4 16")
# The link between the replicas: 500 µs and 0.25 GB/s, slow enough that the
# whole gradient sum takes about as long as the backward.
latency_us=500 link_gbps=0.25
cat >"$EXP_WORK/model.conf" <<CONF
n_layer = $layers
n_head = 4
n_embd = $width
context = 64
vocab_size = 256
batch_size = 8
steps = $steps
lr = 1e-3
warmup_steps = 1
eval_every = 0
eval_batches = 1
CONF
head -c 400000 "$EXP_CORPUS" >"$EXP_WORK/corpus.txt"

exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" --dp 2 --json >"$EXP_WORK/plan.json"
params=$(exp_json "$EXP_WORK/plan.json" "j['parameters']")

exp_columns bucket_MiB buckets mode step_s backward_s grad_exposed_s grad_overlapped_s \
  predicted_link_s hidden_pct
plot_rows=()
for mib in $buckets; do
  exposed_plain=0
  for mode in after overlap; do
    flags=()
    [ "$mode" = overlap ] && flags=(--overlap-grad-reduce)
    out="$EXP_WORK/$mode-$mib"
    exp_mpirun 2 "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_WORK/corpus.txt" \
      --dp 2 --bucket-mb "$mib" --slow-link "data:$latency_us:$link_gbps" "${flags[@]}" \
      --log-every "$steps" --out "$out" >"$out.log" 2>&1 || { cat "$out.log"; exit 1; }
    # Medians over the steps after the first (warm-up).
    read -r step backward exposed overlapped < <(exp_step_medians "$out/metrics.jsonl" \
      't["step"]' 't["backward"]' 't["grad_exposed"]' 't["grad_overlapped"]')
    # The link's time for the buckets one after another: each an all-reduce
    # of 2 ranks, 2 (alpha + n / (2 beta)), n its bytes.
    read -r count predicted < <(python3 - "$params" "$mib" "$latency_us" "$link_gbps" <<'PY'
import sys
params, mib, us, gbps = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
bucket = max(1, int(mib * 2**20 / 4))
sizes = [min(bucket, params - b) for b in range(0, params, bucket)]
print(len(sizes), sum(2 * (us * 1e-6 + 4 * n / (2 * gbps * 1e9)) for n in sizes))
PY
    )
    [ "$mode" = after ] && exposed_plain=$exposed
    hidden=$(exp_calc "round(100 * (1 - $exposed / $exposed_plain), 1)")
    exp_row "$mib" "$count" "$mode" "$(exp_fmt "$step" 4)" "$(exp_fmt "$backward" 4)" \
      "$(exp_fmt "$exposed" 4)" "$(exp_fmt "$overlapped" 4)" "$(exp_fmt "$predicted" 4)" "$hidden"
    plot_rows+=("$mib $mode $step")
  done
done

# The plot: step time against the bucket size, after the backward and
# overlapped.
EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
printf '%s\n' "${plot_rows[@]}" | python3 -c "
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
by = {}
for mib, mode, step in rows:
    by.setdefault(mib, {})[mode] = float(step)
print('bucket_MiB\tafter the backward\toverlapped')
for mib, m in by.items():
    print(f\"{mib}\t{m['after']:.4f}\t{m['overlap']:.4f}\")
" >"$EXP_PLOT_TSV"
exp_plot --x bucket_MiB --y "after the backward,overlapped" --log-x \
  --title "Data-parallel step time over a slow link, by bucket size" \
  --x-label "bucket size (MiB)" --y-label "step time (s)"

row() { sed -n "$1p" "$EXP_TSV"; }
exp_finish "
**Claim.** Communication that waits for the compute before it starts is
paid in full; started as soon as its data is ready, it travels while the
compute goes on, and only what is left when the compute ends is exposed.
The backward finishes the gradients from the last layer to the first, so
the gradient sum can start long before the backward ends (PyTorch DDP's and
Megatron's buckets). Smaller buckets start earlier but pay the link's
latency more often.

Two data-parallel replicas train a $layers-layer, $width-wide model
($params parameters, $(exp_calc "round(4 * $params / 2**20, 2)") MiB of
gradients) for $steps steps over a link of $latency_us µs and $link_gbps GB/s
(\`--slow-link data:$latency_us:$link_gbps\`), with buckets of each size
(\`--bucket-mb\`). *after*: the buckets are all-reduced one after another
once the backward is done; *overlap*: \`--overlap-grad-reduce\`
(src/parallel/data_parallel/gradient_buckets.h). Both sum the same buckets
in the same order, so their losses and weights are bit for bit equal. The
step's split in metrics.jsonl: \`grad_exposed\` is the time the step waited
for the buckets after the backward, \`grad_overlapped\` the time some bucket
was in flight while the backward ran. *predicted_link_s* is the alpha-beta
time of the buckets one after another, 2 (α + n / 2β) each; *hidden_pct*
how much of *after*'s exposed time overlap removed. Medians over the steps
after the first.
" "
**Measured.** After the backward, the exposed time follows the link's
prediction (the sleeps of the simulated link, plus the real transfer and
waiting for the other rank). With overlap the exposed part shrinks to what
the backward could not cover: the last buckets, which include the
embedding's gradient (the first parameters in the buffer, finished last)
and are started only when the backward ends. The smallest buckets pay the
latency once per bucket, the largest start late (one bucket of the whole
buffer cannot start before the backward ends, so nothing is hidden). The
overlapped seconds can exceed the link's time for the buckets hidden: a
bucket's completion is seen at the next layer's test, not the moment it
ends.

On a GPU the same code starts each bucket on NCCL's side stream
(src/parallel/nccl_comm.h); that has not run on a GPU yet.
"
