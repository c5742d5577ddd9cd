#!/usr/bin/env bash
# `ladder import hf|llmc` and `export hf|gguf` end to end against an
# independent reference: a tiny
# GPT-2 written in Hugging Face's layout by hf_gpt2_reference.py (pure Python,
# no ladder code), imported, and scored by `ladder eval` on cpu and cuda-sim:
# the loss must equal the reference's float64 forward within 1e-5 relative.
# The imported model generates; bad directories are refused with one line,
# exit code 2 and no output directory.
# Fine-tuning starts from the imported weights: `train --init-from` at a
# vanishing learning rate, alone and with --tp 2 under mpirun, leaves a model
# that scores the imported model's loss.
#   hf_import_test.sh LADDER_BINARY SOURCE_ROOT MPIRUN [MPIRUN_ARGS...]
set -u
ladder=$1
root=$2
mpirun=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

reference=$(python3 "$root/tests/formats/hf_gpt2_reference.py" "$tmp/hf") || {
  echo "FAIL: the reference script failed"
  exit 1
}
echo "reference loss (float64, Python): $reference"
"$ladder" import hf "$tmp/hf" "$tmp/model" || fail "import hf failed"
for f in model.bin vocab.json merges.txt; do
  [ -s "$tmp/model/$f" ] || fail "the imported directory has no $f"
done
for device in cpu cuda-sim; do
  loss=$("$ladder" eval --model "$tmp/model" --text "$tmp/hf/text.txt" --device "$device" \
    2>/dev/null | python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])') ||
    fail "eval --device $device failed"
  echo "ladder eval --device $device: $loss"
  python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(b))' \
    "$loss" "$reference" || fail "$device loss $loss differs from the reference $reference"
  [ "$device" = cpu ] && cpu_loss=$loss
done
loss=$cpu_loss  # what the CPU runs below must reproduce exactly
"$ladder" generate --model "$tmp/model" --prompt "Hello" --max-tokens 4 --temperature 0 \
  --device cpu >"$tmp/gen" 2>&1 || fail "generate with the imported model failed: $(cat "$tmp/gen")"

# llm.c's files of the same model: the same loss, the merges recovered from
# the vocabulary's order (so "Hello" is H e llo, as GPT-2 cuts it).
"$ladder" import llmc "$tmp/hf/llmc_model.bin" "$tmp/hf/llmc_tokenizer.bin" "$tmp/llmc" \
  >/dev/null || fail "import llmc failed"
got=$("$ladder" eval --model "$tmp/llmc" --text "$tmp/hf/text.txt" --device cpu 2>/dev/null |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])')
[ "$got" = "$loss" ] || fail "llm.c import: loss $got, expected $loss (the Hugging Face import's)"
ids=$(printf 'Hello' | "$ladder" tokenizer encode --tokenizer "$tmp/llmc")
[ "$ids" = "39 68 257" ] || fail "llm.c tokenizer: 'Hello' is '$ids', expected '39 68 257'"

# Export, and the same tensors come back: every weight of the original file
# under its own name, shape and bytes (the mask buffers and the tied head
# are not weights and are not written), the same vocabulary and merges;
# imported again, the same loss.
"$ladder" export hf "$tmp/model" "$tmp/back" >/dev/null || fail "export hf failed"
python3 - "$tmp/hf" "$tmp/back" <<'PY' || fail "the exported directory differs from the original"
import json, struct, sys
def tensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], data[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}
a, b = tensors(sys.argv[1] + "/model.safetensors"), tensors(sys.argv[2] + "/model.safetensors")
weights = {k: v for k, v in a.items()
           if k != "lm_head.weight" and not k.endswith((".attn.bias", ".attn.masked_bias"))}
bad = [k for k in set(weights) | set(b) if weights.get(k) != b.get(k)]
vocab = [json.load(open(d + "/vocab.json", encoding="utf-8")) for d in sys.argv[1:]]
merges = [[l for l in open(d + "/merges.txt", encoding="utf-8").read().split("\n")
           if l and not l.startswith("#")] for d in sys.argv[1:]]
config = json.load(open(sys.argv[2] + "/config.json"))
keys = ["n_layer", "n_head", "n_embd", "n_positions", "vocab_size"]
orig = json.load(open(sys.argv[1] + "/config.json"))
problems = bad[:3] + (["vocab"] if vocab[0] != vocab[1] else []) + \
    (["merges"] if merges[0] != merges[1] else []) + \
    [k for k in keys if config.get(k) != orig[k]]
print("export: %d tensors compared" % len(weights), "; differences:", problems or "none")
sys.exit(1 if problems or not weights else 0)
PY
"$ladder" import hf "$tmp/back" "$tmp/again" >/dev/null || fail "import of the export failed"
again=$("$ladder" eval --model "$tmp/again" --text "$tmp/hf/text.txt" --device cpu 2>/dev/null |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])')
[ "$again" = "$loss" ] || fail "re-imported loss $again differs from $loss"

# An export that fails partway (here its last file, config.json, cannot be
# staged) replaces none of an older export's files and leaves nothing staged.
mkdir "$tmp/torn" "$tmp/torn/config.json.tmp"
echo old >"$tmp/torn/vocab.json"
"$ladder" export hf "$tmp/model" "$tmp/torn" >/dev/null 2>"$tmp/err" &&
  fail "export hf over an unwritable config.json succeeded"
grep -q "cannot create '$tmp/torn/config.json'" "$tmp/err" || fail "export hf: $(cat "$tmp/err")"
[ "$(cat "$tmp/torn/vocab.json")" = old ] || fail "a failed export hf replaced vocab.json"
[ "$(ls "$tmp/torn")" = "$(printf 'config.json.tmp\nvocab.json')" ] ||
  fail "a failed export hf left: $(ls "$tmp/torn")"

# GGUF for llama.cpp, read back by an independent reader (Python, from the
# format's definition): the header, every key's type, the GPT-2 tokenizer
# with <|endoftext|> as a control token and bos/eos, every tensor's name,
# shape and type. q8_0 needs rows in whole 32-value blocks; n_embd 16 has
# none, and the refusal names the tensor.
"$ladder" export gguf "$tmp/model" "$tmp/model.gguf" --type f16 >/dev/null ||
  fail "export gguf failed"
python3 - "$tmp/model.gguf" <<'PY' || fail "the GGUF file is not what llama.cpp's GPT-2 reads"
import struct, sys
data = open(sys.argv[1], "rb").read()
pos = 0
def take(fmt):
    global pos
    v = struct.unpack_from("<" + fmt, data, pos); pos += struct.calcsize("<" + fmt)
    return v[0]
def string():
    global pos
    n = take("Q"); s = data[pos:pos + n].decode(); pos += n
    return s
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def value(t):
    if t == 8: return ("string", string())
    if t == 9:
        et, n = take("I"), take("Q")
        return ("array", [value(et)[1] for _ in range(n)], et)
    return (SCALAR[t], take(SCALAR[t]))
assert data[:4] == b"GGUF"; pos = 4
assert take("I") == 3
n_tensors, n_kv = take("Q"), take("Q")
kv = {}
for _ in range(n_kv):
    k = string(); kv[k] = value(take("I"))
want = {"general.architecture": ("string", "gpt2"), "general.file_type": ("I", 1),
        "gpt2.context_length": ("I", 12), "gpt2.embedding_length": ("I", 16),
        "gpt2.feed_forward_length": ("I", 64), "gpt2.block_count": ("I", 2),
        "gpt2.attention.head_count": ("I", 2), "tokenizer.ggml.model": ("string", "gpt2"),
        "tokenizer.ggml.pre": ("string", "gpt-2"), "tokenizer.ggml.bos_token_id": ("I", 259),
        "tokenizer.ggml.eos_token_id": ("I", 259)}
bad = [k for k, v in want.items() if kv.get(k) != v]
tokens, types = kv["tokenizer.ggml.tokens"][1], kv["tokenizer.ggml.token_type"][1]
if len(tokens) != 260 or tokens[259] != "<|endoftext|>" or types[259] != 3 or types[0] != 1:
    bad.append("tokens")
if kv["tokenizer.ggml.merges"][1:] != (["l l", "ll o", "d d"], 8) or abs(kv["gpt2.attention.layer_norm_epsilon"][1] - 1e-5) > 1e-12:
    bad.append("merges/epsilon")
tensors = {}
for _ in range(n_tensors):
    name = string(); dims = take("I"); ne = [take("Q") for _ in range(dims)]
    tensors[name] = (ne, take("I")); take("Q")
expect = {"token_embd.weight": ([16, 260], 1), "position_embd.weight": ([16, 12], 0),
          "blk.1.attn_qkv.weight": ([16, 48], 1), "blk.1.attn_qkv.bias": ([48], 0),
          "blk.0.ffn_down.weight": ([64, 16], 1), "output_norm.weight": ([16], 0)}
bad += [n for n, v in expect.items() if tensors.get(n) != v]
if len(tensors) != 28 or "output.weight" in tensors: bad.append("tensor count")
print("gguf: %d keys, %d tensors; problems: %s" % (n_kv, n_tensors, bad or "none"))
sys.exit(1 if bad else 0)
PY
"$ladder" export gguf "$tmp/model" "$tmp/q8.gguf" --type q8_0 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "token_embd.weight" "$tmp/err" && [ ! -e "$tmp/q8.gguf" ] ||
  fail "q8_0 of 16-wide rows was not refused by name: $(cat "$tmp/err")"

# Fine-tuning from the import: lr 1e-30 changes no weight, so the trained
# model scores exactly the imported one's loss, whatever the layout.
cat >"$tmp/ft.conf" <<'CONF'
n_layer = 2
n_head = 2
n_embd = 16
context = 12
vocab_size = 260
batch_size = 2
steps = 1
lr = 1e-30
min_lr = 1e-30
warmup_steps = 0
eval_every = 0
eval_batches = 1
CONF
python3 -c 'print("Hello, ladd! " * 200)' >"$tmp/ft.txt"
"$ladder" train --config "$tmp/ft.conf" --init-from "$tmp/model" --data "$tmp/ft.txt" \
  --out "$tmp/ft1" --device cpu >/dev/null 2>"$tmp/ft1.err" || fail "train --init-from: $(cat "$tmp/ft1.err")"
grep -q "initialized from" "$tmp/ft1.err" || fail "train --init-from did not say it initialized"
"$mpirun" "$@" -np 2 "$ladder" train --config "$tmp/ft.conf" --init-from "$tmp/model" \
  --data "$tmp/ft.txt" --out "$tmp/ft2" --device cpu --tp 2 >/dev/null 2>&1 ||
  fail "train --init-from --tp 2 failed"
for run in ft1 ft2; do
  got=$("$ladder" eval --model "$tmp/$run" --text "$tmp/hf/text.txt" --device cpu 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["loss"])')
  [ "$got" = "$loss" ] || fail "$run: fine-tuned loss $got, expected the imported $loss"
done
sed 's/^n_embd = 16/n_embd = 32/' "$tmp/ft.conf" >"$tmp/wide.conf"
"$ladder" train --config "$tmp/wide.conf" --init-from "$tmp/model" --data "$tmp/ft.txt" \
  --out "$tmp/wide" --device cpu >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "its n_embd is 16 but the config's is 32" "$tmp/err" ||
  fail "a config of another shape was not refused by name: $(cat "$tmp/err")"

# Generation ends at <|endoftext|>: a model that always predicts it adds
# nothing to the prompt in `generate`, and `serve` finishes with "stop".
python3 "$root/tests/formats/hf_gpt2_reference.py" "$tmp/eot-hf" --ends-at-once >/dev/null
"$ladder" import hf "$tmp/eot-hf" "$tmp/eot" >/dev/null || fail "import of the end-of-text model"
out=$("$ladder" generate --model "$tmp/eot" --prompt "Hello" --max-tokens 5 --temperature 0 \
  --device cpu 2>/dev/null)
[ "$out" = "Hello" ] || fail "generate went past <|endoftext|>: '$out'"
"$ladder" serve --model "$tmp/eot" --port 0 --device cpu >"$tmp/serve.out" 2>&1 &
serve_pid=$!
port=""
for _ in $(seq 100); do
  port=$(grep -o 'http://[^ ]*:[0-9]*' "$tmp/serve.out" | head -1 | sed 's/.*://')
  [ -n "$port" ] && break
  sleep 0.1
done
reply=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 5, "temperature": 0}')
kill "$serve_pid" 2>/dev/null
wait "$serve_pid" 2>/dev/null
python3 -c 'import json, sys; c = json.loads(sys.argv[1])["choices"][0]
sys.exit(0 if c["finish_reason"] == "stop" and c["text"] == "" else 1)' "$reply" ||
  fail "serve did not stop at <|endoftext|>: $reply"

# Refusals: one line, exit 2, nothing written.
expect_refused() {  # NAME WORDS: import $tmp/NAME must fail naming WORDS
  "$ladder" import hf "$tmp/$1" "$tmp/out-$1" >/dev/null 2>"$tmp/err"
  local code=$?
  [ "$code" -eq 2 ] || fail "$1: exit code $code, expected 2"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$1: not one line: $(cat "$tmp/err")"
  grep -q -- "$2" "$tmp/err" || fail "$1: the error does not say '$2': $(cat "$tmp/err")"
  [ ! -e "$tmp/out-$1" ] || fail "$1: an output directory was left"
}
cp -r "$tmp/hf" "$tmp/no-weights" && rm "$tmp/no-weights/model.safetensors"
expect_refused no-weights "model.safetensors"
cp -r "$tmp/hf" "$tmp/relu"
sed -i 's/"gelu_new"/"relu"/' "$tmp/relu/config.json"
expect_refused relu "activation_function"
cp -r "$tmp/hf" "$tmp/no-merges" && rm "$tmp/no-merges/merges.txt"
expect_refused no-merges "merges.txt"
head -c 1000 "$tmp/hf/model.safetensors" >"$tmp/short.safetensors"
cp -r "$tmp/hf" "$tmp/truncated" && mv "$tmp/short.safetensors" "$tmp/truncated/model.safetensors"
expect_refused truncated "safetensors"

head -c 2000 "$tmp/hf/llmc_model.bin" >"$tmp/short.bin"
"$ladder" import llmc "$tmp/short.bin" "$tmp/hf/llmc_tokenizer.bin" "$tmp/out-short" \
  >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "bytes, but a model of this shape" \
  "$tmp/err" && [ ! -e "$tmp/out-short" ] ||
  fail "a truncated llm.c model was not refused in one line: $(cat "$tmp/err")"

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "hf import: OK"
