// File: tests/chunk_test.cc
#include "bfc/internal/chunk.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc::internal {
namespace {

TEST(ChunkTest, FreeChunksHaveIdMinusOne) {
  Chunk c;
  EXPECT_FALSE(c.in_use());
  c.allocation_id = 5;
  EXPECT_TRUE(c.in_use());
  c.ptr = reinterpret_cast<void*>(0x1000);
  c.size = 512;
  EXPECT_EQ(c.end_addr(), 0x1200u);
  EXPECT_THAT(c.DebugString(), ::testing::HasSubstr("size=512"));
}

TEST(ChunkTableTest, RecyclesFreedHandlesLastInFirstOut) {
  ChunkTable t;
  const ChunkHandle a = t.Allocate();
  const ChunkHandle b = t.Allocate();
  const ChunkHandle c = t.Allocate();
  EXPECT_EQ(t.num_live(), 3u);
  t[b].size = 768;
  t.Deallocate(b);
  t.Deallocate(a);
  EXPECT_EQ(t.num_live(), 1u);
  EXPECT_EQ(t.Allocate(), a);
  const ChunkHandle again = t.Allocate();
  EXPECT_EQ(again, b);
  // A recycled slot comes back as a fresh chunk.
  EXPECT_EQ(t[again].size, 0u);
  EXPECT_EQ(t[again].next, kInvalidChunkHandle);
  EXPECT_EQ(t.capacity(), 3u);
  EXPECT_TRUE(t.InRange(c));
  EXPECT_FALSE(t.InRange(3));
  EXPECT_GE(t.MetadataBytes(), 3 * sizeof(Chunk));
}

}  // namespace
}  // namespace bfc::internal
