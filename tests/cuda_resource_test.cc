// Tests for bfc/cuda_resource.h against the CCCL shipped with the CUDA
// toolkit. The concept checks are static_asserts: this file compiling is the
// test that the handles model cuda::mr::resource / async_resource (and the
// property sets) of the local CCCL. The runtime tests (label cuda) run against
// the fake driver in CI (tests/fake_cuda), which holds a stream's work until
// the test releases it, and against a GPU with BFC_TEST_REAL_CUDA=ON.
#include "bfc/cuda_resource.h"

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/cuda_stream_ops.h"
#include "bfc/cuda_sub_allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/pmr.h"
#include "fake_cuda/fake_cuda_testing.h"
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

// A CUDA driver with a device: the fake in CI (label cuda), a GPU with
// BFC_TEST_REAL_CUDA=ON.
void RequireDevice() {
  std::string why;
  ASSERT_GT(bfc::CudaDeviceCount(&why), 0)
      << "the cuda tests need a driver (the fake in CI): " << why;
  // Each test starts from the fake's defaults (one device, 8 GiB).
  if (bfc::testing::GetFake() != nullptr) bfc::testing::GetFake()->reset();
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

// A device that cannot serve (the fake with 512 bytes, less than any request
// after TF's back-off): nullptr, nothing throws, nothing counted as in use.
TEST(CudaResourceTest, AnExhaustedDeviceFailsCleanly) {
  RequireDevice();
  BFC_REQUIRE_FAKE_CUDA();
  bfc::testing::GetFake()->set_device_memory(0, 512);
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

// From a review: RMM's containers use what a resource's allocate returns
// without a check. OnFailure::kThrow makes a failed request throw
// std::bad_alloc (as CCCL's own and RMM's resources throw) through every
// allocation entry point and a resource_ref; 0 bytes is still no failure.
TEST(CudaResourceTest, OnFailureThrowThrowsThroughEveryEntryPoint) {
  RequireDevice();
  BFC_REQUIRE_FAKE_CUDA();
  bfc::testing::GetFake()->set_device_memory(0, 512);
  bfc::Allocator::Options opts;
  opts.allow_retry_on_failure = false;
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{64} << 20, "gpu0", opts);
  CudaDeviceResource mr(pool, CudaDeviceResource::OnFailure::kThrow);
  cuda::mr::async_resource_ref<device_accessible> ref{mr};
  const cuda::stream_ref stream{cudaStream_t{}};
  EXPECT_THROW((void)mr.allocate_sync(1024, 256), std::bad_alloc);
  EXPECT_THROW((void)mr.allocate_async(1024, 256, stream), std::bad_alloc);
  EXPECT_THROW((void)ref.allocate_async(1024, 256, stream), std::bad_alloc);
  EXPECT_THROW((void)mr.allocate(stream, 1024), std::bad_alloc);
  EXPECT_EQ(mr.allocate_sync(0, 256), nullptr);
  // A resource of the wrong kind throws too, and copies keep the policy.
  auto host = HostPool();
  CudaPinnedResource wrong(*host, CudaPinnedResource::OnFailure::kThrow);
  CudaPinnedResource copy = wrong;
  EXPECT_THROW((void)copy.allocate_sync(1024, 256), std::bad_alloc);
  // The default still returns nullptr, and equality is still the allocator.
  CudaDeviceResource quiet(pool);
  EXPECT_EQ(quiet.allocate_sync(1024, 256), nullptr);
  EXPECT_TRUE(quiet == mr);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
}

TEST(CudaResourceTest, DeviceAllocateAndStreamOrderedFree) {
  RequireDevice();
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{256} << 20, "gpu0");
  CudaDeviceResource mr(pool);
  cuda::mr::async_resource_ref<device_accessible> ref{mr};
  // Streams are made with the driver itself (the context is the one bfc's
  // first allocation made current).
  auto stream_create =
      bfc::testing::DriverFunction<CUresult (*)(CUstream*, unsigned)>(
          "cuStreamCreate");
  auto stream_query =
      bfc::testing::DriverFunction<CUresult (*)(CUstream)>("cuStreamQuery");
  auto stream_destroy = bfc::testing::DriverFunction<CUresult (*)(CUstream)>(
      "cuStreamDestroy_v2");
  ASSERT_NE(stream_create, nullptr);
  ASSERT_NE(stream_query, nullptr);
  ASSERT_NE(stream_destroy, nullptr);
  void* first = mr.allocate_sync(256);  // makes the primary context current
  ASSERT_NE(first, nullptr);
  mr.deallocate_sync(first, 256);
  CUstream raw = nullptr;
  ASSERT_EQ(stream_create(&raw, 0), CUDA_SUCCESS);
  const cuda::stream_ref stream{raw};

  void* p = ref.allocate_async(size_t{32} << 20, 4096, stream);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  // Work queued on the stream that still uses the memory (the fake holds
  // the stream; a test thread releases it later): the free must wait for it,
  // so the stream is idle when deallocate_async returns.
  std::thread releaser;
  std::atomic<bool> released{false};
  if (bfc::testing::GetFake() != nullptr) {
    bfc::testing::GetFake()->hold_stream(raw);
    EXPECT_EQ(stream_query(raw), CUDA_ERROR_NOT_READY);
    releaser = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      released = true;
      bfc::testing::GetFake()->release_stream(raw);
    });
  }
  ref.deallocate_async(p, size_t{32} << 20, 4096, stream);
  if (releaser.joinable()) {
    EXPECT_TRUE(released.load());
    releaser.join();
  }
  EXPECT_EQ(stream_query(raw), CUDA_SUCCESS);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);

  // The synchronous and newer spellings.
  void* q = mr.allocate_sync(1000);
  ASSERT_NE(q, nullptr);
  mr.deallocate_sync(q, 1000);
  void* r = mr.allocate(stream, 1000);
  ASSERT_NE(r, nullptr);
  mr.deallocate(stream, r, 1000);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
  EXPECT_EQ(pool.GetStats()->num_invalid_frees, 0);
  EXPECT_EQ(stream_destroy(raw), CUDA_SUCCESS);
}

// A stream whose synchronization fails (a broken context): the memory is
// deliberately not returned, and the failure is logged with the CUDA error.
TEST(CudaResourceTest, AFailedStreamSyncKeepsTheMemoryOut) {
  RequireDevice();
  BFC_REQUIRE_FAKE_CUDA();
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{64} << 20, "gpu0");
  CudaDeviceResource mr(pool);
  void* p = mr.allocate_async(4096, 256, cuda::stream_ref{cudaStream_t{}});
  ASSERT_NE(p, nullptr);
  std::string logged;
  bfc::LogSink previous = bfc::SetLogSink(
      [&](bfc::LogSeverity, std::string_view m) { logged += std::string(m); });
  bfc::testing::GetFake()->fail_call("cuStreamSynchronize", 1,
                                     CUDA_ERROR_ILLEGAL_ADDRESS);
  mr.deallocate_async(p, 4096, 256, cuda::stream_ref{cudaStream_t{}});
  bfc::SetLogSink(previous);
  EXPECT_NE(logged.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos)
      << logged;
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 4096);
  mr.deallocate_sync(p, 4096, 256);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
}

TEST(CudaResourceTest, PinnedMemoryIsHostWritable) {
  RequireDevice();
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

CUstream NewStream() {
  auto create = bfc::testing::DriverFunction<CUresult (*)(CUstream*, unsigned)>(
      "cuStreamCreate");
  CUstream s = nullptr;
  EXPECT_EQ(create(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  return s;
}

// Ends the fake's hold on `s` after 100 ms, setting *released first: a
// kernel on `s` that finishes while the test tries to reuse its memory.
std::thread ReleaseLater(CUstream s, std::atomic<bool>* released) {
  return std::thread([s, released] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    *released = true;
    bfc::testing::GetFake()->release_stream(s);
  });
}

// From a review: with events, the synchronous allocate handed out memory a
// stream's work still used (a pinned buffer the host writes while a copy on
// that stream reads it): it waited for that work only on the legacy stream.
// Memory from allocate_sync is now ready for the host and any stream: it is
// the other memory, or the same once the stream's work is done.
TEST(CudaResourceTest, AllocateSyncNeverGetsMemoryAStreamStillUses) {
  RequireDevice();
  if (bfc::testing::GetFake() == nullptr) GTEST_SKIP() << "holds a stream";
  for (bool pinned : {true, false}) {
    SCOPED_TRACE(pinned ? "pinned" : "device");
    std::unique_ptr<bfc::SubAllocator> sub;
    if (pinned) {
      sub = std::make_unique<bfc::CudaPinnedSubAllocator>();
    } else {
      sub = std::make_unique<bfc::CudaDeviceSubAllocator>(0);
    }
    bfc::Allocator pool(std::move(sub), size_t{64} << 20, "events");
    auto ops = bfc::CudaStreamOps::Create(0);
    ASSERT_TRUE(ops.ok()) << ops.status();
    ASSERT_TRUE(pool.SetStreamOps(*std::move(ops)).ok());
    auto sync_alloc = [&](size_t n) {
      return pinned ? CudaPinnedResource(pool).allocate_sync(n, 256)
                    : CudaDeviceResource(pool).allocate_sync(n, 256);
    };
    void* warm = sync_alloc(256);
    ASSERT_NE(warm, nullptr);
    CUstream s = NewStream();
    const cuda::stream_ref stream{s};
    void* p =
        pinned ? CudaPinnedResource(pool).allocate_async(1 << 20, 256, stream)
               : CudaDeviceResource(pool).allocate_async(1 << 20, 256, stream);
    ASSERT_NE(p, nullptr);
    bfc::testing::GetFake()->hold_stream(s);  // a copy on s still reads p
    if (pinned) {
      CudaPinnedResource(pool).deallocate_async(p, 1 << 20, 256, stream);
    } else {
      CudaDeviceResource(pool).deallocate_async(p, 1 << 20, 256, stream);
    }
    std::atomic<bool> released{false};
    std::thread releaser = ReleaseLater(s, &released);
    // 1 MiB at a time until p comes back (the pool then has no other
    // fit, or p's stream is done): never before s released it.
    std::vector<void*> others;
    while (void* o = sync_alloc(1 << 20)) {
      if (o == p) {
        EXPECT_TRUE(released.load()) << "p handed out while s still used it";
        others.push_back(o);
        break;
      }
      others.push_back(o);
      if (others.size() > 200) break;
    }
    releaser.join();
    for (void* o : others) {
      if (pinned) {
        CudaPinnedResource(pool).deallocate_sync(o, 1 << 20);
      } else {
        CudaDeviceResource(pool).deallocate_sync(o, 1 << 20);
      }
    }
    pool.DeallocateRaw(warm);
    EXPECT_TRUE(pool.Validate().ok()) << pool.Validate();
  }
}

// From a review: bfc::PmrResource over the same pinned pool handed host
// containers memory a held stream's copy still read (its allocation was not
// host-ready, unlike the CUDA resources' allocate).
TEST(CudaResourceTest, PmrOverAPinnedPoolNeverGetsMemoryAStreamStillUses) {
  RequireDevice();
  if (bfc::testing::GetFake() == nullptr) GTEST_SKIP() << "holds a stream";
  bfc::Allocator pool(std::make_unique<bfc::CudaPinnedSubAllocator>(),
                      size_t{64} << 20, "pinned");
  auto ops = bfc::CudaStreamOps::Create(0);
  ASSERT_TRUE(ops.ok()) << ops.status();
  ASSERT_TRUE(pool.SetStreamOps(*std::move(ops)).ok());
  bfc::PmrResource host(pool);
  CudaPinnedResource mr(pool);
  void* warm = host.allocate(256, 256);
  CUstream s = NewStream();
  const cuda::stream_ref stream{s};
  void* p = mr.allocate_async(1 << 20, 256, stream);
  ASSERT_NE(p, nullptr);
  bfc::testing::GetFake()->hold_stream(s);  // a copy on s still reads p
  mr.deallocate_async(p, 1 << 20, 256, stream);
  std::atomic<bool> released{false};
  std::thread releaser = ReleaseLater(s, &released);
  std::vector<void*> others;
  for (int i = 0; i < 200; ++i) {
    void* o = nullptr;
    try {
      o = host.allocate(1 << 20, 256);
    } catch (const std::bad_alloc&) {
      break;
    }
    others.push_back(o);
    if (o == p) {
      EXPECT_TRUE(released.load()) << "p handed out while s still used it";
      break;
    }
  }
  releaser.join();
  for (void* o : others) host.deallocate(o, 1 << 20, 256);
  host.deallocate(warm, 256, 256);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate();
}

// allocate_async on cudaStreamPerThread is the synchronous allocate: the
// memory is ready for any stream and the host. Memory a held stream's work
// still uses is handed out only once that work is done (the host waited),
// not as soon as a stream wait on the per-thread handle is queued: that
// handle names another stream on every thread.
TEST(CudaResourceTest, APerThreadAllocationWaitsForOtherStreamsWork) {
  RequireDevice();
  if (bfc::testing::GetFake() == nullptr) GTEST_SKIP() << "holds a stream";
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{64} << 20, "per-thread-ready");
  auto ops = bfc::CudaStreamOps::Create(0);
  ASSERT_TRUE(ops.ok()) << ops.status();
  ASSERT_TRUE(pool.SetStreamOps(*std::move(ops)).ok());
  CudaDeviceResource mr(pool);
  void* warm = mr.allocate_sync(256, 256);  // and a context for NewStream
  ASSERT_NE(warm, nullptr);
  CUstream s = NewStream();
  const cuda::stream_ref stream{s};
  void* p = mr.allocate_async(1 << 20, 256, stream);
  ASSERT_NE(p, nullptr);
  bfc::testing::GetFake()->hold_stream(s);  // a kernel on s still uses p
  mr.deallocate_async(p, 1 << 20, 256, stream);
  std::atomic<bool> released{false};
  std::thread releaser = ReleaseLater(s, &released);
  // p is the pool's only fit (the rest of its region is 256 bytes short).
  void* q =
      mr.allocate_async(1 << 20, 256, cuda::stream_ref{cudaStreamPerThread});
  ASSERT_EQ(q, p);
  EXPECT_TRUE(released.load()) << "p handed out while s still used it";
  releaser.join();
  mr.deallocate_sync(q, 1 << 20);
  mr.deallocate_sync(warm, 256);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate();
}

// From a review: cudaStreamPerThread is one handle for a different stream on
// each thread. Memory one thread freed on its stream was reused by another
// thread's at once, with no event and no wait. Its frees now synchronize
// the calling thread's stream first, and its allocations are ready for any
// stream.
TEST(CudaResourceTest, ThePerThreadStreamIsNotOneStream) {
  RequireDevice();
  if (bfc::testing::GetFake() == nullptr) GTEST_SKIP() << "counts calls";
  bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
                      size_t{64} << 20, "per-thread");
  auto ops = bfc::CudaStreamOps::Create(0);
  ASSERT_TRUE(ops.ok()) << ops.status();
  ASSERT_TRUE(pool.SetStreamOps(*std::move(ops)).ok());
  CudaDeviceResource mr(pool);
  const cuda::stream_ref per_thread{cudaStreamPerThread};
  void* p = nullptr;
  long syncs = 0;
  std::thread a([&] {
    p = mr.allocate_async(1 << 20, 256, per_thread);
    const long before =
        bfc::testing::GetFake()->call_count("cuStreamSynchronize");
    mr.deallocate_async(p, 1 << 20, 256, per_thread);
    syncs = bfc::testing::GetFake()->call_count("cuStreamSynchronize") - before;
  });
  a.join();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(syncs, 1);  // thread a's stream, before the memory went back
  void* q = nullptr;
  std::thread b([&] { q = mr.allocate_async(1 << 20, 256, per_thread); });
  b.join();
  ASSERT_NE(q, nullptr);
  mr.deallocate_sync(q, 1 << 20);
  EXPECT_EQ(pool.GetStats()->bytes_in_use, 0);
  EXPECT_TRUE(pool.Validate().ok()) << pool.Validate();
}

}  // namespace
