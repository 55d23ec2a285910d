// Tests for bfc/cuda_resource.h against the CCCL shipped with the CUDA
// toolkit. The concept checks are static_asserts: this file compiling is the
// test that the handles model cuda::mr::resource / async_resource (and the
// property sets) of the local CCCL. Runtime tests that need a GPU skip without
// one; the rest (equality, ownership, type checks, clean failure without a
// device) run everywhere.
#include "bfc/cuda_resource.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <type_traits>

#include "bfc/allocator.h"
#include "bfc/cuda_sub_allocator.h"
#include "bfc/host_sub_allocator.h"
#include "gtest/gtest.h"

namespace {

using bfc::CudaDeviceResource;
using bfc::CudaPinnedResource;
using cuda::mr::device_accessible;
using cuda::mr::host_accessible;

// --- the CCCL 3.0 concepts ---------------------------------------------------
static_assert(cuda::mr::resource<CudaDeviceResource>);
static_assert(cuda::mr::async_resource<CudaDeviceResource>);
static_assert(cuda::mr::resource_with<CudaDeviceResource, device_accessible>);
static_assert(
    cuda::mr::async_resource_with<CudaDeviceResource, device_accessible>);
// Device memory is not host-accessible, and says so.
static_assert(!cuda::mr::resource_with<CudaDeviceResource, host_accessible>);
static_assert(cuda::mr::async_resource<CudaPinnedResource>);
static_assert(cuda::mr::async_resource_with<
              CudaPinnedResource, device_accessible, host_accessible>);
// A copyable handle.
static_assert(std::is_copy_constructible_v<CudaDeviceResource>);
static_assert(std::is_copy_assignable_v<CudaDeviceResource>);
// Type-erased references bind to it.
static_assert(
    std::is_constructible_v<cuda::mr::async_resource_ref<device_accessible>,
                            CudaDeviceResource&>);
static_assert(std::is_constructible_v<
              cuda::mr::resource_ref<device_accessible, host_accessible>,
              CudaPinnedResource&>);
static_assert(!std::is_constructible_v<cuda::mr::resource_ref<host_accessible>,
                                       CudaDeviceResource&>);

// --- the newer CCCL spellings ------------------------------------------------
static_assert(std::is_same_v<decltype(std::declval<CudaDeviceResource&>()
                                          .allocate_sync(size_t{}, size_t{})),
                             void*>);
static_assert(
    std::is_same_v<decltype(std::declval<CudaDeviceResource&>().deallocate_sync(
                       nullptr, size_t{}, size_t{})),
                   void>);
static_assert(
    std::is_same_v<decltype(std::declval<CudaDeviceResource&>().allocate(
                       std::declval<cuda::stream_ref>(), size_t{}, size_t{})),
                   void*>);
static_assert(
    std::is_same_v<decltype(std::declval<CudaDeviceResource&>().deallocate(
                       std::declval<cuda::stream_ref>(), nullptr, size_t{},
                       size_t{})),
                   void>);

bool HaveGpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}

std::unique_ptr<bfc::Allocator> HostPool() {
  return std::make_unique<bfc::Allocator>(
      std::make_unique<bfc::HostSubAllocator>(), size_t{16} << 20, "host");
}

TEST(CudaResourceTest, EqualityIsAllocatorIdentityAndCopiesShareIt) {
  auto a = HostPool();
  auto b = HostPool();
  CudaDeviceResource ra(*a);
  CudaDeviceResource ra2(*a);
  CudaDeviceResource rb(*b);
  EXPECT_TRUE(ra == ra2);
  EXPECT_FALSE(ra != ra2);
  EXPECT_TRUE(ra != rb);
  CudaDeviceResource copy = rb;
  EXPECT_TRUE(copy == rb);
  copy = ra;
  EXPECT_TRUE(copy == ra);
  EXPECT_EQ(&copy.allocator(), a.get());
}

TEST(CudaResourceTest, SharedOwnershipKeepsTheAllocatorAlive) {
  std::shared_ptr<bfc::Allocator> pool = HostPool();
  std::weak_ptr<bfc::Allocator> weak = pool;
  CudaPinnedResource r(std::move(pool));
  {
    CudaPinnedResource copy = r;
    EXPECT_EQ(weak.use_count(), 2);
  }
  EXPECT_EQ(weak.use_count(), 1);
  r = CudaPinnedResource(*HostPool());  // drops the last owner (the temporary
                                        // pool dies at once: never used)
  EXPECT_TRUE(weak.expired());
}

TEST(CudaResourceTest, RefusesAnAllocatorOfTheWrongMemoryType) {
  auto pool = HostPool();  // pageable host memory: neither device nor pinned
  CudaDeviceResource device(*pool);
  CudaPinnedResource pinned(*pool);
  EXPECT_FALSE(CudaDeviceResource::Serves(*pool));
  EXPECT_FALSE(CudaPinnedResource::Serves(*pool));
  EXPECT_EQ(device.allocate(1024, 256), nullptr);
  EXPECT_EQ(pinned.allocate_sync(1024), nullptr);
  cuda::mr::resource_ref<device_accessible> ref{device};
  EXPECT_EQ(ref.allocate(1024, 256), nullptr);
  EXPECT_EQ(pool->GetStats()->num_allocs, 0);
  EXPECT_EQ(pool->GetStats()->pool_bytes, 0);
}

TEST(CudaResourceTest, WithoutAGpuAllocationFailsCleanly) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present";
  bfc::Allocator::Options opts;
  opts.allow_retry_on_failure = false;  // nothing to wait for
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{64} << 20, "gpu0", opts);
  CudaDeviceResource mr(pool);
  EXPECT_TRUE(CudaDeviceResource::Serves(pool));
  cuda::mr::async_resource_ref<device_accessible> ref{mr};
  const cuda::stream_ref stream{cudaStream_t{}};
  EXPECT_EQ(ref.allocate_async(1024, 256, stream), nullptr);
  EXPECT_EQ(mr.allocate(stream, 1024), nullptr);
  mr.deallocate_async(nullptr, 0, 256, stream);  // a no-op, no sync attempted
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
  EXPECT_GE(pool.GetStats()->num_ooms, 1);
}

TEST(CudaResourceTest, DeviceAllocateAndStreamOrderedFree) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{256} << 20, "gpu0");
  CudaDeviceResource mr(pool);
  cuda::mr::async_resource_ref<device_accessible> ref{mr};
  cudaStream_t raw = nullptr;
  ASSERT_EQ(cudaStreamCreate(&raw), cudaSuccess);
  const cuda::stream_ref stream{raw};

  void* p = ref.allocate_async(size_t{32} << 20, 4096, stream);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  // Queue work on the stream that uses the memory, then free it async: the
  // free must wait for that work, so the stream is idle when it returns.
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(cudaMemsetAsync(p, i, size_t{32} << 20, raw), cudaSuccess);
  }
  ref.deallocate_async(p, size_t{32} << 20, 4096, stream);
  EXPECT_EQ(cudaStreamQuery(raw), cudaSuccess);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);

  // The synchronous and newer spellings.
  void* q = mr.allocate_sync(1000);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(cudaMemset(q, 0, 1000), cudaSuccess);
  mr.deallocate_sync(q, 1000);
  void* r = mr.allocate(stream, 1000);
  ASSERT_NE(r, nullptr);
  mr.deallocate(stream, r, 1000);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
  EXPECT_EQ(pool.GetStats()->num_invalid_frees, 0);
  EXPECT_EQ(cudaStreamDestroy(raw), cudaSuccess);
}

TEST(CudaResourceTest, PinnedMemoryIsHostWritable) {
  if (!HaveGpu()) GTEST_SKIP() << "no CUDA device";
  bfc::Allocator pool(std::make_unique<bfc::CudaPinnedSubAllocator>(),
                      size_t{64} << 20, "pinned");
  CudaPinnedResource mr(pool);
  cuda::mr::resource_ref<host_accessible, device_accessible> ref{mr};
  auto* p = static_cast<unsigned char*>(ref.allocate(4096, 256));
  ASSERT_NE(p, nullptr);
  for (int i = 0; i < 4096; ++i) p[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(p[4095], 255);
  ref.deallocate(p, 4096, 256);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
}

}  // namespace
