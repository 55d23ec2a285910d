// File: bfc/internal/region_manager.h
// -----------------------------------------------------------------------------
//
// RegionManager knows the regions obtained from the sub-allocator and maps the
// start address of every chunk to its handle, so that a pointer a caller hands
// back can be checked (is it ours? is it a chunk start?) and resolved.
//
// TensorFlow keeps one handle per 256 bytes (kMinAllocationSize) of every
// region (8 bytes of host RAM per 256 bytes of pool: 2 GiB for a 64 GiB pool).
// Here a ChunkMap holds one 8-byte slot per chunk (at most 16/13 slots per
// chunk), so host metadata scales with chunks, not bytes.
//
// Regions are kept sorted by address (they never overlap). With a coalescing
// sub-allocator, a region that starts where an existing region ends extends it
// (`AddOrExtendAllocationRegion`), as in TF.
//
// Internal: not part of the API. Thread-compatible.
//
// Invariants (RegionManager::Validate checks them, with the ChunkMap's own):
// regions are sorted by address and do not overlap; each is non-empty, with
// base and size multiples of kMinAllocationSize, and does not wrap; each
// region's base is a mapped chunk start; every mapped chunk lies inside a
// region. That chunks tile their regions is the Allocator's to check.
#ifndef BFC_INTERNAL_REGION_MANAGER_H_
#define BFC_INTERNAL_REGION_MANAGER_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "bfc/internal/chunk.h"
#include "bfc/internal/chunk_map.h"

namespace bfc::internal {

class AllocationRegion {
 public:
  AllocationRegion(void* ptr, size_t memory_size)
      : ptr_(ptr), memory_size_(memory_size) {}

  void* ptr() const { return ptr_; }
  size_t memory_size() const { return memory_size_; }
  void* end_ptr() const { return static_cast<char*>(ptr_) + memory_size_; }
  uintptr_t addr() const { return reinterpret_cast<uintptr_t>(ptr_); }
  uintptr_t end_addr() const { return addr() + memory_size_; }
  bool Contains(const void* p) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    return a >= addr() && a < end_addr();
  }
  void extend(size_t bytes) { memory_size_ += bytes; }
  // A dedicated region holds one allocation (Options::huge_allocation_bytes)
  // and is given back when it is freed: it never joins a neighbour and no
  // neighbour joins it.
  bool dedicated() const { return dedicated_; }
  void set_dedicated() { dedicated_ = true; }

 private:
  void* ptr_;
  size_t memory_size_;
  bool dedicated_ = false;
};

class RegionManager {
 public:
  // `chunks` resolves handles for the chunk map; it must outlive this.
  explicit RegionManager(const ChunkTable* chunks) : handles_(chunks) {}

  // Records a new region. Requires: it overlaps no existing region.
  void AddAllocationRegion(void* ptr, size_t memory_size,
                           bool dedicated = false);

  // If a region that is not dedicated ends exactly at `ptr`, extends it by
  // `memory_size` and returns it; otherwise records a new region and returns
  // nullptr.
  AllocationRegion* AddOrExtendAllocationRegion(void* ptr, size_t memory_size);

  // If another region starts exactly where the region starting at
  // `region_ptr` ends, absorbs it and returns its (former) start; otherwise
  // (or when either is dedicated) returns nullptr.
  void* MergeWithFollowing(const void* region_ptr);

  // Takes [a, b) out of the region that contains it, leaving what is before
  // and after it (either may be empty) as regions of their own: a partial
  // release (SubAllocator::PartialFreeBytes). Returns false, changing
  // nothing, when no region that is not dedicated contains all of [a, b) or
  // the range is empty. The caller keeps the chunk map right.
  [[nodiscard]] bool CutOut(uintptr_t a, uintptr_t b);

  // Removes the region starting at `ptr` (and nothing else). Returns false if
  // no region starts there. Chunk handles must have been erased by the caller.
  [[nodiscard]] bool RemoveAllocationRegion(const void* ptr);

  // True when [ptr, ptr + n) intersects any region.
  [[nodiscard]] bool Overlaps(const void* ptr, size_t n) const;

  // The region containing `p`, or nullptr.
  const AllocationRegion* RegionFor(const void* p) const;

  // Room for `handles` more chunk starts and one more region, made before a
  // change needs it. Throws std::bad_alloc when the host has no memory
  // (nothing changes).
  void Reserve(size_t handles) {
    handles_.Reserve(handles);
    ReserveRegion();
  }
  // Room for one more region (geometric growth); throws std::bad_alloc when
  // the host has no memory (nothing changes).
  void ReserveRegion() {
    if (regions_.size() == regions_.capacity()) {
      regions_.reserve(std::max<size_t>(4, 2 * regions_.size()));
    }
  }
  // Where a failed growth of the handle map is reported (shortage.h).
  void set_shortage_signal(ShortageSignal s) {
    handles_.set_shortage_signal(s);
  }

  // The handle of the chunk starting exactly at `p`, or kInvalidChunkHandle.
  ChunkHandle get_handle(const void* p) const { return handles_.Find(p); }
  // Maps the start of chunk `h` to it. Requires: no chunk is mapped at `p`
  // and the chunk table's chunk `h` starts at `p`.
  void set_handle(const void* p, ChunkHandle h) { handles_.Insert(p, h); }
  // Unmaps `p` (the chunk must still start there). Returns false (a no-op)
  // if it was not mapped.
  [[nodiscard]] bool erase(const void* p) { return handles_.Erase(p); }

  // Regions in address order.
  const std::vector<AllocationRegion>& regions() const { return regions_; }
  size_t num_handles() const { return handles_.size(); }
  // Host bytes held by the region list and the handle map.
  size_t MetadataBytes() const;

  // Checks the invariants above (the chunk map's first): OK, or the first
  // violation, naming the regions by index and extent, e.g.
  //   "RegionManager: region 0 [0x10000, 0x12000) overlaps region 1
  //    [0x11000, 0x13000)"
  // O(regions + chunks x log regions).
  [[nodiscard]] absl::Status Validate() const;

 private:
  friend class RegionManagerTestPeer;  // tests/region_manager_test.cc

  std::vector<AllocationRegion> regions_;  // sorted by address
  ChunkMap handles_;
};

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_REGION_MANAGER_H_
