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
//   CudaVmmSubAllocator     pages mapped into one range     kDevice
//   CudaDeviceSubAllocator  cuMemAlloc / cuMemFree          kDevice
//   CudaPinnedSubAllocator  cuMemHostAlloc / cuMemFreeHost  kHostPinned
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
//   * `Availability()` says whether Alloc can succeed at all (see below).
//   * With `PartialFreeBytes()` = p > 0, `Free` also receives p-aligned parts
//     of such blocks (see there).
//
// Exceptions from user code (the library is noexcept at its boundary; an
// exception from code below it becomes a failure with a message):
//   * `Alloc` throws: the allocation that needed the region fails at once (no
//     back-off, no retry wait). `Allocator::Allocate` returns Internal with
//     the exception's what(); `AllocateRaw` returns nullptr and logs it. The
//     allocator's state is unchanged; whatever the throwing call may have
//     reserved is the sub-allocator's own business.
//   * `Free` throws, or reports a failure with FreeFailed (ReleaseFreeRegions,
//     garbage collection, a refused block, the destructor): the region is
//     forgotten by the allocator all the same -- taken out of its pool and
//     its stats, never handed out again and never passed to Free a second
//     time -- and the failure is logged and counted
//     (Allocator::sub_allocator_failures()). Its bytes still count against
//     the memory limit: the sub-allocator may still hold them (a cuMemFree
//     that failed leaves the memory allocated on the device). Validate()
//     stays OK.
//   * `SupportsCoalescing`, `GetMemoryType` or `Availability` throw: treated
//     as false, kUnknown and Internal(what()) respectively, and logged.
//   * A visitor throws: VisitAlloc / VisitFree catch it, log it, count it in
//     num_visitor_exceptions() and run the remaining visitors; the Alloc or
//     Free itself goes ahead (the memory is real; the visitor only observed).
//   * A destructor that throws ends the process (C++ makes destructors
//     noexcept); do not.
//
// Thread safety: a SubAllocator is only called with its allocator's mutex
// held, so implementations need not be thread-safe unless shared.
#ifndef BFC_SUB_ALLOCATOR_H_
#define BFC_SUB_ALLOCATOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

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

  // When nonzero, `Free` also takes any part of what `Alloc` returned whose
  // start and size are multiples of this many bytes (pages with a handle
  // each: CudaVmmSubAllocator), so an allocator can give back the interior
  // of a free chunk and keep the rest of its region. 0 (the default): whole
  // blocks (or, when coalescing, whole unions of blocks) only.
  virtual size_t PartialFreeBytes() const;

  // Checks what this sub-allocator has handed out against `regions`, the
  // [start, end) ranges its allocator holds (sorted, disjoint), when one
  // allocator owns it: OK, or the first disagreement. Allocator::Validate
  // calls it. Default: OK (most cannot tell). CudaVmmSubAllocator: every
  // mapped page lies in exactly one region and every region is mapped.
  virtual absl::Status CheckHeldRegions(
      const std::vector<std::pair<uintptr_t, uintptr_t>>& regions) const;

  // Address space held beyond what is handed out (a VMM reservation); 0 by
  // default. Reported beside the pool's bytes as va_reserved_bytes.
  virtual size_t ReservedAddressBytes() const;

  // Device memory still held for blocks its allocator gave back (Free
  // returned) that could not be given back yet, and may be later: VMM pages
  // that would not unmap, physical pages whose release failed. The
  // allocator asks before it grows and counts them against its memory limit
  // until they go; an implementation may try once more to give them back
  // first (else a limit they fill would never see them go). 0 by default.
  virtual size_t UnreturnedBytes();

  virtual MemoryType GetMemoryType() const;

  // OK when Alloc can succeed in principle; otherwise why no Alloc ever will,
  // whatever the size (usually Unavailable: no CUDA driver or device, the
  // address-space reservation failed). The allocator asks after an Alloc
  // failed; a non-OK answer fails the request at once with this status
  // instead of waiting for frees that cannot help. Default: OK.
  virtual absl::Status Availability() const;

  // Visitor calls that threw (caught, logged, counted; see the contract).
  int64_t num_visitor_exceptions() const {
    return num_visitor_exceptions_.load(std::memory_order_relaxed);
  }

  // Whether a Free this thread made since the last call reported a failure
  // with FreeFailed; then `*what` is its message. Clears the record. The
  // allocator calls it around every Free.
  static bool TakeFreeFailure(std::string* what);

 protected:
  // Both run every visitor; one that throws is logged and counted and the
  // rest still run.
  void VisitAlloc(void* ptr, int index, size_t num_bytes);
  // Free visitors run in reverse order.
  void VisitFree(void* ptr, int index, size_t num_bytes);
  // For a Free that fails without throwing (a driver call that returned an
  // error): the allocator treats the call as one that threw `what`. Kept
  // per thread, so sub-allocators shared between allocators need no lock;
  // never throws.
  static void FreeFailed(absl::string_view what) noexcept;

 private:
  // Calls visitor `v`, catching what it throws.
  void Visit(const Visitor& v, const char* kind, void* ptr, int index,
             size_t num_bytes);

  // Atomic: the CUDA sub-allocators may be shared between allocators.
  std::atomic<int64_t> num_visitor_exceptions_{0};
  const std::vector<Visitor> alloc_visitors_;
  const std::vector<Visitor> free_visitors_;
};

}  // namespace bfc

#endif  // BFC_SUB_ALLOCATOR_H_
