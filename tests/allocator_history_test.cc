// File: tests/allocator_history_test.cc
// Allocator::RecordMemoryHistory: every allocation, free, region taken,
// extended and given back, and failed request becomes one MemoryEvent, in
// order, with the addresses and sizes the caller saw; the ring keeps the
// newest max_entries and counts the rest; off means nothing is recorded.
// Expected values come from the calls' own results (the pointers returned,
// AllocatedSize), never from the history itself.
#include <cstdint>
#include <memory>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/memory_dump.h"
#include "bfc/units.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using Action = MemoryEvent::Action;

uint64_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

std::vector<Action> Actions(const MemoryHistory& h) {
  std::vector<Action> out;
  for (const MemoryEvent& e : h.events) out.push_back(e.action);
  return out;
}

TEST(AllocatorHistoryTest, OffByDefaultAndWhenStopped) {
  Allocator alloc(
      std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options()),
      64 * kMiB, "h");
  void* p = alloc.AllocateRaw(256, 1000);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(alloc.GetMemoryHistory().events.empty());
  EXPECT_EQ(alloc.GetMemoryHistory().max_entries, 0u);
  alloc.RecordMemoryHistory(100);
  alloc.DeallocateRaw(p);
  EXPECT_EQ(alloc.GetMemoryHistory().events.size(), 1u);
  alloc.RecordMemoryHistory(0);
  EXPECT_TRUE(alloc.GetMemoryHistory().events.empty());
  void* q = alloc.AllocateRaw(256, 1000);
  EXPECT_TRUE(alloc.GetMemoryHistory().events.empty());
  EXPECT_EQ(alloc.NumMemoryEventsRecorded(), 0u);
  alloc.DeallocateRaw(q);
}

TEST(AllocatorHistoryTest, EveryChangeInOrderWithWhatTheCallerSaw) {
  Allocator::Options o;
  o.garbage_collection = true;
  // 8 MiB limit, growth from 1 MiB: the 5 MiB request needs a region of its
  // own, and a later 6 MiB request can only be served after the fully free
  // regions are given back.
  Allocator alloc(
      std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options()), 8 * kMiB,
      "h", o);
  alloc.RecordMemoryHistory(1000);
  void* a = alloc.AllocateRaw(256, 1000);
  void* b = alloc.AllocateRaw(256, 5 * kMiB);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const size_t a_size = alloc.AllocatedSize(a);
  const size_t b_size = alloc.AllocatedSize(b);
  alloc.DeallocateRaw(b);
  EXPECT_EQ(alloc.AllocateRaw(256, 64 * kMiB, AllocationAttributes{false}),
            nullptr);
  alloc.DeallocateRaw(a);
  const size_t released = alloc.ReleaseFreeRegions();
  EXPECT_GT(released, 0u);

  const MemoryHistory h = alloc.GetMemoryHistory();
  ASSERT_EQ(Actions(h),
            (std::vector<Action>{
                Action::kRegionAlloc, Action::kAllocate, Action::kRegionAlloc,
                Action::kAllocate, Action::kFree, Action::kOutOfMemory,
                Action::kFree, Action::kRegionFree, Action::kRegionFree}));
  EXPECT_EQ(h.dropped, 0u);
  const std::vector<MemoryEvent>& e = h.events;
  EXPECT_EQ(e[1].address, Addr(a));
  EXPECT_EQ(e[1].size, a_size);
  EXPECT_EQ(e[1].requested_size, 1000u);
  EXPECT_GT(e[1].allocation_id, 0);
  EXPECT_EQ(e[3].address, Addr(b));
  EXPECT_EQ(e[3].size, b_size);
  EXPECT_EQ(e[3].requested_size, 5 * kMiB);
  EXPECT_EQ(e[4].address, Addr(b));
  EXPECT_EQ(e[4].allocation_id, e[3].allocation_id);
  EXPECT_EQ(e[5].size, 64 * kMiB);
  EXPECT_EQ(e[5].address, 0u);
  // The limit left room for 8 MiB minus the two regions held.
  EXPECT_EQ(e[5].free_bytes, 8 * kMiB - e[0].size - e[2].size);
  EXPECT_EQ(e[6].address, Addr(a));
  // The regions given back are the regions taken, bytes for bytes.
  EXPECT_EQ(e[7].size + e[8].size, e[0].size + e[2].size);
  EXPECT_EQ(e[7].size + e[8].size, released);
  for (size_t i = 1; i < e.size(); ++i)
    EXPECT_GE(e[i].time_us, e[i - 1].time_us);
  EXPECT_TRUE(alloc.Validate().ok());
}

TEST(AllocatorHistoryTest, MemoryJoinedToARegionIsAnExtend) {
  FakeSubAllocator::Options so;
  so.supports_coalescing = true;
  Allocator alloc(std::make_unique<FakeSubAllocator>(so), 64 * kMiB, "h");
  alloc.RecordMemoryHistory(1000);
  void* a = alloc.AllocateRaw(256, 1024);
  ASSERT_NE(a, nullptr);
  // As large as the whole first region: it needs more memory, which the
  // coalescing sub-allocator hands out right after the region.
  const size_t region = alloc.RecordMemoryMap().regions.at(0).size;
  void* b = alloc.AllocateRaw(256, region);
  ASSERT_NE(b, nullptr);
  const MemoryHistory h = alloc.GetMemoryHistory();
  ASSERT_EQ(Actions(h),
            (std::vector<Action>{Action::kRegionAlloc, Action::kAllocate,
                                 Action::kRegionExtend, Action::kAllocate}));
  // The extension starts where the region ended.
  EXPECT_EQ(h.events[2].address, h.events[0].address + h.events[0].size);
  EXPECT_EQ(alloc.RecordMemoryMap().regions.size(), 1u);
  alloc.DeallocateRaw(a);
  alloc.DeallocateRaw(b);
}

TEST(AllocatorHistoryTest, TheRingKeepsTheNewestAndCountsTheDropped) {
  Allocator alloc(
      std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options()),
      64 * kMiB, "h");
  void* warm = alloc.AllocateRaw(256, 256);  // the region exists already
  alloc.RecordMemoryHistory(5);
  std::vector<void*> ptrs;
  for (int i = 0; i < 8; ++i)
    ptrs.push_back(alloc.AllocateRaw(256, 256 * (i + 1)));
  const MemoryHistory h = alloc.GetMemoryHistory();
  ASSERT_EQ(h.events.size(), 5u);
  EXPECT_EQ(h.dropped, 3u);
  EXPECT_EQ(h.max_entries, 5u);
  EXPECT_EQ(alloc.NumMemoryEventsRecorded(), 8u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(h.events[i].address, Addr(ptrs[3 + i])) << i;
    EXPECT_EQ(h.events[i].requested_size, 256u * (4 + i)) << i;
  }
  // Starting again clears.
  alloc.RecordMemoryHistory(5);
  EXPECT_TRUE(alloc.GetMemoryHistory().events.empty());
  for (void* p : ptrs) alloc.DeallocateRaw(p);
  alloc.DeallocateRaw(warm);
  EXPECT_EQ(alloc.GetMemoryHistory().events.size(), 5u);
}

}  // namespace
}  // namespace bfc
