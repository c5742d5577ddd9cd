#!/usr/bin/env bash
# Lesson 5, activation recomputation: the activation memory each level of
# --recompute saves against the step time it adds.
source "$(dirname "$0")/lib.sh"
exp_init 05-recompute "Activation recomputation: memory saved, time added" "$@"

base=$(exp_pick "$exp_root/tests/parallel/equivalence.conf" "$exp_root/configs/small.conf" \
  "$exp_root/configs/gpt2-124m.conf")
batch=$(exp_pick 2 8 8)
steps=$(exp_pick 3 6 6)
sed -e "s/^batch_size *=.*/batch_size = $batch/" -e "/^total_batch_tokens/d" "$base" \
  >"$EXP_WORK/model.conf"

exp_columns level activations_MiB saved_pct step_s added_pct predicted_MiB
none_acts=0 none_step=0
for level in none gelu layer; do
  exp_run "$LADDER" train --config "$EXP_WORK/model.conf" --data "$EXP_CORPUS" --steps "$steps" \
    --eval-every 0 --recompute "$level" --device "$EXP_DEVICE" --out "$EXP_WORK/$level" \
    >"$EXP_WORK/$level.log" 2>&1 || { cat "$EXP_WORK/$level.log"; exit 1; }
  exp_run "$LADDER" plan --config "$EXP_WORK/model.conf" --recompute "$level" --json \
    >"$EXP_WORK/$level.plan.json"
  acts=$(exp_json "$EXP_WORK/$level/ranks.json" "j[0]['memory']['activations']")
  predicted=$(exp_json "$EXP_WORK/$level.plan.json" "j['stages'][0]['memory']['activations']")
  # The median step after the first (which warms the caches and the BLAS).
  step=$(exp_step_medians "$EXP_WORK/$level/metrics.jsonl" 't["step"]')
  if [ "$level" = none ]; then none_acts=$acts none_step=$step; fi
  exp_row "$level" "$(exp_calc "round($acts / 2**20, 2)")" \
    "$(exp_calc "round(100 * (1 - $acts / $none_acts), 1)")" "$(exp_fmt "$step" 3)" \
    "$(exp_calc "round(100 * ($step / $none_step - 1), 1)")" \
    "$(exp_calc "round($predicted / 2**20, 2)")"
done
exp_plot --x saved_pct --y added_pct --title "Recomputation: time added vs memory saved" \
  --x-label "activation memory saved, %" --y-label "step time added, %"

row() { sed -n "$1p" "$EXP_TSV"; }
exp_finish "
**Claim.** Recomputing activations in the backward instead of keeping them
saves 60-70% of activation memory for 10-20% more step time.

Each row trains \`$(basename "$base")\` ($batch sequences per step, $steps steps,
$EXP_DEVICE) at one \`--recompute\` level: \`gelu\` rebuilds each layer's GELU
output from the kept pre-activation (llm.c's default), \`layer\` keeps only
each layer's input and reruns the layer's forward. Memory is the activation
arena as allocated (\`ranks.json\`), with \`ladder plan\`'s prediction
beside it; time is the median step after the first.
" "
**Measured.** \`gelu\` saves $(row 3 | cut -f3)% of the activations for
$(row 3 | cut -f5)% more time; \`layer\` saves $(row 4 | cut -f3)% for
$(row 4 | cut -f5)%. Full recomputation lands on the claim's memory side
(what is kept per layer drops from N (4C + 12C/t) values and the statistics
to N C); its time cost is one more forward per layer, a third of a
forward-plus-backward's FLOPs at most, which the claim's 10-20% reflects on
GPUs where the matmuls dominate. On a CPU the forward's share of the step
differs and the measurement says by how much. \`gelu\` is the cheap end: one
elementwise pass per layer for a smaller saving. Step times on a shared
2-core machine vary by a few percent between runs.
"
