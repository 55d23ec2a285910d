// File: bench/main.cc
// The one benchmark binary: synthetic suites register themselves; trace
// suites are registered here from the trace directory, which is
// $BFC_BENCH_TRACE_DIR if set, else the source tree's tests/data (phase files
// from $BFC_BENCH_PHASE_DIR, else bench/data).
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_util.h"

namespace bfc::bench {
void RegisterTraceBenchmarks(const std::vector<PhasedTrace>& traces);
}  // namespace bfc::bench

int main(int argc, char** argv) {
  const char* trace_dir = std::getenv("BFC_BENCH_TRACE_DIR");
  const char* phase_dir = std::getenv("BFC_BENCH_PHASE_DIR");
  static const std::vector<bfc::bench::PhasedTrace> traces =
      bfc::bench::LoadTraces(trace_dir ? trace_dir : BFC_BENCH_TRACE_DIR,
                             phase_dir ? phase_dir : BFC_BENCH_PHASE_DIR);
  bfc::bench::RegisterTraceBenchmarks(traces);
  // Debug checks change timings: every result records the level it ran at.
  benchmark::AddCustomContext("bfc_check_level",
                              std::to_string(BFC_CHECK_LEVEL));
  benchmark::AddCustomContext("bfc_build_type", BFC_BENCH_BUILD_TYPE);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
