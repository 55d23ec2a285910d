// File: tests/bin_test.cc
#include "bfc/internal/bin.h"

#include <limits>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace bfc::internal {

// Reaches a Bin's representation to corrupt it on purpose (friend of Bin).
class BinTestPeer {
 public:
  static Bin::Entry* small_entries(Bin& b) { return b.small_entries_; }
  static uint32_t& num_small(Bin& b) { return b.num_small_; }
  static bool& small(Bin& b) { return b.small_; }
  static size_t& total_bytes(Bin& b) { return b.total_bytes_; }
  static auto& tree(Bin& b) { return b.free_chunks_; }
};

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
  EXPECT_EQ(BinNumForSize(std::numeric_limits<size_t>::max()), 20);
  for (size_t bytes = 1; bytes < 256; ++bytes)
    EXPECT_EQ(BinNumForSize(bytes), 0);
  for (BinNum b = 0; b < kNumBins; ++b) {
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

// --- Bin::Validate -------------------------------------------------------

// Bin 3 holds sizes [2048, 4096).
constexpr BinNum kBin3 = 3;

// Two entries of bin 3, in the inline array: (2048, 0x1000, handle 1) and
// (2048, 0x3000, handle 2).
void FillTwo(Bin& bin) {
  ASSERT_TRUE(bin.Insert(2048, P(0x1000), 1));
  ASSERT_TRUE(bin.Insert(2048, P(0x3000), 2));
}

// `n` entries of bin 3 at 0x100000 + i * 0x1000, sizes 2048 + 256 * (i % 8):
// more than the inline array holds, so the bin is a B-tree.
void FillMany(Bin& bin, int n) {
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(bin.Insert(2048 + 256 * (i % 8), P(0x100000 + i * 0x1000), i));
  }
}

TEST(BinValidateTest, HealthyBinsPassInBothRepresentations) {
  Bin bin;
  EXPECT_TRUE(bin.Validate(kBin3, nullptr).ok());
  FillTwo(bin);
  EXPECT_TRUE(bin.Validate(kBin3, nullptr).ok());
  Bin large;
  FillMany(large, 40);
  EXPECT_TRUE(large.Validate(kBin3, nullptr).ok());
  // Down to the switch point and back to the array.
  for (int i = 0; i < 33; ++i) {
    ASSERT_TRUE(large.Erase(2048 + 256 * (i % 8), P(0x100000 + i * 0x1000)));
    ASSERT_TRUE(large.Validate(kBin3, nullptr).ok()) << i;
  }
}

TEST(BinValidateTest, EntriesOutOfOrderInTheArray) {
  Bin bin;
  FillTwo(bin);
  BinTestPeer::small_entries(bin)[0].addr = 0x5000;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError(
                "Bin 3: entry 1 (handle 2, ptr 0x3000, size 2048) is not "
                "after entry 0 (handle 1, ptr 0x5000, size 2048) in (size, "
                "address) order"));
}

TEST(BinValidateTest, EntriesOutOfOrderInTheBTree) {
  Bin bin;
  FillMany(bin, 40);
  // The set's keys are const: only a deliberate corruption writes them.
  auto& tree = BinTestPeer::tree(bin);
  const_cast<Bin::Entry&>(*tree.begin()).size = 4096 - 256;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError(
                "Bin 3: entry 1 (handle 8, ptr 0x108000, size 2048) is not "
                "after entry 0 (handle 0, ptr 0x100000, size 3840) in (size, "
                "address) order"));
}

TEST(BinValidateTest, DuplicateKeyIsOutOfOrder) {
  Bin bin;
  FillTwo(bin);
  BinTestPeer::small_entries(bin)[1].addr = 0x1000;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError(
                "Bin 3: entry 1 (handle 2, ptr 0x1000, size 2048) is not "
                "after entry 0 (handle 1, ptr 0x1000, size 2048) in (size, "
                "address) order"));
}

TEST(BinValidateTest, EntryOfAnotherSizeClass) {
  Bin bin;
  FillTwo(bin);
  BinTestPeer::small_entries(bin)[0].size = 1024;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError("Bin 3: entry 0 (handle 1, ptr 0x1000, size "
                                "1024) belongs in bin 2"));
}

TEST(BinValidateTest, EntryNotAMultipleOfTheGranule) {
  Bin bin;
  FillTwo(bin);
  BinTestPeer::small_entries(bin)[1].size = 2100;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError(
                "Bin 3: entry 1 (handle 2, ptr 0x3000, size 2100) has a size "
                "or address that is not a non-zero multiple of 256"));
}

TEST(BinValidateTest, TotalBytesBookkeeping) {
  Bin bin;
  FillTwo(bin);
  BinTestPeer::total_bytes(bin) += 256;
  EXPECT_EQ(bin.Validate(kBin3, nullptr),
            absl::InternalError(
                "Bin 3: entries sum to 4096 bytes but total_bytes is 4352"));
}

TEST(BinValidateTest, Representations) {
  {
    Bin bin;
    FillTwo(bin);
    BinTestPeer::num_small(bin) = 40;
    EXPECT_EQ(bin.Validate(kBin3, nullptr),
              absl::InternalError("Bin 3: the inline array holds 40 entries, "
                                  "more than its capacity 32"));
  }
  {
    Bin bin;
    FillMany(bin, 40);
    BinTestPeer::small(bin) = true;
    EXPECT_EQ(bin.Validate(kBin3, nullptr),
              absl::InternalError("Bin 3: the inline array is in use but the "
                                  "B-tree holds 40 entries"));
  }
  {
    Bin bin;
    FillMany(bin, 40);
    BinTestPeer::num_small(bin) = 1;
    EXPECT_EQ(bin.Validate(kBin3, nullptr),
              absl::InternalError("Bin 3: the B-tree is in use but the inline "
                                  "array's count is 1"));
  }
  {
    Bin bin;
    FillMany(bin, 40);
    auto& tree = BinTestPeer::tree(bin);
    while (tree.size() > 8) tree.erase(tree.begin());
    EXPECT_EQ(bin.Validate(kBin3, nullptr),
              absl::InternalError("Bin 3: the B-tree holds 8 entries, which "
                                  "belong in the inline array (at most 8)"));
  }
}

TEST(BinValidateTest, EntriesAgainstTheChunkTable) {
  ChunkTable chunks;
  const ChunkHandle a = chunks.Allocate();
  const ChunkHandle b = chunks.Allocate();
  chunks[a].ptr = P(0x1000);
  chunks[a].size = 2048;
  chunks[b].ptr = P(0x3000);
  chunks[b].size = 2048;
  Bin bin;
  ASSERT_TRUE(bin.Insert(2048, P(0x1000), a));
  ASSERT_TRUE(bin.Insert(2048, P(0x3000), b));
  EXPECT_TRUE(bin.Validate(kBin3, &chunks).ok());

  chunks[b].allocation_id = 7;
  chunks[b].requested_size = 100;
  EXPECT_EQ(bin.Validate(kBin3, &chunks),
            absl::InternalError(
                "Bin 3: entry 1 (handle 1, ptr 0x3000, size 2048) is in use: "
                "Chunk{ptr=0x3000, size=2048, requested=100, id=7, "
                "in_use=true}"));
  chunks[b].allocation_id = -1;
  chunks[b].requested_size = 0;

  chunks[a].size = 2304;
  EXPECT_EQ(bin.Validate(kBin3, &chunks),
            absl::InternalError(
                "Bin 3: entry 0 (handle 0, ptr 0x1000, size 2048) does not "
                "match its chunk Chunk{ptr=0x1000, size=2304, requested=0, "
                "id=-1, in_use=false}"));
  chunks[a].size = 2048;

  Bin stale;
  ASSERT_TRUE(stale.Insert(2048, P(0x5000), 9));
  EXPECT_EQ(stale.Validate(kBin3, &chunks),
            absl::InternalError("Bin 3: entry 0 (handle 9, ptr 0x5000, size "
                                "2048) names a handle out of range (2 chunk "
                                "slots)"));
}

}  // namespace
}  // namespace bfc::internal
