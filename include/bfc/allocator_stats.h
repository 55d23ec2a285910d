// File: bfc/allocator_stats.h
// -----------------------------------------------------------------------------
//
// AllocatorStats: the numbers TensorFlow's `tsl::AllocatorStats` reports, with
// the same meanings, plus counters for incidents (bad input, out of memory).
// Sizes are bytes. `bytes_in_use`, `peak_bytes_in_use` and `largest_alloc_size`
// count whole chunk sizes (rounded to 256 and possibly larger than asked when
// a chunk was not split), exactly as TF does.
#ifndef BFC_ALLOCATOR_STATS_H_
#define BFC_ALLOCATOR_STATS_H_

#include <cstdint>
#include <optional>
#include <string>

namespace bfc {

struct AllocatorStats {
  int64_t num_allocs = 0;    // allocations since construction or ClearStats()
  int64_t bytes_in_use = 0;  // sum of in-use chunk sizes (rounded)
  int64_t peak_bytes_in_use = 0;
  int64_t largest_alloc_size = 0;      // largest in-use chunk size handed out
  std::optional<int64_t> bytes_limit;  // total_memory

  // TF's fields for allocators that reserve memory ahead; BFC reports 0.
  int64_t bytes_reserved = 0;
  int64_t peak_bytes_reserved = 0;
  std::optional<int64_t> bytes_reservable_limit;

  int64_t largest_free_block_bytes = 0;  // the largest free chunk right now
  std::optional<int64_t>
      pool_bytes;  // bytes held in regions from the sub-allocator
  std::optional<int64_t> peak_pool_bytes;

  // --- bfc additions: incident counters (never reset by ClearStats) ---------
  int64_t num_invalid_frees =
      0;  // DeallocateRaw/Deallocate of a pointer we do not own
  int64_t num_invalid_requests = 0;  // bad alignment, overflowing size, ...
  int64_t num_ooms = 0;     // allocations that failed for lack of memory
  int64_t num_extends = 0;  // regions obtained from the sub-allocator
  int64_t num_regions_released =
      0;  // regions given back (GC, ReleaseFreeRegions)
  int64_t num_sub_allocator_rejects =
      0;  // sub-allocator memory refused (misaligned, short)
  int64_t num_retries =
      0;  // waits for other threads' frees by allocations that had failed

  // --- bfc additions: where the bytes go ------------------------------------
  // Sum of what callers asked for over in-use chunks: bytes_in_use minus this
  // is internal fragmentation (rounding to 256, unsplit remainders).
  int64_t bytes_requested_in_use = 0;
  // TF's external fragmentation metric, computed by GetStats():
  // (free - largest free chunk) / free, free = pool_bytes - bytes_in_use;
  // 0 when nothing is free. 0: all free bytes in one chunk; near 1: free
  // memory scattered in pieces too small for large requests.
  double fragmentation = 0;

  // One line per field, TF's layout first.
  std::string DebugString() const;
};

}  // namespace bfc

#endif  // BFC_ALLOCATOR_STATS_H_
