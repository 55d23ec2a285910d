// File: src/cuda_sub_allocator.cc
// -----------------------------------------------------------------------------
//
// SubAllocators over the CUDA runtime API, compiled as plain C++ (no nvcc).
//
// Error policy: a sub-allocator sits under an allocator that already handles
// nullptr (it backs off and reports out-of-memory), so every CUDA failure here
// becomes nullptr plus one logged message that names the CUDA error and the
// request. Nothing aborts. After a failure the runtime's last-error slot is
// cleared with cudaGetLastError so that an unrelated later check by the host
// program does not trip over our error.
#include "bfc/cuda_sub_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "bfc/internal/constants.h"
#include "bfc/log.h"
#include "core/internal/bits.h"

namespace bfc {
namespace {

using internal::IsAligned;
using internal::IsPowerOfTwo;

// CUDA's own promise, not the allocator's granule: cudaMalloc and
// cudaHostAlloc return memory aligned to at least 256 bytes (CUDA C
// Programming Guide, "Device Memory Accesses"); larger requests are checked
// after the fact. The allocator asks for at least kMinAllocationSize, which
// this guarantee must cover so that the common request needs no check.
constexpr size_t kCudaGuaranteedAlignment = 256;
static_assert(kCudaGuaranteedAlignment >= kMinAllocationSize &&
              IsPowerOfTwo(kCudaGuaranteedAlignment));

std::string DescribeError(cudaError_t err) {
  return absl::StrFormat("%s: %s", cudaGetErrorName(err),
                         cudaGetErrorString(err));
}

// Logs `what` failed with `err`, then clears the runtime's last error.
void ReportCudaError(const std::string& who, const std::string& what,
                     cudaError_t err) {
  Log(LogSeverity::kError,
      absl::StrFormat("%s: %s failed: %s", who, what, DescribeError(err)));
  (void)cudaGetLastError();
}

// Checks the request common to both sub-allocators; logs what is wrong.
[[nodiscard]] bool ValidRequest(const std::string& who, size_t alignment,
                                size_t num_bytes) {
  if (num_bytes == 0) return false;
  if (!IsPowerOfTwo(alignment)) {
    Log(LogSeverity::kError,
        absl::StrFormat("%s: alignment %d for %d bytes is not a power of two",
                        who, alignment, num_bytes));
    return false;
  }
  return true;
}

// Makes `device` current for its lifetime and restores the caller's device
// afterwards, so a sub-allocator never changes the thread's CUDA state.
class ScopedDevice {
 public:
  ScopedDevice(int device, const std::string& who) {
    cudaError_t err = cudaGetDevice(&saved_);
    if (err != cudaSuccess) {
      ReportCudaError(who, "cudaGetDevice", err);
      return;
    }
    if (saved_ != device) {
      err = cudaSetDevice(device);
      if (err != cudaSuccess) {
        ReportCudaError(who, absl::StrFormat("cudaSetDevice(%d)", device), err);
        return;
      }
      restore_ = true;
    }
    ok_ = true;
  }
  ~ScopedDevice() {
    if (restore_ && cudaSetDevice(saved_) != cudaSuccess) {
      (void)cudaGetLastError();
    }
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  bool ok() const { return ok_; }

 private:
  int saved_ = 0;
  bool restore_ = false;
  bool ok_ = false;
};

}  // namespace

int CudaDeviceCount(std::string* error) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (error != nullptr) *error = "cudaGetDeviceCount: " + DescribeError(err);
    return 0;
  }
  if (count <= 0) {
    if (error != nullptr) *error = "cudaGetDeviceCount: no CUDA device visible";
    return 0;
  }
  return count;
}

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
  std::string error;
  const int count = CudaDeviceCount(&error);
  if (count == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "CudaDeviceSubAllocator(device %d): %s", device_ordinal_, error));
  }
  if (device_ordinal_ < 0 || device_ordinal_ >= count) {
    return absl::UnavailableError(absl::StrFormat(
        "CudaDeviceSubAllocator(device %d): no such device (%d visible)",
        device_ordinal_, count));
  }
  return absl::OkStatus();
}

void* CudaDeviceSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                    size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  const std::string who =
      absl::StrFormat("CudaDeviceSubAllocator(device %d)", device_ordinal_);
  if (!ValidRequest(who, alignment, num_bytes)) return nullptr;
  ScopedDevice scoped(device_ordinal_, who);
  const std::string request = absl::StrFormat(
      "cudaMalloc(%d bytes, alignment %d)", num_bytes, alignment);
  if (!scoped.ok()) {
    Log(LogSeverity::kError,
        absl::StrFormat("%s: %s not attempted", who, request));
    return nullptr;
  }
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, num_bytes);
  if (err != cudaSuccess) {
    ReportCudaError(who, request, err);
    return nullptr;
  }
  if (alignment > kCudaGuaranteedAlignment && !IsAligned(ptr, alignment)) {
    // Over-allocating to align would make Free's size disagree with what
    // cudaMalloc returned; failing lets the allocator report the problem.
    Log(LogSeverity::kError,
        absl::StrFormat("%s: %s returned %p, which is not aligned; freed it",
                        who, request, ptr));
    if (cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
    return nullptr;
  }
  if (bytes_received != nullptr) *bytes_received = num_bytes;
  VisitAlloc(ptr, device_ordinal_, num_bytes);
  return ptr;
}

void CudaDeviceSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  const std::string who =
      absl::StrFormat("CudaDeviceSubAllocator(device %d)", device_ordinal_);
  VisitFree(ptr, device_ordinal_, num_bytes);
  ScopedDevice scoped(device_ordinal_, who);
  // cudaFree works from any current device, so still try when the switch
  // failed: leaking device memory is worse than a second error message.
  const cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess) {
    ReportCudaError(
        who, absl::StrFormat("cudaFree(%p, %d bytes)", ptr, num_bytes), err);
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
  std::string error;
  if (CudaDeviceCount(&error) == 0) {
    return absl::UnavailableError("CudaPinnedSubAllocator: " + error);
  }
  return absl::OkStatus();
}

void* CudaPinnedSubAllocator::Alloc(size_t alignment, size_t num_bytes,
                                    size_t* bytes_received) {
  if (bytes_received != nullptr) *bytes_received = 0;
  const std::string who = "CudaPinnedSubAllocator";
  if (!ValidRequest(who, alignment, num_bytes)) return nullptr;
  const std::string request = absl::StrFormat(
      "cudaHostAlloc(%d bytes, alignment %d)", num_bytes, alignment);
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, num_bytes, cudaHostAllocDefault);
  if (err != cudaSuccess) {
    ReportCudaError(who, request, err);
    return nullptr;
  }
  if (alignment > kCudaGuaranteedAlignment && !IsAligned(ptr, alignment)) {
    Log(LogSeverity::kError,
        absl::StrFormat("%s: %s returned %p, which is not aligned; freed it",
                        who, request, ptr));
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
    return nullptr;
  }
  if (bytes_received != nullptr) *bytes_received = num_bytes;
  // Pinned memory has no device; index 0 stands for "host / NUMA node 0".
  VisitAlloc(ptr, 0, num_bytes);
  return ptr;
}

void CudaPinnedSubAllocator::Free(void* ptr, size_t num_bytes) {
  if (ptr == nullptr) return;
  VisitFree(ptr, 0, num_bytes);
  const cudaError_t err = cudaFreeHost(ptr);
  if (err != cudaSuccess) {
    ReportCudaError(
        "CudaPinnedSubAllocator",
        absl::StrFormat("cudaFreeHost(%p, %d bytes)", ptr, num_bytes), err);
  }
}

}  // namespace bfc
