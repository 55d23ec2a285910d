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
#   viewer_browser_test.sh BFC_REPLAY TRACE OUT_DIR --streams
#       bfc-replay --streams: the streams cards, the pending legend and
#       chunks pending on streams in the embedded maps
#   viewer_browser_test.sh BFC_REPLAY TRACE OUT_DIR --accounts PHASES
#       bfc-replay --accounts --phases PHASES: the per-account chart drawn,
#       with one series per phase name and its legend
#   viewer_browser_test.sh BFC_REPLAY TRACE OUT_DIR --scrub [MEMORY_LIMIT]
#       scrubbing through time: the page opened as PAGE#selftest clicks its own
#       chart twice (viewer.html says how) and the test checks that each click
#       showed the pool at a different instant with live chunks in it, well
#       within SCRUB_BUDGET_MS; that hovering a scrubbed chunk showed its trace
#       line and pointer; that the pool rebuilt from the history at the peak
#       and end ops equals the embedded dumps; and that history and timeline
#       agree. With MEMORY_LIMIT (bfc-replay --memory-limit) allocations fail,
#       and the failures must be marked on the chart.
#   viewer_browser_test.sh --synthetic OPS OUT_DIR
#       the same checks on a page of OPS ops that no checked-in trace is long
#       enough for (viewer_synthetic_report.py; it has failures and sites): at
#       a million ops the page must draw within DRAW_BUDGET_MS of navigation
#       and a click must still take under SCRUB_BUDGET_MS.
#   viewer_browser_test.sh BFC_REPLAY - OUT_DIR --wide
#       a generated trace of 1,500 regions (sim-cudamalloc, regions as
#       requested) on two streams whose ids need all 64 bits: the map draws
#       its first 256 regions with ink (a canvas for all of them was left
#       blank), and the pending chunks name both streams exactly (JavaScript
#       numbers keep 53 bits: both read as 0xfffffffffffff800)
#   viewer_browser_test.sh --page PAGE.html OUT_DIR      any page (self-check)
#
# Exit 0: passed; 1: failed; 77: skipped (no chromium or python3; ctest
# SKIP_RETURN_CODE).
set -uo pipefail

# A click seeks the live set from the last instant; it is milliseconds even
# at a million ops, so a second means it went quadratic. The draw budget is
# mostly the browser parsing ~170 MB of JSON on a slow, shared CI machine.
SCRUB_BUDGET_MS="${SCRUB_BUDGET_MS:-1000}"
DRAW_BUDGET_MS="${DRAW_BUDGET_MS:-20000}"

CHROMIUM="${BFC_CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "SKIP: $CHROMIUM not found; install it with: bash tools/deps.sh --browser"
  exit 77
fi

scrub=""; limit=""; synthetic=""; streams=""; accounts=""; wide=""
if [ "$1" = "--page" ]; then
  page="$2"; out="$3"; mkdir -p "$out"; page_only=1
elif [ "$1" = "--synthetic" ]; then
  ops="$2"; out="$3"; mkdir -p "$out"; scrub=1; synthetic=1
  python="${PYTHON:-python3}"
  if ! command -v "$python" > /dev/null; then
    echo "SKIP: $python not found (it writes the synthetic report)"; exit 77
  fi
  here="$(dirname "$(realpath "$0")")"
  page="$out/synthetic.html"
  "$python" "$here/viewer_synthetic_report.py" "$here/../tools/viewer/viewer.html" \
    "$ops" "$page" || { echo "FAIL: viewer_synthetic_report.py failed"; exit 1; }
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
  replay_flags=()
  if [ "${4:-}" = "--wide" ]; then
    wide=1; streams=1
    trace="$out/wide.csv"
    {
      echo "Thread,Time,Action,Pointer,Size,Stream"
      for i in $(seq 1 1500); do
        printf '1,%d,allocate,0x%x,4194304,0xfffffffffffff80%d\n' "$i" $((i << 24)) $((1 + i % 2))
      done
      for i in 1497 1498 1499 1500; do
        printf '1,%d,free,0x%x,4194304,0xfffffffffffff80%d\n' $((i + 1500)) $((i << 24)) $((1 + i % 2))
      done
    } > "$trace"
    replay_flags=(--streams --backend sim-cudamalloc --conf growth_policy:same_as_requested)
  fi
  if [ "${4:-}" = "--streams" ]; then
    streams=1; replay_flags=(--streams)
  fi
  if [ "${4:-}" = "--accounts" ]; then
    accounts=1; replay_flags=(--accounts --phases "$5")
  fi
  if [ "${4:-}" = "--scrub" ]; then
    scrub=1; limit="${5:-}"
    [ -n "$limit" ] && replay_flags=(--memory-limit "$limit")
  fi
  # Exit status 3: some allocations failed, which --scrub MEMORY_LIMIT wants.
  "$replay" "$trace" "${replay_flags[@]}" --html "$page" > "$out/replay.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && ! { [ -n "$limit" ] && [ $rc -eq 3 ]; }; then
    cat "$out/replay.txt"; echo "FAIL: bfc-replay --html exited $rc"; exit 1
  fi
fi
name="$(basename "$page" .html)"
url="file://$(realpath "$page")"
[ -n "$scrub" ] && url="$url#selftest"

profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --user-data-dir="$profile" --enable-logging=stderr --v=0
       --window-size=1400,1000 --virtual-time-budget=5000)

timeout 300 "$CHROMIUM" "${flags[@]}" --dump-dom "$url" \
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

# The value of data-NAME on <body> ("" when absent).
attr() {
  grep -o "<body[^>]*>" "$out/$name.dom.html" | grep -o " data-$1=\"[^\"]*\"" |
    sed 's/^[^"]*"//; s/"$//'
}
if ! [ "$(attr map-ink)" -gt 0 ] 2>/dev/null; then
  echo "FAIL: the memory map's canvas is blank (data-map-ink=\"$(attr map-ink)\")"; fail=1
fi
if [ -n "$wide" ] && [ "$(attr map-regions)" != "256/1500" ]; then
  echo "FAIL: data-map-regions=\"$(attr map-regions)\" (want 256/1500)"; fail=1
fi
if [ -n "$streams" ]; then
  # The streams cards, the pending legend shown, and pending chunks in the
  # embedded maps (the end map of a replay whose last frees nobody looked at).
  if [ "$(attr streams-cards)" != "1" ] ||
     ! grep -q 'pending on streams at end' "$out/$name.dom.html"; then
    echo "FAIL: no streams cards on a replay with --streams"; fail=1
  fi
  if grep -q 'id="pendinglegend" style="display: none' "$out/$name.dom.html"; then
    echo "FAIL: the pending legend is hidden on a replay with --streams"; fail=1
  fi
  if ! [ "$(attr pending-chunks)" -gt 0 ] 2>/dev/null; then
    echo "FAIL: no pending chunk in the maps (data-pending-chunks=\"$(attr pending-chunks)\")"
    fail=1
  fi
  if [ -n "$wide" ] &&
     [ "$(attr pending-streams)" != "0xfffffffffffff801 0xfffffffffffff802" ]; then
    echo "FAIL: pending streams shown as \"$(attr pending-streams)\"" \
         "(want 0xfffffffffffff801 0xfffffffffffff802)"
    fail=1
  fi
elif [ "$(attr streams-cards)" != "0" ]; then
  echo "FAIL: streams cards on a replay of one stream"; fail=1
fi
if [ -n "$accounts" ]; then
  # One series per distinct phase name of the file, each in the legend.
  want=$(tail -n +2 "$5" | cut -d, -f1 | sort -u | wc -l)
  if [ "$(attr accounts-drawn)" != "$want" ]; then
    echo "FAIL: $want account series expected, data-accounts-drawn=\"$(attr accounts-drawn)\""
    fail=1
  fi
  if ! grep -q 'replay/iter1 (peak ' "$out/$name.dom.html"; then
    echo "FAIL: the accounts legend does not name replay/iter1 with its peak"; fail=1
  fi
elif [ -z "${page_only:-}" ] && [ "$(attr accounts-drawn)" != "0" ]; then
  echo "FAIL: an accounts chart on a replay without accounts"; fail=1
fi
if [ -n "$scrub" ]; then
  if [ "$(attr selftest)" != "done" ]; then
    echo "FAIL: the self-test did not run (data-scrub=\"$(attr scrub)\"; a report" \
         "without history cannot be scrubbed)"
    fail=1
  else
    clicks="$(attr selftest-clicks)"
    IFS=';' read -r click1 click2 <<< "$clicks"
    IFS=',' read -r op1 chunks1 bytes1 ms1 <<< "$click1"
    IFS=',' read -r op2 chunks2 bytes2 ms2 <<< "$click2"
    echo "clicks (op,live chunks,bytes in use,ms): $clicks"
    if ! [ "${op1:-0}" -gt 0 ] 2>/dev/null || ! [ "${op2:-0}" -gt 0 ] 2>/dev/null ||
       [ "$op1" = "$op2" ]; then
      echo "FAIL: the two clicks did not select two instants past the first op"; fail=1
    fi
    if ! [ "${chunks1:-0}" -gt 0 ] 2>/dev/null || ! [ "${chunks2:-0}" -gt 0 ] 2>/dev/null; then
      echo "FAIL: a scrubbed map had no live chunks"; fail=1
    fi
    if [ "$chunks1,$bytes1" = "$chunks2,$bytes2" ]; then
      echo "FAIL: the map did not change between the clicks"; fail=1
    fi
    for ms in "${ms1:-x}" "${ms2:-x}"; do
      if ! awk -v ms="$ms" -v b="$SCRUB_BUDGET_MS" 'BEGIN { exit !(ms + 0 == ms && ms < b) }'; then
        echo "FAIL: a click took $ms ms (budget $SCRUB_BUDGET_MS ms)"; fail=1
      fi
    done
    if [ "$(attr selftest-tip)" != "1" ]; then
      echo "FAIL: hovering a scrubbed chunk did not show its allocation, trace line and pointer"
      fail=1
    fi
    if [ "$(attr selftest-snapshots)" != "peak:1,end:1" ]; then
      echo "FAIL: the pool rebuilt from the history differs from the dumps:" \
           "$(attr selftest-snapshots) peak: $(attr selftest-peak) end: $(attr selftest-end)"
      fail=1
    fi
    if [ -n "$(attr scrub-mismatch)" ]; then
      echo "FAIL: history and timeline disagree: $(attr scrub-mismatch)"; fail=1
    fi
  fi
  oom="$(attr oom-markers)"
  if [ -n "$limit$synthetic" ] && ! [ "${oom:-0}" -gt 0 ] 2>/dev/null; then
    echo "FAIL: no failed allocation marked on the chart (data-oom-markers=\"$oom\")"
    fail=1
  fi
  if [ -n "$synthetic" ]; then
    drawn="$(attr drawn-ms)"
    echo "drawn ${drawn:-?} ms after navigation; history prepared in $(attr history-prep-ms) ms"
    if ! [ "${drawn:-x}" -lt "$DRAW_BUDGET_MS" ] 2>/dev/null; then
      echo "FAIL: the page drew in ${drawn:-?} ms (budget $DRAW_BUDGET_MS ms)"; fail=1
    fi
    if [ "$(attr selftest-site)" != "1" ]; then
      echo "FAIL: a scrubbed chunk did not show the site its allocation has in a dump"
      fail=1
    fi
  fi
fi

timeout 300 "$CHROMIUM" "${flags[@]}" --screenshot="$out/$name.png" "$url" \
  > /dev/null 2>&1
if [ ! -s "$out/$name.png" ]; then
  echo "FAIL: no screenshot at $out/$name.png"; fail=1
else
  echo "screenshot: $out/$name.png"
fi
[ $fail -eq 0 ] && echo "PASS: chart drew $chart ops, map drew $map chunks, no JavaScript errors${scrub:+, scrubbing works}"
exit $fail
