// File: tests/fake_cuda/fake_cuda.cc
// -----------------------------------------------------------------------------
//
// A fake CUDA driver: built as libcuda.so.1 (CMake target bfc_fake_cuda) and
// loaded by bfc through BFC_CUDA_DRIVER_LIBRARY, so every CUDA path of the
// library runs in CI without a GPU. It implements, on host memory, the driver
// functions bfc uses, and the rules the real driver enforces on them:
//
//   * nothing but cuGetProcAddress / cuDriverGetVersion / cuGetError* works
//     before cuInit (CUDA_ERROR_NOT_INITIALIZED); cuInit with no device is
//     CUDA_ERROR_NO_DEVICE; an ordinal past the count
//     CUDA_ERROR_INVALID_DEVICE;
//   * memory calls need a current context (CUDA_ERROR_INVALID_CONTEXT);
//     contexts are per thread (a stack); primary contexts are per device and
//     reference counted; cuCtxSynchronize waits for every stream (streams
//     are not tied to contexts here);
//   * each device has a memory budget: past it CUDA_ERROR_OUT_OF_MEMORY;
//     cuMemGetInfo reports what is left;
//   * device memory is address space only (PROT_NONE: touching it faults, as
//     touching a device pointer from the host would); pinned memory is real;
//     freeing an unknown pointer, twice, or with the wrong call (a device
//     pointer to cuMemFreeHost) is CUDA_ERROR_INVALID_VALUE;
//   * streams and events, with work that stays pending while a test holds
//     the stream (fake_cuda_control.h); cuStreamWaitEvent makes work queued
//     on a stream afterwards depend on the event as recorded at that call
//     (an event recorded on the stream later completes only when the
//     waited-for work has, transitively), as on a device;
//   * events: cuEventCreate checks its flags; cuEventElapsedTime refuses an
//     event made with CU_EVENT_DISABLE_TIMING (CUDA_ERROR_INVALID_HANDLE);
//     a destroyed event is CUDA_ERROR_INVALID_HANDLE to every event call
//     (destroyed events are kept, never reused, so a stale handle is caught);
//   * virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
//     cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), with the
//     rules below; none of it needs a current context;
//   * any call can be made to fail on its Nth use with a chosen error.
//
// VMM. Sizes and addresses are multiples of one granularity (2 MiB, as on
// current GPUs; settable), else CUDA_ERROR_INVALID_VALUE. A reservation is
// PROT_NONE address space outside the memory budget; cuMemAddressFree names it
// exactly (base and size) and refuses one with a page still mapped, which the
// driver leaves undefined but is always a caller's bug. A handle
// (cuMemCreate) is physical memory: it counts against its device's budget
// from creation until it is released AND unmapped everywhere (the driver's
// deferred free), so cuMemGetInfo sees it. cuMemMap maps a whole handle
// (offset 0, size the handle's; the driver can map part of one, the fake
// refuses it) into unmapped address space of one reservation; cuMemSetAccess
// needs a fully mapped range (it may span mappings); cuMemUnmap must not cut
// a mapping (it takes whole mappings, one or several adjacent ones). A
// handle is either unbacked (the default: nothing is touched, the range stays
// PROT_NONE, so a trace of 100 GB replays on a laptop) or backed
// (fake_cuda_set_vmm_backed, FAKE_CUDA_VMM_BACKED=1, decided when it is
// created): a memfd the size of the handle, mapped shared over the range,
// readable and writable as cuMemSetAccess allows, PROT_NONE again once
// unmapped, its bytes kept by the handle for the next cuMemMap of it.
// cuDeviceGetAttribute answers only the VMM attributes.
//
// Not implemented: kernels, copies, memory pools, VMM beyond the above
// (multicast, sharing handles, host locations); cuGetProcAddress reports
// them as not found.
#include <cuda.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "fake_cuda_control.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

constexpr size_t kDefaultDeviceMemory = size_t{8} << 30;
constexpr int kDefaultDriverVersion = 12080;
// The VMM granularity of current GPUs (minimum and recommended alike).
constexpr size_t kDefaultVmmGranularity = size_t{2} << 20;

struct Context {
  int device;
  bool primary;
};

struct Device {
  size_t total = kDefaultDeviceMemory;
  size_t used = 0;
  Context* primary = nullptr;
  int primary_refs = 0;
  // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED; cuMemCreate on a
  // device without it is CUDA_ERROR_NOT_SUPPORTED.
  bool vmm_supported = true;
};

struct Allocation {
  int device;  // -1: pinned host memory
  size_t size;
  size_t mapped;
};

// Physical memory made by cuMemCreate. It lives until released and unmapped
// everywhere (the driver's deferred free): a released handle that is still
// mapped keeps its memory and its place in the budget.
struct VmmHandle {
  int device;
  size_t size;
  int fd = -1;  // backed: the memory (a memfd); -1: unbacked
  bool released = false;
  int maps = 0;  // mappings of it now
};

// One cuMemMap: a whole handle at the address it is keyed by.
struct VmmMapping {
  size_t size;
  CUmemGenericAllocationHandle handle;
  int device;   // the handle's, for the per-device counts
  bool backed;  // the handle's memfd is mapped there
  // cuMemSetAccess's flags by device (none: PROT_NONE). Kept per mapping: a
  // cuMemSetAccess on part of one sets what cuMemGetAccess reports for all of
  // it (the host protection of backed memory follows the exact range).
  std::map<int, CUmemAccess_flags> access;
};

struct Stream;

// What one cuEventRecord captured: the stream's own work so far, and every
// event state the stream had been made to wait for.
struct EventState {
  Stream* stream = nullptr;
  bool pending = false;     // recorded while the stream was held
  uint64_t release_at = 0;  // own work done once stream->releases exceeds it
  std::vector<std::shared_ptr<EventState>> waits;
};

struct Stream {
  // The device of the context that created it; for a default stream, the
  // device whose (primary) context it belongs to.
  int device = -1;
  bool held = false;
  uint64_t releases = 0;  // times the hold was released
  // Events (as recorded when waited for) later work here depends on.
  std::vector<std::shared_ptr<EventState>> waits;
};

struct Event {
  int device = -1;  // of the context that created it
  unsigned flags = 0;
  std::shared_ptr<EventState> state;  // nullptr: never recorded
};

bool Complete(const EventState& e) {
  if (e.pending && e.stream->releases <= e.release_at) return false;
  for (const auto& w : e.waits) {
    if (!Complete(*w)) return false;
  }
  return true;
}

// Whether all work queued on `st` so far has completed.
bool StreamIdle(Stream* st) {
  if (st->held) return false;
  for (const auto& w : st->waits) {
    if (!Complete(*w)) return false;
  }
  return true;
}

// Drops waits that completed (they can never hold anything up again).
void PruneWaits(Stream* st) {
  std::vector<std::shared_ptr<EventState>> left;
  for (auto& w : st->waits) {
    if (!Complete(*w)) left.push_back(std::move(w));
  }
  st->waits.swap(left);
}

struct Failure {
  int countdown;
  CUresult error;
};

struct State {
  std::mutex mu;
  std::condition_variable released;
  // (device, peer) pairs where `device` cannot reach `peer`'s memory
  // (cuDeviceCanAccessPeer answers 0; cuMemSetAccess refuses the grant).
  std::set<std::pair<int, int>> no_peer_access;
  bool initialized = false;
  CUresult init_error = CUDA_SUCCESS;
  int driver_version = kDefaultDriverVersion;
  std::vector<Device> devices = std::vector<Device>(1);
  std::map<uintptr_t, Allocation> allocations;
  std::map<std::string, std::vector<Failure>> failures;
  std::map<std::string, long> calls;
  // Each device's legacy default stream (its primary context's: the fake
  // makes no other contexts), which the null and legacy handles name, and
  // each thread's per-thread default stream on each device. Made on first
  // use and never erased, so events recorded on one keep a valid stream
  // through fake_cuda_reset (a thread id the system reuses names the old
  // thread's stream).
  std::map<int, Stream> default_streams;
  std::map<std::pair<int, std::thread::id>, Stream> per_thread_streams;
  std::vector<Stream*> streams;
  // Destroyed (or reset) streams: kept, never reused, so a stale handle stays
  // detectable and events recorded on them stay valid (and nothing leaks).
  std::vector<Stream*> retired;
  std::vector<Context*> contexts;  // every context ever made, never freed
  // Events survive fake_cuda_reset, as memory does: a pool's events stay
  // usable across tests. Destroyed ones move to `destroyed_events` instead of
  // being freed, so their address is never handed out again.
  std::set<Event*> events;
  std::vector<std::unique_ptr<Event>> destroyed_events;
  // VMM (forgotten by fake_cuda_reset, as allocations are).
  size_t vmm_granularity = kDefaultVmmGranularity;
  bool vmm_backed = false;  // handles created now get host memory
  std::map<uintptr_t, size_t> reservations;  // base -> size
  std::map<CUmemGenericAllocationHandle, VmmHandle> handles;
  std::map<uintptr_t, VmmMapping> mappings;  // start -> mapping
  // Never reset: a stale handle from before a reset is never valid again.
  CUmemGenericAllocationHandle next_handle = 1;
};

// A granularity mappings can use: a power of two, at least a host page (the
// backed mode maps at that granularity).
bool ValidGranularity(size_t bytes) {
  const long page = sysconf(_SC_PAGESIZE);
  return bytes >= 4096 && (bytes & (bytes - 1)) == 0 &&
         (page <= 0 || bytes >= static_cast<size_t>(page));
}

State& S() {
  static State* state = [] {
    auto* s = new State;
    if (const char* v = getenv("FAKE_CUDA_DEVICE_COUNT")) {
      s->devices.assign(static_cast<size_t>(atoi(v)), Device());
    }
    if (const char* v = getenv("FAKE_CUDA_DEVICE_MEMORY")) {
      for (Device& d : s->devices) d.total = strtoull(v, nullptr, 10);
    }
    if (const char* v = getenv("FAKE_CUDA_DRIVER_VERSION")) {
      s->driver_version = atoi(v);
    }
    if (const char* v = getenv("FAKE_CUDA_INIT_ERROR")) {
      s->init_error = static_cast<CUresult>(atoi(v));
    }
    if (const char* v = getenv("FAKE_CUDA_VMM_GRANULARITY")) {
      const size_t g = strtoull(v, nullptr, 10);
      if (ValidGranularity(g)) s->vmm_granularity = g;
    }
    if (const char* v = getenv("FAKE_CUDA_VMM_BACKED")) {
      s->vmm_backed = atoi(v) != 0;
    }
    return s;
  }();
  return *state;
}

thread_local std::vector<Context*> t_stack;

// Counts the call and returns an injected failure, if one is due.
CUresult Enter(State& s, const char* name) {
  ++s.calls[name];
  auto it = s.failures.find(name);
  if (it == s.failures.end()) return CUDA_SUCCESS;
  for (size_t i = 0; i < it->second.size(); ++i) {
    if (--it->second[i].countdown == 0) {
      const CUresult error = it->second[i].error;
      it->second.erase(it->second.begin() + static_cast<long>(i));
      return error;
    }
  }
  return CUDA_SUCCESS;
}

Context* Current();

// The legacy default stream of `device`.
Stream* DefaultStream(State& s, int device) {
  auto [it, made] = s.default_streams.try_emplace(device);
  if (made) it->second.device = device;
  return &it->second;
}

// The calling thread's per-thread default stream on `device`.
Stream* PerThreadStream(State& s, int device) {
  auto [it, made] = s.per_thread_streams.try_emplace(
      std::make_pair(device, std::this_thread::get_id()));
  if (made) it->second.device = device;
  return &it->second;
}

// By address only: `stream` may be any value a caller passed.
bool IsDefaultStream(State& s, const Stream* stream) {
  for (const auto& [device, st] : s.default_streams) {
    if (&st == stream) return true;
  }
  for (const auto& [key, st] : s.per_thread_streams) {
    if (&st == stream) return true;
  }
  return false;
}

Stream* ToStream(State& s, CUstream stream) {
  // 0 and CU_STREAM_LEGACY name the current context's legacy default
  // stream, CU_STREAM_PER_THREAD the calling thread's own default stream in
  // it. The driver entry points refuse them without a current context
  // (NeedsCurrentContext); the fake_cuda_* controls then take device 0's.
  // Not modelled: the legacy stream's implicit ordering with the other
  // blocking streams.
  const uintptr_t v = reinterpret_cast<uintptr_t>(stream);
  const int device = Current() != nullptr ? Current()->device : 0;
  if (v == reinterpret_cast<uintptr_t>(CU_STREAM_PER_THREAD)) {
    return PerThreadStream(s, device);
  }
  if (v <= 2) return DefaultStream(s, device);
  return reinterpret_cast<Stream*>(stream);
}

bool KnownStream(State& s, Stream* stream) {
  if (IsDefaultStream(s, stream)) return true;
  for (Stream* x : s.streams) {
    if (x == stream) return true;
  }
  return false;
}

// The live event behind `event`, or nullptr for null, unknown or destroyed.
Event* ToEvent(State& s, CUevent event) {
  auto* e = reinterpret_cast<Event*>(event);
  return s.events.count(e) != 0 ? e : nullptr;
}

Context* Current() { return t_stack.empty() ? nullptr : t_stack.back(); }

// The null, legacy and per-thread handles name a stream of the calling
// thread's current context: without one the driver refuses them
// (CUDA_ERROR_INVALID_CONTEXT, among cuStreamSynchronize's return codes).
bool NeedsCurrentContext(CUstream stream) {
  return reinterpret_cast<uintptr_t>(stream) <= 2 && Current() == nullptr;
}

#define FAKE_ENTER(name, needs_init)                                \
  State& s = S();                                                   \
  std::unique_lock<std::mutex> lock(s.mu);                          \
  if (CUresult injected = Enter(s, name); injected != CUDA_SUCCESS) \
    return injected;                                                \
  if ((needs_init) && !s.initialized) return CUDA_ERROR_NOT_INITIALIZED

}  // namespace

// --- initialization and devices ---------------------------------------------

FAKE_EXPORT CUresult cuInit(unsigned int flags) {
  FAKE_ENTER("cuInit", false);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (s.init_error != CUDA_SUCCESS) return s.init_error;
  if (s.devices.empty()) return CUDA_ERROR_NO_DEVICE;
  s.initialized = true;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDriverGetVersion(int* version) {
  FAKE_ENTER("cuDriverGetVersion", false);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = s.driver_version;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGetCount(int* count) {
  FAKE_ENTER("cuDeviceGetCount", true);
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(s.devices.size());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  FAKE_ENTER("cuDeviceGet", true);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ordinal < 0 || static_cast<size_t>(ordinal) >= s.devices.size()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  *device = ordinal;
  return CUDA_SUCCESS;
}

// Only what bfc asks: whether the device has VMM (and, for completeness of
// cuMemCreate's flags, GPUDirect RDMA with VMM, which no fake device has).
// Any other attribute is CUDA_ERROR_INVALID_VALUE, a limitation of the fake.
FAKE_EXPORT CUresult cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib,
                                          CUdevice dev) {
  FAKE_ENTER("cuDeviceGetAttribute", true);
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || static_cast<size_t>(dev) >= s.devices.size()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *pi = s.devices[static_cast<size_t>(dev)].vmm_supported ? 1 : 0;
      return CUDA_SUCCESS;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
      *pi = 0;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Every pair of distinct devices can reach each other's memory unless
// fake_cuda_set_peer_access said otherwise.
FAKE_EXPORT CUresult cuDeviceCanAccessPeer(int* can_access, CUdevice dev,
                                           CUdevice peer) {
  FAKE_ENTER("cuDeviceCanAccessPeer", true);
  if (can_access == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto valid = [&](CUdevice d) {
    return d >= 0 && static_cast<size_t>(d) < s.devices.size();
  };
  if (!valid(dev) || !valid(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can_access = dev != peer && s.no_peer_access.count({dev, peer}) == 0;
  return CUDA_SUCCESS;
}

// --- contexts ----------------------------------------------------------------

FAKE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain", true);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (dev < 0 || static_cast<size_t>(dev) >= s.devices.size()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  Device& d = s.devices[static_cast<size_t>(dev)];
  if (d.primary == nullptr) {
    d.primary = new Context{dev, true};
    s.contexts.push_back(d.primary);
  }
  ++d.primary_refs;
  *ctx = reinterpret_cast<CUcontext>(d.primary);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease", true);
  if (dev < 0 || static_cast<size_t>(dev) >= s.devices.size()) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  Device& d = s.devices[static_cast<size_t>(dev)];
  if (d.primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --d.primary_refs;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetCurrent(CUcontext* ctx) {
  FAKE_ENTER("cuCtxGetCurrent", true);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = reinterpret_cast<CUcontext>(Current());
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  FAKE_ENTER("cuCtxSetCurrent", true);
  // Replaces the top of the stack (or pushes onto an empty one); nullptr
  // pops it.
  if (ctx == nullptr) {
    if (!t_stack.empty()) t_stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (t_stack.empty()) {
    t_stack.push_back(reinterpret_cast<Context*>(ctx));
  } else {
    t_stack.back() = reinterpret_cast<Context*>(ctx);
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  FAKE_ENTER("cuCtxPushCurrent", true);
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  t_stack.push_back(reinterpret_cast<Context*>(ctx));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* ctx) {
  FAKE_ENTER("cuCtxPopCurrent", true);
  if (t_stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx != nullptr) *ctx = reinterpret_cast<CUcontext>(t_stack.back());
  t_stack.pop_back();
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuCtxGetDevice(CUdevice* device) {
  FAKE_ENTER("cuCtxGetDevice", true);
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = Current()->device;
  return CUDA_SUCCESS;
}

// Waits for all work queued so far on the current context's streams, its
// default stream included, as the driver does (another device's kernels are
// not waited for).
FAKE_EXPORT CUresult cuCtxSynchronize(void) {
  FAKE_ENTER("cuCtxSynchronize", true);
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const int device = Current()->device;
  s.released.wait(lock, [&] {
    if (!StreamIdle(DefaultStream(s, device))) return false;
    for (auto& [key, st] : s.per_thread_streams) {
      if (key.first == device && !StreamIdle(&st)) return false;
    }
    for (Stream* st : s.streams) {
      if (st->device == device && !StreamIdle(st)) return false;
    }
    return true;
  });
  return CUDA_SUCCESS;
}

// --- memory
// -------------------------------------------------------------------

FAKE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytes) {
  FAKE_ENTER("cuMemAlloc", true);
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  Device& d = s.devices[static_cast<size_t>(ctx->device)];
  if (bytes > d.total - d.used) return CUDA_ERROR_OUT_OF_MEMORY;
  // Address space only: device memory is not host accessible.
  void* p = mmap(nullptr, bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  d.used += bytes;
  s.allocations[reinterpret_cast<uintptr_t>(p)] =
      Allocation{ctx->device, bytes, bytes};
  *dptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  FAKE_ENTER("cuMemFree", true);
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = s.allocations.find(static_cast<uintptr_t>(dptr));
  if (it == s.allocations.end() || it->second.device < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.devices[static_cast<size_t>(it->second.device)].used -= it->second.size;
  munmap(reinterpret_cast<void*>(it->first), it->second.mapped);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytes,
                                    unsigned int flags) {
  FAKE_ENTER("cuMemHostAlloc", true);
  if (pp == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE |
                                      CU_MEMHOSTALLOC_DEVICEMAP |
                                      CU_MEMHOSTALLOC_WRITECOMBINED)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  s.allocations[reinterpret_cast<uintptr_t>(p)] = Allocation{-1, bytes, bytes};
  *pp = p;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemFreeHost(void* p) {
  FAKE_ENTER("cuMemFreeHost", true);
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.allocations.end() || it->second.device >= 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(p, it->second.mapped);
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  FAKE_ENTER("cuMemGetInfo", true);
  if (free_bytes == nullptr || total == nullptr)
    return CUDA_ERROR_INVALID_VALUE;
  Context* ctx = Current();
  if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const Device& d = s.devices[static_cast<size_t>(ctx->device)];
  *free_bytes = d.total - d.used;
  *total = d.total;
  return CUDA_SUCCESS;
}

// --- virtual memory management
// ----------------------------------------------------------

namespace {

constexpr int kReserveFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

bool ValidDevice(const State& s, int device) {
  return device >= 0 && static_cast<size_t>(device) < s.devices.size();
}

// What cuMemCreate and cuMemGetAllocationGranularity accept: pinned device
// memory, exportable to nothing or to a file descriptor.
CUresult CheckProp(const State& s, const CUmemAllocationProp* prop) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!ValidDevice(s, prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

// [ptr, ptr + size) is non-empty and starts and ends on the granularity.
bool GranularRange(const State& s, uintptr_t ptr, size_t size) {
  return size != 0 && ptr % s.vmm_granularity == 0 &&
         size % s.vmm_granularity == 0 && ptr + size > ptr;
}

// Whether one reservation holds all of [ptr, ptr + size).
bool InOneReservation(const State& s, uintptr_t ptr, size_t size) {
  auto it = s.reservations.upper_bound(ptr);
  if (it == s.reservations.begin()) return false;
  --it;
  const uintptr_t offset = ptr - it->first;
  return offset < it->second && size <= it->second - offset;
}

// Whether any byte of [ptr, ptr + size) is mapped.
bool AnyMapped(const State& s, uintptr_t ptr, size_t size) {
  auto it = s.mappings.lower_bound(ptr);
  if (it != s.mappings.end() && it->first - ptr < size) return true;
  if (it == s.mappings.begin()) return false;
  --it;
  return it->first + it->second.size > ptr;
}

using MappingIt = std::map<uintptr_t, VmmMapping>::iterator;

// The mappings that cover [ptr, ptr + size) with no gap, in address order;
// empty when a byte of it is not mapped. `whole`: they must also start at
// ptr and end at ptr + size (no mapping is cut).
std::vector<MappingIt> Cover(State& s, uintptr_t ptr, size_t size, bool whole) {
  std::vector<MappingIt> cover;
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return cover;
  --it;
  if (it->first + it->second.size <= ptr || (whole && it->first != ptr)) {
    return cover;
  }
  const uintptr_t end = ptr + size;
  uintptr_t next = it->first;  // where the next mapping has to start
  while (next < end) {
    if (it == s.mappings.end() || it->first != next) return {};
    cover.push_back(it);
    next = it->first + it->second.size;
    ++it;
  }
  if (whole && next != end) return {};
  return cover;
}

// The host protection a backed mapping gets: the most any device may do.
int HostProt(const VmmMapping& m) {
  int prot = PROT_NONE;
  for (const auto& [device, flags] : m.access) {
    if (flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      prot = PROT_READ | PROT_WRITE;
    } else if (flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) {
      prot = PROT_READ;
    }
  }
  return prot;
}

// Puts reserved (PROT_NONE, unbacked) address space back over a range that a
// backed handle was mapped on, so a touch after cuMemUnmap faults.
void Unback(uintptr_t ptr, size_t size) {
  mmap(reinterpret_cast<void*>(ptr), size, PROT_NONE, kReserveFlags | MAP_FIXED,
       -1, 0);
}

// Gives a released, unmapped handle's memory back to its device's budget.
void FreeHandle(State& s,
                std::map<CUmemGenericAllocationHandle, VmmHandle>::iterator h) {
  if (ValidDevice(s, h->second.device)) {
    Device& d = s.devices[static_cast<size_t>(h->second.device)];
    d.used -= std::min(d.used, h->second.size);
  }
  if (h->second.fd >= 0) close(h->second.fd);
  s.handles.erase(h);
}

}  // namespace

FAKE_EXPORT CUresult cuMemGetAllocationGranularity(
    size_t* granularity, const CUmemAllocationProp* prop,
    CUmemAllocationGranularity_flags option) {
  FAKE_ENTER("cuMemGetAllocationGranularity", true);
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(s, prop); r != CUDA_SUCCESS) return r;
  // Read as its bytes: a caller may pass any integer, and loading one the
  // enum does not name is undefined behaviour (UBSan's -fsanitize=enum).
  std::underlying_type_t<CUmemAllocationGranularity_flags> raw;
  std::memcpy(&raw, &option, sizeof raw);
  if (raw != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
      raw != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *granularity = s.vmm_granularity;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size,
                                         size_t alignment, CUdeviceptr addr,
                                         unsigned long long flags) {
  FAKE_ENTER("cuMemAddressReserve", true);
  if (ptr == nullptr || flags != 0 || !GranularRange(s, 0, size) ||
      (alignment & (alignment - 1)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Mappings start on the granularity, so a reservation does too.
  const size_t align = std::max(alignment, s.vmm_granularity);
  void* p = MAP_FAILED;
  if (addr != 0 && addr % align == 0) {
    // Without MAP_FIXED the address is a hint the kernel takes where free;
    // elsewhere it is ignored, as the driver may.
    p = mmap(reinterpret_cast<void*>(static_cast<uintptr_t>(addr)), size,
             PROT_NONE, kReserveFlags, -1, 0);
    if (p != MAP_FAILED && reinterpret_cast<uintptr_t>(p) != addr) {
      munmap(p, size);
      p = MAP_FAILED;
    }
  }
  if (p == MAP_FAILED) {
    // mmap aligns to a page only: reserve `align` more, trim both ends.
    if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
    const size_t span = size + align;
    void* raw = mmap(nullptr, span, PROT_NONE, kReserveFlags, -1, 0);
    if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t base = (start + align - 1) & ~(uintptr_t{align} - 1);
    if (base > start) munmap(raw, base - start);
    if (start + span > base + size) {
      munmap(reinterpret_cast<void*>(base + size), start + span - base - size);
    }
    p = reinterpret_cast<void*>(base);
  }
  s.reservations[reinterpret_cast<uintptr_t>(p)] = size;
  *ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER("cuMemAddressFree", true);
  auto it = s.reservations.find(static_cast<uintptr_t>(ptr));
  if (it == s.reservations.end() || it->second != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The driver leaves freeing mapped space undefined; it is a caller's bug
  // (the mapping would outlive its addresses), so the fake refuses it.
  if (AnyMapped(s, it->first, it->second)) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(it->first), it->second);
  s.reservations.erase(it);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle,
                                 size_t size, const CUmemAllocationProp* prop,
                                 unsigned long long flags) {
  FAKE_ENTER("cuMemCreate", true);
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckProp(s, prop); r != CUDA_SUCCESS) return r;
  Device& d = s.devices[static_cast<size_t>(prop->location.id)];
  if (!d.vmm_supported) return CUDA_ERROR_NOT_SUPPORTED;
  if (!GranularRange(s, 0, size)) return CUDA_ERROR_INVALID_VALUE;
  if (d.used > d.total || size > d.total - d.used) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  int fd = -1;
  if (s.vmm_backed) {
    // Sparse until written: a backed handle costs what the test touches.
    fd = memfd_create("fake_cuda_vmm", MFD_CLOEXEC);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  d.used += size;
  const CUmemGenericAllocationHandle h = s.next_handle++;
  VmmHandle v{prop->location.id, size};
  v.fd = fd;
  s.handles.emplace(h, v);
  *handle = h;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  FAKE_ENTER("cuMemRelease", true);
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.released) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  h->second.released = true;
  if (h->second.maps == 0) FreeHandle(s, h);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                              CUmemGenericAllocationHandle handle,
                              unsigned long long flags) {
  FAKE_ENTER("cuMemMap", true);
  const uintptr_t p = static_cast<uintptr_t>(ptr);
  if (offset != 0 || flags != 0 || !GranularRange(s, p, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto h = s.handles.find(handle);
  if (h == s.handles.end() || h->second.released || h->second.size != size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!InOneReservation(s, p, size) || AnyMapped(s, p, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool backed = h->second.fd >= 0;
  if (backed) {
    // No access until cuMemSetAccess, as on a device.
    void* m = mmap(reinterpret_cast<void*>(p), size, PROT_NONE,
                   MAP_SHARED | MAP_FIXED, h->second.fd, 0);
    if (m == MAP_FAILED) {
      Unback(p, size);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
  }
  s.mappings.emplace(p, VmmMapping{size, handle, h->second.device, backed, {}});
  ++h->second.maps;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size,
                                    const CUmemAccessDesc* desc, size_t count) {
  FAKE_ENTER("cuMemSetAccess", true);
  const uintptr_t p = static_cast<uintptr_t>(ptr);
  if (desc == nullptr || count == 0 || !GranularRange(s, p, size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& a = desc[i];
    if (a.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        !ValidDevice(s, a.location.id) ||
        (a.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
         a.flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         a.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  const std::vector<MappingIt> cover = Cover(s, p, size, false);
  if (cover.empty()) return CUDA_ERROR_INVALID_VALUE;
  // A device granted access to another's memory must be able to reach it.
  for (MappingIt it : cover) {
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
          s.no_peer_access.count({desc[i].location.id, it->second.device})) {
        return CUDA_ERROR_INVALID_DEVICE;
      }
    }
  }
  for (MappingIt it : cover) {
    VmmMapping& m = it->second;
    for (size_t i = 0; i < count; ++i)
      m.access[desc[i].location.id] = desc[i].flags;
    if (!m.backed) continue;
    const uintptr_t from = std::max(p, it->first);
    const uintptr_t to = std::min(p + size, it->first + m.size);
    if (mprotect(reinterpret_cast<void*>(from), to - from, HostProt(m)) != 0) {
      return CUDA_ERROR_UNKNOWN;  // the kernel's map count, say: not a rule
    }
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemGetAccess(unsigned long long* flags,
                                    const CUmemLocation* location,
                                    CUdeviceptr ptr) {
  FAKE_ENTER("cuMemGetAccess", true);
  if (flags == nullptr || location == nullptr ||
      location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
      !ValidDevice(s, location->id)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const std::vector<MappingIt> cover =
      Cover(s, static_cast<uintptr_t>(ptr), 1, false);
  if (cover.empty()) return CUDA_ERROR_INVALID_VALUE;
  const auto& access = cover.front()->second.access;
  auto a = access.find(location->id);
  *flags = a == access.end() ? CU_MEM_ACCESS_FLAGS_PROT_NONE : a->second;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  FAKE_ENTER("cuMemUnmap", true);
  const uintptr_t p = static_cast<uintptr_t>(ptr);
  if (!GranularRange(s, p, size)) return CUDA_ERROR_INVALID_VALUE;
  // Whole mappings only: the driver cannot unmap part of one.
  const std::vector<MappingIt> cover = Cover(s, p, size, true);
  if (cover.empty()) return CUDA_ERROR_INVALID_VALUE;
  for (MappingIt it : cover) {
    if (it->second.backed) Unback(it->first, it->second.size);
    auto h = s.handles.find(it->second.handle);
    if (h != s.handles.end() && --h->second.maps == 0 && h->second.released) {
      FreeHandle(s, h);
    }
    s.mappings.erase(it);
  }
  return CUDA_SUCCESS;
}

// --- streams and events
// -------------------------------------------------------

FAKE_EXPORT CUresult cuStreamCreate(CUstream* stream, unsigned int flags) {
  FAKE_ENTER("cuStreamCreate", true);
  if (stream == nullptr || flags > CU_STREAM_NON_BLOCKING) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* st = new Stream;
  st->device = Current()->device;
  s.streams.push_back(st);
  *stream = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamDestroy_v2(CUstream stream) {
  FAKE_ENTER("cuStreamDestroy", true);
  Stream* st = ToStream(s, stream);
  if (IsDefaultStream(s, st) || !KnownStream(s, st)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // Kept allocated (never reused), so a stale handle stays detectable.
  for (size_t i = 0; i < s.streams.size(); ++i) {
    if (s.streams[i] == st)
      s.streams.erase(s.streams.begin() + static_cast<long>(i));
  }
  s.retired.push_back(st);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamQuery(CUstream stream) {
  FAKE_ENTER("cuStreamQuery", true);
  if (NeedsCurrentContext(stream)) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = ToStream(s, stream);
  if (!KnownStream(s, st)) return CUDA_ERROR_INVALID_HANDLE;
  return StreamIdle(st) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FAKE_EXPORT CUresult cuStreamSynchronize(CUstream stream) {
  FAKE_ENTER("cuStreamSynchronize", true);
  if (NeedsCurrentContext(stream)) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = ToStream(s, stream);
  if (!KnownStream(s, st)) return CUDA_ERROR_INVALID_HANDLE;
  s.released.wait(lock, [&] { return StreamIdle(st); });
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventCreate(CUevent* event, unsigned int flags) {
  FAKE_ENTER("cuEventCreate", true);
  constexpr unsigned kKnown =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (event == nullptr || (flags & ~kKnown) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // An interprocess event cannot carry timing data.
  if ((flags & CU_EVENT_INTERPROCESS) != 0 &&
      (flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (Current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* e = new Event;
  e->device = Current()->device;
  e->flags = flags;
  s.events.insert(e);
  *event = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventRecord(CUevent event, CUstream stream) {
  FAKE_ENTER("cuEventRecord", true);
  Event* e = ToEvent(s, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (NeedsCurrentContext(stream)) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = ToStream(s, stream);
  if (!KnownStream(s, st)) return CUDA_ERROR_INVALID_HANDLE;
  // "hEvent and hStream must be from the same context otherwise
  // CUDA_ERROR_INVALID_HANDLE is returned" (cuda.h); the default stream is
  // the current context's.
  if (st->device != e->device) return CUDA_ERROR_INVALID_HANDLE;
  PruneWaits(st);
  auto state = std::make_shared<EventState>();
  state->stream = st;
  state->pending = st->held;
  state->release_at = st->releases;
  state->waits = st->waits;
  e->state = std::move(state);
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventQuery(CUevent event) {
  FAKE_ENTER("cuEventQuery", true);
  Event* e = ToEvent(s, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e->state != nullptr && !Complete(*e->state)) return CUDA_ERROR_NOT_READY;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventSynchronize(CUevent event) {
  FAKE_ENTER("cuEventSynchronize", true);
  Event* e = ToEvent(s, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // The state as recorded now: recording the event again while this thread
  // waits does not move what it waits for (as on a device).
  std::shared_ptr<EventState> state = e->state;
  s.released.wait(lock, [&] { return state == nullptr || Complete(*state); });
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuStreamWaitEvent(CUstream stream, CUevent event,
                                       unsigned int flags) {
  FAKE_ENTER("cuStreamWaitEvent", true);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Event* e = ToEvent(s, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (NeedsCurrentContext(stream)) return CUDA_ERROR_INVALID_CONTEXT;
  Stream* st = ToStream(s, stream);
  if (!KnownStream(s, st)) return CUDA_ERROR_INVALID_HANDLE;
  // An event never recorded, or complete, holds nothing up.
  if (e->state != nullptr && !Complete(*e->state)) {
    PruneWaits(st);
    st->waits.push_back(e->state);
  }
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuEventDestroy_v2(CUevent event) {
  FAKE_ENTER("cuEventDestroy", true);
  Event* e = ToEvent(s, event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  s.events.erase(e);
  e->state = nullptr;  // what it waited for can go
  s.destroyed_events.emplace_back(e);
  return CUDA_SUCCESS;
}

// cuda.h maps cuEventElapsedTime to this name. The fake keeps no clock: two
// complete timed events are 0 ms apart.
FAKE_EXPORT CUresult cuEventElapsedTime_v2(float* ms, CUevent start,
                                           CUevent end) {
  FAKE_ENTER("cuEventElapsedTime", true);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Event* a = ToEvent(s, start);
  Event* b = ToEvent(s, end);
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // The real driver's rule: timing disabled on either, or either never
  // recorded, is an invalid handle here.
  if (((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) != 0 ||
      a->state == nullptr || b->state == nullptr) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (!Complete(*a->state) || !Complete(*b->state)) {
    return CUDA_ERROR_NOT_READY;
  }
  *ms = 0.0f;
  return CUDA_SUCCESS;
}

// --- errors
// ---------------------------------------------------------------------

namespace {

struct ErrorText {
  CUresult code;
  const char* name;
  const char* text;
};

// The names and strings the real driver gives for the errors the fake uses.
constexpr ErrorText kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED",
     "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED",
     "driver shutting down"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE",
     "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE",
     "invalid device ordinal"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT",
     "invalid device context"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE",
     "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED",
     "operation not supported"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED",
     "unspecified launch failure"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* FindError(CUresult code) {
  for (const ErrorText& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

}  // namespace

FAKE_EXPORT CUresult cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  if (e == nullptr) {
    *name = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *name = e->name;
  return CUDA_SUCCESS;
}

FAKE_EXPORT CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = FindError(error);
  if (e == nullptr) {
    *text = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *text = e->text;
  return CUDA_SUCCESS;
}

// --- cuGetProcAddress
// -------------------------------------------------------------

namespace {

struct Proc {
  const char* name;
  void* fn;
};

#define FAKE_PROC(name, fn) \
  { name, reinterpret_cast<void*>(&fn) }
const Proc kProcs[] = {
    FAKE_PROC("cuInit", cuInit),
    FAKE_PROC("cuDriverGetVersion", cuDriverGetVersion),
    FAKE_PROC("cuDeviceGetCount", cuDeviceGetCount),
    FAKE_PROC("cuDeviceGet", cuDeviceGet),
    FAKE_PROC("cuDeviceGetAttribute", cuDeviceGetAttribute),
    FAKE_PROC("cuDeviceCanAccessPeer", cuDeviceCanAccessPeer),
    FAKE_PROC("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain),
    FAKE_PROC("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2),
    FAKE_PROC("cuCtxGetCurrent", cuCtxGetCurrent),
    FAKE_PROC("cuCtxSetCurrent", cuCtxSetCurrent),
    FAKE_PROC("cuCtxPushCurrent", cuCtxPushCurrent_v2),
    FAKE_PROC("cuCtxPopCurrent", cuCtxPopCurrent_v2),
    FAKE_PROC("cuCtxGetDevice", cuCtxGetDevice),
    FAKE_PROC("cuCtxSynchronize", cuCtxSynchronize),
    FAKE_PROC("cuMemAlloc", cuMemAlloc_v2),
    FAKE_PROC("cuMemFree", cuMemFree_v2),
    FAKE_PROC("cuMemHostAlloc", cuMemHostAlloc),
    FAKE_PROC("cuMemFreeHost", cuMemFreeHost),
    FAKE_PROC("cuMemGetInfo", cuMemGetInfo_v2),
    FAKE_PROC("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity),
    FAKE_PROC("cuMemAddressReserve", cuMemAddressReserve),
    FAKE_PROC("cuMemAddressFree", cuMemAddressFree),
    FAKE_PROC("cuMemCreate", cuMemCreate),
    FAKE_PROC("cuMemRelease", cuMemRelease),
    FAKE_PROC("cuMemMap", cuMemMap),
    FAKE_PROC("cuMemSetAccess", cuMemSetAccess),
    FAKE_PROC("cuMemGetAccess", cuMemGetAccess),
    FAKE_PROC("cuMemUnmap", cuMemUnmap),
    FAKE_PROC("cuStreamCreate", cuStreamCreate),
    FAKE_PROC("cuStreamDestroy", cuStreamDestroy_v2),
    FAKE_PROC("cuStreamQuery", cuStreamQuery),
    FAKE_PROC("cuStreamSynchronize", cuStreamSynchronize),
    FAKE_PROC("cuEventCreate", cuEventCreate),
    FAKE_PROC("cuEventRecord", cuEventRecord),
    FAKE_PROC("cuEventQuery", cuEventQuery),
    FAKE_PROC("cuEventSynchronize", cuEventSynchronize),
    FAKE_PROC("cuEventDestroy", cuEventDestroy_v2),
    FAKE_PROC("cuStreamWaitEvent", cuStreamWaitEvent),
    FAKE_PROC("cuEventElapsedTime", cuEventElapsedTime_v2),
    FAKE_PROC("cuGetErrorName", cuGetErrorName),
    FAKE_PROC("cuGetErrorString", cuGetErrorString),
};
#undef FAKE_PROC

}  // namespace

FAKE_EXPORT CUresult
cuGetProcAddress_v2(const char* symbol, void** pfn, int cuda_version,
                    cuuint64_t flags, CUdriverProcAddressQueryResult* found) {
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.calls["cuGetProcAddress"];
  }
  if (found != nullptr) *found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (symbol == nullptr || pfn == nullptr || flags > 2) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pfn = nullptr;
  int driver_version;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    driver_version = s.driver_version;
  }
  for (const Proc& p : kProcs) {
    if (std::strcmp(p.name, symbol) != 0) continue;
    // The real driver serves the newest version of a function that is not
    // newer than both the request and itself; every function here exists
    // from 12.0 on, so an older driver or request gets nothing.
    if (driver_version < 12000 || cuda_version < 12000) {
      if (found != nullptr) *found = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_ERROR_NOT_FOUND;
    }
    *pfn = p.fn;
    if (found != nullptr) *found = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_NOT_FOUND;
}

// --- control
// ------------------------------------------------------------------------

FAKE_EXPORT int fake_cuda_is_fake(void) { return 1; }

FAKE_EXPORT void fake_cuda_reset(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.driver_version = kDefaultDriverVersion;
  s.devices.assign(1, Device());
  s.allocations.clear();
  s.failures.clear();
  s.calls.clear();
  s.retired.insert(s.retired.end(), s.streams.begin(), s.streams.end());
  s.streams.clear();
  for (auto& [device, st] : s.default_streams) {
    st = Stream();
    st.device = device;
  }
  for (auto& [key, st] : s.per_thread_streams) {
    st = Stream();
    st.device = key.first;
  }
  s.init_error = CUDA_SUCCESS;
  s.no_peer_access.clear();
  // VMM state is forgotten, not unmapped (as allocations are); a backed
  // handle's memory stays where it is mapped, its descriptor is closed.
  s.vmm_granularity = kDefaultVmmGranularity;
  s.vmm_backed = false;
  s.reservations.clear();
  for (auto& [h, v] : s.handles) {
    if (v.fd >= 0) close(v.fd);
  }
  s.handles.clear();
  s.mappings.clear();
  // Stays initialized: bfc initializes the driver once per process.
  t_stack.clear();
  s.released.notify_all();
}

FAKE_EXPORT void fake_cuda_set_device_count(int count) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.devices.resize(count < 0 ? 0 : static_cast<size_t>(count));
}

FAKE_EXPORT void fake_cuda_set_device_memory(int device, size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (device >= 0 && static_cast<size_t>(device) < s.devices.size()) {
    s.devices[static_cast<size_t>(device)].total = bytes;
  }
}

FAKE_EXPORT void fake_cuda_set_driver_version(int version) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.driver_version = version;
}

FAKE_EXPORT void fake_cuda_fail_call(const char* name, int nth, int error) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (name == nullptr || nth <= 0) return;
  s.failures[name].push_back(Failure{nth, static_cast<CUresult>(error)});
}

FAKE_EXPORT void* fake_cuda_stream_of(void* stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return ToStream(s, static_cast<CUstream>(stream));
}

FAKE_EXPORT void fake_cuda_hold_stream(void* stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = ToStream(s, static_cast<CUstream>(stream));
  if (KnownStream(s, st)) st->held = true;
}

FAKE_EXPORT void fake_cuda_release_stream(void* stream) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  Stream* st = ToStream(s, static_cast<CUstream>(stream));
  if (!KnownStream(s, st) || !st->held) return;
  st->held = false;
  ++st->releases;
  s.released.notify_all();
}

FAKE_EXPORT int fake_cuda_live_allocations(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  int n = 0;
  for (const auto& [ptr, a] : s.allocations) n += a.device == device;
  return n;
}

FAKE_EXPORT size_t fake_cuda_bytes_in_use(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t bytes = 0;
  for (const auto& [ptr, a] : s.allocations) {
    if (a.device == device) bytes += a.size;
  }
  return bytes;
}

FAKE_EXPORT long fake_cuda_call_count(const char* name) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.calls.find(name == nullptr ? "" : name);
  return it == s.calls.end() ? 0 : it->second;
}

FAKE_EXPORT int fake_cuda_context_depth(void) {
  return static_cast<int>(t_stack.size());
}

FAKE_EXPORT void fake_cuda_set_vmm_granularity(size_t bytes) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ValidGranularity(bytes)) s.vmm_granularity = bytes;
}

FAKE_EXPORT void fake_cuda_set_vmm_supported(int device, int supported) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (ValidDevice(s, device)) {
    s.devices[static_cast<size_t>(device)].vmm_supported = supported != 0;
  }
}

FAKE_EXPORT void fake_cuda_set_peer_access(int device, int peer, int can) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (can != 0) {
    s.no_peer_access.erase({device, peer});
  } else {
    s.no_peer_access.insert({device, peer});
  }
}

FAKE_EXPORT void fake_cuda_set_vmm_backed(int backed) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.vmm_backed = backed != 0;
}

FAKE_EXPORT size_t fake_cuda_vmm_reserved_bytes(void) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t bytes = 0;
  for (const auto& [base, size] : s.reservations) bytes += size;
  return bytes;
}

FAKE_EXPORT size_t fake_cuda_vmm_mapped_bytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t bytes = 0;
  for (const auto& [start, m] : s.mappings) {
    if (m.device == device) bytes += m.size;
  }
  return bytes;
}

FAKE_EXPORT int fake_cuda_vmm_live_handles(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  int n = 0;
  for (const auto& [h, v] : s.handles) n += v.device == device;
  return n;
}

FAKE_EXPORT size_t fake_cuda_vmm_physical_bytes(int device) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  size_t bytes = 0;
  for (const auto& [h, v] : s.handles) {
    if (v.device == device) bytes += v.size;
  }
  return bytes;
}
