// File: src/region_manager.cc
#include "bfc/internal/region_manager.h"

#include <algorithm>

namespace bfc::internal {
namespace {

// First region whose end is past `a`: the only candidate to contain `a`.
template <typename It>
It FirstEndingAfter(It begin, It end, uintptr_t a) {
  return std::upper_bound(
      begin, end, a,
      [](uintptr_t x, const AllocationRegion& r) { return x < r.end_addr(); });
}

}  // namespace

void RegionManager::AddAllocationRegion(void* ptr, size_t memory_size) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  auto it = std::upper_bound(
      regions_.begin(), regions_.end(), a,
      [](uintptr_t x, const AllocationRegion& r) { return x < r.addr(); });
  regions_.insert(it, AllocationRegion(ptr, memory_size));
}

AllocationRegion* RegionManager::AddOrExtendAllocationRegion(
    void* ptr, size_t memory_size) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  auto it = std::upper_bound(
      regions_.begin(), regions_.end(), a,
      [](uintptr_t x, const AllocationRegion& r) { return x < r.addr(); });
  if (it != regions_.begin()) {
    auto preceding = it - 1;
    if (preceding->end_addr() == a) {
      preceding->extend(memory_size);
      return &*preceding;
    }
  }
  regions_.insert(it, AllocationRegion(ptr, memory_size));
  return nullptr;
}

void* RegionManager::MergeWithFollowing(const void* region_ptr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(region_ptr);
  auto it = std::lower_bound(
      regions_.begin(), regions_.end(), a,
      [](const AllocationRegion& r, uintptr_t x) { return r.addr() < x; });
  if (it == regions_.end() || it->addr() != a) return nullptr;
  auto next = it + 1;
  if (next == regions_.end() || next->addr() != it->end_addr()) return nullptr;
  void* following = next->ptr();
  it->extend(next->memory_size());
  regions_.erase(next);
  return following;
}

bool RegionManager::RemoveAllocationRegion(const void* ptr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  auto it = std::lower_bound(
      regions_.begin(), regions_.end(), a,
      [](const AllocationRegion& r, uintptr_t x) { return r.addr() < x; });
  if (it == regions_.end() || it->addr() != a) return false;
  regions_.erase(it);
  return true;
}

bool RegionManager::Overlaps(const void* ptr, size_t n) const {
  if (n == 0) return false;
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t end = a + n < a ? ~uintptr_t{0} : a + n;
  auto it = FirstEndingAfter(regions_.begin(), regions_.end(), a);
  return it != regions_.end() && it->addr() < end;
}

const AllocationRegion* RegionManager::RegionFor(const void* p) const {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = FirstEndingAfter(regions_.begin(), regions_.end(), a);
  if (it == regions_.end() || a < it->addr()) return nullptr;
  return &*it;
}

size_t RegionManager::MetadataBytes() const {
  return regions_.capacity() * sizeof(AllocationRegion) +
         handles_.MetadataBytes();
}

}  // namespace bfc::internal
