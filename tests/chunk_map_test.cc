// File: tests/chunk_map_test.cc
#include "bfc/internal/chunk_map.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "gtest/gtest.h"

namespace bfc::internal {
namespace {

void* P(uintptr_t a) { return reinterpret_cast<void*>(a); }

// A chunk table entry for `a`, as the allocator makes one before mapping it.
ChunkHandle NewChunk(ChunkTable& t, uintptr_t a) {
  const ChunkHandle h = t.Allocate();
  t[h].ptr = P(a);
  t[h].size = 256;
  return h;
}

TEST(ChunkMapTest, FindsExactStartsOnly) {
  ChunkTable t;
  ChunkMap m(&t);
  EXPECT_EQ(m.Find(P(0x10000)), kInvalidChunkHandle);  // empty, no table
  EXPECT_FALSE(m.Erase(P(0x10000)));
  const ChunkHandle a = NewChunk(t, 0x10000);
  const ChunkHandle b = NewChunk(t, 0x10100);
  m.Insert(P(0x10000), a);
  m.Insert(P(0x10100), b);
  EXPECT_EQ(m.Find(P(0x10000)), a);
  EXPECT_EQ(m.Find(P(0x10100)), b);
  EXPECT_EQ(m.Find(P(0x10080)), kInvalidChunkHandle);
  EXPECT_EQ(m.Find(P(0x10200)), kInvalidChunkHandle);
  EXPECT_FALSE(m.Erase(P(0x10200)));
  EXPECT_TRUE(m.Erase(P(0x10000)));
  EXPECT_EQ(m.Find(P(0x10000)), kInvalidChunkHandle);
  EXPECT_EQ(m.Find(P(0x10100)), b);
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.MetadataBytes(), 16 * 8u);
}

// Two addresses whose tags are equal must still resolve to their own chunks:
// the map confirms a tag match against the chunk's ptr.
TEST(ChunkMapTest, EqualTagsAreToldApartByTheChunk) {
  // Birthday search for two 256-aligned addresses with one 32-bit tag.
  std::mt19937_64 rng(1);
  std::unordered_map<uint32_t, uintptr_t> seen;
  uintptr_t x = 0, y = 0;
  for (int i = 0; i < 2000000 && x == 0; ++i) {
    const uintptr_t a = (rng() & ((uintptr_t{1} << 47) - 1)) & ~uintptr_t{255};
    if (a == 0) continue;
    const uint64_t key = a >> 8;
    const uint32_t tag =
        static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> 32);
    auto [it, inserted] = seen.emplace(tag, a);
    if (!inserted && it->second != a) {
      x = it->second;
      y = a;
    }
  }
  ASSERT_NE(x, 0u) << "no tag collision found";
  ChunkTable t;
  ChunkMap m(&t);
  const ChunkHandle hx = NewChunk(t, x);
  const ChunkHandle hy = NewChunk(t, y);
  m.Insert(P(x), hx);
  EXPECT_EQ(m.Find(P(y)), kInvalidChunkHandle);
  EXPECT_FALSE(m.Erase(P(y)));
  m.Insert(P(y), hy);
  EXPECT_EQ(m.Find(P(x)), hx);
  EXPECT_EQ(m.Find(P(y)), hy);
  EXPECT_TRUE(m.Erase(P(x)));
  EXPECT_EQ(m.Find(P(x)), kInvalidChunkHandle);
  EXPECT_EQ(m.Find(P(y)), hy);
}

// Random inserts and erases against a model, through many growths and with
// dense keys (long probe runs that wrap around the table's end).
TEST(ChunkMapTest, MatchesAModelUnderChurn) {
  for (const uintptr_t stride : {uintptr_t{256}, uintptr_t{1} << 20}) {
    ChunkTable t;
    ChunkMap m(&t);
    std::unordered_map<uintptr_t, ChunkHandle> model;
    std::vector<uintptr_t> keys;
    size_t peak = 0;
    std::mt19937_64 rng(stride);
    for (int step = 0; step < 200000; ++step) {
      const bool insert =
          keys.empty() || rng() % 100 < (step < 100000 ? 60 : 40);
      if (insert) {
        const uintptr_t a = 0x100000 + (rng() % 50000) * stride;
        if (model.count(a) != 0) continue;
        const ChunkHandle h = NewChunk(t, a);
        m.Insert(P(a), h);
        model[a] = h;
        keys.push_back(a);
        peak = std::max(peak, model.size());
      } else {
        const size_t i = rng() % keys.size();
        const uintptr_t a = keys[i];
        keys[i] = keys.back();
        keys.pop_back();
        ASSERT_TRUE(m.Erase(P(a)));
        t.Deallocate(model[a]);
        model.erase(a);
      }
      if (step % 997 == 0) {
        ASSERT_EQ(m.size(), model.size());
        for (const auto& [a, h] : model) ASSERT_EQ(m.Find(P(a)), h);
        // Absent keys: interior addresses and never-inserted starts.
        ASSERT_EQ(m.Find(P(0x100000 + 128)), kInvalidChunkHandle);
        ASSERT_EQ(m.Find(P(0x100000 + 50001 * stride)), kInvalidChunkHandle);
      }
    }
    // The table never shrinks, and doubles only past 13/16 full: at most
    // 2 * 16/13 slots of 8 bytes per entry at the peak.
    EXPECT_GE(m.MetadataBytes(), 8 * peak);
    EXPECT_LE(m.MetadataBytes(), 8 * 2 * (16 * peak / 13 + 1));
  }
}

}  // namespace
}  // namespace bfc::internal
