#!/usr/bin/env python3
"""Checks a `ladder train --trace` file against the run's metrics.jsonl.

  check_trace.py TRACE METRICS RANKS FIRST LAST N_LAYER [KIND...]

The file must parse as JSON; name one process per rank, "rank R (dp d, tp t,
pp p)"; hold the steps FIRST..LAST on every rank, their clocks aligned (each
step's spans of all ranks overlap); nest properly per track; and hold every
kind of span listed (data, forward, backward, optimizer, layer fwd/bwd for
each of the N_LAYER layers, attention, matmul, embedding, head, loss, plus
the KINDs given: bubble, comm, checkpoint, memory (a memory checkpoint's
stall), device: the compute spans again on the device track, in device
time). For rank 0 (the one whose
metrics.jsonl records): each step span is time_s.step, its parts are
time_s's parts, they add up to the step within 2%, the checkpoint span (to
disk or memory) is time_s.checkpoint, and the comm spans inside a step carry metrics' bytes and
seconds per axis. Prints one line per failure and exits 1 if any.
"""
import json
import re
import sys
from collections import defaultdict

trace_path, metrics_path = sys.argv[1], sys.argv[2]
ranks, first, last, n_layer = (int(v) for v in sys.argv[3:7])
required = set(sys.argv[7:])
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL: " + msg)


def ns(us):
    """Microseconds with three decimals, as integer nanoseconds."""
    return round(us * 1000)


with open(trace_path) as f:
    trace = json.load(f)
metrics = {}
with open(metrics_path) as f:
    for line in f:
        record = json.loads(line)
        metrics[record["step"]] = record

events = trace["traceEvents"]
names = {e["pid"]: e["args"]["name"] for e in events
         if e["ph"] == "M" and e["name"] == "process_name"}
if sorted(names) != list(range(ranks)):
    fail(f"processes {sorted(names)}, expected ranks 0..{ranks - 1}")
for pid, name in names.items():
    if not re.fullmatch(rf"rank {pid} \(dp \d+, tp \d+, pp \d+\)", name):
        fail(f"process {pid} is named {name!r}")

spans = [e for e in events if e["ph"] == "X"]
for e in spans:
    missing = {"name", "cat", "ts", "dur", "pid", "tid", "args"} - set(e)
    if missing:
        fail(f"span {e} lacks {sorted(missing)}")
        sys.exit(1)
    e["begin"], e["end"] = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])

# Nesting per track: sorted by start (longest first), each span lies inside
# the innermost open span or starts after it ends. Record each span's parent.
tracks = defaultdict(list)
for e in spans:
    tracks[(e["pid"], e["tid"])].append(e)
for key, track in tracks.items():
    track.sort(key=lambda e: (e["begin"], -e["end"]))
    stack = []
    for e in track:
        while stack and stack[-1]["end"] <= e["begin"] and not (
                stack[-1]["end"] == e["begin"] == e["end"]):
            stack.pop()
        if stack and e["end"] > stack[-1]["end"]:
            fail(f"rank {key[0]} track {key[1]}: {e['name']} [{e['begin']}, {e['end']}] "
                 f"overlaps {stack[-1]['name']} [{stack[-1]['begin']}, {stack[-1]['end']}]")
        e["parent"] = stack[-1] if stack else None
        stack.append(e)

# Every kind of span.
kinds = {"data", "forward", "backward", "optimizer", "attention", "matmul", "embedding", "head",
         "loss"} | required
present = {e["cat"] for e in spans} | {e["name"] for e in spans}
if "memory checkpoint" in present:
    present.add("memory")
for kind in sorted(kinds - {"comm", "device"}):
    if kind not in present:
        fail(f"no {kind} span")
if "device" in required:
    device = defaultdict(int)
    for e in spans:
        if e["tid"] == 3:
            device[(e["pid"], e["name"])] += 1
    host = defaultdict(int)
    for e in spans:
        if e["tid"] == 1:
            host[(e["pid"], e["name"])] += 1
    if not device or device != host:
        fail(f"device spans {dict(device)} are not the compute spans {dict(host)}")
if "comm" in required and not any(e["tid"] == 2 and e["args"].get("bytes", 0) > 0
                                  and e["args"].get("axis") for e in spans):
    fail("no comm span with an axis and bytes")
for direction in ("fwd", "bwd"):
    layers = {int(m.group(1)) for e in spans
              if (m := re.fullmatch(rf"layer (\d+) {direction}", e["name"]))}
    if layers != set(range(n_layer)):
        fail(f"layer {direction} spans for layers {sorted(layers)}, expected 0..{n_layer - 1}")

PARTS = ("data", "forward", "backward", "bubble", "optimizer")
for step in range(first, last + 1):
    step_spans = {}
    for rank in range(ranks):
        found = [e for e in spans if e["pid"] == rank and e["tid"] == 0
                 and e["name"] == f"step {step}"]
        if len(found) != 1:
            fail(f"rank {rank}: {len(found)} spans of step {step}")
            continue
        s = step_spans[rank] = found[0]
        parts = defaultdict(int)
        for e in tracks[(rank, 0)]:
            if e["parent"] is s:
                if e["name"] not in PARTS:
                    fail(f"rank {rank} step {step}: unexpected part {e['name']}")
                parts[e["name"]] += e["end"] - e["begin"]
        total = sum(parts.values())
        length = s["end"] - s["begin"]
        if abs(total - length) > 0.02 * length:
            fail(f"rank {rank} step {step}: parts add up to {total} ns of {length} ns")
        if rank != 0:
            continue
        m = metrics.get(step)
        if m is None:
            fail(f"no metrics for step {step}")
            continue
        t = m["time_s"]
        # Same clock readings: equal to the nanosecond (metrics keep 9 digits).
        for name, value in [("step", length)] + [(p, parts[p]) for p in PARTS]:
            if abs(value - t[name] * 1e9) > max(2, 1e-8 * t[name] * 1e9) + 2 * len(PARTS):
                fail(f"step {step}: {name} spans {value} ns, metrics {t[name] * 1e9:.0f} ns")
        if abs(total - t["step"] * 1e9) > 0.02 * t["step"] * 1e9:
            fail(f"step {step}: parts {total} ns, time_s.step {t['step'] * 1e9:.0f} ns")
        stalls = [e for e in tracks[(0, 0)] if e["name"] in ("checkpoint", "memory checkpoint")
                  and e["args"].get("step") == step]
        if t["checkpoint"] > 0 or stalls:
            if len(stalls) != 1 or abs(stalls[0]["end"] - stalls[0]["begin"]
                                       - t["checkpoint"] * 1e9) > 2:
                fail(f"step {step}: checkpoint spans {stalls}, metrics {t['checkpoint']} s")
        comm = defaultdict(lambda: [0, 0])
        for e in tracks[(0, 2)]:
            if e["begin"] >= s["begin"] and e["end"] <= s["end"]:
                comm[e["args"]["axis"]][0] += e["args"]["bytes"]
                comm[e["args"]["axis"]][1] += e["end"] - e["begin"]
        expected = m.get("comm", {})
        if set(comm) != set(expected):
            fail(f"step {step}: comm spans on axes {sorted(comm)}, metrics {sorted(expected)}")
        for axis, c in expected.items():
            if comm[axis][0] != c["bytes"] or abs(comm[axis][1] - c["seconds"] * 1e9) > 1000:
                fail(f"step {step} {axis}: spans {comm[axis]}, metrics {c}")
    # Aligned clocks: every rank's step overlaps every other's (collectives
    # inside a step tie them together).
    if len(step_spans) == ranks and ranks > 1:
        if max(s["begin"] for s in step_spans.values()) >= min(
                s["end"] for s in step_spans.values()):
            fail(f"step {step}: the ranks' step spans do not overlap")

if failures:
    sys.exit(1)
print(f"trace ok: {ranks} ranks, steps {first}..{last}, {len(spans)} spans")
