#!/usr/bin/env bash
# The main job: set up, train configs/tiny.conf on the King James Bible on the
# CPU (about two minutes on 2 cores), then print a sample from the model.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --target ladder build  # the program alone; scripts/test.sh builds the tests
build/ladder train --config configs/tiny.conf --out runs/tiny
echo
echo "--- sample from runs/tiny ---"
build/ladder generate --model runs/tiny --prompt "And God said" --max-tokens 200 \
  --temperature 0.8 --top-k 40 --seed 7
