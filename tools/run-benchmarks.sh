#!/usr/bin/env bash
# Builds and runs every benchmark suite, then writes the tables and plots.
#
#   tools/run-benchmarks.sh                 # build-bench/, BFC_CHECK_LEVEL=0, 3 reps
#   BUILD_DIR=build-bench REPS=5 tools/run-benchmarks.sh
#   BUILD_TYPE=RelWithDebInfo tools/run-benchmarks.sh     # default Release
#   tools/run-benchmarks.sh --benchmark_filter=BM_Trace   # extra args go to
#                                                         # the benchmark binary
#   BFC_BENCH_CONFS='mine=preset:low_footprint,grow_below_peak_ratio:0' \
#     OUT_DIR=build-bench/mine tools/run-benchmarks.sh --benchmark_filter=BM_Trace
#                           # trace rows of one's own configuration beside the
#                           # presets' (bench/main.cc); keep them out of
#                           # bench/results, which holds the published run
#
# Output: $OUT_DIR (default bench/results): bench.json (Google Benchmark JSON,
# medians of REPS repetitions), tables.md, scaling.svg, traces.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-bench}
# Timings are of the shipped configuration: no debug checks (a build with
# tests defaults to BFC_CHECK_LEVEL=1; the binary records the level it has).
CHECK_LEVEL=${CHECK_LEVEL:-0}
REPS=${REPS:-3}
OUT_DIR=${OUT_DIR:-bench/results}
JOBS=${JOBS:-2}
# Pinned (it came from whatever the build directory's cache held, so two runs
# could differ in optimisation); the binary records it in its JSON context.
BUILD_TYPE=${BUILD_TYPE:-Release}

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DBFC_BUILD_BENCHMARKS=ON -DBFC_CHECK_LEVEL="$CHECK_LEVEL" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS" --target bfc_benchmarks
mkdir -p "$OUT_DIR"
# Each repetition runs at a random point among all the others, so drift on a
# shared VM falls on a benchmark and its same-run baselines alike: the
# repetitions of BM_Trace's preset benchmarks then lie within 4 % of their
# median, against 20-40 % between back-to-back runs (README, "Memory footprint").
"$BUILD_DIR/bench/bfc_benchmarks" \
  --benchmark_counters_tabular=true \
  --benchmark_repetitions="$REPS" \
  --benchmark_enable_random_interleaving=true \
  --benchmark_report_aggregates_only=true \
  --benchmark_out="$OUT_DIR/bench.json" --benchmark_out_format=json "$@"
python3 bench/plot.py "$OUT_DIR/bench.json" "$OUT_DIR"
