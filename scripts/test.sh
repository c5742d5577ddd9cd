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
# Only the tests need a browser: tests/report/report_browser_test.sh loads
# the report page in headless Chromium.
source scripts/lib/packages.sh
install_missing_packages chromium || {
  echo "0 passed, 1 failed"
  exit 1
}
# On a CPU whose OpenBLAS picks older kernels than the CPU runs, every
# ladder command restarts itself once with better ones and says so in one
# stderr line (docs/ARCHITECTURE.md "The BLAS library's kernel set"). The
# suite runs with that choice already made, as a user's shell would after
# reading the line, so the tests that hold a command's stderr to its own
# message see only that; tests/cli/cli_test.sh checks the restart itself.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  chosen=$("$build_dir/ladder" version 2>&1 >/dev/null |
    sed -n 's/.*restarting with OPENBLAS_CORETYPE=\([A-Za-z0-9_]*\).*/\1/p')
  if [ -n "$chosen" ]; then
    echo "test: OpenBLAS misdetects this CPU; the suite runs with OPENBLAS_CORETYPE=$chosen, ladder's choice"
    export OPENBLAS_CORETYPE=$chosen
  fi
fi
# The tests' python3 is Debian's (scripts/lib/python.sh says why).
source scripts/lib/python.sh
use_debian_python "$build_dir/debian-python"
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
