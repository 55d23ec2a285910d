// File: src/host_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// HostSubAllocator: pageable host memory from aligned_alloc. The allocator
// asks for regions of megabytes, so the C library's own overhead is
// irrelevant; what matters is alignment and never handing back less than
// asked.
#include "bfc/host_sub_allocator.h"

#include <cstdlib>
#include <utility>

#include "bfc/internal/constants.h"
#include "core/internal/bits.h"

namespace bfc {
namespace {

using internal::IsPowerOfTwo;

// The allocator's chunks are multiples of kMinAllocationSize and start at
// addresses aligned to it; a smaller region alignment would break that, so it
// is the floor.
constexpr size_t kMinRegionAlignment = kMinAllocationSize;

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
  // aligned_alloc requires the size to be a multiple of the alignment; an
  // absurd request whose round-up wraps fails.
  size_t rounded = 0;
  if (!internal::RoundUp(num_bytes, alignment, &rounded)) return nullptr;
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
