// File: bench/trace_benchmark.cc
// -----------------------------------------------------------------------------
//
// Replays every trace in the trace directory (tests/data/*.csv, copies of
// shared/traces) with phases from bench/data/NAME.phases.csv:
//
//   BM_Trace/NAME/bfc_cold   a fresh allocator per iteration, the whole trace
//                            (growth included); building and destroying the
//                            allocator is not timed
//   BM_Trace/NAME/bfc_warm   steady state: setup phases replayed, iteration
//                            phases replayed once to warm up, then timed
//                            passes over the iteration phases
//   BM_Trace/NAME/glibc_warm, no_pool_warm, map_best_fit_warm,
//   cudaMalloc_warm,
//   cudaMallocAsync_warm     the same warm passes on the baselines
//                            (map_best_fit: the std::map/std::set best-fit
//                            reference, one 64 GiB arena)
//   BM_Trace/NAME/{cold,warm}_{tf,low_footprint}_{sim,addr,pages,vmm}
//                            bfc with each preset over regions that never
//                            merge (as cudaMalloc's): the speed of the
//                            presets compared in one run, with their
//                            footprint and sub-allocator calls (cold: the
//                            whole trace; warm: per pass over the iteration
//                            phases, "sub_calls/pass"). _sim: over the
//                            simulated cudaMalloc, whose own bookkeeping is
//                            timed too; _addr: over bare addresses, the
//                            allocator's work alone; _pages: over 2 MiB
//                            pages that merge and can be given back one by
//                            one (the vmm backend's model, no driver);
//                            _vmm: CudaVmmSubAllocator on the driver
//                            BFC_CUDA_DRIVER_LIBRARY names (registered only
//                            when one with virtual memory loads)
//   BM_Trace/NAME/{cold,warm}_ROW_{sim,addr,pages,vmm}
//                            the same for each row of $BFC_BENCH_CONFS
//                            (ROW=CONF; main.cc)
//   BM_TraceThreads/{bfc,glibc}/threads:N
//                            N = 1, 2, 4, 8 threads on one pool, each
//                            replaying every trace warm, thread i starting
//                            at trace i (the contention curve; on a 2-core
//                            machine 4 and 8 threads measure
//                            oversubscription too)
//
// Ops are pre-parsed; pointers are dense slot indices (no hashing in the
// loop).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "pools.h"

namespace bfc::bench {

namespace {

constexpr size_t kTraceLimit = 64 * kGiB;

void BM_TraceCold(benchmark::State& state, const PhasedTrace* t) {
  std::vector<void*> slots(t->all.num_slots, nullptr);
  int64_t peak_pool = 0, peak_in_use = 0;
  size_t failures = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<Allocator> a = MakeBfc(kTraceLimit);
    BfcPool pool{a.get()};
    state.ResumeTiming();
    failures += ReplayOps(t->all, pool, slots.data());
    state.PauseTiming();
    for (void*& p : slots) {
      if (p != nullptr) a->DeallocateRaw(p);
      p = nullptr;
    }
    const AllocatorStats s = *a->GetStats();
    peak_pool = s.peak_pool_bytes.value_or(0);
    peak_in_use = s.peak_bytes_in_use;
    a.reset();
    state.ResumeTiming();
  }
  SetOpCounters(state, double(t->all.ops.size()));
  state.counters["peak_pool"] = double(peak_pool);
  state.counters["peak_in_use"] = double(peak_in_use);
  state.counters["peak_live"] = double(t->all.peak_live_bytes);
  state.counters["pool/live"] =
      double(peak_pool) / double(t->all.peak_live_bytes);
  if (failures > 0) state.counters["failures"] = double(failures);
}

template <Kind K>
void BM_TraceWarm(benchmark::State& state, const PhasedTrace* t) {
  std::vector<void*> setup_slots(t->all.num_slots, nullptr);
  std::vector<void*> slots(t->all.num_slots, nullptr);
  RunWithPool<K>(state, kTraceLimit, [&](auto& pool) {
    ReplayOps(t->prefix, pool, setup_slots.data());
    ReplayOps(t->iterations, pool, slots.data());  // warm-up pass
    size_t failures = 0;
    for (auto _ : state) {
      failures += ReplayOps(t->iterations, pool, slots.data());
    }
    if (failures > 0) state.counters["failures"] = double(failures);
    SetOpCounters(state, double(t->iterations.ops.size()));
    for (size_t i = 0; i < setup_slots.size(); ++i) {
      if (setup_slots[i] != nullptr) pool.Free(setup_slots[i], 0);
      setup_slots[i] = nullptr;
    }
    return RunInfo{t->all.peak_live_bytes};
  });
}

int64_t SubAllocatorCalls(const Allocator& a) {
  const AllocatorStats s = *a.GetStats();
  return s.num_extends + s.num_regions_released + s.num_partial_releases;
}

void BM_TracePresetCold(benchmark::State& state, const PhasedTrace* t,
                        const TraceConf* conf, PresetBacking backing) {
  std::vector<void*> slots(t->all.num_slots, nullptr);
  int64_t peak_pool = 0, calls = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::unique_ptr<Allocator> a =
        MakeBfcWithOptions(kTraceLimit, conf->options, backing);
    if (a == nullptr) {
      state.SkipWithError("backing unavailable");
      return;
    }
    BfcPool pool{a.get()};
    state.ResumeTiming();
    ReplayOps(t->all, pool, slots.data());
    state.PauseTiming();
    peak_pool = a->GetStats()->peak_pool_bytes.value_or(0);
    calls = SubAllocatorCalls(*a);
    for (void*& p : slots) {
      if (p != nullptr) a->DeallocateRaw(p);
      p = nullptr;
    }
    a.reset();
    state.ResumeTiming();
  }
  SetOpCounters(state, double(t->all.ops.size()));
  state.counters["pool/live"] =
      double(peak_pool) / double(t->all.peak_live_bytes);
  state.counters["sub_calls"] = double(calls);
}

void BM_TracePresetWarm(benchmark::State& state, const PhasedTrace* t,
                        const TraceConf* conf, PresetBacking backing) {
  std::vector<void*> setup_slots(t->all.num_slots, nullptr);
  std::vector<void*> slots(t->all.num_slots, nullptr);
  std::unique_ptr<Allocator> a =
      MakeBfcWithOptions(kTraceLimit, conf->options, backing);
  if (a == nullptr) {
    state.SkipWithError("backing unavailable");
    return;
  }
  BfcPool pool{a.get()};
  ReplayOps(t->prefix, pool, setup_slots.data());
  ReplayOps(t->iterations, pool, slots.data());  // warm-up pass
  const int64_t calls_before = SubAllocatorCalls(*a);
  int64_t passes = 0;
  for (auto _ : state) {
    ReplayOps(t->iterations, pool, slots.data());
    ++passes;
  }
  SetOpCounters(state, double(t->iterations.ops.size()));
  state.counters["sub_calls/pass"] =
      double(SubAllocatorCalls(*a) - calls_before) /
      double(std::max<int64_t>(passes, 1));
  state.counters["pool/live"] =
      double(a->GetStats()->peak_pool_bytes.value_or(0)) /
      double(t->all.peak_live_bytes);
  for (void* p : setup_slots) {
    if (p != nullptr) a->DeallocateRaw(p);
  }
}

// One allocator shared by every thread of BM_TraceThreads, built by its
// Setup hook (which cannot capture).
std::unique_ptr<Allocator> g_shared_trace_pool;
void SetupSharedTracePool(const benchmark::State&) {
  g_shared_trace_pool = MakeBfc(kTraceLimit);
}
void TeardownSharedTracePool(const benchmark::State&) {
  g_shared_trace_pool.reset();
}

// Every thread replays every trace's iteration phases in turn (warm, as
// BM_TraceWarm), thread i starting at trace i mod N, all on one pool: bfc's
// shared allocator, or glibc (whose arenas are per thread). Each thread
// does the same work, so no thread idles while others finish. Counters, from
// each thread's own clock: ns/op/thread, the wall time per op one thread
// sees (averaged over threads), and Mops/s, the threads' rates summed (the
// throughput of all of them together).
template <Kind K>
void BM_TraceThreads(benchmark::State& state,
                     const std::vector<PhasedTrace>* traces) {
  const size_t n = traces->size();
  const size_t first = static_cast<size_t>(state.thread_index()) % n;
  std::vector<std::vector<void*>> setup_slots(n), slots(n);
  double ops = 0;
  for (size_t i = 0; i < n; ++i) {
    setup_slots[i].assign((*traces)[i].all.num_slots, nullptr);
    slots[i].assign((*traces)[i].all.num_slots, nullptr);
    ops += double((*traces)[i].iterations.ops.size());
  }
  double wall_ns = 0, done_ops = 0;
  auto run = [&](auto& pool) {
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      ReplayOps((*traces)[i].prefix, pool, setup_slots[i].data());
      ReplayOps((*traces)[i].iterations, pool, slots[i].data());  // warm-up
    }
    size_t failures = 0;
    size_t passes = 0;
    std::chrono::steady_clock::time_point start, end;
    for (auto _ : state) {
      if (passes++ == 0) start = std::chrono::steady_clock::now();
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (first + k) % n;
        failures += ReplayOps((*traces)[i].iterations, pool, slots[i].data());
      }
      // Read at the end of each pass, not after the loop: the loop's end
      // waits at a barrier for the slowest thread, which a clock read there
      // counted as this thread's work.
      end = std::chrono::steady_clock::now();
    }
    wall_ns = std::chrono::duration<double, std::nano>(end - start).count();
    done_ops = ops * double(passes);
    for (std::vector<void*>& v : setup_slots) {
      for (void*& p : v) {
        if (p != nullptr) pool.Free(p, 0);
        p = nullptr;
      }
    }
    if (failures > 0) state.counters["failures"] = double(failures);
  };
  if constexpr (K == Kind::kBfc) {
    BfcPool pool{g_shared_trace_pool.get()};
    run(pool);
  } else {
    GlibcPool pool;
    run(pool);
  }
  // Each thread's own clock from the start of its first pass to the end of
  // its last; the threads start together (the benchmark loop's barrier) and
  // run the same passes.
  const double ns_per_op = done_ops > 0 ? wall_ns / done_ops : 0;
  state.counters["ns/op/thread"] =
      benchmark::Counter(ns_per_op, benchmark::Counter::kAvgThreads);
  state.counters["Mops/s"] = benchmark::Counter(
      ns_per_op > 0 ? 1e3 / ns_per_op : 0, benchmark::Counter::kDefaults);
}

}  // namespace

// Called from main: registers one benchmark per trace and pool, and the
// preset rows for each of `confs` (the presets tf and low_footprint, then
// the user's BFC_BENCH_CONFS).
void RegisterTraceBenchmarks(const std::vector<PhasedTrace>& traces,
                             const std::vector<TraceConf>& confs) {
  // The vmm rows need a CUDA driver with virtual memory (a GPU's, or the
  // fake one through BFC_CUDA_DRIVER_LIBRARY).
  const bool vmm_available = MakeBfcPreset(kMinAllocationSize << 12, "tf",
                                           PresetBacking::kVmm) != nullptr;
  if (!traces.empty()) {
    benchmark::RegisterBenchmark("BM_TraceThreads/bfc",
                                 BM_TraceThreads<Kind::kBfc>, &traces)
        ->Setup(SetupSharedTracePool)
        ->Teardown(TeardownSharedTracePool)
        ->ThreadRange(1, 8)
        ->UseRealTime();
    benchmark::RegisterBenchmark("BM_TraceThreads/glibc",
                                 BM_TraceThreads<Kind::kGlibc>, &traces)
        ->ThreadRange(1, 8)
        ->UseRealTime();
  }
  for (const PhasedTrace& t : traces) {
    const std::string base = "BM_Trace/" + t.name + "/";
    benchmark::RegisterBenchmark((base + "bfc_cold").c_str(), BM_TraceCold, &t);
    benchmark::RegisterBenchmark((base + "bfc_warm").c_str(),
                                 BM_TraceWarm<Kind::kBfc>, &t);
    benchmark::RegisterBenchmark((base + "glibc_warm").c_str(),
                                 BM_TraceWarm<Kind::kGlibc>, &t);
    benchmark::RegisterBenchmark((base + "no_pool_warm").c_str(),
                                 BM_TraceWarm<Kind::kSub>, &t);
    benchmark::RegisterBenchmark((base + "map_best_fit_warm").c_str(),
                                 BM_TraceWarm<Kind::kMapBestFit>, &t);
    benchmark::RegisterBenchmark((base + "cudaMalloc_warm").c_str(),
                                 BM_TraceWarm<Kind::kCuda>, &t);
    benchmark::RegisterBenchmark((base + "cudaMallocAsync_warm").c_str(),
                                 BM_TraceWarm<Kind::kCudaAsync>, &t);
    // _sim: over the simulated cudaMalloc (its bookkeeping is timed too, a
    // small stand-in for a real cudaMalloc's cost); _addr: over addresses
    // only, the allocator's own work.
    for (const TraceConf& conf : confs) {
      for (const auto& [suffix, backing] :
           {std::pair<const char*, PresetBacking>{
                "_sim", PresetBacking::kSimCudaMalloc},
            {"_addr", PresetBacking::kAddressOnly},
            {"_pages", PresetBacking::kPages},
            {"_vmm", PresetBacking::kVmm}}) {
        if (backing == PresetBacking::kVmm && !vmm_available) continue;
        benchmark::RegisterBenchmark(
            (base + "cold_" + conf.name + suffix).c_str(), BM_TracePresetCold,
            &t, &conf, backing);
        benchmark::RegisterBenchmark(
            (base + "warm_" + conf.name + suffix).c_str(), BM_TracePresetWarm,
            &t, &conf, backing);
      }
    }
  }
}

}  // namespace bfc::bench
