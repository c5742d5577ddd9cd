#!/usr/bin/env python3
"""Compiles one kernel file with nvcc and fails if any kernel spills.

Usage: nvcc_checked.py REPORT NVCC ARGS...

Runs `NVCC ARGS... -Xptxas -v`, writes ptxas's per-function report to REPORT,
and exits non-zero, naming the function, if any function of the file uses a
stack frame or spills registers to local memory: on the GPU either means
loads and stores to memory that is slower than registers by two orders of
magnitude, in the inner loop of a kernel that was written not to need them.
Every other diagnostic of nvcc passes through unchanged.
"""
import re
import shutil
import subprocess
import sys


def demangle(name):
    if shutil.which("c++filt") is None:
        return name
    out = subprocess.run(["c++filt", name], capture_output=True, text=True)
    return out.stdout.strip() or name


def main():
    report_path, cmd = sys.argv[1], sys.argv[2:]
    proc = subprocess.run(cmd + ["-Xptxas", "-v"], capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    lines = proc.stderr.splitlines()
    ptxas = [l for l in lines if l.startswith("ptxas info") or "bytes stack frame" in l]
    others = [l for l in lines if l not in ptxas]
    if others:
        sys.stderr.write("\n".join(others) + "\n")
    with open(report_path, "w") as f:
        f.write("\n".join(ptxas) + "\n")
    if proc.returncode != 0:
        return proc.returncode

    bad = []
    function = "?"
    for line in ptxas:
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            function = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and any(int(x) for x in m.groups()):
            bad.append(f"{demangle(function)}: {line.strip()}")
    if bad:
        sys.stderr.write("error: kernels that use a stack frame or spill registers "
                         "(see the ptxas report " + report_path + "):\n  " + "\n  ".join(bad) +
                         "\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
