// File: tests/fake_cuda/fake_cuda_control.h
// -----------------------------------------------------------------------------
//
// Control calls of the fake CUDA driver (libcuda.so.1 built from
// fake_cuda.cc, CMake target bfc_fake_cuda). Tests reach them through
// fake_cuda_testing.h, which finds them in the driver bfc loaded; against a
// real driver they are absent and the tests that need them skip.
//
// Defaults (and after fake_cuda_reset): 1 device with 8 GiB, driver version
// 12080 (12.8), no injected failures, no held stream; VMM supported, a VMM
// granularity of 2 MiB, unbacked VMM handles. The environment can set them
// before the first CUDA call of a process (for tests of load-time
// behaviour, which bfc caches for the life of the process); fake_cuda_reset
// goes back to the defaults above, not to the environment's values:
//   FAKE_CUDA_DEVICE_COUNT=N  FAKE_CUDA_DEVICE_MEMORY=BYTES
//   FAKE_CUDA_DRIVER_VERSION=V  FAKE_CUDA_INIT_ERROR=CUresult
//   FAKE_CUDA_VMM_GRANULARITY=BYTES  FAKE_CUDA_VMM_BACKED=1
#ifndef BFC_TESTS_FAKE_CUDA_FAKE_CUDA_CONTROL_H_
#define BFC_TESTS_FAKE_CUDA_FAKE_CUDA_CONTROL_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1: this driver is the fake.
int fake_cuda_is_fake(void);
// Back to the defaults. Memory still allocated stays valid but is forgotten
// (counted as nothing); contexts and streams are dropped. So is VMM state:
// reservations, handles and mappings are forgotten, not unmapped (their
// address space stays as it is; a handle is never handed out again).
void fake_cuda_reset(void);
void fake_cuda_set_device_count(int count);
void fake_cuda_set_device_memory(int device, size_t bytes);
void fake_cuda_set_driver_version(int version);
// The `nth` next call (1: the very next) of the driver function `name` (its
// base name, e.g. "cuMemAlloc") returns `error` without doing anything.
void fake_cuda_fail_call(const char* name, int nth, int error);
// Work queued on `stream` (0 or CU_STREAM_LEGACY: the legacy default stream
// of the calling thread's current context's device, or device 0's on a
// thread with none; CU_STREAM_PER_THREAD: the calling thread's own default
// stream there) stays pending until
// released: cuStreamQuery says CUDA_ERROR_NOT_READY, cuStreamSynchronize and
// cuEventSynchronize block, events recorded on it are not complete.
// Events recorded before the hold stay complete; holding a held stream again
// does nothing, and one release ends the hold.
//
// Cross-stream waits follow the device: cuStreamWaitEvent(stream, event, 0)
// makes work queued on `stream` afterwards depend on `event` as recorded at
// that moment (recording the event again later does not move the wait). An
// event recorded on `stream` after the wait completes only when `stream`'s
// own hold allows it and every event it waited for is complete, transitively
// (a waits for b, b waited for c: a's later work waits for c too);
// cuStreamQuery and cuStreamSynchronize see the same. A wait for an event
// never recorded, or already complete, holds nothing up. Its arguments are
// checked as the real driver does: flags other than 0 are
// CUDA_ERROR_INVALID_VALUE, an unknown stream or a null, unknown or
// destroyed event CUDA_ERROR_INVALID_HANDLE.
//
// Events: a destroyed event is CUDA_ERROR_INVALID_HANDLE to every event call
// (its address is never reused); events survive fake_cuda_reset.
// cuEventElapsedTime refuses events made with CU_EVENT_DISABLE_TIMING
// (CUDA_ERROR_INVALID_HANDLE), which shows how an event was created.
void fake_cuda_hold_stream(void* stream);
// The stream a handle names for the calling thread (as above), as a handle
// that names the same stream from any thread: for holding or releasing one
// thread's per-thread stream, or a device's default stream, from another.
void* fake_cuda_stream_of(void* stream);
void fake_cuda_release_stream(void* stream);
// Live allocations and their bytes on `device` (-1: pinned host memory).
int fake_cuda_live_allocations(int device);
size_t fake_cuda_bytes_in_use(int device);
// Calls of the driver function `name` since the last reset (failed ones too).
long fake_cuda_call_count(const char* name);
// Number of contexts on the calling thread's context stack.
int fake_cuda_context_depth(void);

// --- virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree; the rules are
// in fake_cuda.cc's header comment).
//
// The granularity cuMemGetAllocationGranularity reports (minimum and
// recommended) and every VMM size and address must be a multiple of: a power
// of two of at least 4096 bytes (and a host page); other values are ignored.
void fake_cuda_set_vmm_granularity(size_t bytes);
// Whether `device` reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_
// SUPPORTED; without it cuMemCreate on it is CUDA_ERROR_NOT_SUPPORTED.
void fake_cuda_set_vmm_supported(int device, int supported);
// Whether `device` can reach `peer`'s memory (cuDeviceCanAccessPeer; a
// cuMemSetAccess granting it is CUDA_ERROR_INVALID_DEVICE when not). Every
// pair can until set; reset forgets.
void fake_cuda_set_peer_access(int device, int peer, int can);
// Backed (1): handles created from now on get host memory (a memfd of their
// size) that their mappings show, readable or writable as cuMemSetAccess
// allows, and that keeps its bytes across cuMemUnmap and a new cuMemMap.
// Unbacked (0, the default): nothing is touched and every mapped byte stays
// PROT_NONE, so traces of any size replay.
void fake_cuda_set_vmm_backed(int backed);
// Address space reserved now (cuMemAddressReserve, not yet freed).
size_t fake_cuda_vmm_reserved_bytes(void);
// Bytes mapped now of handles created on `device`.
size_t fake_cuda_vmm_mapped_bytes(int device);
// Handles created on `device` that still hold memory (not both released and
// unmapped everywhere), and their bytes (what counts against the budget).
int fake_cuda_vmm_live_handles(int device);
size_t fake_cuda_vmm_physical_bytes(int device);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // BFC_TESTS_FAKE_CUDA_FAKE_CUDA_CONTROL_H_
