// File: src/core/cuda_vmm_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// Expandable regions on CUDA virtual memory (bfc/cuda_vmm_sub_allocator.h).
// Every driver failure becomes nullptr (Alloc) or a logged error (Free) with
// the page table exactly as a successful rollback leaves it; nothing aborts.
#include "bfc/cuda_vmm_sub_allocator.h"

#include <cuda.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "core/internal/bits.h"
#include "core/internal/cuda_driver.h"

namespace bfc {
namespace {

using internal::CudaDriver;
using internal::IsPowerOfTwo;
using internal::MutexLock;
using internal::ScopedPrimaryContext;

// PyTorch's expandable segments and cudaMalloc's large-block granularity: a
// page small enough that freeing one is worth it, large enough that a
// multi-GiB model maps in thousands, not millions, of calls.
constexpr size_t kDefaultPageBytes = size_t{2} << 20;

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

CUdeviceptr DevPtr(uintptr_t a) { return static_cast<CUdeviceptr>(a); }

std::string StatusText(const absl::Status& s) {
  return std::string(s.message());
}

}  // namespace

CudaVmmSubAllocator::CudaVmmSubAllocator(int device_ordinal)
    : CudaVmmSubAllocator(device_ordinal, Options()) {}

CudaVmmSubAllocator::CudaVmmSubAllocator(int device_ordinal, Options options,
                                         std::vector<Visitor> alloc_visitors,
                                         std::vector<Visitor> free_visitors)
    : SubAllocator(std::move(alloc_visitors), std::move(free_visitors)),
      device_ordinal_(device_ordinal),
      synchronize_before_unmap_(options.synchronize_before_unmap) {
  Init(options);
}

std::string CudaVmmSubAllocator::Who() const {
  return internal::Format("CudaVmmSubAllocator(device %d)", device_ordinal_);
}

void CudaVmmSubAllocator::Init(const Options& options) {
  absl::StatusOr<const CudaDriver*> got = CudaDriver::Get();
  if (!got.ok()) {
    status_ = absl::Status(got.status().code(),
                           absl::StrCat(Who(), ": ", got.status().message()));
    return;
  }
  const CudaDriver& d = **got;
  if (!d.vmm_status.ok()) {
    status_ = absl::UnavailableError(
        absl::StrCat(Who(), ": ", d.vmm_status.message()));
    return;
  }
  absl::StatusOr<int> count = internal::CudaDriverDeviceCount();
  if (!count.ok()) {
    status_ = absl::Status(count.status().code(),
                           absl::StrCat(Who(), ": ", count.status().message()));
    return;
  }
  access_devices_.push_back(device_ordinal_);
  for (int peer : options.peer_devices) {
    if (peer != device_ordinal_ &&
        std::find(access_devices_.begin(), access_devices_.end(), peer) ==
            access_devices_.end()) {
      access_devices_.push_back(peer);
    }
  }
  for (int dev : access_devices_) {
    if (dev < 0 || dev >= *count) {
      status_ = absl::UnavailableError(internal::Format(
          "%s: no device %d (%d visible)", Who(), dev, *count));
      return;
    }
  }
  // A peer that cannot reach the owner's memory would make every Alloc fail
  // at cuMemSetAccess: said here, once (a review).
  for (size_t k = 1; k < access_devices_.size(); ++k) {
    int can = 0;
    const CUresult r =
        d.DeviceCanAccessPeer(&can, access_devices_[k], device_ordinal_);
    if (r != CUDA_SUCCESS || can == 0) {
      status_ = absl::UnavailableError(
          r != CUDA_SUCCESS
              ? absl::StrCat(Who(), ": ",
                             d.CallError("cuDeviceCanAccessPeer", r).message())
              : internal::Format("%s: device %d cannot access device %d's "
                                 "memory (cuDeviceCanAccessPeer); leave it "
                                 "out of peer_devices",
                                 Who(), access_devices_[k], device_ordinal_));
      return;
    }
  }
  ScopedPrimaryContext scoped(d, device_ordinal_);
  if (!scoped.status().ok()) {
    status_ =
        absl::Status(scoped.status().code(),
                     absl::StrCat(Who(), ": ", scoped.status().message()));
    return;
  }
  int supported = 0;
  CUresult r = d.DeviceGetAttribute(
      &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
      device_ordinal_);
  if (r != CUDA_SUCCESS) {
    status_ = absl::UnavailableError(
        absl::StrCat(Who(), ": ",
                     d.CallError("cuDeviceGetAttribute(VIRTUAL_MEMORY_"
                                 "MANAGEMENT_SUPPORTED)",
                                 r)
                         .message()));
    return;
  }
  if (supported == 0) {
    status_ = absl::UnavailableError(absl::StrCat(
        Who(), ": the device does not support virtual memory management"));
    return;
  }
  const CUmemAllocationProp prop = DeviceProp(device_ordinal_);
  size_t granularity = 0;
  r = d.MemGetAllocationGranularity(&granularity, &prop,
                                    CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0 || !IsPowerOfTwo(granularity)) {
    status_ = absl::UnavailableError(absl::StrCat(
        Who(), ": ",
        r != CUDA_SUCCESS
            ? d.CallError("cuMemGetAllocationGranularity", r).message()
            : absl::StrCat("the driver's granularity ", granularity,
                           " is not a power of two")));
    return;
  }
  size_t page = options.page_bytes == 0
                    ? std::max(granularity, kDefaultPageBytes)
                    : options.page_bytes;
  if (page > (size_t{1} << 40)) {
    status_ = absl::InvalidArgumentError(
        internal::Format("%s: page_bytes %d is absurd", Who(), page));
    return;
  }
  page = internal::AlignUp(page, granularity);
  // The page is the reservation's alignment, which the driver takes only as
  // a power of two (cuMemAddressReserve), and the allocator above rounds to
  // it by masking (a review: 6 MiB pages failed a check and aborted).
  if (!IsPowerOfTwo(page)) {
    status_ = absl::InvalidArgumentError(internal::Format(
        "%s: page_bytes %d (rounded up to the granularity %d: %d) is not a "
        "power of two",
        Who(), options.page_bytes, granularity, page));
    return;
  }
  size_t address = options.address_bytes;
  if (address == 0) {
    size_t free_bytes = 0, total_bytes = 0;
    r = d.MemGetInfo(&free_bytes, &total_bytes);
    if (r != CUDA_SUCCESS) {
      status_ = absl::UnavailableError(
          absl::StrCat(Who(), ": ", d.CallError("cuMemGetInfo", r).message()));
      return;
    }
    address =
        total_bytes > (size_t{1} << 46) ? size_t{1} << 47 : 2 * total_bytes;
  }
  if (address > (size_t{1} << 47)) {
    status_ = absl::InvalidArgumentError(internal::Format(
        "%s: address_bytes %d is more than a 47-bit address space", Who(),
        address));
    return;
  }
  address = internal::AlignUp(std::max(address, page), page);
  // The page table first: without the host memory for it the range is not
  // reserved (a review: std::bad_alloc left the constructor, and the
  // reservation leaked).
  std::vector<Page> table;
  try {
    table.assign(address / page, Page());
  } catch (...) {
    status_ = absl::Status(absl::StatusCode::kResourceExhausted, "");
    try {
      status_ = absl::ResourceExhaustedError(internal::Format(
          "%s: the host has no memory for the page table of %d pages (%d "
          "bytes of address space in pages of %d); set a smaller "
          "address_bytes or larger page_bytes",
          Who(), address / page, address, page));
    } catch (...) {
    }
    return;
  }
  CUdeviceptr base = 0;
  r = d.MemAddressReserve(&base, address, page, 0, 0);
  if (r != CUDA_SUCCESS) {
    status_ = absl::Status(
        r == CUDA_ERROR_OUT_OF_MEMORY ? absl::StatusCode::kResourceExhausted
                                      : absl::StatusCode::kUnavailable,
        absl::StrCat(Who(), ": ",
                     d.CallError(internal::Format("cuMemAddressReserve(%d "
                                                  "bytes)",
                                                  address),
                                 r)
                         .message()));
    return;
  }
  base_ = static_cast<uintptr_t>(base);
  page_bytes_ = page;
  num_pages_ = address / page;
  MutexLock lock(&mu_);
  pages_.swap(table);
  counters_.reserved_bytes = address;
  counters_.page_bytes = page;
}

CudaVmmSubAllocator::~CudaVmmSubAllocator() {
  if (base_ == 0) return;
  absl::StatusOr<const CudaDriver*> got = CudaDriver::Get();
  if (!got.ok()) return;
  const CudaDriver& d = **got;
  MutexLock lock(&mu_);
  const auto not_unmapped = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    size_t n = 0;  // under mu_, held by the destructor
    for (const Page& p : pages_) n += p.state != PageState::kUnmapped;
    return n;
  };
  const size_t still_mapped = not_unmapped();
  if (still_mapped > 0) {
    // The allocator above gives every region back before it goes: pages
    // left here were never freed by their owner, or would not unmap.
    Log(LogSeverity::kWarning,
        internal::Format("%s: %d pages still mapped at destruction; unmapping "
                         "them",
                         Who(), still_mapped));
    (void)SynchronizeLocked();
    size_t failures = 0;
    for (size_t i = 0; i < num_pages_; ++i) {
      if (pages_[i].state != PageState::kUnmapped) {
        (void)UnmapPagesLocked(i, 1, &failures);
      }
    }
    LogMoreUnmapFailures(failures);
  }
  if (!unreleased_.empty()) {
    RetryUnreleasedLocked();
    if (!unreleased_.empty()) {
      Log(LogSeverity::kError,
          internal::Format("%s: %d physical pages could not be released at "
                           "destruction",
                           Who(), unreleased_.size()));
    }
  }
  // A range with pages still mapped is not freed: the driver defines no
  // behaviour for that (a review; the fake refuses it). It stays reserved,
  // with those pages, until the process ends.
  const size_t stuck = not_unmapped();
  if (stuck > 0) {
    Log(LogSeverity::kError,
        internal::Format("%s: %d pages would not unmap at destruction; the "
                         "address range stays reserved",
                         Who(), stuck));
    return;
  }
  ScopedPrimaryContext scoped(d, device_ordinal_);
  const CUresult r = d.MemAddressFree(DevPtr(base_), num_pages_ * page_bytes_);
  if (r != CUDA_SUCCESS) {
    Log(LogSeverity::kError,
        absl::StrCat(Who(), ": ", d.CallError("cuMemAddressFree", r).message(),
                     " (the address range stays reserved)"));
  }
}

absl::Status CudaVmmSubAllocator::Availability() const { return status_; }

size_t CudaVmmSubAllocator::PartialFreeBytes() const { return page_bytes_; }

size_t CudaVmmSubAllocator::ReservedAddressBytes() const {
  return base_ == 0 ? 0 : num_pages_ * page_bytes_;
}

size_t CudaVmmSubAllocator::UnreturnedBytes() {
  MutexLock lock(&mu_);
  RetryStuckLocked();
  return static_cast<size_t>(counters_.stuck_pages +
                             counters_.unreleased_pages) *
         page_bytes_;
}

absl::Status CudaVmmSubAllocator::CheckHeldRegions(
    const std::vector<std::pair<uintptr_t, uintptr_t>>& regions) const {
  MutexLock lock(&mu_);
  // Page i is mapped exactly when some region covers it.
  std::vector<uint8_t> covered(num_pages_, 0);
  const uintptr_t end = base_ + num_pages_ * page_bytes_;
  for (const auto& [lo, hi] : regions) {
    if (lo < base_ || hi > end || (lo - base_) % page_bytes_ != 0 ||
        (hi - base_) % page_bytes_ != 0) {
      return absl::InternalError(internal::Format(
          "region [%#x, %#x) is not whole pages of the range [%#x, %#x) "
          "(pages of %d bytes)",
          lo, hi, base_, end, page_bytes_));
    }
    for (size_t i = (lo - base_) / page_bytes_; i < (hi - base_) / page_bytes_;
         ++i) {
      if (covered[i]++ != 0) {
        return absl::InternalError(internal::Format(
            "page %#x is in two regions", base_ + i * page_bytes_));
      }
    }
  }
  for (size_t i = 0; i < num_pages_; ++i) {
    const bool mapped = pages_[i].state == PageState::kMapped;
    if (mapped != (covered[i] != 0)) {
      return absl::InternalError(
          internal::Format("page %#x is %s but %s", base_ + i * page_bytes_,
                           mapped ? "mapped" : "not mapped",
                           mapped ? "in no region" : "inside a region"));
    }
  }
  return absl::OkStatus();
}

CudaVmmSubAllocator::Counters CudaVmmSubAllocator::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

bool CudaVmmSubAllocator::SynchronizeLocked() {
  if (!synchronize_before_unmap_) return true;
  absl::StatusOr<const CudaDriver*> got = CudaDriver::Get();
  if (!got.ok()) return false;
  // Every device with access may run kernels on these pages, and a context
  // synchronize waits only for its own context's work (a review: a peer's
  // kernel still read a page the owner's synchronize let go).
  ++counters_.synchronizes;
  for (int device : access_devices_) {
    ScopedPrimaryContext scoped(**got, device);
    const CUresult r = scoped.status().ok() ? (*got)->CtxSynchronize()
                                            : CUDA_ERROR_INVALID_CONTEXT;
    if (r != CUDA_SUCCESS) {
      Log(LogSeverity::kError,
          absl::StrCat(
              Who(), ": ",
              scoped.status().ok()
                  ? (*got)
                        ->CallError(internal::Format(
                                        "cuCtxSynchronize(device %d)", device),
                                    r)
                        .message()
                  : scoped.status().message(),
              "; pages stay mapped (a kernel may still use them) and "
              "are retried later"));
      return false;
    }
  }
  return true;
}

size_t CudaVmmSubAllocator::UnmapPagesLocked(size_t first, size_t n,
                                             size_t* failures) {
  const CudaDriver& d = **CudaDriver::Get();
  ScopedPrimaryContext scoped(d, device_ordinal_);
  size_t own_failures = 0;
  if (failures == nullptr) failures = &own_failures;
  size_t unmapped = 0;
  for (size_t i = first; i < first + n; ++i) {
    Page& p = pages_[i];
    const uintptr_t a = base_ + i * page_bytes_;
    const CUresult r = d.MemUnmap(DevPtr(a), page_bytes_);
    if (r != CUDA_SUCCESS) {
      if (p.state != PageState::kStuck) {
        if (p.state == PageState::kMapped) {
          counters_.mapped_bytes -= page_bytes_;
        }
        p.state = PageState::kStuck;
        ++counters_.stuck_pages;
      }
      if ((*failures)++ == 0) {
        Log(LogSeverity::kError,
            absl::StrCat(
                Who(), ": ",
                d.CallError(internal::Format("cuMemUnmap(%#x, %d bytes)", a,
                                             page_bytes_),
                            r)
                    .message(),
                "; the page is kept out of use and retried later"));
      }
      continue;
    }
    // The address is free again either way; a physical page whose release
    // failed is kept and retried.
    ReleaseHandleLocked(p.handle);
    if (p.state == PageState::kStuck) {
      --counters_.stuck_pages;
    } else {
      counters_.mapped_bytes -= page_bytes_;
    }
    p = Page();
    ++counters_.unmaps;
    ++unmapped;
  }
  if (failures == &own_failures) LogMoreUnmapFailures(own_failures);
  return unmapped;
}

void CudaVmmSubAllocator::LogMoreUnmapFailures(size_t failures) {
  if (failures <= 1) return;
  Log(LogSeverity::kError,
      internal::Format("%s: %d more pages would not unmap either; they are "
                       "kept out of use and retried later",
                       Who(), failures - 1));
}

void CudaVmmSubAllocator::ReleaseHandleLocked(unsigned long long handle) {
  const CudaDriver& d = **CudaDriver::Get();
  const CUresult r = d.MemRelease(handle);
  if (r == CUDA_SUCCESS) return;
  ++counters_.leaked_handles;
  try {
    unreleased_.push_back(handle);
    ++counters_.unreleased_pages;
    Log(LogSeverity::kError,
        absl::StrCat(Who(), ": ", d.CallError("cuMemRelease", r).message(),
                     " (the physical page is kept and its release retried)"));
  } catch (...) {
    // No host memory to keep it: that page is lost to this process.
  }
}

void CudaVmmSubAllocator::RetryUnreleasedLocked() {
  std::vector<unsigned long long> retry;
  retry.swap(unreleased_);
  counters_.unreleased_pages = 0;
  for (unsigned long long h : retry) ReleaseHandleLocked(h);
}

void CudaVmmSubAllocator::RetryStuckLocked() {
  if (!unreleased_.empty()) RetryUnreleasedLocked();
  if (counters_.stuck_pages == 0) return;
  if (!SynchronizeLocked()) return;
  size_t failures = 0;
  for (size_t i = 0; i < num_pages_ && counters_.stuck_pages > 0; ++i) {
    if (pages_[i].state == PageState::kStuck) {
      (void)UnmapPagesLocked(i, 1, &failures);
    }
  }
  LogMoreUnmapFailures(failures);
}

void* CudaVmmSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                 size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  if (!status_.ok() || num_bytes == 0) return nullptr;
  if (!IsPowerOfTwo(alignment)) {
    Log(LogSeverity::kError,
        internal::Format("%s: alignment %d for %d bytes is not a power of two",
                         Who(), alignment, num_bytes));
    return nullptr;
  }
  const size_t n = num_bytes / page_bytes_ + (num_bytes % page_bytes_ != 0);
  if (n > num_pages_) {
    Log(LogSeverity::kError,
        internal::Format("%s: %d bytes is more than the reserved range (%d "
                         "bytes)",
                         Who(), num_bytes, num_pages_ * page_bytes_));
    return nullptr;
  }
  MutexLock lock(&mu_);
  RetryStuckLocked();
  // The lowest run of n unmapped pages with an aligned start.
  size_t first = num_pages_;
  for (size_t i = 0, run = 0; i < num_pages_; ++i) {
    if (pages_[i].state != PageState::kUnmapped) {
      run = 0;
      continue;
    }
    if (run == 0 && (base_ + i * page_bytes_) % alignment != 0) continue;
    if (++run == n) {
      first = i + 1 - n;
      break;
    }
  }
  if (first == num_pages_) {
    Log(LogSeverity::kError,
        internal::Format("%s: no hole of %d pages (%d bytes, alignment %d) in "
                         "the reserved range of %d bytes (%d bytes mapped)",
                         Who(), n, n * page_bytes_, alignment,
                         num_pages_ * page_bytes_, counters_.mapped_bytes));
    ++counters_.failed_allocs;
    return nullptr;
  }
  const CudaDriver& d = **CudaDriver::Get();
  ScopedPrimaryContext scoped(d, device_ordinal_);
  if (!scoped.status().ok()) {
    Log(LogSeverity::kError,
        absl::StrCat(Who(), ": ", scoped.status().message()));
    ++counters_.failed_allocs;
    return nullptr;
  }
  const CUmemAllocationProp prop = DeviceProp(device_ordinal_);
  const uintptr_t start = base_ + first * page_bytes_;
  // Created and mapped so far: undone in reverse if a later step fails.
  size_t mapped = 0;
  std::string failure;
  for (; mapped < n; ++mapped) {
    const uintptr_t a = start + mapped * page_bytes_;
    CUmemGenericAllocationHandle h = 0;
    CUresult r = d.MemCreate(&h, page_bytes_, &prop, 0);
    if (r != CUDA_SUCCESS) {
      failure = StatusText(d.CallError(
          internal::Format("cuMemCreate(%d bytes)", page_bytes_), r));
      break;
    }
    r = d.MemMap(DevPtr(a), page_bytes_, 0, h, 0);
    if (r != CUDA_SUCCESS) {
      failure = StatusText(d.CallError(
          internal::Format("cuMemMap(%#x, %d bytes)", a, page_bytes_), r));
      ReleaseHandleLocked(h);
      break;
    }
    pages_[first + mapped].handle = h;
    pages_[first + mapped].state = PageState::kMapped;
    counters_.mapped_bytes += page_bytes_;
  }
  if (mapped == n) {
    std::vector<CUmemAccessDesc> access(access_devices_.size());
    for (size_t k = 0; k < access.size(); ++k) {
      access[k].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access[k].location.id = access_devices_[k];
      access[k].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    }
    ++counters_.set_access;
    const CUresult r = d.MemSetAccess(DevPtr(start), n * page_bytes_,
                                      access.data(), access.size());
    if (r != CUDA_SUCCESS) {
      failure = StatusText(
          d.CallError(internal::Format("cuMemSetAccess(%#x, %d bytes)", start,
                                       n * page_bytes_),
                      r));
    }
  }
  if (!failure.empty()) {
    // Exact rollback: nothing this call mapped stays mapped (a page the
    // driver will not unmap is marked stuck, never handed out).
    (void)UnmapPagesLocked(first, mapped);
    ++counters_.failed_allocs;
    Log(LogSeverity::kError,
        internal::Format("%s: mapping %d bytes failed: %s; rolled back", Who(),
                         n * page_bytes_, failure));
    return nullptr;
  }
  counters_.maps += static_cast<int64_t>(n);
  counters_.peak_mapped_bytes =
      std::max(counters_.peak_mapped_bytes, counters_.mapped_bytes);
  void* ptr = reinterpret_cast<void*>(start);
  if (bytes_received != nullptr) *bytes_received = n * page_bytes_;
  VisitAlloc(ptr, device_ordinal_, n * page_bytes_);
  return ptr;
}

void CudaVmmSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr || num_bytes == 0) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  MutexLock lock(&mu_);
  const bool inside =
      base_ != 0 && a >= base_ && (a - base_) % page_bytes_ == 0 &&
      num_bytes % page_bytes_ == 0 &&
      (a - base_) / page_bytes_ + num_bytes / page_bytes_ <= num_pages_;
  size_t first = 0, n = 0;
  bool mapped = inside;
  if (inside) {
    first = (a - base_) / page_bytes_;
    n = num_bytes / page_bytes_;
    for (size_t i = first; i < first + n && mapped; ++i) {
      mapped = pages_[i].state == PageState::kMapped;
    }
  }
  if (!mapped) {
    Log(LogSeverity::kError,
        internal::Format("%s: Free(%p, %d bytes) is not a range of whole pages "
                         "handed out (pages of %d bytes from %#x); ignored",
                         Who(), ptr, num_bytes, page_bytes_, base_));
    return;
  }
  VisitFree(ptr, device_ordinal_, num_bytes);
  if (!SynchronizeLocked()) {
    // Not unmapped while a kernel may use it: out of use now, unmapped by a
    // later call once the device synchronizes.
    for (size_t i = first; i < first + n; ++i) {
      pages_[i].state = PageState::kStuck;
      ++counters_.stuck_pages;
      counters_.mapped_bytes -= page_bytes_;
    }
    return;
  }
  (void)UnmapPagesLocked(first, n);
  RetryStuckLocked();
}

}  // namespace bfc
