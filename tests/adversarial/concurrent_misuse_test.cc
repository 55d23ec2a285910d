// File: tests/adversarial/concurrent_misuse_test.cc
// Callers that break the rules from several threads at once: every thread
// frees the same block, frees race queries about the block being freed,
// interior and foreign pointers race real frees and allocations, and the
// pool is emptied while others allocate. The promise (README, Guarantees) is
// that each misuse is counted exactly once, answered with a clear error and
// changes nothing: Validate() holds, every count is exact and memory handed
// out stays disjoint. Runs under TSan (label concurrency) and ASan+UBSan.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"
#include "testing/fuse.h"

namespace bfc {
namespace {

using ::bfc::testing::Fuse;
using ::bfc::testing::kSanitizerSlowdown;
using ::bfc::testing::LogCapture;

constexpr int kThreads = 4;

std::unique_ptr<Allocator> MakeAllocator(size_t limit,
                                         Allocator::Options o = {}) {
  o.allow_retry_on_failure = false;
  return std::make_unique<Allocator>(std::make_unique<HostSubAllocator>(),
                                     limit, "misuse", o);
}

// Runs `body(thread_index)` on kThreads threads released together.
template <typename F>
void RunTogether(F body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      body(t);
    });
  }
  for (std::thread& t : pool) t.join();
}

TEST(ConcurrentMisuseTest, EveryThreadFreesTheSameBlocksEachFreedOnce) {
  Fuse fuse(absl::Seconds(60), "EveryThreadFreesTheSameBlocksEachFreedOnce");
  LogCapture log;
  std::unique_ptr<Allocator> alloc = MakeAllocator(64 * kMiB);
  const int rounds = 400 / kSanitizerSlowdown;
  int64_t expected_invalid = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<void*> blocks;
    for (int i = 0; i < 8; ++i) {
      void* p = alloc->AllocateRaw(256, 1024 * (i + 1));
      ASSERT_NE(p, nullptr);
      blocks.push_back(p);
    }
    std::atomic<int> ok{0};
    RunTogether([&](int) {
      for (void* p : blocks) {
        if (alloc->Deallocate(p).ok()) ok.fetch_add(1);
      }
    });
    // No allocation runs in between, so nobody can take a freed address:
    // exactly one free of each block succeeds, every other is counted.
    ASSERT_EQ(ok.load(), 8) << "round " << r;
    expected_invalid += 8 * (kThreads - 1);
  }
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.num_invalid_frees, expected_invalid);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
}

TEST(ConcurrentMisuseTest, QueriesRacingTheFreeOfTheirBlockNeverSeeHalfState) {
  Fuse fuse(absl::Seconds(60), "QueriesRacingTheFreeOfTheirBlock");
  LogCapture log;
  std::unique_ptr<Allocator> alloc = MakeAllocator(64 * kMiB);
  const int rounds = 2000 / kSanitizerSlowdown;
  std::atomic<bool> torn{false};
  for (int r = 0; r < rounds; ++r) {
    void* p = alloc->AllocateRaw(256, 3000);
    ASSERT_NE(p, nullptr);
    const int64_t id = alloc->AllocationId(p);
    RunTogether([&](int t) {
      if (t == 0) {
        alloc->DeallocateRaw(p);
        return;
      }
      // Before the free: the live answers; after it: 0, 0, -1. Never a mix
      // of one block's size with another's id, never a crash.
      const size_t requested = alloc->RequestedSize(p);
      const size_t allocated = alloc->AllocatedSize(p);
      const int64_t got_id = alloc->AllocationId(p);
      if (requested != 0 && requested != 3000) torn = true;
      if (allocated != 0 && allocated < 3000) torn = true;
      if (got_id != -1 && got_id != id) torn = true;
    });
  }
  EXPECT_FALSE(torn.load());
  EXPECT_EQ(alloc->GetStats()->bytes_in_use, 0);
  EXPECT_EQ(alloc->GetStats()->num_invalid_frees, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
}

TEST(ConcurrentMisuseTest,
     InteriorAndForeignPointersRacingRealTrafficChangeNothing) {
  Fuse fuse(absl::Seconds(60), "InteriorAndForeignPointersRacingRealTraffic");
  LogCapture log;
  std::unique_ptr<Allocator> alloc = MakeAllocator(64 * kMiB);
  std::unique_ptr<Allocator> other = MakeAllocator(4 * kMiB);
  void* foreign = other->AllocateRaw(256, 4096);
  ASSERT_NE(foreign, nullptr);
  const int per_thread = 1500 / kSanitizerSlowdown;
  std::atomic<int64_t> invalid_sent{0};
  RunTogether([&](int t) {
    std::vector<void*> mine;
    for (int i = 0; i < per_thread; ++i) {
      void* p = alloc->AllocateRaw(256, 512 + 256 * (i % 7));
      ASSERT_NE(p, nullptr);
      std::memset(p, t, 512);
      mine.push_back(p);
      // Never a valid pointer of this allocator: one byte into a block
      // still held by this thread, or another allocator's block.
      const absl::Status interior =
          alloc->Deallocate(static_cast<char*>(mine.front()) + 1);
      const absl::Status wrong_owner = alloc->Deallocate(foreign);
      EXPECT_EQ(interior.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(wrong_owner.code(), absl::StatusCode::kInvalidArgument);
      invalid_sent.fetch_add(2);
      if (mine.size() > 16) {
        for (size_t j = 1; j < mine.size(); ++j) {
          ASSERT_EQ(static_cast<unsigned char*>(mine[j])[0],
                    static_cast<unsigned char>(t));
          alloc->DeallocateRaw(mine[j]);
        }
        mine.resize(1);
      }
    }
    for (void* p : mine) alloc->DeallocateRaw(p);
  });
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.num_invalid_frees, invalid_sent.load());
  EXPECT_EQ(other->GetStats()->bytes_in_use, 4096);
  EXPECT_EQ(other->GetStats()->num_invalid_frees, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  EXPECT_TRUE(other->Validate().ok()) << other->Validate();
  other->DeallocateRaw(foreign);
}

TEST(ConcurrentMisuseTest, EmptyingThePoolWhileOthersAllocateLosesNothing) {
  Fuse fuse(absl::Seconds(60), "EmptyingThePoolWhileOthersAllocate");
  LogCapture log;
  Allocator::Options o;
  o.garbage_collection = true;
  std::unique_ptr<Allocator> alloc = MakeAllocator(32 * kMiB, o);
  const int per_thread = 1500 / kSanitizerSlowdown;
  RunTogether([&](int t) {
    for (int i = 0; i < per_thread; ++i) {
      if (t == 0) {
        alloc->ReleaseFreeRegions();
        continue;
      }
      void* p = alloc->AllocateRaw(256, (64 << (i % 12)) + 8);
      if (p == nullptr) continue;  // a full pool is allowed; a bad one is not
      std::memset(p, 0xab, 64);
      alloc->DeallocateRaw(p);
    }
  });
  const AllocatorStats s = *alloc->GetStats();
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_EQ(s.num_invalid_frees, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  // Whatever is still reserved is free and can be given back now.
  alloc->ReleaseFreeRegions();
  EXPECT_EQ(alloc->GetStats()->pool_bytes.value_or(-1), 0);
}

}  // namespace
}  // namespace bfc
