// A log sink may call back into the allocator whose message it is handling:
// every message an allocator logs reaches the sink after its lock is
// released. Before, only out-of-memory reports did; a sink that read the
// allocator's stats on an invalid free (or took a lock of its own that
// another thread held while waiting for the allocator) deadlocked. Each test
// runs under a Fuse: a message sent under the lock hangs its GetStats, and
// the fuse then fails the process instead of hanging the suite.

#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

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

TEST(LogSinkReentryTest, OnAnInvalidFreeAndAnInvalidRequest) {
  Fuse fuse(absl::Seconds(60), "OnAnInvalidFreeAndAnInvalidRequest");
  ReentrantSink sink("reentry", /*allocate=*/true);
  Allocator a(std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}),
              64 * kMiB, "reentry");
  sink.Watch(&a);
  int x = 0;
  a.DeallocateRaw(&x);
  EXPECT_EQ(a.AllocateRaw(/*alignment=*/3, 256), nullptr);
  sink.Watch(nullptr);
  EXPECT_EQ(sink.calls(), 2);
  EXPECT_EQ(a.GetStats()->num_invalid_frees, 1);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

TEST(LogSinkReentryTest, OnAFailingSubAllocator) {
  Fuse fuse(absl::Seconds(60), "OnAFailingSubAllocator");
  ReentrantSink sink("reentry");
  FakeSubAllocator::Options fo;
  // The first Alloc throws; the second hands out misaligned memory (refused
  // and given back); the rest work.
  fo.throw_alloc_if = [](size_t call) { return call == 0; };
  fo.misalign_if = [](size_t call) { return call == 1; };
  // The first Free throws (the region is forgotten, and said so).
  fo.throw_free_if = [](size_t call) { return call == 0; };
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  Allocator a(std::make_unique<FakeSubAllocator>(fo), 64 * kMiB, "reentry", o);
  sink.Watch(&a);
  EXPECT_EQ(a.AllocateRaw(256, kMiB), nullptr);  // Alloc threw
  void* p = a.AllocateRaw(256, kMiB);  // misaligned, refused; then served
  ASSERT_NE(p, nullptr);
  a.DeallocateRaw(p);
  EXPECT_GT(a.ReleaseFreeRegions(), 0u);  // Free throws
  sink.Watch(nullptr);
  EXPECT_GE(sink.calls(), 3);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

TEST(LogSinkReentryTest, OnOutOfMemoryAndGarbageCollection) {
  Fuse fuse(absl::Seconds(60), "OnOutOfMemoryAndGarbageCollection");
  ReentrantSink sink("reentry");
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.garbage_collection = true;
  Allocator a(std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}),
              8 * kMiB, "reentry", o);
  sink.Watch(&a);
  // 2 MiB and 4 MiB regions; with both freed, 6 MiB fits only once the
  // free regions go back (garbage collection, logged).
  void* p = a.AllocateRaw(256, 2 * kMiB);
  void* q = a.AllocateRaw(256, 4 * kMiB);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  a.DeallocateRaw(p);
  a.DeallocateRaw(q);
  void* r = a.AllocateRaw(256, 6 * kMiB);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(a.AllocateRaw(256, 4 * kMiB), nullptr);  // out of memory
  a.DeallocateRaw(r);
  sink.Watch(nullptr);
  EXPECT_GE(sink.calls(), 2);
  EXPECT_EQ(a.GetStats()->num_ooms, 1);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// User code the allocator calls under its lock may log through bfc::Log:
// a sub-allocator visitor that throws (SubAllocator reports it) and a
// sub-allocator that logs on every Alloc and Free. Those messages are queued
// with the allocator's own and sent once its lock is released.
class LoggingSubAllocator : public HostSubAllocator {
 public:
  using HostSubAllocator::HostSubAllocator;
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    Log(LogSeverity::kInfo, "LoggingSubAllocator: Alloc for 'reentry'");
    return HostSubAllocator::Alloc(alignment, num_bytes, bytes_received);
  }
  void Free(void* ptr, size_t num_bytes) override {
    Log(LogSeverity::kInfo, "LoggingSubAllocator: Free for 'reentry'");
    HostSubAllocator::Free(ptr, num_bytes);
  }
};

TEST(LogSinkReentryTest, OnWhatUserCodeLogsUnderTheLock) {
  Fuse fuse(absl::Seconds(60), "OnWhatUserCodeLogsUnderTheLock");
  ReentrantSink sink("reentry");
  std::vector<SubAllocator::Visitor> visitors = {[](void*, int, size_t) {
    throw std::runtime_error("visitor for 'reentry'");
  }};
  Allocator a(std::make_unique<LoggingSubAllocator>(
                  visitors, std::vector<SubAllocator::Visitor>{}),
              64 * kMiB, "reentry");
  sink.Watch(&a);
  void* p = a.AllocateRaw(256, kMiB);  // Alloc logs, the visitor throws
  ASSERT_NE(p, nullptr);
  a.DeallocateRaw(p);
  EXPECT_GT(a.ReleaseFreeRegions(), 0u);  // Free logs
  sink.Watch(nullptr);
  EXPECT_EQ(sink.calls(), 3);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// Two threads, two allocators, and a sink with a lock of its own that calls
// into the other allocator. Thread A's message (its sub-allocator threw)
// holds the sink's lock while thread B logs for allocator b, then A's sink
// reads b's stats. With messages sent under the allocator lock, B held b's
// lock waiting for the sink's and A held the sink's waiting for b's: a
// deadlock on every run, by construction.
TEST(LogSinkReentryTest, ASinkWithItsOwnLockAcrossTwoAllocators) {
  Fuse fuse(absl::Seconds(60), "ASinkWithItsOwnLockAcrossTwoAllocators");
  FakeSubAllocator::Options fo;
  fo.throw_alloc_if = [](size_t) { return true; };
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.max_oom_logs = 0;
  Allocator a(std::make_unique<FakeSubAllocator>(fo), 64 * kMiB, "devA", o);
  Allocator b(std::make_unique<FakeSubAllocator>(fo), 64 * kMiB, "devB", o);
  std::mutex sink_mu;
  std::atomic<bool> a_in_sink{false};
  std::atomic<int> lines{0};
  LogSink previous = SetLogSink([&](LogSeverity, std::string_view message) {
    std::lock_guard<std::mutex> lock(sink_mu);
    if (message.find("'devA'") != std::string_view::npos) {
      a_in_sink = true;
      // Long enough for B to reach its own message.
      absl::SleepFor(absl::Milliseconds(200));
      if (b.GetStats().has_value()) ++lines;
    } else if (message.find("'devB'") != std::string_view::npos) {
      ++lines;
    }
  });
  std::thread ta([&] { EXPECT_EQ(a.AllocateRaw(256, kMiB), nullptr); });
  std::thread tb([&] {
    while (!a_in_sink) absl::SleepFor(absl::Milliseconds(1));
    EXPECT_EQ(b.AllocateRaw(256, kMiB), nullptr);
  });
  ta.join();
  tb.join();
  SetLogSink(std::move(previous));
  EXPECT_EQ(lines.load(), 2);
  EXPECT_EQ(a.GetStats()->num_ooms, 1);
  EXPECT_EQ(b.GetStats()->num_ooms, 1);
}

}  // namespace
}  // namespace bfc
