// File: src/core/region_manager.cc
#include "bfc/internal/region_manager.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "bfc/internal/check.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"

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

void RegionManager::AddAllocationRegion(void* ptr, size_t memory_size,
                                        bool dedicated) {
  BFC_DCHECK(!Overlaps(ptr, memory_size));
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  auto it = std::upper_bound(
      regions_.begin(), regions_.end(), a,
      [](uintptr_t x, const AllocationRegion& r) { return x < r.addr(); });
  it = regions_.insert(it, AllocationRegion(ptr, memory_size));
  if (dedicated) it->set_dedicated();
}

AllocationRegion* RegionManager::AddOrExtendAllocationRegion(
    void* ptr, size_t memory_size) {
  BFC_DCHECK(!Overlaps(ptr, memory_size));
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  auto it = std::upper_bound(
      regions_.begin(), regions_.end(), a,
      [](uintptr_t x, const AllocationRegion& r) { return x < r.addr(); });
  if (it != regions_.begin()) {
    auto preceding = it - 1;
    if (preceding->end_addr() == a && !preceding->dedicated()) {
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
  if (next == regions_.end() || next->addr() != it->end_addr() ||
      it->dedicated() || next->dedicated()) {
    return nullptr;
  }
  void* following = next->ptr();
  it->extend(next->memory_size());
  regions_.erase(next);
  return following;
}

bool RegionManager::CutOut(uintptr_t a, uintptr_t b) {
  if (b <= a) return false;
  auto it = FirstEndingAfter(regions_.begin(), regions_.end(), a);
  if (it == regions_.end() || a < it->addr() || b > it->end_addr() ||
      it->dedicated()) {
    return false;
  }
  const AllocationRegion r = *it;
  const bool before = a > r.addr();
  const bool after = b < r.end_addr();
  if (!before && !after) {
    regions_.erase(it);
  } else if (before && after) {
    *it = AllocationRegion(r.ptr(), a - r.addr());
    regions_.insert(
        it + 1, AllocationRegion(reinterpret_cast<void*>(b), r.end_addr() - b));
  } else if (before) {
    *it = AllocationRegion(r.ptr(), a - r.addr());
  } else {
    *it = AllocationRegion(reinterpret_cast<void*>(b), r.end_addr() - b);
  }
  return true;
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

namespace {

// "region 1 [0x10000, 0x12000)"
std::string DescribeRegion(size_t index, const AllocationRegion& r) {
  return internal::Format("region %d [0x%x, 0x%x)", index, r.addr(),
                          r.end_addr());
}

}  // namespace

absl::Status RegionManager::Validate() const {
  auto fail = [](auto&&... parts) {
    return absl::InternalError(absl::StrCat("RegionManager: ", parts...));
  };
  if (absl::Status s = handles_.Validate(); !s.ok()) return s;
  for (size_t i = 0; i < regions_.size(); ++i) {
    const AllocationRegion& r = regions_[i];
    if (r.memory_size() == 0) {
      return fail("region ", i, " at ", internal::Format("0x%x", r.addr()),
                  " is empty");
    }
    if (r.end_addr() < r.addr()) {
      return fail("region ", i, " at ", internal::Format("0x%x", r.addr()),
                  " of ", r.memory_size(),
                  " bytes wraps around the address "
                  "space");
    }
    if (r.addr() % kMinAllocationSize != 0 ||
        r.memory_size() % kMinAllocationSize != 0) {
      return fail(DescribeRegion(i, r), " (", r.memory_size(),
                  " bytes): base and size must be multiples of ",
                  kMinAllocationSize);
    }
    if (i > 0) {
      const AllocationRegion& prev = regions_[i - 1];
      if (r.addr() <= prev.addr()) {
        return fail(DescribeRegion(i, r), " is not after ",
                    DescribeRegion(i - 1, prev), " (regions are sorted)");
      }
      if (prev.end_addr() > r.addr()) {
        return fail(DescribeRegion(i - 1, prev), " overlaps ",
                    DescribeRegion(i, r));
      }
    }
    if (handles_.Find(r.ptr()) == kInvalidChunkHandle) {
      return fail(DescribeRegion(i, r), " has no chunk mapped at its base");
    }
  }
  // Every mapped chunk lies inside one region (the map's Validate vouched
  // for its handles).
  absl::Status status;
  const ChunkTable& chunks = *handles_.chunks();
  handles_.ForEach([&](ChunkHandle h) {
    if (!status.ok()) return;
    const Chunk& c = chunks[h];
    const AllocationRegion* r = RegionFor(c.ptr);
    if (r == nullptr || c.end_addr() > r->end_addr() ||
        c.end_addr() < c.addr()) {
      status = fail("chunk ", h, " ", c.DebugString(),
                    " is mapped but does not lie inside a region");
    }
  });
  return status;
}

}  // namespace bfc::internal
