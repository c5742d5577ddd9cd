#!/usr/bin/env bash
# The one test command: set up, build with warnings as errors, run every test
# (unit, model, CLI, end-to-end; GPU tests skip without a GPU) and end with
# a line "N passed, N failed".
#   LADDER_CUDA=auto|enabled|disabled (default auto) selects the CUDA build.
set -uo pipefail
cd "$(dirname "$0")/.."
build_dir=build-test
scripts/setup.sh "$build_dir" -Dwerror=true -Dcuda="${LADDER_CUDA:-auto}" || {
  echo "0 passed, 1 failed"
  exit 1
}
# Two test processes share two cores: OpenMP threads that spin while they
# wait would steal each other's core, so they sleep instead (tests only).
export OMP_WAIT_POLICY=PASSIVE
meson test -C "$build_dir" --print-errorlogs --num-processes 2 "$@"
status=$?
python3 - "$build_dir/meson-logs/testlog.json" <<'PY'
import json, sys
passed = failed = skipped = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r == "OK": passed += 1
    elif r == "SKIP": skipped += 1
    else: failed += 1
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
PY
exit $status
