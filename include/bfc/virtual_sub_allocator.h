// File: bfc/virtual_sub_allocator.h
// -----------------------------------------------------------------------------
//
// VirtualSubAllocator hands out addresses from one reserved, never-touched
// address range (mmap PROT_NONE, MAP_NORESERVE): no memory is ever committed,
// so a laptop can replay a 100 GB trace and tests can use terabyte pools. The
// memory must never be dereferenced (it faults).
//
// By default blocks are carved first-fit from the range in address order, so
// successive blocks are contiguous and SupportsCoalescing() is true; `Free`
// accepts any union of contiguous blocks it handed out. Options reproduce
// TF's GPU sub-allocator for fidelity tests: no coalescing, and a gap between
// successive blocks so that no two regions are ever adjacent -- or CUDA
// virtual memory's pages (partial_free_bytes), where any page-aligned part of
// a block can be given back.
//
// Thread-compatible (its allocator's mutex serializes calls).
#ifndef BFC_VIRTUAL_SUB_ALLOCATOR_H_
#define BFC_VIRTUAL_SUB_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bfc/sub_allocator.h"

namespace bfc {

class VirtualSubAllocator : public SubAllocator {
 public:
  struct Options {
    // Report SupportsCoalescing() (and hand out adjacent blocks).
    bool supports_coalescing = true;
    // Bytes skipped after every block (so regions are never contiguous).
    size_t gap_bytes = 0;
    // Never reuse a freed address range (addresses only increase).
    bool never_reuse = false;
    // Pages, as CudaVmmSubAllocator's (0: off): blocks are whole pages,
    // page aligned, and Free takes any page-aligned part of what was handed
    // out (PartialFreeBytes()). A power of two >= 256; ignored with
    // gap_bytes. What bfc-replay's vmm backend does on a GPU, without one.
    size_t partial_free_bytes = 0;
  };

  // Reserves `capacity_bytes` (rounded up to the page size) of address space.
  // If the reservation fails, every Alloc returns nullptr.
  explicit VirtualSubAllocator(size_t capacity_bytes);
  VirtualSubAllocator(size_t capacity_bytes, const Options& options);
  VirtualSubAllocator(size_t capacity_bytes, const Options& options,
                      std::vector<Visitor> alloc_visitors,
                      std::vector<Visitor> free_visitors);
  ~VirtualSubAllocator() override;

  // First fit in address order, aligned to max(alignment, 256). nullptr when
  // nothing fits, num_bytes is 0 or alignment is not a power of two.
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override;
  // `ptr`/`num_bytes` must be (a contiguous union of) blocks from Alloc; with
  // partial_free_bytes, any run of whole pages handed out.
  // Anything else (including a size that runs past the reservation) is
  // ignored, counted in invalid_frees() and never shown to the free visitors.
  void Free(void* ptr, size_t num_bytes) override;
  bool SupportsCoalescing() const override {
    return options_.supports_coalescing;
  }
  size_t PartialFreeBytes() const override { return page_; }
  MemoryType GetMemoryType() const override { return MemoryType::kUnknown; }
  // Unavailable, naming the reason, when the reservation failed (a capacity of
  // 0, beyond the address space, or refused by mmap).
  absl::Status Availability() const override;

  // The reserved range.
  void* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  // Bytes currently handed out.
  size_t bytes_in_use() const { return bytes_in_use_; }
  size_t num_alloc_calls() const { return num_alloc_calls_; }
  size_t num_free_calls() const { return num_free_calls_; }
  size_t invalid_frees() const { return invalid_frees_; }

 private:
  const Options options_;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  // Why there is no reservation (empty when there is one).
  std::string reservation_error_;
  // Free of [begin, end) (offsets) with pages on.
  void FreePages(void* ptr, size_t begin, size_t end);

  // Options::partial_free_bytes when in effect, else 0.
  const size_t page_;
  // Free ranges: offset -> length, coalesced.
  std::map<size_t, size_t> free_ranges_;
  // Handed-out ranges: offset -> length (for validating Free).
  std::map<size_t, size_t> used_ranges_;
  size_t next_offset_ = 0;  // for never_reuse
  size_t bytes_in_use_ = 0;
  size_t num_alloc_calls_ = 0;
  size_t num_free_calls_ = 0;
  size_t invalid_frees_ = 0;
};

}  // namespace bfc

#endif  // BFC_VIRTUAL_SUB_ALLOCATOR_H_
