#!/usr/bin/env bash
# Every teaching experiment (scripts/experiments/NN-name.sh) at its smallest
# setting, --size test, so none of them rots: each must exit 0, print its
# table, and write NN-name.md (a title, a table with at least one row, the
# commands and the machine) and NN-name.png (a PNG file). all.sh's flag
# errors are checked on one script.
#   experiments_test.sh LADDER SOURCE_ROOT
set -u
export LADDER=$1
src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for script in "$src"/scripts/experiments/[0-9][0-9]-*.sh; do
  name=$(basename "$script" .sh)
  start=$(date +%s)
  if ! "$script" --size test --out "$tmp" >"$tmp/$name.log" 2>&1; then
    cat "$tmp/$name.log"; fail "$name exited non-zero"; continue
  fi
  page="$tmp/$name.md"
  [ -s "$page" ] || { fail "$name wrote no $name.md"; continue; }
  grep -q "^# ${name:0:2}\. " "$page" || fail "$name.md has no title"
  rows=$(grep -c '^| ' "$page")
  grep -q '^|---' "$page" && [ "$rows" -ge 2 ] || fail "$name.md has no table with a row"
  grep -q '^Machine: ' "$page" || fail "$name.md does not name the machine"
  grep -q '^ladder ' "$page" || fail "$name.md lists no ladder command"
  grep -q "results: $page" "$tmp/$name.log" || fail "$name did not print where its results are"
  head -c 8 "$tmp/$name.png" 2>/dev/null | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' ||
    fail "$name wrote no PNG plot"
  echo "$name: ok ($(($(date +%s) - start)) s, $((rows - 1)) rows)"
done
err=$("$src"/scripts/experiments/04-memory-anatomy.sh --size huge 2>&1)
[ $? -eq 2 ] && grep -q "size must be test, small or full" <<<"$err" || fail "--size huge: '$err'"
[ "$failures" -eq 0 ] && echo "every experiment writes its table and plot" || exit 1
