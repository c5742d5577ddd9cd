#!/usr/bin/env bash
# ladder report on a real run, checked in a real browser: a 2-rank training
# run with a checkpoint, plus a synthetic events.jsonl and gpu.jsonl; the
# page must be self-contained, load in headless Chromium with no console
# message at all (the page has no script, so any message is an error), and
# its screenshot and every PNG written must show plots (coloured pixels,
# not a blank page). A copy of the page with a deliberate console.error
# proves the console check can fail. Skips (77) only without chromium.
#   report_browser_test.sh LADDER SOURCE_ROOT MPIRUN [mpirun args...]
source "$(dirname "$0")/../parallel/training_run.sh"
command -v chromium >/dev/null || { echo "SKIP: chromium is not installed"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
stats="$src/tests/report/png_stats.py"

run="$tmp/run"
"$mpirun" "${mpirun_args[@]}" -np 2 "$ladder" train --config "$src/tests/parallel/equivalence.conf" \
  --data "$tmp/corpus.txt" --steps 8 --log-every 4 --dp 2 --save-every 4 --out "$run" \
  >"$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; fail "ladder train"; }

# Events the run itself did not have (appended to its own), and what the GPU sampler writes.
now=$(date +%s)
cat >>"$run/events.jsonl" <<EOS
{"time":$now,"step":0,"kind":"start","detail":"dp2 tp1 pp1"}
{"time":$((now + 1)),"step":4,"kind":"save","detail":"checkpoints/step-00000004"}
{"time":$((now + 2)),"step":5,"kind":"straggler","detail":"rank 1: 2.3x median, waiting cost 41% of the step"}
{"time":$((now + 3)),"step":6,"kind":"restart","detail":"rank 1 <lost> & restarted"}
{"time":$((now + 4)),"step":4,"kind":"restore","detail":"from memory"}
EOS
for i in $(seq 0 9); do
  for g in 0 1; do
    echo "{\"time\":$now.$i,\"gpu\":$g,\"util\":$((40 + 5 * i + 10 * g)),\"mem_used\":$(((i + g + 1) * 1073741824)),\"mem_total\":85899345920,\"power_w\":$((200 + 10 * i + g))}"
  done
done >"$run/gpu.jsonl"

out=$("$ladder" report "$run" 2>"$tmp/report.err") || { cat "$tmp/report.err"; fail "ladder report"; }
[ "$out" = "report: $run/report.html" ] || fail "ladder report printed '$out'"
page="$run/report.html"
pngs=("$run"/report-*.png)
for id in loss tokens mfu time memory comm gpu-util gpu-memory gpu-power; do
  [ -f "$run/report-$id.png" ] || fail "no report-$id.png"
  grep -q "href=\"report-$id.png\"" "$page" || fail "the page does not link report-$id.png"
done
# Self-contained: nothing to fetch, no script; the event detail is escaped.
! grep -qiE '<script|<link rel="stylesheet"|<img|(src|href)="(https?:)?//' "$page" || fail "the page refers to outside resources"
grep -q "rank 1 &lt;lost&gt; &amp; restarted" "$page" || fail "event detail not escaped into the table"
# Per-rank step times appear as a heatmap where the run recorded them, else as a note.
if grep -q '"rank_seconds"' "$run/metrics.jsonl"; then
  [ -f "$run/report-ranks.png" ] || fail "rank_seconds recorded but no report-ranks.png"
else
  grep -q "No per-rank step times" "$page" || fail "no note for the missing per-rank times"
fi

# Loads the page in headless Chromium; stderr carries the console as INFO:CONSOLE lines.
browse() {
  timeout 120 chromium --headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 \
    --hide-scrollbars --screenshot="$2" --window-size=800,2400 "file://$1" >/dev/null 2>"$2.log" ||
    fail "chromium failed on $1: $(tail -3 "$2.log")"
  [ -s "$2" ] || fail "chromium wrote no screenshot of $1"
}
console_messages() { grep -F "INFO:CONSOLE" "$1.log"; }

browse "$page" "$tmp/shot.png"
if console_messages "$tmp/shot.png"; then fail "console messages loading the report"; fi

# The check can fail: a copy of the page that logs an error is caught.
sed 's|</body>|<script>console.error("deliberate report test error")</script></body>|' "$page" \
  >"$run/broken.html"
browse "$run/broken.html" "$tmp/broken.png"
console_messages "$tmp/broken.png" | grep -q "deliberate report test error" ||
  fail "the console check missed a deliberate console.error"

# The screenshot shows plots: coloured pixels, far more than the text alone
# would give; so does every PNG.
python3 "$stats" 0.02 0.01 "$tmp/shot.png" || fail "the screenshot looks blank"
python3 "$stats" 0.01 0.003 "${pngs[@]}" || fail "a PNG looks blank"
# And the blank check can fail: a page with text only does not pass it.
echo '<!DOCTYPE html><html><body><p>only text</p></body></html>' >"$tmp/text.html"
browse "$tmp/text.html" "$tmp/text.png"
! python3 "$stats" 0.02 0.01 "$tmp/text.png" >/dev/null || fail "a text-only page passed the blank check"

# Bad input: one line naming what is wrong, exit 2, no page written.
rm -f "$page"
sed -i '3s/.*/{"step":3,"loss":/' "$run/metrics.jsonl"
echo '{"step":99,"loss":1.0}' >>"$run/metrics.jsonl"
"$ladder" report "$run" 2>"$tmp/bad.err" && fail "a malformed metrics line was accepted"
[ "$(cat "$tmp/bad.err")" = "ladder report: $run/metrics.jsonl:3: not a JSON object: '{\"step\":3,\"loss\":'" ] ||
  fail "malformed-line error: $(cat "$tmp/bad.err")"
[ ! -e "$page" ] || fail "a report was written from bad input"
"$ladder" report "$tmp/nope" 2>"$tmp/nodir.err"; rc=$?
[ $rc -eq 2 ] && [ "$(cat "$tmp/nodir.err")" = "ladder report: run directory '$tmp/nope' does not exist" ] ||
  fail "missing directory: exit $rc, $(cat "$tmp/nodir.err")"
echo "report: page loads cleanly, screenshot and ${#pngs[@]} PNGs show plots"
