#!/usr/bin/env bash
# `ladder serve --role prefill` and `--role decode` as two processes: the
# pair answers exactly what one server answers (completions and chat,
# streamed and not, greedy and seeded); bad role flags are one-line errors
# (exit 2), and so is a KV format mismatch at startup; a prefill server
# killed while a request is in flight fails that request with 503 naming it
# and the decode server serves again once it is restarted; random bytes to
# the transfer port close that connection only; a "prefill server" that
# answers garbage gives 503, and nothing crashes.
#   disaggregation_cli_test.sh LADDER_BINARY
set -u
ladder=$1
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for i in $(seq 1 200); do echo "In the beginning God created the heaven and the earth. $i"; done \
  >"$tmp/corpus.txt"
cat >"$tmp/model.conf" <<'CONF'
n_layer = 2
n_head = 2
n_embd = 64
context = 512
vocab_size = 256
batch_size = 1
steps = 3
lr = 3e-2
warmup_steps = 1
val_fraction = 0.5
eval_every = 0
log_every = 1
CONF
if ! "$ladder" train --config "$tmp/model.conf" --data "$tmp/corpus.txt" --out "$tmp/run" \
     >"$tmp/train.log" 2>&1; then
  echo "FAIL: train: $(cat "$tmp/train.log")"
  exit 1
fi

# Bad flags: one line on stderr, exit 2.
bad() {
  local want=$1
  shift
  "$ladder" serve --model "$tmp/run" "$@" >/dev/null 2>"$tmp/err"
  local code=$?
  [ $code -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err" ||
    fail "serve $*: exit $code, $(cat "$tmp/err")"
}
bad "--role must be both, prefill or decode, got 'middle'" --role middle
bad "--role decode needs --prefill-addr HOST:PORT" --role decode
bad "--prefill-addr is only for --role decode" --prefill-addr 127.0.0.1:1
bad "--transfer-port is only for --role prefill" --transfer-port 9000
bad "--transfer-port must be in [0, 65535], got 70000" --role prefill --transfer-port 70000
bad "must be HOST:PORT" --role decode --prefill-addr nowhere
bad "--draft is only for the decode and both roles" --role prefill --draft "$tmp/run"

# Starts `ladder serve "$@"` in the background; waits for the startup line
# matching `pattern` and sets $found to its captured port.
start() {
  local log=$1 pattern=$2
  shift 2
  "$ladder" serve --model "$tmp/run" --model-name tiny "$@" >/dev/null 2>"$log" &
  pids+=($!)
  last=$!
  found=
  for _ in $(seq 1 300); do
    found=$(sed -n "s/.*$pattern.*/\1/p" "$log" 2>/dev/null)
    [ -n "$found" ] && return 0
    sleep 0.05
  done
  echo "FAIL: no startup line: $(cat "$log")"
  exit 1
}
http='listening on http:\/\/127\.0\.0\.1:\([0-9]*\)'
transfer='transfer port on 127\.0\.0\.1:\([0-9]*\)'

start "$tmp/prefill.err" "$transfer" --role prefill --max-batch-tokens 64
tport=$found
prefill=$last
start "$tmp/decode.err" "$http" --port 0 --role decode --prefill-addr "127.0.0.1:$tport"
decode=$found
start "$tmp/single.err" "$http" --port 0
single=$found
grep -q "decode role, prompts prefilled by 127.0.0.1:$tport" "$tmp/decode.err" ||
  fail "decode startup line: $(cat "$tmp/decode.err")"

# The answer's text and finish reasons (a stream's pieces joined: how
# tokens group into events depends on timing).
ask() {
  local port=$1 route=$2 body=$3
  curl -sN "http://127.0.0.1:$port/v1/$route" -H 'Content-Type: application/json' -d "$body" |
    grep -o '"\(text\|content\|finish_reason\)":\("\([^"\\]\|\\.\)*"\|null\)' |
    grep -v '"finish_reason":null' | sed -E 's/^"(text|content)":"(.*)"$/\2/' | tr -d '\n'
}
long=$(printf 'In the beginning God created the heaven and the earth. %.0s' $(seq 1 7))
n=0
for body in \
  '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0}' \
  '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 1, "seed": 7}' \
  "{\"prompt\": \"$long\", \"max_tokens\": 40, \"temperature\": 0, \"stream\": true}" \
  '{"prompt": "G", "max_tokens": 8, "temperature": 0}' \
  '{"messages": [{"role": "user", "content": "Who created the earth?"}], "max_tokens": 24, "temperature": 0}' \
  '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 24, "temperature": 0.8, "seed": 3, "stream": true}'; do
  n=$((n + 1))
  case $body in *messages*) route=chat/completions ;; *) route=completions ;; esac
  a=$(ask "$decode" $route "$body")
  b=$(ask "$single" $route "$body")
  if [ -z "$a" ] || [ "$a" != "$b" ] || ! grep -q '"finish_reason":"length"' <<<"$a"; then
    fail "request $n: the pair answered
$a
one server answered
$b"
  fi
done
# (The prefill server ran the prompts: the single-token one excepted.)

# A decode server whose --kv differs from the prefill server's: refused at startup.
"$ladder" serve --model "$tmp/run" --role decode --prefill-addr "127.0.0.1:$tport" --kv int8 \
  --port 0 >/dev/null 2>"$tmp/err"
code=$?
[ $code -eq 2 ] && grep -qF "prefill server 127.0.0.1:$tport: KV format mismatch: the decode server uses int8, the prefill server fp32 (start both with the same --kv)" "$tmp/err" ||
  fail "KV mismatch: exit $code, $(cat "$tmp/err")"

# Random bytes to the transfer port: that connection is closed with a log
# line; the prefill server goes on serving.
head -c 4096 /dev/urandom >"$tmp/junk"
(exec 3<>"/dev/tcp/127.0.0.1/$tport" && cat "$tmp/junk" >&3 && cat <&3 >/dev/null) 2>/dev/null
for _ in $(seq 1 100); do
  grep -q "transfer connection from 127.0.0.1:[0-9]* closed" "$tmp/prefill.err" && break
  sleep 0.05
done
grep -q "transfer connection from 127.0.0.1:[0-9]* closed" "$tmp/prefill.err" ||
  fail "no log line for garbage: $(cat "$tmp/prefill.err")"
kill -0 "$prefill" 2>/dev/null || fail "the prefill server died of garbage"
ask "$decode" completions '{"prompt": "In the", "max_tokens": 4}' | grep -q '"finish_reason":"length"' ||
  fail "after garbage"

# The prefill server dies while a request is in flight: frozen, the
# request sent, then killed. The request gets 503 naming it.
kill -STOP "$prefill"
curl -s -o "$tmp/dropped" -w '%{http_code}' "http://127.0.0.1:$decode/v1/completions" \
  -H 'Content-Type: application/json' \
  -d "{\"prompt\": \"$long\", \"max_tokens\": 8, \"stream\": true}" >"$tmp/dropped.code" &
client=$!
sleep 0.5
kill -KILL "$prefill"
wait "$client"
[ "$(cat "$tmp/dropped.code")" = 503 ] &&
  grep -q "\"message\":\"prefill server 127.0.0.1:$tport: " "$tmp/dropped" &&
  grep -q '"type":"server_error"' "$tmp/dropped" ||
  fail "request in flight when the prefill server died: $(cat "$tmp/dropped.code") $(cat "$tmp/dropped")"
code=$(curl -s -o "$tmp/down" -w '%{http_code}' "http://127.0.0.1:$decode/v1/chat/completions" \
  -d '{"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 4}')
[ "$code" = 503 ] && grep -qF "prefill server 127.0.0.1:$tport: cannot connect" "$tmp/down" ||
  fail "prefill server down: $code $(cat "$tmp/down")"

# Restarted on the same port, it serves the decode server again.
start "$tmp/prefill2.err" "$transfer" --role prefill --transfer-port "$tport"
a=$(ask "$decode" completions '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0}')
b=$(ask "$single" completions '{"prompt": "In the beginning", "max_tokens": 24, "temperature": 0}')
[ -n "$a" ] && [ "$a" = "$b" ] || fail "after the restart: $a"

# A "prefill server" that is not one (here an HTTP server, which answers
# the hello's first line, the magic's "LK\r\n", with 400 at once): 503
# naming what answered and asking for the transfer port, and the decode
# server keeps running. (Garbage answers of every kind: disaggregation_test.)
start "$tmp/decode2.err" "$http" --port 0 --role decode --prefill-addr "127.0.0.1:$single"
code=$(curl -s -o "$tmp/garbage" -w '%{http_code}' "http://127.0.0.1:$found/v1/completions" \
  -d '{"prompt": "In the", "max_tokens": 4}')
[ "$code" = 503 ] && grep -qF "prefill server 127.0.0.1:$single: not a ladder KV transfer frame (magic 0x50545448, \\\"HTTP\\\"), in answer to the hello: is it the --transfer-port of a \`ladder serve --role prefill\`?" \
  "$tmp/garbage" || fail "garbage answers: $code $(cat "$tmp/garbage")"
curl -sf "http://127.0.0.1:$found/health" | grep -q '"ok"' || fail "decode server after garbage"
kill -0 "$last" 2>/dev/null || fail "the decode server died of garbage"

for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()
if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "disaggregation_cli_test: ok"
