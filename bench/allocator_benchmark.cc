// File: bench/allocator_benchmark.cc
// -----------------------------------------------------------------------------
//
// Synthetic workloads, each on bfc and on the baselines (glibc aligned_alloc,
// the sub-allocator called directly, the std::map/std::set best-fit
// reference of map_best_fit_pool.h, cudaMalloc, cudaMallocAsync):
//
//   Pair/<size>        allocate + free of one fixed size (256 B, 64 KiB,
//                      16 MiB)
//   Batch/<n>          allocate n (256 B-1 MiB log-uniform), then free them
//   Random/<K>/<hi>    RMM-style: K live allocations, each step frees a
//                      random one and allocates a log-uniform 256 B-hi size
//   RandomThreads      Random/10000/1MiB with the K slots split over 1, 2, 4
//                      threads sharing one pool
//   Metadata/<pool>    host metadata with 100k live chunks in a 1 GiB and a
//                      1 TiB pool (no growth: one region of the whole pool)
//
// ns/op counts every allocate and every free as one op.
#include <atomic>
#include <vector>

#include "bench_util.h"
#include "pools.h"

namespace bfc::bench {
namespace {

constexpr size_t kLimit = 4 * kTiB;  // virtual: never touched

template <Kind K>
void BM_Pair(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  RunWithPool<K>(state, kLimit, [&](auto& pool) {
    for (auto _ : state) {
      void* p = pool.Alloc(n);
      benchmark::DoNotOptimize(p);
      pool.Free(p, n);
    }
    SetOpCounters(state, 2);
    return RunInfo{n};
  });
}

template <Kind K>
void BM_Batch(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  const std::vector<size_t> sizes = LogUniformSizes(n, 256, kMiB, 7);
  std::vector<void*> ptrs(n);
  size_t live = 0;
  for (size_t s : sizes) live += s;
  RunWithPool<K>(state, kLimit, [&](auto& pool) {
    for (auto _ : state) {
      for (size_t i = 0; i < n; ++i) ptrs[i] = pool.Alloc(sizes[i]);
      for (size_t i = 0; i < n; ++i) pool.Free(ptrs[i], sizes[i]);
    }
    SetOpCounters(state, 2.0 * n);
    return RunInfo{live};
  });
}

template <Kind K>
void BM_Random(benchmark::State& state) {
  const size_t k = static_cast<size_t>(state.range(0));
  const size_t hi = static_cast<size_t>(state.range(1));
  const RandomWorkload w = MakeRandomWorkload(k, 256, hi, 42);
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  RunWithPool<K>(state, kLimit, [&](auto& pool) {
    const size_t steps = RunRandom(state, pool, w, live, live_size);
    SetOpCounters(state, 2);
    return RunInfo{RandomPeakLive(w, steps)};
  });
}

// Threads share one pool, built once by the Setup hook.
std::unique_ptr<Allocator> g_shared;
void SetupShared(const benchmark::State&) { g_shared = MakeBfc(kLimit); }
void TeardownShared(const benchmark::State&) { g_shared.reset(); }

template <Kind K>
void BM_RandomThreads(benchmark::State& state) {
  const size_t k = 10000 / static_cast<size_t>(state.threads());
  const RandomWorkload w =
      MakeRandomWorkload(k, 256, kMiB, 100 + state.thread_index());
  std::vector<void*> live(k);
  std::vector<size_t> live_size(k);
  if constexpr (K == Kind::kBfc) {
    BfcPool pool{g_shared.get()};
    RunRandom(state, pool, w, live, live_size);
  } else {
    GlibcPool pool;
    RunRandom(state, pool, w, live, live_size);
  }
  // Google Benchmark sums the threads' counters and iterations and divides
  // by the mean wall time per thread. So a value of 2 (ops per iteration),
  // averaged over threads, gives wall / (2 x all threads' iterations): the
  // time per operation of all threads together ("agg time/op"). What one
  // thread sees per operation, its wall time over its own operations, is T
  // times that: 2 / T per thread gives wall / (2 x one thread's iterations).
  // (From a review: "time/op" was the aggregate, published as per-thread
  // latency.)
  const double threads = static_cast<double>(state.threads());
  const auto per_op = benchmark::Counter::kIsIterationInvariantRate |
                      benchmark::Counter::kAvgThreads |
                      benchmark::Counter::kInvert;
  state.counters["time/op"] = benchmark::Counter(2 / threads, per_op);
  state.counters["agg time/op"] = benchmark::Counter(2, per_op);
}

void BM_Metadata(benchmark::State& state) {
  const size_t pool_bytes = static_cast<size_t>(state.range(0));
  constexpr size_t kLive = 100000;
  const std::vector<size_t> sizes = LogUniformSizes(kLive, 256, 4 * kKiB, 3);
  std::vector<void*> ptrs(2 * kLive);
  // The peak: all 200k allocations (each size twice) before any is freed
  // (from a review: it summed the 100k sizes once, half the real peak).
  size_t live = 0;
  for (size_t s : sizes) live += 2 * s;
  for (auto _ : state) {
    const size_t heap_before = HeapBytes();
    Allocator::Options options;
    options.allow_growth = false;
    Allocator a(std::make_unique<VirtualSubAllocator>(pool_bytes), pool_bytes,
                "meta", options);
    // 200k chunks, then every other one freed: 100k live chunks separated by
    // 100k free ones, the worst case for the bins.
    for (size_t i = 0; i < 2 * kLive; ++i) {
      ptrs[i] = a.AllocateRaw(256, sizes[i / 2]);
    }
    for (size_t i = 1; i < 2 * kLive; i += 2) a.DeallocateRaw(ptrs[i]);
    const size_t heap_after = HeapBytes();
    state.counters["meta_bytes"] = double(heap_after - heap_before);
    state.counters["live_chunks"] = double(kLive);
    SetFootprint(state, a, live, heap_after - heap_before);
  }
}

// A device whose streams finish their work `lag` events late: an event is
// complete once `lag` more have been recorded after it. Waits and host
// synchronizations cost nothing.
class LaggingStreamOps : public StreamOps {
 public:
  explicit LaggingStreamOps(uintptr_t lag) : lag_(lag) {}
  absl::StatusOr<Event> RecordEvent(StreamId) override {
    return reinterpret_cast<Event>(++recorded_);
  }
  absl::StatusOr<bool> QueryEvent(Event event) override {
    return reinterpret_cast<uintptr_t>(event) + lag_ <= recorded_;
  }
  absl::Status StreamWaitEvent(StreamId, Event) override {
    return absl::OkStatus();
  }
  absl::Status SynchronizeEvent(Event) override { return absl::OkStatus(); }
  void ReleaseEvent(Event) override {}

 private:
  const uintptr_t lag_;
  uintptr_t recorded_ = 0;
};

// Two streams: a pool holding `free_chunks` clean free chunks (between live
// ones), then each step frees a chunk on stream A, whose work is still
// running, and allocates the same size on stream B. B finds no chunk it may
// use yet, so every allocation takes the cross-stream path: look at what
// completed (deferred merges included), then take A's chunk behind a wait.
// What that path costs beside the free chunks nobody fenced is the point.
void BM_CrossStreamMiss(benchmark::State& state) {
  const size_t free_chunks = static_cast<size_t>(state.range(0));
  constexpr size_t kPool = size_t{1} << 30;
  Allocator::Options options;
  options.allow_growth = false;
  Allocator a(std::make_unique<VirtualSubAllocator>(2 * kPool), kPool,
              "streams", options);
  if (!a.SetStreamOps(std::make_unique<LaggingStreamOps>(4)).ok()) {
    state.SkipWithError("SetStreamOps failed");
    return;
  }
  const StreamId stream_a = reinterpret_cast<StreamId>(1);
  const StreamId stream_b = reinterpret_cast<StreamId>(2);
  // Clean free chunks of 256 B-1 KiB between live ones, freed on the
  // implicit stream before any other stream exists.
  std::vector<void*> keep(2 * free_chunks + 1);
  size_t used = 0;
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = a.AllocateRaw(256, 256 * (1 + i % 4));
    used += 256 * (1 + i % 4);
  }
  for (size_t i = 1; i < keep.size(); i += 2) a.DeallocateRaw(keep[i]);
  constexpr size_t kStep = 64 * kKiB;  // larger than every clean chunk
  absl::StatusOr<void*> p = a.AllocateOnStream(stream_a, kStep);
  // The rest of the pool stays in use: A's chunk is the only one that fits.
  void* filler = a.AllocateRaw(256, kPool - used - kStep);
  if (!p.ok() || filler == nullptr) {
    state.SkipWithError("setting up the pool failed");
    return;
  }
  for (auto _ : state) {
    if (!a.DeallocateOnStream(*p, stream_a).ok()) {
      state.SkipWithError("free failed");
      return;
    }
    p = a.AllocateOnStream(stream_b, kStep);
    if (!p.ok() || !a.DeallocateOnStream(*p, stream_b).ok()) {
      state.SkipWithError("cross-stream allocation failed");
      return;
    }
    p = a.AllocateOnStream(stream_a, kStep);
    if (!p.ok()) {
      state.SkipWithError("allocation failed");
      return;
    }
  }
  // Four calls per iteration: free on A, allocate and free on B, allocate on
  // A (from a review: counted as three, every time/op read 4/3 too high).
  state.counters["time/op"] =
      benchmark::Counter(4, benchmark::Counter::kIsIterationInvariantRate |
                                benchmark::Counter::kInvert);
  state.counters["free_chunks"] = double(free_chunks);
  (void)a.DeallocateOnStream(*p, stream_a);
  a.DeallocateRaw(filler);
  for (size_t i = 0; i < keep.size(); i += 2) a.DeallocateRaw(keep[i]);
}

#define BFC_ALL_KINDS(BM, ...)                                              \
  BENCHMARK_TEMPLATE(BM, Kind::kBfc)->Name(#BM "/bfc") __VA_ARGS__;         \
  BENCHMARK_TEMPLATE(BM, Kind::kGlibc)->Name(#BM "/glibc") __VA_ARGS__;     \
  BENCHMARK_TEMPLATE(BM, Kind::kSub)->Name(#BM "/no_pool") __VA_ARGS__;     \
  BENCHMARK_TEMPLATE(BM, Kind::kMapBestFit)                                 \
      ->Name(#BM "/map_best_fit") __VA_ARGS__;                              \
  BENCHMARK_TEMPLATE(BM, Kind::kCuda)->Name(#BM "/cudaMalloc") __VA_ARGS__; \
  BENCHMARK_TEMPLATE(BM, Kind::kCudaAsync)                                  \
      ->Name(#BM "/cudaMallocAsync") __VA_ARGS__

BFC_ALL_KINDS(BM_Pair, ->Arg(256)->Arg(64 << 10)->Arg(16 << 20));
BFC_ALL_KINDS(BM_Batch, ->Arg(100)->Arg(1000)->Arg(10000));
BFC_ALL_KINDS(BM_Random, ->Args({100, 64 << 20})
                             ->Args({10000, 64 << 20})
                             ->Args({100000, 64 << 20})
                             ->Args({100, 1 << 20})
                             ->Args({10000, 1 << 20})
                             ->Args({100000, 1 << 20}));
BENCHMARK_TEMPLATE(BM_RandomThreads, Kind::kBfc)
    ->Name("BM_RandomThreads/bfc")
    ->Setup(SetupShared)
    ->Teardown(TeardownShared)
    ->ThreadRange(1, 4)
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_RandomThreads, Kind::kGlibc)
    ->Name("BM_RandomThreads/glibc")
    ->ThreadRange(1, 4)
    ->UseRealTime();
BENCHMARK(BM_CrossStreamMiss)->Arg(0)->Arg(1000)->Arg(100000);
BENCHMARK(BM_Metadata)
    ->Arg(int64_t{1} << 30)
    ->Arg(int64_t{1} << 40)
    ->Iterations(1);

}  // namespace
}  // namespace bfc::bench
