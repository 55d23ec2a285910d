// File: src/allocator_stats.cc
#include "bfc/allocator_stats.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace bfc {
namespace {

std::string OptionalToString(const std::optional<int64_t>& v) {
  return v.has_value() ? absl::StrCat(*v) : "n/a";
}

}  // namespace

std::string AllocatorStats::DebugString() const {
  // TF's field order and spelling first, so existing log scrapers keep working.
  return absl::StrFormat(
      "Limit:            %20s\n"
      "InUse:            %20lld\n"
      "MaxInUse:         %20lld\n"
      "NumAllocs:        %20lld\n"
      "MaxAllocSize:     %20lld\n"
      "Reserved:         %20lld\n"
      "PeakReserved:     %20lld\n"
      "LargestFreeBlock: %20lld\n"
      "PoolBytes:        %20s\n"
      "PeakPoolBytes:    %20s\n"
      "InvalidFrees:     %20lld\n"
      "InvalidRequests:  %20lld\n"
      "OOMs:             %20lld\n"
      "Extends:          %20lld\n"
      "RegionsReleased:  %20lld\n"
      "SubAllocRejects:  %20lld\n"
      "Retries:          %20lld\n"
      "RequestedInUse:   %20lld\n"
      "Fragmentation:    %20.4f\n",
      OptionalToString(bytes_limit), bytes_in_use, peak_bytes_in_use,
      num_allocs, largest_alloc_size, bytes_reserved, peak_bytes_reserved,
      largest_free_block_bytes, OptionalToString(pool_bytes),
      OptionalToString(peak_pool_bytes), num_invalid_frees,
      num_invalid_requests, num_ooms, num_extends, num_regions_released,
      num_sub_allocator_rejects, num_retries, bytes_requested_in_use,
      fragmentation);
}

}  // namespace bfc
