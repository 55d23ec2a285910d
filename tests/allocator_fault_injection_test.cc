// File: tests/allocator_fault_injection_test.cc
// A scripted workload (growth, aligned requests, frees, ReleaseFreeRegions,
// garbage collection, a request at the limit) runs once against a
// well-behaved FakeSubAllocator to count its Alloc calls; then, for every call
// index N, it runs again with call N (or every call from N on) failing,
// misaligned, short, overlapping an earlier region, or longer than asked.
// After every step of every run:
//   * Validate() is true (regions never overlap, are 256-aligned, tile);
//   * no two live allocations overlap, each is aligned as asked, lies in
//     memory the sub-allocator really handed out and has the sizes asked;
//   * memory the allocator refused was given straight back: the pool equals
//     what the sub-allocator has outstanding;
// and at the end, after destruction, nothing is outstanding and every Free
// the allocator made was one the sub-allocator accepted.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::LogCapture;
using ::bfc::testing::SubAllocatorJournal;

enum class Fault {
  kNone,
  kFail,
  kFailFromHereOn,
  kMisalign,
  kShort,
  kOverlap,
  kLong
};

const char* FaultName(Fault f) {
  switch (f) {
    case Fault::kNone:
      return "none";
    case Fault::kFail:
      return "fail";
    case Fault::kFailFromHereOn:
      return "fail-from-here-on";
    case Fault::kMisalign:
      return "misaligned";
    case Fault::kShort:
      return "short";
    case Fault::kOverlap:
      return "overlapping";
    case Fault::kLong:
      return "long";
  }
  return "?";
}

struct Setup {
  bool allow_growth;
  bool coalescing;
  bool garbage_collection;
  size_t limit;
  const char* name;
};

// One run of the script with `fault` injected at call `n`. Returns the number
// of sub-allocator Alloc calls the run made. Fails the test (with context) on
// any broken promise.
size_t RunScript(const Setup& setup, Fault fault, size_t n) {
  SCOPED_TRACE(::testing::Message()
               << setup.name << ", " << FaultName(fault) << " at call " << n);
  auto journal = std::make_shared<SubAllocatorJournal>();
  FakeSubAllocator::Options fake;
  fake.supports_coalescing = setup.coalescing;
  fake.capacity = 4 * setup.limit;
  auto at_n = [n](size_t call) { return call == n; };
  switch (fault) {
    case Fault::kNone:
      break;
    case Fault::kFail:
      fake.fail_if = [n](size_t c, size_t) { return c == n; };
      break;
    case Fault::kFailFromHereOn:
      fake.fail_if = [n](size_t c, size_t) { return c >= n; };
      break;
    case Fault::kMisalign:
      fake.misalign_if = at_n;
      break;
    case Fault::kShort:
      fake.short_if = at_n;
      break;
    case Fault::kOverlap:
      fake.overlap_if = at_n;
      break;
    case Fault::kLong:
      fake.long_if = at_n;
      fake.long_extra_bytes = 4 * kKiB;
      break;
  }
  auto sub = std::make_unique<FakeSubAllocator>(fake, journal);
  const FakeSubAllocator* fake_ptr = sub.get();
  const uintptr_t lo = reinterpret_cast<uintptr_t>(fake_ptr->backing().base());
  const uintptr_t hi = lo + fake_ptr->backing().capacity();

  Allocator::Options o;
  o.allow_growth = setup.allow_growth;
  o.garbage_collection = setup.garbage_collection;
  o.allow_retry_on_failure = false;
  LogCapture log;  // keep the refusals off stderr
  auto alloc =
      std::make_unique<Allocator>(std::move(sub), setup.limit, "fault", o);

  struct Live {
    size_t requested;
    size_t size;
    size_t alignment;
  };
  std::map<uintptr_t, Live> live;
  int step = 0;

  auto check = [&](const std::string& what) {
    SCOPED_TRACE(::testing::Message()
                 << "step " << step << " (" << what << ")");
    const absl::Status v = alloc->Validate();
    ASSERT_TRUE(v.ok()) << v;
    const AllocatorStats s = *alloc->GetStats();
    // Refused memory went straight back: all that is outstanding is the pool.
    ASSERT_EQ(static_cast<size_t>(*s.pool_bytes), journal->bytes_outstanding);
    ASSERT_LE(static_cast<size_t>(*s.pool_bytes), setup.limit);
    ASSERT_EQ(journal->invalid_frees, 0u);
    // Misaligned, short and overlapping memory is always refused; longer
    // than asked only when it would not fit under the limit.
    const size_t must_refuse =
        journal->misaligned + journal->shortened + journal->overlapping;
    ASSERT_GE(static_cast<size_t>(s.num_sub_allocator_rejects), must_refuse);
    ASSERT_LE(static_cast<size_t>(s.num_sub_allocator_rejects),
              must_refuse + journal->lengthened);
    int64_t in_use = 0;
    uintptr_t prev_end = 0;
    for (const auto& [addr, l] : live) {
      ASSERT_GE(addr, prev_end) << "live allocations overlap";
      ASSERT_GE(addr, lo);
      ASSERT_LE(addr + l.size, hi) << "outside the sub-allocator's memory";
      ASSERT_EQ(addr % std::max<size_t>(l.alignment, 256), 0u);
      const void* p = reinterpret_cast<const void*>(addr);
      ASSERT_EQ(alloc->RequestedSize(p), l.requested);
      ASSERT_EQ(alloc->AllocatedSize(p), l.size);
      prev_end = addr + l.size;
      in_use += static_cast<int64_t>(l.size);
    }
    ASSERT_EQ(s.bytes_in_use, in_use);
  };

  // `must`: the clean run has to succeed (later requests may fail for lack
  // of memory in some setups, which is fine: a clean failure).
  auto allocate = [&](size_t bytes, size_t alignment = 256, bool must = false) {
    ++step;
    void* p = alloc->AllocateRaw(alignment, bytes);
    if (p != nullptr) {
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      ASSERT_EQ(live.count(a), 0u) << "pointer handed out twice";
      live[a] = Live{bytes, alloc->AllocatedSize(p), alignment};
    } else if (fault == Fault::kNone && must) {
      ADD_FAILURE() << "the clean run failed to allocate " << bytes;
    }
    check("allocate " + std::to_string(bytes));
  };
  // Frees every k-th live allocation, starting at `first`.
  auto free_some = [&](size_t k, size_t first) {
    ++step;
    std::vector<uintptr_t> victims;
    size_t i = 0;
    for (const auto& [addr, l] : live) {
      if (i++ % k == first) victims.push_back(addr);
    }
    for (uintptr_t a : victims) {
      ASSERT_TRUE(alloc->Deallocate(reinterpret_cast<void*>(a)).ok());
      live.erase(a);
    }
    check("free some");
  };

  // --- The script ----------------------------------------------------------
  for (int i = 0; i < 6; ++i) {
    allocate(100 * kKiB + 1000 * i, 256, /*must=*/true);
    if (::testing::Test::HasFatalFailure())
      return journal->alloc_requests.size();
  }
  allocate(3 * kMiB, 256, /*must=*/true);
  allocate(5000, 4096, /*must=*/true);
  allocate(300 * kKiB, kMiB);
  allocate(6 * kMiB);
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  free_some(2, 0);
  allocate(2 * kMiB + 256);
  allocate(12 * kMiB);
  allocate(64 * kKiB, 64 * kKiB);
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  free_some(3, 1);
  ++step;
  alloc->ReleaseFreeRegions();
  check("ReleaseFreeRegions");
  allocate(20 * kMiB);
  allocate(256);
  allocate(1);
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  free_some(1, 0);            // everything
  allocate(setup.limit / 2);  // needs GC (or a fresh region) to fit
  allocate(setup.limit / 4, 2 * kMiB);
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  free_some(2, 1);
  allocate(setup.limit);  // fails unless everything is free
  allocate(7 * kMiB);
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  free_some(1, 0);
  ++step;
  alloc->ReleaseFreeRegions();
  check("final ReleaseFreeRegions");
  if (::testing::Test::HasFatalFailure()) return journal->alloc_requests.size();
  EXPECT_EQ(alloc->GetStats()->pool_bytes, 0);
  // Leave two allocations live for the destructor to deal with.
  allocate(kMiB);
  allocate(10 * kKiB);

  const size_t calls = journal->alloc_requests.size();
  alloc.reset();
  EXPECT_EQ(journal->bytes_outstanding, 0u) << "memory leaked on destruction";
  EXPECT_EQ(journal->invalid_frees, 0u);
  return calls;
}

class FaultInjectionTest : public ::testing::TestWithParam<Setup> {};

TEST_P(FaultInjectionTest, CleanRunSucceeds) {
  const size_t calls = RunScript(GetParam(), Fault::kNone, 0);
  EXPECT_GE(calls, 2u);
}

TEST_P(FaultInjectionTest, EveryFaultAtEveryCall) {
  const size_t calls = RunScript(GetParam(), Fault::kNone, 0);
  ASSERT_FALSE(HasFailure());
  size_t injected = 0;
  for (Fault fault : {Fault::kFail, Fault::kFailFromHereOn, Fault::kMisalign,
                      Fault::kShort, Fault::kOverlap, Fault::kLong}) {
    // One past the clean run's calls: a fault may add calls (backing off).
    for (size_t n = 0; n <= calls + 2; ++n) {
      RunScript(GetParam(), fault, n);
      ++injected;
      if (HasFailure()) return;  // the first broken promise is enough
    }
  }
  RecordProperty("runs", static_cast<int>(injected));
}

TEST_P(FaultInjectionTest, RefusalsAreCountedAndLogged) {
  for (Fault fault : {Fault::kMisalign, Fault::kShort, Fault::kOverlap}) {
    SCOPED_TRACE(FaultName(fault));
    auto journal = std::make_shared<SubAllocatorJournal>();
    FakeSubAllocator::Options fake;
    fake.supports_coalescing = GetParam().coalescing;
    // Call 0 is a good region; call 1 misbehaves.
    if (fault == Fault::kMisalign)
      fake.misalign_if = [](size_t c) { return c == 1; };
    if (fault == Fault::kShort) fake.short_if = [](size_t c) { return c == 1; };
    if (fault == Fault::kOverlap)
      fake.overlap_if = [](size_t c) { return c == 1; };
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    LogCapture log;
    Allocator a(std::make_unique<FakeSubAllocator>(fake, journal), 64 * kMiB,
                "refuse", o);
    void* p = a.AllocateRaw(256, 2 * kMiB);  // fills the first 2 MiB region
    ASSERT_NE(p, nullptr);
    void* q = a.AllocateRaw(256, kMiB);  // call 1 refused, call 2 succeeds
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(a.GetStats()->num_sub_allocator_rejects, 1);
    EXPECT_TRUE(log.Contains("refused and given back", LogSeverity::kError));
    ASSERT_GE(journal->frees.size(), 1u);
    EXPECT_EQ(journal->frees[0].first, journal->alloc_results[1]);
    EXPECT_EQ(static_cast<size_t>(*a.GetStats()->pool_bytes),
              journal->bytes_outstanding);
    EXPECT_TRUE(a.Validate().ok());
    a.DeallocateRaw(p);
    a.DeallocateRaw(q);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Setups, FaultInjectionTest,
    ::testing::Values(
        Setup{true, false, false, 64 * kMiB, "GrowthNonCoalescing"},
        Setup{true, true, false, 64 * kMiB, "GrowthCoalescing"},
        Setup{true, false, true, 64 * kMiB, "GrowthGcNonCoalescing"},
        Setup{true, true, true, 64 * kMiB, "GrowthGcCoalescing"},
        Setup{false, false, false, 64 * kMiB, "FixedNonCoalescing"},
        Setup{false, true, true, 64 * kMiB, "FixedGcCoalescing"},
        Setup{true, false, true, 48 * kMiB + 768, "OddLimitGc"}),
    [](const ::testing::TestParamInfo<Setup>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace bfc
