#!/usr/bin/env bash
# The viewer page in headless Chromium: no JavaScript error, the chart and the
# memory map drawn, and a screenshot saved.
#
#   viewer_browser_test.sh BFC_REPLAY TRACE OUT_DIR      the real page
#   viewer_browser_test.sh BFC_REPLAY TRACE OUT_DIR --hostile-name
#       the real page of TRACE copied under a name that would end or hide the
#       page's data <script> if it were not escaped ("<!--<script>"), with
#       markup, quotes and bytes that are not UTF-8: the page must still draw,
#       and show the name as text
#   viewer_browser_test.sh --page PAGE.html OUT_DIR      any page (self-check)
#
# Exit 0: passed; 1: failed; 77: skipped (no chromium; ctest SKIP_RETURN_CODE).
set -uo pipefail

CHROMIUM="${BFC_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "SKIP: $CHROMIUM not found; install it with: bash tools/deps.sh --browser"
  exit 77
fi

if [ "$1" = "--page" ]; then
  page="$2"; out="$3"; mkdir -p "$out"
else
  replay="$1"; trace="$2"; out="$3"; mkdir -p "$out"
  page="$out/viewer.html"
  hostile=""
  if [ "${4:-}" = "--hostile-name" ]; then
    # No "/" can be in a file name; "</script" is covered by the unit tests.
    hostile=$'t<!--<script>a\'"&]]>\xff\xe2\x80\xa8z'
    rm -f "$out"/t*.csv
    cp "$trace" "$out/$hostile.csv"
    trace="$out/$hostile.csv"
  fi
  "$replay" "$trace" --html "$page" > "$out/replay.txt" 2>&1 || {
    cat "$out/replay.txt"; echo "FAIL: bfc-replay --html failed"; exit 1; }
fi
name="$(basename "$page" .html)"

profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$profile" --enable-logging=stderr --v=0
       --window-size=1400,1000 --virtual-time-budget=5000)

timeout 120 "$CHROMIUM" "${flags[@]}" --dump-dom "file://$(realpath "$page")" \
  > "$out/$name.dom.html" 2> "$out/$name.console.txt"
rc=$?
if [ $rc -ne 0 ]; then
  tail -20 "$out/$name.console.txt"; echo "FAIL: chromium --dump-dom exited $rc"; exit 1
fi

fail=0
if grep -q 'data-js-errors=' "$out/$name.dom.html"; then
  echo "FAIL: JavaScript error(s): $(grep -o 'data-js-errors="[^"]*"' "$out/$name.dom.html")"
  fail=1
fi
if grep -E 'Uncaught|SyntaxError|TypeError|ReferenceError' "$out/$name.console.txt" | grep -q CONSOLE; then
  echo "FAIL: console errors:"; grep -E 'Uncaught|Error' "$out/$name.console.txt" | head -5
  fail=1
fi
chart=$(grep -o 'data-chart-drawn="[0-9]*"' "$out/$name.dom.html" | grep -o '[0-9]*')
map=$(grep -o 'data-map-drawn="[0-9]*"' "$out/$name.dom.html" | grep -o '[0-9]*')
if [ -z "$chart" ] || [ "$chart" -eq 0 ]; then
  echo "FAIL: the chart was not drawn (no data-chart-drawn on <body>)"; fail=1
fi
if [ -z "$map" ] || [ "$map" -eq 0 ]; then
  echo "FAIL: the memory map was not drawn (no data-map-drawn on <body>)"; fail=1
fi

if [ -n "${hostile:-}" ]; then
  # The heading shows the name as text (the serializer writes < > & as
  # entities; 0xFF became U+FFFD).
  want=$'bfc replay of t&lt;!--&lt;script&gt;a\'"&amp;]]&gt;\xef\xbf\xbd'
  if ! grep -qF "$want" "$out/$name.dom.html"; then
    echo "FAIL: the heading does not show the hostile name as text:"
    grep -o '<h1[^>]*>[^<]*' "$out/$name.dom.html" | head -3
    fail=1
  fi
fi

timeout 120 "$CHROMIUM" "${flags[@]}" --screenshot="$out/$name.png" \
  "file://$(realpath "$page")" > /dev/null 2>&1
if [ ! -s "$out/$name.png" ]; then
  echo "FAIL: no screenshot at $out/$name.png"; fail=1
else
  echo "screenshot: $out/$name.png"
fi
[ $fail -eq 0 ] && echo "PASS: chart drew $chart ops, map drew $map chunks, no JavaScript errors"
exit $fail
