#!/usr/bin/env bash
# Builds the libFuzzer target (preset `fuzz`) in BUILD_DIR and runs it on the
# committed seed corpus until at least MIN_OPS allocator operations have run
# in total, in rounds of WORKERS concurrent fuzzer processes (one per core by
# default), each with its own seed. libFuzzer itself is single-threaded, so
# one process leaves the other cores idle. New interesting inputs go to a
# scratch corpus the workers share (the committed one is read-only here); a
# crash input is written to BUILD_DIR/artifacts/ and fails the script: copy it
# into tests/fuzz/regressions/ once fixed.
#
#   bash tests/fuzz/run_fuzzer.sh [BUILD_DIR=build-fuzz] [MIN_OPS=10000000] \
#        [MAX_SECONDS=900] [WORKERS=$(nproc)]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-fuzz}
min_ops=${2:-10000000}
max_seconds=${3:-900}
workers=${4:-$(nproc)}
case "$workers" in
  '' | *[!0-9]* | 0) echo "run_fuzzer: WORKERS must be a positive number, not '$workers'" >&2; exit 2 ;;
esac

if [ "$build" = build-fuzz ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
else
  cmake --build "$build" -j2 --target allocator_fuzzer
fi
fuzzer="$build/tests/fuzz/allocator_fuzzer"
scratch="$build/fuzz-corpus"
artifacts="$build/artifacts/"
mkdir -p "$scratch" "$artifacts"

# Rounds are short (60 s) so that the total overshoots MIN_OPS by little.
total=0
round=0
start=$SECONDS
while [ "$total" -lt "$min_ops" ]; do
  if [ $((SECONDS - start)) -ge "$max_seconds" ]; then
    echo "run_fuzzer: only $total operations in ${max_seconds}s (wanted $min_ops)" >&2
    exit 1
  fi
  round=$((round + 1))
  pids=()
  for w in $(seq 1 "$workers"); do
    seed=$(((round - 1) * workers + w))
    "$fuzzer" -seed="$seed" -runs=20000 -max_total_time=60 -max_len=8192 \
      -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$artifacts" "$scratch" tests/fuzz/corpus \
      >"$build/fuzz-round-$round-$w.log" 2>&1 &
    pids+=($!)
  done
  failed=()
  for w in $(seq 1 "$workers"); do
    wait "${pids[$((w - 1))]}" || failed+=("$w")
  done
  if [ ${#failed[@]} -gt 0 ]; then
    for w in "${failed[@]}"; do tail -n 60 "$build/fuzz-round-$round-$w.log" >&2; done
    echo "run_fuzzer: the fuzzer found a problem (round $round, worker(s) ${failed[*]}); inputs in $artifacts" >&2
    ls -l "$artifacts" >&2
    exit 1
  fi
  round_ops=0
  round_execs=0
  for w in $(seq 1 "$workers"); do
    log="$build/fuzz-round-$round-$w.log"
    ops=$(sed -n 's/^bfc_fuzz_ops: \([0-9]*\)$/\1/p' "$log" | tail -n 1)
    if [ -z "$ops" ]; then
      tail -n 20 "$log" >&2
      echo "run_fuzzer: no operation count in $log" >&2
      exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    round_ops=$((round_ops + ops))
    round_execs=$((round_execs + ${execs:-0}))
  done
  total=$((total + round_ops))
  echo "round $round: $workers worker(s), $round_execs inputs, $round_ops operations (total $total, $((SECONDS - start))s)"
done
echo "bfc_fuzz_total_ops: $total in $round round(s) of $workers worker(s), $((SECONDS - start))s; no crash"
