// Adversarial tests of the deferred log delivery (Allocator::Lock,
// DeferLog, ScopedLogDeferral), from a review of it: each failed (or hung,
// caught by its Fuse) on the first version of the deferral.

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"
#include "testing/fuse.h"
#include "testing/reentrant_sink.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::Fuse;
using ::bfc::testing::ReentrantSink;

// SubAllocator::CheckHeldRegions is user code the allocator calls under its
// lock (ValidateLocked: Validate(), and MaybeValidate after every mutating
// call at BFC_CHECK_LEVEL 2): what it logs is queued (it reached the sink
// with the lock held).
class CheckingSubAllocator : public HostSubAllocator {
 public:
  absl::Status CheckHeldRegions(
      const std::vector<std::pair<uintptr_t, uintptr_t>>& regions)
      const override {
    Log(LogSeverity::kInfo, "CheckingSubAllocator: checked " +
                                std::to_string(regions.size()) +
                                " region(s) for 'deferral'");
    return absl::OkStatus();
  }
};

TEST(LogDeferralAdversarialTest, WhatCheckHeldRegionsLogsIsQueued) {
  Fuse fuse(absl::Seconds(10), "WhatCheckHeldRegionsLogsIsQueued");
  ReentrantSink sink("deferral");
  Allocator a(std::make_unique<CheckingSubAllocator>(), 64 * kMiB, "deferral");
  void* p = a.AllocateRaw(256, kMiB);
  ASSERT_NE(p, nullptr);
  sink.Watch(&a);
  // The sink's GetStats self-deadlocks on the lock Validate holds.
  EXPECT_TRUE(a.Validate().ok());
  sink.Watch(nullptr);
  EXPECT_GE(sink.calls(), 1);
  a.DeallocateRaw(p);
}

// The message before abort_on_invalid_input aborts is printed also when the
// offending allocator is called from user code running under another
// allocator's lock (a sub-allocator backed by a bfc allocator): its Log()
// calls go into the outer allocator's queue (ScopedLogDeferral), which no
// unlock sends once std::abort() runs. The process died silently.
class NestedSubAllocator : public HostSubAllocator {
 public:
  explicit NestedSubAllocator(Allocator* inner) : inner_(inner) {}
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    static int not_ours = 0;
    inner_->DeallocateRaw(&not_ours);  // a caller's mistake: aborts
    return HostSubAllocator::Alloc(alignment, num_bytes, bytes_received);
  }

 private:
  Allocator* const inner_;
};

TEST(LogDeferralAdversarialDeathTest, ANestedAbortStillPrintsItsReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SetLogSink(LogSink());  // the default: stderr
        Allocator::Options io;
        io.abort_on_invalid_input = true;
        Allocator inner(std::make_unique<HostSubAllocator>(), 64 * kMiB,
                        "inner", io);
        Allocator outer(std::make_unique<NestedSubAllocator>(&inner), 64 * kMiB,
                        "outer");
        (void)outer.AllocateRaw(256, kMiB);
      },
      "aborting: Options::abort_on_invalid_input is set");
}

// The retry wait sends what was queued before it sleeps, unlocking and
// relocking. A free made in that window (while the sink runs) must still
// wake it: it went to sleep without looking again and slept out its whole
// retry_timeout. The queue is non-empty whenever the failed attempt logged:
// a sub-allocator that logs its failures (as CudaSubAllocator and
// CudaVmmSubAllocator do) is enough.
class LogsItsFailures : public FakeSubAllocator {
 public:
  using FakeSubAllocator::FakeSubAllocator;
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    void* p = FakeSubAllocator::Alloc(alignment, num_bytes, bytes_received);
    if (p == nullptr) {
      Log(LogSeverity::kWarning, "LogsItsFailures: no memory for 'retry'");
    }
    return p;
  }
};

TEST(LogDeferralAdversarialTest, ARetryWaitSeesAFreeMadeWhileItsQueueIsSent) {
  Fuse fuse(absl::Seconds(60), "ARetryWaitSeesAFreeMadeWhileItsQueueIsSent");
  FakeSubAllocator::Options fo;
  fo.capacity = 4 * kMiB;  // the device: room for one 3 MiB region
  Allocator::Options o;
  o.allow_retry_on_failure = true;
  o.retry_timeout = absl::Seconds(5);
  Allocator a(std::make_unique<LogsItsFailures>(fo), 64 * kMiB, "retry", o);
  void* held = a.AllocateRaw(256, 3 * kMiB);
  ASSERT_NE(held, nullptr);

  std::atomic<bool> free_now{false};
  std::atomic<bool> freed{false};
  std::thread::id waiter_id;
  std::atomic<bool> waiter_known{false};
  LogSink previous = SetLogSink([&](LogSeverity, std::string_view message) {
    if (message.find("no memory for 'retry'") == std::string_view::npos) {
      return;
    }
    if (!waiter_known || std::this_thread::get_id() != waiter_id) return;
    if (free_now.exchange(true)) return;  // once
    // The waiter is sending its queue, unlocked: the other thread frees
    // now, before it sleeps.
    while (!freed) absl::SleepFor(absl::Milliseconds(1));
  });
  absl::Duration took;
  std::thread waiter([&] {
    waiter_id = std::this_thread::get_id();
    waiter_known = true;
    const absl::Time start = absl::Now();
    void* p = a.AllocateRaw(256, 3 * kMiB);
    took = absl::Now() - start;
    EXPECT_NE(p, nullptr);
    if (p != nullptr) a.DeallocateRaw(p);
  });
  while (!free_now) absl::SleepFor(absl::Milliseconds(1));
  a.DeallocateRaw(held);  // makes room: the waiter's retry would succeed
  freed = true;
  waiter.join();
  SetLogSink(std::move(previous));
  // A free while someone waits wakes it: well under a second (it slept the
  // full 5 s).
  EXPECT_LT(took, absl::Seconds(1)) << "the retry waited " << took;
}

// The same invalid free, not nested, prints its report before aborting.
TEST(LogDeferralAdversarialDeathTest, AnAbortPrintsItsReport) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        SetLogSink(LogSink());
        Allocator::Options io;
        io.abort_on_invalid_input = true;
        Allocator inner(std::make_unique<HostSubAllocator>(), 64 * kMiB,
                        "inner", io);
        static int not_ours = 0;
        inner.DeallocateRaw(&not_ours);
      },
      "aborting: Options::abort_on_invalid_input is set");
}

// The hot paths (DeallocateRaw, AllocateFast's slow branch) queue under a
// plain lock. They released it and only then took Lock again to send; in
// that window another thread's Lock scope (GetStats, say) sent the message
// on ITS thread. When that thread was itself inside the sink, holding the
// sink's own lock while it read stats (as bfc/log.h allows), the sink was
// re-entered on the same thread and took its own non-recursive lock again:
// a deadlock. Messages now leave the queue before the lock is released. The
// sink's lock is tried with a deadline, so a re-entry shows up as a failure
// instead of a hang.
class LogsItsFrees : public HostSubAllocator {
 public:
  void Free(void* ptr, size_t num_bytes) override {
    Log(LogSeverity::kInfo, "LogsItsFrees: Free for 'hot'");
    HostSubAllocator::Free(ptr, num_bytes);
  }
};

TEST(LogDeferralAdversarialTest, NoOtherThreadsMessageReentersASink) {
  Fuse fuse(absl::Seconds(120), "NoOtherThreadsMessageReentersASink");
  Allocator a(std::make_unique<LogsItsFrees>(), 256 * kMiB, "hot");
  std::mutex sink_mu;
  std::atomic<int> reentries{0};
  std::atomic<long> sink_calls{0};
  std::atomic<std::thread::id> owner{std::thread::id()};
  const std::thread::id main_id = std::this_thread::get_id();
  LogSink previous = SetLogSink([&](LogSeverity, std::string_view message) {
    if (message.find("'hot'") == std::string_view::npos &&
        message.find("tick") == std::string_view::npos) {
      return;
    }
    if (owner.load() == std::this_thread::get_id()) {
      // This thread already holds it: a real sink deadlocks here.
      if (reentries++ == 0) {
        std::fprintf(stderr, "re-entered on the %s thread by: %.*s\n",
                     std::this_thread::get_id() == main_id ? "main" : "freer",
                     static_cast<int>(message.size()), message.data());
      }
      return;
    }
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (!sink_mu.try_lock()) {
      if (absl::Now() > give_up) {
        ADD_FAILURE() << "sink lock held 30 s by another thread";
        return;
      }
      absl::SleepFor(absl::Microseconds(50));
    }
    owner = std::this_thread::get_id();
    ++sink_calls;
    (void)a.GetStats();  // allowed: "the sink may call back"
    owner = std::thread::id();
    sink_mu.unlock();
  });
  std::atomic<bool> stop{false};
  // Dedicated allocations: each free gives its region back through
  // SubAllocator::Free, which logs: DeallocateRaw queues under its plain
  // lock and sends after.
  std::thread freer([&] {
    AllocationAttributes attr;
    attr.dedicated = true;
    while (!stop && reentries == 0) {
      void* p = a.AllocateRaw(256, 64 * 1024, attr);
      if (p != nullptr) a.DeallocateRaw(p);
    }
  });
  const absl::Time end = absl::Now() + absl::Seconds(3);
  while (absl::Now() < end && reentries == 0) {
    Log(LogSeverity::kInfo, "tick");  // this thread in the sink, locked
  }
  stop = true;
  freer.join();
  SetLogSink(std::move(previous));
  EXPECT_EQ(reentries.load(), 0)
      << "the sink was re-entered on a thread that held its lock";
}

}  // namespace
}  // namespace bfc
