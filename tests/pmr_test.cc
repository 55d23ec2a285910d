// Tests for bfc::PmrResource (bfc/pmr.h): standard pmr containers on a BFC
// pool over HostSubAllocator, the std::bad_alloc contract, equality by
// allocator identity, and the refusal of memory that cannot be dereferenced.
#include "bfc/pmr.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <memory_resource>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"

namespace {

std::unique_ptr<bfc::Allocator> HostPool(size_t limit, bool growth = true) {
  bfc::Allocator::Options opts;
  opts.allow_growth = growth;
  opts.allow_retry_on_failure = false;
  return std::make_unique<bfc::Allocator>(
      std::make_unique<bfc::HostSubAllocator>(), limit, "pmr_host", opts);
}

TEST(PmrResourceTest, VectorDrawsFromThePoolAndGivesItBack) {
  auto pool = HostPool(size_t{64} << 20);
  bfc::PmrResource resource(*pool);
  {
    std::pmr::vector<int64_t> v(&resource);
    for (int64_t i = 0; i < 100000; ++i) v.push_back(i * 3);
    int64_t sum = 0;
    for (int64_t x : v) sum += x;
    EXPECT_EQ(sum, int64_t{3} * 99999 * 100000 / 2);
    const bfc::AllocatorStats s = *pool->GetStats();
    EXPECT_GE(s.bytes_in_use, static_cast<int64_t>(100000 * sizeof(int64_t)));
    EXPECT_GT(s.num_allocs, 10);  // the vector grew by reallocation
    EXPECT_EQ(pool->RequestedSize(v.data()), v.capacity() * sizeof(int64_t));
  }
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
  EXPECT_EQ(pool->GetStats()->num_invalid_frees, 0);
  EXPECT_TRUE(pool->Validate().ok());
}

TEST(PmrResourceTest, UnorderedMapOfPmrStringsPropagatesTheResource) {
  auto pool = HostPool(size_t{64} << 20);
  bfc::PmrResource resource(*pool);
  {
    std::pmr::unordered_map<int, std::pmr::string> m(&resource);
    for (int i = 0; i < 5000; ++i) {
      // Long enough to leave the small-string buffer: each value allocates.
      m.emplace(i, std::string(40 + i % 50, static_cast<char>('a' + i % 26)));
    }
    ASSERT_EQ(m.size(), 5000u);
    for (int i = 0; i < 5000; i += 97) {
      const std::pmr::string& s = m.at(i);
      EXPECT_EQ(s.size(), static_cast<size_t>(40 + i % 50));
      EXPECT_EQ(s[0], static_cast<char>('a' + i % 26));
      EXPECT_EQ(s.get_allocator().resource(), &resource);
    }
    // Nodes, buckets and every string's buffer: at least 2 per entry.
    EXPECT_GE(pool->GetStats()->num_allocs, 10000);
    for (int i = 0; i < 5000; i += 2) m.erase(i);
    EXPECT_EQ(m.size(), 2500u);
    EXPECT_TRUE(pool->Validate().ok());
  }
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
  EXPECT_EQ(pool->GetStats()->num_invalid_frees, 0);
}

TEST(PmrResourceTest, OutOfMemoryThrowsBadAlloc) {
  auto pool = HostPool(size_t{1} << 20, /*growth=*/false);
  bfc::PmrResource resource(*pool);
  EXPECT_THROW((void)resource.allocate(size_t{2} << 20), std::bad_alloc);
  std::pmr::vector<char> v(&resource);
  EXPECT_THROW(v.reserve(size_t{4} << 20), std::bad_alloc);
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
  EXPECT_GE(pool->GetStats()->num_ooms, 2);
  // The pool still works after the failures.
  void* p = resource.allocate(1000);
  std::memset(p, 7, 1000);
  resource.deallocate(p, 1000);
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
}

TEST(PmrResourceTest, AlignmentAndZeroBytes) {
  auto pool = HostPool(size_t{64} << 20);
  bfc::PmrResource resource(*pool);
  for (size_t align : {size_t{1}, size_t{8}, size_t{64}, size_t{256},
                       size_t{4096}, size_t{65536}}) {
    void* p = resource.allocate(100, align);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << align;
    std::memset(p, 1, 100);
    resource.deallocate(p, 100, align);
  }
  void* a = resource.allocate(0);
  void* b = resource.allocate(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);  // distinct, as pmr requires
  resource.deallocate(a, 0);
  resource.deallocate(b, 0);
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
}

TEST(PmrResourceTest, EqualityIsAllocatorIdentity) {
  auto pool = HostPool(size_t{64} << 20);
  auto other_pool = HostPool(size_t{64} << 20);
  bfc::PmrResource r1(*pool);
  bfc::PmrResource r2(*pool);
  bfc::PmrResource r3(*other_pool);
  EXPECT_TRUE(r1.is_equal(r1));
  EXPECT_TRUE(r1 == r2);  // same allocator: either frees the other's memory
  EXPECT_FALSE(r1 == r3);
  EXPECT_FALSE(r1 == *std::pmr::new_delete_resource());
  EXPECT_FALSE(std::pmr::new_delete_resource()->is_equal(r1));

  void* p = r1.allocate(512);
  r2.deallocate(p, 512);
  EXPECT_EQ(pool->GetStats()->bytes_in_use, 0);
  EXPECT_EQ(pool->GetStats()->num_invalid_frees, 0);

  // Move-assigning containers with equal resources steals the buffer.
  std::pmr::vector<int> v1({1, 2, 3}, &r1);
  std::pmr::vector<int> v2(&r2);
  const int* data = v1.data();
  v2 = std::move(v1);
  EXPECT_EQ(v2.data(), data);
}

TEST(PmrResourceTest, ForeignPointerIsReportedNotThrown) {
  auto pool = HostPool(size_t{64} << 20);
  bfc::PmrResource resource(*pool);
  int local = 0;
  EXPECT_NO_THROW(resource.deallocate(&local, sizeof(local)));
  EXPECT_EQ(pool->GetStats()->num_invalid_frees, 1);
}

TEST(PmrResourceTest, RefusesMemoryThatCannotBeDereferenced) {
  // Virtual memory faults when touched: a container must never get it.
  bfc::Allocator pool(std::make_unique<bfc::VirtualSubAllocator>(64 << 20),
                      64 << 20, "virtual");
  EXPECT_FALSE(bfc::PmrResource::Serves(pool));
  bfc::PmrResource resource(pool);
  EXPECT_THROW((void)resource.allocate(64), std::bad_alloc);
  std::pmr::vector<int> v(&resource);
  EXPECT_THROW(v.push_back(1), std::bad_alloc);
  EXPECT_EQ(pool.GetStats()->num_allocs, 0);

  auto host = HostPool(size_t{1} << 20);
  EXPECT_TRUE(bfc::PmrResource::Serves(*host));
}

}  // namespace
