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
# Every round starts by running the whole corpus once (libFuzzer's INITED),
# about 40 inputs a second per worker here under ASan with Validate() after
# every operation. Two things keep that replay from eating the rounds as the
# scratch corpus grows over many runs: a scratch corpus of more than
# MERGE_ABOVE inputs is first merged down to the inputs that add coverage
# beyond the committed seeds, and a round in which any worker spent more
# executions replaying than mutating makes the next round twice as long.
#
#   [MERGE_ABOVE=500] bash tests/fuzz/run_fuzzer.sh [BUILD_DIR=build-fuzz] \
#        [MIN_OPS=10000000] [MAX_SECONDS=900] [WORKERS=$(nproc)]
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
rm -f "$build"/fuzz-round-*.log "$build/fuzz-merge.log"
merge_above=${MERGE_ABOVE:-500}
case "$merge_above" in
  '' | *[!0-9]*) echo "run_fuzzer: MERGE_ABOVE must be a number, not '$merge_above'" >&2; exit 2 ;;
esac
start=$SECONDS

count_inputs() { find "$1" -maxdepth 1 -type f | wc -l; }

# Merge a large scratch corpus down before the rounds: the merge runs each
# input once, where every round of every worker would otherwise replay all of
# them. The committed seeds are copied into the output first so that only
# scratch inputs adding coverage beyond them are kept; the copies are removed
# afterwards. The old scratch corpus is replaced only when the merge succeeds.
scratch_inputs=$(count_inputs "$scratch")
if [ "$scratch_inputs" -gt "$merge_above" ]; then
  merged="$build/fuzz-corpus.merging"
  rm -rf "$merged"
  mkdir -p "$merged"
  cp tests/fuzz/corpus/* "$merged"/
  if "$fuzzer" -merge=1 -max_len=8192 -timeout=30 -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts" "$merged" "$scratch" >"$build/fuzz-merge.log" 2>&1; then
    for seed_file in tests/fuzz/corpus/*; do rm -f "$merged/$(basename "$seed_file")"; done
    rm -rf "$scratch"
    mv "$merged" "$scratch"
    echo "merged the scratch corpus: $scratch_inputs inputs -> $(count_inputs "$scratch") ($((SECONDS - start))s)"
  else
    tail -n 20 "$build/fuzz-merge.log" >&2
    echo "run_fuzzer: merging the scratch corpus failed; fuzzing with it as it is" >&2
    rm -rf "$merged"
  fi
fi

# Rounds start short (60 s) so that the total overshoots MIN_OPS by little,
# and grow only while replaying the corpus takes most of a round.
round_seconds=60
total=0
round=0
while [ "$total" -lt "$min_ops" ]; do
  elapsed=$((SECONDS - start))
  if [ "$elapsed" -ge "$max_seconds" ]; then
    echo "run_fuzzer: only $total operations in ${max_seconds}s (wanted $min_ops)" >&2
    exit 1
  fi
  this_round=$round_seconds
  if [ $((max_seconds - elapsed)) -lt "$this_round" ]; then this_round=$((max_seconds - elapsed)); fi
  round=$((round + 1))
  # -runs counts the corpus replay too: allow 20000 mutations beyond it.
  runs=$(($(count_inputs "$scratch") + $(count_inputs tests/fuzz/corpus) + 20000))
  pids=()
  for w in $(seq 1 "$workers"); do
    seed=$(((round - 1) * workers + w))
    "$fuzzer" -seed="$seed" -runs="$runs" -max_total_time="$this_round" -max_len=8192 \
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
  replay_bound=0
  for w in $(seq 1 "$workers"); do
    log="$build/fuzz-round-$round-$w.log"
    ops=$(sed -n 's/^bfc_fuzz_ops: \([0-9]*\)$/\1/p' "$log" | tail -n 1)
    if [ -z "$ops" ]; then
      tail -n 20 "$log" >&2
      echo "run_fuzzer: no operation count in $log" >&2
      exit 1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    # "#N INITED": N executions replayed the corpus before mutation began.
    # A worker stopped by the clock before it finished has no INITED line.
    inited=$(sed -n 's/^#\([0-9]*\)[[:space:]]*INITED.*/\1/p' "$log" | tail -n 1)
    if [ -z "$inited" ] || [ $((2 * inited)) -gt "${execs:-0}" ]; then replay_bound=1; fi
    round_ops=$((round_ops + ops))
    round_execs=$((round_execs + ${execs:-0}))
  done
  total=$((total + round_ops))
  echo "round $round (${this_round}s): $workers worker(s), $round_execs inputs, $round_ops operations (total $total, $((SECONDS - start))s)"
  # A last round cut short by MAX_SECONDS says nothing about the corpus.
  if [ "$replay_bound" = 1 ] && [ "$this_round" = "$round_seconds" ] &&
    [ "$round_seconds" -lt 960 ]; then
    round_seconds=$((2 * round_seconds))
    echo "round $round mostly replayed the corpus: rounds now last ${round_seconds}s"
  fi
done
echo "bfc_fuzz_total_ops: $total in $round round(s) of $workers worker(s), $((SECONDS - start))s; no crash"
