// File: bench/scaling_benchmark.cc
// -----------------------------------------------------------------------------
//
// Scaling/bfc/<K>: the random workload (256 B-1 MiB log-uniform) with K live
// chunks, K = 1e2 ... 1e6, on bfc and on the std::map/std::set best-fit
// reference, on MetadataFloorPool (one access to the freed block's
// out-of-band record per step: the floor any pool whose metadata lives apart
// from the memory pays as K grows) and on the harness alone. With best fit over
// ordered bins, the cost should grow at most logarithmically in K. meta_bytes
// shows host metadata growing with chunks (and nothing else).
#include <vector>

#include "bench_util.h"
#include "pools.h"

namespace bfc::bench {
namespace {

template <Kind K>
void BM_Scaling(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  const RandomWorkload w = MakeRandomWorkload(k, 256, kMiB, 42);
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  RunWithPool<K>(state, 4 * kTiB, [&](auto& pool) {
    const size_t steps = RunRandom(state, pool, w, live, live_size);
    SetOpCounters(state, 2);
    return RunInfo{RandomPeakLive(w, steps)};
  });
}

// Not an allocator: the same workload over MetadataFloorPool.
void BM_ScalingFloor(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  const RandomWorkload w = MakeRandomWorkload(k, 256, kMiB, 42);
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  MetadataFloorPool pool(k);
  RunRandom(state, pool, w, live, live_size);
  SetOpCounters(state, 2);
  if (pool.mismatches() != 0) state.SkipWithError("a record did not match");
}

// The harness alone: a "pool" that hands out one address and keeps nothing,
// so what is left is the workload's own steps (its two arrays of live
// pointers and sizes, indexed at random). The floor above minus this is
// what one access to an out-of-band record costs at each K.
struct HarnessOnlyPool {
  void* Alloc(size_t) { return reinterpret_cast<void*>(uintptr_t{256}); }
  void Free(void* p, size_t) { benchmark::DoNotOptimize(p); }
};
void BM_ScalingHarness(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  const RandomWorkload w = MakeRandomWorkload(k, 256, kMiB, 42);
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  HarnessOnlyPool pool;
  RunRandom(state, pool, w, live, live_size);
  SetOpCounters(state, 2);
}

BENCHMARK_TEMPLATE(BM_Scaling, Kind::kBfc)
    ->Name("BM_Scaling/bfc")
    ->RangeMultiplier(10)
    ->Range(100, 1000000);
BENCHMARK_TEMPLATE(BM_Scaling, Kind::kMapBestFit)
    ->Name("BM_Scaling/map_best_fit")
    ->RangeMultiplier(10)
    ->Range(100, 1000000);
BENCHMARK(BM_ScalingFloor)
    ->Name("BM_Scaling/metadata_floor")
    ->RangeMultiplier(10)
    ->Range(100, 1000000);
BENCHMARK(BM_ScalingHarness)
    ->Name("BM_Scaling/harness_only")
    ->RangeMultiplier(10)
    ->Range(100, 1000000);

}  // namespace
}  // namespace bfc::bench
