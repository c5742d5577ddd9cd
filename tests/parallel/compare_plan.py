#!/usr/bin/env python3
"""Holds `ladder plan --json` to what a run measured (DIR/ranks.json written
by `ladder train` after its first step): per rank, each memory category and
the backend's allocated bytes against the predicted total, the payload
bytes per communication axis, and with optimizer offload the host memory and
the link's bytes each way, each within a relative tolerance.

  compare_plan.py PLAN_JSON RANKS_JSON [TOLERANCE]"""
import json
import sys


def main():
    plan = json.load(open(sys.argv[1]))
    ranks = json.load(open(sys.argv[2]))
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else 0.10
    bad, checked, worst = [], 0, (0.0, "")

    def close(what, predicted, measured):
        nonlocal checked, worst
        checked += 1
        rel = abs(predicted - measured) / max(abs(predicted), abs(measured), 1)
        worst = max(worst, (rel, what))
        if rel > tol:
            bad.append(f"{what}: predicted {predicted}, measured {measured}")

    for r in ranks:
        stage = plan["stages"][r["pp"]]
        assert stage["ranks"][0] <= r["rank"] <= stage["ranks"][1], "rank outside its stage"
        mem, want = r["memory"], stage["memory"]
        for key in ("weights", "grads", "optimizer", "activations"):
            close(f"rank {r['rank']} {key}", want[key], mem[key])
        close(f"rank {r['rank']} allocated", want["total"], mem["allocated"])
        for axis, measured in r["comm_bytes"].items():
            close(f"rank {r['rank']} {axis} bytes", stage["comm_bytes"][axis], measured)
        if "host_bytes" in stage:
            close(f"rank {r['rank']} host", stage["host_bytes"], mem["host"])
            for way in ("to_host", "to_device"):
                close(f"rank {r['rank']} link {way}", stage["link_bytes"][way],
                      r["link_bytes"][way])
        elif mem.get("host", 0) != 0:
            bad.append(f"rank {r['rank']} holds {mem['host']} host bytes the plan does not know")
    print(f"{len(ranks)} ranks, {checked} figures; worst {worst[0]:.2%} ({worst[1]})")
    for line in bad:
        print("  " + line)
    sys.exit(1 if bad else 0)


main()
