#!/usr/bin/env bash
# Builds the parser fuzzers (preset `fuzz`: libFuzzer + ASan + UBSan) in
# BUILD_DIR and runs each for SECONDS on its committed inputs (corpus/ and
# regressions/, read-only here; new inputs go to a scratch corpus). A crash,
# a sanitizer report, a timeout (10 s for one input) or running out of memory
# (2 GiB) fails the script; the input is written to BUILD_DIR/artifacts/:
# copy it into regressions/<target>/ once fixed, and parser_fuzz_inputs_test
# runs it in every build from then on.
#
#   bash tests/fuzz/parsers/run_parser_fuzzers.sh [BUILD_DIR=build-fuzz] [SECONDS=30] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
build=${1:-build-fuzz}
seconds=${2:-30}
shift $(( $# > 2 ? 2 : $# ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(conf trace trace_file phases json plan)
fi

if [ "$build" = build-fuzz ]; then
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz
else
  for t in "${targets[@]}"; do cmake --build "$build" -j2 --target "${t}_fuzzer"; done
fi

here=tests/fuzz/parsers
artifacts="$build/artifacts/"
mkdir -p "$artifacts"
for t in "${targets[@]}"; do
  case "$t" in
    trace_file) inputs=("$here/corpus/trace_file" "$here/corpus/trace") ;;
    plan) inputs=("$here/corpus/trace") ;;
    *) inputs=("$here/corpus/$t") ;;
  esac
  [ -d "$here/regressions/$t" ] && inputs+=("$here/regressions/$t")
  scratch="$build/parser-corpus/$t"
  mkdir -p "$scratch"
  log="$build/parser-fuzz-$t.log"
  if ! "$build/tests/fuzz/${t}_fuzzer" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
        -artifact_prefix="$artifacts$t-" "$scratch" "${inputs[@]}" >"$log" 2>&1; then
    tail -n 60 "$log" >&2
    echo "run_parser_fuzzers: ${t}_fuzzer found a problem; the input is in $artifacts" >&2
    ls -l "$artifacts" >&2
    exit 1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  echo "${t}_fuzzer: ${execs:-?} inputs in ${seconds}s, no problem"
done
