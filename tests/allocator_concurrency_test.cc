// File: tests/allocator_concurrency_test.cc
// Threads against one allocator: 2, 4 and 8 threads mixing allocate, free
// (including frees of another thread's pointers), stats, ClearStats,
// ReleaseFreeRegions, Validate and out-of-memory with retry. Run under
// ThreadSanitizer in CI (the `tsan` preset), where a data race is a failure.
// Memory is real (HostSubAllocator), and every allocation is stamped with its
// owner at both ends and checked before it is freed, so two threads handed
// overlapping memory is caught even without a sanitizer. Every test carries a
// Fuse: a hang fails the test instead of stalling CI.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/memory_dump.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"
#include "testing/fuse.h"

namespace bfc {
namespace {

using ::bfc::testing::Fuse;
using ::bfc::testing::kSanitizerSlowdown;
using ::bfc::testing::LogCapture;

// Stamps [p, p + n) at both ends with `tag`; Check verifies the stamps.
void Stamp(void* p, size_t n, uint64_t tag) {
  std::memcpy(p, &tag, sizeof(tag));
  std::memcpy(static_cast<char*>(p) + n - sizeof(tag), &tag, sizeof(tag));
}
bool Check(const void* p, size_t n, uint64_t tag) {
  uint64_t a = 0, b = 0;
  std::memcpy(&a, p, sizeof(a));
  std::memcpy(&b, static_cast<const char*>(p) + n - sizeof(b), sizeof(b));
  return a == tag && b == tag;
}

struct Block {
  void* ptr;
  size_t size;
  uint64_t tag;
};

class ConcurrencyTest : public ::testing::TestWithParam<int> {
 protected:
  std::unique_ptr<Allocator> MakeAllocator(size_t limit, Allocator::Options o) {
    return std::make_unique<Allocator>(std::make_unique<HostSubAllocator>(),
                                       limit, "concurrent", o);
  }
  int threads() const { return GetParam(); }
};

TEST_P(ConcurrencyTest, MixedWorkloadKeepsEveryInvariant) {
  Fuse fuse(absl::Seconds(120), "MixedWorkloadKeepsEveryInvariant");
  LogCapture log;  // OOM reports and GC warnings are expected here
  Allocator::Options o;
  o.allow_growth = true;
  o.garbage_collection = true;
  o.retry_timeout = absl::Milliseconds(20);
  // Small enough that the threads together run out of memory now and then.
  std::unique_ptr<Allocator> alloc = MakeAllocator(24 * kMiB, o);
  const int ops = 6000 / kSanitizerSlowdown;
  std::atomic<int> failures{0};
  std::atomic<int64_t> ooms{0};
  std::atomic<uint64_t> next_tag{1};
  // A mailbox of blocks handed between threads, so frees cross threads.
  std::mutex mailbox_mu;
  std::vector<Block> mailbox;

  auto worker = [&](int id) {
    std::mt19937_64 rng(1234 + id);
    std::vector<Block> mine;
    auto release = [&](const Block& b) {
      if (!Check(b.ptr, b.size, b.tag)) ++failures;  // someone overwrote it
      if (!alloc->Deallocate(b.ptr).ok()) ++failures;
    };
    for (int i = 0; i < ops; ++i) {
      const int what = static_cast<int>(rng() % 100);
      if (what < 45) {
        const size_t size =
            16 + rng() % (rng() % 8 == 0 ? 3 * kMiB : 32 * kKiB);
        const size_t alignment = size_t{1} << (rng() % 14);
        AllocationAttributes attr;
        attr.retry_on_failure = rng() % 2 == 0;
        void* p = alloc->AllocateRaw(alignment, size, attr);
        if (p == nullptr) {
          ++ooms;
          continue;
        }
        if (reinterpret_cast<uintptr_t>(p) % std::max<size_t>(alignment, 256))
          ++failures;
        if (alloc->RequestedSize(p) != size) ++failures;
        const Block b{p, size, next_tag++};
        Stamp(b.ptr, b.size, b.tag);
        mine.push_back(b);
      } else if (what < 75) {
        if (mine.empty()) continue;
        const size_t k = rng() % mine.size();
        release(mine[k]);
        mine[k] = mine.back();
        mine.pop_back();
      } else if (what < 82) {
        // Hand one to another thread / take one from the mailbox.
        std::lock_guard<std::mutex> lock(mailbox_mu);
        if (!mine.empty() && rng() % 2 == 0) {
          mailbox.push_back(mine.back());
          mine.pop_back();
        } else if (!mailbox.empty()) {
          mine.push_back(mailbox.back());
          mailbox.pop_back();
        }
      } else if (what < 92) {
        std::optional<AllocatorStats> s = alloc->GetStats();
        if (!s || s->bytes_in_use < 0 || s->bytes_in_use > *s->pool_bytes ||
            *s->pool_bytes > static_cast<int64_t>(24 * kMiB)) {
          ++failures;
        }
        (void)alloc->RequestedSize(mine.empty() ? nullptr : mine[0].ptr);
      } else if (what < 95) {
        alloc->ReleaseFreeRegions();
      } else if (what < 97) {
        alloc->ClearStats();
      } else {
        if (!alloc->Validate().ok()) ++failures;
      }
    }
    for (const Block& b : mine) release(b);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads(); ++t) pool.emplace_back(worker, t);
  for (std::thread& t : pool) t.join();
  for (const Block& b : mailbox) {
    EXPECT_TRUE(Check(b.ptr, b.size, b.tag));
    EXPECT_TRUE(alloc->Deallocate(b.ptr).ok());
  }
  EXPECT_EQ(failures.load(), 0);
  const absl::Status v = alloc->Validate();
  EXPECT_TRUE(v.ok()) << v;
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.num_invalid_frees, 0);
  EXPECT_EQ(s.num_ooms, ooms.load());
  alloc->ReleaseFreeRegions();
  EXPECT_EQ(alloc->GetStats()->pool_bytes, 0);
}

TEST_P(ConcurrencyTest, OomUnderLoadFailsCleanlyWithinTheRetryTimeout) {
  Fuse fuse(absl::Seconds(120),
            "OomUnderLoadFailsCleanlyWithinTheRetryTimeout");
  LogCapture log;
  Allocator::Options o;
  o.allow_growth = false;
  const absl::Duration timeout = absl::Milliseconds(50);
  o.retry_timeout = timeout;
  constexpr size_t kLimit = 8 * kMiB;
  std::unique_ptr<Allocator> alloc = MakeAllocator(kLimit, o);
  const int rounds = 150 / kSanitizerSlowdown;
  std::atomic<int> failures{0};
  std::atomic<int> successes{0};
  std::atomic<int> ooms{0};
  auto worker = [&](int id) {
    std::mt19937 rng(99 + id);
    std::vector<Block> mine;
    for (int i = 0; i < rounds; ++i) {
      // Each thread reaches for a large share: together they exceed the
      // limit, so some calls wait and some fail.
      const size_t size = kLimit / 4 + rng() % (kLimit / 4);
      const absl::Time t0 = absl::Now();
      void* p = alloc->AllocateRaw(256, size);
      const absl::Duration took = absl::Now() - t0;
      // Success or a clean failure, and never much past the retry timeout.
      if (took > timeout + absl::Seconds(2) * kSanitizerSlowdown) ++failures;
      if (p == nullptr) {
        ++ooms;
      } else {
        ++successes;
        const Block b{p, size, static_cast<uint64_t>(id) << 32 | i};
        Stamp(b.ptr, b.size, b.tag);
        mine.push_back(b);
      }
      // Hold a little, then free (waking waiters).
      if (mine.size() >= 1 + rng() % 2) {
        absl::SleepFor(absl::Microseconds(rng() % 500));
        for (const Block& b : mine) {
          if (!Check(b.ptr, b.size, b.tag)) ++failures;
          alloc->DeallocateRaw(b.ptr);
        }
        mine.clear();
      }
    }
    for (const Block& b : mine) alloc->DeallocateRaw(b.ptr);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads(); ++t) pool.emplace_back(worker, t);
  for (std::thread& t : pool) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(successes.load(), 0);
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.num_ooms, ooms.load());
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_LE(*s.pool_bytes, static_cast<int64_t>(kLimit));
  EXPECT_TRUE(alloc->Validate().ok());
}

TEST_P(ConcurrencyTest, WaitersAreWokenByAFreeAndSucceed) {
  Fuse fuse(absl::Seconds(60), "WaitersAreWokenByAFreeAndSucceed");
  LogCapture log;
  Allocator::Options o;
  o.allow_growth = false;
  o.retry_timeout = absl::Seconds(30);  // far longer than the test may take
  constexpr size_t kLimit = 16 * kMiB;
  std::unique_ptr<Allocator> alloc = MakeAllocator(kLimit, o);
  void* hog = alloc->AllocateRaw(256, kLimit);
  ASSERT_NE(hog, nullptr);
  const int waiters = threads() - 1 > 0 ? threads() - 1 : 1;
  const size_t each = kLimit / (2 * waiters);
  std::atomic<int> started{0};
  std::vector<void*> got(waiters, nullptr);
  std::vector<absl::Duration> waited(waiters);
  std::vector<std::thread> pool;
  for (int w = 0; w < waiters; ++w) {
    pool.emplace_back([&, w] {
      ++started;
      const absl::Time t0 = absl::Now();
      got[w] = alloc->AllocateRaw(256, each);
      waited[w] = absl::Now() - t0;
    });
  }
  while (started.load() < waiters) std::this_thread::yield();
  absl::SleepFor(absl::Milliseconds(100));  // let them all block
  alloc->DeallocateRaw(hog);
  for (std::thread& t : pool) t.join();
  for (int w = 0; w < waiters; ++w) {
    EXPECT_NE(got[w], nullptr) << "waiter " << w << " was not woken";
    EXPECT_LT(waited[w], absl::Seconds(10)) << "woken late: timed out?";
  }
  EXPECT_EQ(alloc->GetStats()->num_ooms, 0);
  for (void* p : got) alloc->DeallocateRaw(p);
  EXPECT_TRUE(alloc->Validate().ok());
}

TEST_P(ConcurrencyTest, ConcurrentInvalidFreesChangeNothing) {
  Fuse fuse(absl::Seconds(60), "ConcurrentInvalidFreesChangeNothing");
  LogCapture log;
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  std::unique_ptr<Allocator> alloc = MakeAllocator(64 * kMiB, o);
  void* live = alloc->AllocateRaw(256, 4096);
  ASSERT_NE(live, nullptr);
  const int per_thread = 2000 / kSanitizerSlowdown;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads(); ++t) {
    pool.emplace_back([&, t] {
      int local = 0;
      for (int i = 0; i < per_thread; ++i) {
        switch ((i + t) % 3) {
          case 0:
            alloc->DeallocateRaw(&local);
            break;
          case 1:
            alloc->DeallocateRaw(static_cast<char*>(live) + 256);
            break;
          default: {
            void* p = alloc->AllocateRaw(256, 512);
            alloc->DeallocateRaw(p);
            alloc->DeallocateRaw(p);  // double free, racing the others
          }
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_in_use, 4096);
  EXPECT_EQ(alloc->RequestedSize(live), 4096u);
  // Every operation makes exactly one invalid free (the double free's first
  // free is valid; if another thread's allocation took the address in
  // between, that thread's own free becomes the invalid one instead).
  EXPECT_EQ(s.num_invalid_frees, threads() * per_thread);
  EXPECT_TRUE(alloc->Validate().ok());
  alloc->DeallocateRaw(live);
}

INSTANTIATE_TEST_SUITE_P(Threads, ConcurrencyTest, ::testing::Values(2, 4, 8),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "Threads";
                         });

// Memory maps with allocation sites from several threads at once: the
// symbolizer's process-wide state is used by one thread at a time (under
// TSan, two dumps at once were reported as a race inside Abseil's
// symbolizer, in the OOM log under one allocator's lock too).
TEST(AllocatorConcurrencyTest, MemoryMapsWithSitesFromManyThreads) {
  Fuse fuse(absl::Seconds(60), "MemoryMapsWithSitesFromManyThreads");
  Allocator::Options o;
  o.record_allocation_sites = true;
  Allocator a(std::make_unique<HostSubAllocator>(), 16 * kMiB, "sites", o);
  std::vector<void*> live;
  for (int i = 0; i < 32; ++i) live.push_back(a.AllocateRaw(256, 1024));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        const MemoryDump d = a.RecordMemoryMap();
        ASSERT_EQ(d.chunks.size(), 33u);  // the 32 and the free rest
        ASSERT_FALSE(d.chunks[0].site.empty());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (void* p : live) a.DeallocateRaw(p);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// A log sink that, on one allocator's out-of-memory report, looks at another
// allocator (the usage of every device, say) while both run out at once:
// the report is sent after the allocator's lock is released, so neither
// thread holds its lock while waiting for the other's (it deadlocked).
TEST(AllocatorConcurrencyTest, ASinkMayLookAtOtherAllocatorsOnOutOfMemory) {
  Fuse fuse(absl::Seconds(60), "ASinkMayLookAtOtherAllocatorsOnOutOfMemory");
  Allocator::Options o;
  o.allow_growth = false;
  o.allow_retry_on_failure = false;
  o.max_oom_logs = 1000000;
  Allocator a(std::make_unique<HostSubAllocator>(), 1 * kMiB, "devA", o);
  Allocator b(std::make_unique<HostSubAllocator>(), 1 * kMiB, "devB", o);
  std::atomic<int64_t> looked{0};
  LogSink previous = SetLogSink([&](LogSeverity, std::string_view message) {
    if (message.find("'devA'") != std::string_view::npos) {
      if (b.GetStats().has_value()) ++looked;
    } else if (message.find("'devB'") != std::string_view::npos) {
      if (a.GetStats().has_value()) ++looked;
    }
  });
  std::vector<std::thread> threads;
  for (Allocator* mine : {&a, &b}) {
    threads.emplace_back([mine] {
      for (int i = 0; i < 500; ++i) {
        ASSERT_EQ(mine->AllocateRaw(256, 2 * kMiB), nullptr);  // over the limit
      }
    });
  }
  for (std::thread& t : threads) t.join();
  SetLogSink(std::move(previous));
  EXPECT_GE(looked.load(), 1000);
  EXPECT_EQ(a.GetStats()->num_ooms, 500);
}

// sub_allocator.h promises a SubAllocator is only called under its
// allocator's lock, so one may keep plain state. GetMemoryType called it
// without the lock: TSan saw this sub-allocator's counter race a Free.
class UnsynchronizedSubAllocator : public SubAllocator {
 public:
  UnsynchronizedSubAllocator() : SubAllocator({}, {}) {}
  void* Alloc(size_t alignment, size_t num_bytes,
              size_t* bytes_received) override {
    ++calls_;
    return inner_.Alloc(alignment, num_bytes, bytes_received);
  }
  void Free(void* ptr, size_t num_bytes) override {
    ++calls_;
    inner_.Free(ptr, num_bytes);
  }
  bool SupportsCoalescing() const override { return false; }
  MemoryType GetMemoryType() const override {
    ++calls_;
    return MemoryType::kHostPageable;
  }

 private:
  mutable int64_t calls_ = 0;  // plain: the contract says it may be
  HostSubAllocator inner_;
};

TEST(AllocatorConcurrencyTest, GetMemoryTypeCallsTheSubAllocatorUnderTheLock) {
  Allocator alloc(std::make_unique<UnsynchronizedSubAllocator>(), 64 * kMiB,
                  "memory_type");
  std::atomic<bool> stop{false};
  std::thread asker([&] {
    while (!stop.load()) {
      EXPECT_EQ(alloc.GetMemoryType(), MemoryType::kHostPageable);
    }
  });
  for (int i = 0; i < 2000; ++i) {
    void* p = alloc.AllocateRaw(256, 4 * kMiB);
    ASSERT_NE(p, nullptr);
    alloc.DeallocateRaw(p);
    (void)alloc.ReleaseFreeRegions();  // a sub-allocator Free each time
  }
  stop.store(true);
  asker.join();
  EXPECT_TRUE(alloc.Validate().ok());
}

TEST(FuseTest, ABlownFuseFailsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Fuse fuse(absl::Milliseconds(50), "sleeper");
        absl::SleepFor(absl::Seconds(60));
      },
      ::testing::ExitedWithCode(3), "FUSE BLOWN");
}

}  // namespace
}  // namespace bfc
