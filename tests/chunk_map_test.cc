// File: tests/chunk_map_test.cc
#include "bfc/internal/chunk_map.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"

namespace bfc::internal {

// Reaches a ChunkMap's slots to corrupt them on purpose (a friend).
class ChunkMapTestPeer {
 public:
  static size_t capacity(const ChunkMap& m) { return m.capacity_; }
  static ChunkHandle& handle(ChunkMap& m, size_t i) {
    return m.slots_[i].handle;
  }
  static uint32_t& tag(ChunkMap& m, size_t i) { return m.slots_[i].tag; }
  static bool empty(const ChunkMap& m, size_t i) {
    return m.slots_[i].handle == kInvalidChunkHandle;
  }
  static void Copy(ChunkMap& m, size_t from, size_t to) {
    m.slots_[to] = m.slots_[from];
  }
  static void Clear(ChunkMap& m, size_t i) {
    m.slots_[i] = ChunkMap::Slot{0, kInvalidChunkHandle};
  }
  static size_t& size(ChunkMap& m) { return m.size_; }
  static size_t& mask(ChunkMap& m) { return m.mask_; }
  static size_t Home(const ChunkMap& m, const void* p) {
    return m.Home(ChunkMap::Tag(p));
  }
  static uint32_t Tag(const void* p) { return ChunkMap::Tag(p); }
  static size_t SlotOf(const ChunkMap& m, const void* p) {
    return m.FindSlot(p);
  }
};

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

// Tables of up to 4k slots double past a quarter full, up to 16k past half
// full (short probe runs where the table is small enough to stay in cache);
// larger ones past 13/16 (10 bytes per chunk).
TEST(ChunkMapTest, SmallTablesStaySparseLargeOnesDense) {
  ChunkTable t;
  ChunkMap m(&t);
  constexpr size_t kQuarter = size_t{1} << 12;
  constexpr size_t kHalf = size_t{1} << 14;
  for (size_t n = 1; n <= 3 * kHalf; ++n) {
    const uintptr_t a = 0x100000 + n * 256;
    m.Insert(P(a), NewChunk(t, a));
    const size_t capacity = ChunkMapTestPeer::capacity(m);
    if (capacity <= kQuarter) {
      ASSERT_LE(4 * n, capacity) << n;
    } else if (capacity <= kHalf) {
      ASSERT_LE(2 * n, capacity) << n;
    } else {
      ASSERT_LE(16 * n, 13 * capacity) << n;
    }
    // Where each bound is reached, and one entry later.
    if (n == kQuarter / 4) {
      ASSERT_EQ(capacity, kQuarter);
    }
    if (n == kQuarter / 4 + 1) {
      ASSERT_EQ(capacity, 2 * kQuarter);
    }
    if (n == kHalf / 2) {
      ASSERT_EQ(capacity, kHalf);
    }
    if (n == kHalf / 2 + 1) {
      ASSERT_EQ(capacity, 2 * kHalf);
    }
    if (n == 2 * kHalf / 16 * 13) {
      ASSERT_EQ(capacity, 2 * kHalf);
    }
    if (n == 2 * kHalf / 16 * 13 + 1) {
      ASSERT_EQ(capacity, 4 * kHalf);
    }
  }
  EXPECT_TRUE(m.Validate().ok());
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
    // The table never shrinks, and doubles only past its load bound (a
    // quarter full up to 4k slots, half up to 16k, 13/16 above): at most
    // 2 * 4 slots of 8 bytes per entry at the peak in a small table, 2 * 2
    // in a middling one, 2 * 16/13 in a large one.
    EXPECT_GE(m.MetadataBytes(), 8 * peak);
    EXPECT_LE(m.MetadataBytes(),
              8 * 2 * std::max(4 * peak, 16 * peak / 13 + 1));
  }
}

// --- ChunkMap::Validate ---------------------------------------------------

using Peer = ChunkMapTestPeer;

// Three chunks of 256 bytes at 0x10000, 0x10100, 0x10200, mapped (16 slots).
struct ThreeChunks {
  ChunkTable t;
  ChunkMap m{&t};
  ChunkHandle h[3];
  ThreeChunks() {
    for (int i = 0; i < 3; ++i) {
      h[i] = NewChunk(t, 0x10000 + 0x100 * i);
      m.Insert(t[h[i]].ptr, h[i]);
    }
  }
  // A mapped chunk whose slot is followed by two empty slots, or -1.
  int WithTwoEmptyAfter() const {
    const size_t mask = Peer::capacity(m) - 1;
    for (int i = 0; i < 3; ++i) {
      const size_t s = Peer::SlotOf(m, t[h[i]].ptr);
      if (Peer::empty(m, (s + 1) & mask) && Peer::empty(m, (s + 2) & mask)) {
        return i;
      }
    }
    return -1;
  }
};

TEST(ChunkMapValidateTest, HealthyMapsPass) {
  ChunkTable t;
  ChunkMap empty(&t);
  EXPECT_TRUE(empty.Validate().ok());
  ThreeChunks c;
  EXPECT_TRUE(c.m.Validate().ok());
  // Dense keys, long probe runs, growth and backward-shift deletes.
  ChunkTable t2;
  ChunkMap m(&t2);
  std::vector<ChunkHandle> hs;
  for (int i = 0; i < 3000; ++i) {
    hs.push_back(NewChunk(t2, 0x100000 + 256 * i));
    m.Insert(t2[hs.back()].ptr, hs.back());
  }
  for (int i = 0; i < 3000; i += 3) ASSERT_TRUE(m.Erase(t2[hs[i]].ptr));
  EXPECT_TRUE(m.Validate().ok());
}

TEST(ChunkMapValidateTest, TagDoesNotMatchTheKey) {
  ThreeChunks c;
  const void* p = c.t[c.h[1]].ptr;
  const size_t slot = Peer::SlotOf(c.m, p);
  const uint32_t good = Peer::tag(c.m, slot);
  Peer::tag(c.m, slot) = good ^ 1;
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError(absl::StrFormat(
                "ChunkMap: slot %d (handle 1, ptr 0x10100) has tag 0x%08x, "
                "but its start hashes to tag 0x%08x",
                slot, good ^ 1, good)));
}

TEST(ChunkMapValidateTest, SlotUnreachableFromItsHome) {
  ThreeChunks c;
  const int i = c.WithTwoEmptyAfter();
  ASSERT_GE(i, 0);
  const void* p = c.t[c.h[i]].ptr;
  const size_t mask = Peer::capacity(c.m) - 1;
  const size_t home = Peer::SlotOf(c.m, p);
  ASSERT_EQ(home, Peer::Home(c.m, p));  // three keys in 16 slots
  // Move the key two slots on, leaving an empty slot behind it.
  const size_t moved = (home + 2) & mask;
  Peer::Copy(c.m, home, moved);
  Peer::Clear(c.m, home);
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError(absl::StrFormat(
                "ChunkMap: slot %d (handle %d, ptr %p) is unreachable: slot "
                "%d, between its home slot %d and it, is empty",
                moved, c.h[i], p, home, home)));
}

TEST(ChunkMapValidateTest, KeyMappedTwice) {
  ThreeChunks c;
  const int i = c.WithTwoEmptyAfter();
  ASSERT_GE(i, 0);
  const void* p = c.t[c.h[i]].ptr;
  const size_t slot = Peer::SlotOf(c.m, p);
  const size_t copy = (slot + 1) & (Peer::capacity(c.m) - 1);
  Peer::Copy(c.m, slot, copy);
  ++Peer::size(c.m);
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError(absl::StrFormat(
                "ChunkMap: slot %d (handle %d, ptr %p) duplicates slot %d "
                "(handle %d)",
                copy, c.h[i], p, slot, c.h[i])));
}

TEST(ChunkMapValidateTest, HandlesThatNameNoChunk) {
  ThreeChunks c;
  const size_t slot = Peer::SlotOf(c.m, c.t[c.h[2]].ptr);
  Peer::handle(c.m, slot) = 99;
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError(absl::StrFormat(
                "ChunkMap: slot %d holds handle 99, out of range (3 chunk "
                "slots)",
                slot)));
  Peer::handle(c.m, slot) = c.h[2];
  // The chunk recycled while still mapped.
  c.t.Deallocate(c.h[2]);
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError(absl::StrFormat(
                "ChunkMap: slot %d (handle 2) names a chunk with no start (a "
                "recycled slot?)",
                slot)));
}

TEST(ChunkMapValidateTest, SizeAndLoadBookkeeping) {
  ThreeChunks c;
  ++Peer::size(c.m);
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError("ChunkMap: 3 occupied slots but size 4"));
  // A table of 16 slots holds at most a quarter of them.
  Peer::size(c.m) = 5;
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError("ChunkMap: 5 entries exceed the load bound "
                                "of 4 (of 16 slots)"));
  Peer::size(c.m) = 3;
  Peer::mask(c.m) = 7;
  EXPECT_EQ(c.m.Validate(),
            absl::InternalError("ChunkMap: inconsistent geometry: 4 bits, "
                                "capacity 16, mask 0x7, load bound 4"));
}

#if BFC_CHECK_LEVEL >= 1
TEST(ChunkMapDeathTest, InsertingAMappedKeyIsCaught) {
  ThreeChunks c;
  const ChunkHandle again = NewChunk(c.t, 0x10100);
  EXPECT_DEATH(
      c.m.Insert(P(0x10100), again),
      "bfc: check failed at .*chunk_map\\.h:[0-9]+: FindSlot\\(p\\) == "
      "kNoSlot");
}
#endif

}  // namespace
}  // namespace bfc::internal
