// File: tests/allocator_exceptions_test.cc
// Hostile user code below the allocator (bfc/sub_allocator.h, "Exceptions"):
// a sub-allocator whose Alloc or Free throws at every call site (first
// Extend, growth, the Extend after garbage collection, the refusal of a bad
// block, ReleaseFreeRegions, garbage collection, the destructor), queries
// that throw, visitors and log sinks that throw. Nothing may escape the
// allocator's calls, Validate() stays OK, nothing is leaked or counted twice,
// and a region whose Free threw is forgotten and never freed again.
//
// Also the failures that must not wait: a backend that can never allocate
// (an address-space reservation that failed, a sub-allocator that says it is
// unavailable, none at all) or an empty pool fails at once with the real
// cause; and a storm of out-of-memory failures logs O(log n) lines.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/log.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::LogCapture;
using ::bfc::testing::SubAllocatorJournal;
using ::testing::HasSubstr;

constexpr size_t kRegion = 2 * kMiB;  // the first region with growth

// Far longer than any test may take: a test that waits it out has failed.
constexpr absl::Duration kLongRetry = absl::Seconds(20);
constexpr absl::Duration kWellUnderTheRetry = absl::Seconds(10);

struct Rig {
  std::shared_ptr<SubAllocatorJournal> journal =
      std::make_shared<SubAllocatorJournal>();
  std::unique_ptr<Allocator> alloc;
};

Rig MakeRig(FakeSubAllocator::Options fo, size_t limit,
            Allocator::Options o = Allocator::Options()) {
  Rig r;
  r.alloc = std::make_unique<Allocator>(
      std::make_unique<FakeSubAllocator>(std::move(fo), r.journal), limit,
      "hostile", o);
  return r;
}

// What the allocator holds plus what it abandoned is exactly what the
// sub-allocator has handed out and not taken back.
void ExpectAccountsBalance(const Rig& r) {
  const absl::Status v = r.alloc->Validate();
  EXPECT_TRUE(v.ok()) << v;
  const AllocatorStats s = *r.alloc->GetStats();
  const Allocator::SubAllocatorFailures f = r.alloc->sub_allocator_failures();
  EXPECT_EQ(static_cast<int64_t>(r.journal->bytes_outstanding),
            *s.pool_bytes + f.bytes_abandoned);
}

// --- Alloc throws ------------------------------------------------------------

TEST(AllocatorExceptionsTest, AllocThrowingOnTheFirstExtendIsAFailure) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_alloc_if = [](size_t call) { return call == 0; };
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 64 * kMiB, o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = r.alloc->Allocate(4096);
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry) << "waited for nothing";
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(p.status().message(), HasSubstr("injected Alloc exception"));
  EXPECT_THAT(p.status().message(), HasSubstr("'hostile'"));
  EXPECT_EQ(r.alloc->sub_allocator_failures().alloc_exceptions, 1);
  EXPECT_EQ(r.journal->alloc_requests.size(), 1u)
      << "no back-off after a throw";
  EXPECT_EQ(r.alloc->GetStats()->num_retries, 0);
  EXPECT_TRUE(log.Contains("injected Alloc exception", LogSeverity::kError));
  ExpectAccountsBalance(r);
  // The next call is not poisoned.
  void* q = r.alloc->AllocateRaw(256, 4096);
  ASSERT_NE(q, nullptr);
  r.alloc->DeallocateRaw(q);
  ExpectAccountsBalance(r);
}

TEST(AllocatorExceptionsTest, AllocThrowingOnGrowthKeepsLiveAllocations) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_alloc_if = [](size_t call) { return call == 1; };
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 64 * kMiB, o);
  void* a = r.alloc->AllocateRaw(256, kRegion);  // fills region 1
  ASSERT_NE(a, nullptr);
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(r.alloc->AllocateRaw(256, 4096), nullptr);
  // Memory is in use, but the sub-allocator threw: waiting cannot help.
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry);
  EXPECT_EQ(r.alloc->AllocatedSize(a), kRegion);
  ExpectAccountsBalance(r);
  r.alloc->DeallocateRaw(a);
  ExpectAccountsBalance(r);
}

TEST(AllocatorExceptionsTest, AllocThrowingAfterGarbageCollection) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  // Call 0: region 1. Call 1: the Extend after GC gave region 1 back.
  fo.throw_alloc_if = [](size_t call) { return call == 1; };
  Allocator::Options o;
  o.garbage_collection = true;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 4 * kMiB, o);
  void* a = r.alloc->AllocateRaw(256, kRegion);
  ASSERT_NE(a, nullptr);
  r.alloc->DeallocateRaw(a);
  // 4 MiB does not fit beside the free 2 MiB region: GC, then Extend throws.
  absl::StatusOr<void*> p = r.alloc->Allocate(4 * kMiB);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  const AllocatorStats s = *r.alloc->GetStats();
  EXPECT_EQ(s.num_regions_released, 1);
  EXPECT_EQ(*s.pool_bytes, 0);
  ExpectAccountsBalance(r);
}

// --- Free throws ------------------------------------------------------------

TEST(AllocatorExceptionsTest,
     FreeThrowingInReleaseFreeRegionsForgetsTheRegion) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_free_if = [](size_t call) { return call == 0; };
  Rig r = MakeRig(fo, 64 * kMiB);
  void* a = r.alloc->AllocateRaw(256, 4096);
  ASSERT_NE(a, nullptr);
  r.alloc->DeallocateRaw(a);
  EXPECT_EQ(r.alloc->ReleaseFreeRegions(), 0u) << "nothing was given back";
  const AllocatorStats s = *r.alloc->GetStats();
  EXPECT_EQ(*s.pool_bytes, 0) << "the region is no longer ours";
  EXPECT_EQ(s.num_regions_released, 0);
  const Allocator::SubAllocatorFailures f = r.alloc->sub_allocator_failures();
  EXPECT_EQ(f.free_exceptions, 1);
  EXPECT_EQ(f.bytes_abandoned, static_cast<int64_t>(kRegion));
  EXPECT_TRUE(log.Contains("injected Free exception", LogSeverity::kError));
  ExpectAccountsBalance(r);
  // Never handed out again: a new allocation takes a new region.
  void* b = r.alloc->AllocateRaw(256, 4096);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(r.alloc->GetStats()->num_extends, 2);
  r.alloc->DeallocateRaw(b);
  const void* abandoned = r.journal->frees[0].first;
  r.alloc.reset();
  // Never freed twice: the destructor freed only the second region.
  ASSERT_EQ(r.journal->frees.size(), 2u);
  EXPECT_NE(r.journal->frees[1].first, abandoned);
}

TEST(AllocatorExceptionsTest, FreeThrowingInGarbageCollection) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_free_if = [](size_t call) { return call == 0; };
  Allocator::Options o;
  o.garbage_collection = true;
  o.allow_retry_on_failure = false;  // the 4 MiB request fails
  Rig r = MakeRig(fo, 4 * kMiB, o);
  void* a = r.alloc->AllocateRaw(256, kRegion);
  ASSERT_NE(a, nullptr);
  r.alloc->DeallocateRaw(a);
  // GC gives region 1 back (its Free throws; it is forgotten), but the
  // sub-allocator may still hold it: it still counts against the limit, so
  // the 4 MiB region does not fit, and what is left of the limit does.
  void* big = r.alloc->AllocateRaw(256, 4 * kMiB);
  EXPECT_EQ(big, nullptr);
  EXPECT_EQ(r.alloc->sub_allocator_failures().free_exceptions, 1);
  EXPECT_EQ(r.alloc->sub_allocator_failures().bytes_abandoned,
            static_cast<int64_t>(kRegion));
  EXPECT_EQ(*r.alloc->GetStats()->pool_bytes, 0);
  void* rest = r.alloc->AllocateRaw(256, 4 * kMiB - kRegion);
  ASSERT_NE(rest, nullptr);
  ExpectAccountsBalance(r);
  r.alloc->DeallocateRaw(rest);
  ExpectAccountsBalance(r);
}

TEST(AllocatorExceptionsTest, FreeThrowingInTheDestructorFreesTheRest) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_free_if = [](size_t call) { return call == 0; };
  Rig r = MakeRig(fo, 64 * kMiB);
  void* a = r.alloc->AllocateRaw(256, kRegion);
  void* b = r.alloc->AllocateRaw(256, kRegion);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  r.alloc.reset();  // must not throw
  EXPECT_EQ(r.journal->frees.size(), 2u) << "every region was offered back";
  EXPECT_EQ(r.journal->free_throws, 1u);
  EXPECT_EQ(r.journal->bytes_outstanding, kRegion) << "only the thrower's";
  EXPECT_TRUE(log.Contains("during destruction failed", LogSeverity::kError));
}

TEST(AllocatorExceptionsTest, FreeThrowingWhileRefusingABadBlock) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.misalign_if = [](size_t call) { return call == 0; };
  fo.throw_free_if = [](size_t call) { return call == 0; };
  Rig r = MakeRig(fo, 64 * kMiB);
  void* a = r.alloc->AllocateRaw(256, 4096);
  ASSERT_NE(a, nullptr) << "the back-off goes on after the refusal";
  EXPECT_EQ(r.alloc->GetStats()->num_sub_allocator_rejects, 1);
  EXPECT_EQ(r.alloc->sub_allocator_failures().free_exceptions, 1);
  r.alloc->DeallocateRaw(a);
  ExpectAccountsBalance(r);
}

// Every Alloc call and every Free call of a scripted workload throws in turn.
// Whatever throws, no call escapes, the state validates after every step and
// the accounts balance.
void RunWorkload(Rig& r) {
  std::vector<void*> live;
  for (size_t size : {size_t{4096}, kRegion, 3 * kRegion, size_t{100000}}) {
    void* p = r.alloc->AllocateRaw(256, size);
    if (p != nullptr) live.push_back(p);
    ASSERT_TRUE(r.alloc->Validate().ok());
  }
  void* aligned = r.alloc->AllocateRaw(size_t{1} << 16, 5000);
  if (aligned != nullptr) live.push_back(aligned);
  for (size_t i = 0; i < live.size(); i += 2) {
    r.alloc->DeallocateRaw(live[i]);
    live[i] = nullptr;
  }
  r.alloc->ReleaseFreeRegions();
  ASSERT_TRUE(r.alloc->Validate().ok());
  // Near the limit: garbage collection and the retry path.
  absl::StatusOr<void*> big = r.alloc->Allocate(20 * kMiB);
  if (big.ok()) live.push_back(*big);
  for (void* p : live) r.alloc->DeallocateRaw(p);
  r.alloc->ReleaseFreeRegions();
  ASSERT_TRUE(r.alloc->Validate().ok());
}

TEST(AllocatorExceptionsTest, EveryAllocAndFreeCallSiteMayThrow) {
  LogCapture log;
  Allocator::Options o;
  o.garbage_collection = true;
  o.retry_timeout = absl::Milliseconds(1);
  constexpr size_t kLimit = 24 * kMiB;
  // A clean run counts the calls.
  size_t alloc_calls = 0, free_calls = 0;
  {
    Rig r = MakeRig(FakeSubAllocator::Options(), kLimit, o);
    RunWorkload(r);
    r.alloc.reset();
    alloc_calls = r.journal->alloc_requests.size();
    free_calls = r.journal->frees.size();
  }
  ASSERT_GE(alloc_calls, 3u);
  ASSERT_GE(free_calls, 3u);
  for (int kind = 0; kind < 2; ++kind) {
    const size_t calls = kind == 0 ? alloc_calls : free_calls;
    for (size_t n = 0; n < calls; ++n) {
      SCOPED_TRACE(::testing::Message()
                   << (kind == 0 ? "Alloc" : "Free") << " call " << n);
      FakeSubAllocator::Options fo;
      auto at_n = [n](size_t call) { return call == n; };
      if (kind == 0) {
        fo.throw_alloc_if = at_n;
      } else {
        fo.throw_free_if = at_n;
      }
      Rig r = MakeRig(fo, kLimit, o);
      RunWorkload(r);
      ExpectAccountsBalance(r);
      r.alloc.reset();
      EXPECT_EQ(r.journal->invalid_frees, 0u) << "a Free the fake refused";
      // All that is still out is the block whose Free threw, if any.
      const size_t thrown = kind == 1 && n < r.journal->frees.size()
                                ? r.journal->frees[n].second
                                : 0;
      EXPECT_EQ(r.journal->bytes_outstanding, thrown);
    }
  }
}

// --- Queries, visitors and log sinks throw ----------------------------------

TEST(AllocatorExceptionsTest, QueriesThatThrowAreCaught) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.throw_from_queries = true;
  fo.fail_if = [](size_t, size_t) { return true; };
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 64 * kMiB, o);  // SupportsCoalescing throws
  EXPECT_EQ(r.alloc->GetMemoryType(), MemoryType::kUnknown);
  absl::StatusOr<void*> p = r.alloc->Allocate(4096);  // Availability throws
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(p.status().message(), HasSubstr("Availability threw"));
  EXPECT_TRUE(log.Contains("SupportsCoalescing threw", LogSeverity::kError));
  EXPECT_TRUE(log.Contains("GetMemoryType threw", LogSeverity::kError));
  EXPECT_TRUE(r.alloc->Validate().ok());
}

TEST(AllocatorExceptionsTest, VisitorsThatThrowAreCaughtAndTheRestRun) {
  LogCapture log;
  int later_alloc_visits = 0;
  int later_free_visits = 0;
  auto thrower = [](void*, int, size_t) {
    throw std::runtime_error("visitor says no");
  };
  // Alloc visitors run in order, free visitors in reverse: the counting
  // visitor runs after the thrower in both.
  std::vector<SubAllocator::Visitor> alloc_visitors = {
      thrower, [&](void*, int, size_t) { ++later_alloc_visits; }};
  std::vector<SubAllocator::Visitor> free_visitors = {
      [&](void*, int, size_t) { ++later_free_visits; }, thrower};
  auto sub = std::make_unique<VirtualSubAllocator>(
      size_t{1} << 30, VirtualSubAllocator::Options(), alloc_visitors,
      free_visitors);
  VirtualSubAllocator* raw = sub.get();
  Allocator alloc(std::move(sub), 64 * kMiB, "visited");
  absl::StatusOr<void*> p = alloc.Allocate(4096);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(later_alloc_visits, 1);
  ASSERT_TRUE(alloc.Deallocate(*p).ok());
  EXPECT_EQ(alloc.ReleaseFreeRegions(), kRegion);
  EXPECT_EQ(later_free_visits, 1);
  EXPECT_EQ(raw->num_visitor_exceptions(), 2);
  EXPECT_EQ(raw->bytes_in_use(), 0u) << "the Free went ahead";
  EXPECT_TRUE(log.Contains("visitor says no", LogSeverity::kError));
  EXPECT_TRUE(alloc.Validate().ok());
}

TEST(AllocatorExceptionsTest, ALogSinkThatThrowsDoesNotEscape) {
  LogSink previous = SetLogSink([](LogSeverity, std::string_view) {
    throw std::runtime_error("sink is full");
  });
  {
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                    4 * kMiB, "sunk", o);
    int local = 0;
    // Each of these logs: an invalid free, an invalid request, an OOM, the
    // destructor's leak report below.
    EXPECT_NO_THROW(alloc.DeallocateRaw(&local));
    EXPECT_NO_THROW(alloc.AllocateRaw(3, 64));
    EXPECT_NO_THROW(alloc.AllocateRaw(256, 64 * kMiB));
    EXPECT_NO_THROW(Log(LogSeverity::kInfo, "direct"));
    void* leaked = alloc.AllocateRaw(256, 4096);
    EXPECT_NE(leaked, nullptr);
    const AllocatorStats s = *alloc.GetStats();
    EXPECT_EQ(s.num_invalid_frees, 1);
    EXPECT_EQ(s.num_invalid_requests, 1);
    EXPECT_EQ(s.num_ooms, 1);
    EXPECT_TRUE(alloc.Validate().ok());
  }  // the destructor's leak report goes to the throwing sink too
  SetLogSink(std::move(previous));
}

// --- Fail fast with the real cause ------------------------------------------

TEST(AllocatorExceptionsTest, AReservationBeyondTheAddressSpaceFailsFast) {
  LogCapture log;
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  // 2^63 bytes of address space exist on no machine: mmap fails.
  Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 63),
                  size_t{1} << 62, "huge", o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = alloc.Allocate(4096);
  EXPECT_EQ(alloc.AllocateRaw(256, 4096), nullptr);
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable) << p.status();
  EXPECT_THAT(p.status().message(),
              HasSubstr("cannot reserve 9223372036854775808 bytes"));
  EXPECT_THAT(p.status().message(), HasSubstr("'huge'"));
  EXPECT_EQ(alloc.GetStats()->num_retries, 0);
  EXPECT_TRUE(log.Contains("cannot reserve", LogSeverity::kWarning));
}

TEST(AllocatorExceptionsTest, AnUnavailableBackendFailsFastWithItsReason) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.fail_if = [](size_t, size_t) { return true; };
  fo.availability = absl::UnavailableError("no CUDA driver (test)");
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 64 * kMiB, o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = r.alloc->Allocate(4096);
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(p.status().message(), HasSubstr("no CUDA driver (test)"));
  EXPECT_EQ(r.alloc->GetStats()->num_retries, 0);
}

TEST(AllocatorExceptionsTest, AnEmptyPoolDoesNotWaitForFreesThatCannotCome) {
  LogCapture log;
  FakeSubAllocator::Options fo;
  fo.fail_if = [](size_t, size_t) { return true; };  // available, but full
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Rig r = MakeRig(fo, 64 * kMiB, o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = r.alloc->Allocate(4096);
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(r.alloc->GetStats()->num_retries, 0);
}

TEST(AllocatorExceptionsTest, NoSubAllocatorIsAFailedPrecondition) {
  LogCapture log;
  Allocator::Options o;
  o.retry_timeout = kLongRetry;
  Allocator alloc(nullptr, 64 * kMiB, "none", o);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<void*> p = alloc.Allocate(4096);
  EXPECT_LT(absl::Now() - t0, kWellUnderTheRetry);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("has no sub-allocator"));
}

// --- Extreme numbers ---------------------------------------------------------

TEST(AllocatorExceptionsTest, FragmentationCapSaturatesForAHugeLimit) {
  // fragmentation_fraction * total_memory is 2^64 here: it must not be cast
  // to int64_t (undefined; on x86 INT64_MIN, which splits every chunk). A
  // cap beyond any chunk means TF's rule alone decides: a 2 MiB region is
  // not split for a 1.5 MiB request (not twice the request).
  for (double fraction : {1.0, 0.5}) {
    SCOPED_TRACE(fraction);
    Allocator::Options o;
    o.fragmentation_fraction = fraction;
    o.allow_retry_on_failure = false;
    Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                    std::numeric_limits<size_t>::max(), "cap", o);
    void* p = alloc.AllocateRaw(256, 3 * kRegion / 4);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(alloc.AllocatedSize(p), kRegion);
    alloc.DeallocateRaw(p);
  }
}

// --- Rate-limited failure logs ----------------------------------------------

// Lines in everything logged (a message may hold many).
size_t LinesLogged(const LogCapture& log) {
  size_t lines = 0;
  for (const auto& [severity, message] : log.lines()) {
    lines += 1 + static_cast<size_t>(
                     std::count(message.begin(), message.end(), '\n'));
  }
  return lines;
}

TEST(AllocatorExceptionsTest, AnOomStormLogsAFewLinesAndCountsTheRest) {
  LogCapture log;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.max_oom_logs = 10;
  auto alloc = std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), 8 * kMiB, "storm",
      o);
  // Many chunks, so that TF's memory log (one line per chunk) is long.
  std::vector<void*> live;
  for (int i = 0; i < 200; ++i) live.push_back(alloc->AllocateRaw(256, 4096));
  const size_t before = log.size();
  constexpr int kFailures = 1000;
  for (int i = 0; i < kFailures; ++i) {
    ASSERT_EQ(alloc->AllocateRaw(256, 16 * kMiB), nullptr);
  }
  const std::vector<std::pair<LogSeverity, std::string>> lines = log.lines();
  // 10 reports (summary + occupancy), the memory log once, then one line at
  // each power-of-two count of the 990 suppressed: 1, 2, 4, ..., 512.
  EXPECT_EQ(lines.size() - before, 10u + 1u + 10u);
  int memory_logs = 0;
  for (const auto& [severity, message] : lines) {
    if (message.find("InUse at") != std::string::npos) ++memory_logs;
  }
  EXPECT_EQ(memory_logs, 1) << "TF's memory log once, not per report";
  EXPECT_TRUE(log.Contains("512 similar out-of-memory report(s) suppressed"));
  EXPECT_EQ(alloc->num_oom_logs_suppressed(), kFailures - 10);
  EXPECT_EQ(alloc->GetStats()->num_ooms, kFailures);
  EXPECT_LT(LinesLogged(log), 600u);  // was ten memory logs of 200+ lines
  for (void* p : live) alloc->DeallocateRaw(p);
  alloc.reset();
  EXPECT_TRUE(
      log.Contains("990 out-of-memory report(s) in all were suppressed"));
}

TEST(AllocatorExceptionsTest, AStormOfInvalidFreesLogsAFewLines) {
  LogCapture log;
  auto alloc = std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), 8 * kMiB,
      "garbage");
  int local = 0;
  constexpr int kFrees = 1000;
  for (int i = 0; i < kFrees; ++i) alloc->DeallocateRaw(&local);
  // 10 in full, then one line at each power-of-two count of the 990
  // suppressed: 1, 2, 4, ..., 512.
  EXPECT_EQ(log.size(), 10u + 10u);
  EXPECT_TRUE(log.Contains("512 similar invalid-input report(s) suppressed"));
  EXPECT_EQ(alloc->GetStats()->num_invalid_frees, kFrees) << "all counted";
  alloc.reset();
  EXPECT_TRUE(
      log.Contains("990 invalid-input report(s) in all were suppressed"));
}

TEST(AllocatorExceptionsTest, MaxOomLogsZeroLogsNoOom) {
  LogCapture log;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.max_oom_logs = 0;
  Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
                  8 * kMiB, "quiet", o);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(alloc.AllocateRaw(256, 16 * kMiB), nullptr);
  }
  EXPECT_EQ(log.size(), 0u);
}

// max_oom_logs = 0 silences the notes of requests their caller can do
// without (AllocationAttributes::retry_on_failure = false) too, and nothing
// is counted as suppressed, so that not even the destructor's summary line
// ("N out-of-memory report(s) in all were suppressed") is logged.
TEST(AllocatorExceptionsTest, MaxOomLogsZeroSilencesNotesAndTheSummary) {
  LogCapture log;
  Allocator::Options o;
  o.max_oom_logs = 0;
  auto alloc = std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30), 8 * kMiB, "quiet",
      o);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(alloc->AllocateRaw(256, 16 * kMiB, AllocationAttributes{false}),
              nullptr);
  }
  EXPECT_EQ(alloc->GetStats()->num_ooms, 100);
  EXPECT_EQ(alloc->num_oom_logs_suppressed(), 0);
  alloc.reset();
  EXPECT_EQ(log.size(), 0u);
}

}  // namespace
}  // namespace bfc
