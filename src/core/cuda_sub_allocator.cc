// File: src/core/cuda_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// SubAllocators over the CUDA driver API, reached through the run-time driver
// table (core/internal/cuda_driver.h): nothing here links cudart or libcuda.
// They behave as the runtime calls users know: device memory is cuMemAlloc in
// the device's primary context (what cudaMalloc does), pinned memory is
// cuMemHostAlloc with no flags (cudaHostAlloc's default).
//
// Error policy: a sub-allocator sits under an allocator that already handles
// nullptr (it backs off and reports out-of-memory), so every CUDA failure here
// becomes nullptr plus one logged message that names the CUDA error and the
// request. Nothing aborts. The driver API has no sticky last-error slot, so a
// failure here leaves nothing behind for the host program's own checks.
#include "bfc/cuda_sub_allocator.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/log.h"
#include "core/internal/bits.h"
#include "core/internal/cuda_driver.h"

namespace bfc {
namespace {

using internal::CudaDriver;
using internal::IsAligned;
using internal::IsPowerOfTwo;
using internal::MutexLock;
using internal::ScopedPrimaryContext;

// CUDA's own promise, not the allocator's granule: cuMemAlloc and
// cuMemHostAlloc return memory aligned to at least 256 bytes (CUDA C
// Programming Guide, "Device Memory Accesses"); larger requests are checked
// after the fact. The allocator asks for at least kMinAllocationSize, which
// this guarantee must cover so that the common request needs no check.
constexpr size_t kCudaGuaranteedAlignment = 256;
static_assert(kCudaGuaranteedAlignment >= kMinAllocationSize &&
              IsPowerOfTwo(kCudaGuaranteedAlignment));

// The driver, or nullptr after logging why `who` cannot reach it.
const CudaDriver* DriverOrLog(const std::string& who, const std::string& what) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) {
    Log(LogSeverity::kError, internal::Format("%s: %s not attempted: %s", who,
                                              what, driver.status().message()));
    return nullptr;
  }
  return *driver;
}

// Checks the request common to both sub-allocators; logs what is wrong.
[[nodiscard]] bool ValidRequest(const std::string& who, size_t alignment,
                                size_t num_bytes) {
  if (num_bytes == 0) return false;
  if (!IsPowerOfTwo(alignment)) {
    Log(LogSeverity::kError,
        internal::Format("%s: alignment %d for %d bytes is not a power of two",
                         who, alignment, num_bytes));
    return false;
  }
  return true;
}

// num_bytes plus the most padding an `alignment` can need past the driver's
// guarantee, into *out; false (logged) when that overflows.
[[nodiscard]] bool PaddedSize(const std::string& who,
                              const std::string& request, size_t num_bytes,
                              size_t alignment, size_t* out) {
  if (__builtin_add_overflow(num_bytes, alignment - kCudaGuaranteedAlignment,
                             out)) {
    Log(LogSeverity::kError,
        internal::Format("%s: %s: size plus alignment overflows", who,
                         request));
    return false;
  }
  return true;
}

void* AlignInside(void* base, size_t alignment) {
  return reinterpret_cast<void*>(
      internal::AlignUp(reinterpret_cast<uintptr_t>(base), alignment));
}

void LogFailure(const std::string& who, const absl::Status& status) {
  Log(LogSeverity::kError, internal::Format("%s: %s", who, status.message()));
}

// Giving back a block that came misaligned, before the padded retry: a
// failure leaks it, which is said (a review: it was silent).
void FreeOrLog(const std::string& who, CUresult result,
               const CudaDriver& driver, const char* call, size_t num_bytes) {
  if (result == CUDA_SUCCESS) return;
  LogFailure(who, driver.CallError(
                      internal::Format("%s of a misaligned block of %d bytes "
                                       "(before a padded retry); it is leaked",
                                       call, num_bytes),
                      result));
}

}  // namespace

int CudaDeviceCount(std::string* error) {
  absl::StatusOr<int> count = internal::CudaDriverDeviceCount();
  if (!count.ok()) {
    if (error != nullptr) *error = std::string(count.status().message());
    return 0;
  }
  return *count;
}

namespace {

bool IsContextStreamHandle(void* stream) {
  const uintptr_t handle = reinterpret_cast<uintptr_t>(stream);
  return handle == 0 ||
         handle == reinterpret_cast<uintptr_t>(CU_STREAM_LEGACY) ||
         handle == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD);
}

// `device` < 0: the current context's stream (device 0's primary context on
// a thread with none).
absl::Status StreamSynchronizeOn(void* stream, int device) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  // The null, legacy and per-thread handles name a stream of the current
  // context; a thread with none (a host worker that only frees) gets device
  // 0's primary context, as the CUDA runtime gives a thread's first call
  // (a review: the driver refuses the call without a context, and the
  // resource then kept the memory for good).
  std::optional<ScopedPrimaryContext> scoped;
  if (IsContextStreamHandle(stream)) {
    CUcontext current = nullptr;
    if (device >= 0) {
      scoped.emplace(**driver, device, /*leave_none_current=*/true);
    } else if ((*driver)->CtxGetCurrent(&current) == CUDA_SUCCESS &&
               current == nullptr) {
      scoped.emplace(**driver, 0);
    }
    if (scoped.has_value() && !scoped->status().ok()) return scoped->status();
  }
  const CUresult result =
      (*driver)->StreamSynchronize(static_cast<CUstream>(stream));
  if (result != CUDA_SUCCESS) {
    return (*driver)->CallError("cuStreamSynchronize", result);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaStreamSynchronize(void* stream) {
  return StreamSynchronizeOn(stream, -1);
}

absl::Status CudaStreamSynchronize(void* stream, int device) {
  if (device < 0) {
    return absl::InvalidArgumentError(internal::Format(
        "CudaStreamSynchronize: device %d is negative", device));
  }
  return StreamSynchronizeOn(stream, device);
}

absl::Status CudaMemGetInfo(int device, size_t* free_bytes,
                            size_t* total_bytes) {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  ScopedPrimaryContext scoped(**driver, device);
  if (!scoped.status().ok()) return scoped.status();
  const CUresult result = (*driver)->MemGetInfo(free_bytes, total_bytes);
  if (result != CUDA_SUCCESS) {
    return (*driver)->CallError(
        internal::Format("cuMemGetInfo on device %d", device), result);
  }
  return absl::OkStatus();
}

// --- PaddedBlocks
// -------------------------------------------------------------

namespace internal {

void PaddedBlocks::Remember(void* aligned, void* base) {
  MutexLock lock(&mu_);
  bases_[aligned] = base;
}

void* PaddedBlocks::Take(void* ptr) {
  MutexLock lock(&mu_);
  auto it = bases_.find(ptr);
  if (it == bases_.end()) return ptr;
  void* base = it->second;
  bases_.erase(it);
  return base;
}

}  // namespace internal

// --- CudaDeviceSubAllocator ------------------------------------------------

CudaDeviceSubAllocator::CudaDeviceSubAllocator(int device_ordinal)
    : CudaDeviceSubAllocator(device_ordinal, {}, {}) {}

CudaDeviceSubAllocator::CudaDeviceSubAllocator(
    int device_ordinal, std::vector<Visitor> alloc_visitors,
    std::vector<Visitor> free_visitors)
    : SubAllocator(std::move(alloc_visitors), std::move(free_visitors)),
      device_ordinal_(device_ordinal) {}

CudaDeviceSubAllocator::~CudaDeviceSubAllocator() = default;

absl::Status CudaDeviceSubAllocator::Availability() const {
  absl::StatusOr<int> count = internal::CudaDriverDeviceCount();
  if (!count.ok()) {
    return absl::UnavailableError(
        internal::Format("CudaDeviceSubAllocator(device %d): %s",
                         device_ordinal_, count.status().message()));
  }
  if (device_ordinal_ < 0 || device_ordinal_ >= *count) {
    return absl::UnavailableError(internal::Format(
        "CudaDeviceSubAllocator(device %d): no such device (%d visible)",
        device_ordinal_, *count));
  }
  return absl::OkStatus();
}

void* CudaDeviceSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                    size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  const std::string who =
      internal::Format("CudaDeviceSubAllocator(device %d)", device_ordinal_);
  if (!ValidRequest(who, alignment, num_bytes)) return nullptr;
  const std::string request = internal::Format(
      "cuMemAlloc(%d bytes, alignment %d)", num_bytes, alignment);
  const CudaDriver* driver = DriverOrLog(who, request);
  if (driver == nullptr) return nullptr;
  if (device_ordinal_ < 0) {
    Log(LogSeverity::kError,
        internal::Format("%s: %s: no such device", who, request));
    return nullptr;
  }
  ScopedPrimaryContext scoped(*driver, device_ordinal_);
  if (!scoped.status().ok()) {
    LogFailure(who,
               absl::Status(scoped.status().code(),
                            internal::Format("%s not attempted: %s", request,
                                             scoped.status().message())));
    return nullptr;
  }
  CUdeviceptr dptr = 0;
  const CUresult result = driver->MemAlloc(&dptr, num_bytes);
  if (result != CUDA_SUCCESS) {
    LogFailure(who, driver->CallError(request, result));
    return nullptr;
  }
  void* ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(dptr));
  if (alignment > kCudaGuaranteedAlignment && !IsAligned(ptr, alignment)) {
    // The driver aligns to 256 bytes (large blocks usually to 2 MiB), not
    // more: allocate `alignment` more and hand out the aligned address
    // inside, remembering the block's own address for Free.
    FreeOrLog(who, driver->MemFree(dptr), *driver, "cuMemFree", num_bytes);
    size_t padded = 0;
    if (!PaddedSize(who, request, num_bytes, alignment, &padded)) {
      return nullptr;
    }
    const CUresult again = driver->MemAlloc(&dptr, padded);
    if (again != CUDA_SUCCESS) {
      LogFailure(who, driver->CallError(
                          internal::Format("%s (padded to %d bytes to align)",
                                           request, padded),
                          again));
      return nullptr;
    }
    void* base = reinterpret_cast<void*>(static_cast<uintptr_t>(dptr));
    ptr = AlignInside(base, alignment);
    padded_.Remember(ptr, base);
  }
  if (bytes_received != nullptr) *bytes_received = num_bytes;
  VisitAlloc(ptr, device_ordinal_, num_bytes);
  return ptr;
}

void CudaDeviceSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  const std::string who =
      internal::Format("CudaDeviceSubAllocator(device %d)", device_ordinal_);
  VisitFree(ptr, device_ordinal_, num_bytes);
  const std::string request =
      internal::Format("cuMemFree(%p, %d bytes)", ptr, num_bytes);
  const CudaDriver* driver = DriverOrLog(who, request);
  if (driver == nullptr) return;
  ScopedPrimaryContext scoped(*driver, device_ordinal_);
  if (!scoped.status().ok()) {
    // The free is still tried: a pointer names its own context under
    // unified addressing, and leaking device memory is worse than a second
    // error message.
    LogFailure(who, scoped.status());
  }
  void* base = padded_.Take(ptr);
  const CUresult result = driver->MemFree(
      static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(base)));
  // The device may still hold the memory: logged for whoever called, and
  // said to an allocator calling, which keeps counting it against its limit.
  if (result != CUDA_SUCCESS) {
    const absl::Status error = driver->CallError(request, result);
    LogFailure(who, error);
    FreeFailed(error.message());
  }
}

// --- CudaPinnedSubAllocator ------------------------------------------------

CudaPinnedSubAllocator::CudaPinnedSubAllocator()
    : CudaPinnedSubAllocator({}, {}) {}

CudaPinnedSubAllocator::CudaPinnedSubAllocator(
    std::vector<Visitor> alloc_visitors, std::vector<Visitor> free_visitors)
    : SubAllocator(std::move(alloc_visitors), std::move(free_visitors)) {}

CudaPinnedSubAllocator::~CudaPinnedSubAllocator() = default;

absl::Status CudaPinnedSubAllocator::Availability() const {
  absl::StatusOr<int> count = internal::CudaDriverDeviceCount();
  if (!count.ok()) {
    return absl::UnavailableError(
        absl::StrCat("CudaPinnedSubAllocator: ", count.status().message()));
  }
  return absl::OkStatus();
}

void* CudaPinnedSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                    size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  const std::string who = "CudaPinnedSubAllocator";
  if (!ValidRequest(who, alignment, num_bytes)) return nullptr;
  const std::string request = internal::Format(
      "cuMemHostAlloc(%d bytes, alignment %d)", num_bytes, alignment);
  const CudaDriver* driver = DriverOrLog(who, request);
  if (driver == nullptr) return nullptr;
  // Pinned memory belongs to a context: the calling thread's, else device
  // 0's primary context, as cudaHostAlloc would use.
  CUcontext current = nullptr;
  CUresult result = driver->CtxGetCurrent(&current);
  std::optional<ScopedPrimaryContext> scoped;
  if (result != CUDA_SUCCESS || current == nullptr) {
    scoped.emplace(*driver, 0);
    if (!scoped->status().ok()) {
      LogFailure(who,
                 absl::Status(scoped->status().code(),
                              internal::Format("%s not attempted: %s", request,
                                               scoped->status().message())));
      return nullptr;
    }
  }
  void* ptr = nullptr;
  result = driver->MemHostAlloc(&ptr, num_bytes, 0);
  if (result != CUDA_SUCCESS) {
    LogFailure(who, driver->CallError(request, result));
    return nullptr;
  }
  if (alignment > kCudaGuaranteedAlignment && !IsAligned(ptr, alignment)) {
    // As for device memory: pad, align inside, remember the block.
    FreeOrLog(who, driver->MemFreeHost(ptr), *driver, "cuMemFreeHost",
              num_bytes);
    size_t padded = 0;
    if (!PaddedSize(who, request, num_bytes, alignment, &padded)) {
      return nullptr;
    }
    void* base = nullptr;
    result = driver->MemHostAlloc(&base, padded, 0);
    if (result != CUDA_SUCCESS) {
      LogFailure(who, driver->CallError(
                          internal::Format("%s (padded to %d bytes to align)",
                                           request, padded),
                          result));
      return nullptr;
    }
    ptr = AlignInside(base, alignment);
    padded_.Remember(ptr, base);
  }
  if (bytes_received != nullptr) *bytes_received = num_bytes;
  // Pinned memory has no device; index 0 stands for "host / NUMA node 0".
  VisitAlloc(ptr, 0, num_bytes);
  return ptr;
}

void CudaPinnedSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  VisitFree(ptr, 0, num_bytes);
  const std::string who = "CudaPinnedSubAllocator";
  const std::string request =
      internal::Format("cuMemFreeHost(%p, %d bytes)", ptr, num_bytes);
  const CudaDriver* driver = DriverOrLog(who, request);
  if (driver == nullptr) return;
  CUcontext current = nullptr;
  std::optional<ScopedPrimaryContext> scoped;
  if (driver->CtxGetCurrent(&current) != CUDA_SUCCESS || current == nullptr) {
    scoped.emplace(*driver, 0);
    if (!scoped->status().ok()) LogFailure(who, scoped->status());
  }
  void* base = padded_.Take(ptr);
  const CUresult result = driver->MemFreeHost(base);
  if (result != CUDA_SUCCESS) {  // as in CudaDeviceSubAllocator::Free
    const absl::Status error = driver->CallError(request, result);
    LogFailure(who, error);
    FreeFailed(error.message());
  }
}

}  // namespace bfc
