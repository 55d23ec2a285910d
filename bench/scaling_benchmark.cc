// File: bench/scaling_benchmark.cc
// -----------------------------------------------------------------------------
//
// Scaling/bfc/<K>: the random workload (256 B-1 MiB log-uniform) with K live
// chunks, K = 1e2 ... 1e6. With best fit over ordered bins, the cost should
// grow at most logarithmically in K. meta_bytes shows host metadata growing
// with chunks (and nothing else).
#include <vector>

#include "bench_util.h"
#include "pools.h"

namespace bfc::bench {
namespace {

void BM_Scaling(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  const RandomWorkload w = MakeRandomWorkload(k, 256, kMiB, 42);
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  RunWithPool<Kind::kBfc>(state, 4 * kTiB, [&](auto& pool) {
    const size_t steps = RunRandom(state, pool, w, live, live_size);
    SetOpCounters(state, 2);
    return RunInfo{RandomPeakLive(w, steps)};
  });
}

BENCHMARK(BM_Scaling)
    ->Name("BM_Scaling/bfc")
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);

}  // namespace
}  // namespace bfc::bench
