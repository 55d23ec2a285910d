// File: bfc/cuda_sub_allocator.h
// -----------------------------------------------------------------------------
//
// SubAllocators over the CUDA driver, built when CMake finds the CUDA toolkit
// headers (BFC_HAVE_CUDA). Nothing links cudart or libcuda: the driver is
// loaded at first use (dlopen of $BFC_CUDA_DRIVER_LIBRARY, else
// "libcuda.so.1"; CUDA 12.0 or newer), so a program using bfc starts on a
// machine without a driver, and the first CUDA use fails at once with a
// message saying no driver was found and how to point at one.
//
//   CudaDeviceSubAllocator(device)  cuMemAlloc / cuMemFree in the device's
//                                   primary context (= cudaMalloc)   kDevice
//   CudaPinnedSubAllocator()        cuMemHostAlloc / cuMemFreeHost
//                                   (= cudaHostAlloc default) kHostPinned
//
// The device sub-allocator makes its device's primary context current for
// each call: set when the thread has none (as the runtime does), pushed and
// popped when the thread's current context is another's, so the caller's
// CUDA state is unchanged. CUDA errors never abort; Availability() names why
// a backend cannot work at all (no driver, an old driver, no device), so an
// allocator fails fast with that reason. Blocks are never merged
// (SupportsCoalescing() is false), as in TF's DeviceMemAllocator.
//
// Thread-safe (the driver is).
#ifndef BFC_CUDA_SUB_ALLOCATOR_H_
#define BFC_CUDA_SUB_ALLOCATOR_H_

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bfc/internal/mutex.h"
#include "bfc/sub_allocator.h"

namespace bfc {

// Number of CUDA devices visible, or 0 (with *error set, if given) when there
// is no driver, it fails, or it reports none.
int CudaDeviceCount(std::string* error = nullptr);

// cuStreamSynchronize(stream) through the driver table (`stream` is a
// cudaStream_t / CUstream; nullptr is the legacy default stream). The null,
// legacy and per-thread handles name a stream of the current context; on a
// thread with none, device 0's primary context is made current first (and
// stays current), as the CUDA runtime does on a thread's first call.
// Unavailable without a driver; the CUDA error named otherwise.
absl::Status CudaStreamSynchronize(void* stream);
// The same for a stream of `device`: the null, legacy and per-thread handles
// then name that device's (primary context's) stream, whatever context is
// current; the current context is left as it was. What a free on one of
// those handles needs when the memory is `device`'s and the caller's current
// device may be another (PyTorch frees under any device guard).
absl::Status CudaStreamSynchronize(void* stream, int device);

// Free and total memory of `device` (cuMemGetInfo in its primary context),
// leaving the calling thread's current context as it was.
absl::Status CudaMemGetInfo(int device, size_t* free_bytes,
                            size_t* total_bytes);

namespace internal {

// Blocks a CUDA sub-allocator padded for an alignment the driver did not
// give (it promises 256 bytes; large blocks are often 2 MiB aligned, never
// more): the aligned pointer handed out -> the block's own address.
class PaddedBlocks {
 public:
  void Remember(void* aligned, void* base);
  // The driver's address for `ptr` (`ptr` itself unless it was padded);
  // forgets it.
  void* Take(void* ptr);

 private:
  Mutex mu_;
  std::map<void*, void*> bases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace internal

class CudaDeviceSubAllocator : public SubAllocator {
 public:
  explicit CudaDeviceSubAllocator(int device_ordinal);
  CudaDeviceSubAllocator(int device_ordinal,
                         std::vector<Visitor> alloc_visitors,
                         std::vector<Visitor> free_visitors);
  ~CudaDeviceSubAllocator() override;

  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override;
  void Free(void* ptr, size_t num_bytes) override;
  bool SupportsCoalescing() const override { return false; }
  MemoryType GetMemoryType() const override { return MemoryType::kDevice; }
  // Unavailable when there is no driver, no device or not this one, with the
  // driver's reason.
  absl::Status Availability() const override;
  int device_ordinal() const { return device_ordinal_; }

 private:
  const int device_ordinal_;
  internal::PaddedBlocks padded_;
};

class CudaPinnedSubAllocator : public SubAllocator {
 public:
  CudaPinnedSubAllocator();
  CudaPinnedSubAllocator(std::vector<Visitor> alloc_visitors,
                         std::vector<Visitor> free_visitors);
  ~CudaPinnedSubAllocator() override;

  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override;
  void Free(void* ptr, size_t num_bytes) override;
  bool SupportsCoalescing() const override { return false; }
  MemoryType GetMemoryType() const override { return MemoryType::kHostPinned; }
  // Unavailable when there is no driver or no device (pinned memory needs
  // one).
  absl::Status Availability() const override;

 private:
  internal::PaddedBlocks padded_;
};

}  // namespace bfc

#endif  // BFC_CUDA_SUB_ALLOCATOR_H_
