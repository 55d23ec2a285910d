// File: bench/pools.h
// -----------------------------------------------------------------------------
//
// RunWithPool<kind>(state, limit, body): builds the pool of that kind, runs
// body(pool), and for bfc attaches the footprint counters (meta_bytes is the
// heap growth from before the pool was built to after the body ran, with the
// pool still alive). CUDA kinds skip with the reason when no device is present.
#ifndef BFC_BENCH_POOLS_H_
#define BFC_BENCH_POOLS_H_

#include <algorithm>
#include <string>
#include <vector>

#include "bench_util.h"
#include "map_best_fit_pool.h"

namespace bfc::bench {

enum class Kind { kBfc, kGlibc, kSub, kCuda, kCudaAsync, kMapBestFit };

// Footprint facts a body reports back.
struct RunInfo {
  size_t peak_live = 0;
};

template <Kind K, typename Body>
void RunWithPool(benchmark::State& state, size_t limit, Body body) {
  if constexpr (K == Kind::kCuda || K == Kind::kCudaAsync) {
    std::string why;
    if (!CudaAvailable(&why)) {
      state.SkipWithError(why.c_str());
      for (auto _ : state) {
      }
      return;
    }
    if constexpr (K == Kind::kCuda) {
      CudaPool pool;
      body(pool);
    } else {
      CudaAsyncPool pool;
      body(pool);
    }
  } else if constexpr (K == Kind::kGlibc) {
    GlibcPool pool;
    body(pool);
  } else if constexpr (K == Kind::kMapBestFit) {
    MapBestFitPool pool(limit);
    body(pool);
  } else if constexpr (K == Kind::kSub) {
    VirtualSubAllocator sub(2 * limit);
    SubPool pool{&sub};
    body(pool);
  } else {
    const size_t heap_before = HeapBytes();
    std::unique_ptr<Allocator> a = MakeBfc(limit);
    BfcPool pool{a.get()};
    const RunInfo info = body(pool);
    const size_t heap_after = HeapBytes();
    SetFootprint(state, *a, info.peak_live,
                 heap_after > heap_before ? heap_after - heap_before : 0);
  }
}

// Fills, warms up (one pass over the pre-generated steps, so growth is done),
// then times steps.
template <typename Pool>
inline size_t RunRandom(benchmark::State& state, Pool& pool,
                        const RandomWorkload& w, std::vector<void*>& live,
                        std::vector<size_t>& live_size) {
  for (size_t i = 0; i < w.k; ++i) {
    live[i] = pool.Alloc(w.initial[i]);
    live_size[i] = w.initial[i];
    if (live[i] == nullptr) {  // e.g. the address space could not be reserved
      for (size_t j = 0; j < i; ++j) pool.Free(live[j], live_size[j]);
      state.SkipWithError("the pool could not hold the initial live set");
      for (auto _ : state) {
      }
      return 0;
    }
  }
  const size_t warm = RandomWarmupSteps(w);
  for (size_t i = 0; i < warm; ++i) RandomStep(pool, w, i, live, live_size);
  size_t i = warm;
  size_t failures = 0;
  for (auto _ : state) {
    RandomStep(pool, w, i, live, live_size);
    ++i;
  }
  for (size_t j = 0; j < w.k; ++j) {
    failures += live[j] == nullptr;
    if (live[j] != nullptr) pool.Free(live[j], live_size[j]);
    live[j] = nullptr;
  }
  if (failures > 0) state.counters["failures"] = double(failures);
  return i;
}

}  // namespace bfc::bench

#endif  // BFC_BENCH_POOLS_H_
