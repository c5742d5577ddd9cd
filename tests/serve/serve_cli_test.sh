#!/usr/bin/env bash
# `ladder serve` as a process: the startup line (prefix cache on by
# default), /health, a completion, a streamed completion, bad flags, and SIGTERM while a long stream is in
# flight: that stream still ends with [DONE] and the process exits 0.
#   serve_cli_test.sh LADDER_BINARY
set -u
ladder=$1
tmp=$(mktemp -d)
server=
cleanup() {
  if [ -n "$server" ]; then kill -KILL "$server" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# A model with a long context (so a stream takes a while), trained 2 steps.
for i in $(seq 1 200); do echo "In the beginning God created the heaven and the earth. $i"; done \
  >"$tmp/corpus.txt"
cat >"$tmp/model.conf" <<'CONF'
n_layer = 4
n_head = 4
n_embd = 128
context = 1024
vocab_size = 256
batch_size = 1
steps = 2
lr = 1e-3
warmup_steps = 1
val_fraction = 0.5
eval_every = 0
log_every = 1
CONF
if ! "$ladder" train --config "$tmp/model.conf" --data "$tmp/corpus.txt" --out "$tmp/run" \
     --steps 2 >"$tmp/train.log" 2>&1; then
  echo "FAIL: train: $(cat "$tmp/train.log")"
  exit 1
fi

# Bad flags: one line on stderr, exit 2.
"$ladder" serve --model "$tmp/run" --kv fp16 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "fp16" "$tmp/err" ||
  fail "bad --kv: $(cat "$tmp/err")"
"$ladder" serve --model "$tmp/run" --no-prefix-cache=maybe >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "flag --no-prefix-cache expects true or false, got 'maybe'" "$tmp/err" ||
  fail "bad --no-prefix-cache: $(cat "$tmp/err")"
"$ladder" serve >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "missing --model" "$tmp/err" || fail "missing --model: $(cat "$tmp/err")"
"$ladder" serve --model "$tmp/run" --request-timeout-s 0 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q -- "--request-timeout-s must be in \[1, 3600\], got 0" "$tmp/err" ||
  fail "bad --request-timeout-s: $(cat "$tmp/err")"

"$ladder" serve --model "$tmp/run" --port 0 --model-name tiny --max-running 8 \
  >"$tmp/out" 2>"$tmp/err" &
server=$!
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's/.*listening on http:\/\/127\.0\.0\.1:\([0-9]*\).*/\1/p' "$tmp/err")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "FAIL: no startup line: $(cat "$tmp/err")"
  exit 1
fi
grep -q "model tiny (.* parameters, weights fp32 .* MiB), KV fp32 .* tokens (.* MiB), prefix cache on" \
  "$tmp/err" ||
  fail "startup line: $(cat "$tmp/err")"
url="http://127.0.0.1:$port"

curl -sf "$url/health" | grep -q '"ok"' || fail "/health"
curl -sf "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "In the", "max_tokens": 5, "temperature": 0}' >"$tmp/completion" ||
  fail "completion request"
grep -q '"object":"text_completion"' "$tmp/completion" && grep -q '"completion_tokens":5' \
  "$tmp/completion" || fail "completion: $(cat "$tmp/completion")"
curl -sfN "$url/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "stream": true}' \
  >"$tmp/stream" || fail "streaming request"
[ "$(tail -c 14 "$tmp/stream")" = "data: [DONE]" ] || grep -q '^data: \[DONE\]$' "$tmp/stream" ||
  fail "stream without [DONE]: $(cat "$tmp/stream")"
grep -q '"chat.completion.chunk"' "$tmp/stream" || fail "stream chunks: $(cat "$tmp/stream")"
curl -s "$url/metrics" | grep -q '^ladder_requests_finished_total{reason="length"} 2$' ||
  fail "metrics: $(curl -s "$url/metrics")"

# SIGTERM during a long stream: it completes, then the process exits 0.
curl -sN "$url/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "In the", "max_tokens": 1000, "temperature": 0, "stream": true}' \
  >"$tmp/long" &
client=$!
for _ in $(seq 1 300); do
  grep -q '^data: {' "$tmp/long" 2>/dev/null && break
  sleep 0.05
done
kill -TERM "$server"
wait "$client" || fail "long stream: curl failed"
wait "$server"
code=$?
server=
[ "$code" -eq 0 ] || fail "serve exited $code after SIGTERM: $(cat "$tmp/err")"
grep -q '^data: \[DONE\]$' "$tmp/long" || fail "long stream was cut: $(tail -c 300 "$tmp/long")"
grep -q '"finish_reason":"length"' "$tmp/long" || fail "long stream did not finish"
grep -q "drained and stopped" "$tmp/err" || fail "no drain line: $(cat "$tmp/err")"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "serve_cli_test: ok"
