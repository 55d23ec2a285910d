// File: bfc/cuda_sub_allocator.h
// -----------------------------------------------------------------------------
//
// SubAllocators over the CUDA runtime, built when CMake finds the CUDA toolkit
// (BFC_HAVE_CUDA). They need no GPU to build; without a device every Alloc
// fails cleanly (nullptr and a logged message naming the CUDA error).
//
//   CudaDeviceSubAllocator(device)  cudaMalloc / cudaFree on `device`  kDevice
//   CudaPinnedSubAllocator()        cudaHostAlloc / cudaFreeHost kHostPinned
//
// The device sub-allocator switches to its device for each call and restores
// the caller's current device afterwards (cudaSetDevice-safe). CUDA errors
// never abort; Availability() names why a backend cannot work at all (no
// driver, no device), so an allocator fails fast with that reason. cudaMalloc
// blocks are never merged (SupportsCoalescing() is false), as in TF's
// DeviceMemAllocator.
//
// Thread-safe (the CUDA runtime is).
#ifndef BFC_CUDA_SUB_ALLOCATOR_H_
#define BFC_CUDA_SUB_ALLOCATOR_H_

#include <cstddef>
#include <string>
#include <vector>

#include "bfc/sub_allocator.h"

namespace bfc {

// Number of CUDA devices visible, or 0 (with *error set, if given) when the
// runtime reports none or fails.
int CudaDeviceCount(std::string* error = nullptr);

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
  // Unavailable when the runtime sees no device (no driver, no GPU) or not
  // this one, with the runtime's reason.
  absl::Status Availability() const override;
  int device_ordinal() const { return device_ordinal_; }

 private:
  const int device_ordinal_;
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
  // Unavailable when the runtime sees no device (pinned memory needs one).
  absl::Status Availability() const override;
};

}  // namespace bfc

#endif  // BFC_CUDA_SUB_ALLOCATOR_H_
