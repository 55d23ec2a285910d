#!/usr/bin/env bash
# The layering rules of docs/design.md, checked on the sources:
#   - each layer includes only the layers below it (public headers by their
#     folder: bfc/replay/, bfc/report/, bfc/planner/, bfc/c_api.h; private
#     headers by theirs: "core/", "replay/", "report/", "planner/", "c_api/");
#   - every definition of an Allocator member is in src/core/allocator*.cc;
#   - the library formats with bfc::internal::Format, never absl::StrFormat.
# Usage: layering_test.sh SOURCE_DIR
set -u
root=${1:?usage: layering_test.sh SOURCE_DIR}
cd "$root" || exit 2
fail=0

# forbid LAYER_DIRS... -- PATTERN: no file under the dirs includes PATTERN.
forbid() {
  local what=$1 pattern=$2
  shift 2
  local hits
  hits=$(grep -rnE "^#include \"($pattern)" "$@" 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "FAIL: $what:"
    echo "$hits"
    fail=1
  fi
}

above_core='bfc/replay/|bfc/report/|bfc/planner/|bfc/c_api\.h|replay/|report/|planner/|c_api/'
forbid "src/core includes a higher layer" "$above_core" src/core include/bfc/*.h include/bfc/internal
forbid "src/replay includes a higher layer" 'bfc/report/|bfc/planner/|bfc/c_api\.h|report/|planner/|c_api/' src/replay include/bfc/replay
forbid "src/report includes planner or c_api" 'bfc/planner/|bfc/c_api\.h|planner/|c_api/' src/report include/bfc/report
forbid "src/planner includes report or c_api" 'bfc/report/|bfc/c_api\.h|report/|c_api/' src/planner include/bfc/planner
forbid "src/c_api includes replay, report or planner" 'bfc/replay/|bfc/report/|bfc/planner/|replay/|report/|planner/' src/c_api
forbid "a public header includes a private one" 'core/|replay/[a-z_]+\.h"|report/json|planner/internal|c_api/' include/bfc/*.h include/bfc/internal

# The Allocator is defined in src/core/allocator*.cc, and inline in the
# private src/core/internal/allocator*_inl.h its hot paths share.
members=$(grep -rlnE '^[A-Za-z_:<>, *&]*\bAllocator::[A-Za-z_~]+\(' src tools include \
  | grep -vE '^src/core/(allocator[a-z_]*\.cc|internal/allocator[a-z_]*_inl\.h)$')
if [ -n "$members" ]; then
  echo "FAIL: Allocator:: members defined outside src/core/allocator*.cc (and internal/allocator*_inl.h):"
  echo "$members"
  fail=1
fi

# The library formats with bfc::internal::Format (bfc/internal/str_format.h):
# absl::StrFormat and absl::StrAppendFormat end the process, with Debian's
# Abseil, when the host runs out of memory inside them.
formats=$(grep -rnE 'absl::Str(Append)?Format\(' src include \
  | grep -v '^include/bfc/internal/str_format.h:')
if [ -n "$formats" ]; then
  echo "FAIL: absl::StrFormat/StrAppendFormat in the library (use bfc::internal::Format):"
  echo "$formats"
  fail=1
fi

if [ "$fail" -eq 0 ]; then
  echo "layering: OK"
fi
exit "$fail"
