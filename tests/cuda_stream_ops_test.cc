// File: tests/cuda_stream_ops_test.cc
// -----------------------------------------------------------------------------
//
// bfc::CudaStreamOps and stream-ordered reuse on the driver's streams: the
// fake driver in CI (label cuda; work stays pending while a test holds a
// stream, and cuStreamWaitEvent makes later work depend on an event), a GPU
// with BFC_TEST_REAL_CUDA=ON (the hold-based tests then skip).
#include "bfc/cuda_stream_ops.h"

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/cuda_sub_allocator.h"
#include "fake_cuda/fake_cuda_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;

const testing::FakeCuda* RequireFake() {
  std::string why;
  if (CudaDeviceCount(&why) == 0) return nullptr;
  const testing::FakeCuda* fake = testing::GetFake();
  if (fake != nullptr) fake->reset();
  return fake;
}

#define BFC_REQUIRE_FAKE(fake)                                            \
  const testing::FakeCuda* fake = RequireFake();                          \
  if (fake == nullptr) {                                                  \
    GTEST_SKIP() << "needs the fake driver (holding a stream's work); a " \
                    "real driver cannot be made to hold it";              \
  }

// Streams made with the driver itself, in the primary context bfc uses.
struct DriverStreams {
  DriverStreams() {
    create = testing::DriverFunction<CUresult (*)(CUstream*, unsigned)>(
        "cuStreamCreate");
    destroy =
        testing::DriverFunction<CUresult (*)(CUstream)>("cuStreamDestroy_v2");
    query = testing::DriverFunction<CUresult (*)(CUstream)>("cuStreamQuery");
  }
  CUstream Make() {
    CUstream s = nullptr;
    EXPECT_EQ(create(&s, 0), CUDA_SUCCESS);
    return s;
  }
  CUresult (*create)(CUstream*, unsigned) = nullptr;
  CUresult (*destroy)(CUstream) = nullptr;
  CUresult (*query)(CUstream) = nullptr;
};

// A device pool with events; its first allocation makes the primary context
// current so that the test's streams can be created.
std::unique_ptr<Allocator> Pool(Allocator::Options o = Allocator::Options()) {
  o.allow_retry_on_failure = false;
  auto pool =
      std::make_unique<Allocator>(std::make_unique<CudaDeviceSubAllocator>(0),
                                  size_t{256} << 20, "gpu0", o);
  absl::StatusOr<std::unique_ptr<CudaStreamOps>> ops = CudaStreamOps::Create(0);
  EXPECT_TRUE(ops.ok()) << ops.status();
  EXPECT_TRUE(pool->SetStreamOps(*std::move(ops)).ok());
  void* warm = pool->AllocateRaw(256, 256);
  pool->DeallocateRaw(warm);
  return pool;
}

TEST(CudaStreamOpsTest, EventsFollowHeldWorkAndArePooled) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();  // primary context current
  DriverStreams d;
  CUstream s = d.Make();
  absl::StatusOr<std::unique_ptr<CudaStreamOps>> ops = CudaStreamOps::Create(0);
  ASSERT_TRUE(ops.ok()) << ops.status();
  fake->hold_stream(s);
  absl::StatusOr<StreamOps::Event> e = (*ops)->RecordEvent(s);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*(*ops)->QueryEvent(*e), false);
  fake->release_stream(s);
  EXPECT_EQ(*(*ops)->QueryEvent(*e), true);
  (*ops)->ReleaseEvent(*e);
  const long created = fake->call_count("cuEventCreate");
  absl::StatusOr<StreamOps::Event> again = (*ops)->RecordEvent(s);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *e);  // the pooled event, recorded again
  EXPECT_EQ(fake->call_count("cuEventCreate"), created);
  EXPECT_EQ((*ops)->events_created(), 1);
  EXPECT_EQ((*ops)->events_recorded(), 2);
  (*ops)->ReleaseEvent(*again);
  EXPECT_EQ(d.destroy(s), CUDA_SUCCESS);
}

TEST(CudaStreamOpsTest, AWaitMakesLaterWorkDependOnTheEvent) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream producer = d.Make();
  CUstream consumer = d.Make();
  auto ops = *CudaStreamOps::Create(0);
  fake->hold_stream(producer);
  StreamOps::Event e = *ops->RecordEvent(producer);
  ASSERT_TRUE(ops->StreamWaitEvent(consumer, e).ok());
  // The consumer is not held, but its later work waits for the producer.
  StreamOps::Event later = *ops->RecordEvent(consumer);
  EXPECT_EQ(*ops->QueryEvent(later), false);
  EXPECT_EQ(d.query(consumer), CUDA_ERROR_NOT_READY);
  // SynchronizeEvent blocks until another thread releases the producer.
  std::atomic<bool> released{false};
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    released = true;
    fake->release_stream(producer);
  });
  ASSERT_TRUE(ops->SynchronizeEvent(later).ok());
  EXPECT_TRUE(released.load());
  releaser.join();
  EXPECT_EQ(*ops->QueryEvent(later), true);
  EXPECT_EQ(d.query(consumer), CUDA_SUCCESS);
  ops->ReleaseEvent(e);
  ops->ReleaseEvent(later);
}

TEST(CudaStreamOpsTest, DriverFailuresNameTheCall) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream s = d.Make();
  auto ops = *CudaStreamOps::Create(0);
  fake->fail_call("cuEventRecord", 1, CUDA_ERROR_INVALID_HANDLE);
  absl::StatusOr<StreamOps::Event> e = ops->RecordEvent(s);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("cuEventRecord"));
  EXPECT_THAT(e.status().message(), HasSubstr("CUDA_ERROR_INVALID_HANDLE"));
  StreamOps::Event ok = *ops->RecordEvent(s);
  fake->fail_call("cuEventQuery", 1, CUDA_ERROR_LAUNCH_FAILED);
  absl::StatusOr<bool> q = ops->QueryEvent(ok);
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), HasSubstr("cuEventQuery"));
  fake->fail_call("cuStreamWaitEvent", 1, CUDA_ERROR_INVALID_HANDLE);
  absl::Status w = ops->StreamWaitEvent(s, ok);
  EXPECT_THAT(w.message(), HasSubstr("cuStreamWaitEvent"));
  fake->fail_call("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
  EXPECT_THAT(ops->SynchronizeEvent(ok).message(),
              HasSubstr("cuEventSynchronize"));
  ops->ReleaseEvent(ok);
  EXPECT_EQ(CudaStreamOps::Create(7).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(CudaStreamOpsTest, TheFakeChecksWaitArguments) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream s = d.Make();
  auto wait =
      testing::DriverFunction<CUresult (*)(CUstream, CUevent, unsigned)>(
          "cuStreamWaitEvent");
  ASSERT_NE(wait, nullptr);
  auto ops = *CudaStreamOps::Create(0);
  StreamOps::Event e = *ops->RecordEvent(s);
  EXPECT_EQ(wait(s, nullptr, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(wait(s, static_cast<CUevent>(e), 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(wait(reinterpret_cast<CUstream>(uintptr_t{0x1234560}),
                 static_cast<CUevent>(e), 0),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(wait(s, static_cast<CUevent>(e), 0), CUDA_SUCCESS);
  ops->ReleaseEvent(e);
}

// The scenario: memory freed on a stream whose work the driver holds
// is never handed to another stream before that work is done -- unless the
// other stream is made to wait for it (then the device orders them).
TEST(CudaStreamReuseTest, HeldWorkIsNotReusedByAnotherStreamUntilReleased) {
  BFC_REQUIRE_FAKE(fake);
  Allocator::Options o;
  o.reuse_allow_internal_dependencies = false;  // no waits: must not reuse
  std::unique_ptr<Allocator> pool = Pool(o);
  DriverStreams d;
  CUstream a = d.Make();
  CUstream b = d.Make();
  void* p = *pool->AllocateOnStream(a, size_t{1} << 20);
  fake->hold_stream(a);  // a kernel on `a` still uses p
  ASSERT_TRUE(pool->DeallocateOnStream(p, a).ok());
  void* q = *pool->AllocateOnStream(b, size_t{1} << 20);
  EXPECT_NE(q, p);
  ASSERT_TRUE(pool->DeallocateOnStream(q, b).ok());
  // Same-stream reuse: at once, with no driver call.
  const long records = fake->call_count("cuEventRecord");
  const long queries = fake->call_count("cuEventQuery");
  void* again = *pool->AllocateOnStream(a, size_t{1} << 20);
  EXPECT_EQ(again, p);
  EXPECT_EQ(fake->call_count("cuEventRecord"), records);
  EXPECT_EQ(fake->call_count("cuEventQuery"), queries);
  ASSERT_TRUE(pool->DeallocateOnStream(again, a).ok());
  fake->release_stream(a);  // the work is done
  // Once the memory b may use without asking runs out, bfc looks at a's
  // event, finds it complete, and reuses p.
  std::vector<void*> taken;
  while (taken.size() < 16 && (taken.empty() || taken.back() != p)) {
    taken.push_back(*pool->AllocateOnStream(b, size_t{1} << 20));
  }
  EXPECT_EQ(taken.back(), p) << "completed work's memory is reused";
  EXPECT_TRUE(pool->Validate().ok());
  for (void* t : taken) ASSERT_TRUE(pool->DeallocateOnStream(t, b).ok());
  EXPECT_EQ(pool->GetStreamStats().waits_inserted, 0);
  EXPECT_EQ(d.destroy(a), CUDA_SUCCESS);
  EXPECT_EQ(d.destroy(b), CUDA_SUCCESS);
}

TEST(CudaStreamReuseTest, AnotherStreamReusesHeldMemoryAfterAWait) {
  BFC_REQUIRE_FAKE(fake);
  // All three rules on; p is the whole first region (2 MiB), so no memory
  // b may take without waiting fits.
  std::unique_ptr<Allocator> pool = Pool();
  DriverStreams d;
  CUstream a = d.Make();
  CUstream b = d.Make();
  void* p = *pool->AllocateOnStream(a, size_t{2} << 20);
  fake->hold_stream(a);
  ASSERT_TRUE(pool->DeallocateOnStream(p, a).ok());
  const long waits = fake->call_count("cuStreamWaitEvent");
  void* q = *pool->AllocateOnStream(b, size_t{2} << 20);
  EXPECT_EQ(q, p);  // the best fit, after b waits for a
  EXPECT_EQ(fake->call_count("cuStreamWaitEvent"), waits + 1);
  // b's work now depends on a's: it cannot finish first.
  EXPECT_EQ(d.query(b), CUDA_ERROR_NOT_READY);
  fake->release_stream(a);
  EXPECT_EQ(d.query(b), CUDA_SUCCESS);
  ASSERT_TRUE(pool->DeallocateOnStream(q, b).ok());
  EXPECT_EQ(pool->GetStreamStats().waits_inserted, 1);
  ASSERT_TRUE(pool->ForgetStream(a).ok());
  ASSERT_TRUE(pool->ForgetStream(b).ok());
  EXPECT_EQ(d.destroy(a), CUDA_SUCCESS);
  EXPECT_EQ(d.destroy(b), CUDA_SUCCESS);
  EXPECT_TRUE(pool->Validate().ok());
}

}  // namespace
}  // namespace bfc
