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

namespace {

// What FreeFailed recorded on this thread (SubAllocator::TakeFreeFailure).
thread_local bool t_free_failed = false;
thread_local std::string t_free_failure;

}  // namespace

void SubAllocator::FreeFailed(absl::string_view what) noexcept {
  t_free_failed = true;
  try {
    t_free_failure.assign(what.data(), what.size());
  } catch (...) {
    t_free_failure.clear();  // no host memory for the message: still failed
  }
}

bool SubAllocator::TakeFreeFailure(std::string* what) {
  if (!t_free_failed) return false;
  t_free_failed = false;
  what->swap(t_free_failure);
  t_free_failure.clear();
  return true;
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

size_t SubAllocator::UnreturnedBytes() { return 0; }

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
