// File: bfc/allocator_stats.h
// -----------------------------------------------------------------------------
//
// AllocatorStats: the numbers TensorFlow's `tsl::AllocatorStats` reports, with
// the same names and meanings, plus counters for incidents (bad input, out of
// memory) and where the bytes go. Sizes are bytes. `bytes_in_use`,
// `peak_bytes_in_use` and `largest_alloc_size` count whole chunk sizes
// (rounded to 256 and possibly larger than asked when a chunk was not split),
// exactly as TF does.
//
// One definition, one table: the fields are declared once in
// BFC_ALLOCATOR_STATS_FIELDS (type, name, DebugString label, one-line doc).
// The struct, AllocatorStatsFields(), DebugString() and the "stats" object of
// the JSON dump (bfc/report/memory_dump_json.h) are generated from it; adding
// a stat is one line here, the code that counts it, and its test.
//
// Thread safety: a plain value.
#ifndef BFC_ALLOCATOR_STATS_H_
#define BFC_ALLOCATOR_STATS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace bfc {

// X(type, name, label, doc). `type` is int64_t, std::optional<int64_t> (unset
// where the allocator does not know the value) or double. `label`: the
// DebugString line, TF's spelling for TF's fields.
#define BFC_ALLOCATOR_STATS_FIELDS(X)                                         \
  X(int64_t, num_allocs, "NumAllocs",                                         \
    "allocations since construction or ClearStats()")                         \
  X(int64_t, bytes_in_use, "InUse", "sum of in-use chunk sizes (rounded)")    \
  X(int64_t, peak_bytes_in_use, "MaxInUse",                                   \
    "the largest bytes_in_use since construction, ClearStats or "             \
    "ResetPeakStats")                                                         \
  X(int64_t, largest_alloc_size, "MaxAllocSize",                              \
    "largest in-use chunk size handed out")                                   \
  X(std::optional<int64_t>, bytes_limit, "Limit", "total_memory")             \
  X(int64_t, bytes_reserved, "Reserved",                                      \
    "TF's field for allocators that reserve ahead; BFC reports 0")            \
  X(int64_t, peak_bytes_reserved, "PeakReserved",                             \
    "TF's field for allocators that reserve ahead; BFC reports 0")            \
  X(std::optional<int64_t>, bytes_reservable_limit, "ReservableLimit",        \
    "TF's field for allocators that reserve ahead; unset")                    \
  X(int64_t, largest_free_block_bytes, "LargestFreeBlock",                    \
    "the largest free chunk right now")                                       \
  X(std::optional<int64_t>, pool_bytes, "PoolBytes",                          \
    "bytes held in regions from the sub-allocator")                           \
  X(std::optional<int64_t>, peak_pool_bytes, "PeakPoolBytes",                 \
    "the largest pool_bytes since construction or ResetPeakStats")            \
  X(int64_t, num_invalid_frees, "InvalidFrees",                               \
    "frees of a pointer the allocator does not own (never reset)")            \
  X(int64_t, num_invalid_requests, "InvalidRequests",                         \
    "bad alignment, overflowing size, ... (never reset)")                     \
  X(int64_t, num_ooms, "OOMs",                                                \
    "allocations that failed for lack of memory (never reset)")               \
  X(int64_t, num_extends, "Extends",                                          \
    "regions obtained from the sub-allocator (never reset)")                  \
  X(int64_t, num_regions_released, "RegionsReleased",                         \
    "regions given back: GC, ReleaseFreeRegions (never reset)")               \
  X(int64_t, num_partial_releases, "PartialReleases",                         \
    "page-aligned interiors of free chunks given back (ReleaseFreeMemory, "   \
    "release_partial_regions; never reset)")                                  \
  X(std::optional<int64_t>, va_reserved_bytes, "VaReserved",                  \
    "address space the sub-allocator holds (a VMM reservation); unset "       \
    "when it reserves none")                                                  \
  X(int64_t, num_sub_allocator_rejects, "SubAllocRejects",                    \
    "sub-allocator memory refused: misaligned, short (never reset)")          \
  X(int64_t, num_retries, "Retries",                                          \
    "waits for other threads' frees by allocations that had failed")          \
  X(int64_t, huge_bytes_in_use, "HugeInUse",                                  \
    "bytes in regions of their own (huge_allocation_bytes, dedicated)")       \
  X(int64_t, growth_overshoot_bytes, "GrowthOvershoot",                       \
    "bytes taken by Extend beyond what the requests that grew the pool "      \
    "needed, summed over every Extend (never reset)")                         \
  X(int64_t, bytes_requested_in_use, "RequestedInUse",                        \
    "what callers asked for, over in-use chunks: bytes_in_use minus this is " \
    "internal fragmentation")                                                 \
  X(double, fragmentation, "Fragmentation",                                   \
    "TF's external fragmentation: (free - largest free chunk) / free, free "  \
    "= pool_bytes - bytes_in_use; 0 when nothing is free")

struct AllocatorStats {
#define BFC_INTERNAL_DECLARE_STAT(type, name, label, doc) type name{};
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_DECLARE_STAT)
#undef BFC_INTERNAL_DECLARE_STAT

  // One line per field ("InUse:  1024"); TF's Limit line first, as TF prints
  // it, so existing log scrapers keep working.
  std::string DebugString() const;
};

// What stream-ordered reuse cost so far (Allocator::GetStreamStats; never
// reset), and what waits on streams now.
struct StreamStats {
  int64_t streams = 0;           // streams seen (kImplicitStream included)
  int64_t events_recorded = 0;   // StreamOps::RecordEvent calls
  int64_t event_queries = 0;     // StreamOps::QueryEvent calls
  int64_t waits_inserted = 0;    // StreamOps::StreamWaitEvent calls
  int64_t synchronizations = 0;  // StreamOps::SynchronizeEvent calls
  int64_t stream_op_errors = 0;  // StreamOps calls that failed
  // Free bytes whose fence is not yet known complete, right now (freed
  // dedicated regions waiting to go back included).
  int64_t bytes_pending = 0;
};

enum class StatKind { kInt, kOptionalInt, kDouble };

// One row of the table.
struct StatField {
  absl::string_view name;  // num_allocs
  StatKind kind;
  absl::string_view label;  // NumAllocs
  absl::string_view doc;
};

// Every stat, in declaration order.
absl::Span<const StatField> AllocatorStatsFields();

bool operator==(const AllocatorStats& a, const AllocatorStats& b);
inline bool operator!=(const AllocatorStats& a, const AllocatorStats& b) {
  return !(a == b);
}

}  // namespace bfc

#endif  // BFC_ALLOCATOR_STATS_H_
