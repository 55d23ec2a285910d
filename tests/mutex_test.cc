// File: tests/mutex_test.cc
// The allocator's lock on its own: mutual exclusion under contention (the
// futex slow path: spinning, sleeping, waking), and the condition variable's
// signal and deadline.
#include "bfc/internal/mutex.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace bfc::internal {
namespace {

TEST(MutexTest, ExcludesUnderContention) {
  Mutex mu;
  int64_t counter = 0;  // unsynchronised but for `mu`
  int inside = 0;
  std::atomic<bool> overlap{false};
  constexpr int kThreads = 8;
  constexpr int kIters = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        MutexLock lock(&mu);
        if (++inside != 1) overlap = true;
        ++counter;
        // Hold the lock a little now and then, so others spin out and sleep.
        if (i % 512 == 0) std::this_thread::yield();
        --inside;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(overlap.load());
  EXPECT_EQ(counter, int64_t{kThreads} * kIters);
}

TEST(CondVarTest, WaitEndsAtTheDeadlineWithTheLockHeld) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  while (absl::Now() < start + absl::Milliseconds(50)) {
    cv.WaitWithDeadline(&mu, start + absl::Milliseconds(50));
  }
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(50));
  // A deadline in the past returns at once.
  cv.WaitWithDeadline(&mu, start);
}

TEST(CondVarTest, SignalAllWakesEveryWaiter) {
  Mutex mu;
  CondVar cv;
  bool go = false;  // guarded by mu
  int woken = 0;    // guarded by mu
  constexpr int kWaiters = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kWaiters; ++t) {
    threads.emplace_back([&] {
      MutexLock lock(&mu);
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (!go && absl::Now() < deadline) cv.WaitWithDeadline(&mu, deadline);
      if (go) ++woken;
    });
  }
  absl::SleepFor(absl::Milliseconds(20));
  {
    MutexLock lock(&mu);
    go = true;
    cv.SignalAll();
  }
  const absl::Time start = absl::Now();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(woken, kWaiters);
  // Woken by the signal, not by the 30 s deadline.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace bfc::internal
