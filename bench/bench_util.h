// File: bench/bench_util.h
// -----------------------------------------------------------------------------
//
// Shared pieces of the benchmark suites: the pools under test (bfc and the
// baselines: glibc, the sub-allocator called directly, cudaMalloc and
// cudaMallocAsync), workload generators, pre-parsed traces with their phases,
// and the footprint counters every table carries:
//
//   bytes_in_use   bytes held by live allocations at the end (pool's view)
//   peak_pool      peak bytes the pool took from its sub-allocator
//   peak_live      peak bytes the program had live (requested sizes)
//   pool/live      peak_pool / peak_live (1.0 = no waste)
//   meta_bytes     host heap the allocator holds for its own bookkeeping,
//                  measured (mallinfo2 deltas around building and filling it)
//   MetadataBytes() the allocator's own count of the same, which also holds
//                  its chunk table: since pass 8 (bench/README.md) that lives
//                  in a range of its own, outside the heap mallinfo2 sees
//
// Everything that must not touch memory runs on a VirtualSubAllocator.
#ifndef BFC_BENCH_BENCH_UTIL_H_
#define BFC_BENCH_BENCH_UTIL_H_

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/replay/trace.h"
#include "bfc/sub_allocator.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"

namespace bfc::bench {

inline constexpr size_t kTiB = size_t{1} << 40;

// Bytes malloc currently hands out (heap + mmapped chunks), all arenas.
size_t HeapBytes();

// A bfc::Allocator over a VirtualSubAllocator of `limit` bytes (x2 address
// space). Growth on unless `growth` is false (then one region of `limit`).
std::unique_ptr<Allocator> MakeBfc(size_t limit, bool growth = true);
// Addresses only: never-touched ranges from a bump pointer, nothing mapped
// and no bookkeeping, so a pool over it costs only the allocator's own work
// (valgrind also cannot reserve the address space VirtualSubAllocator
// takes). Contiguous and coalescable like the virtual sub-allocator's
// reservation unless `gap` is given. Free gives nothing back.
class AddressOnlySubAllocator : public SubAllocator {
 public:
  // `gap`: leave this many bytes after every block and say regions do not
  // coalesce, as cudaMalloc's (the sim-cudamalloc backend's stand-in).
  explicit AddressOnlySubAllocator(size_t gap = 0)
      : SubAllocator({}, {}), gap_(gap) {}
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    next_ = (next_ + alignment - 1) & ~(uintptr_t{alignment} - 1);
    void* p = reinterpret_cast<void*>(next_);
    next_ += num_bytes + gap_;
    *bytes_received = num_bytes;
    return p;
  }
  void Free(void*, size_t) override {}
  bool SupportsCoalescing() const override { return gap_ == 0; }

 private:
  const size_t gap_;
  uintptr_t next_ = uintptr_t{1} << 44;
};

// An allocator with preset `preset` (allocator_options.h) over regions that
// never merge, as cudaMalloc's: over a VirtualSubAllocator with a gap after
// every block (bfc-replay's sim-cudamalloc backend), or with `address_only`
// over AddressOnlySubAllocator, which times the allocator's work alone.
std::unique_ptr<Allocator> MakeBfcPreset(size_t limit, const char* preset,
                                         bool address_only = false);

// Where MakeBfcPreset's regions come from: kSimCudaMalloc and kAddressOnly
// as above; kPages, a coalescing VirtualSubAllocator of 2 MiB pages that
// can be given back one by one (the vmm backend's model, with no driver
// call); kVmm, CudaVmmSubAllocator on device 0 (the driver
// BFC_CUDA_DRIVER_LIBRARY names: the fake one on a machine without a GPU).
enum class PresetBacking { kSimCudaMalloc, kAddressOnly, kPages, kVmm };
// nullptr when the backing is unavailable (kVmm without a driver).
std::unique_ptr<Allocator> MakeBfcPreset(size_t limit, const char* preset,
                                         PresetBacking backing);
// The same with any options (a preset applied or not).
std::unique_ptr<Allocator> MakeBfcWithOptions(size_t limit,
                                              const AllocatorOptions& options,
                                              PresetBacking backing);

// A configuration the trace suites replay beside each other: a row name
// (BM_Trace/TRACE/warm_NAME_sim, ...) and its options.
struct TraceConf {
  std::string name;
  AllocatorOptions options;
};

// `n` sizes log-uniform in [lo, hi].
std::vector<size_t> LogUniformSizes(size_t n, size_t lo, size_t hi,
                                    uint64_t seed);

// The RMM-style random workload: K live slots; step i frees slot[idx[i]] and
// allocates size[i] into it. Pre-generated, so the timed loop only indexes.
struct RandomWorkload {
  size_t k = 0;
  std::vector<size_t> initial;  // K sizes to fill with
  std::vector<uint32_t> idx;    // a power-of-two count of steps
  std::vector<size_t> size;
};
RandomWorkload MakeRandomWorkload(size_t k, size_t lo, size_t hi,
                                  uint64_t seed);
// Peak of live requested bytes over: fill, then `steps` steps (cycling).
size_t RandomPeakLive(const RandomWorkload& w, size_t steps);

// Steps run before timing, so that growth is done: one pass over the live set
// and 10000 more (at most the pre-generated steps).
inline size_t RandomWarmupSteps(const RandomWorkload& w) {
  return std::min<size_t>(w.idx.size(), w.k + 10000);
}

// Step `i` of the workload (cycling): frees the allocation in the slot the
// step picks, if any, and allocates the step's size into it.
template <typename Pool>
inline void RandomStep(Pool& pool, const RandomWorkload& w, size_t i,
                       std::vector<void*>& live,
                       std::vector<size_t>& live_size) {
  const size_t mask = w.idx.size() - 1;
  const uint32_t j = w.idx[i & mask];
  if (live[j] != nullptr) pool.Free(live[j], live_size[j]);
  live_size[j] = w.size[i & mask];
  live[j] = pool.Alloc(live_size[j]);
}

// --- Pools -------------------------------------------------------------------
// Alloc(n) / Free(p, n) with `n` the requested size; all align to 256.

struct BfcPool {
  Allocator* a;
  void* Alloc(size_t n) { return a->AllocateRaw(256, n); }
  void Free(void* p, size_t) { a->DeallocateRaw(p); }
};

struct GlibcPool {
  void* Alloc(size_t n) { return std::aligned_alloc(256, (n + 255) & ~255); }
  void Free(void* p, size_t) { std::free(p); }
};

// A floor for BM_Scaling, not an allocator: the least a pool whose metadata
// lives apart from the memory (device memory, which the host cannot touch)
// does per step. Blocks are 256-byte slots of an address range nothing backs,
// so a pointer names its record by arithmetic (a map with no probe at all); a
// free checks and updates the freed block's record, one as large as bfc's
// chunk record; an allocation takes the most recently freed slot, whose
// record that free just touched. So each step makes one access to a record
// the workload picks at random, and nothing else: no search, no split, no
// coalescing, no statistics. How its time grows with the live set is what
// the memory hierarchy alone charges any such pool (bench/README.md,
// "What scaling costs any out-of-band pool").
class MetadataFloorPool {
 public:
  explicit MetadataFloorPool(size_t capacity) : records_(capacity) {
    free_.reserve(capacity);
    for (size_t i = capacity; i-- > 0;) free_.push_back(i);
  }
  void* Alloc(size_t n) {
    if (free_.empty()) return nullptr;
    const size_t i = free_.back();
    free_.pop_back();
    Record& r = records_[i];
    r.size = n;
    r.id = ++next_id_;
    return reinterpret_cast<void*>(kBase + i * 256);
  }
  void Free(void* p, size_t n) {
    const size_t i = (reinterpret_cast<uintptr_t>(p) - kBase) / 256;
    // The check keeps the record's load a real dependency of the free.
    if (i >= records_.size() || records_[i].id == 0 || records_[i].size != n) {
      ++mismatches_;
      return;
    }
    records_[i].id = 0;
    free_.push_back(i);
  }
  // Frees whose record did not match (0 in a correct run).
  size_t mismatches() const { return mismatches_; }

 private:
  static constexpr uintptr_t kBase = uintptr_t{1} << 40;
  // The size of bfc's chunk record (size, requested size, id, pointer, two
  // neighbour handles, stream fence).
  struct Record {
    size_t size = 0;
    size_t requested = 0;
    int64_t id = 0;
    uintptr_t ptr = 0;
    uint32_t prev = 0;
    uint32_t next = 0;
    uint64_t fence = 0;
  };
  std::vector<Record> records_;
  std::vector<size_t> free_;
  int64_t next_id_ = 0;
  size_t mismatches_ = 0;
};

// The sub-allocator itself, no pooling: every request is a region.
struct SubPool {
  VirtualSubAllocator* s;
  void* Alloc(size_t n) {
    size_t got = 0;
    return s->Alloc(256, (n + 255) & ~size_t{255}, &got);
  }
  void Free(void* p, size_t n) { s->Free(p, (n + 255) & ~size_t{255}); }
};

// cudaMalloc / cudaMallocAsync baselines. Available() is false (with a reason)
// when there is no CUDA build or no device; benchmarks then SkipWithError.
bool CudaAvailable(std::string* why);
struct CudaPool {
  void* Alloc(size_t n);
  void Free(void* p, size_t n);
};
struct CudaAsyncPool {
  void* Alloc(size_t n);
  void Free(void* p, size_t n);
};

// --- Traces ------------------------------------------------------------------

struct PhasedTrace {
  std::string name;
  CompiledTrace all;     // every op: the cold replay
  CompiledTrace prefix;  // ops before the first iteration phase (setup)
  // The iteration phases as a closed loop that can repeat forever: frees of
  // allocations made before the phases are dropped, and allocations the
  // phases leave live are freed at the end of the pass.
  CompiledTrace iterations;
  size_t first_iter_event = 0;
  size_t end_iter_event = 0;
};

// Every trace in `trace_dir` (*.csv) with phases from
// `phase_dir`/NAME.phases.csv. Traces without phases are skipped (logged).
std::vector<PhasedTrace> LoadTraces(const std::string& trace_dir,
                                    const std::string& phase_dir);

// Replays `ops` against `pool` using `slots` (sized num_slots, all null).
template <typename Pool>
inline size_t ReplayOps(const CompiledTrace& t, Pool& pool, void** slots) {
  size_t failures = 0;
  for (const ReplayOp& op : t.ops) {
    if (op.kind == ReplayOp::Kind::kAllocate) {
      void* p = pool.Alloc(op.size);
      failures += p == nullptr;
      slots[op.slot] = p;
    } else {
      void*& p = slots[op.slot];
      if (p != nullptr) pool.Free(p, op.size);
      p = nullptr;
    }
  }
  return failures;
}

// --- Counters ----------------------------------------------------------------

// ns per op from the benchmark's own clock: ops per iteration given.
void SetOpCounters(benchmark::State& state, double ops_per_iteration);
// bytes_in_use, peak_pool, peak_live, pool/live, meta_bytes from a bfc pool.
void SetFootprint(benchmark::State& state, const Allocator& a, size_t peak_live,
                  size_t meta_bytes);

}  // namespace bfc::bench

#endif  // BFC_BENCH_BENCH_UTIL_H_
