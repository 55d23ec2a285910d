// File: tests/allocator_retry_test.cc
// The out-of-memory retry: an allocation that failed waits up to
// retry_timeout, and everything that makes room wakes it (a free is covered by
// allocator_concurrency_test; here ReleaseFreeRegions -- bfc_empty_cache in
// the C ABI -- and a new region obtained by another thread). The wait itself
// is bounded by retry_timeout, not a multiple of it.
//
// The retry timeouts are far longer than a woken waiter needs, and the bounds
// are generous: a waiter that is not woken sleeps the whole timeout and fails
// the "well under" bound by seconds, not milliseconds.
#include <atomic>
#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"
#include "testing/fuse.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::Fuse;
using ::bfc::testing::LogCapture;

constexpr absl::Duration kLongRetry = absl::Seconds(20);
constexpr absl::Duration kWellUnderTheRetry = absl::Seconds(10);

// Blocks until some allocation of `alloc` is inside its retry wait: the
// counter is bumped under the allocator's lock right before the wait, which
// releases that lock, so once it is visible the waiter is waiting.
void AwaitWaiter(const Allocator& alloc) {
  while (alloc.GetStats()->num_retries < 1) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

TEST(AllocatorRetryTest, ReleaseFreeRegionsWakesAWaiter) {
  Fuse fuse(absl::Seconds(60), "ReleaseFreeRegionsWakesAWaiter");
  LogCapture log;
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                  4 * kMiB, "retry", o);
  // A fully free 2 MiB region: the limit has no room for 4 MiB beside it.
  void* a = alloc.AllocateRaw(256, 2 * kMiB);
  ASSERT_NE(a, nullptr);
  alloc.DeallocateRaw(a);
  void* got = nullptr;
  absl::Duration waited;
  std::thread waiter([&] {
    const absl::Time t0 = absl::Now();
    got = alloc.AllocateRaw(256, 4 * kMiB);
    waited = absl::Now() - t0;
  });
  AwaitWaiter(alloc);
  EXPECT_EQ(alloc.ReleaseFreeRegions(), 2 * kMiB);
  waiter.join();
  ASSERT_NE(got, nullptr);
  EXPECT_LT(waited, kWellUnderTheRetry) << "slept out the retry: not woken";
  EXPECT_EQ(alloc.GetStats()->num_ooms, 0);
  alloc.DeallocateRaw(got);
  EXPECT_TRUE(alloc.Validate().ok());
}

TEST(AllocatorRetryTest, ANewRegionTakenByAnotherThreadWakesAWaiter) {
  Fuse fuse(absl::Seconds(60), "ANewRegionTakenByAnotherThreadWakesAWaiter");
  LogCapture log;
  // Read under the allocator's lock (the fake is called with it held).
  std::atomic<bool> refuse{false};
  FakeSubAllocator::Options fo;
  fo.fail_if = [&](size_t, size_t) { return refuse.load(); };
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Allocator alloc(std::make_unique<FakeSubAllocator>(fo), 64 * kMiB, "retry",
                  o);
  void* hog = alloc.AllocateRaw(256, 2 * kMiB);  // fills region 1
  ASSERT_NE(hog, nullptr);
  refuse = true;  // the waiter's Extend fails
  void* got = nullptr;
  absl::Duration waited;
  std::thread waiter([&] {
    const absl::Time t0 = absl::Now();
    got = alloc.AllocateRaw(256, 1 * kMiB);
    waited = absl::Now() - t0;
  });
  AwaitWaiter(alloc);
  refuse = false;
  // This takes a 4 MiB region and uses 256 KiB of it: room for the waiter.
  void* small = alloc.AllocateRaw(256, 256 * kKiB);
  ASSERT_NE(small, nullptr);
  waiter.join();
  ASSERT_NE(got, nullptr);
  EXPECT_LT(waited, kWellUnderTheRetry) << "slept out the retry: not woken";
  for (void* p : {hog, small, got}) alloc.DeallocateRaw(p);
  EXPECT_TRUE(alloc.Validate().ok());
}

TEST(AllocatorRetryTest, TheWaitIsBoundedByTheRetryTimeout) {
  Fuse fuse(absl::Seconds(60), "TheWaitIsBoundedByTheRetryTimeout");
  LogCapture log;
  Allocator::Options o;
  o.allow_growth = false;
  const absl::Duration timeout = absl::Seconds(1);
  o.retry_timeout = timeout;
  Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                  8 * kMiB, "bounded", o);
  void* hog = alloc.AllocateRaw(256, 8 * kMiB);  // nobody frees it
  ASSERT_NE(hog, nullptr);
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(alloc.AllocateRaw(256, 4096), nullptr);
  const absl::Duration waited = absl::Now() - t0;
  // It waits (memory is held, a free could come) ...
  EXPECT_GE(waited, timeout - absl::Milliseconds(50));
  // ... for one retry_timeout, not two (generous for a loaded machine).
  EXPECT_LT(waited, timeout * 1.9);
  EXPECT_GE(alloc.GetStats()->num_retries, 1);
  EXPECT_EQ(alloc.GetStats()->num_ooms, 1);
  alloc.DeallocateRaw(hog);
}

}  // namespace
}  // namespace bfc
