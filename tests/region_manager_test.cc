// File: tests/region_manager_test.cc
#include "bfc/internal/region_manager.h"

#include "gtest/gtest.h"

namespace bfc::internal {
namespace {

char* P(uintptr_t a) { return reinterpret_cast<char*>(a); }

TEST(RegionManagerTest, RegionsAreKeptInAddressOrderAndFound) {
  ChunkTable chunks;
  RegionManager rm(&chunks);
  rm.AddAllocationRegion(P(0x100000), 0x1000);
  rm.AddAllocationRegion(P(0x10000), 0x1000);
  rm.AddAllocationRegion(P(0x50000), 0x2000);
  ASSERT_EQ(rm.regions().size(), 3u);
  EXPECT_EQ(rm.regions()[0].ptr(), P(0x10000));
  EXPECT_EQ(rm.regions()[2].ptr(), P(0x100000));
  EXPECT_EQ(rm.RegionFor(P(0x50000))->ptr(), P(0x50000));
  EXPECT_EQ(rm.RegionFor(P(0x51fff))->ptr(), P(0x50000));
  EXPECT_EQ(rm.RegionFor(P(0x52000)), nullptr);  // one past the end
  EXPECT_EQ(rm.RegionFor(P(0x0)), nullptr);
  EXPECT_TRUE(rm.Overlaps(P(0x4ff00), 0x200));
  EXPECT_FALSE(rm.Overlaps(P(0x4f000), 0x1000));  // ends where a region starts
  EXPECT_FALSE(rm.Overlaps(P(0x52000), 0x1000));
  EXPECT_TRUE(rm.RemoveAllocationRegion(P(0x50000)));
  EXPECT_FALSE(rm.RemoveAllocationRegion(P(0x50000)));
  EXPECT_EQ(rm.RegionFor(P(0x50000)), nullptr);
}

TEST(RegionManagerTest, ExtendsOnlyAContiguousPredecessor) {
  ChunkTable chunks;
  RegionManager rm(&chunks);
  EXPECT_EQ(rm.AddOrExtendAllocationRegion(P(0x10000), 0x1000), nullptr);
  AllocationRegion* r = rm.AddOrExtendAllocationRegion(P(0x11000), 0x3000);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->ptr(), P(0x10000));
  EXPECT_EQ(r->memory_size(), 0x4000u);
  EXPECT_EQ(rm.AddOrExtendAllocationRegion(P(0x20000), 0x1000),
            nullptr);  // a gap
  EXPECT_EQ(rm.regions().size(), 2u);
  // A region right before another merges with it on request.
  EXPECT_EQ(rm.AddOrExtendAllocationRegion(P(0x1f000), 0x1000), nullptr);
  EXPECT_EQ(rm.MergeWithFollowing(P(0x1f000)), P(0x20000));
  EXPECT_EQ(rm.regions().size(), 2u);
  EXPECT_EQ(rm.RegionFor(P(0x20800))->ptr(), P(0x1f000));
  EXPECT_EQ(rm.MergeWithFollowing(P(0x10000)), nullptr);
}

TEST(RegionManagerTest, HandlesAreExactStartsOnly) {
  ChunkTable chunks;
  RegionManager rm(&chunks);
  rm.AddAllocationRegion(P(0x10000), 0x10000);
  const ChunkHandle a = chunks.Allocate();
  const ChunkHandle b = chunks.Allocate();
  chunks[a].ptr = P(0x10000);
  chunks[b].ptr = P(0x10100);
  rm.set_handle(P(0x10000), a);
  rm.set_handle(P(0x10100), b);
  EXPECT_EQ(rm.get_handle(P(0x10000)), a);
  EXPECT_EQ(rm.get_handle(P(0x10100)), b);
  EXPECT_EQ(rm.get_handle(P(0x10080)), kInvalidChunkHandle);  // interior
  rm.erase(P(0x10100));
  EXPECT_EQ(rm.get_handle(P(0x10100)), kInvalidChunkHandle);
  EXPECT_EQ(rm.num_handles(), 1u);
  EXPECT_GT(rm.MetadataBytes(), 0u);
}

}  // namespace
}  // namespace bfc::internal
