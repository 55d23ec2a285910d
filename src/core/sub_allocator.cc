// File: src/sub_allocator.cc
// -----------------------------------------------------------------------------
//
// The SubAllocator base: visitor bookkeeping shared by every implementation,
// and the names of memory types used in messages and dumps.
#include "bfc/sub_allocator.h"

#include <exception>
#include <string>
#include <utility>

#include "bfc/internal/str_format.h"
#include "bfc/log.h"

namespace bfc {

const char* MemoryTypeName(MemoryType type) {
  switch (type) {
    case MemoryType::kUnknown:
      return "unknown";
    case MemoryType::kDevice:
      return "device";
    case MemoryType::kHostPageable:
      return "host-pageable";
    case MemoryType::kHostPinned:
      return "host-pinned";
  }
  // An out-of-range enum value (cast from an int) must still print something.
  return "unknown";
}

SubAllocator::SubAllocator(std::vector<Visitor> alloc_visitors,
                           std::vector<Visitor> free_visitors)
    : alloc_visitors_(std::move(alloc_visitors)),
      free_visitors_(std::move(free_visitors)) {}

SubAllocator::~SubAllocator() = default;

MemoryType SubAllocator::GetMemoryType() const { return MemoryType::kUnknown; }

absl::Status SubAllocator::Availability() const { return absl::OkStatus(); }

size_t SubAllocator::PartialFreeBytes() const { return 0; }

size_t SubAllocator::ReservedAddressBytes() const { return 0; }

absl::Status SubAllocator::CheckHeldRegions(
    const std::vector<std::pair<uintptr_t, uintptr_t>>& /*regions*/) const {
  return absl::OkStatus();
}

void SubAllocator::Visit(const Visitor& v, const char* kind, void* ptr,
                         int index, size_t num_bytes) {
  if (!v) return;
  std::string what;
  try {
    v(ptr, index, num_bytes);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  num_visitor_exceptions_.fetch_add(1, std::memory_order_relaxed);
  Log(LogSeverity::kError,
      internal::Format("SubAllocator: %s visitor threw on (%p, index %d, %d "
                       "bytes): %s; ignored, the other visitors still run",
                       kind, ptr, index, num_bytes, what));
}

void SubAllocator::VisitAlloc(void* ptr, int index, size_t num_bytes) {
  for (const Visitor& v : alloc_visitors_) {
    Visit(v, "alloc", ptr, index, num_bytes);
  }
}

void SubAllocator::VisitFree(void* ptr, int index, size_t num_bytes) {
  // Reverse order so that a visitor pair registered as (A, B) unwinds as
  // (B, A): whatever B set up on top of A's state is torn down first.
  for (auto it = free_visitors_.rbegin(); it != free_visitors_.rend(); ++it) {
    Visit(*it, "free", ptr, index, num_bytes);
  }
}

}  // namespace bfc
