// File: bench/bench_util.cc
#include "bench_util.h"

#include <dirent.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#ifdef BFC_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "bfc/cuda_vmm_sub_allocator.h"
#endif

namespace bfc::bench {

size_t HeapBytes() {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

std::unique_ptr<Allocator> MakeBfcPreset(size_t limit, const char* preset,
                                         bool address_only) {
  return MakeBfcPreset(limit, preset,
                       address_only ? PresetBacking::kAddressOnly
                                    : PresetBacking::kSimCudaMalloc);
}

std::unique_ptr<Allocator> MakeBfcPreset(size_t limit, const char* preset,
                                         PresetBacking backing) {
  Allocator::Options options;
  if (!ApplyAllocatorPreset(options, preset).ok()) std::abort();
  return MakeBfcWithOptions(limit, options, backing);
}

std::unique_ptr<Allocator> MakeBfcWithOptions(size_t limit,
                                              const AllocatorOptions& options,
                                              PresetBacking backing) {
  if (backing == PresetBacking::kAddressOnly) {
    return std::make_unique<Allocator>(
        std::make_unique<AddressOnlySubAllocator>(kMinAllocationSize), limit,
        "bench", options);
  }
  if (backing == PresetBacking::kPages) {
    VirtualSubAllocator::Options pages;
    pages.partial_free_bytes = size_t{2} << 20;
    return std::make_unique<Allocator>(
        std::make_unique<VirtualSubAllocator>(2 * limit, pages), limit, "bench",
        options);
  }
  if (backing == PresetBacking::kVmm) {
#ifdef BFC_HAVE_CUDA
    CudaVmmSubAllocator::Options vmm;
    vmm.address_bytes = 2 * limit;
    auto sub = std::make_unique<CudaVmmSubAllocator>(0, vmm);
    if (!sub->Availability().ok()) return nullptr;
    return std::make_unique<Allocator>(std::move(sub), limit, "bench", options);
#else
    return nullptr;
#endif
  }
  VirtualSubAllocator::Options no_merge;
  no_merge.supports_coalescing = false;
  no_merge.gap_bytes = kMinAllocationSize;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(2 * limit, no_merge), limit,
      "bench", options);
}

std::unique_ptr<Allocator> MakeBfc(size_t limit, bool growth) {
  Allocator::Options options;
  options.allow_growth = growth;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(2 * limit), limit, "bench",
      options);
}

std::vector<size_t> LogUniformSizes(size_t n, size_t lo, size_t hi,
                                    uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(std::log(double(lo)),
                                           std::log(double(hi)));
  std::vector<size_t> out(n);
  for (size_t& s : out) {
    s = std::clamp<size_t>(static_cast<size_t>(std::exp(u(rng))), lo, hi);
  }
  return out;
}

RandomWorkload MakeRandomWorkload(size_t k, size_t lo, size_t hi,
                                  uint64_t seed) {
  RandomWorkload w;
  w.k = k;
  w.initial = LogUniformSizes(k, lo, hi, seed);
  constexpr size_t kSteps = size_t{1} << 20;
  w.size = LogUniformSizes(kSteps, lo, hi, seed + 1);
  std::mt19937_64 rng(seed + 2);
  std::uniform_int_distribution<uint32_t> pick(0, static_cast<uint32_t>(k - 1));
  w.idx.resize(kSteps);
  for (uint32_t& i : w.idx) i = pick(rng);
  return w;
}

size_t RandomPeakLive(const RandomWorkload& w, size_t steps) {
  std::vector<size_t> live = w.initial;
  size_t bytes = 0;
  for (size_t s : live) bytes += s;
  size_t peak = bytes;
  const size_t mask = w.idx.size() - 1;
  for (size_t i = 0; i < steps; ++i) {
    size_t& slot = live[w.idx[i & mask]];
    bytes -= slot;
    slot = w.size[i & mask];
    bytes += slot;
    peak = std::max(peak, bytes);
  }
  return peak;
}

// --- CUDA baselines ----------------------------------------------------------

#ifdef BFC_HAVE_CUDA
bool CudaAvailable(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no CUDA device: cudaGetDeviceCount: ") +
           cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device: cudaGetDeviceCount reports 0 devices";
    return false;
  }
  return true;
}
void* CudaPool::Alloc(size_t n) {
  void* p = nullptr;
  return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;
}
void CudaPool::Free(void* p, size_t) { cudaFree(p); }
void* CudaAsyncPool::Alloc(size_t n) {
  void* p = nullptr;
  return cudaMallocAsync(&p, n, cudaStream_t{}) == cudaSuccess ? p : nullptr;
}
void CudaAsyncPool::Free(void* p, size_t) { cudaFreeAsync(p, cudaStream_t{}); }
#else
bool CudaAvailable(std::string* why) {
  *why = "no CUDA device: bfc was built without CUDA (BFC_HAVE_CUDA is off)";
  return false;
}
void* CudaPool::Alloc(size_t) { return nullptr; }
void CudaPool::Free(void*, size_t) {}
void* CudaAsyncPool::Alloc(size_t) { return nullptr; }
void CudaAsyncPool::Free(void*, size_t) {}
#endif

// --- Traces ------------------------------------------------------------------

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// [first event of the first iterN phase, first event of the phase after the
// last iterN phase). False if the file is missing or has no iteration phase.
bool ReadIterationRange(const std::string& path, size_t* first, size_t* end) {
  std::ifstream in(path);
  if (!in) return false;
  std::string line;
  std::getline(in, line);  // header: Phase,FirstEvent,Time
  bool in_iter = false, seen = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string phase, event;
    std::getline(fields, phase, ',');
    std::getline(fields, event, ',');
    const size_t ev = std::stoull(event);
    const bool iter = phase.rfind("iter", 0) == 0;
    if (iter && !seen) *first = ev;
    if (!iter && in_iter) *end = ev;
    seen |= iter;
    in_iter = iter;
  }
  return seen && !in_iter && *end > *first;
}

}  // namespace

std::vector<PhasedTrace> LoadTraces(const std::string& trace_dir,
                                    const std::string& phase_dir) {
  std::vector<std::string> files;
  if (DIR* d = opendir(trace_dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (EndsWith(e->d_name, ".csv")) files.push_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  std::vector<PhasedTrace> out;
  for (const std::string& f : files) {
    absl::StatusOr<Trace> trace = ReadTrace(trace_dir + "/" + f);
    if (!trace.ok()) {
      std::fprintf(stderr, "bench: skipping %s: %s\n", f.c_str(),
                   trace.status().ToString().c_str());
      continue;
    }
    absl::StatusOr<CompiledTrace> all = CompileTrace(*trace);
    if (!all.ok()) {
      std::fprintf(stderr, "bench: skipping %s: %s\n", f.c_str(),
                   all.status().ToString().c_str());
      continue;
    }
    PhasedTrace t;
    t.name = all->name;
    if (!ReadIterationRange(phase_dir + "/" + t.name + ".phases.csv",
                            &t.first_iter_event, &t.end_iter_event)) {
      std::fprintf(stderr, "bench: skipping %s: no %s/%s.phases.csv\n",
                   f.c_str(), phase_dir.c_str(), t.name.c_str());
      continue;
    }
    t.all = *std::move(all);
    t.prefix.name = t.iterations.name = t.name;
    t.prefix.num_slots = t.iterations.num_slots = t.all.num_slots;
    std::vector<uint8_t> live_in_range(t.all.num_slots, 0);
    std::vector<size_t> range_size(t.all.num_slots, 0);
    for (const ReplayOp& op : t.all.ops) {
      if (op.event_index < t.first_iter_event) {
        t.prefix.ops.push_back(op);
      } else if (op.event_index < t.end_iter_event) {
        if (op.kind == ReplayOp::Kind::kAllocate) {
          live_in_range[op.slot] = 1;
          range_size[op.slot] = op.size;
          t.iterations.ops.push_back(op);
        } else if (live_in_range[op.slot]) {
          live_in_range[op.slot] = 0;
          t.iterations.ops.push_back(op);
        }
      }
    }
    for (uint32_t s = 0; s < t.all.num_slots; ++s) {
      if (!live_in_range[s]) continue;
      ReplayOp op;
      op.kind = ReplayOp::Kind::kFree;
      op.slot = s;
      op.size = range_size[s];
      op.event_index = t.end_iter_event;
      t.iterations.ops.push_back(op);
    }
    out.push_back(std::move(t));
  }
  return out;
}

// --- Counters ----------------------------------------------------------------

void SetOpCounters(benchmark::State& state, double ops_per_iteration) {
  // A rate of ops per second, inverted: seconds per op (printed as ns).
  state.counters["time/op"] = benchmark::Counter(
      ops_per_iteration, benchmark::Counter::kIsIterationInvariantRate |
                             benchmark::Counter::kInvert);
}

void SetFootprint(benchmark::State& state, const Allocator& a, size_t peak_live,
                  size_t meta_bytes) {
  const std::optional<AllocatorStats> s = a.GetStats();
  const double peak_pool = s ? double(s->peak_pool_bytes.value_or(0)) : 0;
  state.counters["in_use"] = s ? double(s->bytes_in_use) : 0;
  state.counters["peak_pool"] = peak_pool;
  state.counters["peak_live"] = double(peak_live);
  state.counters["pool/live"] = peak_live ? peak_pool / double(peak_live) : 0;
  state.counters["meta_bytes"] = double(meta_bytes);
  state.counters["MetadataBytes()"] = double(a.MetadataBytes());
}

}  // namespace bfc::bench
