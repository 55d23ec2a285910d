// File: tests/fake_cuda_vmm_test.cc
// -----------------------------------------------------------------------------
//
// The fake driver's virtual memory management (tests/fake_cuda), called
// directly: every rule it enforces returns the documented error and changes
// nothing, a released handle lives until its last unmap, handles count
// against the device budget, and in backed mode the bytes live in the handle
// (kept across unmap and a new map elsewhere) while unmapped space faults.
// These tests steer the fake, so against a real driver they skip.
#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "fake_cuda/fake_cuda_testing.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::bfc::testing::DriverFunction;
using ::bfc::testing::GetFake;

constexpr size_t kGran = size_t{2} << 20;  // the fake's default granularity
// cuMemGetAccess's answers, as the type it writes.
constexpr unsigned long long kNone = CU_MEM_ACCESS_FLAGS_PROT_NONE;
constexpr unsigned long long kRead = CU_MEM_ACCESS_FLAGS_PROT_READ;
constexpr unsigned long long kReadWrite = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

#define BFC_DRIVER_FN(fn, name) \
  decltype(&::fn) fn = DriverFunction<decltype(&::fn)>(name)

// The driver functions the tests call, by their exported names.
struct Driver {
  BFC_DRIVER_FN(cuInit, "cuInit");
  BFC_DRIVER_FN(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  BFC_DRIVER_FN(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease_v2");
  BFC_DRIVER_FN(cuCtxPushCurrent_v2, "cuCtxPushCurrent_v2");
  BFC_DRIVER_FN(cuCtxPopCurrent_v2, "cuCtxPopCurrent_v2");
  BFC_DRIVER_FN(cuCtxSynchronize, "cuCtxSynchronize");
  BFC_DRIVER_FN(cuMemGetInfo_v2, "cuMemGetInfo_v2");
  BFC_DRIVER_FN(cuGetProcAddress_v2, "cuGetProcAddress_v2");
  BFC_DRIVER_FN(cuDeviceGetAttribute, "cuDeviceGetAttribute");
  BFC_DRIVER_FN(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
  BFC_DRIVER_FN(cuMemAddressReserve, "cuMemAddressReserve");
  BFC_DRIVER_FN(cuMemAddressFree, "cuMemAddressFree");
  BFC_DRIVER_FN(cuMemCreate, "cuMemCreate");
  BFC_DRIVER_FN(cuMemRelease, "cuMemRelease");
  BFC_DRIVER_FN(cuMemMap, "cuMemMap");
  BFC_DRIVER_FN(cuMemSetAccess, "cuMemSetAccess");
  BFC_DRIVER_FN(cuMemGetAccess, "cuMemGetAccess");
  BFC_DRIVER_FN(cuMemUnmap, "cuMemUnmap");
};
#undef BFC_DRIVER_FN

const Driver& D() {
  static const Driver* d = new Driver;
  return *d;
}

CUmemAllocationProp Prop(int device = 0) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

CUmemAccessDesc Access(CUmemAccess_flags flags, int device = 0) {
  CUmemAccessDesc desc;
  std::memset(&desc, 0, sizeof(desc));
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = flags;
  return desc;
}

// What the fake holds for device 0 (and the address space reserved).
using Counts = std::tuple<size_t /*reserved*/, size_t /*mapped*/,
                          size_t /*physical*/, int /*live handles*/>;
Counts Now(int device = 0) {
  return Counts{GetFake()->vmm_reserved_bytes(),
                GetFake()->vmm_mapped_bytes(device),
                GetFake()->vmm_physical_bytes(device),
                GetFake()->vmm_live_handles(device)};
}

// cuMemGetInfo's free bytes on device 0 (it needs a current context).
size_t FreeBytes() {
  CUcontext ctx = nullptr;
  EXPECT_EQ(D().cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  EXPECT_EQ(D().cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  size_t free_bytes = 0;
  size_t total = 0;
  EXPECT_EQ(D().cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(D().cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(D().cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  return free_bytes;
}

class FakeCudaVmmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (GetFake() == nullptr) return;  // each test skips
    GetFake()->reset();
    ASSERT_NE(D().cuInit, nullptr);
    ASSERT_EQ(D().cuInit(0), CUDA_SUCCESS);
  }

  CUdeviceptr Reserve(size_t size, size_t alignment = 0) {
    CUdeviceptr ptr = 0;
    EXPECT_EQ(D().cuMemAddressReserve(&ptr, size, alignment, 0, 0),
              CUDA_SUCCESS);
    return ptr;
  }
  CUmemGenericAllocationHandle Create(size_t size, int device = 0) {
    CUmemAllocationProp prop = Prop(device);
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(D().cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  void Map(CUdeviceptr ptr, CUmemGenericAllocationHandle h, size_t size) {
    EXPECT_EQ(D().cuMemMap(ptr, size, 0, h, 0), CUDA_SUCCESS);
  }
  CUresult SetAccess(CUdeviceptr ptr, size_t size, CUmemAccess_flags flags) {
    CUmemAccessDesc desc = Access(flags);
    return D().cuMemSetAccess(ptr, size, &desc, 1);
  }
};

using FakeCudaVmmDeathTest = FakeCudaVmmTest;

TEST_F(FakeCudaVmmTest, GetProcAddressFindsEveryVmmCall) {
  BFC_REQUIRE_FAKE_CUDA();
  for (const char* name :
       {"cuDeviceGetAttribute", "cuMemGetAllocationGranularity",
        "cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate",
        "cuMemRelease", "cuMemMap", "cuMemSetAccess", "cuMemGetAccess",
        "cuMemUnmap", "cuCtxSynchronize"}) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_EQ(D().cuGetProcAddress_v2(name, &fn, 12000, 0, &found),
              CUDA_SUCCESS)
        << name;
    EXPECT_EQ(found, CU_GET_PROC_ADDRESS_SUCCESS) << name;
    EXPECT_EQ(fn, DriverFunction<void*>(name)) << name;
  }
}

TEST_F(FakeCudaVmmTest, DeviceAttributes) {
  BFC_REQUIRE_FAKE_CUDA();
  int v = -1;
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  EXPECT_EQ(
      D().cuDeviceGetAttribute(
          &v, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0),
      CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  // Any other attribute: a limitation of the fake.
  v = -1;
  EXPECT_EQ(
      D().cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0),
      CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(v, -1);
  EXPECT_EQ(
      D().cuDeviceGetAttribute(
          nullptr, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
      CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(
      D().cuDeviceGetAttribute(
          &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, -1),
      CUDA_ERROR_INVALID_DEVICE);

  // Turned off for one device only.
  GetFake()->set_device_count(2);
  GetFake()->set_vmm_supported(1, 0);
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 0);
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
  // Back on with the reset.
  GetFake()->reset();
  GetFake()->set_device_count(2);
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 1);
}

TEST_F(FakeCudaVmmTest, Granularity) {
  BFC_REQUIRE_FAKE_CUDA();
  const CUmemAllocationProp prop = Prop();
  size_t g = 0;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(g, kGran);
  g = 0;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(
                &g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
            CUDA_SUCCESS);
  EXPECT_EQ(g, kGran);

  GetFake()->set_vmm_granularity(size_t{64} << 10);
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(g, size_t{64} << 10);
  // Not a power of two of at least 4096: ignored.
  for (size_t bad : {size_t{0}, size_t{2048}, size_t{3} << 20, size_t{5000}}) {
    GetFake()->set_vmm_granularity(bad);
    EXPECT_EQ(D().cuMemGetAllocationGranularity(
                  &g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
              CUDA_SUCCESS);
    EXPECT_EQ(g, size_t{64} << 10) << bad;
  }

  EXPECT_EQ(D().cuMemGetAllocationGranularity(
                &g, &prop, static_cast<CUmemAllocationGranularity_flags>(2)),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemGetAllocationGranularity(nullptr, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, nullptr,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp bad = Prop();
  bad.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &bad,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  bad = Prop();
  bad.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &bad,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  bad = Prop();
  bad.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &bad,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  bad = Prop(1);
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &bad,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_DEVICE);

  GetFake()->reset();
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(g, kGran);
}

TEST_F(FakeCudaVmmTest, ReserveIsAlignedAddressSpaceOutsideTheBudget) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_memory(0, 4 * kGran);
  const size_t free_before = FreeBytes();
  // Far more than the device has: address space only.
  const CUdeviceptr a = Reserve(size_t{1} << 30);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(a % kGran, 0u);
  EXPECT_EQ(GetFake()->vmm_reserved_bytes(), size_t{1} << 30);
  EXPECT_EQ(FreeBytes(), free_before);

  const size_t big = size_t{1} << 30;  // an alignment past the granularity
  const CUdeviceptr b = Reserve(kGran, big);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(b % big, 0u);
  // An alignment under the granularity still gives the granularity.
  const CUdeviceptr c = Reserve(kGran, 4096);
  ASSERT_NE(c, 0u);
  EXPECT_EQ(c % kGran, 0u);
  EXPECT_EQ(GetFake()->vmm_reserved_bytes(), (size_t{1} << 30) + 2 * kGran);

  // The hint is taken where it is free: here where c was.
  ASSERT_EQ(D().cuMemAddressFree(c, kGran), CUDA_SUCCESS);
  CUdeviceptr d = 0;
  ASSERT_EQ(D().cuMemAddressReserve(&d, kGran, 0, c, 0), CUDA_SUCCESS);
  EXPECT_EQ(d % kGran, 0u);

  EXPECT_EQ(D().cuMemAddressFree(a, size_t{1} << 30), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemAddressFree(b, kGran), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemAddressFree(d, kGran), CUDA_SUCCESS);
  EXPECT_EQ(GetFake()->vmm_reserved_bytes(), 0u);
}

TEST_F(FakeCudaVmmTest, ReserveRules) {
  BFC_REQUIRE_FAKE_CUDA();
  const Counts before = Now();
  CUdeviceptr p = 0;
  EXPECT_EQ(D().cuMemAddressReserve(nullptr, kGran, 0, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressReserve(&p, 0, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressReserve(&p, kGran + 4096, 0, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressReserve(&p, kGran / 2, 0, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressReserve(&p, kGran, 3 * kGran, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressReserve(&p, kGran, 0, 0, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(p, 0u);
  EXPECT_EQ(Now(), before);
}

TEST_F(FakeCudaVmmTest, AddressFreeRules) {
  BFC_REQUIRE_FAKE_CUDA();
  const CUdeviceptr r = Reserve(4 * kGran);
  const CUmemGenericAllocationHandle h = Create(kGran);
  Map(r + kGran, h, kGran);
  const Counts before = Now();
  // Not a reservation exactly: other base, other size, unknown.
  EXPECT_EQ(D().cuMemAddressFree(r + kGran, 3 * kGran),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressFree(r, 2 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressFree(r, 8 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressFree(0, kGran), CUDA_ERROR_INVALID_VALUE);
  // Still mapped: refused (stricter than the driver documents).
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), before);

  EXPECT_EQ(D().cuMemUnmap(r + kGran, kGran), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(GetFake()->vmm_reserved_bytes(), 0u);
  // Twice.
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
}

TEST_F(FakeCudaVmmTest, CreateRules) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(2);
  GetFake()->set_vmm_supported(1, 0);
  const Counts before = Now();
  const size_t free_before = FreeBytes();
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop = Prop();
  EXPECT_EQ(D().cuMemCreate(nullptr, kGran, &prop, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemCreate(&h, kGran, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemCreate(&h, 0, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemCreate(&h, kGran + 4096, &prop, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemCreate(&h, kGran / 2, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop.type = CU_MEM_ALLOCATION_TYPE_MANAGED;
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop = Prop();
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop = Prop();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32;
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_VALUE);
  prop = Prop(2);
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  prop = Prop(-1);
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_INVALID_DEVICE);
  prop = Prop(1);
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(h, 0u);
  EXPECT_EQ(Now(), before);
  EXPECT_EQ(Now(1), before);
  EXPECT_EQ(FreeBytes(), free_before);

  // A file descriptor handle type is accepted.
  prop = Prop();
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_EQ(D().cuMemCreate(&h, 2 * kGran, &prop, 0), CUDA_SUCCESS);
  EXPECT_NE(h, 0u);
  EXPECT_EQ(Now(), (Counts{0, 0, 2 * kGran, 1}));
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(Now(), before);
}

TEST_F(FakeCudaVmmTest, HandlesCountAgainstTheBudget) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_memory(0, 4 * kGran);
  EXPECT_EQ(FreeBytes(), 4 * kGran);
  const CUmemGenericAllocationHandle a = Create(3 * kGran);
  EXPECT_EQ(FreeBytes(), kGran);
  // Past the budget.
  CUmemAllocationProp prop = Prop();
  CUmemGenericAllocationHandle b = 0;
  EXPECT_EQ(D().cuMemCreate(&b, 2 * kGran, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(Now(), (Counts{0, 0, 3 * kGran, 1}));
  EXPECT_EQ(FreeBytes(), kGran);
  // What is left still fits.
  b = Create(kGran);
  EXPECT_EQ(FreeBytes(), 0u);
  EXPECT_EQ(D().cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), 3 * kGran);
  EXPECT_EQ(D().cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), 4 * kGran);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
}

TEST_F(FakeCudaVmmTest, HandlesAreUniqueAndNeverReused) {
  BFC_REQUIRE_FAKE_CUDA();
  std::vector<CUmemGenericAllocationHandle> seen;
  for (int i = 0; i < 4; ++i) {
    const CUmemGenericAllocationHandle h = Create(kGran);
    EXPECT_NE(h, 0u);
    seen.push_back(h);
    EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  }
  GetFake()->reset();
  const CUmemGenericAllocationHandle h = Create(kGran);
  seen.push_back(h);
  for (size_t i = 0; i < seen.size(); ++i) {
    for (size_t j = i + 1; j < seen.size(); ++j) EXPECT_NE(seen[i], seen[j]);
  }
  // A handle from before the reset is unknown.
  EXPECT_EQ(D().cuMemRelease(seen[0]), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaVmmTest, ReleaseRules) {
  BFC_REQUIRE_FAKE_CUDA();
  EXPECT_EQ(D().cuMemRelease(0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemRelease(12345678), CUDA_ERROR_INVALID_VALUE);
  const CUmemGenericAllocationHandle h = Create(kGran);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
}

// As on the driver: release while mapped keeps the memory until the last
// unmap.
TEST_F(FakeCudaVmmTest, ReleasedHandleLivesUntilItsLastUnmap) {
  BFC_REQUIRE_FAKE_CUDA();
  const size_t free_before = FreeBytes();
  const CUdeviceptr r = Reserve(4 * kGran);
  const CUmemGenericAllocationHandle h = Create(kGran);
  Map(r, h, kGran);
  Map(r + 2 * kGran, h, kGran);  // a handle may be mapped twice
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 2 * kGran, kGran, 1}));
  EXPECT_EQ(FreeBytes(), free_before - kGran);
  // Released: it cannot be mapped again, nor released again.
  EXPECT_EQ(D().cuMemMap(r + kGran, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  // Its mappings still take access.
  EXPECT_EQ(SetAccess(r, kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            CUDA_SUCCESS);

  EXPECT_EQ(D().cuMemUnmap(r, kGran), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{4 * kGran, kGran, kGran, 1}));
  EXPECT_EQ(FreeBytes(), free_before - kGran);
  EXPECT_EQ(D().cuMemUnmap(r + 2 * kGran, kGran), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 0, 0, 0}));
  EXPECT_EQ(FreeBytes(), free_before);
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_SUCCESS);
}

TEST_F(FakeCudaVmmTest, MapRules) {
  BFC_REQUIRE_FAKE_CUDA();
  const CUdeviceptr r = Reserve(4 * kGran);
  const CUmemGenericAllocationHandle h = Create(2 * kGran);
  const CUmemGenericAllocationHandle small = Create(kGran);
  const CUmemGenericAllocationHandle released = Create(kGran);
  ASSERT_EQ(D().cuMemRelease(released), CUDA_SUCCESS);
  Map(r + 2 * kGran, small, kGran);
  const Counts before = Now();

  auto map = [&](CUdeviceptr p, size_t size, size_t offset,
                 CUmemGenericAllocationHandle handle, unsigned long long f) {
    return D().cuMemMap(p, size, offset, handle, f);
  };
  EXPECT_EQ(map(r, 2 * kGran, kGran, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r, 2 * kGran, 0, h, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r + 4096, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r, 2 * kGran + 4096, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r, 0, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  // Part of a handle (or more than it): the fake maps whole handles only.
  EXPECT_EQ(map(r, kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r, 4 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  // Unknown or released handle.
  EXPECT_EQ(map(r, kGran, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r, kGran, 0, released, 0), CUDA_ERROR_INVALID_VALUE);
  // Over a mapping (whole or in part).
  EXPECT_EQ(map(r + 2 * kGran, kGran, 0, small, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r + kGran, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  // Past the end of the reservation, or outside any.
  EXPECT_EQ(map(r + 3 * kGran, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(r - 2 * kGran, 2 * kGran, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), before);

  EXPECT_EQ(map(r, 2 * kGran, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(GetFake()->vmm_mapped_bytes(0), 3 * kGran);
}

// Two reservations that happen to touch are still two: a mapping may not
// straddle them.
TEST_F(FakeCudaVmmTest, MapStaysInOneReservation) {
  BFC_REQUIRE_FAKE_CUDA();
  // Two halves of space just freed, each reserved at its address.
  const CUdeviceptr space = Reserve(4 * kGran);
  ASSERT_EQ(D().cuMemAddressFree(space, 4 * kGran), CUDA_SUCCESS);
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  ASSERT_EQ(D().cuMemAddressReserve(&a, 2 * kGran, 0, space, 0), CUDA_SUCCESS);
  ASSERT_EQ(D().cuMemAddressReserve(&b, 2 * kGran, 0, space + 2 * kGran, 0),
            CUDA_SUCCESS);
  if (a != space || b != a + 2 * kGran) {
    GTEST_SKIP() << "the kernel did not take the hints";
  }
  const CUmemGenericAllocationHandle h = Create(2 * kGran);
  const Counts before = Now();
  EXPECT_EQ(D().cuMemMap(a + kGran, 2 * kGran, 0, h, 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), before);
  EXPECT_EQ(D().cuMemMap(b, 2 * kGran, 0, h, 0), CUDA_SUCCESS);
}

TEST_F(FakeCudaVmmTest, SetAccessRules) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(2);
  const CUdeviceptr r = Reserve(8 * kGran);
  const CUmemGenericAllocationHandle a = Create(kGran);
  const CUmemGenericAllocationHandle b = Create(2 * kGran);
  const CUmemGenericAllocationHandle c = Create(kGran);
  // [a][b b][ ][c]
  Map(r, a, kGran);
  Map(r + kGran, b, 2 * kGran);
  Map(r + 4 * kGran, c, kGran);
  const Counts before = Now();

  CUmemAccessDesc rw = Access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, &rw, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r, 0, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r + 4096, kGran, &rw, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran + 4096, &rw, 1),
            CUDA_ERROR_INVALID_VALUE);
  // Not fully mapped: a gap, past the last mapping, nothing mapped.
  EXPECT_EQ(D().cuMemSetAccess(r, 5 * kGran, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r + 2 * kGran, 2 * kGran, &rw, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r + 4 * kGran, 2 * kGran, &rw, 1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemSetAccess(r + 6 * kGran, kGran, &rw, 1),
            CUDA_ERROR_INVALID_VALUE);
  // Bad descriptors, alone or after a good one.
  CUmemAccessDesc bad[2] = {rw, rw};
  bad[1].flags = static_cast<CUmemAccess_flags>(2);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad[1] = Access(CU_MEM_ACCESS_FLAGS_PROT_READ, 2);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad[1] = Access(CU_MEM_ACCESS_FLAGS_PROT_READ, -1);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, bad, 2), CUDA_ERROR_INVALID_VALUE);
  bad[1] = Access(CU_MEM_ACCESS_FLAGS_PROT_READ);
  bad[1].location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, bad, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), before);
  unsigned long long flags = 99;
  CUmemLocation dev0 = rw.location;
  CUmemLocation dev1 = Access(CU_MEM_ACCESS_FLAGS_PROT_NONE, 1).location;
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, r), CUDA_SUCCESS);
  EXPECT_EQ(flags, kNone);  // none until set

  // Across adjacent mappings, per device.
  CUmemAccessDesc two[2] = {rw, Access(CU_MEM_ACCESS_FLAGS_PROT_READ, 1)};
  EXPECT_EQ(D().cuMemSetAccess(r, 3 * kGran, two, 2), CUDA_SUCCESS);
  for (CUdeviceptr p : {r, r + kGran, r + 3 * kGran - 1}) {
    EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, p), CUDA_SUCCESS);
    EXPECT_EQ(flags, kReadWrite);
    EXPECT_EQ(D().cuMemGetAccess(&flags, &dev1, p), CUDA_SUCCESS);
    EXPECT_EQ(flags, kRead);
  }
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, r + 4 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(flags, kNone);
  // cuMemGetAccess: unmapped address, bad location, null arguments.
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, r + 3 * kGran),
            CUDA_ERROR_INVALID_VALUE);
  CUmemLocation dev2 = Access(CU_MEM_ACCESS_FLAGS_PROT_NONE, 2).location;
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev2, r), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemGetAccess(nullptr, &dev0, r), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemGetAccess(&flags, nullptr, r), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(FakeCudaVmmTest, UnmapTakesWholeMappingsOnly) {
  BFC_REQUIRE_FAKE_CUDA();
  const CUdeviceptr r = Reserve(8 * kGran);
  const CUmemGenericAllocationHandle a = Create(kGran);
  const CUmemGenericAllocationHandle b = Create(2 * kGran);
  const CUmemGenericAllocationHandle c = Create(kGran);
  const CUmemGenericAllocationHandle d = Create(kGran);
  // [a][b b][c] [d]
  Map(r, a, kGran);
  Map(r + kGran, b, 2 * kGran);
  Map(r + 3 * kGran, c, kGran);
  Map(r + 5 * kGran, d, kGran);
  const Counts before = Now();

  EXPECT_EQ(D().cuMemUnmap(r, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r + 4096, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r, kGran + 4096), CUDA_ERROR_INVALID_VALUE);
  // Cutting b: its first half, its second half, a and half of b.
  EXPECT_EQ(D().cuMemUnmap(r + kGran, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r + 2 * kGran, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r, 2 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r + 2 * kGran, 2 * kGran), CUDA_ERROR_INVALID_VALUE);
  // Not mapped, or across the gap.
  EXPECT_EQ(D().cuMemUnmap(r + 4 * kGran, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r + 3 * kGran, 3 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r, 6 * kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemUnmap(r + 7 * kGran, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Now(), before);

  // Several adjacent whole mappings at once.
  EXPECT_EQ(D().cuMemUnmap(r, 4 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(GetFake()->vmm_mapped_bytes(0), kGran);
  EXPECT_EQ(D().cuMemUnmap(r, kGran), CUDA_ERROR_INVALID_VALUE);  // twice
  EXPECT_EQ(D().cuMemUnmap(r + 5 * kGran, kGran), CUDA_SUCCESS);
  EXPECT_EQ(GetFake()->vmm_mapped_bytes(0), 0u);
  // Unmapping does not release: the handles are all still there.
  EXPECT_EQ(GetFake()->vmm_live_handles(0), 4);
  for (CUmemGenericAllocationHandle h : {a, b, c, d}) {
    EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  }
  EXPECT_EQ(D().cuMemAddressFree(r, 8 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
}

TEST_F(FakeCudaVmmTest, CountsAreByTheDeviceOfTheHandle) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_device_count(2);
  const CUdeviceptr r = Reserve(4 * kGran);
  const CUmemGenericAllocationHandle h0 = Create(kGran, 0);
  const CUmemGenericAllocationHandle h1 = Create(2 * kGran, 1);
  Map(r, h1, 2 * kGran);
  EXPECT_EQ(Now(0), (Counts{4 * kGran, 0, kGran, 1}));
  EXPECT_EQ(Now(1), (Counts{4 * kGran, 2 * kGran, 2 * kGran, 1}));
  Map(r + 2 * kGran, h0, kGran);
  EXPECT_EQ(GetFake()->vmm_mapped_bytes(0), kGran);
}

// Each VMM call, failed on purpose, returns the error and does nothing.
TEST_F(FakeCudaVmmTest, InjectedFailures) {
  BFC_REQUIRE_FAKE_CUDA();
  const CUresult kErr = CUDA_ERROR_UNKNOWN;
  const CUmemAllocationProp prop = Prop();
  const CUmemAccessDesc rw = Access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemLocation dev0 = rw.location;

  GetFake()->fail_call("cuDeviceGetAttribute", 1, kErr);
  int v = -1;
  EXPECT_EQ(D().cuDeviceGetAttribute(
                &v, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            kErr);
  EXPECT_EQ(v, -1);

  GetFake()->fail_call("cuMemGetAllocationGranularity", 1, kErr);
  size_t g = 0;
  EXPECT_EQ(D().cuMemGetAllocationGranularity(&g, &prop,
                                              CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            kErr);
  EXPECT_EQ(g, 0u);

  // The second reserve fails.
  GetFake()->fail_call("cuMemAddressReserve", 2, kErr);
  const CUdeviceptr r = Reserve(4 * kGran);
  CUdeviceptr p = 0;
  EXPECT_EQ(D().cuMemAddressReserve(&p, kGran, 0, 0, 0), kErr);
  EXPECT_EQ(p, 0u);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 0, 0, 0}));

  GetFake()->fail_call("cuMemCreate", 1, kErr);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(D().cuMemCreate(&h, kGran, &prop, 0), kErr);
  EXPECT_EQ(h, 0u);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 0, 0, 0}));
  h = Create(kGran);

  GetFake()->fail_call("cuMemMap", 1, kErr);
  EXPECT_EQ(D().cuMemMap(r, kGran, 0, h, 0), kErr);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 0, kGran, 1}));
  Map(r, h, kGran);

  GetFake()->fail_call("cuMemSetAccess", 1, kErr);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, &rw, 1), kErr);
  unsigned long long flags = 99;
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, r), CUDA_SUCCESS);
  EXPECT_EQ(flags, kNone);
  EXPECT_EQ(D().cuMemSetAccess(r, kGran, &rw, 1), CUDA_SUCCESS);

  GetFake()->fail_call("cuMemGetAccess", 1, kErr);
  flags = 99;
  EXPECT_EQ(D().cuMemGetAccess(&flags, &dev0, r), kErr);
  EXPECT_EQ(flags, 99u);

  GetFake()->fail_call("cuMemRelease", 1, kErr);
  EXPECT_EQ(D().cuMemRelease(h), kErr);
  const Counts mapped{4 * kGran, kGran, kGran, 1};
  EXPECT_EQ(Now(), mapped);

  GetFake()->fail_call("cuMemUnmap", 1, kErr);
  EXPECT_EQ(D().cuMemUnmap(r, kGran), kErr);
  EXPECT_EQ(Now(), mapped);
  EXPECT_EQ(D().cuMemUnmap(r, kGran), CUDA_SUCCESS);

  GetFake()->fail_call("cuMemAddressFree", 1, kErr);
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), kErr);
  EXPECT_EQ(Now(), (Counts{4 * kGran, 0, kGran, 1}));
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_SUCCESS);
  // The release that failed did not happen: the handle is still live.
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));

  // Failed calls count as calls.
  EXPECT_EQ(GetFake()->call_count("cuMemAddressReserve"), 2);
  EXPECT_EQ(GetFake()->call_count("cuMemRelease"), 2);
  EXPECT_EQ(GetFake()->call_count("cuMemUnmap"), 2);
}

TEST_F(FakeCudaVmmTest, ResetForgetsVmmState) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_vmm_granularity(size_t{64} << 10);
  GetFake()->set_vmm_backed(1);
  const CUdeviceptr r = Reserve(kGran);
  const CUmemGenericAllocationHandle h = Create(kGran);
  Map(r, h, kGran);
  GetFake()->reset();
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
  // Forgotten: unknown to every call now.
  EXPECT_EQ(D().cuMemUnmap(r, kGran), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D().cuMemAddressFree(r, kGran), CUDA_ERROR_INVALID_VALUE);
  // Defaults again: 2 MiB, unbacked (a 64 KiB reserve is refused).
  CUdeviceptr p = 0;
  EXPECT_EQ(D().cuMemAddressReserve(&p, size_t{64} << 10, 0, 0, 0),
            CUDA_ERROR_INVALID_VALUE);
}

// Unbacked (the default) touches nothing: far more than the machine has can
// be created, mapped and made accessible.
TEST_F(FakeCudaVmmTest, UnbackedMapsAnySize) {
  BFC_REQUIRE_FAKE_CUDA();
  const size_t huge = size_t{100} << 30;
  GetFake()->set_device_memory(0, 2 * huge);
  const CUdeviceptr r = Reserve(huge);
  const CUmemGenericAllocationHandle h = Create(huge);
  Map(r, h, huge);
  EXPECT_EQ(SetAccess(r, huge, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{huge, huge, huge, 1}));
  EXPECT_EQ(FreeBytes(), huge);
  EXPECT_EQ(D().cuMemUnmap(r, huge), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemAddressFree(r, huge), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), 2 * huge);
}

// Backed: the bytes live in the handle, so they survive an unmap and show up
// wherever it is mapped next.
TEST_F(FakeCudaVmmTest, BackedHandleKeepsItsBytesAcrossMappings) {
  BFC_REQUIRE_FAKE_CUDA();
  GetFake()->set_vmm_backed(1);
  const CUdeviceptr r = Reserve(4 * kGran);
  const CUmemGenericAllocationHandle h = Create(2 * kGran);
  Map(r, h, 2 * kGran);
  ASSERT_EQ(SetAccess(r, 2 * kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            CUDA_SUCCESS);
  auto* first = reinterpret_cast<unsigned char*>(static_cast<uintptr_t>(r));
  for (size_t i = 0; i < 2 * kGran; i += 4096) {
    first[i] = static_cast<unsigned char>(i / 4096 + 1);
  }
  first[2 * kGran - 1] = 0xAB;
  ASSERT_EQ(D().cuMemUnmap(r, 2 * kGran), CUDA_SUCCESS);

  Map(r + 2 * kGran, h, 2 * kGran);
  ASSERT_EQ(SetAccess(r + 2 * kGran, 2 * kGran, CU_MEM_ACCESS_FLAGS_PROT_READ),
            CUDA_SUCCESS);
  const auto* second =
      reinterpret_cast<const unsigned char*>(static_cast<uintptr_t>(r)) +
      2 * kGran;
  for (size_t i = 0; i < 2 * kGran; i += 4096) {
    EXPECT_EQ(second[i], static_cast<unsigned char>(i / 4096 + 1)) << i;
  }
  EXPECT_EQ(second[2 * kGran - 1], 0xAB);
  EXPECT_EQ(D().cuMemUnmap(r + 2 * kGran, 2 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(D().cuMemAddressFree(r, 4 * kGran), CUDA_SUCCESS);
  EXPECT_EQ(Now(), (Counts{0, 0, 0, 0}));
}

// Host touches fault wherever the device would not allow them.
TEST_F(FakeCudaVmmDeathTest, BackedTouchesFaultWithoutAccess) {
  BFC_REQUIRE_FAKE_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GetFake()->set_vmm_backed(1);
  const CUdeviceptr r = Reserve(2 * kGran);
  const CUmemGenericAllocationHandle h = Create(kGran);
  auto* p =
      reinterpret_cast<volatile unsigned char*>(static_cast<uintptr_t>(r));
  // Reserved only.
  EXPECT_DEATH(p[0] = 1, "");
  // Mapped, no access yet.
  Map(r, h, kGran);
  EXPECT_DEATH(p[0] = 1, "");
  // Read-only.
  ASSERT_EQ(SetAccess(r, kGran, CU_MEM_ACCESS_FLAGS_PROT_READ), CUDA_SUCCESS);
  EXPECT_EQ(static_cast<int>(p[0]), 0);
  EXPECT_DEATH(p[0] = 1, "");
  ASSERT_EQ(SetAccess(r, kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            CUDA_SUCCESS);
  p[0] = 7;
  EXPECT_EQ(static_cast<int>(p[0]), 7);
  // After the unmap: faults again, the handle keeps the byte.
  ASSERT_EQ(D().cuMemUnmap(r, kGran), CUDA_SUCCESS);
  EXPECT_DEATH(p[0] = 1, "");
  EXPECT_DEATH((void)p[0], "");
  Map(r + kGran, h, kGran);
  ASSERT_EQ(SetAccess(r + kGran, kGran, CU_MEM_ACCESS_FLAGS_PROT_READ),
            CUDA_SUCCESS);
  EXPECT_EQ(static_cast<int>(p[kGran]), 7);
}

// Unbacked memory stays PROT_NONE even with access set: a host touch faults,
// as touching device memory from the host would.
TEST_F(FakeCudaVmmDeathTest, UnbackedTouchFaults) {
  BFC_REQUIRE_FAKE_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const CUdeviceptr r = Reserve(kGran);
  Map(r, Create(kGran), kGran);
  ASSERT_EQ(SetAccess(r, kGran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
            CUDA_SUCCESS);
  auto* p =
      reinterpret_cast<volatile unsigned char*>(static_cast<uintptr_t>(r));
  EXPECT_DEATH(p[0] = 1, "");
}

TEST_F(FakeCudaVmmTest, CtxSynchronizeNeedsAContext) {
  BFC_REQUIRE_FAKE_CUDA();
  EXPECT_EQ(D().cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
  CUcontext ctx = nullptr;
  ASSERT_EQ(D().cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(D().cuCtxPushCurrent_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(D().cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(D().cuCtxPopCurrent_v2(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(D().cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

}  // namespace
}  // namespace bfc
