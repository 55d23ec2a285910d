// File: tests/chunk_test.cc
#include "bfc/internal/chunk.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc::internal {

// Reaches a ChunkTable's bookkeeping to corrupt it on purpose (a friend).
class ChunkTableTestPeer {
 public:
  static size_t& num_live(ChunkTable& t) { return t.num_live_; }
  static ChunkHandle& free_list(ChunkTable& t) { return t.free_list_; }
  static size_t reserved_chunks(const ChunkTable& t) {
    return t.reserved_chunks_;
  }
};

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

// A chunk is its whole region only with no neighbour on either side; any
// valid handle on one side (including 0 and the largest valid one, whose
// bits overlap the invalid handle's) means a neighbour.
TEST(ChunkTest, WholeRegionOnlyWithoutNeighbours) {
  Chunk c;
  EXPECT_TRUE(c.whole_region());
  for (const ChunkHandle h :
       {ChunkHandle{0}, ChunkHandle{7}, kInvalidChunkHandle - 1}) {
    c.prev = h;
    c.next = kInvalidChunkHandle;
    EXPECT_FALSE(c.whole_region()) << "prev " << h;
    c.prev = kInvalidChunkHandle;
    c.next = h;
    EXPECT_FALSE(c.whole_region()) << "next " << h;
    c.prev = h;
    EXPECT_FALSE(c.whole_region()) << "both " << h;
  }
  c.prev = kInvalidChunkHandle;
  c.next = kInvalidChunkHandle;
  EXPECT_TRUE(c.whole_region());
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

// The blocks lie end to end in one reserved range: chunk h sits h records
// after chunk 0, across block boundaries, and a chunk never moves as the
// table grows.
// A destroyed table's range serves the next table that fits in it: the same
// address, its chunks fresh (nothing of the old table's shows through), and
// a range too small for the next table is not taken.
TEST(ChunkTableTest, TheNextTableReusesADestroyedTablesRange) {
  ChunkTable::DropParkedRange();
  constexpr size_t kMax = 4 * ChunkTable::kBlockChunks;
  Chunk* old_base = nullptr;
  {
    ChunkTable a;
    a.set_max_chunks(kMax);
    for (size_t i = 0; i < 2 * ChunkTable::kBlockChunks; ++i) {
      const ChunkHandle h = a.Allocate();
      a[h].size = 512;
      a[h].allocation_id = 7;
    }
    old_base = &a[0];
  }
  // Still mapped (mincore fails on an unmapped page), its first page still
  // resident behind PROT_NONE: no fault to take it back.
  unsigned char resident = 0;
  ASSERT_EQ(
      mincore(old_base, static_cast<size_t>(sysconf(_SC_PAGESIZE)), &resident),
      0);
  EXPECT_EQ(resident & 1, 1);
  {
    ChunkTable b;
    b.set_max_chunks(kMax);
    std::vector<ChunkHandle> handles;
    for (size_t i = 0; i < 3 * ChunkTable::kBlockChunks; ++i) {
      handles.push_back(b.Allocate());
    }
    EXPECT_EQ(&b[0], old_base);
    for (const ChunkHandle h : handles) {
      ASSERT_EQ(b[h].size, 0u) << h;
      ASSERT_EQ(b[h].allocation_id, -1) << h;
    }
    EXPECT_TRUE(b.Validate().ok()) << b.Validate();
  }
  {
    // b's range is parked; a table wanting a larger one maps its own.
    ChunkTable c;
    c.set_max_chunks(8 * kMax);
    c.Allocate();
    EXPECT_NE(&c[0], old_base);
    ChunkTable d;
    d.set_max_chunks(kMax);
    d.Allocate();
    EXPECT_EQ(&d[0], old_base);
  }
  ChunkTable::DropParkedRange();
}

// The bytes of [begin, end) that /proc/self/maps shows readable and
// writable.
size_t WritableBytesIn(uintptr_t begin, uintptr_t end) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return ~size_t{0};
  size_t bytes = 0;
  unsigned long lo = 0;
  unsigned long hi = 0;
  char perms[8] = {};
  char line[512];
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3) continue;
    if (perms[0] != 'r' || perms[1] != 'w') continue;
    const uintptr_t a = std::max<uintptr_t>(lo, begin);
    const uintptr_t b = std::min<uintptr_t>(hi, end);
    if (a < b) bytes += b - a;
  }
  std::fclose(f);
  return bytes;
}

// Past its first huge page the table is made usable a huge page at a time
// (so the kernel can back it with huge pages), and a destroyed table parks
// all of that behind PROT_NONE, not only the pages its blocks cover.
TEST(ChunkTableTest, HugePagesPastTheFirstAndAllOfThemParked) {
  ChunkTable::DropParkedRange();
  const size_t chunks =
      (kHugePageBytes / sizeof(Chunk) / ChunkTable::kBlockChunks + 2) *
      ChunkTable::kBlockChunks;
  uintptr_t base = 0;
  {
    ChunkTable t;
    t.set_max_chunks(4 * chunks);
    const ChunkHandle first = t.Allocate();
    base = reinterpret_cast<uintptr_t>(&t[first]);
    EXPECT_EQ(base % kHugePageBytes, 0u);
    // One block: whole small pages only.
    EXPECT_EQ(WritableBytesIn(base, base + 4 * kHugePageBytes),
              (ChunkTable::kBlockChunks * sizeof(Chunk) + 4095) / 4096 * 4096);
    for (size_t i = 1; i < chunks; ++i) t[t.Allocate()].size = 256;
    // Past the first huge page: up to the next huge page boundary.
    EXPECT_EQ(WritableBytesIn(base, base + 4 * kHugePageBytes),
              2 * kHugePageBytes);
    EXPECT_TRUE(t.Validate().ok()) << t.Validate();
  }
  EXPECT_EQ(WritableBytesIn(base, base + 4 * kHugePageBytes), 0u);
  {
    ChunkTable u;
    u.set_max_chunks(4 * chunks);
    std::vector<ChunkHandle> handles;
    for (size_t i = 0; i < chunks; ++i) handles.push_back(u.Allocate());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&u[0]), base);
    for (const ChunkHandle h : handles) ASSERT_EQ(u[h].size, 0u) << h;
    EXPECT_TRUE(u.Validate().ok()) << u.Validate();
  }
  ChunkTable::DropParkedRange();
}

TEST(ChunkTableTest, BlocksAreContiguousAndChunksNeverMove) {
  ChunkTable t;
  const ChunkHandle first = t.Allocate();
  Chunk* const at_first = &t[first];
  at_first->size = 512;
  std::vector<ChunkHandle> handles;
  for (size_t i = 0; i < 3 * ChunkTable::kBlockChunks; ++i) {
    handles.push_back(t.Allocate());
  }
  EXPECT_EQ(&t[first], at_first);
  EXPECT_EQ(t[first].size, 512u);
  for (const ChunkHandle h : handles) {
    ASSERT_EQ(&t[h], at_first + (h - first)) << h;
    EXPECT_EQ(t[h].allocation_id, -1) << h;  // a default chunk
  }
  EXPECT_GE(t.handle_bound(), 3 * ChunkTable::kBlockChunks + 1);
  EXPECT_EQ(t.MetadataBytes(), t.handle_bound() * sizeof(Chunk));
  EXPECT_TRUE(t.Validate().ok()) << t.Validate();
}

// A table whose range is full fails to grow as when the host has no memory:
// the slots it has serve, the next creation throws std::bad_alloc, and
// nothing is lost.
TEST(ChunkTableTest, AFullRangeFailsToGrowAsAShortage) {
  ChunkTable t;
  t.set_max_chunks(1);  // one block
  EXPECT_EQ(t.max_chunks(), ChunkTable::kBlockChunks);
  for (size_t i = 0; i < ChunkTable::kBlockChunks; ++i) {
    ASSERT_EQ(t.Allocate(), i);
  }
  EXPECT_THROW(t.Allocate(), std::bad_alloc);
  EXPECT_THROW(t.Reserve(1), std::bad_alloc);
  // The creation that threw left nothing behind.
  EXPECT_EQ(t.num_live(), ChunkTable::kBlockChunks);
  EXPECT_TRUE(t.Validate().ok()) << t.Validate();
  t.Deallocate(5);
  t.Deallocate(ChunkTable::kBlockChunks - 1);
  EXPECT_EQ(t.Allocate(), ChunkTable::kBlockChunks - 1);  // recycled
}

// The body of ASmallerRangeWhereAddressSpaceIsShort: 0 when it holds.
int SmallerRangeChild() {
  ChunkTable::DropParkedRange();
  // The whole range would be ~192 GiB; allow what the process maps
  // now and 1 GiB more.
  long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  if (pages <= 0) return 2;
  const rlim_t cap =
      static_cast<rlim_t>(pages) * sysconf(_SC_PAGESIZE) + (1 << 30);
  const rlimit lim = {cap, cap};
  if (setrlimit(RLIMIT_AS, &lim) != 0) return 3;
  ChunkTable t;
  t.set_max_chunks(ChunkTable::kMaxChunks);
  for (size_t i = 0; i < 3 * ChunkTable::kBlockChunks; ++i) t.Allocate();
  const size_t reserved = ChunkTableTestPeer::reserved_chunks(t);
  const bool ok = reserved < ChunkTable::kMaxChunks &&
                  reserved * sizeof(Chunk) <= cap &&
                  reserved >= 4 * ChunkTable::kBlockChunks && t.Validate().ok();
  return ok ? 0 : 1;
}

// Where the process may not have the whole range (RLIMIT_AS, `ulimit -v`),
// the table takes a smaller one and works in it. In a child process: the
// limit would stay with the test binary.
TEST(ChunkTableTest, ASmallerRangeWhereAddressSpaceIsShort) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizers' shadow memory needs unlimited address "
                  "space";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the sanitizers' shadow memory needs unlimited address "
                  "space";
#endif
#endif
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::_Exit(SmallerRangeChild()), ::testing::ExitedWithCode(0),
              "");
}

TEST(ChunkTableTest, MaxChunksIsWholeBlocksOfValidHandles) {
  ChunkTable t;
  t.set_max_chunks(ChunkTable::kBlockChunks + 1);
  EXPECT_EQ(t.max_chunks(), 2 * ChunkTable::kBlockChunks);
  t.set_max_chunks(~size_t{0});
  EXPECT_EQ(t.max_chunks(), ChunkTable::kMaxChunks);
  EXPECT_LT(ChunkTable::kMaxChunks, size_t{kInvalidChunkHandle});
  EXPECT_EQ(ChunkTable::kMaxChunks % ChunkTable::kBlockChunks, 0u);
}

// --- ChunkTable::Validate -------------------------------------------------

// A table of three slots, handles 0 and 1 recycled (free list: 0 -> 1).
ChunkTable TwoRecycled() {
  ChunkTable t;
  const ChunkHandle a = t.Allocate();
  const ChunkHandle b = t.Allocate();
  t.Allocate();
  t[a].ptr = reinterpret_cast<void*>(0x1000);
  t[a].size = 256;
  t.Deallocate(b);
  t.Deallocate(a);
  return t;
}

TEST(ChunkTableValidateTest, HealthyTablesPass) {
  ChunkTable empty;
  EXPECT_TRUE(empty.Validate().ok());
  ChunkTable t = TwoRecycled();
  EXPECT_TRUE(t.Validate().ok());
  // Thousands of slots across blocks, half of them recycled.
  ChunkTable big;
  for (int i = 0; i < 5000; ++i) big.Allocate();
  for (ChunkHandle h = 0; h < 5000; h += 2) big.Deallocate(h);
  EXPECT_TRUE(big.Validate().ok());
}

TEST(ChunkTableValidateTest, LiveChunkOnTheFreeList) {
  ChunkTable t = TwoRecycled();
  t[1].ptr = reinterpret_cast<void*>(0x1000);
  EXPECT_EQ(t.Validate(),
            absl::InternalError(
                "ChunkTable: free list slot 1 (handle 1) is not a recycled "
                "chunk: Chunk{ptr=0x1000, size=0, requested=0, id=-1, "
                "in_use=false}"));
}

TEST(ChunkTableValidateTest, FreeListLoops) {
  ChunkTable t = TwoRecycled();
  t[1].next = 0;
  EXPECT_EQ(t.Validate(),
            absl::InternalError(
                "ChunkTable: free list is longer than the 2 recycled slots "
                "(capacity 3 - 1 live); slot 2 is handle 0"));
}

TEST(ChunkTableValidateTest, FreeListLeavesTheTable) {
  ChunkTable t = TwoRecycled();
  t[1].next = 7;
  EXPECT_EQ(t.Validate(),
            absl::InternalError("ChunkTable: free list slot 2 is handle 7, "
                                "out of range (capacity 3)"));
}

TEST(ChunkTableValidateTest, LiveCountBookkeeping) {
  ChunkTable t = TwoRecycled();
  ChunkTableTestPeer::num_live(t) = 0;
  EXPECT_EQ(t.Validate(),
            absl::InternalError("ChunkTable: free list holds 2 slots, "
                                "expected 3 (capacity 3 - 0 live)"));
  ChunkTableTestPeer::num_live(t) = 4;
  EXPECT_EQ(t.Validate(), absl::InternalError(
                              "ChunkTable: 4 live chunks in a capacity of 3"));
}

TEST(ChunkTableValidateTest, LostFreeList) {
  ChunkTable t = TwoRecycled();
  ChunkTableTestPeer::free_list(t) = kInvalidChunkHandle;
  EXPECT_EQ(t.Validate(),
            absl::InternalError("ChunkTable: free list holds 0 slots, "
                                "expected 2 (capacity 3 - 1 live)"));
}

#if BFC_CHECK_LEVEL >= 1
TEST(ChunkTableDeathTest, HandleOutOfRangeIsCaught) {
  ChunkTable t = TwoRecycled();
  EXPECT_DEATH((void)t[5],
               "bfc: check failed at .*chunk\\.h:[0-9]+: h < size_ \\(5 vs\\. "
               "3\\)");
}
#endif

}  // namespace
}  // namespace bfc::internal
