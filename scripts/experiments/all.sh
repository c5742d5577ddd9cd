#!/usr/bin/env bash
# Runs every teaching experiment in order with the same flags
# (--size test|small|full, --device, --out; see lib.sh), each writing
# docs/results/NN-name.md and its plot. Stops at the first that fails.
set -euo pipefail
here=$(dirname "$0")
for script in "$here"/[0-9][0-9]-*.sh; do
  echo "== $(basename "$script")"
  start=$(date +%s)
  "$script" "$@"
  echo "   ($(($(date +%s) - start)) s)"
done
