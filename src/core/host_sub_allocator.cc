// File: src/host_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// HostSubAllocator: pageable host memory from aligned_alloc. The allocator
// asks for regions of megabytes, so the C library's own overhead is
// irrelevant; what matters is alignment and never handing back less than
// asked.
#include "bfc/host_sub_allocator.h"

#include <cstdlib>
#include <limits>
#include <utility>

namespace bfc {
namespace {

// The allocator's chunks are multiples of 256 and start at 256-aligned
// addresses; a smaller region alignment would break that, so it is the floor.
constexpr size_t kMinRegionAlignment = 256;

bool IsPowerOfTwo(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

HostSubAllocator::HostSubAllocator() : HostSubAllocator({}, {}) {}

HostSubAllocator::HostSubAllocator(std::vector<Visitor> alloc_visitors,
                                   std::vector<Visitor> free_visitors)
    : SubAllocator(std::move(alloc_visitors), std::move(free_visitors)) {}

HostSubAllocator::~HostSubAllocator() = default;

void* HostSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                              size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  if (num_bytes == 0 || !IsPowerOfTwo(alignment)) return nullptr;
  if (alignment < kMinRegionAlignment) alignment = kMinRegionAlignment;
  // aligned_alloc requires the size to be a multiple of the alignment; guard
  // the round-up against wrapping for absurd requests.
  if (num_bytes > std::numeric_limits<size_t>::max() - (alignment - 1)) {
    return nullptr;
  }
  const size_t rounded = (num_bytes + alignment - 1) & ~(alignment - 1);
  void* ptr = std::aligned_alloc(alignment, rounded);
  if (ptr == nullptr) return nullptr;
  // Report what was asked, not the rounded size: the allocator accounts pool
  // bytes against total_memory and must not be surprised by padding.
  if (bytes_received != nullptr) *bytes_received = num_bytes;
  VisitAlloc(ptr, 0, num_bytes);
  return ptr;
}

void HostSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  VisitFree(ptr, 0, num_bytes);
  std::free(ptr);
}

}  // namespace bfc
