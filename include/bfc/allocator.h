// File: bfc/allocator.h
// -----------------------------------------------------------------------------
//
// bfc::Allocator is TensorFlow's BFC ("best-fit with coalescing") allocator:
// same placement, same stats, same growth and the same failures as
// `tsl::BFCAllocator`, so a TF user can swap one for the other and see the same
// pointers. It manages device (or host) memory that it obtains in large
// regions from a SubAllocator and carves into chunks.
//
// The model:
//
//   * Regions. Memory comes from `SubAllocator::Alloc` in regions. With
//     `allow_growth` the first region is 2 MiB and each later one doubles (a
//     request larger than the next region size doubles it until it fits);
//     without growth the first Extend takes all of `total_memory`. The pool
//     never exceeds `total_memory`. If the sub-allocator fails, the allocator
//     backs off by 0.9x (rounded to 256) until it succeeds or the size drops
//     below the request.
//   * Chunks. Each region is tiled by chunks in address order (a doubly linked
//     list). A chunk is in use or free; two free chunks are never neighbours.
//   * Bins. Sizes round up to 256. Free chunks sit in 21 bins by size class
//     ([256 << b, 256 << (b+1)), the last bin takes the rest), each ordered by
//     (size, address). A request takes the first chunk with size >= rounded
//     size, searching from its own bin upward: best fit, lowest address on
//     ties. The chunk is split when it is at least twice the request or the
//     leftover would be at least the fragmentation cap
//     (`fragmentation_fraction * total_memory`, else 128 MiB).
//   * Free marks the chunk free and merges it with a free next neighbour, then
//     a free previous one. Neighbours in different regions merge only when the
//     sub-allocator SupportsCoalescing() and the regions are contiguous.
//   * Out of memory: optionally give fully-free regions back and extend again
//     (`garbage_collection`), optionally wait for other threads' frees
//     (`allow_retry_on_failure` AND the attribute), then fail: nullptr from
//     AllocateRaw, ResourceExhausted from Allocate. Anything that makes room
//     (a free, ReleaseFreeRegions, garbage collection, a new region) wakes
//     the waiters. The wait is skipped ("fail fast") when it cannot help:
//     the pool is empty (no thread holds memory of this allocator, so no
//     free or release can make room), the sub-allocator reports itself
//     unavailable (SubAllocator::Availability), it threw, or there is none.
//   * Failures are logged at a bounded rate: the first out-of-memory report
//     carries TF's full memory log, the next ones up to
//     `max_oom_logs` a summary and the occupancy picture; after that one
//     line at each power-of-two count says how many were suppressed (and the
//     destructor gives the total). `max_oom_logs` = 0 logs none. A failure
//     of a request with `retry_on_failure` false (the caller has a fallback)
//     is one line, as TF logs it, up to `max_oom_logs` such lines of its own:
//     routine failures never use up the reports a real one needs.
//   * Invalid frees and requests are logged the same way: the first 10 in
//     full, then one line per power-of-two count (always counted in the
//     stats).
//   * User code below the library (the sub-allocator, its visitors, the log
//     sink) may throw: see bfc/sub_allocator.h ("Exceptions") for what
//     becomes of each; nothing escapes the allocator's calls.
//
// Where bfc differs from TF (by design): bad input never aborts (an invalid
// free is reported and counted, the state is untouched); alignments above 256
// are honoured, and an alignment of 0 or one not a power of two is an invalid
// request (TF ignores the argument); host metadata is O(chunks), not
// O(bytes); zero-size and overflowing requests fail cleanly; the retry wait
// is skipped when it cannot help (above: a request over the whole limit, an
// empty pool, a sub-allocator that failed for good), where TF waits out its
// 10 s; failure reports are rate-limited per allocator (max_oom_logs) and
// worded as bfc's own, with TF's sizes and "ran out of memory trying to
// allocate"; `ReleaseFreeRegions()` exists.
//
// Example:
//
//   bfc::Allocator alloc(std::make_unique<bfc::HostSubAllocator>(),
//                        /*total_memory=*/size_t{1} << 30, "host");
//   absl::StatusOr<void*> p = alloc.Allocate(4096);
//   if (!p.ok()) { /* p.status() says what was asked and what is free */ }
//   ...
//   alloc.Deallocate(*p).IgnoreError();
//
// Thread safety: thread-safe. One mutex guards all state; the
// sub-allocator is called with it held, the log sink after it is released
// (bfc/log.h), so a sink may call back into the allocator.
#ifndef BFC_ALLOCATOR_H_
#define BFC_ALLOCATOR_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "bfc/allocator_options.h"
#include "bfc/allocator_stats.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/check.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/log_queue.h"
#include "bfc/internal/mutex.h"
#include "bfc/internal/region_manager.h"
#include "bfc/log.h"
#include "bfc/memory_dump.h"
#include "bfc/shared_counter.h"
#include "bfc/stream_ops.h"
#include "bfc/sub_allocator.h"

namespace bfc {

class Account;
struct LeakedAllocation;
namespace internal {
struct AccountState;
}  // namespace internal

// kMinAllocationBits (8), kMinAllocationSize (256) and kNumBins (21) are
// declared in bfc/internal/constants.h, included above.

struct AllocationAttributes {
  // May wait for another thread's free (when Options::allow_retry_on_failure).
  bool retry_on_failure = true;
  // TF's timestamped reuse (Allocator::SetTimingCounter): when set, it is
  // called (without the allocator's lock, once per attempt) for the highest
  // free count whose memory this allocation may take; chunks freed later are
  // skipped. Not owned. Not called without a timing counter (every count is
  // then 0: its answer could not change anything).
  std::function<uint64_t()>* freed_by_func = nullptr;
  // A region of its own for this allocation, as Options::huge_allocation_bytes
  // gives large requests: exact, never split or reused, given back on free.
  bool dedicated = false;
  // The stream that will use the memory (Allocator::AllocateOnStream).
  StreamId stream = kImplicitStream;
  // Charge the allocation to this account (bfc/account.h; of this
  // allocator), as Account::Allocate does: ResourceExhausted naming the
  // account when one of its limits refuses it. Not owned.
  Account* account = nullptr;
  // The memory is used at once by the host or by any stream, as memory from
  // cudaMalloc is (the CCCL resources' synchronous allocate): memory that
  // stream work may still use (freed on a stream, not yet known complete)
  // is handed out only after the host has waited for that work
  // (StreamOps::SynchronizeEvent), never through a wait on a stream. While
  // only the implicit stream has been used (its frees carry no fence), the
  // host waits for that stream. When the wait fails (or the memory's stream
  // was forgotten without its event), fresh memory is taken instead; without
  // it the call fails with the cause rather than hand out memory in use.
  bool host_ready = false;
};

class Allocator {
 public:
  // The options and their defaults (TF's behaviour) are declared once, with
  // their docs, in bfc/allocator_options.h.
  using Options = AllocatorOptions;

  Allocator(std::unique_ptr<SubAllocator> sub_allocator, size_t total_memory,
            std::string name, const Options& options);
  Allocator(std::unique_ptr<SubAllocator> sub_allocator, size_t total_memory,
            std::string name);
  // Gives every region back to the sub-allocator; logs how many allocations
  // (and bytes) were still outstanding.
  ~Allocator();

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // tests/allocator_validate_test.cc corrupts an allocator on purpose.
  friend class AllocatorTestPeer;
  friend class Account;

  // TF-style calls. nullptr on failure; 0 bytes -> nullptr. Alignment: a
  // power of two; <= 256 gives 256-aligned memory, larger is honoured. Bad
  // alignment or an overflowing size: nullptr, a logged error and
  // `num_invalid_requests` counted.
  void* AllocateRaw(size_t alignment, size_t num_bytes);
  void* AllocateRaw(size_t alignment, size_t num_bytes,
                    const AllocationAttributes& attr);
  // nullptr: no-op. A pointer this allocator did not hand out (foreign,
  // interior, already free): logged, counted in `num_invalid_frees`, state
  // untouched (or abort, with Options::abort_on_invalid_input).
  void DeallocateRaw(void* ptr);

  // Status-style calls: same allocator, errors a person can act on.
  //   InvalidArgument:   num_bytes == 0, bad alignment, overflowing size.
  //   ResourceExhausted: out of memory; the message says what was asked,
  //                      what is in use, the limit and the largest free chunk.
  //   Unavailable:       the sub-allocator can never allocate
  //                      (SubAllocator::Availability: no CUDA driver or
  //                      device, the reservation failed); its reason follows.
  //   Internal:          the sub-allocator threw; its what() follows.
  //   FailedPrecondition: the allocator has no sub-allocator.
  // The last three fail at once, without the retry wait.
  absl::StatusOr<void*> Allocate(
      size_t num_bytes, size_t alignment = kMinAllocationSize,
      const AllocationAttributes& attr = AllocationAttributes());
  // OK for nullptr. InvalidArgument (state untouched) for a pointer this
  // allocator did not hand out or already took back.
  [[nodiscard]] absl::Status Deallocate(void* ptr);

  // --- Streams: stream-ordered reuse (README "Streams") ----------------------
  // Memory freed on stream P goes back to the pool at once, stamped with a
  // fence (P, the count of frees on P): no CUDA call. P reuses it at once
  // (stream order makes that safe). Another stream S reuses it only when
  //   * S is known to wait for that free (NotifyStreamWait, or a wait the
  //     allocator inserted) and reuse_follow_dependencies, or
  //   * the free has completed on the device (an event recorded on P, found
  //     complete) and reuse_allow_opportunistic, or
  //   * no such chunk fits, and with reuse_allow_internal_dependencies the
  //     allocator makes S wait for P's work (StreamOps::StreamWaitEvent)
  //     before growing the pool;
  // and, on the way to out-of-memory, after synchronizing the pending frees.
  // The search takes the best fit among the chunks safe for S, so with one
  // stream nothing changes: TF's placement, no extra work. Events are
  // recorded only when another stream needs one, one per stream per batch of
  // frees. Without StreamOps (SetStreamOps) only same-stream reuse and known
  // waits apply. Calls that name no stream use kImplicitStream.
  //
  // Errors: InvalidArgument for a pointer this allocator did not hand out
  // (state untouched), as Deallocate; Internal when a StreamOps call fails
  // (its message follows; the memory stays safe: never handed out early).
  absl::StatusOr<void*> AllocateOnStream(StreamId stream, size_t num_bytes,
                                         size_t alignment = kMinAllocationSize);
  [[nodiscard]] absl::Status DeallocateOnStream(void* ptr, StreamId stream);
  // `ptr` (live) is also used by `stream`: when it is freed, its memory is
  // not reused by a third stream before that use is done too (PyTorch's
  // Tensor.record_stream).
  [[nodiscard]] absl::Status RecordStreamUse(void* ptr, StreamId stream);
  // The caller already made `consumer` wait for everything queued on
  // `producer` so far (cudaStreamWaitEvent, or a synchronize): memory freed on
  // `producer` before this call is safe for `consumer`. So no free on
  // `producer` may come between that wait and this call (with a thread per
  // stream, order the two against the producer's frees).
  [[nodiscard]] absl::Status NotifyStreamWait(StreamId consumer,
                                              StreamId producer);
  // Call before destroying `stream`: the allocator records one last event on
  // it if memory freed on it may still be pending, and never names the
  // stream to StreamOps again. A later call naming the same handle means a
  // new stream. When that event cannot be recorded (StreamOps failed) the
  // error is returned and the stream is forgotten all the same (its handle
  // may come back as a new stream): memory freed on it that was still
  // pending is then never handed out again, since nothing can show it safe
  // (and nothing else joins it). ResourceExhausted, with the stream still
  // known, when the host has no memory to keep that event. Once none of its
  // work is pending any more, its entry in the allocator's stream table goes to
  // a later stream: creating and forgetting streams forever (a stream per
  // request) keeps the table bounded.
  [[nodiscard]] absl::Status ForgetStream(StreamId stream);
  // The events for cross-stream reuse. FailedPrecondition once a stream
  // other than kImplicitStream has been used, or when already set.
  [[nodiscard]] absl::Status SetStreamOps(std::unique_ptr<StreamOps> ops);
  // Whether SetStreamOps was given events (cross-stream reuse can learn of
  // completion and insert waits).
  bool HasStreamOps() const;

  // --- TF's timestamped reuse (XLA/TF BFCAllocator) --------------------------
  // With a timing counter, every free takes counter->next() as the chunk's
  // free count and is not coalesced at once: the chunk waits in its bin,
  // reusable only by an allocation whose freed_by_func returns at least its
  // count (or that names none), and merges with its neighbours once
  // SetSafeFrontier passes its count (checked at each allocation) or, for an
  // allocation without freed_by_func that would otherwise fail, when forced.
  // A split remainder keeps its parent's count; a merge keeps the later one.
  // Call before the first free; `counter` is not owned and must outlive the
  // allocator. nullptr turns nothing off once set (as in TF).
  void SetTimingCounter(SharedCounter* counter);
  // Free counts below `count` are safe for any allocation (only raised; a
  // lower value is ignored). Wakes allocations waiting to retry.
  void SetSafeFrontier(uint64_t count);

  // What cross-stream reuse cost so far (bfc/allocator_stats.h).
  using StreamStats = ::bfc::StreamStats;
  StreamStats GetStreamStats() const;

  bool TracksAllocationSizes() const { return true; }
  // For a live pointer from this allocator: what the caller asked for / the
  // chunk's size / its unique id (> 0). For any other pointer (nullptr,
  // foreign, interior, freed): 0 / 0 / -1. Never crashes.
  size_t RequestedSize(const void* ptr) const;
  size_t AllocatedSize(const void* ptr) const;
  int64_t AllocationId(const void* ptr) const;

  std::optional<AllocatorStats> GetStats() const;
  // num_allocs = 0, peak_bytes_in_use = bytes_in_use, largest_alloc_size = 0.
  bool ClearStats();
  MemoryType GetMemoryType() const;
  const std::string& Name() const { return name_; }
  size_t total_memory() const { return memory_limit_; }
  const Options& options() const { return opts_; }

  // Gives every region with no chunk in use back to the sub-allocator
  // (PyTorch's empty_cache) and wakes allocations waiting to retry. Returns
  // the bytes released (a region whose Free threw is forgotten but not
  // counted here; see sub_allocator_failures()).
  size_t ReleaseFreeRegions();

  // Gives free memory back until at least `bytes` have gone or nothing more
  // can: fully free regions first, then -- over a sub-allocator that frees
  // parts of blocks (SubAllocator::PartialFreeBytes: CudaVmmSubAllocator's
  // pages) -- the whole pages inside free chunks, largest chunks first, each
  // splitting its chunk and its region around the hole. Memory whose stream
  // work is pending is not given back (as ReleaseFreeRegions). Wakes
  // allocations waiting to retry. Returns the bytes released.
  size_t ReleaseFreeMemory(size_t bytes = std::numeric_limits<size_t>::max());

  // What the sub-allocator's user code did wrong (never reset).
  struct SubAllocatorFailures {
    int64_t alloc_exceptions = 0;  // Alloc calls that threw
    // Free calls that threw or reported a failure (SubAllocator::FreeFailed)
    int64_t free_exceptions = 0;
    // Bytes of the regions whose Free failed: forgotten by this allocator
    // (out of its pool), their fate unknown. They still count against the
    // memory limit: the sub-allocator may still hold them.
    int64_t bytes_abandoned = 0;
  };
  SubAllocatorFailures sub_allocator_failures() const;
  // Out-of-memory reports not logged because of the rate limit (never reset).
  int64_t num_oom_logs_suppressed() const;
  // TF's one-line picture: 100 characters over all regions; '*' requested
  // bytes, 'x' rounding/padding in use, '_' free.
  std::string RenderOccupancy() const;
  // Checks every invariant in DESIGN.md; the first violation found, or OK.
  // Each component checks its own (ChunkTable, RegionManager with its
  // ChunkMap, every Bin); this adds the invariants across them: chunks tile
  // the regions, coalescing is complete, free chunks and bin entries match
  // both ways, the map resolves every chunk, the stats agree. On a violation,
  // an Internal error "Allocator '<name>': <what>" naming the object.
  // O(chunks + slots). ResourceExhausted, and no verdict, when the host has
  // no memory for the checks' own bookkeeping. At check level 2 it runs
  // after every mutating call and aborts on a violation
  // (bfc/internal/check.h); a run without host memory is skipped there.
  [[nodiscard]] absl::Status Validate() const;

  // Host bytes this allocator holds for its own bookkeeping.
  size_t MetadataBytes() const;

  // --- Observability (src/memory_dump.cc; see bfc/memory_dump.h) -----------
  // Peaks (bytes in use, pool bytes) restart from the current values; the
  // counters are left alone (ClearStats resets num_allocs too).
  void ResetPeakStats();
  // Every region, chunk and bin right now, with the stats.
  MemoryDump RecordMemoryMap() const;
  // TF's dump (FormatMemoryLog) for a failed request of `num_bytes`, sent to
  // the log sink; also sent on out-of-memory (up to Options::max_oom_logs).
  void DumpMemoryLog(size_t num_bytes) const;
  // The text DumpMemoryLog logs.
  std::string MemoryLog(size_t num_bytes) const;
  // A human table of usage, peaks, fragmentation and counters.
  std::string MemorySummary() const;
  // Live allocations, largest first (ties: lowest id), with their sites when
  // Options::record_allocation_sites is on.
  std::vector<OutstandingAllocation> OutstandingAllocations() const;

  // Starts recording every allocation, free, region taken, extended or
  // given back, and failed request as a MemoryEvent, keeping the newest
  // `max_entries` (PyTorch's _record_memory_history(max_entries=...));
  // 0 stops and drops what was recorded. Starting again clears the history.
  // While it is off the cost is one predictable branch per call.
  void RecordMemoryHistory(size_t max_entries);
  // The recorded events, oldest first (empty while recording is off).
  MemoryHistory GetMemoryHistory() const;
  // Events recorded since recording started, dropped ones included: a
  // cheap position to cut a later GetMemoryHistory() at.
  uint64_t NumMemoryEventsRecorded() const;

 private:
  using ChunkHandle = internal::ChunkHandle;
  // A stream's index in streams_; 0 is kImplicitStream.
  using StreamSlot = uint32_t;
  using BinNum = internal::BinNum;

  // --- The allocation path (src/core/allocator.cc tells it in order) -------
  enum class RequestCheck { kOk, kZero, kInvalid };
  // Validates a request; fills *rounded, or *error when it is invalid.
  [[nodiscard]] RequestCheck CheckRequest(size_t alignment, size_t num_bytes,
                                          size_t* rounded,
                                          std::string* error) const;
  // One lock, FindChunk + AllocateChunk for a plainly valid request; nullptr
  // (nothing changed) when the request needs AllocateSlow.
  void* AllocateFast(size_t alignment, size_t num_bytes)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Whether the fast paths may serve a request (the default alignment or
  // less, roundable, below the huge threshold); sets *rounded when so.
  bool FastPathBytes(size_t alignment, size_t num_bytes, size_t* rounded) const;
  // Attributes the fast paths serve: not dedicated, the implicit stream, no
  // freed_by_func (an account is charged by AllocateChargedFast).
  static bool FastPathAttributes(const AllocationAttributes& attr) {
    return !attr.dedicated && attr.stream == kImplicitStream &&
           attr.freed_by_func == nullptr && !attr.host_ready;
  }
  // AllocateFast charged to `st` (inside its reservation the charge stays
  // there; above it, each level is charged as AllocateOrFail does); nullptr
  // (nothing changed) when the pool has no chunk for it or a limit refuses,
  // for AllocateOrFail to grow or to say which limit.
  void* AllocateChargedFast(size_t alignment, size_t num_bytes,
                            internal::AccountState* st)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // AllocateRaw's full path: CheckRequest, then AllocateOrFail.
  void* AllocateSlow(size_t alignment, size_t num_bytes,
                     const AllocationAttributes& attr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // A checked request: one attempt, or attempts until retry_timeout while
  // other threads free (unless waiting cannot help); on failure counts and
  // logs the out-of-memory and, when `failure` is given, sets it to the
  // status Allocate returns.
  void* AllocateOrFail(size_t alignment, size_t num_bytes, size_t rounded,
                       const AllocationAttributes& attr,
                       absl::Status* failure = nullptr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // After a failed attempt: why no region could be had when it is not plain
  // lack of memory (no sub-allocator, it threw, it is unavailable), else OK.
  absl::Status FailureCauseLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives a region to sub_allocator_->Free, catching what it throws (logged
  // and counted); false when it threw.
  bool FreeToSubAllocator(void* ptr, size_t num_bytes, const char* why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Wakes the allocations waiting to retry, if any (room was made).
  // Signalling costs a futex call; only paid when an allocation waits.
  void WakeWaiters() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (num_waiters_ > 0) {
      ++wakes_;
      freed_cv_.SignalAll();
    }
  }
  // One attempt (TF: AllocateRawInternal): FindChunk, else Extend, else give
  // free regions back and Extend; nullptr when all fail.
  void* AllocateLocked(size_t alignment, size_t num_bytes, size_t rounded,
                       bool dedicated) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Best fit for `rounded_bytes` at `alignment`, taken out of its bin, or
  // kInvalidChunkHandle (nothing changed). With max_split_bytes, a chunk too
  // large for the request (MaxFitFor) is not taken unless `any_size`. Once
  // several streams are in use, only chunks safe for alloc_stream_ (unless
  // `unsafe_ok`).
  // With grow_below_peak_ratio, a best fit that many times what the pool
  // would grow for the request is left in its bin while the pool may grow
  // within its peak (PreferGrowth; grow_instead_ is set), unless `any_size`
  // or `whole_ok`.
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE ChunkHandle FindChunk(size_t alignment,
                                                     size_t rounded_bytes,
                                                     bool any_size = false,
                                                     bool unsafe_ok = false,
                                                     bool whole_ok = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // grow_below_peak_ratio: whether a request of `rounded_bytes` whose best
  // fit is `best_fit_bytes` should get a region of its own instead: the
  // best fit is at least grow_below_peak_ratio times the region the growth
  // policy would take, the pool grown by that region stays within its peak
  // so far and the release threshold, and the limit has room for the region
  // and one more chunk of the best fit's size. Out of line: it runs only
  // for a best fit that large.
  bool PreferGrowth(size_t rounded_bytes, size_t best_fit_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // With max_split_bytes: the size a chunk must stay below to serve a request
  // of `rounded_bytes` (PyTorch: a small request never takes an oversize
  // block; a large one takes at most kMaxUnsplitWaste more than it asked).
  size_t MaxFitFor(size_t rounded_bytes) const {
    if (rounded_bytes < max_split_) return max_split_;
    return rounded_bytes > std::numeric_limits<size_t>::max() - kMaxUnsplitWaste
               ? std::numeric_limits<size_t>::max()
               : rounded_bytes + kMaxUnsplitWaste;
  }
  // Gives fully-free pooled regions back, least recently freed first, until
  // the pool plus `needed` bytes is at most `target` (or none is left):
  // release_before_extend (target: the peak pool) and pool_release_threshold
  // (target: that fraction of the limit).
  void ReleaseFreeRegionsAbove(size_t needed, size_t target)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Puts chunk `h`, which spans a fully free pooled region, at the most
  // recent end of the free-region list (ReleaseFreeRegionsAbove's
  // least-recently-freed order); moves it there if it is listed already.
  void LinkFreeRegion(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes `h` off the free-region list if it is on it: it is being
  // allocated from, merged away or released. O(1).
  void UnlinkFreeRegion(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (ABSL_PREDICT_FALSE(stamp_free_regions_) &&
        h < free_region_links_.size() && free_region_links_[h].linked) {
      UnlinkListedFreeRegion(h);
    }
  }
  void UnlinkListedFreeRegion(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // With extend_by_missing_tail over a coalescing sub-allocator: the bytes
  // free at the end of the highest region (what memory appended there would
  // join), else 0.
  size_t FreeTailBytes() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Hands out the free, unbinned chunk `h` from FindChunk: splits off the
  // alignment prefix and a remainder worth keeping, marks it in use, counts.
  // `may_split` false: the chunk is handed out whole (a dedicated region).
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void* AllocateChunk(ChunkHandle h,
                                                   size_t alignment,
                                                   size_t rounded_bytes,
                                                   size_t num_bytes,
                                                   bool may_split = true)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A new region from the sub-allocator big enough for the request (growth
  // policy, limit, 0.9x back-off); false when none can be had. With
  // `dedicated`, an exact region of its own whose one chunk is returned in
  // *dedicated (not put in a bin). Otherwise `*binned`, when given, is the
  // free chunk the new memory ended up in (joined to its neighbours).
  [[nodiscard]] bool Extend(size_t alignment, size_t rounded_bytes,
                            ChunkHandle* dedicated = nullptr,
                            ChunkHandle* binned = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Makes free chunk `h` safe for the host and every stream
  // (AllocationAttributes::host_ready): the host waits for the work that may
  // still use it. The StreamOps failure, or FailedPrecondition for memory
  // whose stream was forgotten without its event.
  absl::Status MakeHostReady(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // release_before_extend and pool_release_threshold, before the pool grows
  // by `grown` bytes: fully free regions, then (release_partial_regions)
  // the pages inside free chunks, until the grown pool is within the target.
  void ReleaseBeforeExtend(size_t grown) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives back the memory of free chunk `h`: its region when it is one
  // whole, else the pages inside it (where the sub-allocator frees parts of
  // regions). For memory an Extend took that did not serve its request.
  void GiveBackFreeChunk(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The bytes Extend asks for first: the growth policy's step for `needed`
  // bytes, within the step cap and floor and the `available` room. Doubling
  // steps from *curr_region_bytes and leaves the doubled size there
  // (*increased says whether it doubled); a copy of
  // curr_region_allocation_bytes_ asks what Extend would take, changing
  // nothing.
  size_t GrowthStep(size_t needed, size_t available, size_t* curr_region_bytes,
                    bool* increased) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives region `r` (no chunk in use; its one free chunk not in a bin when
  // `binned` is false) back to the sub-allocator; true when Free succeeded.
  bool ReleaseRegionLocked(internal::AllocationRegion r, bool binned)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // With Options::garbage_collection: gives fully-free regions back before
  // the last Extend attempt; true when it released any.
  [[nodiscard]] bool DeallocateFreeRegions(size_t rounded_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // ReleaseFreeRegions' body: bytes given back, stopping once `bytes` have
  // gone (ReleaseFreeMemory's first step).
  size_t ReleaseFreeRegionsLocked(
      size_t bytes = std::numeric_limits<size_t>::max())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // ReleaseFreeMemory's body: whole regions, then interiors.
  size_t ReleaseFreeMemoryLocked(size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // With partial_free_bytes_ > 0: gives back the page-aligned interiors of
  // free chunks, largest first, until at least `bytes` have gone. Returns
  // the bytes released.
  size_t ReleaseFreeInteriors(size_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives back the whole pages inside free chunk `h` (binned, fence
  // complete, in a pooled region): what is left before and after them stays
  // as free chunks ending and starting the two regions the hole leaves.
  // Returns the bytes released (0: no whole page, or not eligible).
  size_t ReleaseChunkInterior(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // --- Chunks and bins -----------------------------------------------------
  // Cuts chunk `h` after `num_bytes`; returns the new (free, unbinned)
  // remainder's handle.
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE ChunkHandle SplitChunk(ChunkHandle h,
                                                      size_t num_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Joins free neighbour h2 into h1 (both out of their bins); h2 is deleted.
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE void Merge(ChunkHandle h1, ChunkHandle h2)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Forgets chunk h: its map entry and its table slot.
  void DeleteChunk(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether free neighbours a and b may merge now: always when at most one
  // of them is pending, or both only on the same stream (the merged chunk is
  // then safe exactly where its pending part was, as a same-stream pool's
  // segments coalesce); pending on two different streams, the merge would
  // put memory one stream may use behind a fence it may not, so it waits
  // (MergeDeferred) until the fences are known complete.
  // The common case (one stream, no timing counter) is one test inline.
  // kMaySlow false: a path that already knows slow_paths_ is 0.
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE bool MayMerge(ChunkHandle a, ChunkHandle b) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    if (!kMaySlow || ABSL_PREDICT_TRUE(slow_paths_ == 0)) return true;
    return MayMergeSlow(a, b);
  }
  // MayMerge with fences or a timing counter (TF: a chunk with a free count
  // merges only once it is safe, or when forced).
  bool MayMergeSlow(ChunkHandle a, ChunkHandle b) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  StreamStats StreamStatsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool MayMergeFences(uint64_t a, uint64_t b) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether `fence` names a point nothing can ever show complete (see
  // ForgetStream).
  bool FenceDead(uint64_t fence) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // TF's timestamped reuse on the free, split, merge and delete paths (out
  // of line; called only with a timing counter).
  void FreeTimestamped(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // FreeChunk of the one chunk of dedicated region r (out of line).
  void FreeDedicated(ChunkHandle h, const internal::AllocationRegion& r)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SplitFreedAt(ChunkHandle h, ChunkHandle nh)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // SplitChunk's and Merge's fence and free-count work (out of line; only
  // with slow_paths_).
  void SplitSlow(ChunkHandle h, ChunkHandle nh)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void MergeSlow(ChunkHandle h1, ChunkHandle h2)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void MergeFreedAt(ChunkHandle h1, ChunkHandle h2)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ForgetFreedAt(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A free chunk's TF free count (0: none, or known safe). An in-use chunk
  // may keep a stale entry (not erased on the allocation path, to keep it
  // short): never read while in use, overwritten when it is freed, erased
  // when the chunk goes (MergeFreedAt, ReleaseRegionLocked).
  uint64_t FreedAt(ChunkHandle h) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return h < freed_at_.size() ? freed_at_[h] : 0;
  }
  // Queues h for MergeTimestampedChunks; short of host memory, the queue is
  // marked lost instead and rebuilt from the bins before its next use.
  void QueueTimestamped(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether the queue has (or, lost, may have) something to merge.
  bool TimestampQueueNonEmpty() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return timestamp_queue_lost_ || !timestamped_chunks_.empty();
  }
  // TF's MergeTimestampedChunks: coalesces the queued chunks whose counts are
  // below the safe frontier (required_bytes 0), or any queued chunk until one
  // of required_bytes forms. Whether that happened (always for 0).
  bool MergeTimestampedChunks(size_t required_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Merges the free chunks of region r, free counts ignored (fences still
  // hold); whether one of required_bytes formed.
  bool ForceMergeRegion(const internal::AllocationRegion& r,
                        size_t required_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // ForceMergeRegion on every region whose chunks are all free (before
  // regions are given back: TF releases those whatever their counts).
  void MergeFullyFreeRegions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Calls attr.freed_by_func without the lock (0 when it is unset or there
  // is no timing counter; 0 and an error log if it throws).
  uint64_t FreedBefore(const AllocationAttributes& attr)
      ABSL_LOCKS_EXCLUDED(mutex_);
  // Merges the free chunks whose merge a fence deferred and whose fences are
  // now known complete, and gives back the dedicated regions that waited for
  // theirs (pending_dedicated_). O(fenced chunks, listed since the last
  // call) plus the merges.
  void MergeDeferred() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Puts h on fenced_chunks_ unless it is there: its fence just became
  // non-zero. Never throws (fence_list_lost_ instead).
  void ListFenced(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void RebuildFenceListLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The chunk table's grow hook: grows the columns indexed by handle
  // (free-region links, account tags) to `new_handle_bound`
  // before a block is added; false when the host has no memory for it.
  static bool GrowColumnsHook(void* self, size_t new_handle_bound)
      ABSL_NO_THREAD_SAFETY_ANALYSIS;
  bool GrowColumns(size_t new_handle_bound)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Gives the tables their room ahead again after a shortage, changing
  // nothing else; false while the host has no memory for it.
  bool RefillTablesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Merges free chunk h with a free next, then a free previous neighbour
  // (TF's order); returns the surviving handle, not yet binned.
  template <bool kMaySlow = true>
  ABSL_ATTRIBUTE_ALWAYS_INLINE ChunkHandle TryToCoalesce(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A chunk just freed or grown, coalesced: into its bin, onto the
  // free-region list if it is a whole region, waiters woken, `what`
  // validated.
  ABSL_ATTRIBUTE_ALWAYS_INLINE void BinFreeChunk(ChunkHandle h,
                                                 const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Puts free chunk h into the bin its size names and marks that bin
  // non-empty.
  void InsertFreeChunkIntoBin(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Takes free chunk h out of its bin (by key) before it merges or is used.
  void RemoveFreeChunkFromBin(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Marks in-use chunk h free and takes it out of the stats; no merging.
  void MarkFree(ChunkHandle h) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // --- Frees, bad input, out-of-memory reports -----------------------------

  // The live in-use chunk starting at `ptr`, or kInvalidChunkHandle.
  ChunkHandle InUseChunk(const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Why `ptr` is not a live allocation of ours, for messages.
  // InvalidArgument for `ptr`, described as DescribeInvalidPointer does when
  // the host can spare the memory, else without a message (never throws).
  absl::Status InvalidPointerStatus(const char* what, const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  std::string DescribeInvalidPointer(const void* ptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Frees the live chunk `h` (from InUseChunk): coalesces, bins, wakes
  // waiters.
  // `stream`: the slot it is freed on (its fence's stream).
  void FreeChunk(ChunkHandle h, StreamSlot stream = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // FreeChunk with any of slow_paths_ on (out of line): the stream fence,
  // dedicated regions, TF's free counts.
  void FreeChunkSlow(ChunkHandle h, StreamSlot stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // AllocateFast with any of slow_paths_ on (out of line).
  void* AllocateFastSlow(size_t alignment, size_t rounded, size_t num_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Logs a caller's mistake (an invalid free or request), described by
  // `describe` (called only when the host has memory for the message), the
  // first 10 in full and then one line per power-of-two count of suppressed
  // ones; aborts only with Options::abort_on_invalid_input.
  void ReportInvalid(absl::FunctionRef<std::string()> describe)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void LogInvalid(const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // The largest free chunk's size (0 when nothing is free), from the top
  // non-empty bin.
  size_t LargestFreeChunkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The ResourceExhausted text: what was asked, in use, pool, limit,
  // largest free chunk.
  std::string OomMessage(size_t num_bytes, size_t rounded,
                         size_t alignment) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Logs OomMessage (or `cause`, when the failure has one) and the occupancy
  // picture, with TF's memory log the first time, at most
  // Options::max_oom_logs times per allocator; then one line per
  // power-of-two count of suppressed reports: the messages go to *report,
  // for the caller to log once the lock is released. Never throws: a report
  // the host has no memory to build is dropped (counted as suppressed).
  void LogOom(size_t num_bytes, size_t rounded, size_t alignment,
              const absl::Status& cause,
              std::vector<std::pair<LogSeverity, std::string>>* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // For a failure the caller can do without (retry_on_failure false: TF's
  // convolution scratch with a fallback): one line, no memory log, as TF
  // logs them, at most Options::max_oom_logs per allocator (then counted as
  // suppressed). Such failures are routine; they must not use up the budget
  // of full reports a real out-of-memory needs. Never throws.
  void LogOomNote(size_t num_bytes, const absl::Status& cause,
                  std::vector<std::pair<LogSeverity, std::string>>* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void LogOomUnguarded(size_t num_bytes, size_t rounded, size_t alignment,
                       const absl::Status& cause,
                       std::vector<std::pair<LogSeverity, std::string>>* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Host memory a failure report is built only with (HostHasRoomFor): more
  // than the report and the occupancy picture of a pool of ~10k chunks take.
  static constexpr size_t kReportRoomBytes = size_t{1} << 20;
  // RenderOccupancy's body.
  std::string RenderOccupancyLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // --- Streams (src/core/allocator_streams.cc) -----------------------------
  // A fence is 0 (clean), one stream's point (slot << kFenceSeqBits | seq:
  // the seq-th free stamped on that stream), or, with kMultiFenceBit, an
  // index into multi_fences_ (several streams' points, for memory used by
  // several streams or merged from chunks freed on different ones).
  static constexpr int kFenceSeqBits = 40;
  static constexpr uint64_t kFenceSeqMask = (uint64_t{1} << kFenceSeqBits) - 1;
  static constexpr uint64_t kMultiFenceBit = uint64_t{1} << 63;
  static constexpr StreamSlot kMaxStreams = StreamSlot{1} << 22;
  // Events kept per stream (EventCovering): enough for polls to see
  // progress, bounded for a stream whose work never completes.
  static constexpr size_t kMaxEventsPerStream = 32;
  struct StreamState {
    StreamId id = kImplicitStream;
    bool forgotten = false;
    bool on_free_list = false;  // forgotten, named by nothing: free_slots_
    uint64_t seq = 0;           // points stamped on it so far
    uint64_t recorded = 0;      // the point the newest event covers
    uint64_t completed = 0;     // the point known complete
    // Recorded events not yet known complete, oldest first, with the point
    // each covers.
    std::vector<std::pair<StreamOps::Event, uint64_t>> events;
    // (producer, point): this stream waits for the producer's work up to
    // that point (NotifyStreamWait or a wait the allocator inserted).
    std::vector<std::pair<StreamSlot, uint64_t>> waits_for;
  };
  // One stream's point in a fence.
  using FencePart = std::pair<StreamSlot, uint64_t>;
  struct MultiFence {
    std::vector<FencePart> parts;  // by slot, unique
    uint32_t refs = 0;  // chunks holding it; 0: on free_multi_fences_
  };
  // Other streams' uses of an in-use chunk (RecordStreamUse), and the room
  // the fence of its free takes (`parts`, capacity above the uses; and one
  // multi-fence record: see ReserveMultiFenceLocked), made when a use is
  // recorded, which may fail: so a free never needs host memory.
  struct ExtraUses {
    std::vector<StreamSlot> slots;
    std::vector<FencePart> parts;
  };
  // The slot of `stream`, registering it (and leaving single-stream mode)
  // when new, in a recycled slot when one is free; ResourceExhausted when
  // kMaxStreams slots are all taken.
  absl::StatusOr<StreamSlot> SlotFor(StreamId stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // SlotFor for a stream not in stream_slots_; throws std::bad_alloc,
  // having changed nothing, when the host has no memory for it.
  absl::StatusOr<StreamSlot> NewSlotFor(StreamId stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // FailedPrecondition: no event can show `stream`'s work complete (built
  // without throwing).
  absl::Status NoEventStatus(StreamId stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Makes the slots of forgotten streams that nothing names any more (no
  // fence, multi-fence, wait or use by another stream) free for new streams,
  // giving up their events. O(fenced chunks + multi-fences + streams' waits),
  // run once forgotten slots reach next_slot_collection_ (so amortized over
  // at least kMinSlotCollection stream lifetimes).
  void CollectForgottenSlots() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  static constexpr size_t kMinSlotCollection = 64;
  // The fence a free on `slot` stamps now (with the uses RecordStreamUse
  // added to chunk h).
  uint64_t StampFree(ChunkHandle h, StreamSlot slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Every (slot, point) of `fence`.
  void FenceParts(uint64_t fence,
                  std::vector<std::pair<StreamSlot, uint64_t>>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The same without copying (the paths that must not need host memory):
  // a view of the multi-fence's parts, or of `*single`, filled in. Valid
  // until multi_fences_ changes.
  absl::Span<const FencePart> FenceSpan(uint64_t fence, FencePart* single) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A multi-fence record for every chunk with other streams' uses (the
  // record its free may take), and room on free_multi_fences_ for every
  // record; throws std::bad_alloc, changing nothing that matters, when the
  // host has no memory.
  void ReserveMultiFenceLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Whether memory behind `fence` may be used by `slot` now, from what is
  // known (no StreamOps call).
  bool FenceSafeFor(uint64_t fence, StreamSlot slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool PointSafeFor(StreamSlot producer, uint64_t point, StreamSlot slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool FenceComplete(uint64_t fence) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A merge's fence: both points of every stream kept (the later of two on
  // one stream). Takes over the references of `a` and `b`.
  uint64_t JoinFences(uint64_t a, uint64_t b)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint64_t MakeFence(std::vector<std::pair<StreamSlot, uint64_t>>& parts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void RefFence(uint64_t fence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UnrefFence(uint64_t fence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Sets chunk h's fence to `fence` (whose reference it takes over), giving
  // up the one it held.
  void SetFence(ChunkHandle h, uint64_t fence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    uint64_t& f = chunks_[h].fence;
    if (ABSL_PREDICT_FALSE(f != 0)) UnrefFence(f);
    f = fence;
  }
  // An event on `producer` covering `point` (recorded now if none does) in
  // *event; false when there is none (*error set when StreamOps failed). Any
  // handle is an event, null included (StreamOps::Event is opaque).
  bool EventCovering(StreamSlot producer, uint64_t point,
                     StreamOps::Event* event, absl::Status* error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The StreamOps calls, through the library's noexcept boundary: what they
  // throw becomes an Internal status naming the call (ReleaseEvent's is
  // logged and counted: the event is given up either way).
  absl::StatusOr<StreamOps::Event> CallRecordEvent(StreamId stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::StatusOr<bool> CallQueryEvent(StreamOps::Event event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CallStreamWaitEvent(StreamId stream, StreamOps::Event event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  absl::Status CallSynchronizeEvent(StreamOps::Event event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CallReleaseEvent(StreamOps::Event event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Queries the recorded events of every stream (oldest first) and advances
  // what is known complete. With reuse_allow_opportunistic only.
  void PollStreams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Records events for the points of `fence` not yet covered, so that a
  // later poll can see them complete.
  void CoverFence(uint64_t fence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Makes `slot` wait for every point of `fence` it is not yet safe for.
  absl::Status InsertWaits(uint64_t fence, StreamSlot slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Blocks until every point of `fence` has completed.
  absl::Status SynchronizeFence(uint64_t fence)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Blocks until every free stamped so far, on every stream, has completed
  // (the out-of-memory ladder, ReleaseFreeRegions). False when a call
  // failed (what did complete is still known).
  bool SynchronizeAllStreams() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // After FindChunk found nothing safe for alloc_stream_: poll, then (with
  // reuse_allow_internal_dependencies) take the best unsafe fit after making
  // the stream wait for it. kInvalidChunkHandle when neither works.
  // `whole_ok` as for FindChunk.
  ChunkHandle FindChunkAcrossStreams(size_t alignment, size_t rounded_bytes,
                                     bool any_size, bool whole_ok = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // FindChunk(any_size), then FindChunkAcrossStreams: after the pool grew.
  ChunkHandle FindChunkForAnyStream(size_t alignment, size_t rounded_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A StreamOps failure: counted, logged, kept for the caller's status.
  void StreamOpFailed(const absl::Status& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The shared front of the stream-naming public calls.
  absl::Status FreeOnStream(void* ptr, StreamId stream, const char* what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Validate's stream part.
  absl::Status ValidateStreamsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // --- Checks (src/core/allocator_validate.cc) -----------------------------
  // Validate's body (src/core/allocator_validate.cc).
  [[nodiscard]] absl::Status ValidateLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // At check level 2 (compiled, or raised at run time: check.h's
  // ValidateEveryCall): ValidateLocked, and abort with its message on a
  // violation (ValidateOrDie). No code at level 0. Every mutating public
  // call ends with it; `where` names the call in the message.
  void MaybeValidate(const char* where) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
#if BFC_CHECK_LEVEL >= 1
    if (internal::ValidateEveryCall()) ValidateOrDie(where);
#else
    (void)where;
#endif
  }
  // ValidateLocked, and a check failure naming `where` on a violation.
  void ValidateOrDie(const char* where) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // --- Snapshots and sites (src/core/allocator_snapshot.cc) ----------------
  // Sites are raw frames until a report symbolizes them.
  struct RawStack {
    int depth = 0;
    void* frames[32];
  };
  // A recorded stack as "function" lines, the library's own frames dropped
  // (reads ELF files: call without the lock).
  static std::vector<std::string> SymbolizeSite(void* const* frames, int depth);
  // Captures the caller's stack for a new allocation (record_allocation_sites).
  void RecordAllocationSite(int64_t allocation_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Drops the stack of a freed allocation.
  void ForgetAllocationSite(int64_t allocation_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Appends to history_ (when on), dropping the oldest beyond its bound.
  void RecordEvent(MemoryEvent::Action action, uint64_t address, uint64_t size,
                   uint64_t requested_size, int64_t allocation_id,
                   uint64_t free_bytes = 0)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // `sites`: symbolize allocation sites (slow; error paths and dumps only).
  MemoryDump RecordMemoryMapLocked(bool sites) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // MemoryLog's body (TF's DumpMemoryLog text, sites symbolized).
  std::string MemoryLogLocked(size_t num_bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The destructor's leak report: the largest live chunks and their sites.
  std::string LeakReportLocked(size_t top_n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  std::unique_ptr<SubAllocator> sub_allocator_;
  const std::string name_;
  const Options opts_;
  const size_t memory_limit_;
  const bool coalesce_regions_;
  // SubAllocator::PartialFreeBytes() (0: whole blocks only) and
  // ReservedAddressBytes(), asked once.
  const size_t partial_free_bytes_;
  const size_t va_reserved_bytes_;
  const int64_t max_internal_fragmentation_bytes_;
  // Requests of at least this many (rounded) bytes take the dedicated path;
  // SIZE_MAX when huge_allocation_bytes is 0.
  const size_t huge_threshold_;
  // Split also when the rest is at least this (TF's rule always applies);
  // SIZE_MAX when min_split_remainder_bytes is 0.
  const size_t min_split_remainder_;
  // max_split_bytes rounded; 0: off. Chunks this large serve only requests
  // this large, which never split them unless kMaxUnsplitWaste would be left.
  const size_t max_split_;
  // Whether chunks of max_split_bytes or more are closed to smaller
  // requests: only over a sub-allocator that does not coalesce, where a
  // region stays the size it was grown to (a coalescing one merges regions
  // into free ranges larger than any bound, so only the no-split rule holds).
  const bool oversize_filter_;
  // Whether fully free regions are kept in their least-recently-freed order
  // (LinkFreeRegion): only when an option releases them in that order.
  const bool stamp_free_regions_;
  // PyTorch's kLargeBuffer: what an oversize request may leave unused.
  static constexpr size_t kMaxUnsplitWaste = size_t{20} << 20;
  // pool_release_threshold x the limit; SIZE_MAX when off.
  const size_t pool_release_target_;
  // grow_below_peak_ratio with growth on and a sub-allocator that does not
  // coalesce (where regions merge, a small region beside a free chunk joins
  // it and spares nothing: over the vmm backend the rule only added calls,
  // resnet18-train 1.024 -> 1.026); 0: off.
  const size_t grow_below_peak_ratio_;

  // Guards everything below. Taken after the C ABI's registry mutex and
  // before the log sink's (bfc/internal/mutex.h, "Locks"); held across calls
  // into sub_allocator_, which must not call back into this allocator.
  // Messages go to the log sink after it is released (Lock, DeferLog), so
  // the sink may.
  mutable internal::Mutex mutex_ ABSL_ACQUIRED_BEFORE(internal::log_sink_mutex);
  // Holds mutex_ for a scope. The messages queued under it (DeferLog) reach
  // the log sink once mutex_ is released: a sink that calls back into this
  // allocator (its stats, a memory summary) would otherwise deadlock, and one
  // that takes a lock of its own while another thread holds it and waits for
  // this allocator would deadlock with that thread. Every scope that may log
  // takes mutex_ through Lock, or releases it through
  // UnlockAndSendDeferredLogs when something was queued (the two hot paths,
  // AllocateFast and DeallocateRaw, lock by hand: Lock's check cost 6 %).
  // The queue is empty whenever mutex_ is free, so no call sends another
  // call's messages (from inside a sink, that re-entered it).
  class ABSL_SCOPED_LOCKABLE Lock {
   public:
    explicit Lock(const Allocator* a) ABSL_EXCLUSIVE_LOCK_FUNCTION(a->mutex_)
        : a_(a) {
      a_->mutex_.Lock();
    }
    ~Lock() ABSL_UNLOCK_FUNCTION() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (ABSL_PREDICT_TRUE(a_->deferred_logs_.empty())) {
        a_->mutex_.Unlock();
      } else {
        a_->UnlockAndSendDeferredLogs();
      }
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    const Allocator* const a_;
  };
  // Queues a message for the log sink, sent when the Lock scope ends. With
  // no host memory to queue it, it is sent at once (under mutex_).
  // DeferLog of the message `build` returns, built only when the host can
  // spare the memory; never throws (a report is worth less than the call).
  void DeferReport(LogSeverity severity,
                   absl::FunctionRef<std::string()> build) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void DeferLog(LogSeverity severity, std::string message) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Releases mutex_, then sends what was queued, in order.
  void UnlockAndSendDeferredLogs() const ABSL_UNLOCK_FUNCTION(mutex_);
  // Sends messages taken out of deferred_logs_ (with no lock held).
  static void SendLogs(const internal::LogQueue& logs);
  // Also what user code called under mutex_ (a SubAllocator, StreamOps)
  // logs through bfc::Log (internal::CallUserCodeDeferringLogs).
  mutable internal::LogQueue deferred_logs_ ABSL_GUARDED_BY(mutex_);
  // Signalled (under mutex_) by a free while num_waiters_ > 0: the retry on
  // out-of-memory waits here for another thread's free.
  internal::CondVar freed_cv_;
  int num_waiters_ ABSL_GUARDED_BY(mutex_) = 0;
  // WakeWaiters calls while someone waited: a waiter that released the lock
  // before sleeping (to send its messages) sees what it missed.
  uint64_t wakes_ ABSL_GUARDED_BY(mutex_) = 0;

  size_t curr_region_allocation_bytes_ ABSL_GUARDED_BY(mutex_);
  // The fully free pooled regions, by the one chunk spanning each, least
  // recently freed first: a doubly linked list threaded through
  // free_region_links_ (indexed by chunk handle), so that listing, taking
  // off and releasing are O(1) with no stale entries. Kept only with
  // stamp_free_regions_; Validate checks that it holds exactly those
  // regions.
  struct FreeRegionLink {
    ChunkHandle prev = internal::kInvalidChunkHandle;
    ChunkHandle next = internal::kInvalidChunkHandle;
    bool linked = false;
  };
  std::vector<FreeRegionLink> free_region_links_ ABSL_GUARDED_BY(mutex_);
  ChunkHandle free_region_head_ ABSL_GUARDED_BY(mutex_) =
      internal::kInvalidChunkHandle;
  ChunkHandle free_region_tail_ ABSL_GUARDED_BY(mutex_) =
      internal::kInvalidChunkHandle;
  size_t num_free_region_links_ ABSL_GUARDED_BY(mutex_) = 0;
  // Streams. While only kImplicitStream is used (multi_stream_ false) no
  // fence is stamped and the search is TF's.
  bool multi_stream_ ABSL_GUARDED_BY(mutex_) = false;
  // Which of the paths the common case skips are on: streams
  // (multi_stream_: fences may be nonzero) and TF's timestamps (never turned
  // off), dedicated regions (while any is held). The allocate and free fast
  // paths test this once and otherwise run code without those branches.
  static constexpr uint32_t kStreamsPath = 1;
  static constexpr uint32_t kTimestampsPath = 2;
  static constexpr uint32_t kDedicatedPath = 4;  // while dedicated regions
  // The host could not give a table room it needed (shortage.h): the next
  // allocation grows the tables first, and fails if it cannot.
  static constexpr uint32_t kShortPath = 8;
  // Map entries made room for at construction: enough room past the load
  // bound in every later table.
  static constexpr size_t kMinHandleRoom = 32;
  uint32_t slow_paths_ ABSL_GUARDED_BY(mutex_) = 0;
  std::vector<StreamState> streams_ ABSL_GUARDED_BY(mutex_);
  // Slots of forgotten streams nothing names any more, for new streams; how
  // many slots are forgotten and not yet free; when to look for more; and
  // the streams seen over the allocator's life (StreamStats::streams).
  std::vector<StreamSlot> free_slots_ ABSL_GUARDED_BY(mutex_);
  size_t forgotten_slots_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t next_slot_collection_ ABSL_GUARDED_BY(mutex_) = kMinSlotCollection;
  int64_t streams_seen_ ABSL_GUARDED_BY(mutex_) = 1;
  // std::unordered_map, not absl::flat_hash_map, here and below: a node
  // map's insertion that throws changes nothing, where Debian's Abseil
  // leaves a flat map broken when its growth runs out of memory.
  std::unordered_map<StreamId, StreamSlot> stream_slots_
      ABSL_GUARDED_BY(mutex_);
  std::unique_ptr<StreamOps> stream_ops_ ABSL_GUARDED_BY(mutex_);
  // stream_ops_ != nullptr, readable without the lock (HasStreamOps).
  std::atomic<bool> has_stream_ops_{false};
  std::vector<MultiFence> multi_fences_ ABSL_GUARDED_BY(mutex_);
  std::vector<uint32_t> free_multi_fences_ ABSL_GUARDED_BY(mutex_);
  // In-use chunks other streams also use (RecordStreamUse).
  std::unordered_map<ChunkHandle, ExtraUses> extra_uses_
      ABSL_GUARDED_BY(mutex_);
  // The stream of the allocation in progress.
  StreamSlot alloc_stream_ ABSL_GUARDED_BY(mutex_) = 0;
  // Its AllocationAttributes::host_ready.
  bool alloc_host_ready_ ABSL_GUARDED_BY(mutex_) = false;
  // Set by FindChunk when it left a best fit whole for PreferGrowth: the
  // growth that follows gives nothing back first, and if it fails, that
  // chunk serves after all (AllocateLocked).
  bool grow_instead_ ABSL_GUARDED_BY(mutex_) = false;
  StreamStats stream_stats_ ABSL_GUARDED_BY(mutex_);
  absl::Status stream_error_ ABSL_GUARDED_BY(mutex_);
  size_t total_region_allocated_bytes_ ABSL_GUARDED_BY(mutex_) = 0;
  internal::ChunkTable chunks_ ABSL_GUARDED_BY(mutex_);
  std::array<internal::Bin, kNumBins> bins_ ABSL_GUARDED_BY(mutex_);
  // Bit b set <=> bins_[b] is non-empty: a best-fit search skips empty bins.
  uint32_t non_empty_bins_ ABSL_GUARDED_BY(mutex_) = 0;
  internal::RegionManager region_manager_ ABSL_GUARDED_BY(mutex_){&chunks_};
  int64_t next_allocation_id_ ABSL_GUARDED_BY(mutex_) = 1;
  // Dedicated regions held: frees look their region up only while > 0.
  int64_t num_dedicated_regions_ ABSL_GUARDED_BY(mutex_) = 0;
  // TF's timestamped reuse (SetTimingCounter): the counter, the safe
  // frontier, each free chunk's count (only while timestamped; a side table
  // so that chunks stay small), the chunks freed since (TF's queue; entries
  // may be stale: rechecked when used), the allocation's freed_by_func
  // count, and whether merges ignore counts (a forced merge).
  SharedCounter* timing_counter_ ABSL_GUARDED_BY(mutex_) = nullptr;
  std::atomic<bool> has_timing_counter_{false};  // read without the lock
  uint64_t safe_frontier_ ABSL_GUARDED_BY(mutex_) = 0;
  // A column beside the chunk table (grown with it, GrowColumns, so that a
  // free never needs host memory): each chunk's free count, 0 for none.
  std::vector<uint64_t> freed_at_ ABSL_GUARDED_BY(mutex_);
  std::deque<ChunkHandle> timestamped_chunks_ ABSL_GUARDED_BY(mutex_);
  bool timestamp_queue_lost_ ABSL_GUARDED_BY(mutex_) = false;
  uint64_t alloc_freed_before_ ABSL_GUARDED_BY(mutex_) = 0;
  bool force_timestamp_merge_ ABSL_GUARDED_BY(mutex_) = false;
  // Freed dedicated regions whose fence could not be waited for (a failed
  // synchronization): never handed out, given back once the fence is known
  // complete (MergeDeferred). Their one chunk is free, fenced and unbinned.
  std::vector<ChunkHandle> pending_dedicated_ ABSL_GUARDED_BY(mutex_);
  // Every free chunk that may hold a fence: listed (ListFenced) wherever a
  // chunk's fence becomes non-zero, dropped by MergeDeferred once its chunk
  // is gone, in use or clean. MergeDeferred then costs what is fenced, not
  // every free chunk. fence_listed_[h]: h is in the list (no duplicates).
  std::vector<ChunkHandle> fenced_chunks_ ABSL_GUARDED_BY(mutex_);
  std::vector<bool> fence_listed_ ABSL_GUARDED_BY(mutex_);
  // ListFenced could not list a chunk (no host memory): MergeDeferred
  // rebuilds the list from the bins first.
  bool fence_list_lost_ ABSL_GUARDED_BY(mutex_) = false;
  AllocatorStats stats_ ABSL_GUARDED_BY(mutex_);
  int oom_logs_ ABSL_GUARDED_BY(mutex_) = 0;
  int oom_notes_ ABSL_GUARDED_BY(mutex_) = 0;  // LogOomNote's lines
  // Invalid frees and requests reported (ReportInvalid), logged or not.
  int64_t invalid_reports_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t oom_logs_suppressed_ ABSL_GUARDED_BY(mutex_) = 0;
  // Set by Extend when the sub-allocator threw during the current attempt.
  absl::Status extend_error_ ABSL_GUARDED_BY(mutex_);
  SubAllocatorFailures sub_failures_ ABSL_GUARDED_BY(mutex_);
  // allocation id -> call stack, with Options::record_allocation_sites.
  // Live allocations whose site the host had no memory to record.
  std::unordered_map<int64_t, RawStack> sites_ ABSL_GUARDED_BY(mutex_);
  size_t sites_unrecorded_ ABSL_GUARDED_BY(mutex_) = 0;
  // RecordMemoryHistory's ring: null while off, so the hot paths test one
  // pointer. `next` is where the next event goes once the ring is full.
  struct History {
    size_t max_entries = 0;
    std::vector<MemoryEvent> ring;
    size_t next = 0;
    uint64_t recorded = 0;
  };
  std::unique_ptr<History> history_ ABSL_GUARDED_BY(mutex_);

  // --- Accounts (bfc/account.h; src/core/allocator_accounts.cc) ------------
  // Gives `st` an id (its tag) and lists it; its parent lists it as a child.
  // Throws std::bad_alloc before changing anything, and never once
  // ReserveAccountLocked(*st) returned under the same lock.
  void RegisterAccountLocked(const std::shared_ptr<internal::AccountState>& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The host memory RegisterAccountLocked(st) needs; throws std::bad_alloc.
  void ReserveAccountLocked(const internal::AccountState& st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // AllocateOrFail's charge for an attempt (checked: of this allocator, not
  // closed). A refusal is counted in the account's failures by the caller,
  // once per call. Inline (with the other hot ones:
  // core/internal/allocator_accounts_inl.h).
  absl::Status ChargeForAllocationLocked(internal::AccountState* st,
                                         size_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Its cold part: why the charge failed (nothing changed).
  absl::Status AccountChargeFailureLocked(internal::AccountState* st,
                                          size_t rounded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Closes `st` if it can be (no open child, no call in progress): its name
  // is free again and its reservation goes back to its parent. OK, or
  // FailedPrecondition saying why it stays open. Account::Close, and the
  // close of an account whose handle went while a call charged to it was in
  // progress (finished when the call returns).
  absl::Status CloseAccountLocked(internal::AccountState* st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Charges `bytes` up the tree unless some limit refuses: all or nothing.
  bool TryChargeAccountLocked(internal::AccountState* st, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Its second half: the charge, with no limit checked (what a refused
  // transfer uses to put the source's charge back as it was).
  void ApplyChargeLocked(internal::AccountState* st, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The refusal of a charge TryChargeAccountLocked refused, naming the
  // level.
  absl::Status AccountRefusalLocked(const internal::AccountState* st,
                                    int64_t bytes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Charges `bytes` to `st` and, above each level's reservation, to its
  // ancestors: all or nothing. ResourceExhausted (with the account-limit
  // payload) naming the level whose limit refuses it.
  absl::Status ChargeAccountLocked(internal::AccountState* st, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CreditAccountLocked(internal::AccountState* st, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Account::TransferOwnership: the in-use chunk at `ptr`, charged to
  // `from`, charged to `to` instead (all or nothing).
  absl::Status TransferChunkLocked(void* ptr, internal::AccountState* from,
                                   internal::AccountState* to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Records that in-use chunk `h` (its requested size set) is charged to
  // `st`.
  void TagChunkLocked(ChunkHandle h, internal::AccountState* st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The account in-use chunk `h` is charged to, or nullptr.
  internal::AccountState* ChunkAccountLocked(ChunkHandle h) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return h < chunk_account_.size() && chunk_account_[h] != 0
               ? accounts_[chunk_account_[h]].get()
               : nullptr;
  }
  // MarkFree's part: credits the account of the chunk being freed.
  void CreditFreedChunkLocked(ChunkHandle h)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The allocations charged to `st` now, oldest first, with their sites.
  std::vector<LeakedAllocation> ChargedAllocations(
      const internal::AccountState* st) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Drops a closed account with nothing charged (and its id).
  void MaybeForgetAccountLocked(internal::AccountState* st)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Sum of charges = tagged chunks, tags only on in-use chunks, each level's
  // use = own + children's max(reservation, use).
  absl::Status ValidateAccountsLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Accounts by id (0: none); ids of forgotten accounts are reused.
  std::vector<std::shared_ptr<internal::AccountState>> accounts_
      ABSL_GUARDED_BY(mutex_);
  std::vector<uint32_t> free_account_ids_ ABSL_GUARDED_BY(mutex_);
  // A column of the chunk table: the account id of in-use chunk h (0: none).
  // Sized on first use, so an allocator without accounts pays nothing.
  std::vector<uint32_t> chunk_account_ ABSL_GUARDED_BY(mutex_);
  bool accounts_on_ ABSL_GUARDED_BY(mutex_) = false;
  // The account the allocation in progress is charged to, for
  // AllocateChunk to tag (set only around AllocateOrFail's attempts).
  internal::AccountState* alloc_account_ ABSL_GUARDED_BY(mutex_) = nullptr;
};

}  // namespace bfc

#endif  // BFC_ALLOCATOR_H_
