#!/usr/bin/env bash
# tools/trace_capture's tracer on a scripted program (no PyTorch needed): run
# with the tracer preloaded, tests/trace_capture/capture_driver allocates
# through a fake libc10.so and by itself; the trace must hold exactly the
# fake c10's allocations made while recording, each free paired with its
# allocation, the phases where the driver marked them, and bfc-replay must
# replay it with those phases.
# Usage: trace_capture_test.sh TRACER.so DRIVER BFC_REPLAY
set -euo pipefail
tracer=$1 driver=$2 replay=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/meta"
fail() { echo "FAIL: $*" >&2; exit 1; }

LD_PRELOAD=$tracer "$driver" "$dir/t.csv" "$dir/meta/t.phases.csv" "$dir/t.info" \
  || fail "the driver failed"

[[ $(head -1 "$dir/t.csv") == "Thread,Time,Action,Pointer,Size,Stream" ]] \
  || fail "header: $(head -1 "$dir/t.csv")"
# Action and size, in order: the weight, a, b, a's free, c, b's and c's frees,
# the weight's free. Neither the driver's own buffer nor the allocation made
# before recording appears.
got=$(tail -n +2 "$dir/t.csv" | cut -d, -f3,5 | tr '\n' ' ')
want="allocate,4096 allocate,1048576 allocate,300 free,1048576 allocate,1048576 free,300 free,1048576 free,4096 "
[[ $got == "$want" ]] || fail "events: got '$got', want '$want'"
# Every free names a pointer allocated before it and not yet freed.
awk -F, 'NR > 1 && $3 == "allocate" { if ($4 in live) exit 1; live[$4] = $5 }
         NR > 1 && $3 == "free" { if (!($4 in live) || live[$4] != $5) exit 1; delete live[$4] }
         END { for (p in live) exit 1 }' "$dir/t.csv" || fail "frees do not pair with allocations"
got=$(tail -n +2 "$dir/meta/t.phases.csv" | cut -d, -f1,2 | tr '\n' ' ')
want="construct,0 iter0,1 iter1,4 teardown,7 end,8 "
[[ $got == "$want" ]] || fail "phases: got '$got', want '$want'"
grep -q "^records 8$" "$dir/t.info" || fail "info: $(head -3 "$dir/t.info")"

out=$("$replay" --summary-json - "$dir/t.csv") || fail "bfc-replay failed"
grep -q '"events": 8' <<< "$out" || fail "bfc-replay: $out"
grep -q '"iterations": 2' <<< "$out" || fail "bfc-replay found no phases: $out"
echo "PASS"
