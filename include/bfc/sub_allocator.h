// File: bfc/sub_allocator.h
// -----------------------------------------------------------------------------
//
// A SubAllocator is where a bfc::Allocator's regions come from: the allocator
// asks it for large blocks (`Alloc`) when it needs to grow and gives them back
// (`Free`) on garbage collection, `ReleaseFreeRegions()` and destruction. It
// never sees individual user allocations. Implementations in this library:
//
//   HostSubAllocator        pageable host memory            kHostPageable
//   VirtualSubAllocator     reserved, never-touched range   kUnknown
//   (simulation) CudaDeviceSubAllocator  cudaMalloc / cudaFree kDevice
//   CudaPinnedSubAllocator  cudaHostAlloc / cudaFreeHost    kHostPinned
//
// Contract for implementers (the allocator checks what it can and refuses
// memory that breaks it, giving it straight back):
//   * `Alloc` returns nullptr or at least `num_bytes` bytes aligned to
//     `alignment`, and sets `*bytes_received` to the usable size (>=
//     num_bytes).
//   * `Free(ptr, n)` receives exactly a pointer and size returned by `Alloc`,
//     or, when `SupportsCoalescing()` is true, any union of contiguous blocks
//     returned by `Alloc`.
//   * Visitors run after every successful Alloc and before every Free; free
//     visitors run in reverse registration order.
//
// Thread safety: a SubAllocator is only called with its allocator's mutex
// held, so implementations need not be thread-safe unless shared.
#ifndef BFC_SUB_ALLOCATOR_H_
#define BFC_SUB_ALLOCATOR_H_

#include <cstddef>
#include <functional>
#include <vector>

namespace bfc {

enum class MemoryType { kUnknown = 0, kDevice, kHostPageable, kHostPinned };

// Returns "unknown", "device", "host-pageable" or "host-pinned".
const char* MemoryTypeName(MemoryType type);

class SubAllocator {
 public:
  // index: device ordinal or NUMA node the memory belongs to.
  using Visitor = std::function<void(void* ptr, int index, size_t num_bytes)>;

  SubAllocator(std::vector<Visitor> alloc_visitors,
               std::vector<Visitor> free_visitors);
  virtual ~SubAllocator();

  SubAllocator(const SubAllocator&) = delete;
  SubAllocator& operator=(const SubAllocator&) = delete;

  // At least num_bytes aligned to `alignment`, or nullptr. *bytes_received may
  // exceed num_bytes.
  virtual void* Alloc(size_t alignment, size_t num_bytes,
                      size_t* bytes_received) = 0;
  virtual void Free(void* ptr, size_t num_bytes) = 0;

  // True when memory from successive Alloc calls may be contiguous and may be
  // merged (and then freed as one range).
  virtual bool SupportsCoalescing() const = 0;

  virtual MemoryType GetMemoryType() const;

 protected:
  void VisitAlloc(void* ptr, int index, size_t num_bytes);
  // Free visitors run in reverse order.
  void VisitFree(void* ptr, int index, size_t num_bytes);

 private:
  const std::vector<Visitor> alloc_visitors_;
  const std::vector<Visitor> free_visitors_;
};

}  // namespace bfc

#endif  // BFC_SUB_ALLOCATOR_H_
