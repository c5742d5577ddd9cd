#!/usr/bin/env bash
# Lesson 16, speculative decoding: a small draft model proposes k tokens,
# the target checks all of them in one forward and keeps the longest
# prefix it agrees with plus one token of its own. Measured with `ladder
# bench serve --draft ... --speculate k` (which runs the same load with and
# without the draft): the acceptance, the tokens each target step yields
# and the speedup, for a target and a draft trained here briefly on the
# same corpus (with k from 1 up), for both with random weights, and for a
# trained target with a random draft. Set beside them: Leviathan et al.'s
# expectation, E = (1 - α^(k+1)) / (1 - α) tokens per target step and a
# speedup of E / (1 + k·c), with α the acceptance measured at k = 1 (where
# it is exactly the per-token acceptance) and c the draft's cost per token
# over the target's, each model timed alone.
source "$(dirname "$0")/lib.sh"
exp_init 16-speculative "Speculative decoding: acceptance and speedup" "$@"

# Target and draft share a tokenizer: the same corpus and vocabulary give
# the same BPE (checked below), or both are byte-level (full).
target_base=$(exp_pick "$exp_root/configs/tiny.conf" "$exp_root/configs/tiny.conf" \
  "$exp_root/configs/spec-target.conf")
target_steps=$(exp_pick 15 200 200)
draft_steps=$(exp_pick 30 300 600)
ks=$(exp_pick "1 4" "1 2 4 8" "1 2 4 8")
requests=$(exp_pick 4 24 24)
reps=$(exp_pick 1 3 2)  # runs of each timed setting, the fastest kept
prompt=8     # mean prompt tokens (uniform in [4, 12])
output=64    # mean output tokens (uniform in [32, 96])
k_other=4    # the k the other pairs run at (besides k = 1)
cp "$target_base" "$EXP_WORK/target.conf"
if [ "$EXP_SIZE" = full ]; then
  sed -e "s/^seed *=.*/seed = 7/" "$exp_root/configs/spec-draft.conf" >"$EXP_WORK/draft.conf"
else
  # The draft: the target's config cut to one layer of width 64 (and its
  # own seed, so random drafts are not the target's weights).
  sed -e "s/^n_layer *=.*/n_layer = 1/" -e "s/^n_head *=.*/n_head = 2/" \
    -e "s/^n_embd *=.*/n_embd = 64/" -e "s/^seed *=.*/seed = 7/" "$target_base" \
    >"$EXP_WORK/draft.conf"
fi

train() {  # CONFIG STEPS OUT
  exp_run "$LADDER" train --config "$1" --data "$EXP_CORPUS" --steps "$2" --eval-every 0 \
    --device "$EXP_DEVICE" --out "$3" >"$3.log" 2>&1 || { cat "$3.log"; exit 1; }
}
train "$EXP_WORK/target.conf" "$target_steps" "$EXP_WORK/target"
train "$EXP_WORK/draft.conf" "$draft_steps" "$EXP_WORK/draft"
cmp -s "$EXP_WORK/target/tokenizer.bpe" "$EXP_WORK/draft/tokenizer.bpe" ||
  { echo "16-speculative: the target's and the draft's tokenizers differ" >&2; exit 1; }
# What each writes, greedy, from the same prompt; and a model that is its
# random initialization in all but name (one step at a learning rate of
# 1e-9), for what a random model writes.
sed -e "s/^lr *=.*/lr = 1e-9/" -e "s/^min_lr *=.*/min_lr = 1e-10/" "$EXP_WORK/target.conf" \
  >"$EXP_WORK/random.conf"
train "$EXP_WORK/random.conf" 1 "$EXP_WORK/random"
sample() {  # MODEL -> its greedy continuation of "And the LORD", on one line
  exp_run "$LADDER" generate --model "$EXP_WORK/$1" --prompt "And the LORD" --max-tokens 24 \
    --temperature 0 --device "$EXP_DEVICE" >"$EXP_WORK/$1.txt" 2>/dev/null ||
    { cat "$EXP_WORK/$1.txt"; exit 1; }
  tr -c '[:alnum:] ,.;:!?()-' ' ' <"$EXP_WORK/$1.txt" | tr -s ' ' | cut -c1-120 | sed 's/ *$//'
}
text_target=$(sample target) text_draft=$(sample draft) text_random=$(sample random)
loss() { tail -1 "$1/metrics.jsonl" | sed -n 's/.*"loss": *\([0-9.eE+-]*\).*/\1/p' |
  awk '{printf "%.2f", $1}'; }
target_loss=$(loss "$EXP_WORK/target") draft_loss=$(loss "$EXP_WORK/draft")

# The timed runs on one CPU thread: for models this small one thread
# decodes faster than two, and on a shared machine a ratio of two runs is
# far steadier without OpenMP's barriers waiting on a descheduled thread.
serve=("$LADDER")
[ "$EXP_DEVICE" = cuda ] || serve=(env OMP_NUM_THREADS=1 "$LADDER")
load=(--device "$EXP_DEVICE" --concurrency 1 --requests "$requests" --prompt-tokens "$prompt"
  --output-tokens "$output")
# Every timed run below runs $reps times and the fastest is kept: on a
# shared machine other work only ever slows a run down, and a speedup is a
# ratio of two runs.
# PAIR K FLAGS...: the fastest of $reps `bench serve --speculate K` runs,
# as a line of the raw table: pair, k, acceptance, output tokens, target
# forwards, draft forwards, tokens/s; every run's target-alone tokens/s
# goes to baselines.txt (the same target shape and load in every run).
spec() {
  local name=$1 k=$2 r log
  shift 2
  for r in $(seq "$reps"); do
    log="$EXP_WORK/spec-$name-$k-$r.log"
    exp_run "${serve[@]}" bench serve "$@" --speculate "$k" "${load[@]}" >"$log" 2>&1 ||
      { cat "$log"; exit 1; }
    python3 - "$log" "$name" "$k" >>"$EXP_WORK/runs.tsv" <<'PY' || { cat "$log"; exit 1; }
import json, re, sys
log, name, k = sys.argv[1:4]
text = open(log).read()
j = json.loads(text.strip().splitlines()[-1])
m = re.search(r"(\d+) target and (\d+) draft forwards", text)
print(name, k, j["acceptance"], j["output_tokens"], m.group(1), m.group(2),
      j["output_tokens_per_s"], j["baseline_output_tokens_per_s"], sep="\t")
PY
  done
}
# c: each model's tokens/s alone (random weights: the cost does not depend
# on them), on the same load.
alone() {  # MODEL
  local r
  for r in $(seq "$reps"); do
    exp_run "${serve[@]}" bench serve --config "$EXP_WORK/$1.conf" "${load[@]}" \
      >"$EXP_WORK/alone-$1-$r.log" 2>&1 || { cat "$EXP_WORK/alone-$1-$r.log"; exit 1; }
    tail -1 "$EXP_WORK/alone-$1-$r.log" |
      sed -n "s/.*\"output_tokens_per_s\":\([0-9.]*\).*/$1\t\1/p" >>"$EXP_WORK/alone.tsv"
  done
}
alone target
alone draft
# The cost of a verification: the target's forward over k + 1 positions
# against one, each the time to first token of a prompt exactly that long
# (prefix cache off), the median over the requests.
for k in 0 $ks; do
  exp_run "${serve[@]}" bench serve --config "$EXP_WORK/target.conf" --device "$EXP_DEVICE" \
    --concurrency 1 --requests "$requests" --shared-prefix "$k" --prompt-tokens 1 \
    --output-tokens 1 --no-prefix-cache >"$EXP_WORK/verify-$k.log" 2>&1 ||
    { cat "$EXP_WORK/verify-$k.log"; exit 1; }
  tail -1 "$EXP_WORK/verify-$k.log" |
    sed -n "s/.*\"ttft_p50_ms\":\([0-9.]*\).*/$k\t\1/p" >>"$EXP_WORK/verify.tsv"
done

for k in $ks; do spec trained "$k" --model "$EXP_WORK/target" --draft "$EXP_WORK/draft"; done
for k in 1 $k_other; do
  spec trained-T1 "$k" --model "$EXP_WORK/target" --draft "$EXP_WORK/draft" --temperature 1
done
for k in 1 $k_other; do
  spec random "$k" --config "$EXP_WORK/target.conf" --draft-config "$EXP_WORK/draft.conf"
done
for k in 1 $k_other; do
  spec mismatched "$k" --model "$EXP_WORK/target" --draft-config "$EXP_WORK/draft.conf"
done

exp_columns pair k acceptance alpha tokens_per_step predicted_tokens_per_step verify_cost \
  speedup leviathan_speedup over_leviathan with_verify_speedup over_with_verify
EXP_PLOT_TSV="$EXP_WORK/plot.tsv"
# One Python for the table, the plot's table and the figures for the notes.
read -r c tps_target tps_draft b_lo b_hi kb sb kt st kr sr km sm a_tr a_t1 a_r a_m tokens_match \
  lev_ratios ver_ratios verify_list verdict <<<"$(python3 - "$EXP_WORK" "$EXP_TSV" \
  "$EXP_PLOT_TSV" <<'PY'
import collections, sys
work, tsv, plot = sys.argv[1:4]
alone = collections.defaultdict(float)
for line in open(f"{work}/alone.tsv"):
    m, t = line.split()
    alone[m] = max(alone[m], float(t))
verify = dict((int(k), float(t)) for k, t in (l.split() for l in open(f"{work}/verify.tsv")))
runs = collections.OrderedDict()
baselines = [alone["target"]]
for line in open(f"{work}/runs.tsv"):
    name, k, acc, out, tf, df, tps, base = line.split("\t")
    baselines.append(float(base))
    key = (name, int(k))
    r = dict(acc=float(acc), out=int(out), tf=int(tf), df=int(df), tps=float(tps))
    if key not in runs or r["tps"] > runs[key]["tps"]:
        runs[key] = r
target = max(baselines)       # the target alone, its fastest run
c = target / alone["draft"]   # draft cost per token over the target's
rows, alpha = [], {}
for (name, k), r in runs.items():
    if k == 1:
        alpha[name] = r["acc"]  # one proposal per step: α itself
    a = alpha[name]
    E = k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
    v = verify[k] / verify[0]
    speedup = r["tps"] / target
    lev = E / (1 + k * c)
    ver = E / (v + k * c)
    rows.append(dict(name=name, k=k, acc=r["acc"], a=a, tokens=r["out"] / r["tf"], E=E, v=v,
                     s=speedup, lev=lev, ver=ver))
with open(tsv, "a") as f:
    for r in rows:
        f.write("\t".join(str(x) for x in (
            r["name"], r["k"], round(r["acc"], 3), round(r["a"], 3), round(r["tokens"], 2),
            round(r["E"], 2), round(r["v"], 2), round(r["s"], 2), round(r["lev"], 2),
            round(r["s"] / r["lev"], 2), round(r["ver"], 2), round(r["s"] / r["ver"], 2))) + "\n")
trained = [r for r in rows if r["name"] == "trained"]
with open(plot, "w") as f:
    f.write("k\tmeasured_speedup\tleviathan\twith_verify_cost\tmeasured_tokens_per_step\t"
            "predicted_tokens_per_step\n")
    for r in trained:
        f.write(f"{r['k']}\t{r['s']:.3f}\t{r['lev']:.3f}\t{r['ver']:.3f}\t{r['tokens']:.3f}\t"
                f"{r['E']:.3f}\n")
def best(name):
    b = max((r for r in rows if r["name"] == name), key=lambda r: r["s"])
    return [b["k"], round(b["s"], 2)]
j = lambda key, nd: ",_".join(f"{r[key]:.{nd}f}_(k_=_{r['k']})" for r in trained)
out = [round(c, 3), round(target), round(alone["draft"]), round(min(baselines)), round(target)]
out += best("trained") + best("trained-T1") + best("random") + best("mismatched")
out += [round(alpha[n], 3) for n in ("trained", "trained-T1", "random", "mismatched")]
out.append(",_".join(f"{r['tokens']:.2f}_against_{r['E']:.2f}_(k_=_{r['k']})" for r in trained))
out.append(",_".join(f"{r['s'] / r['lev']:.2f}_(k_=_{r['k']})" for r in trained))
out.append(",_".join(f"{r['s'] / r['ver']:.2f}_(k_=_{r['k']})" for r in trained))
out.append(",_".join(f"{verify[k] / verify[0]:.2f}_(k_=_{k})" for k in sorted(verify) if k))
# Matched: some pair nearly doubles (1.6x or more) and another loses.
bests = [best(n)[1] for n in ("trained", "trained-T1", "random", "mismatched")]
out.append("matched" if max(bests) >= 1.6 and min(bests) < 1 else "not_matched")
print(*out)
PY
)"
unspace() { echo "${1//_/ }"; }
tokens_match=$(unspace "$tokens_match") lev_ratios=$(unspace "$lev_ratios")
ver_ratios=$(unspace "$ver_ratios") verify_list=$(unspace "$verify_list")
verdict=$(unspace "$verdict")
exp_plot --x k --y measured_speedup,leviathan,with_verify_cost,measured_tokens_per_step,predicted_tokens_per_step \
  --log-x --log-y --title "Speculative decoding, trained pair: measured vs formulas" \
  --x-label "draft tokens per step (k)" --y-label "speedup; tokens per target step"
if awk -v a="$a_m" 'BEGIN {exit !(a < 0.2)}'; then
  mismatched="its random draft almost never proposes what the trained target
would say (alpha $a_m), so every proposal is wasted work and speculation
made decoding slower: **${sm}x** at best (k = $km)"
else
  mismatched="here the target, trained for only $target_steps steps, still
behaves much like a random model, so even a random draft agrees with it
(alpha $a_m; see the random pair below): ${sm}x at best (k = $km)"
fi
if awk -v t="$a_t1" -v g="$a_tr" 'BEGIN {exit !(t < g)}'; then
  t1="at temperature 1, where a draft must match the target's whole
distribution rather than its top choice, alpha fell to $a_t1"
else
  t1="at temperature 1 alpha was $a_t1, not lower"
fi

shape() {  # CONFIG -> "L layers of width C"
  local l
  l=$(sed -n 's/^n_layer *= *\([0-9]*\).*/\1/p' "$1")
  echo "$l layer$([ "$l" = 1 ] || echo s) of width $(sed -n 's/^n_embd *= *\([0-9]*\).*/\1/p' "$1")"
}
target_shape=$(shape "$EXP_WORK/target.conf") draft_shape=$(shape "$EXP_WORK/draft.conf")

exp_finish "
**Claim.** Speculative decoding can nearly double decoding speed for some
models and not for others. A draft model proposes k tokens; the target
runs all k + 1 positions in one forward and keeps the proposals up to the
first it disagrees with, plus a token of its own, so the output is exactly
the target's. If each proposal is accepted with probability α
independently, a target step yields **E = (1 − α^(k+1)) / (1 − α)** tokens
on average, and with c the draft's cost per token over the target's, the
speedup is **E / (1 + k·c)** (Leviathan, Kalman and Matias, 2023), which
takes a forward over k + 1 positions to cost what one costs (true of a
memory-bound target). It pays when α is high (the draft predicts what the
target would say) and c small (the draft is cheap); otherwise the draft's
work is wasted.

Target \`$(basename "$target_base")\` ($target_shape) and a smaller draft
($draft_shape, the same tokenizer), trained
here on the same corpus for $target_steps and $draft_steps steps (final
training loss $target_loss and $draft_loss), on ${EXP_DEVICE}. Each row is
the fastest of $reps \`ladder bench serve --speculate k\` runs: $requests
requests one at a time, prompts of about $prompt random tokens, about
$output output tokens, greedy unless named (T1: temperature 1, where a
proposal is kept with probability min(1, p/q), the speculative-sampling
rule), on one CPU thread where the device is the CPU
(\`OMP_NUM_THREADS=1\`: for models this small one thread decodes faster
than two, and the ratio of two runs on a shared machine is steadier).
Pairs: **trained** (both trained), **trained-T1** (the same at
temperature 1), **random** (both random weights, different seeds),
**mismatched** (the trained target, a random draft).

acceptance is accepted / proposed as ladder reports it; alpha is the
pair's acceptance at k = 1, where each step proposes one token and the two
are the same thing, used to predict every k of the pair
(predicted_tokens_per_step, E); tokens_per_step is output tokens / target
forwards. speedup is tokens/s with the draft over the target alone: the
fastest target-alone run of all (every \`bench serve --speculate\` also runs
the load without the draft; they ranged from $b_lo to $b_hi tokens/s).
**c = $c**: the target's fastest tokens/s alone ($tps_target) over the
draft's ($tps_draft), each with random weights on the same load.
leviathan_speedup is E / (1 + k·c). verify_cost is what a target forward
over k + 1 positions costs against one (time to first token of a (k +
1)-token prompt over a 1-token one, the target alone), and
with_verify_speedup is E / (verify_cost + k·c): the same formula without
the assumption that verification is free.
" "
**Nearly double for some, not others: $verdict.** The trained pair's best
speedup was **${sb}x** (k = $kb) at alpha $a_tr; $t1, and its best was
${st}x (k = $kt). The mismatched pair: $mismatched.

**Tokens per target step: Leviathan's formula, from alpha at k = 1.**
Trained pair, measured against predicted: $tokens_match. The formula
assumes each proposal is accepted independently with the same α.
Requests that end inside a proposal window (k shrinks to the tokens left)
pull the measurement below it at large k; acceptance that comes in runs
(easy stretches the draft gets right token after token, then hard ones)
would push it either way.

**Speedup against E / (1 + k·c), and with the verification's cost.**
Measured over E / (1 + k·c), trained pair: $lev_ratios. A forward
over k + 1 positions is not free here: verify_cost, timed as a prefill of
k + 1 tokens, was $verify_list. The target is small (its weights fit in
the CPU's caches), so a forward is not bound by reading them and each
extra position adds work of its own (lesson 15: prefill's time per token
falls with N only while the weight reads dominate). Put into the formula,
measured over
E / (verify_cost + k·c): $ver_ratios. What remains is a step's fixed costs
(sampling each proposal, the draft's rounds of one token each, the
engine's bookkeeping) and the noise of a shared machine: speedups are ratios of
runs and move by 10-20% between invocations, even taking the fastest of
$reps run(s). For a large target on a GPU, memory-bound, verification is nearly
free and c small, where Leviathan's formula is meant.

**Random weights accept more than one would guess.** The random pair
agreed at alpha $a_r and reached ${sr}x (k = $kr). With ladder's tied
embeddings a random GPT's logits are dominated by the current token's
embedding dotted with every row of the same matrix, so its greedy choice
is mostly the token it was just given, and any two random models agree on
that. Greedy, from \"And the LORD\", the target's random initialization
(one training step at a learning rate of 1e-9) wrote \"$text_random\".
Undertrained models fall into loops of their own: the trained target wrote
\"$text_target\" and the trained draft \"$text_draft\"; where the two
repeat the same phrase, the draft follows easily, which is part of the
trained pair's greedy alpha of $a_tr. Acceptance is only worth having when
the target's output is worth having; a draft for a real model is judged
on the target's real distribution.
"
