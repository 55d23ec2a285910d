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

// The fake, reset; nullptr with the reason to skip in *why otherwise.
const testing::FakeCuda* RequireFake(std::string* why) {
  if (CudaDeviceCount(why) == 0) {
    *why = "no CUDA driver or device: " + *why;
    return nullptr;
  }
  const testing::FakeCuda* fake = testing::GetFake();
  if (fake == nullptr) {
    *why =
        "needs the fake driver (holding a stream's work); a real driver "
        "cannot be made to hold it";
    return nullptr;
  }
  fake->reset();
  return fake;
}

#define BFC_REQUIRE_FAKE(fake)                              \
  std::string fake##_why;                                   \
  const testing::FakeCuda* fake = RequireFake(&fake##_why); \
  if (fake == nullptr) GTEST_SKIP() << fake##_why

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
  const long created = fake->call_count("cuEventCreate");
  fake->hold_stream(s);
  absl::StatusOr<StreamOps::Event> e = (*ops)->RecordEvent(s);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(fake->call_count("cuEventCreate"), created + 1);
  EXPECT_EQ(*(*ops)->QueryEvent(*e), false);
  fake->release_stream(s);
  EXPECT_EQ(*(*ops)->QueryEvent(*e), true);
  (*ops)->ReleaseEvent(*e);
  absl::StatusOr<StreamOps::Event> again = (*ops)->RecordEvent(s);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *e);  // the pooled event, recorded again
  EXPECT_EQ(fake->call_count("cuEventCreate"), created + 1);
  EXPECT_EQ((*ops)->events_created(), 1);
  EXPECT_EQ((*ops)->events_recorded(), 2);
  (*ops)->ReleaseEvent(*again);
  EXPECT_EQ(d.destroy(s), CUDA_SUCCESS);
}

TEST(CudaStreamOpsTest, SynchronizeEventBlocksUntilTheStreamIsReleased) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream s = d.Make();
  auto ops = *CudaStreamOps::Create(0);
  fake->hold_stream(s);
  StreamOps::Event e = *ops->RecordEvent(s);
  std::atomic<bool> released{false};
  std::thread releaser([&] {
    // Only makes it likely that the main thread is already blocked; the
    // check below holds whatever the scheduling.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    released = true;
    fake->release_stream(s);
  });
  ASSERT_TRUE(ops->SynchronizeEvent(e).ok());
  EXPECT_TRUE(released.load()) << "returned before the stream's work was done";
  releaser.join();
  EXPECT_EQ(*ops->QueryEvent(e), true);
  // An event whose work is done does not block at all.
  EXPECT_TRUE(ops->SynchronizeEvent(e).ok());
  ops->ReleaseEvent(e);
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
  EXPECT_EQ(d.destroy(producer), CUDA_SUCCESS);
  EXPECT_EQ(d.destroy(consumer), CUDA_SUCCESS);
}

TEST(CudaStreamOpsTest, WaitsChainAcrossStreams) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream a = d.Make();
  CUstream b = d.Make();
  CUstream c = d.Make();
  auto ops = *CudaStreamOps::Create(0);
  // Recorded before the hold: complete, so waiting for it holds nothing up.
  StreamOps::Event before = *ops->RecordEvent(a);
  fake->hold_stream(a);
  ASSERT_TRUE(ops->StreamWaitEvent(c, before).ok());
  EXPECT_EQ(d.query(c), CUDA_SUCCESS);
  // c waits for b, which waited for a: c's later work waits for a.
  StreamOps::Event on_a = *ops->RecordEvent(a);
  ASSERT_TRUE(ops->StreamWaitEvent(b, on_a).ok());
  StreamOps::Event on_b = *ops->RecordEvent(b);
  ASSERT_TRUE(ops->StreamWaitEvent(c, on_b).ok());
  StreamOps::Event on_c = *ops->RecordEvent(c);
  // The wait is on on_a as recorded then: recording it again, elsewhere,
  // does not release b.
  ops->ReleaseEvent(on_a);
  StreamOps::Event reused = *ops->RecordEvent(c);
  EXPECT_EQ(reused, on_a);
  EXPECT_EQ(*ops->QueryEvent(on_b), false);
  EXPECT_EQ(*ops->QueryEvent(on_c), false);
  EXPECT_EQ(d.query(c), CUDA_ERROR_NOT_READY);
  fake->release_stream(a);
  EXPECT_EQ(*ops->QueryEvent(on_b), true);
  EXPECT_EQ(*ops->QueryEvent(on_c), true);
  EXPECT_EQ(d.query(b), CUDA_SUCCESS);
  EXPECT_EQ(d.query(c), CUDA_SUCCESS);
  // A hold that starts after the wait does not reach back: b's event from
  // before the new hold on a stays complete.
  fake->hold_stream(a);
  EXPECT_EQ(*ops->QueryEvent(on_b), true);
  fake->release_stream(a);
  for (StreamOps::Event e : {before, on_b, on_c, reused}) ops->ReleaseEvent(e);
  for (CUstream st : {a, b, c}) EXPECT_EQ(d.destroy(st), CUDA_SUCCESS);
}

// One CudaStreamOps shared by several threads (as by several allocators of
// one device): every record is counted, and the pool never holds more events
// than were in use at once.
TEST(CudaStreamOpsTest, ThreadsShareThePool) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  DriverStreams d;
  CUstream s = d.Make();
  auto ops = *CudaStreamOps::Create(0);
  const long created_before = fake->call_count("cuEventCreate");
  constexpr int kThreads = 4;
  constexpr int kRounds = 200;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      StreamId stream = t % 2 == 0 ? static_cast<StreamId>(s) : nullptr;
      for (int i = 0; i < kRounds; ++i) {
        absl::StatusOr<StreamOps::Event> e = ops->RecordEvent(stream);
        if (!e.ok() || !ops->QueryEvent(*e).ok()) {
          ++failures;
          continue;
        }
        ops->ReleaseEvent(*e);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ops->events_recorded(), kThreads * kRounds);
  EXPECT_GE(ops->events_created(), 1);
  EXPECT_LE(ops->events_created(), kThreads);
  EXPECT_EQ(fake->call_count("cuEventCreate") - created_before,
            ops->events_created());
  EXPECT_EQ(d.destroy(s), CUDA_SUCCESS);
}

// Pooled events are destroyed with the CudaStreamOps; events are made
// without timing (the cheapest kind).
TEST(CudaStreamOpsTest, EventsAreUntimedAndDestroyedWithThePool) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();
  auto elapsed =
      testing::DriverFunction<CUresult (*)(float*, CUevent, CUevent)>(
          "cuEventElapsedTime_v2");
  ASSERT_NE(elapsed, nullptr);
  auto ops = *CudaStreamOps::Create(0);
  StreamOps::Event a = *ops->RecordEvent(nullptr);
  StreamOps::Event b = *ops->RecordEvent(nullptr);
  float ms = -1;
  EXPECT_EQ(elapsed(&ms, static_cast<CUevent>(a), static_cast<CUevent>(b)),
            CUDA_ERROR_INVALID_HANDLE)
      << "timing is disabled";
  ops->ReleaseEvent(a);
  ops->ReleaseEvent(b);
  const long destroyed = fake->call_count("cuEventDestroy");
  ops.reset();
  EXPECT_EQ(fake->call_count("cuEventDestroy"), destroyed + 2);
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
  EXPECT_THAT(e.status().message(), HasSubstr("cuEventRecord(stream "));
  EXPECT_THAT(e.status().message(), HasSubstr("CUDA_ERROR_INVALID_HANDLE"));
  StreamOps::Event ok = *ops->RecordEvent(s);
  // The failed record's event went back to the pool and was used here.
  EXPECT_EQ(ops->events_created(), 1);
  fake->fail_call("cuEventQuery", 1, CUDA_ERROR_LAUNCH_FAILED);
  absl::StatusOr<bool> q = ops->QueryEvent(ok);
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(), HasSubstr("cuEventQuery"));
  EXPECT_THAT(q.status().message(), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  fake->fail_call("cuStreamWaitEvent", 1, CUDA_ERROR_INVALID_HANDLE);
  absl::Status w = ops->StreamWaitEvent(s, ok);
  EXPECT_THAT(w.message(), HasSubstr("cuStreamWaitEvent"));
  EXPECT_THAT(w.message(), HasSubstr("CUDA_ERROR_INVALID_HANDLE"));
  fake->fail_call("cuEventSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
  absl::Status y = ops->SynchronizeEvent(ok);
  EXPECT_THAT(y.message(), HasSubstr("cuEventSynchronize"));
  EXPECT_THAT(y.message(), HasSubstr("CUDA_ERROR_LAUNCH_FAILED"));
  ops->ReleaseEvent(ok);
  // A failed create leaves nothing behind; the next record creates one.
  const int64_t created = ops->events_created();
  fake->fail_call("cuEventCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
  StreamOps::Event first = *ops->RecordEvent(s);  // the pooled one
  absl::StatusOr<StreamOps::Event> second = ops->RecordEvent(s);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(second.status().message(), HasSubstr("cuEventCreate(device 0)"));
  EXPECT_EQ(ops->events_created(), created);
  ops->ReleaseEvent(first);
  EXPECT_EQ(d.destroy(s), CUDA_SUCCESS);
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
  EXPECT_EQ(d.destroy(s), CUDA_SUCCESS);
  // A destroyed stream is unknown too.
  EXPECT_EQ(wait(s, static_cast<CUevent>(e), 0), CUDA_ERROR_INVALID_HANDLE);
}

// The driver's context rules, which the fake enforces since a review found
// the library relying on their absence: an event is recorded only on a
// stream of its own context ("hEvent and hStream must be from the same
// context", cuda.h), and the default-stream handles need a current context.
TEST(CudaStreamOpsTest, TheFakeEnforcesContextRules) {
  BFC_REQUIRE_FAKE(fake);
  fake->set_device_count(2);
  using RetainFn = CUresult (*)(CUcontext*, CUdevice);
  using PushFn = CUresult (*)(CUcontext);
  using PopFn = CUresult (*)(CUcontext*);
  auto retain = testing::DriverFunction<RetainFn>("cuDevicePrimaryCtxRetain");
  auto push = testing::DriverFunction<PushFn>("cuCtxPushCurrent_v2");
  auto pop = testing::DriverFunction<PopFn>("cuCtxPopCurrent_v2");
  auto sync =
      testing::DriverFunction<CUresult (*)(CUstream)>("cuStreamSynchronize");
  DriverStreams d;
  CUcontext peer = nullptr;
  ASSERT_EQ(retain(&peer, 1), CUDA_SUCCESS);
  ASSERT_EQ(push(peer), CUDA_SUCCESS);
  CUstream on_peer = d.Make();
  CUcontext popped = nullptr;
  ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
  auto ops = *CudaStreamOps::Create(0);  // device 0's events
  absl::StatusOr<StreamOps::Event> e = ops->RecordEvent(on_peer);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()),
              HasSubstr("CUDA_ERROR_INVALID_HANDLE"));
  // A thread with no current context cannot name the default stream.
  std::thread fresh([&] {
    EXPECT_EQ(sync(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(d.query(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(sync(on_peer), CUDA_SUCCESS);  // its own stream carries one
  });
  fresh.join();
  EXPECT_EQ(d.destroy(on_peer), CUDA_SUCCESS);

  // Each context has its own default stream (the fake shared one between
  // devices, which would hide a wait on the wrong device's): work held on
  // device 1's leaves device 0's idle.
  std::thread per_device([&] {
    CUcontext zero = nullptr;
    ASSERT_EQ(retain(&zero, 0), CUDA_SUCCESS);
    ASSERT_EQ(push(peer), CUDA_SUCCESS);
    fake->hold_stream(nullptr);  // device 1's: its context is current
    EXPECT_EQ(d.query(nullptr), CUDA_ERROR_NOT_READY);
    EXPECT_EQ(d.query(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
    // The per-thread stream is another stream, and each thread has its own.
    EXPECT_EQ(d.query(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    fake->hold_stream(CU_STREAM_PER_THREAD);
    EXPECT_EQ(d.query(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
    void* mine = fake->stream_of(CU_STREAM_PER_THREAD);
    std::thread other([&] {
      ASSERT_EQ(push(peer), CUDA_SUCCESS);
      EXPECT_EQ(d.query(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
      fake->release_stream(mine);  // another thread's, by its name
      ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
    });
    other.join();
    EXPECT_EQ(d.query(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    ASSERT_EQ(push(zero), CUDA_SUCCESS);
    EXPECT_EQ(d.query(nullptr), CUDA_SUCCESS);
    EXPECT_EQ(sync(CU_STREAM_LEGACY), CUDA_SUCCESS);
    ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
    fake->release_stream(nullptr);
    EXPECT_EQ(d.query(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(pop(&popped), CUDA_SUCCESS);
  });
  per_device.join();
}

TEST(CudaStreamOpsTest, TheFakeRejectsDestroyedEvents) {
  BFC_REQUIRE_FAKE(fake);
  std::unique_ptr<Allocator> keep = Pool();  // primary context current
  auto create = testing::DriverFunction<CUresult (*)(CUevent*, unsigned)>(
      "cuEventCreate");
  auto destroy =
      testing::DriverFunction<CUresult (*)(CUevent)>("cuEventDestroy_v2");
  auto record =
      testing::DriverFunction<CUresult (*)(CUevent, CUstream)>("cuEventRecord");
  auto query = testing::DriverFunction<CUresult (*)(CUevent)>("cuEventQuery");
  auto sync =
      testing::DriverFunction<CUresult (*)(CUevent)>("cuEventSynchronize");
  auto wait =
      testing::DriverFunction<CUresult (*)(CUstream, CUevent, unsigned)>(
          "cuStreamWaitEvent");
  auto elapsed =
      testing::DriverFunction<CUresult (*)(float*, CUevent, CUevent)>(
          "cuEventElapsedTime_v2");
  ASSERT_TRUE(create && destroy && record && query && sync && wait && elapsed);
  CUevent e = nullptr;
  EXPECT_EQ(create(&e, 0x8), CUDA_ERROR_INVALID_VALUE);  // no such flag
  EXPECT_EQ(create(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  // A timed event can be timed: the check above is about the flag.
  CUevent timed = nullptr;
  ASSERT_EQ(create(&timed, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  float ms = -1;
  EXPECT_EQ(elapsed(&ms, timed, timed), CUDA_ERROR_INVALID_HANDLE)
      << "never recorded";
  ASSERT_EQ(record(timed, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(elapsed(&ms, timed, timed), CUDA_SUCCESS);
  EXPECT_EQ(destroy(timed), CUDA_SUCCESS);

  ASSERT_EQ(create(&e, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(record(e, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(destroy(e), CUDA_SUCCESS);
  EXPECT_EQ(record(e, nullptr), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(query(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(sync(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(wait(nullptr, e, 0), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(destroy(e), CUDA_ERROR_INVALID_HANDLE);
  // Never handed out again.
  CUevent next = nullptr;
  ASSERT_EQ(create(&next, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_NE(next, e);
  EXPECT_EQ(destroy(next), CUDA_SUCCESS);
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
