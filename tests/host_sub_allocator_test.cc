// File: tests/host_sub_allocator_test.cc
// -----------------------------------------------------------------------------
//
// HostSubAllocator: alignment, sizes, bad input and visitors.
#include "bfc/host_sub_allocator.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace bfc {
namespace {

bool IsAligned(const void* p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) % a) == 0;
}

TEST(HostSubAllocatorTest, Properties) {
  HostSubAllocator sub;
  EXPECT_EQ(sub.GetMemoryType(), MemoryType::kHostPageable);
  EXPECT_FALSE(sub.SupportsCoalescing());
}

TEST(HostSubAllocatorTest, HonoursAlignmentsFrom256To1MiB) {
  HostSubAllocator sub;
  for (size_t alignment = 256; alignment <= (size_t{1} << 20); alignment *= 2) {
    SCOPED_TRACE(alignment);
    size_t received = 0;
    void* p = sub.Alloc(alignment, 1000, &received);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, alignment)) << p;
    EXPECT_EQ(received, 1000u);
    std::memset(p, 0xab, received);
    sub.Free(p, received);
  }
}

TEST(HostSubAllocatorTest, SmallAlignmentsAreRaisedTo256) {
  HostSubAllocator sub;
  for (size_t alignment : {1, 2, 8, 16, 64, 128}) {
    SCOPED_TRACE(alignment);
    size_t received = 0;
    void* p = sub.Alloc(alignment, 100, &received);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, 256)) << p;
    sub.Free(p, received);
  }
}

TEST(HostSubAllocatorTest, SizesNotMultipleOfAlignmentAreUsable) {
  HostSubAllocator sub;
  for (size_t n : {size_t{1}, size_t{255}, size_t{256}, size_t{257},
                   size_t{4095}, (size_t{1} << 20) + 1, size_t{3} << 20}) {
    SCOPED_TRACE(n);
    size_t received = 0;
    void* p = sub.Alloc(4096, n, &received);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(received, n);
    // Every byte we were promised must be writable and keep its value.
    auto* bytes = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(bytes[i], static_cast<unsigned char>(i)) << i;
    }
    sub.Free(p, received);
  }
}

TEST(HostSubAllocatorTest, BadInputGivesNullptrAndNoVisit) {
  int visits = 0;
  HostSubAllocator sub({[&](void*, int, size_t) { ++visits; }},
                       {[&](void*, int, size_t) { ++visits; }});
  size_t received = 123;
  EXPECT_EQ(sub.Alloc(256, 0, &received), nullptr);
  EXPECT_EQ(received, 0u);
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{384}, size_t{1000}}) {
    SCOPED_TRACE(alignment);
    received = 123;
    EXPECT_EQ(sub.Alloc(alignment, 1024, &received), nullptr);
    EXPECT_EQ(received, 0u);
  }
  // Rounding up would wrap around; must fail rather than return a tiny block.
  EXPECT_EQ(sub.Alloc(256, std::numeric_limits<size_t>::max(), &received),
            nullptr);
  EXPECT_EQ(sub.Alloc(256, std::numeric_limits<size_t>::max() - 100, &received),
            nullptr);
  sub.Free(nullptr, 0);
  EXPECT_EQ(visits, 0);
}

TEST(HostSubAllocatorTest, VisitorsSeePointerIndexZeroAndSize) {
  std::vector<std::pair<void*, size_t>> allocs, frees;
  std::vector<int> indices;
  HostSubAllocator sub({[&](void* p, int i, size_t n) {
                         allocs.push_back({p, n});
                         indices.push_back(i);
                       }},
                       {[&](void* p, int i, size_t n) {
                         frees.push_back({p, n});
                         indices.push_back(i);
                       }});
  size_t received = 0;
  void* p = sub.Alloc(256, 5000, &received);
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].first, p);
  EXPECT_EQ(allocs[0].second, 5000u);
  EXPECT_TRUE(frees.empty());
  sub.Free(p, received);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].first, p);
  EXPECT_EQ(frees[0].second, 5000u);
  EXPECT_EQ(indices, (std::vector<int>{0, 0}));
}

TEST(HostSubAllocatorTest, DistinctBlocksDoNotOverlap) {
  HostSubAllocator sub;
  std::vector<std::pair<char*, size_t>> blocks;
  for (int i = 0; i < 32; ++i) {
    size_t received = 0;
    const size_t n = 256 * (i + 1) + i;
    char* p = static_cast<char*>(sub.Alloc(256, n, &received));
    ASSERT_NE(p, nullptr);
    std::memset(p, i, received);
    blocks.push_back({p, received});
  }
  for (int i = 0; i < 32; ++i) {
    for (size_t j = 0; j < blocks[i].second; ++j) {
      ASSERT_EQ(blocks[i].first[j], static_cast<char>(i));
    }
  }
  for (auto& [p, n] : blocks) sub.Free(p, n);
}

}  // namespace
}  // namespace bfc
