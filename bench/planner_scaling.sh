#!/usr/bin/env bash
# The planner's scaling curve: bfc-plan's wall time on traces of 1e3..1e6
# events, made by tiling a real trace (each copy gets fresh pointers, so the
# shape -- sizes, lifetimes, live set -- is the real one, repeated). Writes a
# markdown table to stdout; bench/results/planner_scaling.md holds a run.
#
#   bench/planner_scaling.sh [BUILD_DIR] [TRACE]
#
# Two rows per size: the default strategies (the quadratic ones skipped past
# --max-quadratic-tensors) and, up to UNGUARDED_MAX events (default 1e5),
# every strategy forced (--max-quadratic-tensors=0) to show the quadratic
# cost the guard avoids.
set -euo pipefail
build=${1:-build}
trace=${2:-$(dirname "$0")/../../shared/traces/lstm-train.csv}
plan="$build/tools/bfc-plan"
[[ -x "$plan" ]] || { echo "no $plan: build first (cmake --build $build)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# make_trace EVENTS OUT: the first EVENTS rows of the trace tiled as needed.
make_trace() {
  awk -F, -v want="$1" 'NR == 1 { print; next }
    { rows[++n] = $0 }
    END {
      for (c = 0; printed < want; ++c)
        for (i = 1; i <= n && printed < want; ++i) {
          split(rows[i], f, ",")
          # Pointers of copy c are moved up by c * 2^44 (hex arithmetic in awk
          # is not portable: append a copy tag to the pointer instead).
          f[4] = sprintf("%s%x", f[4], c)
          printf "%s,%s,%s,%s,%s,%s\n", f[1], f[2], f[3], f[4], f[5], f[6]
          ++printed
        }
    }' "$trace" > "$2"
}

seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" > /dev/null 2>&1 || true
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

echo "| events | tensors | strategies | bfc-plan wall time (s) |"
echo "|---:|---:|---|---:|"
for events in 1000 10000 100000 1000000; do
  t="$work/t$events.csv"
  make_trace "$events" "$t"
  tensors=$("$plan" "$t" --summary-json - --strategies=NAIVE 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["traces"][0]["tensors"])')
  echo "| $events | $tensors | default | $(seconds "$plan" "$t") |"
  if (( events <= ${UNGUARDED_MAX:-100000} )); then
    echo "| $events | $tensors | all, unguarded (--max-quadratic-tensors=0) | $(seconds "$plan" "$t" --max-quadratic-tensors=0) |"
  fi
done
