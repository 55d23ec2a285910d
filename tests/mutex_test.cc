// File: tests/mutex_test.cc
// The library's one lock on its own: mutual exclusion under contention (the
// futex slow path: spinning, sleeping, waking), the condition variable's
// signal and deadline, and a constant-initialized global.
//
// Under ThreadSanitizer (the `tsan` preset, label concurrency) the same tests
// check that TSan sees this lock: data guarded only by it, handed between
// threads by Lock/Unlock or by a CondVar wait, must draw no report
// (halt_on_error=1 fails the test otherwise). The death tests at the end run
// only under TSan and check the other direction: an unguarded access is
// reported with the lock listed as held by the guarded side, and taking two
// locks in both orders is reported as a lock-order inversion. Both need the
// __tsan_mutex_* hooks: without them TSan would still see the lock's atomics
// (so the positive tests alone would pass), but it would not know a lock is
// held, nor run its deadlock detector on it.
#include "bfc/internal/mutex.h"

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "testing/fuse.h"

namespace bfc::internal {
namespace {

using ::bfc::testing::Fuse;

TEST(MutexTest, ExcludesUnderContention) {
  Fuse fuse(absl::Seconds(60), "MutexTest.ExcludesUnderContention");
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

// A sleeper normally looks again every millisecond even unwoken, which would
// hide a lost wake-up; these tests push that past the fuse.
struct NoTimedLooks {
  NoTimedLooks() { SetMutexMaxSleepForTesting(int64_t{600} * 1000000000); }
  ~NoTimedLooks() { SetMutexMaxSleepForTesting(-1); }
};

// Holds longer than a waiter spins (~50 us), so waiters sleep in the futex
// and every wake-up matters: Unlock has no fence of its own (the sleepers'
// asymmetric fence stands in), and the Unlock that wakes one sleeper hands
// it the duty of waking the next. A lost wake-up leaves a thread asleep on a
// free lock: the fuse fires.
TEST(MutexTest, NoWakeUpIsLostWhenWaitersSleep) {
  Fuse fuse(absl::Seconds(60), "MutexTest.NoWakeUpIsLostWhenWaitersSleep");
  NoTimedLooks no_backstop;
  Mutex mu;
  int64_t counter = 0;  // guarded by mu
  constexpr int kThreads = 8;
  constexpr int kIters = 400;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kIters; ++i) {
        MutexLock lock(&mu);
        ++counter;
        if ((i + t) % 16 == 0) absl::SleepFor(absl::Microseconds(200));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(counter, int64_t{kThreads} * kIters);
}

// Every waiter asleep behind one long hold, then one Unlock: the woken
// thread, taking the lock while others still sleep, must raise the flag so
// that its own Unlock wakes the next, and so on down the line. Repeated so
// that the waiters also arrive while the chain is running.
TEST(MutexTest, OneUnlockReleasesAChainOfSleepers) {
  Fuse fuse(absl::Seconds(60), "MutexTest.OneUnlockReleasesAChainOfSleepers");
  NoTimedLooks no_backstop;
  Mutex mu;
  constexpr int kWaiters = 7;
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> done{0};
    std::vector<std::thread> waiters;
    mu.Lock();
    for (int t = 0; t < kWaiters; ++t) {
      waiters.emplace_back([&] {
        MutexLock lock(&mu);
        done.fetch_add(1, std::memory_order_relaxed);
      });
    }
    // Long enough for every waiter to spin out and sleep.
    absl::SleepFor(absl::Milliseconds(5));
    mu.Unlock();
    for (std::thread& t : waiters) t.join();
    EXPECT_EQ(done.load(), kWaiters);
  }
}

// The only ordering between the two threads is the lock: the flag is relaxed,
// which TSan treats as no synchronization at all.
TEST(MutexTest, UnlockThenLockOrdersPlainData) {
  Fuse fuse(absl::Seconds(60), "MutexTest.UnlockThenLockOrdersPlainData");
  Mutex mu;
  int data = 0;  // guarded by mu
  std::atomic<bool> written{false};
  std::thread writer([&] {
    {
      MutexLock lock(&mu);
      data = 42;
    }
    written.store(true, std::memory_order_relaxed);
  });
  while (!written.load(std::memory_order_relaxed)) std::this_thread::yield();
  {
    MutexLock lock(&mu);
    EXPECT_EQ(data, 42);
    data = 7;
  }
  writer.join();
}

ABSL_CONST_INIT Mutex global_mu(absl::kConstInit);
int64_t global_counter = 0;  // guarded by global_mu

TEST(MutexTest, ConstantInitializedGlobalExcludes) {
  Fuse fuse(absl::Seconds(60), "MutexTest.ConstantInitializedGlobalExcludes");
  constexpr int kThreads = 4;
  constexpr int kIters = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kIters; ++i) {
        MutexLock lock(&global_mu);
        ++global_counter;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MutexLock lock(&global_mu);
  EXPECT_EQ(global_counter, int64_t{kThreads} * kIters);
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
  Fuse fuse(absl::Seconds(60), "CondVarTest.SignalAllWakesEveryWaiter");
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

// A producer/consumer hand-off through wait and signal, many times over: the
// payload is plain memory, ordered only by the mutex the wait releases and
// re-acquires.
TEST(CondVarTest, WaitAndSignalHandOffPlainData) {
  Fuse fuse(absl::Seconds(60), "CondVarTest.WaitAndSignalHandOffPlainData");
  Mutex mu;
  CondVar cv;
  int payload = 0;    // guarded by mu
  bool full = false;  // guarded by mu
  constexpr int kRounds = 2000;
  std::thread consumer([&] {
    for (int i = 1; i <= kRounds; ++i) {
      MutexLock lock(&mu);
      while (!full) cv.WaitWithDeadline(&mu, absl::InfiniteFuture());
      EXPECT_EQ(payload, i);
      full = false;
      cv.SignalAll();
    }
  });
  for (int i = 1; i <= kRounds; ++i) {
    MutexLock lock(&mu);
    while (full) cv.WaitWithDeadline(&mu, absl::InfiniteFuture());
    payload = i;
    full = true;
    cv.SignalAll();
  }
  consumer.join();
  MutexLock lock(&mu);
  EXPECT_FALSE(full);
}

#if defined(BFC_INTERNAL_TSAN)

// The child half of a death test: TSan prints its report to stderr and, with
// or without halt_on_error, exits with its exitcode (66) instead of 0.
[[noreturn]] void ExitCleanly() { std::exit(0); }

TEST(MutexTsanDeathTest, UnguardedAccessIsReportedWithTheHeldLock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Mutex mu;
        int data = 0;
        std::atomic<bool> written{false};
        std::thread writer([&] {
          {
            MutexLock lock(&mu);
            data = 1;
          }
          written.store(true, std::memory_order_relaxed);
        });
        while (!written.load(std::memory_order_relaxed)) {
          std::this_thread::yield();
        }
        data = 2;  // the race: no lock on this side
        writer.join();
        ExitCleanly();
      },
      ::testing::ExitedWithCode(66),
      "ThreadSanitizer: data race(.|\n)*\\(mutexes: write M[0-9]+\\)");
}

TEST(MutexTsanDeathTest, LockOrderInversionIsReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Mutex outer;
        Mutex inner;
        // Never at the same time, so nothing deadlocks; TSan's lock graph
        // still has a cycle.
        std::thread([&] {
          MutexLock a(&outer);
          MutexLock b(&inner);
        }).join();
        std::thread([&] {
          MutexLock b(&inner);
          MutexLock a(&outer);
        }).join();
        ExitCleanly();
      },
      ::testing::ExitedWithCode(66),
      "ThreadSanitizer: lock-order-inversion \\(potential deadlock\\)");
}

#endif  // BFC_INTERNAL_TSAN

}  // namespace
}  // namespace bfc::internal
