// File: tests/allocator_destruction_test.cc
// Destroying an allocator: with outstanding allocations it logs how many and
// how many bytes, gives every region back to the sub-allocator (exactly the
// blocks it received, so a strict sub-allocator accepts every Free) and does
// not crash. Under ASan/LSan (the `asan` preset) these tests also prove that
// no region leaks at exit and that destruction reads no freed metadata.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/units.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::LogCapture;
using ::bfc::testing::SubAllocatorJournal;

class DestructionTest
    : public ::testing::TestWithParam<std::tuple<bool, bool>> {
 protected:
  std::unique_ptr<Allocator> Make(size_t limit) {
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    o.allow_growth = std::get<0>(GetParam());
    FakeSubAllocator::Options fake;
    fake.supports_coalescing = std::get<1>(GetParam());
    journal_ = std::make_shared<SubAllocatorJournal>();
    return std::make_unique<Allocator>(
        std::make_unique<FakeSubAllocator>(fake, journal_), limit, "dying", o);
  }
  std::shared_ptr<SubAllocatorJournal> journal_;
};

TEST_P(DestructionTest, OutstandingAllocationsAreReportedAndRegionsReturned) {
  std::unique_ptr<Allocator> a = Make(1024 * kMiB);
  std::mt19937 rng(5);
  std::vector<void*> ptrs;
  size_t live_bytes = 0;
  for (int i = 0; i < 300; ++i) {
    void* p = a->AllocateRaw(256, 1 + rng() % (2 * kMiB));
    ASSERT_NE(p, nullptr);
    ptrs.push_back(p);
  }
  // Free two thirds; the rest is outstanding at destruction.
  int outstanding = 0;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (i % 3 != 0) {
      a->DeallocateRaw(ptrs[i]);
    } else {
      ++outstanding;
      live_bytes += a->AllocatedSize(ptrs[i]);
    }
  }
  ASSERT_TRUE(a->Validate().ok());
  ASSERT_EQ(a->GetStats()->bytes_in_use, static_cast<int64_t>(live_bytes));
  const size_t regions_taken = journal_->alloc_results.size();
  LogCapture log;
  a.reset();
  EXPECT_TRUE(
      log.Contains(std::to_string(outstanding) + " outstanding allocation(s)",
                   LogSeverity::kWarning));
  EXPECT_TRUE(log.Contains("(" + std::to_string(live_bytes) + " bytes)",
                           LogSeverity::kWarning));
  EXPECT_EQ(journal_->bytes_outstanding, 0u);
  EXPECT_EQ(journal_->invalid_frees, 0u);
  EXPECT_GE(journal_->frees.size(), 1u);
  EXPECT_LE(journal_->frees.size(), regions_taken);
}

TEST_P(DestructionTest, NothingOutstandingLogsNothing) {
  std::unique_ptr<Allocator> a = Make(64 * kMiB);
  void* p = a->AllocateRaw(256, kMiB);
  a->DeallocateRaw(p);
  LogCapture log;
  a.reset();
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(journal_->bytes_outstanding, 0u);
}

TEST_P(DestructionTest, NeverUsedAllocatorFreesNothing) {
  std::unique_ptr<Allocator> a = Make(64 * kMiB);
  a.reset();
  EXPECT_TRUE(journal_->frees.empty());
}

TEST_P(DestructionTest, AfterReleaseGcAndRejectsEveryRegionIsReturnedOnce) {
  std::unique_ptr<Allocator> a = Make(32 * kMiB);
  std::vector<void*> keep;
  for (int i = 0; i < 6; ++i) keep.push_back(a->AllocateRaw(256, 3 * kMiB));
  a->DeallocateRaw(keep[1]);
  a->DeallocateRaw(keep[4]);
  a->ReleaseFreeRegions();
  keep.push_back(a->AllocateRaw(256, 5 * kMiB));
  const size_t frees_before = journal_->frees.size();
  LogCapture log;
  a.reset();
  EXPECT_EQ(journal_->bytes_outstanding, 0u);
  EXPECT_EQ(journal_->invalid_frees, 0u);
  // Every Free names a distinct block.
  std::vector<void*> freed;
  for (size_t i = frees_before; i < journal_->frees.size(); ++i) {
    freed.push_back(journal_->frees[i].first);
  }
  std::sort(freed.begin(), freed.end());
  EXPECT_EQ(std::adjacent_find(freed.begin(), freed.end()), freed.end());
}

INSTANTIATE_TEST_SUITE_P(
    Configs, DestructionTest,
    ::testing::Combine(::testing::Bool(), ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
      return std::string(std::get<0>(info.param) ? "Growth" : "Fixed") +
             (std::get<1>(info.param) ? "Coalescing" : "NonCoalescing");
    });

// Real memory: LeakSanitizer (in the asan preset) fails the run at exit if a
// region of an allocator destroyed with live allocations was not freed.
TEST(DestructionHostTest, LiveAllocationsDoNotLeakRegions) {
  LogCapture log;
  for (bool growth : {true, false}) {
    Allocator::Options o;
    o.allow_growth = growth;
    o.allow_retry_on_failure = false;
    auto a = std::make_unique<Allocator>(std::make_unique<HostSubAllocator>(),
                                         16 * kMiB, "host", o);
    for (int i = 0; i < 20; ++i) {
      void* p = a->AllocateRaw(256, 100 * kKiB);
      ASSERT_NE(p, nullptr);
      std::memset(p, 0xab, 100 * kKiB);  // real, writable memory
    }
    a.reset();
  }
  EXPECT_TRUE(
      log.Contains("20 outstanding allocation(s)", LogSeverity::kWarning));
}

TEST(DestructionHostTest, AllocatorsOnManyThreadsDestroyedWhileOthersRun) {
  // Independent allocators share only the log sink: destroying one while
  // others allocate, log and die is safe.
  LogCapture log;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int round = 0; round < 20; ++round) {
        Allocator::Options o;
        o.allow_retry_on_failure = false;
        Allocator a(std::make_unique<HostSubAllocator>(), 4 * kMiB, "t", o);
        for (int i = 0; i < 10; ++i) a.AllocateRaw(256, 1000 * (i + t + 1));
        int local = 0;
        a.DeallocateRaw(&local);  // a logged error on the way
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_TRUE(log.Contains("outstanding allocation(s)", LogSeverity::kWarning));
}

}  // namespace
}  // namespace bfc
