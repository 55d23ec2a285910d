// File: tests/region_manager_test.cc
#include "bfc/internal/region_manager.h"

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace bfc::internal {

// Reaches a RegionManager's region list to corrupt it on purpose (a friend).
class RegionManagerTestPeer {
 public:
  static std::vector<AllocationRegion>& regions(RegionManager& rm) {
    return rm.regions_;
  }
};

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
  EXPECT_TRUE(rm.Overlaps(P(0x4f000), 0x1001));   // its first byte
  EXPECT_TRUE(rm.Overlaps(P(0x51fff), 1));        // its last byte
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

// A partial release cuts a hole: what is before and after stays, as
// regions of their own.
TEST(RegionManagerTest, CutOutLeavesWhatIsAroundTheHole) {
  ChunkTable chunks;
  RegionManager rm(&chunks);
  rm.AddAllocationRegion(P(0x10000), 0x10000);
  rm.AddAllocationRegion(P(0x40000), 0x4000);
  EXPECT_TRUE(rm.CutOut(0x14000, 0x18000));  // the middle
  ASSERT_EQ(rm.regions().size(), 3u);
  EXPECT_EQ(rm.regions()[0].ptr(), P(0x10000));
  EXPECT_EQ(rm.regions()[0].memory_size(), 0x4000u);
  EXPECT_EQ(rm.regions()[1].ptr(), P(0x18000));
  EXPECT_EQ(rm.regions()[1].memory_size(), 0x8000u);
  EXPECT_TRUE(rm.CutOut(0x10000, 0x12000));  // the front
  EXPECT_EQ(rm.regions()[0].ptr(), P(0x12000));
  EXPECT_TRUE(rm.CutOut(0x1c000, 0x20000));  // the back
  EXPECT_EQ(rm.regions()[1].memory_size(), 0x4000u);
  EXPECT_TRUE(rm.CutOut(0x40000, 0x44000));  // all of it
  EXPECT_EQ(rm.regions().size(), 2u);
  // Nothing changes for a range not inside one region, or empty.
  EXPECT_FALSE(rm.CutOut(0x13000, 0x19000));  // spans a hole
  EXPECT_FALSE(rm.CutOut(0x30000, 0x31000));  // in no region
  EXPECT_FALSE(rm.CutOut(0x19000, 0x19000));  // empty
  EXPECT_FALSE(rm.CutOut(0x19000, 0x18000));  // backwards
  rm.AddAllocationRegion(P(0x80000), 0x4000, /*dedicated=*/true);
  EXPECT_FALSE(rm.CutOut(0x81000, 0x82000));  // a dedicated region
  EXPECT_EQ(rm.regions().size(), 3u);
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
  EXPECT_TRUE(rm.erase(P(0x10100)));
  EXPECT_FALSE(rm.erase(P(0x10100)));
  EXPECT_EQ(rm.get_handle(P(0x10100)), kInvalidChunkHandle);
  EXPECT_EQ(rm.num_handles(), 1u);
  EXPECT_GT(rm.MetadataBytes(), 0u);
}

// --- RegionManager::Validate ----------------------------------------------

// Regions [0x10000, 0x12000) and [0x20000, 0x21000), each tiled by one chunk
// mapped at its base.
struct TwoRegions {
  ChunkTable chunks;
  RegionManager rm{&chunks};
  TwoRegions() {
    Add(0x10000, 0x2000);
    Add(0x20000, 0x1000);
  }
  ChunkHandle Add(uintptr_t base, size_t size) {
    rm.AddAllocationRegion(P(base), size);
    return MapChunk(base, size);
  }
  ChunkHandle MapChunk(uintptr_t a, size_t size) {
    const ChunkHandle h = chunks.Allocate();
    chunks[h].ptr = P(a);
    chunks[h].size = size;
    rm.set_handle(P(a), h);
    return h;
  }
  std::vector<AllocationRegion>& regions() {
    return RegionManagerTestPeer::regions(rm);
  }
};

TEST(RegionManagerValidateTest, HealthyManagersPass) {
  ChunkTable chunks;
  RegionManager empty(&chunks);
  EXPECT_TRUE(empty.Validate().ok());
  TwoRegions t;
  EXPECT_TRUE(t.rm.Validate().ok());
  // A region extended in place, with a second chunk mapped inside it.
  ASSERT_NE(t.rm.AddOrExtendAllocationRegion(P(0x12000), 0x1000), nullptr);
  t.MapChunk(0x12000, 0x1000);
  EXPECT_TRUE(t.rm.Validate().ok());
}

TEST(RegionManagerValidateTest, RegionWithoutAChunkAtItsBase) {
  TwoRegions t;
  t.rm.AddAllocationRegion(P(0x30000), 0x1000);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError("RegionManager: region 2 [0x30000, 0x31000) "
                                "has no chunk mapped at its base"));
}

TEST(RegionManagerValidateTest, OverlappingRegions) {
  TwoRegions t;
  t.regions()[0] = AllocationRegion(P(0x10000), 0x11000);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError("RegionManager: region 0 [0x10000, 0x21000) "
                                "overlaps region 1 [0x20000, 0x21000)"));
}

TEST(RegionManagerValidateTest, UnsortedRegions) {
  TwoRegions t;
  std::swap(t.regions()[0], t.regions()[1]);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError("RegionManager: region 1 [0x10000, 0x12000) "
                                "is not after region 0 [0x20000, 0x21000) "
                                "(regions are sorted)"));
}

TEST(RegionManagerValidateTest, RegionsOffTheGranule) {
  TwoRegions t;
  t.regions()[1] = AllocationRegion(P(0x20000), 0x180);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError("RegionManager: region 1 [0x20000, 0x20180) "
                                "(384 bytes): base and size must be "
                                "multiples of 256"));
  t.regions()[1] = AllocationRegion(P(0x20000), 0);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError("RegionManager: region 1 at 0x20000 is empty"));
}

TEST(RegionManagerValidateTest, MappedChunkOutsideEveryRegion) {
  TwoRegions t;
  const ChunkHandle h = t.MapChunk(0x50000, 0x100);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError(
                "RegionManager: chunk 2 Chunk{ptr=0x50000, size=256, "
                "requested=0, id=-1, in_use=false} is mapped but does not lie "
                "inside a region"));
  ASSERT_TRUE(t.rm.erase(P(0x50000)));
  // A chunk that starts inside a region but runs past its end.
  t.chunks[h].ptr = P(0x20f00);
  t.chunks[h].size = 0x200;
  t.rm.set_handle(P(0x20f00), h);
  EXPECT_EQ(t.rm.Validate(),
            absl::InternalError(
                "RegionManager: chunk 2 Chunk{ptr=0x20f00, size=512, "
                "requested=0, id=-1, in_use=false} is mapped but does not lie "
                "inside a region"));
}

TEST(RegionManagerValidateTest, TheChunkMapIsValidatedFirst) {
  TwoRegions t;
  // Recycling a mapped chunk breaks the map (and the region's base).
  t.chunks.Deallocate(1);
  const absl::Status s = t.rm.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(s.message(), "ChunkMap: slot ")) << s;
  EXPECT_TRUE(absl::EndsWith(s.message(),
                             " (handle 1) names a chunk with no start (a "
                             "recycled slot?)"))
      << s;
}

#if BFC_CHECK_LEVEL >= 1
TEST(RegionManagerDeathTest, AddingAnOverlappingRegionIsCaught) {
  TwoRegions t;
  EXPECT_DEATH(t.rm.AddAllocationRegion(P(0x11000), 0x1000),
               "bfc: check failed at .*region_manager\\.cc:[0-9]+: "
               "!Overlaps\\(ptr, memory_size\\)");
}
#endif

}  // namespace
}  // namespace bfc::internal
