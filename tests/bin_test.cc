// File: tests/bin_test.cc
#include "bfc/internal/bin.h"

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

}  // namespace
}  // namespace bfc::internal
