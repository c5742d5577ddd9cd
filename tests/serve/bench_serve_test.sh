#!/usr/bin/env bash
# `ladder bench serve` on a tiny random model: closed loop with the batch-1
# comparison, open loop (Poisson arrivals), and speculation with the model as
# its own draft (every proposal accepted), and a shared prompt prefix with
# and without the prefix cache (every request finds the whole prefix
# cached; --no-prefix-cache runs no comparison). The last line is JSON whose
# figures are present and sane: counts and rates positive, p99 >= p50. Bad
# flags give one error line and exit code 2.
#   bench_serve_test.sh LADDER_BINARY
set -u
ladder=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat >"$tmp/tiny.conf" <<'CONF'
n_layer = 2
n_head = 2
n_embd = 64
context = 128
vocab_size = 256
seed = 3
CONF

# The value of JSON field $2 in line $1 (numbers only), empty if absent.
field() { grep -oE "\"$2\":-?[0-9.]+" <<<"$1" | cut -d: -f2; }
positive() { awk -v x="$1" 'BEGIN { exit !(x > 0) }'; }
at_least() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }

check() {  # NAME EXTRA_FIELDS... -- BENCH_ARGS...
  local name=$1
  shift
  local extra=()
  while [ "$1" != "--" ]; do extra+=("$1"); shift; done
  shift
  local out
  out=$("$ladder" bench serve --config "$tmp/tiny.conf" --requests 6 --prompt-tokens 12 \
    --output-tokens 10 "$@" 2>&1) || { echo "$out"; fail "$name: exit code $?"; }
  echo "$out"
  local json
  json=$(tail -1 <<<"$out")
  [[ $json == \{*\} ]] || fail "$name: the last line is not JSON"
  for k in requests output_tokens seconds output_tokens_per_s requests_per_s ttft_p50_ms \
    tpot_p50_ms "${extra[@]}"; do
    local v
    v=$(field "$json" "$k")
    [ -n "$v" ] || fail "$name: no \"$k\""
    positive "$v" || fail "$name: \"$k\" is $v, not positive"
  done
  for k in ttft tpot itl; do
    local p50 p99
    p50=$(field "$json" "${k}_p50_ms")
    p99=$(field "$json" "${k}_p99_ms")
    [ -n "$p50" ] && [ -n "$p99" ] || fail "$name: no ${k}_p50_ms / ${k}_p99_ms"
    at_least "$p50" 0 || fail "$name: ${k}_p50_ms is negative"
    at_least "$p99" "$p50" || fail "$name: ${k}_p99_ms $p99 < p50 $p50"
  done
  [ "$(field "$json" requests)" = 6 ] || fail "$name: requests is not 6"
  last_json=$json
}

check closed batch1_output_tokens_per_s batch1_ratio -- --concurrency 3 --compare-batch1
check open -- --rate 200 --temperature 1
check speculative acceptance baseline_output_tokens_per_s speedup speculate -- \
  --concurrency 3 --draft-config "$tmp/tiny.conf" --speculate 3
[ "$(field "$last_json" acceptance)" = 1.0000 ] || fail "a self-draft's acceptance is not 1"

check shared-prefix shared_prefix prompt_tokens prompt_tokens_cached no_cache_ttft_p50_ms \
  prefix_cache_ttft_ratio -- --concurrency 3 --shared-prefix 48
# The warm-up leaves the 3 prefix blocks cached; each prompt's own tokens
# follow them, so all 6 requests skip all 48.
[ "$(field "$last_json" prompt_tokens_cached)" = 288 ] ||
  fail "prompt_tokens_cached is not 6 x 48"
at_least "$(field "$last_json" prompt_tokens)" $((6 * 49)) || fail "prompt_tokens below 6 x 49"
check no-prefix-cache -- --concurrency 3 --shared-prefix 48 --no-prefix-cache
[ -z "$(field "$last_json" prompt_tokens_cached)" ] ||
  fail "--no-prefix-cache still compared against the cache"

refused() {  # EXPECTED_TEXT ARGS...
  local want=$1
  shift
  local err code
  # --device cpu: the default, auto, names its choice on stderr first.
  err=$("$ladder" bench serve "$@" --device cpu 2>&1 >/dev/null)
  code=$?
  [ "$code" -eq 2 ] || fail "exit code $code, expected 2, for: $*"
  [ "$(wc -l <<<"$err")" -eq 1 ] || fail "not one line for: $*: $err"
  grep -qF -- "$want" <<<"$err" || fail "no '$want' in: $err"
}
refused "exactly one of --rate" --config "$tmp/tiny.conf" --rate 2 --concurrency 2
refused "exactly one of --rate" --config "$tmp/tiny.conf"
refused "exactly one of --model PATH or --config FILE" --concurrency 2
refused "go together" --config "$tmp/tiny.conf" --concurrency 2 --speculate 2
refused "must fit the model's context of 128" --config "$tmp/tiny.conf" --concurrency 2 \
  --prompt-tokens 80 --output-tokens 20
refused "--shared-prefix must be >= 0" --config "$tmp/tiny.conf" --concurrency 2 --shared-prefix -1
refused "(--shared-prefix plus 3/2 of --prompt-tokens plus 3/2 of --output-tokens, 141 tokens)" \
  --config "$tmp/tiny.conf" --concurrency 2 --shared-prefix 96 --prompt-tokens 20 --output-tokens 10
refused "--bogus" --config "$tmp/tiny.conf" --concurrency 2 --bogus
refused "fp16" --config "$tmp/tiny.conf" --concurrency 2 --weights fp16
echo "bench serve: JSON figures present and sane; bad flags refused with exit code 2"
