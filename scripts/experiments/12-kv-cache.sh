#!/usr/bin/env bash
# Lesson 12, the KV cache: the time of one decoded token with the cache (the
# new token's forward, attending over the cached keys and values) and
# without it (the whole prefix through the model again, which is what a
# decoder without a cache does for every token), as the context grows; and
# the KV cache's bytes per token, 2 · layers · heads · head_dim · bytes, in
# fp32 and int8, against what `ladder serve` allocates and reports.
#
# Both times come from one `ladder bench serve` run per context, random
# weights, one request at a time, every prompt exactly P tokens long (a
# shared prefix of P - 1 tokens plus one, the prefix cache off):
#   with the cache:    TPOT p50, the time per output token once the prompt
#                      is in the cache (positions P to P + ~16);
#   without the cache: TTFT p50, the forward over the whole P-token prompt
#                      (prefill), the cost of one cacheless decode step at
#                      context P.
source "$(dirname "$0")/lib.sh"
exp_init 12-kv-cache "KV cache: decoding in linear time" "$@"

# A model the CPU decodes in milliseconds, with a context long enough for
# the cacheless cost to show; the test size smaller still.
base=$(exp_pick "$exp_root/configs/baby.conf" "$exp_root/configs/small.conf" \
  "$exp_root/configs/gpt2-124m.conf")
context=$(exp_pick 128 1024 1024)
prompts=$(exp_pick "1 32 100" "1 16 64 256 512 1000" "1 16 64 256 512 1000")
requests=$(exp_pick 3 5 8)  # per context; the times are medians over them
outputs=16                  # mean output tokens per request (uniform in [8, 24])
kv_tokens=8192              # the cache `ladder serve` allocates for the byte count

sed -e "s/^context *=.*/context = $context/" "$base" >"$EXP_WORK/model.conf"
# The same shape for the served model, trained one step (serve needs a
# model directory); a byte vocabulary, which the KV cache does not depend on.
sed -e "s/^vocab_size *=.*/vocab_size = 256/" -e "s/^batch_size *=.*/batch_size = 1/" \
  -e "/^total_batch_tokens/d" -e "s/^eval_batches *=.*/eval_batches = 1/" \
  "$EXP_WORK/model.conf" >"$EXP_WORK/serve.conf"
key() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$EXP_WORK/model.conf"; }
L=$(key n_layer) NH=$(key n_head) C=$(key n_embd) V=$(key vocab_size)
HD=$((C / NH))
bpt_fp32=$((2 * L * NH * HD * 4))             # keys and values, 4 bytes each
bpt_int8=$((2 * L * NH * (HD * 1 + 4)))       # 1 byte each plus one f32 scale per head
# fp32 weights one decode step reads: all parameters but the position table
# (one row of it is read): the tied embedding V·C, the layers L·(12C² + 13C)
# and the final LayerNorm 2C.
weight_bytes=$((4 * (V * C + L * (12 * C * C + 13 * C) + 2 * C)))

exp_columns context cached_ms uncached_ms uncached_over_cached uncached_us_per_context_token \
  kv_fp32_KiB
for P in $prompts; do
  exp_run "$LADDER" bench serve --config "$EXP_WORK/model.conf" --device "$EXP_DEVICE" \
    --concurrency 1 --requests "$requests" --shared-prefix $((P - 1)) --prompt-tokens 1 \
    --output-tokens "$outputs" --no-prefix-cache --max-batch-tokens "$context" \
    >"$EXP_WORK/serve$P.log" 2>&1 || { cat "$EXP_WORK/serve$P.log"; exit 1; }
  # TPOT and TTFT p50 from the JSON last line (awk: a Python start per
  # figure would cost a tenth of a second each).
  tail -1 "$EXP_WORK/serve$P.log" | tr ',{}' '\n' |
    awk -F: -v P="$P" -v bpt="$bpt_fp32" '
      $1 == "\"tpot_p50_ms\"" {c = $2} $1 == "\"ttft_p50_ms\"" {u = $2}
      END {
        if (c == "" || u == "") exit 1
        printf "%d\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\n", P, c, u, u / c, 1000 * u / P, P * bpt / 1024
      }' >"$EXP_WORK/row$P.tsv" || { cat "$EXP_WORK/serve$P.log"; exit 1; }
  IFS=$'\t' read -r -a fields <"$EXP_WORK/row$P.tsv"
  exp_row "${fields[@]}"
done
exp_plot --x context --y uncached_ms,cached_ms --log-x --log-y \
  --title "Time per decoded token: without vs with the KV cache" \
  --x-label "context (tokens)" --y-label "ms per token"

# The bytes: `ladder serve` prints the cache it allocated ("KV int8 8192
# tokens (38.2 MiB)"). It runs in the background until /health answers,
# then stops on SIGINT; a bad start or exit fails the script.
exp_run "$LADDER" train --config "$EXP_WORK/serve.conf" --data "$EXP_CORPUS" --steps 1 \
  --eval-every 0 --device "$EXP_DEVICE" --out "$EXP_WORK/model" >"$EXP_WORK/train.log" 2>&1 ||
  { cat "$EXP_WORK/train.log"; exit 1; }
healthy() {  # URL: whether it answers 200
  if command -v curl >/dev/null; then
    curl -sf -o /dev/null --max-time 2 "$1"
  else
    python3 -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" \
      2>/dev/null
  fi
}
serve_kv() {  # FORMAT: sets KV_LINE to the KV line of `ladder serve --kv FORMAT`
  local log="$EXP_WORK/kv-$1.log" args pid port line
  args=(serve --model "$EXP_WORK/model" --host 127.0.0.1 --port 0 --kv "$1"
    --kv-tokens "$kv_tokens" --device "$EXP_DEVICE")
  line=$(printf '%q ' ladder "${args[@]}")
  EXP_COMMANDS+=("${line//"$EXP_WORK"/\$WORK}&  # stopped by SIGINT once /health answers")
  "$LADDER" "${args[@]}" 2>"$log" &
  pid=$!
  for _ in $(seq 600); do
    port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$log")
    if [ -n "$port" ] && healthy "http://127.0.0.1:$port/health"; then
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" || { cat "$log" >&2; exit 1; }
  KV_LINE=$(grep -m1 'listening on' "$log") || { cat "$log" >&2; exit 1; }
}
serve_kv fp32
kv_line_fp32=$KV_LINE
serve_kv int8
kv_line_int8=$KV_LINE
# Figures for the notes, in one Python: the reported cache sizes, the
# table's first, last and next-to-last rows, and what follows from them.
read -r rep_fp32 tokens_fp32 mib_fp32 rep_int8 tokens_int8 mib_int8 slack P0 P1 Pp c0 c1 u0 u1 \
  r0 r1 pt0 pt1 cached_growth uncached_growth span e_u e_c weights_mib kv1_mib read_growth \
  total_c total_u total_ratio min_us min_p verdict rises falling int8_saving \
  <<<"$(python3 - "$EXP_TSV" "$kv_line_fp32" "$kv_line_int8" "$weight_bytes" "$bpt_fp32" \
    "$bpt_int8" <<'PY'
import math, re, sys
tsv, line32, line8 = sys.argv[1:4]
weights, bpt32, bpt8 = (int(a) for a in sys.argv[4:7])
out = []
for line in (line32, line8):
    # "KV int8 8192 tokens (38.2 MiB)" -> bytes per token (the MiB rounded to 0.1)
    m = re.search(r"KV \w+ (\d+) tokens \(([0-9.]+) MiB\)", line)
    out += [round(float(m.group(2)) * 2**20 / int(m.group(1)), 1), m.group(1), m.group(2)]
tokens = int(re.search(r"KV \w+ (\d+) tokens", line32).group(1))
out.append(round(0.05 * 2**20 / tokens, 1))
rows = [l.rstrip("\n").split("\t") for l in open(tsv)][1:]
first, before, last = rows[0], rows[-2], rows[-1]
P0, P1, Pp = int(first[0]), int(last[0]), int(before[0])
c0, c1, cp = float(first[1]), float(last[1]), float(before[1])
u0, u1, up = float(first[2]), float(last[2]), float(before[2])
out += [P0, P1, Pp, first[1], last[1], first[2], last[2], first[3], last[3], first[4], last[4]]
out += [round(c1 / c0, 2), round(u1 / u0, 1), round(P1 / P0)]
# How each time grew over the last step of the context: context^e.
out += [round(math.log(u1 / up) / math.log(P1 / Pp), 2),
        round(math.log(c1 / cp) / math.log(P1 / Pp), 2)]
# A bandwidth-bound cached step reads the weights and the cache once.
out += [round(weights / 2**20, 1), round(P1 * bpt32 / 2**20, 1),
        round((weights + P1 * bpt32) / (weights + P0 * bpt32), 2)]
# Decoding every token from the first to the last context one at a time:
# the sum of the per-token times, by the trapezoid rule between the points.
p = [float(r[0]) for r in rows]
def total(k):
    y = [float(r[k]) for r in rows]
    return sum((p[i + 1] - p[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(p) - 1)) / 1000
tc, tu = total(1), total(2)
out += [round(tc, 2), round(tu, 1), round(tu / tc)]
# The cacheless time per context token: where it is lowest.
low = min(rows, key=lambda r: float(r[4]))
out += [low[4], low[0]]
out.append("matched" if u1 / c1 > 3 and u1 / u0 > 3 * c1 / c0 else "not_matched")
out.append(int(float(last[4]) > 1.2 * float(low[4])))
out.append(int(low[0] == last[0]))
out.append(round(bpt32 / bpt8, 2))
print(*out)
PY
)"
verdict=${verdict//_/ }
if [ "$rises" = 1 ]; then
  per_token="then rises to $pt1 µs at context $P1: past the
shortest contexts the O(P) matmuls are joined by attention's O(P²) score
work (QKᵀ and PV over the causal prefix), so the cacheless step grows
faster than linearly (context^$e_u between $Pp and $P1; 1 is linear) and a
cacheless generation heads from quadratic towards cubic"
elif [ "$falling" = 1 ]; then
  per_token="is still falling at context $P1 (the step grew as context^$e_u
between $Pp and $P1; 1 is linear): at these lengths the forward's fixed
cost, reading every weight once, is not yet amortized. The matmul work is
linear in the context, so the step tends to linear growth (and the
generation to quadratic) once it is, which longer contexts show
it"
else
  per_token="stays near that up to context $P1 ($pt1 µs;
context^$e_u between $Pp and $P1, 1 being linear): the cacheless step is
linear in the context, so a cacheless generation is quadratic"
fi

exp_finish "
**Claim.** A decoder that keeps every layer's keys and values (the KV cache)
runs only the new token through the model: each token costs one pass over
the weights plus attention over the cache, nearly the same at every
position, so generating N tokens is linear in N. Without the cache every
token recomputes the whole prefix: the token at context P costs a forward
over P tokens, growing with P, and N tokens cost a sum that is quadratic in
N. The price is memory: per token, 2 (K and V) · layers · heads · head_dim ·
bytes per value, fp32 4 bytes, int8 1 byte plus one fp32 scale per token,
head and K or V.

Each row is one \`ladder bench serve\` run on \`$(basename "$base")\` with
context $context ($L layers, $NH heads of $HD, vocabulary $V, random
weights, $EXP_DEVICE, fp32), $requests requests one at a time, every prompt
exactly \`context\` tokens (a shared prefix of context - 1 random tokens
plus one, prefix caching off so each prompt is computed in full), about
$outputs output tokens each. **With the cache** is the median time per
output token (TPOT p50: positions context to context + ~$outputs, the cache
in use). **Without the cache** is emulated, since ladder has no cacheless
decoding mode: it is the median time to first token (TTFT p50), which is
the prefill, one forward over all \`context\` tokens: what a cacheless
decoder recomputes to emit its next token at that context (the prefill
also writes the prompt's keys and values, a small part of that forward).
kv_fp32_KiB is the fp32 cache one sequence holds at that context (formula).
" "
**Time: $verdict.** From context $P0 to $P1 (${span}x) the time per token
with the cache went from $c0 to $c1 ms (${cached_growth}x) and without it
from $u0 to $u1 ms (${uncached_growth}x); at context $P1 the cacheless token
costs ${r1}x the cached one. At context $P0 both are one token
through the model, the same computation, so their ratio there
($r0) shows the measurement's noise. Summed over every
position from $P0 to $P1 (trapezoid rule between the measured points),
decoding $P1 tokens one at a time takes about ${total_c} s with the cache
and ${total_u} s without it, ${total_ratio}x.

**The cacheless step, per context token** (uncached_us_per_context_token),
falls from $pt0 µs at context $P0 to $min_us µs at $min_p: a
one-token forward is bound by reading the weights, and a forward over many
tokens reuses each weight it reads (matrix-matrix instead of
matrix-vector), which is why prefill is cheap per token and why batching
helps decoding. It $per_token.

**With the cache, nearly but not exactly constant.** Between the last two
contexts the cached step grew as context^$e_c. Each step reads the
weights ($weights_mib MiB in fp32) and every cached key and value
($bpt_fp32 bytes per token of context: $kv1_mib MiB at context $P1); if the
step were bound by those reads it would grow ${read_growth}x from context
$P0 to $P1, against ${cached_growth}x measured. The attention's work also
grows linearly with the context; for a model whose cache outgrows its
weights (long contexts, large batches) the cache reads dominate, which is
what int8 KV and grouped-query attention attack. Times come from a shared
2-core machine and vary by tens of percent between runs, the cached ones
(a few milliseconds each) most.

**Bytes per token: matched.** 2 · $L layers · $NH heads · $HD · 4 bytes =
**$bpt_fp32** bytes per token in fp32; in int8 2 · $L · $NH · ($HD · 1 + 4)
= **$bpt_int8** (the 4: one fp32 scale per token, head and K or V),
${int8_saving}x fewer. \`ladder serve --kv-tokens $kv_tokens\` allocated
and reported:

| KV format | formula bytes/token | cache reported by \`ladder serve\` | reported bytes/token |
|---|---|---|---|
| fp32 | $bpt_fp32 | $tokens_fp32 tokens, $mib_fp32 MiB | $rep_fp32 |
| int8 | $bpt_int8 | $tokens_int8 tokens, $mib_int8 MiB | $rep_int8 |

The report rounds to 0.1 MiB (±$slack bytes per token at $tokens_fp32
tokens); within that the formula is what ladder allocates: bytes per token
(src/model/kv_cache.cc, KvCache::BytesPerToken) times the cache's tokens,
in blocks of 16.
"
