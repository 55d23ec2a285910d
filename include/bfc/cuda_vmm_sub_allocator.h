// File: bfc/cuda_vmm_sub_allocator.h
// -----------------------------------------------------------------------------
//
// CudaVmmSubAllocator: expandable regions on CUDA virtual memory management
// (cuMemAddressReserve / cuMemCreate / cuMemMap / cuMemSetAccess /
// cuMemUnmap / cuMemRelease), reached through bfc's driver table like the
// other CUDA sub-allocators (bfc/cuda_sub_allocator.h): nothing links libcuda,
// and tests run it on the fake driver.
//
// The design answers what broke TF's and PyTorch's versions
// (shared research note "vmm"):
//
//   * One address range is reserved per sub-allocator, once. Physical memory
//     comes in fixed pages, one handle per page, so any page-aligned part of
//     what Alloc returned can be given back (cuMemUnmap cannot unmap part of
//     a mapping: a multi-page handle would pin its whole size).
//   * Alloc maps pages at the lowest address hole that fits, so successive
//     regions are contiguous and an allocator merges them
//     (SupportsCoalescing() is true), and holes left by Free are reused: the
//     range never grows with garbage-collection cycles (TF's bump pointer
//     exhausted its 2x reservation that way and was disabled).
//   * Exact rollback: when any cuMemCreate, cuMemMap or cuMemSetAccess of an
//     Alloc fails, what it created and mapped is unmapped and released, and
//     the page table is what it was (PyTorch #188008: an OOM in
//     cuMemSetAccess left handles mapped but unknown and every later
//     allocation asserted). A page the driver refuses to unmap even then is
//     kept as "stuck", never handed out, and retried on every later call.
//   * Free synchronizes the device, and every peer device with access,
//     before unmapping (cudaFree does the same implicitly; cuMemUnmap and
//     cuMemRelease do not wait for kernels), so no kernel still queued can
//     touch memory that is gone. An allocator that
//     already waited for its streams' fences may turn that off.
//
// Thread-safe: one mutex guards the page table (an allocator calls with its
// own mutex held; counters may be read from any thread).
#ifndef BFC_CUDA_VMM_SUB_ALLOCATOR_H_
#define BFC_CUDA_VMM_SUB_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bfc/internal/mutex.h"
#include "bfc/sub_allocator.h"

namespace bfc {

class CudaVmmSubAllocator : public SubAllocator {
 public:
  struct Options {
    // Bytes of physical memory per handle, the unit of Alloc and Free: 0
    // means max(the driver's recommended granularity, 2 MiB); otherwise
    // rounded up to a multiple of the granularity, which must then be a
    // power of two (the reservation is aligned to it; Availability() is
    // InvalidArgument otherwise).
    size_t page_bytes = 0;
    // Address space reserved: 0 means twice the device's memory (holes are
    // reused, so the range need only absorb fragmentation); otherwise
    // rounded up to whole pages.
    size_t address_bytes = 0;
    // Devices besides the owner that get read-write access to every mapped
    // page (cuMemSetAccess), for peer-to-peer kernels.
    std::vector<int> peer_devices;
    // cuCtxSynchronize in the owner's and each peer's primary context
    // before every unmap (see above).
    bool synchronize_before_unmap = true;
  };

  // Driver calls made and what they hold now.
  struct Counters {
    int64_t maps = 0;        // pages mapped (cuMemCreate + cuMemMap)
    int64_t unmaps = 0;      // pages unmapped (cuMemUnmap + cuMemRelease)
    int64_t set_access = 0;  // cuMemSetAccess calls (one per Alloc)
    int64_t synchronizes = 0;
    int64_t failed_allocs = 0;   // Allocs that failed and were rolled back
    int64_t stuck_pages = 0;     // mapped pages that would not unmap (now)
    int64_t leaked_handles = 0;  // cuMemRelease calls that failed (ever)
    // Physical pages whose release failed, kept and retried (now).
    int64_t unreleased_pages = 0;
    size_t mapped_bytes = 0;  // handed out now
    size_t peak_mapped_bytes = 0;
    size_t reserved_bytes = 0;  // the address range
    size_t page_bytes = 0;
  };

  // Reserves the address range at once; a failure (no driver, no VMM
  // support, the reservation refused) is kept and returned by
  // Availability(), and every Alloc then fails fast.
  explicit CudaVmmSubAllocator(int device_ordinal);
  CudaVmmSubAllocator(int device_ordinal, Options options,
                      std::vector<Visitor> alloc_visitors = {},
                      std::vector<Visitor> free_visitors = {});
  // Unmaps and releases everything still mapped (after a synchronize) and
  // frees the address range.
  ~CudaVmmSubAllocator() override;

  // Whole pages at the lowest hole that fits, aligned to `alignment` (any
  // power of two; above the page size the hole is searched for an aligned
  // start). *bytes_received is num_bytes rounded up to pages.
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override;
  // Any page-aligned range of pages handed out (whole, or a part, or a union
  // of contiguous Allocs). A range that is not entirely handed-out pages is
  // refused and logged, and nothing changes.
  void Free(void* ptr, size_t num_bytes) override;
  bool SupportsCoalescing() const override { return true; }
  size_t PartialFreeBytes() const override;
  size_t ReservedAddressBytes() const override;
  // Stuck pages and unreleased physical pages (Counters), after one more
  // try to give them back.
  size_t UnreturnedBytes() override;
  MemoryType GetMemoryType() const override { return MemoryType::kDevice; }
  absl::Status Availability() const override;
  absl::Status CheckHeldRegions(
      const std::vector<std::pair<uintptr_t, uintptr_t>>& regions)
      const override;

  int device_ordinal() const { return device_ordinal_; }
  Counters counters() const;
  // The reserved range's start (0 when unavailable).
  uintptr_t base() const { return base_; }

 private:
  enum class PageState : uint8_t { kUnmapped, kMapped, kStuck };
  struct Page {
    unsigned long long handle = 0;  // CUmemGenericAllocationHandle
    PageState state = PageState::kUnmapped;
  };

  void Init(const Options& options);
  // Unmaps and releases pages [first, first + n) (all kMapped or kStuck);
  // pages that will not unmap become kStuck. Returns pages unmapped. The
  // first failure is logged; later ones only counted in *failures (its
  // caller says how many), so that a driver going away at exit does not log
  // a line per page. nullptr: a count of this call's own.
  size_t UnmapPagesLocked(size_t first, size_t n, size_t* failures = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Logs how many unmaps failed after the one already logged.
  void LogMoreUnmapFailures(size_t failures);
  // Retries stuck pages (after a synchronize) and unreleased handles.
  void RetryStuckLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Releases the handles kept in unreleased_ once more.
  void RetryUnreleasedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cuMemRelease of `handle`; kept in unreleased_ when it fails.
  void ReleaseHandleLocked(unsigned long long handle)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cuCtxSynchronize in the device's context when asked for; false (logged)
  // when it failed.
  bool SynchronizeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::string Who() const;

  const int device_ordinal_;
  bool synchronize_before_unmap_ = true;
  std::vector<int> access_devices_;  // the owner first, then peers
  absl::Status status_;              // set once, by the constructor
  uintptr_t base_ = 0;
  size_t page_bytes_ = 0;
  size_t num_pages_ = 0;

  mutable internal::Mutex mu_;
  std::vector<Page> pages_ ABSL_GUARDED_BY(mu_);
  // Handles whose cuMemRelease failed: retried with the stuck pages and at
  // destruction (a review: each failure lost a physical page for good).
  std::vector<unsigned long long> unreleased_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace bfc

#endif  // BFC_CUDA_VMM_SUB_ALLOCATOR_H_
