#!/usr/bin/env bash
# Instructions and simulated cache misses per allocate-or-free, counted by
# callgrind: the same figures on every run, so an A/B between two builds reads
# cleanly on a noisy shared machine (wall-clock benchmarks: run-benchmarks.sh).
#
#   tools/count-instructions.sh                    # build/
#   tools/count-instructions.sh build-old build    # one column per build
#   WORKLOADS="trace:lstm-train pair256" tools/count-instructions.sh
#
# Each build must have bench/bfc_instruction_count (built here if missing).
# Only the calls inside Measure() count: allocator work plus the replay loop
# around it (a few instructions per op, the same in every build).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }
[ $# -eq 0 ] && set -- build
WORKLOADS=${WORKLOADS:-"trace:lstm-train trace:resnet18-train trace:resnet50-infer trace:transformer-train pair256 random10k random100k"}
for d in "$@"; do
  [ -x "$d/bench/bfc_instruction_count" ] ||
    cmake --build "$d" -j2 --target bfc_instruction_count >/dev/null
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-28s' workload
for d in "$@"; do printf ' | %-30s' "$d: Ir/op, D1 miss/op, LL miss/op"; done
echo
for w in $WORKLOADS; do
  printf '%-28s' "$w"
  for d in "$@"; do
    ops=$(valgrind --tool=callgrind --cache-sim=yes \
      --callgrind-out-file="$tmp/out" --toggle-collect='*Measure*' \
      "$d/bench/bfc_instruction_count" "$w" 2>/dev/null | awk '/^ops/{print $2}')
    awk -v ops="$ops" '
      /^events:/ { for (i = 2; i <= NF; ++i) col[$i] = i }
      /^summary:/ {
        printf " | %8.1f %8.2f %8.2f          ", $col["Ir"] / ops,
          ($col["D1mr"] + $col["D1mw"]) / ops, ($col["DLmr"] + $col["DLmw"]) / ops
      }' "$tmp/out"
  done
  echo
done
