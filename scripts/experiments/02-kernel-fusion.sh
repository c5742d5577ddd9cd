#!/usr/bin/env bash
# Lesson 2, kernel fusion: three fusions of a GPT-2 layer - residual add +
# LayerNorm, matmul + GELU, softmax + cross-entropy - each as ladder runs it
# (fused) and as the textbook's separate ops (unfused). `ladder bench ops`
# times every backend op on GPT-2 124M layer shapes through the same backend
# and measures the machine's copy bandwidth in the same run; the unfused
# path's time is the sum of its parts and its bytes the sum of theirs. The
# claim tested: what fusion saves is the time of the bytes it does not move.
source "$(dirname "$0")/lib.sh"
exp_init 02-kernel-fusion "Kernel fusion saves memory round trips" "$@"

# B*T tokens per run (T = min(1024, tokens)), a fixed vocabulary for the
# cross-entropy, and AdamW's parameters kept small (it is not measured here).
tokens=$(exp_pick "256 512" "1024 2048 4096" "2048 8192 16384")
vocab=$(exp_pick 2048 8192 50257)
reps=$(exp_pick 3 10 20)
# Whole bench runs per token count; each row is the median run's (on a
# shared machine both the load and the memory bandwidth come and go).
repeats=$(exp_pick 1 3 2)
C=768  # GPT-2 124M's width, which bench ops uses

for n in $tokens; do
  for r in $(seq "$repeats"); do
    exp_run "$LADDER" bench ops --device "$EXP_DEVICE" --tokens "$n" --vocab "$vocab" \
      --params 1048576 --reps "$reps" --out "$EXP_WORK/ops$n.$r.tsv" \
      >"$EXP_WORK/ops$n.$r.log" 2>&1 || { cat "$EXP_WORK/ops$n.$r.log"; exit 1; }
  done
done

# One row per (fusion, tokens), ascending in the bytes fusion does not move
# (the plot's x). Counts are fp32 (4 bytes) with bench ops's conventions
# (src/cli/bench_ops.cc): every input read once, every output written once.
# Each run gives a whole row from its own times and bandwidth (the ops of a
# fusion are timed within a second of each other); the row shown is the
# median run's, by saved/predicted (by time for matmul+gelu).
python3 - "$EXP_WORK" "$C" "$vocab" "$repeats" $tokens >"$EXP_WORK/rows.tsv" <<'PY'
import re, sys
work, C, V, repeats = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
Vp = (V + 127) // 128 * 128
F = 4  # bytes of an fp32 value

def fusions(N, ms):
    """(name, unfused bytes, fused bytes, unfused ms, fused ms or None) of one run."""
    # Residual + LayerNorm. Fused: read residual and branch, write the sum
    # and y; mean, rstd; gamma, beta. Unfused: ResidualAdd (read 2, write 1),
    # then LayerNorm alone (read the sum back, write y; mean, rstd; gamma,
    # beta). LayerNorm alone is not a bench ops row: timed at the fused op's
    # measured bytes per second.
    fused = F * (4 * N * C + 2 * N + 2 * C)
    add, ln = F * 3 * N * C, F * (2 * N * C + 2 * N + 2 * C)
    t_f, t_add = ms["ResidualLayerNormForward"], ms["ResidualAdd"]
    yield "residual+layernorm", add + ln, fused, t_add + t_f * ln / fused, t_f
    # Matmul + GELU (the MLP's up projection, [N,C] -> [N,4C]). Unfused:
    # MatmulForward writes pre, GeluForward reads it and writes out. Fused
    # (cuBLASLt's GELU_AUX_BIAS epilogue): pre and out both written from the
    # accumulators, one read of [N,4C] fewer. Not timed: the CPU backend's
    # MatmulGeluForward runs the two ops in turn, and bench ops has no row
    # for the CUDA epilogue.
    mm = F * (N * C + 4 * C * C + 4 * C + 4 * N * C)
    gelu = F * 2 * 4 * N * C
    yield ("matmul+gelu", mm + gelu, mm + F * 4 * N * C,
           ms["MatmulForward fc"] + ms["GeluForward"], None)
    # Softmax cross-entropy, forward and backward. Fused (ladder): two reads
    # of the logits (row max; sum of exps and the target's logit), five [N]
    # statistics; the backward reads the logits and writes dlogits (in
    # place) from the saved log-sum-exp. Unfused (softmax, then NLL, then
    # its backward): the same two reads, then a third pass that reads the
    # logits and writes the probabilities [N,Vp]; the backward reads them
    # and writes dlogits. That extra pass is CrossEntropyBackward's work
    # exactly (read a logit, write exp(x - lse)), so it is timed as one more
    # CrossEntropyBackward.
    fwd, bwd = F * (2 * N * V + 9 * N), F * (2 * N * Vp + 2 * N)
    t_fwd, t_bwd = ms["CrossEntropyForward"], ms["CrossEntropyBackward"]
    yield "softmax+crossentropy", fwd + 2 * bwd, fwd + bwd, t_fwd + 2 * t_bwd, t_fwd + t_bwd

fmt = lambda v, d: "-" if v is None else f"{v:.{d}f}"
rows = []
for n in map(int, sys.argv[5:]):
    per_fusion = {}
    for r in range(1, repeats + 1):
        ms = {}
        for line in open(f"{work}/ops{n}.{r}.tsv").read().splitlines()[1:]:
            cells = line.split("\t")
            ms[cells[0]] = float(cells[2])
        log = open(f"{work}/ops{n}.{r}.log").read()
        bw = float(re.search(r"copy bandwidth: ([0-9.]+) GB/s", log)[1])
        for name, unf_b, fus_b, unf_ms, fus_ms in fusions(n, ms):
            saved_b = unf_b - fus_b
            pred = saved_b / (bw * 1e9) * 1e3  # ms: the bytes not moved at copy bandwidth
            saved = None if fus_ms is None else unf_ms - fus_ms
            ratio = None if saved is None else saved / pred
            cells = [str(n), name, fmt(unf_b / 1e6, 2), fmt(fus_b / 1e6, 2), fmt(unf_ms, 3),
                     fmt(fus_ms, 3), fmt(saved_b / 1e6, 2), fmt(saved, 3), fmt(pred, 3),
                     fmt(ratio, 2), fmt(100 * saved_b / unf_b, 1),
                     fmt(None if saved is None else 100 * saved / unf_ms, 1)]
            per_fusion.setdefault(name, []).append((unf_ms if ratio is None else ratio, saved_b,
                                                    cells))
    for runs in per_fusion.values():
        runs.sort(key=lambda run: run[0])
        _, saved_b, cells = runs[(len(runs) - 1) // 2]
        rows.append((saved_b, cells))
for _, cells in sorted(rows, key=lambda r: r[0]):
    print("\t".join(cells))
PY

exp_columns tokens fusion unfused_MB fused_MB unfused_ms fused_ms saved_MB saved_ms \
  predicted_saved_ms saved_over_predicted bytes_saved_pct time_saved_pct
while IFS=$'\t' read -r -a cells; do exp_row "${cells[@]}"; done <"$EXP_WORK/rows.tsv"
# Both axes logarithmic unless a noisy run saved no time at all somewhere.
log_y=--log-y
awk -F'\t' 'NR > 1 && $8 != "-" && $8 <= 0 {bad = 1} END {exit !bad}' "$EXP_TSV" && log_y=
exp_plot --x saved_MB --y saved_ms,predicted_saved_ms --log-x $log_y \
  --title "Time fusion saves vs the bytes it does not move" \
  --x-label "MB not moved (counted)" --y-label "ms saved"

# Figures for the notes.
n1=${tokens##* }
get() {  # FUSION COLUMN: that fusion's cell at the largest N
  awk -F'\t' -v n="$n1" -v f="$1" -v c="$2" 'NR > 1 && $1 == n && $2 == f {print $c}' "$EXP_TSV"
}
per_n() {  # FUSION: "N = a: x% of the bytes, y% of the time, saved/predicted r; ..."
  awk -F'\t' -v f="$1" 'NR > 1 && $2 == f {
    printf "%sN = %s: %s%% of the bytes, %s%% of the time (saved/predicted %s)",
      (k++ ? "; " : ""), $1, $11, $12, $10 }' "$EXP_TSV"
}
ratio_range() {  # "a to b (median m)" of saved_over_predicted over the measured rows
  awk -F'\t' 'NR > 1 && $10 != "-" {print $10}' "$EXP_TSV" | python3 -c "
import statistics, sys
v = sorted(map(float, sys.stdin))
print(f'{v[0]:.2f} to {v[-1]:.2f} (median {statistics.median(v):.2f})')"
}
pct() { exp_calc "round(100 * ($1) / ($2), 1)"; }
bws=$(sed -n 's/^copy bandwidth: \([0-9.]*\) GB.*/\1/p' "$EXP_WORK"/ops*.log | sort -g |
  sed -n '1p;$p' | uniq | paste -sd- -)  # the range over all runs
median_ms() {  # OP: its median time at the largest N over the runs, ms (for the notes)
  awk -F'\t' -v op="$1" '$1 == op {print $3}' "$EXP_WORK"/ops"$n1".*.tsv |
    python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.stdin)):.3f}')"
}
gelu_ms=$(median_ms GeluForward) mm_ms=$(median_ms "MatmulForward fc")
gelu_share=$(pct "$gelu_ms" "$mm_ms + $gelu_ms")
mg_pred=$(pct "$(get matmul+gelu 9)" "$(get matmul+gelu 5)")
probs_mb=$(exp_calc "round(4 * $n1 * $vocab / 1e6, 1)")

exp_finish "
**Claim.** A chain of elementwise or row-wise ops is memory-bound: each op
reads its inputs from memory and writes its output back, and the next one
reads that output again. Fusing them into one kernel keeps the intermediate
in registers or cache, so the fused op moves fewer bytes, and the time it
saves is about those bytes at the memory bandwidth:
saved time ≈ (unfused bytes − fused bytes) / bandwidth.

\`ladder bench ops\` times each backend op on one GPT-2 124M layer's shapes
(C = $C; N = B·T tokens with T = min(1024, N), N = ${tokens// /, }; fc
[N,$C] → [N,$((4 * C))]; logits [N,$vocab]; $EXP_DEVICE, fp32; caches
flushed before each call) and measures the copy bandwidth (read + write) in
the same run. Each time is the best of $reps calls. Each N had $repeats run(s)
of bench ops; each gives a whole row from its own times and bandwidth (the
ops of one fusion are timed within a second of each other), and the table
shows the median run's row by \`saved_over_predicted\` (by time for
matmul+gelu). The copy bandwidth ranged $bws GB/s over all runs. Bytes are counted, not measured (no
hardware counters): every input read once, every output written once, as
bench ops counts them. For each fusion the unfused path's time is the sum
of its parts' times and its bytes the sum of theirs; \`predicted_saved_ms\`
is the bytes not moved at the measured copy bandwidth, and
\`saved_over_predicted\` = 1 means the saving is exactly those bytes. The
rows go up in the bytes not moved, the plot's x.

- **residual+layernorm**: fused \`ResidualLayerNormForward\` (4NC values
  moved) against \`ResidualAdd\` (3NC) followed by a LayerNorm alone (2NC);
  the sum is written and read back, NC values not moved by the fused op.
  *Emulated:* bench ops has no row for the LayerNorm alone, so its time is
  its bytes at the fused op's measured GB/s. What this row then tests is
  whether the standalone add costs its 3NC at the same speed.
- **matmul+gelu**: \`MatmulForward\` (fc) writes the pre-activation, then
  \`GeluForward\` reads it and writes the output. Fused, cuBLASLt's
  GELU_AUX_BIAS epilogue writes both from the GEMM's accumulators, one read
  of [N,4C] fewer. *Not timed:* the CPU backend's \`MatmulGeluForward\` runs
  the two ops in turn (it saves nothing on the CPU), and bench ops has no row
  for the CUDA epilogue, so only the prediction is given.
- **softmax+crossentropy** (forward and backward): ladder's cross-entropy
  reads the logits twice (row max; sum of exps and the target's logit) and
  its backward turns the logits into dlogits in place from the saved
  log-sum-exp; it never writes the probabilities. The unfused path writes
  them ([N,V]) in a third pass and its backward reads them back. *Emulated:*
  that extra pass is exactly \`CrossEntropyBackward\`'s work (read a logit,
  write exp(x − lse)), so it is timed as a second \`CrossEntropyBackward\`.
" "
Read each fusion by two numbers: the share of bytes it does not move
(\`bytes_saved_pct\`, counted) and the share of time it saves
(\`time_saved_pct\`, measured or emulated as above). The claim says they
track each other for memory-bound ops, and \`saved_over_predicted\` says
how closely, against the copy bandwidth: over the measured rows it ranged
$(ratio_range).

**Residual + LayerNorm.** $(per_n residual+layernorm). The fused op
writes the sum once and never reads it back: a fifth of the pair's bytes.
A ratio near 1 says the standalone add costs its 3NC values at the speed
per byte the fused op reaches; above 1 it ran slower per byte (the
saving is larger than the bytes predict), below 1 faster. With the
LayerNorm alone emulated, this row tests no more than that. These ops take
one to a few milliseconds and the saving is the difference of two of them,
so its ratio moves most between runs.

**Softmax + cross-entropy.** $(per_n softmax+crossentropy). Not writing
the probabilities removes a read and a write of [N,V], a third of the
path's bytes. The extra pass also computes an exp per value, so on a CPU
it may run slower than a copy (ratio above 1); a ratio below 1 means it
moved its bytes faster than the measured copy did, which is then not a
perfect yardstick of the machine's bandwidth. The unfused path would also keep the
probabilities: $probs_mb MB more activation memory at N = $n1 (4·N·V bytes),
which is the larger saving when memory is what limits the batch.

**Matmul + GELU**: the epilogue would not move $(get matmul+gelu 11)% of
the pair's counted bytes at N = $n1, but the matmul is compute-bound
(MatmulForward fc $mm_ms ms, GeluForward $gelu_ms ms), so the predicted
saving, the read of [N,4C] at the copy bandwidth, is $mg_pred% of the
pair's measured time and even the whole GELU pass only $gelu_share% (medians
over the runs). On a
GPU the GEMM runs far faster and the elementwise pass is a larger share, so
the epilogue pays more there. On this CPU ladder does not fuse the pair
(\`MatmulGeluForward\` runs the two ops in turn), so nothing was measured.

Timings on a shared 2-core machine vary by 10% or more between runs, most
for the smallest ops, and even the copy bandwidth moved between runs (see
above); that is why each row is the median of several runs, and why a
fusion's saving can come out negative in a run where the fused op was timed
in a slow moment and its unfused parts in a fast one.
"
