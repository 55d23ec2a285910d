// File: src/core/cuda_driver.cc
// -----------------------------------------------------------------------------
//
// Loads the CUDA driver at run time (see core/internal/cuda_driver.h).
#include "core/internal/cuda_driver.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "bfc/internal/mutex.h"

namespace bfc {
namespace internal {
namespace {

// How to point bfc at a driver, appended to every "no driver" error.
constexpr char kHowToPoint[] =
    "; install the NVIDIA driver, or set BFC_CUDA_DRIVER_LIBRARY to the path "
    "of a libcuda.so.1";

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

// Resolves `name` at kMinDriverVersion into *fn.
template <typename Fn>
absl::Status Resolve(GetProcAddressFn get_proc, const std::string& library,
                     const char* name, Fn* fn) {
  void* pfn = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  const CUresult result = get_proc(name, &pfn, kMinDriverVersion,
                                   CU_GET_PROC_ADDRESS_DEFAULT, &found);
  if (result != CUDA_SUCCESS || pfn == nullptr ||
      found != CU_GET_PROC_ADDRESS_SUCCESS) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver ", library, " has no ", name, " for API version ",
        kMinDriverVersion,
        found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
            ? " (the driver is older than CUDA 12.0)"
            : "",
        " (cuGetProcAddress returned ", static_cast<int>(result), ")"));
  }
  *fn = reinterpret_cast<Fn>(pfn);
  return absl::OkStatus();
}

struct Loaded {
  CudaDriver driver;
  absl::Status status;
};

Loaded Load() {
  Loaded out;
  CudaDriver& d = out.driver;
  const char* env = std::getenv(kCudaDriverLibraryEnv);
  d.library =
      env != nullptr && env[0] != '\0' ? env : kCudaDriverLibraryDefault;
  // RTLD_LOCAL: the driver's symbols stay out of the global namespace, so a
  // process that also loads the real libcuda (through cudart) sees no clash.
  // The handle is never closed: the driver lives as long as the process.
  void* handle = dlopen(d.library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    out.status = absl::UnavailableError(absl::StrCat(
        "no CUDA driver found: dlopen(\"", d.library,
        "\") failed: ", why != nullptr ? why : "unknown error", kHowToPoint));
    return out;
  }
  auto get_proc =
      reinterpret_cast<GetProcAddressFn>(dlsym(handle, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    out.status = absl::UnavailableError(absl::StrCat(
        "the CUDA driver ", d.library,
        " has no cuGetProcAddress_v2: it is older than CUDA 12.0, the oldest "
        "driver bfc supports",
        kHowToPoint));
    return out;
  }
#define BFC_RESOLVE(field, name)                                     \
  if (absl::Status s = Resolve(get_proc, d.library, name, &d.field); \
      !s.ok()) {                                                     \
    out.status = s;                                                  \
    return out;                                                      \
  }
  BFC_RESOLVE(DriverGetVersion, "cuDriverGetVersion");
  BFC_RESOLVE(GetErrorName, "cuGetErrorName");
  BFC_RESOLVE(GetErrorString, "cuGetErrorString");
  BFC_RESOLVE(Init, "cuInit");
  BFC_RESOLVE(DeviceGetCount, "cuDeviceGetCount");
  BFC_RESOLVE(DeviceGet, "cuDeviceGet");
  BFC_RESOLVE(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  BFC_RESOLVE(CtxGetCurrent, "cuCtxGetCurrent");
  BFC_RESOLVE(CtxSetCurrent, "cuCtxSetCurrent");
  BFC_RESOLVE(CtxPushCurrent, "cuCtxPushCurrent");
  BFC_RESOLVE(CtxPopCurrent, "cuCtxPopCurrent");
  BFC_RESOLVE(CtxGetDevice, "cuCtxGetDevice");
  BFC_RESOLVE(MemAlloc, "cuMemAlloc");
  BFC_RESOLVE(MemFree, "cuMemFree");
  BFC_RESOLVE(MemHostAlloc, "cuMemHostAlloc");
  BFC_RESOLVE(MemFreeHost, "cuMemFreeHost");
  BFC_RESOLVE(MemGetInfo, "cuMemGetInfo");
  BFC_RESOLVE(StreamSynchronize, "cuStreamSynchronize");
  BFC_RESOLVE(StreamWaitEvent, "cuStreamWaitEvent");
  BFC_RESOLVE(EventCreate, "cuEventCreate");
  BFC_RESOLVE(EventRecord, "cuEventRecord");
  BFC_RESOLVE(EventQuery, "cuEventQuery");
  BFC_RESOLVE(EventSynchronize, "cuEventSynchronize");
  BFC_RESOLVE(EventDestroy, "cuEventDestroy");
#undef BFC_RESOLVE

  // VMM entry points are optional: without them the rest still works.
  CudaDriver vmm;
  absl::Status vmm_status = absl::OkStatus();
#define BFC_RESOLVE_VMM(field, name)                             \
  if (vmm_status.ok()) {                                         \
    vmm_status = Resolve(get_proc, d.library, name, &vmm.field); \
  }
  BFC_RESOLVE_VMM(DeviceGetAttribute, "cuDeviceGetAttribute");
  BFC_RESOLVE_VMM(DeviceCanAccessPeer, "cuDeviceCanAccessPeer");
  BFC_RESOLVE_VMM(CtxSynchronize, "cuCtxSynchronize");
  BFC_RESOLVE_VMM(MemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  BFC_RESOLVE_VMM(MemAddressReserve, "cuMemAddressReserve");
  BFC_RESOLVE_VMM(MemAddressFree, "cuMemAddressFree");
  BFC_RESOLVE_VMM(MemCreate, "cuMemCreate");
  BFC_RESOLVE_VMM(MemRelease, "cuMemRelease");
  BFC_RESOLVE_VMM(MemMap, "cuMemMap");
  BFC_RESOLVE_VMM(MemUnmap, "cuMemUnmap");
  BFC_RESOLVE_VMM(MemSetAccess, "cuMemSetAccess");
#undef BFC_RESOLVE_VMM
  if (vmm_status.ok()) {
    d.DeviceGetAttribute = vmm.DeviceGetAttribute;
    d.DeviceCanAccessPeer = vmm.DeviceCanAccessPeer;
    d.CtxSynchronize = vmm.CtxSynchronize;
    d.MemGetAllocationGranularity = vmm.MemGetAllocationGranularity;
    d.MemAddressReserve = vmm.MemAddressReserve;
    d.MemAddressFree = vmm.MemAddressFree;
    d.MemCreate = vmm.MemCreate;
    d.MemRelease = vmm.MemRelease;
    d.MemMap = vmm.MemMap;
    d.MemUnmap = vmm.MemUnmap;
    d.MemSetAccess = vmm.MemSetAccess;
  } else {
    d.vmm_status = absl::UnavailableError(absl::StrCat(
        "no CUDA virtual memory management: ", vmm_status.message()));
  }

  CUresult result = d.DriverGetVersion(&d.version);
  if (result != CUDA_SUCCESS) {
    out.status = d.CallError("cuDriverGetVersion", result);
    return out;
  }
  if (d.version < kMinDriverVersion) {
    out.status = absl::UnavailableError(absl::StrCat(
        "the CUDA driver ", d.library, " is version ", d.version / 1000, ".",
        d.version % 1000 / 10, "; bfc needs ", kMinDriverVersion / 1000, ".",
        kMinDriverVersion % 1000 / 10, " or newer"));
    return out;
  }
  result = d.Init(0);
  if (result != CUDA_SUCCESS) {
    // Whatever the reason, the driver cannot be used by this process.
    out.status = absl::UnavailableError(absl::StrCat(
        d.CallError("cuInit", result).message(), " (driver ", d.library, ")"));
    return out;
  }
  return out;
}

// Primary contexts retained so far, by device ordinal.
ABSL_CONST_INIT Mutex g_contexts_mu(absl::kConstInit);
std::vector<CUcontext>* g_contexts ABSL_GUARDED_BY(g_contexts_mu) = nullptr;

// The primary context of `device`, retained on first use.
absl::StatusOr<CUcontext> PrimaryContext(const CudaDriver& d, int device) {
  MutexLock lock(&g_contexts_mu);
  if (g_contexts == nullptr) g_contexts = new std::vector<CUcontext>();
  if (device >= 0 && static_cast<size_t>(device) < g_contexts->size() &&
      (*g_contexts)[device] != nullptr) {
    return (*g_contexts)[device];
  }
  CUdevice dev = 0;
  CUresult result = d.DeviceGet(&dev, device);
  if (result != CUDA_SUCCESS) {
    return d.CallError(absl::StrCat("cuDeviceGet(", device, ")"), result);
  }
  CUcontext ctx = nullptr;
  result = d.DevicePrimaryCtxRetain(&ctx, dev);
  if (result != CUDA_SUCCESS) {
    return d.CallError(
        absl::StrCat("cuDevicePrimaryCtxRetain(device ", device, ")"), result);
  }
  if (static_cast<size_t>(device) >= g_contexts->size()) {
    g_contexts->resize(device + 1, nullptr);
  }
  (*g_contexts)[device] = ctx;
  return ctx;
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  // Loaded once; a failure is kept, so every later call fails at once the
  // same way instead of retrying dlopen.
  static const Loaded* const loaded = new Loaded(Load());
  if (!loaded->status.ok()) return loaded->status;
  return &loaded->driver;
}

std::string CudaDriver::ErrorString(CUresult result) const {
  const char* name = nullptr;
  const char* text = nullptr;
  if (GetErrorName == nullptr || GetErrorName(result, &name) != CUDA_SUCCESS ||
      name == nullptr) {
    return absl::StrCat("CUDA error ", static_cast<int>(result));
  }
  if (GetErrorString == nullptr ||
      GetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) {
    return name;
  }
  return absl::StrCat(name, ": ", text);
}

absl::Status CudaDriver::CallError(const std::string& what,
                                   CUresult result) const {
  const std::string message =
      absl::StrCat(what, " failed: ", ErrorString(result));
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError(message);
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
    case CUDA_ERROR_NOT_SUPPORTED:
    case CUDA_ERROR_INVALID_DEVICE:
      return absl::UnavailableError(message);
    case CUDA_ERROR_INVALID_VALUE:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

ScopedPrimaryContext::ScopedPrimaryContext(const CudaDriver& driver, int device,
                                           bool leave_none_current)
    : driver_(driver) {
  absl::StatusOr<CUcontext> ctx = PrimaryContext(driver, device);
  if (!ctx.ok()) {
    status_ = ctx.status();
    return;
  }
  CUcontext current = nullptr;
  CUresult result = driver.CtxGetCurrent(&current);
  if (result != CUDA_SUCCESS) {
    status_ = driver.CallError("cuCtxGetCurrent", result);
    return;
  }
  if (current == *ctx) return;
  if (current == nullptr && !leave_none_current) {
    // What the runtime does on a thread's first CUDA call: the primary
    // context becomes, and stays, current.
    result = driver.CtxSetCurrent(*ctx);
    if (result != CUDA_SUCCESS) {
      status_ = driver.CallError("cuCtxSetCurrent", result);
    }
    return;
  }
  result = driver.CtxPushCurrent(*ctx);
  if (result != CUDA_SUCCESS) {
    status_ = driver.CallError("cuCtxPushCurrent", result);
    return;
  }
  pushed_ = true;
}

ScopedPrimaryContext::~ScopedPrimaryContext() {
  if (pushed_) {
    CUcontext popped = nullptr;
    (void)driver_.CtxPopCurrent(&popped);
  }
}

absl::StatusOr<int> CudaDriverDeviceCount() {
  absl::StatusOr<const CudaDriver*> driver = CudaDriver::Get();
  if (!driver.ok()) return driver.status();
  int count = 0;
  const CUresult result = (*driver)->DeviceGetCount(&count);
  if (result != CUDA_SUCCESS) {
    return (*driver)->CallError("cuDeviceGetCount", result);
  }
  if (count <= 0) {
    return absl::UnavailableError(absl::StrCat(
        "the CUDA driver ", (*driver)->library, " reports no device"));
  }
  return count;
}

}  // namespace internal
}  // namespace bfc
