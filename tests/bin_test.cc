// File: tests/bin_test.cc
#include "bfc/internal/bin.h"

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace bfc::internal {
namespace {

void* P(uintptr_t a) { return reinterpret_cast<void*>(a); }

TEST(BinMathTest, RoundedBytes) {
  EXPECT_EQ(RoundedBytes(1), 256u);
  EXPECT_EQ(RoundedBytes(256), 256u);
  EXPECT_EQ(RoundedBytes(257), 512u);
  EXPECT_EQ(RoundedBytes(kMaxRoundableBytes), kMaxRoundableBytes);
}

TEST(BinMathTest, BinNumForSizeMatchesTheSizeClasses) {
  EXPECT_EQ(BinNumForSize(0), 0);
  EXPECT_EQ(BinNumForSize(256), 0);
  EXPECT_EQ(BinNumForSize(511), 0);
  EXPECT_EQ(BinNumForSize(512), 1);
  EXPECT_EQ(BinNumForSize(1 << 20), 12);
  EXPECT_EQ(BinNumForSize((size_t{256} << 20) - 1), 19);
  EXPECT_EQ(BinNumForSize(size_t{256} << 20), 20);
  EXPECT_EQ(BinNumForSize(size_t{1} << 40), 20);  // the last bin takes the rest
  for (BinNum b = 0; b < kBinCount; ++b) {
    EXPECT_EQ(BinNumForSize(BinNumToSize(b)), b);
    if (b > 0) {
      EXPECT_EQ(BinNumForSize(BinNumToSize(b) - 1), b - 1);
    }
  }
}

TEST(BinTest, BestFitIsSmallestSizeThenLowestAddress) {
  Bin bin;
  EXPECT_TRUE(bin.Insert(4096, P(0x9000), 1));
  EXPECT_TRUE(bin.Insert(2048, P(0x5000), 2));
  EXPECT_TRUE(bin.Insert(2048, P(0x3000), 3));
  EXPECT_TRUE(bin.Insert(3072, P(0x1000), 4));
  EXPECT_FALSE(bin.Insert(3072, P(0x1000), 9));  // duplicate key
  EXPECT_EQ(bin.size(), 4u);
  EXPECT_EQ(bin.total_bytes(), 4096u + 2048 + 2048 + 3072);
  EXPECT_EQ(bin.FindBestFit(1024)->handle, 3u);
  EXPECT_EQ(bin.FindBestFit(2048)->handle, 3u);
  EXPECT_EQ(bin.FindBestFit(2049)->handle, 4u);
  EXPECT_EQ(bin.FindBestFit(4096)->handle, 1u);
  EXPECT_EQ(bin.FindBestFit(4097), nullptr);
  EXPECT_EQ(bin.Largest()->handle, 1u);
  // FindFirst walks on in order until the predicate accepts.
  const Bin::Entry* e =
      bin.FindFirst(2048, [](const Bin::Entry& x) { return x.addr == 0x5000; });
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->handle, 2u);
  EXPECT_TRUE(bin.Contains(2048, P(0x5000)));
  EXPECT_TRUE(bin.Erase(2048, P(0x3000)));
  EXPECT_FALSE(bin.Erase(2048, P(0x3000)));
  EXPECT_EQ(bin.FindBestFit(1024)->handle, 2u);
  EXPECT_EQ(bin.total_bytes(), 4096u + 2048 + 3072);
}

TEST(BinTest, EmptyBin) {
  Bin bin;
  EXPECT_TRUE(bin.empty());
  EXPECT_EQ(bin.FindBestFit(256), nullptr);
  EXPECT_EQ(bin.Largest(), nullptr);
}

// A bin switches between its inline array and its B-tree as it fills and
// empties; through many switches both must agree with an ordered set of
// (size, address): the same best fit, erase, take, order and byte total.
TEST(BinTest, MatchesAnOrderedSetAcrossBothRepresentations) {
  Bin bin;
  std::set<std::pair<size_t, uintptr_t>> model;
  std::mt19937_64 rng(7);
  size_t bytes = 0;
  int round_trips = 0;  // times the population went above 64 and below 8
  bool high = false;
  for (int step = 0; step < 100000; ++step) {
    // Drift the target population up and down through the switch points.
    const size_t target = (step / 2000) % 2 == 0 ? 120 : 3;
    const uint64_t r = rng() % 100;
    const size_t size = 256 * (1 + rng() % 8);
    const uintptr_t addr = 256 * (1 + rng() % 4096);
    if (model.size() < target ? r < 70 : r < 30) {
      const bool fresh = model.emplace(size, addr).second;
      ASSERT_EQ(bin.Insert(size, P(addr), 1), fresh);
      if (fresh) bytes += size;
    } else if (!model.empty() && r < 65) {
      auto it = model.begin();
      std::advance(it, rng() % model.size());
      ASSERT_TRUE(bin.Erase(it->first, P(it->second)));
      bytes -= it->first;
      model.erase(it);
    } else {
      auto it = model.lower_bound({size, 0});
      Bin::Entry e;
      ASSERT_EQ(bin.TakeBestFit(size, &e), it != model.end());
      if (it != model.end()) {
        ASSERT_EQ(e.size, it->first);
        ASSERT_EQ(e.addr, it->second);
        bytes -= it->first;
        model.erase(it);
      }
    }
    ASSERT_EQ(bin.size(), model.size());
    ASSERT_EQ(bin.total_bytes(), bytes);
    if (!high && model.size() > 64) high = true;
    if (high && model.size() < 8) {
      high = false;
      ++round_trips;
    }
    if (step % 101 == 0) {
      std::vector<std::pair<size_t, uintptr_t>> order;
      bin.ForEach(
          [&](const Bin::Entry& e) { order.emplace_back(e.size, e.addr); });
      const std::vector<std::pair<size_t, uintptr_t>> want_order(model.begin(),
                                                                 model.end());
      ASSERT_EQ(order, want_order);
      const size_t want = 256 * (1 + rng() % 8);
      const Bin::Entry* best = bin.FindBestFit(want);
      auto it = model.lower_bound({want, 0});
      ASSERT_EQ(best == nullptr, it == model.end());
      if (best != nullptr) {
        ASSERT_EQ(std::make_pair(best->size, best->addr), *it);
      }
    }
  }
  // The walk must really have crossed both switch points, many times.
  EXPECT_GE(round_trips, 10);
}

}  // namespace
}  // namespace bfc::internal
