#!/usr/bin/env python3
"""A tiny GPT-2 in Hugging Face's layout, and its loss computed independently.

usage: hf_gpt2_reference.py DIR [--ends-at-once]

Writes DIR/config.json, DIR/model.safetensors (fp32, GPT2LMHeadModel's names:
"transformer." prefix, Conv1D weights [in, out], the causal-mask buffers, a
tied lm_head), DIR/vocab.json + DIR/merges.txt (GPT-2's layout: the 256 bytes
in GPT-2's order and byte-to-unicode spelling, three merges, <|endoftext|>
last), the same model as llm.c's files (DIR/llmc_model.bin, fp32, and
DIR/llmc_tokenizer.bin, version 2) and DIR/text.txt (ASCII text shorter than
the context), then prints the mean next-token loss of that text under GPT-2's
tokenizer and forward pass, computed here in float64 with nothing from
ladder: the reference `ladder import` + `ladder eval` must agree with.

--ends-at-once: a model whose every next token is <|endoftext|> (the final
LayerNorm's output is the end-of-text row of wte, made ten times longer than
the others), to check that generation stops there.
"""
import json
import math
import re
import os
import random
import struct
import sys

L, NH, C, T = 2, 2, 16, 12
TEXT = "Hello, ladd!"  # 9 tokens with the merges below


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main(out, ends_at_once=False):
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1234)
    enc = bytes_to_unicode()
    # GPT-2's ordering: the bytes in bytes_to_unicode's order, then one token
    # per merge in rank order, then <|endoftext|>.
    token_bytes = [bytes([b]) for b in enc]
    merges = [(b"l", b"l"), (b"ll", b"o"), (b"d", b"d")]
    token_bytes += [a + b for a, b in merges]
    eot = len(token_bytes)
    V = eot + 1
    spell = lambda bs: "".join(enc[b] for b in bs)
    vocab = {spell(t): i for i, t in enumerate(token_bytes)}
    vocab["<|endoftext|>"] = eot
    with open(os.path.join(out, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(spell(a) + " " + spell(b) + "\n" for a, b in merges))
    with open(os.path.join(out, "llmc_tokenizer.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240328, 2, V, eot] + [0] * 252)))
        for t in token_bytes + [b"<|endoftext|>"]:
            f.write(bytes([len(t)]) + t)
    with open(os.path.join(out, "text.txt"), "w") as f:
        f.write(TEXT)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L,
                   "n_head": NH, "n_embd": C, "n_positions": T, "n_ctx": T, "vocab_size": V,
                   "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
                   "n_inner": None}, f)

    def mat(rows, cols, std):
        return [[f32(rng.gauss(0, std)) for _ in range(cols)] for _ in range(rows)]

    def vec(n, mean, std):
        return [f32(mean + rng.gauss(0, std)) for _ in range(n)]

    w = {"wte": mat(V, C, 0.3), "wpe": mat(T, C, 0.1)}
    for l in range(L):
        h = f"h.{l}."
        w[h + "ln_1.weight"], w[h + "ln_1.bias"] = vec(C, 1, 0.1), vec(C, 0, 0.1)
        w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"] = mat(C, 3 * C, 0.3), vec(3 * C, 0, 0.1)
        w[h + "attn.c_proj.weight"], w[h + "attn.c_proj.bias"] = mat(C, C, 0.3), vec(C, 0, 0.1)
        w[h + "ln_2.weight"], w[h + "ln_2.bias"] = vec(C, 1, 0.1), vec(C, 0, 0.1)
        w[h + "mlp.c_fc.weight"], w[h + "mlp.c_fc.bias"] = mat(C, 4 * C, 0.3), vec(4 * C, 0, 0.1)
        w[h + "mlp.c_proj.weight"], w[h + "mlp.c_proj.bias"] = mat(4 * C, C, 0.3), vec(C, 0, 0.1)
    w["ln_f.weight"], w["ln_f.bias"] = vec(C, 1, 0.1), vec(C, 0, 0.1)
    if ends_at_once:
        w["wte"][eot] = [f32(10 * v) for v in w["wte"][eot]]
        w["ln_f.weight"], w["ln_f.bias"] = [0.0] * C, list(w["wte"][eot])

    # model.safetensors: GPT2LMHeadModel's names and buffers, fp32.
    tensors = {}
    for name, value in w.items():  # the embeddings are nn.Embedding: "<name>.weight"
        tensors["transformer." + name + (".weight" if name in ("wte", "wpe") else "")] = value
    for l in range(L):
        tensors[f"transformer.h.{l}.attn.bias"] = [[[[1.0 if j <= i else 0.0 for j in range(T)]
                                                     for i in range(T)]]]
    tensors["lm_head.weight"] = w["wte"]
    header, blobs, offset = {}, [], 0

    def shape_of(x):
        return [len(x)] + shape_of(x[0]) if isinstance(x, list) else []

    def flat(x):
        return [v for e in x for v in flat(e)] if isinstance(x, list) else [x]

    for name, value in tensors.items():
        data = struct.pack(f"<{len(flat(value))}f", *flat(value))
        header[name] = {"dtype": "F32", "shape": shape_of(value),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))

    # llm.c's model file: the same weights, [out, in] (Conv1D transposed),
    # each kind of layer tensor for all layers together, wte padded to 128.
    Vp = (V + 127) // 128 * 128
    flat_llmc = [v for row in w["wte"] for v in row] + [0.0] * ((Vp - V) * C)
    flat_llmc += [v for row in w["wpe"] for v in row]
    T_ = lambda m: [list(r) for r in zip(*m)]
    for kind, transpose in [("ln_1.weight", 0), ("ln_1.bias", 0), ("attn.c_attn.weight", 1),
                            ("attn.c_attn.bias", 0), ("attn.c_proj.weight", 1),
                            ("attn.c_proj.bias", 0), ("ln_2.weight", 0), ("ln_2.bias", 0),
                            ("mlp.c_fc.weight", 1), ("mlp.c_fc.bias", 0),
                            ("mlp.c_proj.weight", 1), ("mlp.c_proj.bias", 0)]:
        for l in range(L):
            t = w[f"h.{l}.{kind}"]
            flat_llmc += [v for row in T_(t) for v in row] if transpose else t
    flat_llmc += w["ln_f.weight"] + w["ln_f.bias"]
    with open(os.path.join(out, "llmc_model.bin"), "wb") as f:
        f.write(struct.pack("<256i", *([20240326, 3, T, V, L, NH, C, Vp] + [0] * 248)))
        f.write(struct.pack(f"<{len(flat_llmc)}f", *flat_llmc))

    # GPT-2's tokenizer (ASCII text: \p{L} is [A-Za-z], \p{N} [0-9]).
    ranks = {m: r for r, m in enumerate(merges)}
    ids = []
    for chunk in re.findall(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+",
                            TEXT):
        parts = [bytes([b]) for b in chunk.encode()]
        while True:
            pairs = [(ranks[(a, b)], i) for i, (a, b) in enumerate(zip(parts, parts[1:]))
                     if (a, b) in ranks]
            if not pairs:
                break
            r = min(pairs)[0]
            merged, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == merges[r]:
                    merged.append(parts[i] + parts[i + 1]); i += 2
                else:
                    merged.append(parts[i]); i += 1
            parts = merged
        ids += [token_bytes.index(p) for p in parts]
    n = len(ids)

    # GPT-2's forward, float64.
    def layernorm(x, g, b):
        m = sum(x) / len(x)
        var = sum((v - m) ** 2 for v in x) / len(x)
        r = 1 / math.sqrt(var + 1e-5)
        return [(v - m) * r * gi + bi for v, gi, bi in zip(x, g, b)]

    def linear(x, W, b):  # Conv1D: x [in] @ W [in, out] + b
        return [sum(x[i] * W[i][o] for i in range(len(x))) + b[o] for o in range(len(b))]

    def gelu(x):
        return 0.5 * x * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    xs = [[a + p for a, p in zip(w["wte"][t], w["wpe"][i])] for i, t in enumerate(ids)]
    hs = C // NH
    for l in range(L):
        h = f"h.{l}."
        qkv = [linear(layernorm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"]),
                      w[h + "attn.c_attn.weight"], w[h + "attn.c_attn.bias"]) for x in xs]
        att = [[0.0] * C for _ in range(n)]
        for head in range(NH):
            q = [r[head * hs:(head + 1) * hs] for r in qkv]
            k = [r[C + head * hs:C + (head + 1) * hs] for r in qkv]
            v = [r[2 * C + head * hs:2 * C + (head + 1) * hs] for r in qkv]
            for i in range(n):
                s = [sum(a * b for a, b in zip(q[i], k[j])) / math.sqrt(hs) for j in range(i + 1)]
                mx = max(s)
                e = [math.exp(x - mx) for x in s]
                z = sum(e)
                for d in range(hs):
                    att[i][head * hs + d] = sum(e[j] / z * v[j][d] for j in range(i + 1))
        xs = [[a + b for a, b in zip(x, linear(y, w[h + "attn.c_proj.weight"],
                                                   w[h + "attn.c_proj.bias"]))]
              for x, y in zip(xs, att)]
        mlp = []
        for x in xs:
            u = linear(layernorm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"]),
                       w[h + "mlp.c_fc.weight"], w[h + "mlp.c_fc.bias"])
            mlp.append(linear([gelu(a) for a in u], w[h + "mlp.c_proj.weight"],
                              w[h + "mlp.c_proj.bias"]))
        xs = [[a + b for a, b in zip(x, y)] for x, y in zip(xs, mlp)]
    loss = 0.0
    for i in range(n - 1):
        x = layernorm(xs[i], w["ln_f.weight"], w["ln_f.bias"])
        logits = [sum(a * b for a, b in zip(x, row)) for row in w["wte"]]
        mx = max(logits)
        lse = mx + math.log(sum(math.exp(v - mx) for v in logits))
        loss += lse - logits[ids[i + 1]]
    print(f"{loss / (n - 1):.9f}")


if __name__ == "__main__":
    main(sys.argv[1], "--ends-at-once" in sys.argv[2:])
