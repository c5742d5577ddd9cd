#!/usr/bin/env bash
# One teaching experiment (scripts/experiments/NN-name.sh) at its smallest
# setting, --size test, so none of them rots: it must exit 0, print its
# table, and write NN-name.md (a title, a table with at least one row, the
# commands and the machine) and NN-name.png (a PNG file).
#   experiment_test.sh LADDER SOURCE_ROOT NN-name
# With --list, checks that the names given are every experiment there is
# (tests/experiments/meson.build makes one test per name) and the flag
# errors every experiment shares (lib.sh), on one script:
#   experiment_test.sh LADDER SOURCE_ROOT --list NN-name...
set -u
export LADDER=$1
src=$2
shift 2
if [ "$1" = --list ]; then
  shift
  listed=$(printf '%s\n' "$@" | sort)
  present=$(cd "$src/scripts/experiments" && ls [0-9][0-9]-*.sh | sed 's/\.sh$//' | sort)
  [ "$listed" = "$present" ] || {
    echo "FAIL: the lessons in tests/experiments/meson.build differ from scripts/experiments:"
    diff <(echo "$listed") <(echo "$present") | sed -n 's/^[<>]/  &/p'
    echo "  (< listed, no script; > a script, not listed)"
    exit 1
  }
  err=$("$src"/scripts/experiments/04-memory-anatomy.sh --size huge 2>&1)
  [ $? -eq 2 ] && grep -q "size must be test, small or full" <<<"$err" || {
    echo "FAIL: --size huge: '$err'"
    exit 1
  }
  echo "tests/experiments/meson.build lists every experiment; flag errors ok"
  exit 0
fi
name=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
start=$(date +%s)
if ! "$src/scripts/experiments/$name.sh" --size test --out "$tmp" >"$tmp/$name.log" 2>&1; then
  cat "$tmp/$name.log"
  echo "FAIL: $name exited non-zero"
  exit 1
fi
page="$tmp/$name.md"
[ -s "$page" ] || { echo "FAIL: $name wrote no $name.md"; exit 1; }
grep -q "^# ${name:0:2}\. " "$page" || fail "$name.md has no title"
rows=$(grep -c '^| ' "$page")
grep -q '^|---' "$page" && [ "$rows" -ge 2 ] || fail "$name.md has no table with a row"
grep -q '^Machine: ' "$page" || fail "$name.md does not name the machine"
grep -q '^ladder ' "$page" || fail "$name.md lists no ladder command"
grep -q "results: $page" "$tmp/$name.log" || fail "$name did not print where its results are"
head -c 8 "$tmp/$name.png" 2>/dev/null | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' ||
  fail "$name wrote no PNG plot"
[ "$failures" -eq 0 ] || exit 1
echo "$name: ok ($(($(date +%s) - start)) s, $((rows - 1)) rows)"
