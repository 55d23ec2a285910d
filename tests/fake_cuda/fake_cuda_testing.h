// File: tests/fake_cuda/fake_cuda_testing.h
// -----------------------------------------------------------------------------
//
// The fake driver's control calls (fake_cuda_control.h) as seen from a test:
// found in the driver library bfc loads (BFC_CUDA_DRIVER_LIBRARY), so the test
// and the library talk to the same instance. Against a real driver GetFake()
// is nullptr and tests that need to steer the driver skip.
#ifndef BFC_TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_
#define BFC_TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>

namespace bfc {
namespace testing {

struct FakeCuda {
  void (*reset)();
  void (*set_device_count)(int);
  void (*set_device_memory)(int, size_t);
  void (*set_driver_version)(int);
  void (*fail_call)(const char*, int, int);
  void (*hold_stream)(void*);
  void (*release_stream)(void*);
  void* (*stream_of)(void*);
  int (*live_allocations)(int);
  size_t (*bytes_in_use)(int);
  long (*call_count)(const char*);
  int (*context_depth)();
  void (*set_vmm_granularity)(size_t);
  void (*set_vmm_supported)(int, int);
  void (*set_peer_access)(int, int, int);
  void (*set_vmm_backed)(int);
  size_t (*vmm_reserved_bytes)();
  size_t (*vmm_mapped_bytes)(int);
  int (*vmm_live_handles)(int);
  size_t (*vmm_physical_bytes)(int);
};

// A driver function by its exported name ("cuStreamCreate",
// "cuStreamDestroy_v2"), from the driver bfc loads (the fake or the real
// one), for tests that need driver calls the library itself does not make.
// nullptr when there is no driver or no such function.
template <typename Fn>
Fn DriverFunction(const char* name) {
  const char* path = std::getenv("BFC_CUDA_DRIVER_LIBRARY");
  void* handle =
      dlopen(path != nullptr && path[0] != '\0' ? path : "libcuda.so.1",
             RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// The fake's controls, or nullptr when the driver is not the fake.
inline const FakeCuda* GetFake() {
  static const FakeCuda* fake = []() -> const FakeCuda* {
    const char* path = std::getenv("BFC_CUDA_DRIVER_LIBRARY");
    if (path == nullptr || path[0] == '\0') return nullptr;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr || dlsym(handle, "fake_cuda_is_fake") == nullptr) {
      return nullptr;
    }
    auto* f = new FakeCuda;
#define BFC_FAKE_SYM(field, name) \
  f->field = reinterpret_cast<decltype(f->field)>(dlsym(handle, name))
    BFC_FAKE_SYM(reset, "fake_cuda_reset");
    BFC_FAKE_SYM(set_device_count, "fake_cuda_set_device_count");
    BFC_FAKE_SYM(set_device_memory, "fake_cuda_set_device_memory");
    BFC_FAKE_SYM(set_driver_version, "fake_cuda_set_driver_version");
    BFC_FAKE_SYM(fail_call, "fake_cuda_fail_call");
    BFC_FAKE_SYM(hold_stream, "fake_cuda_hold_stream");
    BFC_FAKE_SYM(release_stream, "fake_cuda_release_stream");
    BFC_FAKE_SYM(stream_of, "fake_cuda_stream_of");
    BFC_FAKE_SYM(live_allocations, "fake_cuda_live_allocations");
    BFC_FAKE_SYM(bytes_in_use, "fake_cuda_bytes_in_use");
    BFC_FAKE_SYM(call_count, "fake_cuda_call_count");
    BFC_FAKE_SYM(context_depth, "fake_cuda_context_depth");
    BFC_FAKE_SYM(set_vmm_granularity, "fake_cuda_set_vmm_granularity");
    BFC_FAKE_SYM(set_vmm_supported, "fake_cuda_set_vmm_supported");
    BFC_FAKE_SYM(set_peer_access, "fake_cuda_set_peer_access");
    BFC_FAKE_SYM(set_vmm_backed, "fake_cuda_set_vmm_backed");
    BFC_FAKE_SYM(vmm_reserved_bytes, "fake_cuda_vmm_reserved_bytes");
    BFC_FAKE_SYM(vmm_mapped_bytes, "fake_cuda_vmm_mapped_bytes");
    BFC_FAKE_SYM(vmm_live_handles, "fake_cuda_vmm_live_handles");
    BFC_FAKE_SYM(vmm_physical_bytes, "fake_cuda_vmm_physical_bytes");
#undef BFC_FAKE_SYM
    return f;
  }();
  return fake;
}

}  // namespace testing
}  // namespace bfc

// In a test body: skip unless the driver is the fake.
#define BFC_REQUIRE_FAKE_CUDA()                                         \
  do {                                                                  \
    if (::bfc::testing::GetFake() == nullptr) {                         \
      GTEST_SKIP() << "needs the fake CUDA driver's controls (running " \
                      "against a real driver)";                         \
    }                                                                   \
  } while (0)

#endif  // BFC_TESTS_FAKE_CUDA_FAKE_CUDA_TESTING_H_
