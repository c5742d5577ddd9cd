#!/usr/bin/env bash
# Lesson 15, prefill vs decode: why running a prompt (prefill: N tokens
# through the model in one forward) is compute-bound and generating
# (decode: one new token per sequence per forward) is memory-bound. The
# arithmetic intensity of a transformer block's linear layers, FLOPs per
# byte moved, as a function of the tokens N in one forward, against the
# machine's balance point (GEMM ceiling / memory bandwidth); the roofline
# time per token that follows, against what ladder measures:
#   `ladder bench matmul`  a block's four linear layers at N tokens (ms,
#                          GFLOP/s, GB/s);
#   `ladder bench serve`   the whole model's prefill of an N-token prompt
#                          (TTFT, one request at a time, every prompt
#                          exactly N tokens, prefix cache off) and its
#                          decoding after it (TPOT);
#   `ladder bench train`   the GEMM ceiling (best sgemm), and
#   `ladder bench decode`  the memory bandwidth, both in the same run.
source "$(dirname "$0")/lib.sh"
exp_init 15-prefill-decode "Prefill vs decode: compute-bound and memory-bound" "$@"

base=$(exp_pick "$exp_root/configs/tiny.conf" "$exp_root/configs/small.conf" \
  "$exp_root/configs/gpt2-124m.conf")
tokens=$(exp_pick "1 4 16 64" "1 2 4 8 16 32 64 128 256" "1 4 16 64 256 1024")
requests=$(exp_pick 2 8 8)   # per prompt length; TTFT and TPOT are medians over them
reps=$(exp_pick 3 7 7)       # bench matmul's repetitions
serve_reps=$(exp_pick 1 2 2) # bench serve runs per prompt length, the fastest kept
outputs=8                    # mean output tokens (uniform in [4, 12]) for TPOT
max_n=${tokens##* }
# The context holds the longest prompt and its output.
sed -e "s/^context *=.*/context = $((max_n + 16))/" "$base" >"$EXP_WORK/model.conf"
key() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$EXP_WORK/model.conf"; }
L=$(key n_layer) C=$(key n_embd)

# The ceilings: the CPU's, for bench matmul (which times the CPU only), and
# the device's, for the whole forward, where they differ.
ceilings() {  # DEVICE SUFFIX
  exp_run "$LADDER" bench train --config "$exp_root/configs/tiny.conf" --steps 1 --warmup 0 \
    --device "$1" >"$EXP_WORK/train$2.log" 2>&1 || { cat "$EXP_WORK/train$2.log"; exit 1; }
  exp_run "$LADDER" bench decode --config "$EXP_WORK/model.conf" --tokens 32 \
    --device "$1" >"$EXP_WORK/decode$2.log" 2>&1 || { cat "$EXP_WORK/decode$2.log"; exit 1; }
}
ceilings cpu ""
if [ "$EXP_DEVICE" = cpu ]; then
  cp "$EXP_WORK/train.log" "$EXP_WORK/train_dev.log"
  cp "$EXP_WORK/decode.log" "$EXP_WORK/decode_dev.log"
else
  ceilings "$EXP_DEVICE" _dev
fi
# The linear layers at every N.
exp_run "$LADDER" bench matmul --config "$EXP_WORK/model.conf" --tokens "${tokens// /,}" \
  --reps "$reps" >"$EXP_WORK/matmul.log" 2>&1 || { cat "$EXP_WORK/matmul.log"; exit 1; }
# The whole model, prefill and decode, at every N.
# Each $serve_reps times, the run with the shortest TTFT kept (on a shared
# machine other work only ever slows a run down).
for n in $tokens; do
  best=""
  for _ in $(seq "$serve_reps"); do
    exp_run "$LADDER" bench serve --config "$EXP_WORK/model.conf" --device "$EXP_DEVICE" \
      --concurrency 1 --requests "$requests" --shared-prefix $((n - 1)) --prompt-tokens 1 \
      --output-tokens "$outputs" --no-prefix-cache --max-batch-tokens "$max_n" \
      >"$EXP_WORK/run.log" 2>&1 || { cat "$EXP_WORK/run.log"; exit 1; }
    ttft=$(tail -1 "$EXP_WORK/run.log" | sed -n 's/.*"ttft_p50_ms":\([0-9.]*\).*/\1/p')
    if [ -z "$best" ] || awk -v a="$ttft" -v b="$best" 'BEGIN {exit !(a < b)}'; then
      best=$ttft
      cp "$EXP_WORK/run.log" "$EXP_WORK/serve$n.log"
    fi
  done
done

exp_columns tokens flop_per_byte regime roofline_us_per_token matmul_us_per_token \
  measured_over_roofline matmul_gflops of_gemm_ceiling matmul_GBps of_bandwidth \
  forward_us_per_token matmul_share_of_forward
EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
# One Python for the table, the plot's table and the figures for the notes.
read -r gemm bandwidth gemm_dev bandwidth_dev balance ridge weights_mib decode_tps decode_bound n0 n1 i0 i1 fw0 fw1 \
  fw_ratio tpot tpot_n mm_g1 mm_g1pct mm_b0 mm_b0pct mm_g0 mm_g0pct mm_b1pct pf_g pf_gpct \
  dc_b dc_bpct verdict_prefill verdict_decode rl_flat mm_flat verdict_shape min_over below share rest n_mem call_meas call_roof <<<"$(python3 - "$EXP_WORK" \
  "$EXP_TSV" "$EXP_PLOT_TSV" "$L" "$C" "$tokens" <<'PY'
import json, re, sys
work, tsv, plot, L, C = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
tokens = [int(t) for t in sys.argv[6].split()]
def ceilings(suffix):
    train = open(f"{work}/train{suffix}.log").read()
    decode = open(f"{work}/decode{suffix}.log").read()
    return (float(re.search(r"GEMM ceiling: ([0-9.]+) GFLOP/s", train).group(1)),
            float(re.search(r"memory read bandwidth ([0-9.]+) GB/s", decode).group(1)),
            re.search(r"weights read per token ([0-9.]+) MiB", decode).group(1),
            json.loads(decode.strip().splitlines()[-1]))
gemm, bw, _, _ = ceilings("")                       # the CPU's: bench matmul
gemm_dev, bw_dev, weights_mib, d = ceilings("_dev")  # the device's: the forward
mm = json.loads(open(f"{work}/matmul.log").read().strip().splitlines()[-1])
ms = {r["tokens"]: r["ms"] for r in mm if r["path"] == "fp32"}
# A block's linear layers in fp32: qkv C x 3C, proj C x C, fc C x 4C,
# fc_proj 4C x C: 12 C^2 weights; per token 16 C activations read and
# written (each layer's input and output). N tokens: 2 N 12 C^2 FLOPs,
# 4 (12 C^2 + 16 C N) bytes.
def flops(n): return 2 * n * 12 * C * C
def nbytes(n): return 4 * (12 * C * C + 16 * C * n)
balance = gemm / bw  # FLOP per byte where the two ceilings meet
ridge = next((n for n in range(1, 1 << 20) if flops(n) / nbytes(n) >= balance), None)
rows, fig = [], {}
for n in tokens:
    s = open(f"{work}/serve{n}.log").read()
    j = json.loads(s.strip().splitlines()[-1])
    t_flop, t_byte = flops(n) / (gemm * 1e9), nbytes(n) / (bw * 1e9)
    roof = L * max(t_flop, t_byte) / n * 1e6      # us per token, L blocks
    meas = L * ms[n] * 1e-3 / n * 1e6              # us per token, L blocks
    rows.append(dict(
        n=n, ai=flops(n) / nbytes(n), regime="compute" if t_flop >= t_byte else "memory",
        roof=roof, meas=meas, gflops=flops(n) / (ms[n] * 1e-3) / 1e9,
        gbps=nbytes(n) / (ms[n] * 1e-3) / 1e9, fwd=j["ttft_p50_ms"] * 1e3 / n,
        tpot=j["tpot_p50_ms"] * 1e3))
with open(tsv, "a") as f:
    for r in rows:
        f.write("\t".join(str(v) for v in (
            r["n"], round(r["ai"], 2), r["regime"], round(r["roof"], 1), round(r["meas"], 1),
            round(r["meas"] / r["roof"], 2), round(r["gflops"], 1), round(r["gflops"] / gemm, 3),
            round(r["gbps"], 1), round(r["gbps"] / bw, 3), round(r["fwd"], 1),
            round(r["meas"] / r["fwd"], 2))) + "\n")
with open(plot, "w") as f:
    f.write("tokens\troofline\tlinear_layers\twhole_forward\n")
    for r in rows:
        f.write(f"{r['n']}\t{r['roof']:.2f}\t{r['meas']:.2f}\t{r['fwd']:.2f}\n")
a, b = rows[0], rows[-1]
# Decode: batch-1 TPOT at the longest context; its bytes are the weights
# bench decode reports reading per token.
decode_bytes = float(weights_mib) * 2**20
dec_gbps = decode_bytes / (b["tpot"] * 1e-6) / 1e9
# Prefill: the whole model's FLOPs for N tokens, about 2 per parameter per
# token (the blocks' linear layers; attention and the head left out).
pf_gflops = L * flops(b["n"]) / (b["fwd"] * 1e-6 * b["n"]) / 1e9
print(gemm, bw, gemm_dev, bw_dev, round(balance, 1), ridge, weights_mib, round(d["tokens_per_s"]),
      round(d["bound_tokens_per_s"]), a["n"], b["n"], round(a["ai"], 2), round(b["ai"], 1),
      round(a["fwd"], 1), round(b["fwd"], 1), round(a["fwd"] / b["fwd"], 1), round(b["tpot"], 1),
      b["n"], round(b["gflops"], 1), round(100 * b["gflops"] / gemm, 1), round(a["gbps"], 1),
      round(100 * a["gbps"] / bw, 1), round(a["gflops"], 1), round(100 * a["gflops"] / gemm, 1),
      round(100 * b["gbps"] / bw, 1), round(pf_gflops, 1), round(100 * pf_gflops / gemm_dev, 1),
      round(dec_gbps, 1), round(100 * dec_gbps / bw_dev, 1),
      # Prefill compute-bound: the largest N reaches a large share of the
      # GEMM ceiling and little of the bandwidth; decode the other way.
      "matched" if b["gflops"] / gemm > 0.3 and b["gbps"] / bw < 0.5 else "not_matched",
      "matched" if a["gbps"] / bw > a["gflops"] / gemm else "not_matched",
      round(rows[0]["roof"] / rows[-1]["roof"], 1), round(rows[0]["meas"] / rows[-1]["meas"], 1),
      "matched_in_shape" if a["meas"] / b["meas"] >= 0.4 * a["roof"] / b["roof"] > 1
      else "not_matched",
      round(min(r["meas"] / r["roof"] for r in rows), 2),
      ",".join(str(r["n"]) for r in rows if r["meas"] < r["roof"]) or "none",
      round(100 * b["meas"] / b["fwd"]), round(b["fwd"] - b["meas"], 1),
      # The largest N in the memory-bound regime: what one call over N
      # tokens cost against one over a single token, measured and roofline.
      *next(([r["n"], round(r["meas"] * r["n"] / a["meas"], 2),
              round(r["roof"] * r["n"] / a["roof"], 2)]
             for r in reversed(rows) if r["regime"] == "memory" and r["n"] > 1),
            ["none", 0, 0]))
PY
)"
verdict_prefill=${verdict_prefill//_/ } verdict_decode=${verdict_decode//_/ }
verdict_shape=${verdict_shape//_/ }
if awk -v t="$decode_tps" -v b="$decode_bound" 'BEGIN {exit !(t >= 0.8 * b)}'; then
  decode_line="Batch-1 decoding as a whole came close to its own bound: ${decode_tps}
tokens/s against the ${decode_bound} tokens/s its weights ($weights_mib MiB)
and the bandwidth allow (\`bench decode\`)."
else
  decode_line="Those fixed costs are also why batch-1 decoding reached only
${decode_tps} tokens/s against the ${decode_bound} tokens/s its weights
($weights_mib MiB) and the bandwidth allow (\`bench decode\`)."
fi
mem_call=""
[ "$n_mem" = none ] || mem_call=" Measured, the linear layers' call over N = $n_mem tokens
cost ${call_meas}x their call over one token (the roofline: ${call_roof}x):
cheaper per token by far, but not free, since ladder's few-token kernels
are not purely bound by the weight reads on this CPU."
if [ "$below" = none ]; then
  above="The measured linear layers lie above the roofline everywhere
(measured_over_roofline at least $min_over): the roofline is a bound, and a
forward of a few tokens on a CPU also pays fixed costs (thread hand-offs,
small kernels) that no ceiling describes"
else
  above="The measured linear layers lie above the roofline except at N =
$below (measured_over_roofline down to $min_over): a bound measured by
one benchmark is not a law; a block's weights that stay in the caches near
the cores are read faster than the bandwidth \`bench decode\` measured, and
a GEMM of these shapes can beat the best sgemm of the ceiling's run on a
machine whose load moves. Elsewhere the fixed costs of a forward of a few
tokens (thread hand-offs, small kernels), which no ceiling describes, keep
it above"
fi
on_device=""
[ "$EXP_DEVICE" = cpu ] || on_device=" \`ladder bench matmul\` times the CPU only, so
the matmul and roofline columns are the CPU's (ceilings measured on it);
the forward is $EXP_DEVICE's, set against the ceilings \`bench train\` and
\`bench decode\` measured there: $gemm_dev GFLOP/s and $bandwidth_dev GB/s."
exp_plot --x tokens --y roofline,linear_layers,whole_forward --log-x --log-y \
  --title "Time per token vs tokens per forward" \
  --x-label "tokens in one forward" --y-label "microseconds per token"

exp_finish "
**Claim.** A linear layer with a C_in x C_out weight matrix applied to N
tokens does 2·N·C_in·C_out FLOPs and moves the weights once, C_in·C_out
values, plus N·(C_in + C_out) activations. Its arithmetic intensity, FLOPs
per byte, in fp32 (4 bytes a value) is
2·N·C_in·C_out / (4·(C_in·C_out + N·(C_in + C_out))) ≈ **N/2 FLOPs per
byte** while N is much smaller than the width: decoding one sequence
(N = 1) does **2 FLOPs per weight, 0.5 FLOPs per byte** (1 in bf16, about
2 in int8), whatever the model; a prefill of N prompt tokens does N times that on the same bytes.
A machine that can do F FLOP/s and move B bytes/s is compute-bound above
F/B FLOPs per byte and memory-bound below. So decode (N = 1) is
memory-bound on any machine built this decade, and prefill becomes
compute-bound once N passes about 2·F/B tokens: the time per token falls
as 1/N until the ridge, then stays flat at the compute ceiling.

The model is \`$(basename "$base")\` ($L layers, width $C, context set to
$((max_n + 16)), random weights, fp32). For a block's four linear layers
(12·C² weights, 16·C activations per token) the intensity is
24·N·C² / (4·(12·C² + 16·C·N)) (flop_per_byte). This run measured a GEMM
ceiling of **$gemm GFLOP/s** (\`ladder bench train\`: its best sgemm) and
a memory bandwidth of **$bandwidth GB/s** (\`ladder bench decode\`): a
balance point of $balance FLOPs per byte, which this block's intensity
reaches at **N = $ridge tokens**. roofline_us_per_token is the time per
token of the $L blocks' linear layers at whichever ceiling binds,
$L · max(FLOPs / ceiling, bytes / bandwidth) / N. matmul_us_per_token is
what \`ladder bench matmul\` measured for them (ladder's fp32 path, best or
median of $reps repetitions, times $L layers), with the GFLOP/s and GB/s
that implies against each ceiling. forward_us_per_token is the whole
model's prefill of an N-token prompt, TTFT p50 / N from \`ladder bench
serve\` ($requests requests one at a time, the prefix cache off, on
$EXP_DEVICE; the faster of $serve_reps run(s)): attention, LayerNorms, the head and sampling included.$on_device
" "
**Intensity and the time per token: $verdict_shape.** From N = $n0 to
N = $n1 the intensity rises from $i0 to $i1 FLOPs per byte and the
roofline's time per token falls ${rl_flat}x; the linear layers' measured
time per token fell ${mm_flat}x and the whole forward's from $fw0 to
$fw1 µs per token (${fw_ratio}x). Below the ridge (N = $ridge here) the
roofline has a forward cost about the same however many tokens share it,
since each weight is read once either way; above it, the cost per token
stops falling.$mem_call $above. $decode_line

**The whole forward is more than its matmuls.** At N = $n1 the linear
layers measured alone were ${share}% of the prefill's time per token
(matmul_share_of_forward); the other $rest µs per token are attention over
the KV cache, LayerNorms, GELU, the head and sampling, work this roofline
does not count, so the whole forward's time per token levels off higher
than the matmuls' own. At small N the share can pass 1: \`bench matmul\`
times each call between reads of a bandwidth probe and cycles through every
layer's weights so that none is still in a near cache, a deliberately cold
decode step, while the serving forward runs step after step on the same
weights. The two commands time the same kind of work under different
conditions, and where the weight reads are the whole cost, the conditions
decide.

**Prefill is compute-bound: $verdict_prefill.** At N = $n1 the linear
layers ran at $mm_g1 GFLOP/s, ${mm_g1pct}% of the GEMM ceiling, while
moving bytes at ${mm_b1pct}% of the bandwidth; the whole prefill did about
$pf_g GFLOP/s (${pf_gpct}% of the GEMM ceiling, counting only the blocks'
linear layers).
**Decode is memory-bound: $verdict_decode.** At N = 1 the linear layers
moved $mm_b0 GB/s (${mm_b0pct}% of the bandwidth) but computed only
$mm_g0 GFLOP/s (${mm_g0pct}% of the ceiling): the share of the byte
ceiling it uses exceeds its share of the FLOP ceiling. Decoding in the
serving engine after a $tpot_n-token prompt took $tpot µs per token
(TPOT p50), moving the weights at about $dc_b GB/s (${dc_bpct}% of the
bandwidth). The remedies follow: decode wants fewer bytes per token
(batching many sequences per weight read, lesson 14; int8 weights, lesson
13), prefill wants more FLOP/s (better kernels, a GPU).

**Left out: disaggregated serving.** ladder can split prefill and decode
into two processes (\`ladder serve --role prefill\` and \`--role decode
--prefill-addr\`, src/serve/prefill_server.h, remote_prefill.h), so that
decode steps never wait behind a prefill chunk. \`ladder bench serve\`
runs the engine in process and has no disaggregated mode; measuring it
takes two HTTP servers pinned to their own cores and a mixed load
(scripts/serve_load.py) for tens of seconds per setup, which is neither
cheap nor, on a shared 2-core machine, steady. docs/results.md
(\"Prefill/decode disaggregation\") has such a measurement.
"
