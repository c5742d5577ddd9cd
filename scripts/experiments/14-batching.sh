#!/usr/bin/env bash
# Lesson 14, batching: the see-saw between throughput and latency. One
# `ladder bench serve` run per concurrency (closed loop: C requests in
# flight, a new one as soon as one finishes; random weights, greedy), from
# 1 to 64 requests at once. Each run gives output tokens/s over the run
# and, per request, the time to first token (TTFT) and the time per output
# token after it (TPOT). Set beside them: Little's law, tokens/s = C x
# tokens per request / time per request, which ties the two together, and
# the FLOP rate the batch reached against the machine's GEMM ceiling
# (`ladder bench train`) and batch-1 decoding against its memory-bandwidth
# bound (`ladder bench decode`), both measured in the same run.
source "$(dirname "$0")/lib.sh"
exp_init 14-batching "Batching: the see-saw of throughput and latency" "$@"

# A model whose batch-1 decoding reads more weights than the caches near
# the cores hold (small: 10.8M parameters, 41 MiB in fp32); the test size
# smaller.
base=$(exp_pick "$exp_root/configs/tiny.conf" "$exp_root/configs/small.conf" \
  "$exp_root/configs/gpt2-124m.conf")
concurrencies=$(exp_pick "1 4 16" "1 2 4 8 16 32 64" "1 2 4 8 16 32 64")
per_slot=$(exp_pick 2 4 8)  # requests per request slot: requests = per_slot x C (at least 8)
reps=$(exp_pick 1 2 2)      # runs per point, the fastest kept
prompt=32                   # mean prompt tokens (uniform in [16, 48])
output=48                   # mean output tokens (uniform in [24, 72])

# The machine's two ceilings, measured now: the GEMM rate (bench train
# prints the best sgemm it found before its steps) and the memory bandwidth
# with batch-1 decoding's bound (bench decode).
exp_run "$LADDER" bench train --config "$exp_root/configs/tiny.conf" --steps 1 --warmup 0 \
  --device "$EXP_DEVICE" >"$EXP_WORK/train.log" 2>&1 || { cat "$EXP_WORK/train.log"; exit 1; }
gemm=$(sed -n 's/^GEMM ceiling: \([0-9.]*\) GFLOP\/s.*/\1/p' "$EXP_WORK/train.log")
exp_run "$LADDER" bench decode --config "$base" --tokens 32 --device "$EXP_DEVICE" \
  >"$EXP_WORK/decode.log" 2>&1 || { cat "$EXP_WORK/decode.log"; exit 1; }
read -r weights_mib bandwidth bound_tps decode_tps <<<"$(python3 - "$EXP_WORK/decode.log" <<'PY'
import json, re, sys
text = open(sys.argv[1]).read()
d = json.loads(text.strip().splitlines()[-1])
print(re.search(r"weights read per token ([0-9.]+) MiB", text).group(1),
      re.search(r"memory read bandwidth ([0-9.]+) GB/s", text).group(1),
      round(d["bound_tokens_per_s"]), round(d["tokens_per_s"]))
PY
)"
if [ -z "$gemm" ] || [ -z "$bandwidth" ]; then
  cat "$EXP_WORK/train.log" "$EXP_WORK/decode.log"
  exit 1
fi

exp_columns concurrency tokens_per_s ttft_p50_ms ttft_p99_ms tpot_p50_ms throughput_x tpot_x \
  ttft_x littles_law_tokens_per_s measured_over_littles gflops of_gemm_ceiling
first=""
for c in $concurrencies; do
  requests=$((per_slot * c))
  [ "$requests" -ge 8 ] || requests=8
  # Each point $reps times, the run with the most tokens/s kept (on a shared
  # machine other work only ever slows a run down).
  best=0
  for _ in $(seq "$reps"); do
    exp_run "$LADDER" bench serve --config "$base" --device "$EXP_DEVICE" --concurrency "$c" \
      --requests "$requests" --prompt-tokens "$prompt" --output-tokens "$output" \
      >"$EXP_WORK/run.log" 2>&1 || { cat "$EXP_WORK/run.log"; exit 1; }
    tps=$(tail -1 "$EXP_WORK/run.log" | sed -n 's/.*"output_tokens_per_s":\([0-9.]*\).*/\1/p')
    if awk -v a="$tps" -v b="$best" 'BEGIN {exit !(a > b)}'; then
      best=$tps
      cp "$EXP_WORK/run.log" "$EXP_WORK/serve$c.log"
    fi
  done
  # One Python per row: the JSON last line, the parameter count from the
  # first, and the figures that follow. The first row (C = 1) is the base
  # of the _x columns; its values come back in `first`.
  row=$(python3 - "$EXP_WORK/serve$c.log" "$c" "$prompt" "$output" "$gemm" "$first" <<'PY'
import json, re, sys
log, c, p, o, gemm, first = sys.argv[1:7]
c, p, o, gemm = int(c), int(p), int(o), float(gemm)
text = open(log).read()
j = json.loads(text.strip().splitlines()[-1])
params = float(re.search(r"([0-9.]+)M parameters", text).group(1)) * 1e6
tps, ttft, ttft99, tpot = (j[k] for k in
                           ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms"))
base = [float(x) for x in first.split(",")] if first else [tps, tpot, ttft]
# Little's law: C slots, each busy with one request after another; a
# request of o tokens takes TTFT + (o - 1) TPOT (the medians standing in
# for the means).
littles = c * o / ((ttft + (o - 1) * tpot) / 1e3)
# The work done: every output token is one token through the model (about
# 2 FLOPs per parameter), and each carries p / o prompt tokens of prefill.
gflops = tps * (1 + p / o) * 2 * params / 1e9
print("\t".join(str(v) for v in (
    c, round(tps, 1), round(ttft, 1), round(ttft99, 1), round(tpot, 2), round(tps / base[0], 2),
    round(tpot / base[1], 2), round(ttft / base[2], 2), round(littles, 1),
    round(tps / littles, 2), round(gflops, 1), round(gflops / gemm, 3))))
print(f"{tps},{tpot},{ttft}" if not first else first)
PY
) || { cat "$EXP_WORK/serve$c.log"; exit 1; }
  first=$(tail -1 <<<"$row")
  IFS=$'\t' read -r -a fields <<<"$(head -1 <<<"$row")"
  exp_row "${fields[@]}"
done
exp_plot --x concurrency --y throughput_x,tpot_x,ttft_x --log-x --log-y \
  --title "Batching: throughput and latency vs concurrency" \
  --x-label "requests in flight" --y-label "x of concurrency 1"

# Figures for the notes.
read -r c0 c1 t0 t1 tx p0 p1 px f0 f1 fx l_min l_max g0 g0pct g1 g1pct c_2 first_gain first_lat \
  c_p last_gain last_lat verdict little <<<"$(python3 - "$EXP_TSV" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])][1:]
a, b = rows[0], rows[-1]
lit = [float(r[9]) for r in rows]
out = [a[0], b[0], a[1], b[1], b[5], a[4], b[4], b[6], a[2], b[2], b[7], min(lit), max(lit),
       a[10], round(100 * float(a[11]), 1), b[10], round(100 * float(b[11]), 1)]
# What the first and the last step of concurrency bought (tokens/s) and
# cost (TPOT), each over the row before.
def step(prev, r):
    return [round(float(r[1]) / float(prev[1]), 2), round(float(r[4]) / float(prev[4]), 2)]
out += [rows[1][0], *step(a, rows[1]), rows[-2][0], *step(rows[-2], b)]
# Matched: both throughput and TPOT rose by at least half again.
out.append("matched" if float(b[5]) > 1.5 and float(b[6]) > 1.5 else "not_matched")
out.append("matched_within_the_tail" if 0.7 <= min(lit) and max(lit) <= 1.1 else "only_roughly")
print(*out)
PY
)"
verdict=${verdict//_/ }
little=${little//_/ }
decode_frac=$(awk -v t="$decode_tps" -v b="$bound_tps" 'BEGIN {printf "%.2f", t / b}')
early=""
if awk -v l="$first_lat" 'BEGIN {exit !(l > 1.2)}'; then
  early=" Even the first step cost latency here, where the textbook has
it nearly free: batch-1 decoding already ran at $decode_frac of its bandwidth
bound, with both cores busy on one sequence's matmuls, so a second
sequence's attention and sampling, and once per request its prompt's
prefill, lengthen every step."
fi

exp_finish "
**Claim.** Batching trades latency for throughput. A decoding step reads
every weight once whatever the number of sequences in it, so while that
read (and the step's fixed costs) is what bounds the step, adding requests
to the batch is nearly free: tokens/s grows almost with the concurrency C
and each request's time per token hardly moves. Once the batch's
arithmetic is what bounds the step, a step's time grows with C, tokens/s
levels off towards the compute ceiling, and every request waits longer for
each of its tokens, and longer for its first one (its prompt queues behind
the others' work). Little's law holds the two together:
tokens/s = C x tokens per request / time per request.

Each row is one \`ladder bench serve\` run on \`$(basename "$base")\` (random
weights, greedy, ${EXP_DEVICE}, fp32), closed loop with C requests in
flight, $per_slot x C of them (at least 8), prompts of about $prompt tokens,
about $output output tokens each, each point run $reps time(s) and the run
with the most tokens/s kept. tokens_per_s is output tokens over the
run; TTFT is arrival to first token, TPOT the time per output token after
it (per request, p50 over requests); the _x columns are each against C = 1.
littles_law_tokens_per_s is C x $output / (TTFT + $((output - 1)) x TPOT),
from the per-request latencies alone. gflops counts about 2 FLOPs per
parameter for every token through the model (the outputs, and $prompt/$output
prompt tokens of prefill for each), against the GEMM ceiling \`ladder bench
train\` measured in the same run ($gemm GFLOP/s, its best sgemm).
" "
**The see-saw: $verdict.** From C = $c0 to C = $c1, tokens/s went from
$t0 to $t1 (**${tx}x** for ${c1}x the concurrency), and the latencies rose
with it: TPOT p50 from $p0 to $p1 ms (**${px}x**), TTFT p50 from $f0 to
$f1 ms (${fx}x). The first step (C = $c0 to $c_2) bought ${first_gain}x the
tokens/s for ${first_lat}x the TPOT; the last ($c_p to $c1) bought
${last_gain}x for ${last_lat}x. Where the gain per step falls towards 1
while the latency keeps climbing is the far end of the see-saw, where a
serving system stops admitting more requests into the batch (a TPOT or
TTFT target, an SLO, decides where).

**Why.** Batch-1 decoding reads $weights_mib MiB of weights per token:
\`ladder bench decode\` measured ${decode_tps} tokens/s against a bound of
${bound_tps} at the ${bandwidth} GB/s of memory bandwidth it measured. A
step is those reads plus fixed costs (the layer loop, sampling, thread
hand-offs), and the next requests in the batch share both. The work
itself is what grows: at C = $c0 the model did about $g0 GFLOP/s
(${g0pct}% of the GEMM ceiling), at C = $c1 about $g1 GFLOP/s (${g1pct}%).
As the batch turns the step into matrix-matrix work its time grows with
the batch, so the tokens/s curve bends over while TPOT keeps climbing.$early
It levels off far below the GEMM ceiling: the work that grows with the
batch is not all large matrix products. Attention runs over each
request's own KV cache and does not batch (its bytes grow with C); the
LayerNorms, GELU and sampling grow with it too (lesson 15 sets the linear
layers' share of a forward beside the rest).

**Little's law: $little.** measured_over_littles lies
between $l_min and $l_max: the per-request latencies account for the
throughput. It falls short of 1 where the run ends with fewer than C
requests in flight (the last requests' tail), and p50s stand in for means.
Timings come from a shared 2-core machine and move by tens of percent
between runs; the direction of both curves does not.
"
