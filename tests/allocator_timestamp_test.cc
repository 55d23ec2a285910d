// File: tests/allocator_timestamp_test.cc
// -----------------------------------------------------------------------------
//
// TensorFlow's timestamped reuse (Allocator::SetTimingCounter,
// SetSafeFrontier, AllocationAttributes::freed_by_func) with TF's semantics
// (tensorflow/core/common_runtime/bfc_allocator.cc, XLA's copy): a free takes
// the counter's next count and is neither coalesced nor, for an allocation
// whose freed_by_func returns a smaller count, reused; counts below the safe
// frontier merge at the next allocation; an allocation without a limit that
// would fail merges unsafe chunks too. Each expectation is derived here from
// the layout, never read back from the allocator; Validate() after each step.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/log.h"
#include "bfc/shared_counter.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#include "testing/quiet_log.h"

namespace bfc {
namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;

using testing::QuietLog;

// An allocator over never-touched addresses; one region of `limit` bytes
// (no growth), so placements are offsets from its base.
struct Rig {
  explicit Rig(size_t limit = kMiB, bool retry = false,
               absl::Duration timeout = absl::Seconds(5)) {
    Allocator::Options o;
    o.allow_growth = false;
    o.allow_retry_on_failure = retry;
    o.retry_timeout = timeout;
    auto sub = std::make_unique<VirtualSubAllocator>(size_t{1} << 30);
    alloc = std::make_unique<Allocator>(std::move(sub), limit, "ts", o);
    alloc->SetTimingCounter(&counter);
  }
  // Allocates with freed_by_func returning `freed_before` (none when < 0).
  void* Alloc(size_t n, int64_t freed_before = -1) {
    std::function<uint64_t()> f = [freed_before] {
      return static_cast<uint64_t>(freed_before);
    };
    AllocationAttributes attr;
    attr.retry_on_failure = true;
    if (freed_before >= 0) attr.freed_by_func = &f;
    void* p = alloc->AllocateRaw(kMinAllocationSize, n, attr);
    EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
    if (p != nullptr && base == 0) base = reinterpret_cast<uintptr_t>(p);
    return p;
  }
  void Free(void* p) {
    alloc->DeallocateRaw(p);
    EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  }
  size_t Offset(void* p) const { return reinterpret_cast<uintptr_t>(p) - base; }

  SharedCounter counter;
  std::unique_ptr<Allocator> alloc;
  uintptr_t base = 0;  // the first allocation's address: the region's start
};

TEST(SharedCounterTest, CountsFromOne) {
  SharedCounter c;
  EXPECT_EQ(c.get(), 0);
  EXPECT_EQ(c.next(), 1);
  EXPECT_EQ(c.next(), 2);
  EXPECT_EQ(c.get(), 2);
}

// A free takes the counter's next count; a chunk is reused only by an
// allocation whose freed_by_func returns at least its count.
TEST(TimestampedReuseTest, ChunkWaitsForItsCount) {
  Rig r;
  void* a = r.Alloc(kKiB);   // offset 0
  void* g1 = r.Alloc(kKiB);  // 1 KiB: a guard between the freed chunks
  void* c = r.Alloc(kKiB);   // 2 KiB
  void* g2 = r.Alloc(kKiB);  // 3 KiB; the rest of the region from 4 KiB
  ASSERT_NE(g2, nullptr);
  r.counter.next();  // counts 1 and 2 go to other users of the counter
  r.counter.next();
  r.Free(a);  // count 3
  r.Free(c);  // count 4
  EXPECT_EQ(r.counter.get(), 4);
  // Freed at 3 <= 3: a is the best fit.
  void* p = r.Alloc(kKiB, /*freed_before=*/3);
  EXPECT_EQ(r.Offset(p), 0u);
  // c was freed at 4 > 3: skipped for the never-used rest of the region.
  void* q = r.Alloc(kKiB, /*freed_before=*/3);
  EXPECT_EQ(r.Offset(q), 4 * kKiB);
  // Now allowed.
  void* s = r.Alloc(kKiB, /*freed_before=*/4);
  EXPECT_EQ(r.Offset(s), 2 * kKiB);
  for (void* x : {p, q, s, g1, g2}) r.Free(x);
}

// TF's quirk, kept: a freed_by_func returning 0 sets no limit at all, and an
// allocation without one takes any chunk.
TEST(TimestampedReuseTest, ZeroOrNoFuncMeansNoLimit) {
  Rig r;
  void* a = r.Alloc(kKiB);
  void* g = r.Alloc(kKiB);
  r.Free(a);  // count 1
  void* p = r.Alloc(kKiB, /*freed_before=*/0);
  EXPECT_EQ(r.Offset(p), 0u);
  r.Free(p);  // count 2
  void* q = r.Alloc(kKiB);
  EXPECT_EQ(r.Offset(q), 0u);
  r.Free(q);
  r.Free(g);
}

// Freed chunks do not coalesce until their counts are below the safe
// frontier; the merge happens at the next allocation.
TEST(TimestampedReuseTest, CoalescesOnceTheFrontierPasses) {
  Rig r;
  void* a = r.Alloc(256);  // [0, 256)
  void* b = r.Alloc(256);  // [256, 512); the rest from 512
  r.Free(a);               // count 1
  r.Free(b);               // count 2: a, b and the rest stay apart
  // Count 1 is safe, 2 is not: a cannot merge with b.
  r.alloc->SetSafeFrontier(2);
  void* x = r.Alloc(512);  // a and b are 256 each: from the rest, at 512
  EXPECT_EQ(r.Offset(x), 512u);
  r.alloc->SetSafeFrontier(1);  // lower: ignored
  r.alloc->SetSafeFrontier(3);  // count 2 safe: a and b merge
  void* y = r.Alloc(512);
  EXPECT_EQ(r.Offset(y), 0u);
  r.Free(x);
  r.Free(y);
}

// Without the timing counter nothing of this applies: a free coalesces at
// once and freed_by_func is never called.
TEST(TimestampedReuseTest, WithoutACounterFreesCoalesce) {
  Allocator::Options o;
  o.allow_growth = false;
  o.allow_retry_on_failure = false;
  Allocator alloc(std::make_unique<VirtualSubAllocator>(size_t{1} << 30), kMiB,
                  "plain", o);
  int calls = 0;
  std::function<uint64_t()> f = [&calls] {
    ++calls;
    return uint64_t{1};
  };
  AllocationAttributes attr;
  attr.freed_by_func = &f;
  void* a = alloc.AllocateRaw(kMinAllocationSize, 256, attr);
  void* b = alloc.AllocateRaw(kMinAllocationSize, 256, attr);
  alloc.DeallocateRaw(a);
  alloc.DeallocateRaw(b);
  void* y = alloc.AllocateRaw(kMinAllocationSize, 512, attr);
  EXPECT_EQ(y, a);
  EXPECT_EQ(calls, 0);
  alloc.DeallocateRaw(y);
  EXPECT_TRUE(alloc.Validate().ok());
}

// An allocation without a limit that nothing fits merges unsafe chunks
// (counts ignored) rather than fail; one with a limit fails.
TEST(TimestampedReuseTest, ForcedMergeRatherThanFail) {
  QuietLog quiet;  // the refused request logs an out-of-memory report
  Rig r(kMiB);
  void* p[4];
  for (void*& x : p) x = r.Alloc(256 * kKiB);  // the whole region
  for (void* x : p) r.Free(x);                 // counts 1..4, apart
  EXPECT_EQ(r.Alloc(kMiB, /*freed_before=*/4), nullptr);
  void* whole = r.Alloc(kMiB);
  EXPECT_EQ(r.Offset(whole), 0u);
  r.Free(whole);
}

// The forced merge stops once a large enough chunk formed: the others keep
// their counts (and stay apart).
TEST(TimestampedReuseTest, ForcedMergeStopsWhenSatisfied) {
  QuietLog quiet;  // the refused request logs an out-of-memory report
  Rig r(kMiB);
  void* p[4];
  for (void*& x : p) x = r.Alloc(256 * kKiB);
  for (void* x : p) r.Free(x);       // counts 1..4 in address order
  void* half = r.Alloc(512 * kKiB);  // p[0] and p[1] merged
  EXPECT_EQ(r.Offset(half), 0u);
  // p[2] (count 3) and p[3] (count 4) did not merge: 512 KiB does not fit.
  EXPECT_EQ(r.Alloc(512 * kKiB, /*freed_before=*/4), nullptr);
  // p[2] alone is reusable at count 3.
  void* third = r.Alloc(256 * kKiB, /*freed_before=*/3);
  EXPECT_EQ(r.Offset(third), 512 * kKiB);
  r.Free(half);
  r.Free(third);
}

// TF gives back a region whose chunks are all free, whatever their counts:
// ReleaseFreeRegions (and garbage collection) do the same here although the
// freed chunks sit apart.
TEST(TimestampedReuseTest, FullyFreeRegionsAreGivenBack) {
  Rig r(kMiB);
  void* p[4];
  for (void*& x : p) x = r.Alloc(256 * kKiB);
  for (void* x : p) r.Free(x);  // counts 1..4, apart
  EXPECT_EQ(r.alloc->ReleaseFreeRegions(), kMiB);
  EXPECT_EQ(*r.alloc->GetStats()->pool_bytes, 0);
  EXPECT_TRUE(r.alloc->Validate().ok());
}

// A split remainder keeps its parent's count.
TEST(TimestampedReuseTest, SplitRemainderKeepsTheCount) {
  Rig r;
  void* a = r.Alloc(kKiB);
  void* g = r.Alloc(kKiB);
  for (int i = 0; i < 5; ++i) r.counter.next();
  r.Free(a);                                   // count 6
  void* p = r.Alloc(256, /*freed_before=*/6);  // splits a: 1 KiB >= 2 x 256
  EXPECT_EQ(r.Offset(p), 0u);
  // The remainder [256, 1 KiB) was freed at 6: not for a limit of 5 (the
  // never-used rest of the region serves it, after g).
  void* q = r.Alloc(256, /*freed_before=*/5);
  EXPECT_EQ(r.Offset(q), 2 * kKiB);
  void* s = r.Alloc(256, /*freed_before=*/6);
  EXPECT_EQ(r.Offset(s), 256u);
  for (void* x : {p, q, s, g}) r.Free(x);
}

// freed_by_func is asked again on each retry; SetSafeFrontier wakes a
// waiting allocation, whose chunks then merge.
TEST(TimestampedReuseTest, FrontierWakesAWaitingAllocation) {
  Rig r(kMiB, /*retry=*/true, absl::Seconds(20));
  void* a = r.Alloc(512 * kKiB);
  void* b = r.Alloc(512 * kKiB);
  r.Free(a);  // count 1
  r.Free(b);  // count 2
  std::atomic<int> calls{0};
  std::function<uint64_t()> f = [&calls] {
    ++calls;
    return uint64_t{2};
  };
  std::thread device([&] {
    // Let the allocation fail and wait (it cannot merge counts 1 and 2).
    while (calls.load() < 1) std::this_thread::yield();
    absl::SleepFor(absl::Milliseconds(20));
    r.alloc->SetSafeFrontier(3);
  });
  AllocationAttributes attr;
  attr.freed_by_func = &f;
  void* whole = r.alloc->AllocateRaw(kMinAllocationSize, kMiB, attr);
  device.join();
  EXPECT_EQ(whole, a);
  EXPECT_GE(calls.load(), 2);  // the first attempt and at least one retry
  r.Free(whole);
}

// While one allocation waits (unlocked) for a free with its freed_by_func
// bound, another thread's allocation that names none may use any chunk: it
// takes the best fit, not the best among the chunks the waiter may use (the
// waiter's bound was left in the allocator's per-call state, and the second
// allocation's search read it).
TEST(TimestampedReuseTest, AWaitersBoundDoesNotNarrowAnotherAllocation) {
  QuietLog quiet;
  Rig r(8 * kMiB, /*retry=*/true, absl::Seconds(20));
  void* x = r.Alloc(2 * kMiB);
  void* s1 = r.Alloc(kMiB);
  void* y = r.Alloc(kMiB);
  void* rest = r.Alloc(4 * kMiB);
  ASSERT_TRUE(x && s1 && y && rest);
  r.Free(x);  // count 1: the waiter may use it
  r.counter.next();
  r.counter.next();
  r.Free(y);  // count 4: the waiter may not
  std::atomic<int> calls{0};
  std::function<uint64_t()> f = [&calls] {
    ++calls;
    return uint64_t{2};
  };
  void* waited = nullptr;
  std::thread waiter([&] {
    AllocationAttributes attr;
    attr.freed_by_func = &f;
    waited = r.alloc->AllocateRaw(kMinAllocationSize, 3 * kMiB, attr);
  });
  while (r.alloc->GetStats()->num_retries == 0) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  // Best fit for 1 MiB is y (1 MiB), not x (2 MiB).
  void* q = r.alloc->AllocateRaw(kMinAllocationSize, kMiB);
  EXPECT_EQ(q, y);
  r.Free(rest);  // count 5: safe for the waiter once the frontier passes it
  r.alloc->SetSafeFrontier(6);  // wakes the waiter
  waiter.join();
  EXPECT_EQ(waited, rest);
  r.Free(q);
  r.Free(waited);
  r.Free(s1);
}

// A freed_by_func that throws is logged and the allocation goes on without
// a limit; nothing escapes.
TEST(TimestampedReuseTest, ThrowingFuncMeansNoLimit) {
  LogSink previous = SetLogSink([](LogSeverity, std::string_view) {});
  Rig r;
  void* a = r.Alloc(kKiB);
  void* g = r.Alloc(kKiB);
  r.Free(a);
  std::function<uint64_t()> f = []() -> uint64_t {
    throw std::runtime_error("device lost");
  };
  AllocationAttributes attr;
  attr.freed_by_func = &f;
  void* p = r.alloc->AllocateRaw(kMinAllocationSize, kKiB, attr);
  EXPECT_EQ(p, a);
  r.Free(p);
  r.Free(g);
  SetLogSink(std::move(previous));
}

// Many frees and allocations with moving limits and frontier: Validate
// after each, every allocation honours its limit, and all memory comes
// back once everything is safe.
TEST(TimestampedReuseTest, RandomizedAgainstTheLimits) {
  Rig r(4 * kMiB);
  std::vector<std::pair<void*, size_t>> live;
  // The last free count of every 256-byte granule a request covered, and
  // the highest frontier set: counts below it are safe for anyone.
  std::map<uintptr_t, uint64_t> freed_at;
  uint64_t frontier = 0;
  uint64_t seed = 12345;
  auto rnd = [&seed] {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return seed >> 33;
  };
  for (int step = 0; step < 3000; ++step) {
    const int what = static_cast<int>(rnd() % 10);
    if (what < 5 || live.empty()) {
      const size_t n = 256 * (1 + rnd() % 64);
      const int64_t limit =
          rnd() % 2 ? -1 : static_cast<int64_t>(rnd() % (r.counter.get() + 1));
      void* p = r.Alloc(n, limit);
      if (p == nullptr) continue;
      // The memory handed out was last freed at or before the limit, or
      // below the frontier (TF's rules; a limit of 0 or none: no limit).
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      if (limit > 0) {
        for (auto it = freed_at.lower_bound(a);
             it != freed_at.end() && it->first < a + n; ++it) {
          ASSERT_TRUE(it->second <= static_cast<uint64_t>(limit) ||
                      it->second < frontier)
              << "step " << step << ": freed at " << it->second << ", limit "
              << limit << ", frontier " << frontier;
        }
      }
      live.emplace_back(p, n);
    } else if (what < 9) {
      const size_t k = rnd() % live.size();
      const uintptr_t a = reinterpret_cast<uintptr_t>(live[k].first);
      r.Free(live[k].first);
      const uint64_t count = static_cast<uint64_t>(r.counter.get());
      for (size_t off = 0; off < live[k].second; off += 256) {
        freed_at[a + off] = count;
      }
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      const int64_t f = r.counter.get() - static_cast<int64_t>(rnd() % 8);
      if (f > 0) {
        r.alloc->SetSafeFrontier(static_cast<uint64_t>(f));
        frontier = std::max(frontier, static_cast<uint64_t>(f));
      }
    }
    if (step % 100 == 0) {
      ASSERT_TRUE(r.alloc->Validate().ok());
    }
  }
  for (const auto& [p, n] : live) r.Free(p);
  r.alloc->SetSafeFrontier(r.counter.get() + 1);
  void* whole = r.Alloc(4 * kMiB);
  EXPECT_EQ(r.Offset(whole), 0u);
  r.Free(whole);
}

}  // namespace
}  // namespace bfc
