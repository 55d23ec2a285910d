// File: src/core/internal/cuda_driver.h
// -----------------------------------------------------------------------------
//
// The CUDA driver API, reached the way PyTorch and the CUDA samples reach it
// without linking it: `dlopen("libcuda.so.1")` at first use, then
// `cuGetProcAddress` for every function with an explicit API version. Nothing
// in bfc links cudart or libcuda; the toolkit provides only headers. So the
// library loads on a machine without a driver, and tests swap in a fake
// driver (tests/fake_cuda) through BFC_CUDA_DRIVER_LIBRARY.
//
// Which library: $BFC_CUDA_DRIVER_LIBRARY when set and non-empty (a path, or
// a name for the dynamic loader), else "libcuda.so.1". It is loaded once per
// process, on the first call of CudaDriver::Get(); a failure (no library, a
// driver older than kMinDriverVersion, a missing function, cuInit failing)
// is remembered and returned to every caller at once, never after a wait.
//
// Driver functions and the API version each is asked for:
//   12000 (CUDA 12.0, the oldest driver supported): cuInit,
//   cuDriverGetVersion, cuDeviceGetCount, cuDeviceGet,
//   cuDevicePrimaryCtxRetain, cuCtxGetCurrent, cuCtxSetCurrent,
//   cuCtxPushCurrent (_v2), cuCtxPopCurrent (_v2), cuCtxGetDevice,
//   cuMemAlloc (_v2), cuMemFree (_v2), cuMemHostAlloc, cuMemFreeHost,
//   cuMemGetInfo (_v2), cuStreamSynchronize, cuStreamWaitEvent,
//   cuEventCreate, cuEventRecord, cuEventQuery, cuEventSynchronize,
//   cuEventDestroy (_v2), cuGetErrorName, cuGetErrorString.
// cuGetProcAddress_v2 itself exists from driver 12.0 on.
//
// Virtual memory management (CudaVmmSubAllocator), also at 12000 but
// optional: a driver without them still loads, and `vmm_status` says why
// expandable regions are unavailable: cuDeviceGetAttribute,
// cuDeviceCanAccessPeer, cuCtxSynchronize, cuMemGetAllocationGranularity,
// cuMemAddressReserve, cuMemAddressFree, cuMemCreate, cuMemRelease, cuMemMap,
// cuMemUnmap, cuMemSetAccess.
//
// Thread safety: Get() is safe from any thread; the table is immutable once
// loaded.
#ifndef BFC_CORE_INTERNAL_CUDA_DRIVER_H_
#define BFC_CORE_INTERNAL_CUDA_DRIVER_H_

#include <cuda.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bfc {
namespace internal {

// The environment variable naming the driver library to load.
inline constexpr char kCudaDriverLibraryEnv[] = "BFC_CUDA_DRIVER_LIBRARY";
// The driver library's soname, as the NVIDIA driver installs it.
inline constexpr char kCudaDriverLibraryDefault[] = "libcuda.so.1";
// The oldest driver API version served (CUDA 12.0): the version every
// function is requested at, and the first with cuGetProcAddress_v2.
inline constexpr int kMinDriverVersion = 12000;

struct CudaDriver {
  // The process's driver, loaded on first use. The error says what is
  // missing and how to point bfc at a driver (Unavailable), or which call
  // failed (the CUDA error named).
  static absl::StatusOr<const CudaDriver*> Get();

  // "CUDA_ERROR_OUT_OF_MEMORY: out of memory" for `result`, from the driver
  // itself (its names and strings), or the number when it has none.
  std::string ErrorString(CUresult result) const;

  // A status for a failed call: `what` failed with the CUDA error named.
  // OUT_OF_MEMORY maps to ResourceExhausted, the rest to Internal or
  // Unavailable (no device, not initialized, driver too old).
  absl::Status CallError(const std::string& what, CUresult result) const;

  // The library that was loaded (as given to dlopen) and the driver's
  // version (e.g. 12080 for 12.8).
  std::string library;
  int version = 0;

  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuDriverGetVersion) DriverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) DeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent = nullptr;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent = nullptr;
  decltype(&::cuCtxPushCurrent_v2) CtxPushCurrent = nullptr;
  decltype(&::cuCtxPopCurrent_v2) CtxPopCurrent = nullptr;
  decltype(&::cuCtxGetDevice) CtxGetDevice = nullptr;
  decltype(&::cuMemAlloc_v2) MemAlloc = nullptr;
  decltype(&::cuMemFree_v2) MemFree = nullptr;
  decltype(&::cuMemHostAlloc) MemHostAlloc = nullptr;
  decltype(&::cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&::cuMemGetInfo_v2) MemGetInfo = nullptr;
  decltype(&::cuStreamSynchronize) StreamSynchronize = nullptr;
  decltype(&::cuStreamWaitEvent) StreamWaitEvent = nullptr;
  decltype(&::cuEventCreate) EventCreate = nullptr;
  decltype(&::cuEventRecord) EventRecord = nullptr;
  decltype(&::cuEventQuery) EventQuery = nullptr;
  decltype(&::cuEventSynchronize) EventSynchronize = nullptr;
  decltype(&::cuEventDestroy_v2) EventDestroy = nullptr;
  decltype(&::cuGetErrorName) GetErrorName = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;

  // VMM: all set, or all nullptr with vmm_status saying which is missing.
  absl::Status vmm_status;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute = nullptr;
  decltype(&::cuDeviceCanAccessPeer) DeviceCanAccessPeer = nullptr;
  decltype(&::cuCtxSynchronize) CtxSynchronize = nullptr;
  decltype(&::cuMemGetAllocationGranularity) MemGetAllocationGranularity =
      nullptr;
  decltype(&::cuMemAddressReserve) MemAddressReserve = nullptr;
  decltype(&::cuMemAddressFree) MemAddressFree = nullptr;
  decltype(&::cuMemCreate) MemCreate = nullptr;
  decltype(&::cuMemRelease) MemRelease = nullptr;
  decltype(&::cuMemMap) MemMap = nullptr;
  decltype(&::cuMemUnmap) MemUnmap = nullptr;
  decltype(&::cuMemSetAccess) MemSetAccess = nullptr;
};

// Makes the primary context of `device` current on this thread for the
// scope, as the CUDA runtime does for cudaMalloc: a thread with no current
// context gets the primary context set (and keeps it, like the runtime's lazy
// initialization); a thread whose current context belongs to another device
// gets ours pushed and popped again, so the caller's CUDA state is unchanged.
// Primary contexts are retained once per device and never released (the
// runtime keeps them for the life of the process too).
//
// With `leave_none_current`, a thread with no current context gets ours
// pushed and popped as well, and ends with none: for calls that name a
// device without being a request to use it from this thread (a free on a
// stream of the memory's device, from any thread).
class ScopedPrimaryContext {
 public:
  ScopedPrimaryContext(const CudaDriver& driver, int device,
                       bool leave_none_current = false);
  ~ScopedPrimaryContext();
  ScopedPrimaryContext(const ScopedPrimaryContext&) = delete;
  ScopedPrimaryContext& operator=(const ScopedPrimaryContext&) = delete;

  // OK when the context is current; else which call failed.
  const absl::Status& status() const { return status_; }

 private:
  const CudaDriver& driver_;
  bool pushed_ = false;
  absl::Status status_;
};

// Number of devices the driver reports; the error when there is no driver,
// it fails, or there are none (Unavailable).
absl::StatusOr<int> CudaDriverDeviceCount();

}  // namespace internal
}  // namespace bfc

#endif  // BFC_CORE_INTERNAL_CUDA_DRIVER_H_
