// File: tests/fuzz/parsers/plan_fuzzer.cc
// bfc-plan's path: ParseTrace, CompileTrace, PlanTrace with every strategy
// (objects and offsets, unrounded and 256-byte sizes). Every plan must pass
// ValidateAssignment (a row with an Internal status did not) and none may
// beat the lower bound.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/planner/plan_report.h"
#include "bfc/replay/trace.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bfc::Trace> trace = bfc::ParseTrace(text, "fuzz");
  if (!trace.ok()) return 0;
  bfc::CompileOptions co;
  co.skip_unknown_frees = true;
  absl::StatusOr<bfc::CompiledTrace> compiled = bfc::CompileTrace(*trace, co);
  if (!compiled.ok()) return 0;
  for (size_t round : {size_t{1}, size_t{256}}) {
    bfc::planner::PlanOptions o;
    o.round_sizes_to = round;
    o.base_addr_align_bytes = round == 1 ? 1 : 512;
    o.max_quadratic_tensors = 300;  // keeps each run short
    absl::StatusOr<bfc::planner::PlanReport> report =
        bfc::planner::PlanTrace(*compiled, o);
    if (!report.ok()) continue;
    (void)bfc::planner::FormatPlanReport(*report, 12345);
    for (const auto& row : report->results) {
      const char* name = bfc::planner::MemoryStrategyName(row.strategy);
      if (row.status.code() == absl::StatusCode::kInternal) {
        fprintf(stderr, "plan_fuzzer: %s (offsets %d) is invalid: %s\n", name,
                row.offsets, std::string(row.status.message()).c_str());
        abort();
      }
      if (row.status.ok() && row.total_bytes < report->lower_bound_bytes) {
        fprintf(stderr, "plan_fuzzer: %s (offsets %d) beats the lower bound\n",
                name, row.offsets);
        abort();
      }
    }
  }
  return 0;
}
