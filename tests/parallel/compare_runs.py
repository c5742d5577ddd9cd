#!/usr/bin/env python3
"""Compares two `ladder train` output directories: per-step losses from
metrics.jsonl and every weight tensor of model.bin (read as docs/formats.md
describes it), each within a relative tolerance (the weights' own, if given).

  compare_runs.py REFERENCE_DIR OTHER_DIR [TOLERANCE [WEIGHT_TOLERANCE]]

Exit 0 if everything is within tolerance, 1 otherwise (with the worst cases)."""
import json
import math
import struct
import sys
from array import array


def losses(run):
    with open(f"{run}/metrics.jsonl") as f:
        return [json.loads(line)["loss"] for line in f]


def tensors(run):
    """(name, floats) for every tensor of model.bin, in file order."""
    with open(f"{run}/model.bin", "rb") as f:
        data = f.read()
    assert data[:8] == b"LADDERM\0", "bad magic"
    (clen,) = struct.unpack_from("<I", data, 12)
    cfg = dict(line.split(" = ") for line in data[16:16 + clen].decode().splitlines())
    L, C, T = int(cfg["n_layer"]), int(cfg["n_embd"]), int(cfg["context"])
    Vp = (int(cfg["vocab_size"]) + 127) // 128 * 128
    sizes = [("wte", Vp * C), ("wpe", T * C)]
    for l in range(L):
        for name, n in [("ln_1.weight", C), ("ln_1.bias", C), ("attn.qkv.weight", 3 * C * C),
                        ("attn.qkv.bias", 3 * C), ("attn.proj.weight", C * C),
                        ("attn.proj.bias", C), ("ln_2.weight", C), ("ln_2.bias", C),
                        ("mlp.fc.weight", 4 * C * C), ("mlp.fc.bias", 4 * C),
                        ("mlp.proj.weight", 4 * C * C), ("mlp.proj.bias", C)]:
            sizes.append((f"h.{l}.{name}", n))
    sizes += [("ln_f.weight", C), ("ln_f.bias", C)]
    weights = array("f")
    weights.frombytes(data[16 + clen + 8:-4])
    assert len(weights) == sum(n for _, n in sizes), "size mismatch"
    at = 0
    for name, n in sizes:
        yield name, weights[at:at + n]
        at += n


def main():
    ref, other = sys.argv[1], sys.argv[2]
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-5
    wtol = float(sys.argv[4]) if len(sys.argv) > 4 else tol
    bad = []
    a, b = losses(ref), losses(other)
    if len(a) != len(b):
        bad.append(f"{len(a)} vs {len(b)} steps")
    for step, (x, y) in enumerate(zip(a, b), 1):
        if abs(x - y) > tol * abs(x):
            bad.append(f"step {step}: loss {x} vs {y}")
    worst = 0.0
    for (name, x), (_, y) in zip(tensors(ref), tensors(other)):
        norm = math.sqrt(sum(v * v for v in x))
        diff = math.sqrt(sum((u - v) ** 2 for u, v in zip(x, y)))
        rel = diff / norm if norm > 0 else diff
        worst = max(worst, rel)
        if rel > wtol:
            bad.append(f"{name}: relative difference {rel:.3g}")
    worst_loss = max((abs(x - y) / abs(x) for x, y in zip(a, b)), default=0.0)
    print(f"{len(a)} losses (worst {worst_loss:.2g}), weights (worst {worst:.2g}); "
          f"tolerance {tol}" + (f", weights {wtol}" if wtol != tol else ""))
    for line in bad[:10]:
        print("  " + line)
    sys.exit(1 if bad else 0)


main()
