// File: src/core/allocator_validate.cc
// Allocator::Validate: every invariant of DESIGN.md ("Invariants"), checked
// the way VMA's Validate() checks a block: each component validates itself
// (ChunkTable, RegionManager with its ChunkMap, every Bin), and this file adds
// only what spans them:
//
//   1. Chunks tile every region exactly, through mutual prev/next links.
//   2. No two neighbouring chunks of a region are both free.
//   3. Free chunks and bin entries match both ways; the non-empty-bin bitmap
//      matches the bins.
//   4. The region map resolves every chunk's start to its handle, and maps
//      nothing else; chunk sizes and starts are multiples of
//      kMinAllocationSize.
//   5. The stats agree with the chunks and regions.
//
// Messages name the object: "Allocator 'gpu': region 0 [0x..., 0x...): chunk
// 4 Chunk{...} should start at 0x...". With BFC_CHECK_LEVEL >= 2,
// MaybeValidate runs ValidateOrDie after every mutating call.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/optimization.h"
#include "absl/strings/str_cat.h"
#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/check.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/log_queue.h"
#include "bfc/internal/region_manager.h"
#include "bfc/internal/str_format.h"

namespace bfc {
namespace {

using internal::BinNum;
using internal::BinNumForSize;
using internal::Chunk;
using internal::ChunkHandle;
using internal::kInvalidChunkHandle;

// "region 1 [0x10000, 0x12000)", as RegionManager::Validate names regions.
std::string DescribeRegion(size_t index, const internal::AllocationRegion& r) {
  return internal::Format("region %d [0x%x, 0x%x)", index, r.addr(),
                          r.end_addr());
}

// "chunk 4 Chunk{ptr=0x..., size=..., ...}"
std::string DescribeChunk(ChunkHandle h, const Chunk& c) {
  return absl::StrCat("chunk ", h, " ", c.DebugString());
}

}  // namespace

absl::Status Allocator::Validate() const {
  Lock lock(this);
  // The checks allocate (marks, counts per record): without host memory
  // they cannot run, which is not a violation, and nothing may throw out of
  // the library.
  try {
    return ValidateLocked();
  } catch (...) {
  }
  try {
    return absl::ResourceExhaustedError(
        "Validate: the host has no memory for the checks");
  } catch (...) {
    return absl::Status(absl::StatusCode::kResourceExhausted, "");
  }
}

// A broken invariant is a bug in this library, not a caller mistake: one line
// on stderr,
//   bfc: check failed at <this file>:<line>: Validate() after Deallocate:
//   Allocator '<name>': <what>
// and abort.
void Allocator::ValidateOrDie(const char* where) const {
  absl::Status s;
  try {
    s = ValidateLocked();
  } catch (...) {
    return;  // no host memory for the checks: skipped, as Validate says
  }
  if (ABSL_PREDICT_FALSE(!s.ok())) {
    // What is queued would never be sent: it goes first.
    internal::SendQueuedLogsBeforeAbort(&deferred_logs_);
    internal::check_internal::Fail(
        __FILE__, __LINE__,
        absl::StrCat("Validate() after ", where, ": ", s.message()));
  }
}

absl::Status Allocator::ValidateLocked() const {
  auto fail = [&](auto&&... parts) {
    return absl::InternalError(
        absl::StrCat("Allocator '", name_, "': ", parts...));
  };

  // --- Each component alone -------------------------------------------------
  if (absl::Status s = chunks_.Validate(); !s.ok()) return fail(s.message());
  if (absl::Status s = region_manager_.Validate(); !s.ok()) {
    return fail(s.message());
  }
  for (BinNum b = 0; b < kNumBins; ++b) {
    if (absl::Status s = bins_[b].Validate(b, &chunks_); !s.ok()) {
      return fail(s.message());
    }
    const bool bit = (non_empty_bins_ >> b) & 1;
    if (bit == bins_[b].empty()) {
      return fail("bin ", b, " holds ", bins_[b].size(),
                  " entries but its bit in the non-empty-bin bitmap is ",
                  bit ? 1 : 0);
    }
  }
  if ((non_empty_bins_ >> kNumBins) != 0) {
    return fail("the non-empty-bin bitmap ",
                internal::Format("0x%x", non_empty_bins_),
                " has bits past bin ", kNumBins - 1);
  }

  // --- Invariants 1, 2, 3 (chunk side) and 4: walk every region -------------
  const auto& regions = region_manager_.regions();
  size_t region_bytes = 0;
  size_t chunks_seen = 0;
  size_t free_chunks = 0;
  size_t free_bytes = 0;
  int64_t in_use_bytes = 0;
  int64_t requested_bytes = 0;
  int64_t dedicated_regions = 0;
  int64_t dedicated_bytes = 0;
  size_t pending_regions = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const internal::AllocationRegion& r = regions[i];
    // Messages only (formatting on every region would cost more than the
    // region's checks).
    auto region = [&] { return DescribeRegion(i, r); };
    if (r.dedicated()) {
      // One chunk, in use, spanning the region: it is given back when freed
      // -- or, freed while a fence could not be waited for, free, fenced and
      // listed in pending_dedicated_ (never binned).
      const ChunkHandle first = region_manager_.get_handle(r.ptr());
      if (first == kInvalidChunkHandle || !chunks_.InRange(first) ||
          chunks_[first].size != r.memory_size() ||
          chunks_[first].next != kInvalidChunkHandle) {
        return fail(region(), " is dedicated but is not one chunk");
      }
      ++dedicated_regions;
      const bool pending =
          std::find(pending_dedicated_.begin(), pending_dedicated_.end(),
                    first) != pending_dedicated_.end();
      if (chunks_[first].in_use() == pending) {
        return fail(region(), " is dedicated; its chunk is ",
                    pending ? "in use but listed as pending release"
                            : "free but not listed as pending release");
      }
      if (pending) {
        ++pending_regions;
        if (chunks_[first].fence == 0 || chunks_[first].requested_size != 0) {
          return fail(region(), " waits for release without a fence");
        }
        region_bytes += r.memory_size();
        ++chunks_seen;
        continue;
      }
      dedicated_bytes += static_cast<int64_t>(r.memory_size());
    }
    if (i > 0 && coalesce_regions_ && regions[i - 1].end_addr() == r.addr() &&
        !regions[i - 1].dedicated() && !r.dedicated()) {
      return fail(DescribeRegion(i - 1, regions[i - 1]), " and ", region(),
                  " are contiguous but not merged (the sub-allocator "
                  "supports coalescing)");
    }
    region_bytes += r.memory_size();
    uintptr_t expected = r.addr();
    ChunkHandle prev = kInvalidChunkHandle;
    bool prev_free = false;
    // RegionManager::Validate vouched for a chunk mapped at the base.
    for (ChunkHandle h = region_manager_.get_handle(r.ptr());
         h != kInvalidChunkHandle;) {
      if (!chunks_.InRange(h)) {
        return fail(region(), ": chunk ", prev, " links to handle ", h,
                    ", out of range (", chunks_.capacity(), " chunk slots)");
      }
      if (++chunks_seen > chunks_.num_live()) {
        return fail(region(), ": the chunk lists reach more than the ",
                    chunks_.num_live(), " live chunks (a loop?) at chunk ", h);
      }
      const Chunk& c = chunks_[h];
      if (c.ptr == nullptr || c.size == 0) {
        return fail(region(), ": chunk ", prev, " links to handle ", h,
                    ", a recycled slot");
      }
      if (c.addr() != expected) {
        return fail(region(), ": ", DescribeChunk(h, c), " should start at ",
                    internal::Format("0x%x", expected));
      }
      if (c.prev != prev) {
        return fail(region(), ": ", DescribeChunk(h, c), " has prev ",
                    c.prev == kInvalidChunkHandle ? std::string("none")
                                                  : absl::StrCat(c.prev),
                    ", expected ",
                    prev == kInvalidChunkHandle ? std::string("none")
                                                : absl::StrCat(prev));
      }
      if (c.size % kMinAllocationSize != 0 ||
          c.addr() % kMinAllocationSize != 0) {
        return fail(region(), ": ", DescribeChunk(h, c),
                    " has a size or start that is not a multiple of ",
                    kMinAllocationSize);
      }
      if (c.end_addr() > r.end_addr() || c.end_addr() < c.addr()) {
        return fail(region(), ": ", DescribeChunk(h, c),
                    " runs past the region's end");
      }
      // Invariant 4: the region map resolves the chunk's start to it.
      const ChunkHandle mapped = region_manager_.get_handle(c.ptr);
      if (mapped != h) {
        return fail(region(), ": the region map resolves the start of ",
                    DescribeChunk(h, c), " to handle ",
                    mapped == kInvalidChunkHandle ? std::string("none")
                                                  : absl::StrCat(mapped));
      }
      if (c.in_use()) {
        if (c.allocation_id <= 0 || c.allocation_id >= next_allocation_id_) {
          return fail(region(), ": ", DescribeChunk(h, c),
                      " has an allocation id outside [1, ", next_allocation_id_,
                      ")");
        }
        if (c.requested_size == 0 || c.requested_size > c.size) {
          return fail(region(), ": ", DescribeChunk(h, c),
                      " has a requested size outside (0, size]");
        }
        in_use_bytes += static_cast<int64_t>(c.size);
        requested_bytes += static_cast<int64_t>(c.requested_size);
        prev_free = false;
      } else {
        // Invariant 2: coalescing is complete -- except where a stream fence
        // defers it (two free neighbours, one still fenced: merged once its
        // fence is known complete).
        // Nor with TF's timestamped reuse, which leaves free neighbours
        // apart as TF does (a count not yet safe; a forced merge satisfied
        // early requeues the rest, and a chunk split from one of those
        // leaves a remainder that is not queued).
        if (prev_free && c.fence == 0 && chunks_[prev].fence == 0 &&
            timing_counter_ == nullptr) {
          return fail(region(), ": ", DescribeChunk(h, c),
                      " and its free prev ", DescribeChunk(prev, chunks_[prev]),
                      " are not merged");
        }
        if (c.requested_size != 0) {
          return fail(region(), ": free ", DescribeChunk(h, c),
                      " keeps a requested size");
        }
        // Invariant 3: every free chunk is in the bin its size names.
        const BinNum b = BinNumForSize(c.size);
        if (!bins_[b].Contains(c.size, c.ptr)) {
          return fail(region(), ": free ", DescribeChunk(h, c),
                      " is missing from bin ", b);
        }
        ++free_chunks;
        free_bytes += c.size;
        prev_free = true;
      }
      expected = c.end_addr();
      prev = h;
      h = c.next;
    }
    if (expected != r.end_addr()) {
      return fail(region(), ": its chunks end at ",
                  internal::Format("0x%x", expected));
    }
  }
  // Every live chunk was reached, and the map holds nothing else (it maps no
  // start twice: ChunkMap::Validate).
  if (chunks_seen != chunks_.num_live()) {
    return fail(chunks_.num_live(), " live chunks but ", chunks_seen,
                " reachable from the regions");
  }
  if (region_manager_.num_handles() != chunks_seen) {
    return fail("the region map holds ", region_manager_.num_handles(),
                " chunk starts for ", chunks_seen, " chunks");
  }
  // --- The free-region list holds exactly the fully free pooled regions ----
  // (with stamp_free_regions_; none without), each once, in a consistent
  // doubly linked order.
  size_t fully_free = 0;
  for (size_t i = 0; i < regions.size(); ++i) {
    const internal::AllocationRegion& r = regions[i];
    if (r.dedicated()) continue;
    const ChunkHandle h = region_manager_.get_handle(r.ptr());
    if (chunks_[h].in_use() || chunks_[h].size != r.memory_size()) continue;
    ++fully_free;
    const bool linked =
        h < free_region_links_.size() && free_region_links_[h].linked;
    if (linked != stamp_free_regions_) {
      return fail(DescribeRegion(i, r),
                  linked ? " is on the free-region list, which no option uses"
                         : " is fully free but missing from the free-region "
                           "list");
    }
  }
  const size_t expected_links = stamp_free_regions_ ? fully_free : 0;
  size_t links = 0;
  ChunkHandle last = kInvalidChunkHandle;
  for (ChunkHandle h = free_region_head_; h != kInvalidChunkHandle;
       h = free_region_links_[h].next) {
    if (links == expected_links) {
      return fail("the free-region list is longer than the ", expected_links,
                  " fully free pooled regions; entry ", links, " is handle ",
                  h);
    }
    if (h >= free_region_links_.size() || !free_region_links_[h].linked ||
        free_region_links_[h].prev != last) {
      return fail("free-region list entry ", links, " (handle ", h,
                  ") is not linked back to its predecessor ", last);
    }
    if (!chunks_.InRange(h) || chunks_[h].ptr == nullptr ||
        chunks_[h].in_use() || chunks_[h].prev != kInvalidChunkHandle ||
        chunks_[h].next != kInvalidChunkHandle) {
      return fail("free-region list entry ", links, " (handle ", h,
                  ") is not a chunk spanning a fully free region");
    }
    last = h;
    ++links;
  }
  if (last != free_region_tail_ || links != expected_links ||
      links != num_free_region_links_) {
    return fail("the free-region list has ", links, " entries ending at ", last,
                "; expected ", expected_links, " ending at the tail ",
                free_region_tail_, " (count ", num_free_region_links_, ")");
  }

  // Invariant 3, from the bins' side: each entry names a free chunk
  // (Bin::Validate) and each free chunk has an entry (above); equal counts
  // make that a one-to-one match.
  size_t bin_entries = 0;
  size_t bin_bytes = 0;
  for (const internal::Bin& bin : bins_) {
    bin_entries += bin.size();
    bin_bytes += bin.total_bytes();
  }
  if (bin_entries != free_chunks || bin_bytes != free_bytes) {
    return fail("the bins hold ", bin_entries, " chunks / ", bin_bytes,
                " bytes; the regions have ", free_chunks, " free chunks / ",
                free_bytes, " bytes");
  }

  // --- The fast paths skip exactly what is off -------------------------------
  const uint32_t want_slow =
      (multi_stream_ ? kStreamsPath : 0) |
      (timing_counter_ != nullptr ? kTimestampsPath : 0) |
      (num_dedicated_regions_ > 0 ? kDedicatedPath : 0);
  // kShortPath comes and goes with the host's memory (shortage.h).
  if ((slow_paths_ & ~kShortPath) != want_slow) {
    return fail("slow_paths_ is ", slow_paths_, " but the state needs ",
                want_slow);
  }

  // --- TF's free counts: only on live chunks (stale on an in-use one: never
  // read while in use), never 0, none without a timing counter -------------
  if (!freed_at_.empty() && timing_counter_ == nullptr) {
    return fail(freed_at_.size(), " free counts without a timing counter");
  }
  if (timing_counter_ != nullptr && freed_at_.size() < chunks_.handle_bound()) {
    return fail("free counts for ", freed_at_.size(), " chunk slots of ",
                chunks_.handle_bound());
  }
  for (ChunkHandle h = 0; h < freed_at_.size(); ++h) {
    const uint64_t count = freed_at_[h];
    if (count == 0) continue;
    if (!chunks_.InRange(h) || chunks_[h].ptr == nullptr ||
        region_manager_.get_handle(chunks_[h].ptr) != h) {
      return fail("free count ", count, " recorded for chunk ", h,
                  ", which is not a live chunk");
    }
  }

  // The other columns of the chunk table cover every slot it can hand out
  // (GrowColumns grows them first): a free or an allocation that found its
  // column short would have to grow it there, where it must not fail.
  if (stamp_free_regions_ &&
      free_region_links_.size() < chunks_.handle_bound()) {
    return fail("free-region links for ", free_region_links_.size(),
                " chunk slots of ", chunks_.handle_bound());
  }
  if (accounts_on_ && chunk_account_.size() < chunks_.handle_bound()) {
    return fail("account tags for ", chunk_account_.size(), " chunk slots of ",
                chunks_.handle_bound());
  }
  // Set only inside the calls that force TF's merges (out of memory, region
  // release); left on, later merges would ignore TF's free counts and join
  // memory a freed_by_func caller may not reuse yet.
  if (force_timestamp_merge_) {
    return fail("forced merges of timestamped chunks are still on");
  }

  // --- Invariant 5: stats agree with the chunks and regions -----------------
  if (pending_regions != pending_dedicated_.size()) {
    return fail(pending_dedicated_.size(),
                " dedicated regions listed as pending release, ",
                pending_regions, " found");
  }
  if (dedicated_regions != num_dedicated_regions_ ||
      dedicated_bytes != stats_.huge_bytes_in_use) {
    return fail(dedicated_regions, " dedicated regions of ", dedicated_bytes,
                " bytes, but the allocator counts ", num_dedicated_regions_,
                " and huge_bytes_in_use is ", stats_.huge_bytes_in_use);
  }
  if (stats_.bytes_in_use != in_use_bytes) {
    return fail("bytes_in_use is ", stats_.bytes_in_use,
                " but in-use chunks sum to ", in_use_bytes);
  }
  if (stats_.peak_bytes_in_use < stats_.bytes_in_use) {
    return fail("peak_bytes_in_use ", stats_.peak_bytes_in_use,
                " < bytes_in_use ", stats_.bytes_in_use);
  }
  if (stats_.bytes_requested_in_use != requested_bytes) {
    return fail("bytes_requested_in_use is ", stats_.bytes_requested_in_use,
                " but in-use chunks asked for ", requested_bytes);
  }
  // A dedicated region waiting for its stream holds a freed chunk, out of
  // the bins: not a live allocation either.
  const size_t live_allocations = chunks_seen - free_chunks - pending_regions;
  if (opts_.record_allocation_sites &&
      sites_.size() + sites_unrecorded_ != live_allocations) {
    return fail(sites_.size(), " allocation sites recorded and ",
                sites_unrecorded_, " unrecorded for ", live_allocations,
                " live allocations");
  }
  if (region_bytes != total_region_allocated_bytes_ ||
      static_cast<int64_t>(region_bytes) != *stats_.pool_bytes) {
    return fail("regions sum to ", region_bytes, " bytes but pool_bytes is ",
                *stats_.pool_bytes, " and the running total ",
                total_region_allocated_bytes_);
  }
  if (region_bytes > memory_limit_) {
    return fail("the pool of ", region_bytes, " bytes exceeds the limit of ",
                memory_limit_);
  }
  if (*stats_.peak_pool_bytes < *stats_.pool_bytes) {
    return fail("peak_pool_bytes ", *stats_.peak_pool_bytes, " < pool_bytes ",
                *stats_.pool_bytes);
  }
  if (absl::Status st = ValidateStreamsLocked(); !st.ok()) return st;
  if (accounts_on_) {
    if (absl::Status st = ValidateAccountsLocked(); !st.ok()) return st;
  }
  if (sub_allocator_ != nullptr) {
    std::vector<std::pair<uintptr_t, uintptr_t>> held;
    held.reserve(region_manager_.regions().size());
    for (const internal::AllocationRegion& r : region_manager_.regions()) {
      held.emplace_back(r.addr(), r.end_addr());
    }
    absl::Status st;
    {
      // What it logs joins this allocator's queue (user code under the lock).
      internal::ScopedLogDeferral defer(&deferred_logs_);
      try {
        st = sub_allocator_->CheckHeldRegions(held);
      } catch (...) {
        st = absl::OkStatus();  // user code that cannot tell; not ours to fail
      }
    }
    if (!st.ok()) return fail("the sub-allocator disagrees: ", st.message());
  }
  if (stats_.num_allocs < 0 || stats_.largest_alloc_size < 0 ||
      stats_.num_retries < 0) {
    return fail("negative counters: num_allocs ", stats_.num_allocs,
                ", largest_alloc_size ", stats_.largest_alloc_size,
                ", num_retries ", stats_.num_retries);
  }
  return absl::OkStatus();
}

}  // namespace bfc
