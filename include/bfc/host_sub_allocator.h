// File: bfc/host_sub_allocator.h
// -----------------------------------------------------------------------------
//
// HostSubAllocator: regions of pageable host memory from the C library
// (aligned_alloc / free). Memory type kHostPageable. Blocks from separate
// calls are never merged (SupportsCoalescing() is false).
//
// Thread-safe (the C library is).
#ifndef BFC_HOST_SUB_ALLOCATOR_H_
#define BFC_HOST_SUB_ALLOCATOR_H_

#include <cstddef>
#include <vector>

#include "bfc/sub_allocator.h"

namespace bfc {

class HostSubAllocator : public SubAllocator {
 public:
  HostSubAllocator();
  HostSubAllocator(std::vector<Visitor> alloc_visitors,
                   std::vector<Visitor> free_visitors);
  ~HostSubAllocator() override;

  // nullptr when num_bytes is 0, alignment is not a power of two, or the C
  // library has no memory.
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override;
  void Free(void* ptr, size_t num_bytes) override;
  bool SupportsCoalescing() const override { return false; }
  MemoryType GetMemoryType() const override {
    return MemoryType::kHostPageable;
  }
};

}  // namespace bfc

#endif  // BFC_HOST_SUB_ALLOCATOR_H_
