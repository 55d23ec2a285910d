// File: tests/virtual_sub_allocator_test.cc
// -----------------------------------------------------------------------------
//
// VirtualSubAllocator: placement (first fit, contiguity, gaps, bump-pointer
// mode), the Free contract (unions of contiguous blocks, invalid frees leave
// no trace) and the promise that a huge reservation commits no memory. The
// memory it hands out is never dereferenced here, except to prove it faults.
#include "bfc/virtual_sub_allocator.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "bfc/log.h"
#include "bfc/units.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

constexpr size_t kTiB = size_t{1} << 40;

bool IsAligned(const void* p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) % a) == 0;
}

char* AllocOrNull(VirtualSubAllocator& sub, size_t n, size_t alignment = 256) {
  size_t received = 0;
  return static_cast<char*>(sub.Alloc(alignment, n, &received));
}

// Invalid frees are logged; keep the test output clean and count them.
class SilenceLog {
 public:
  SilenceLog()
      : previous_(SetLogSink([this](LogSeverity, std::string_view msg) {
          messages_.emplace_back(msg);
        })) {}
  ~SilenceLog() { SetLogSink(previous_); }
  const std::vector<std::string>& messages() const { return messages_; }

 private:
  std::vector<std::string> messages_;
  LogSink previous_;
};

// {total pages, resident pages} of this process, from /proc/self/statm.
std::pair<size_t, size_t> Statm() {
  size_t size = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f != nullptr) {
    if (std::fscanf(f, "%zu %zu", &size, &resident) != 2) size = resident = 0;
    std::fclose(f);
  }
  return {size, resident};
}

TEST(VirtualSubAllocatorTest, Properties) {
  VirtualSubAllocator sub(64 * kMiB);
  EXPECT_NE(sub.base(), nullptr);
  EXPECT_EQ(sub.capacity(), 64 * kMiB);
  EXPECT_EQ(sub.GetMemoryType(), MemoryType::kUnknown);
  EXPECT_TRUE(sub.SupportsCoalescing());
  VirtualSubAllocator::Options opts;
  opts.supports_coalescing = false;
  VirtualSubAllocator no_coalesce(64 * kMiB, opts);
  EXPECT_FALSE(no_coalesce.SupportsCoalescing());
}

TEST(VirtualSubAllocatorTest, CapacityRoundsUpToPageSize) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  VirtualSubAllocator sub(1000);
  EXPECT_EQ(sub.capacity(), page);
  VirtualSubAllocator zero(0);
  EXPECT_EQ(zero.capacity(), 0u);
  EXPECT_EQ(AllocOrNull(zero, 256), nullptr);
}

TEST(VirtualSubAllocatorTest, HonoursAlignmentsFrom256To1MiB) {
  VirtualSubAllocator sub(64 * kMiB);
  // A small block first so that later blocks do not start at the (page
  // aligned) base by luck.
  ASSERT_NE(AllocOrNull(sub, 256), nullptr);
  for (size_t alignment = 256; alignment <= kMiB; alignment *= 2) {
    SCOPED_TRACE(alignment);
    size_t received = 0;
    void* p = sub.Alloc(alignment, 1000, &received);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, alignment)) << p;
    EXPECT_EQ(received, 1024u);
    // Keep a 256-byte block after each so the next one is misaligned again.
    ASSERT_NE(AllocOrNull(sub, 256), nullptr);
  }
  // Alignments below 256 are raised to 256.
  for (size_t alignment : {1, 8, 64, 128}) {
    void* p = sub.Alloc(alignment, 10, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(IsAligned(p, 256)) << p;
  }
}

TEST(VirtualSubAllocatorTest, SizesRoundUpTo256) {
  VirtualSubAllocator sub(64 * kMiB);
  const std::pair<size_t, size_t> cases[] = {
      {1, 256}, {255, 256}, {256, 256}, {257, 512}, {kMiB + 1, kMiB + 256}};
  size_t in_use = 0;
  for (auto [asked, expected] : cases) {
    SCOPED_TRACE(asked);
    size_t received = 0;
    ASSERT_NE(sub.Alloc(256, asked, &received), nullptr);
    EXPECT_EQ(received, expected);
    in_use += expected;
    EXPECT_EQ(sub.bytes_in_use(), in_use);
  }
}

TEST(VirtualSubAllocatorTest, BadInputGivesNullptr) {
  VirtualSubAllocator sub(64 * kMiB);
  size_t received = 123;
  EXPECT_EQ(sub.Alloc(256, 0, &received), nullptr);
  EXPECT_EQ(received, 0u);
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{384}}) {
    received = 123;
    EXPECT_EQ(sub.Alloc(alignment, 1024, &received), nullptr);
    EXPECT_EQ(received, 0u);
  }
  EXPECT_EQ(sub.Alloc(256, std::numeric_limits<size_t>::max(), &received),
            nullptr);
  EXPECT_EQ(sub.Alloc(size_t{1} << 62, 256, &received), nullptr);
  EXPECT_EQ(sub.bytes_in_use(), 0u);
  // Bad requests count as calls, successful or not.
  EXPECT_EQ(sub.num_alloc_calls(), 6u);
}

TEST(VirtualSubAllocatorTest, SuccessiveBlocksAreContiguous) {
  VirtualSubAllocator sub(64 * kMiB);
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, 1000);  // 1024 bytes
  char* c = AllocOrNull(sub, 2 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a, static_cast<char*>(sub.base()));
  EXPECT_EQ(b, a + kMiB);
  EXPECT_EQ(c, b + 1024);
}

TEST(VirtualSubAllocatorTest, FreeAcceptsUnionOfContiguousBlocks) {
  VirtualSubAllocator sub(64 * kMiB);
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, 2 * kMiB);
  char* c = AllocOrNull(sub, 4 * kMiB);
  char* d = AllocOrNull(sub, kMiB);
  ASSERT_EQ(d, a + 7 * kMiB);
  // What an allocator does after merging regions a, b and c.
  sub.Free(a, 7 * kMiB);
  EXPECT_EQ(sub.invalid_frees(), 0u);
  EXPECT_EQ(sub.bytes_in_use(), kMiB);
  // The freed range is one range again: a 7 MiB block fits at a.
  EXPECT_EQ(AllocOrNull(sub, 7 * kMiB), a);
  (void)b;
  (void)c;
}

// Pages (CUDA VMM's model, without a driver): whole aligned pages, and any
// page-aligned part of what was handed out can go back.
TEST(VirtualSubAllocatorTest, PagesCanBeGivenBackOneByOne) {
  VirtualSubAllocator::Options o;
  o.partial_free_bytes = kMiB;
  VirtualSubAllocator sub(64 * kMiB, o);
  EXPECT_EQ(sub.PartialFreeBytes(), kMiB);
  size_t got = 0;
  char* a = static_cast<char*>(sub.Alloc(256, 1000, &got));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(got, kMiB);  // a whole page
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % kMiB, 0u);
  char* b = static_cast<char*>(sub.Alloc(256, 4 * kMiB, &got));
  ASSERT_EQ(b, a + kMiB);
  // The middle of b, then a page spanning the boundary of a and b.
  sub.Free(b + kMiB, 2 * kMiB);
  EXPECT_EQ(sub.invalid_frees(), 0u);
  EXPECT_EQ(sub.bytes_in_use(), 3 * kMiB);
  sub.Free(a, 2 * kMiB);  // a and b's first page
  EXPECT_EQ(sub.bytes_in_use(), kMiB);
  // The hole is one free range again: 3 MiB fits at a.
  EXPECT_EQ(sub.Alloc(256, 3 * kMiB, &got), a);
  // Not whole pages, or not handed out: refused, nothing changes.
  sub.Free(a + 256, kMiB);
  sub.Free(a, kMiB + 256);
  sub.Free(b + 3 * kMiB, 2 * kMiB);  // runs past b's last page
  sub.Free(a + 16 * kMiB, kMiB);     // never handed out
  EXPECT_EQ(sub.invalid_frees(), 4u);
  EXPECT_EQ(sub.bytes_in_use(), 4 * kMiB);  // [a, a + 3 MiB) and b's last
  sub.Free(a, 4 * kMiB);                    // spans the hole before b's last
  EXPECT_EQ(sub.invalid_frees(), 5u);
  sub.Free(a, 3 * kMiB);
  sub.Free(b + 3 * kMiB, kMiB);
  EXPECT_EQ(sub.bytes_in_use(), 0u);
  // With a gap (sim-cudamalloc) there are no pages.
  o.gap_bytes = 256;
  EXPECT_EQ(VirtualSubAllocator(64 * kMiB, o).PartialFreeBytes(), 0u);
  o.gap_bytes = 0;
  o.partial_free_bytes = 3000;  // not a power of two
  EXPECT_EQ(VirtualSubAllocator(64 * kMiB, o).PartialFreeBytes(), 0u);
}

TEST(VirtualSubAllocatorTest, FreeWithRequestedSizeOfLastBlockIsAccepted) {
  VirtualSubAllocator sub(64 * kMiB);
  char* a = AllocOrNull(sub, 1000);  // rounds to 1024
  sub.Free(a, 1000);
  EXPECT_EQ(sub.invalid_frees(), 0u);
  EXPECT_EQ(sub.bytes_in_use(), 0u);
}

TEST(VirtualSubAllocatorTest, InvalidFreesAreCountedAndChangeNothing) {
  SilenceLog log;
  int free_visits = 0;
  VirtualSubAllocator sub(64 * kMiB, VirtualSubAllocator::Options(), {},
                          {[&](void*, int, size_t) { ++free_visits; }});
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, kMiB);
  ASSERT_EQ(b, a + kMiB);
  char* outside = static_cast<char*>(sub.base()) + sub.capacity();
  int stack_var = 0;

  sub.Free(a + 256, kMiB - 256);  // interior pointer
  sub.Free(a, kMiB / 2);          // part of a block
  sub.Free(a, kMiB + 256);        // a block plus part of the next
  sub.Free(a, 3 * kMiB);          // past the last block
  sub.Free(b + kMiB, kMiB);       // free space
  sub.Free(outside, kMiB);        // outside the reservation
  sub.Free(&stack_var, 256);      // foreign
  sub.Free(a, 0);                 // zero size
  EXPECT_EQ(sub.invalid_frees(), 8u);
  EXPECT_EQ(free_visits, 0);
  EXPECT_EQ(sub.bytes_in_use(), 2 * kMiB);
  EXPECT_FALSE(log.messages().empty());

  sub.Free(a, kMiB);
  EXPECT_EQ(sub.invalid_frees(), 8u);
  sub.Free(a, kMiB);  // double free
  EXPECT_EQ(sub.invalid_frees(), 9u);
  EXPECT_EQ(sub.bytes_in_use(), kMiB);
  EXPECT_EQ(free_visits, 1);
  EXPECT_EQ(sub.num_free_calls(), 10u);
  // nullptr is a no-op, not an invalid free.
  sub.Free(nullptr, 0);
  EXPECT_EQ(sub.invalid_frees(), 9u);
}

TEST(VirtualSubAllocatorTest, FreeWhoseSizeWrapsTheAddressRangeIsInvalid) {
  SilenceLog log;
  int free_visits = 0;
  VirtualSubAllocator sub(64 * kMiB, VirtualSubAllocator::Options(), {},
                          {[&](void*, int, size_t) { ++free_visits; }});
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, kMiB);
  ASSERT_EQ(b, a + kMiB);
  // b's offset plus these sizes wraps past 2^64: the range ends "before" it
  // starts. Each is a multiple of 256, so rounding does not reject it.
  const size_t max = std::numeric_limits<size_t>::max();
  for (size_t size : {max - 255, max - kMiB + 1, max - 2 * kMiB + 1}) {
    sub.Free(b, size);
  }
  EXPECT_EQ(sub.invalid_frees(), 3u);
  EXPECT_EQ(free_visits, 0) << "the visitors were told of a free that did "
                               "not happen";
  EXPECT_EQ(sub.bytes_in_use(), 2 * kMiB);
  // Both blocks are still exactly as they were.
  sub.Free(b, kMiB);
  sub.Free(a, kMiB);
  EXPECT_EQ(sub.invalid_frees(), 3u);
  EXPECT_EQ(sub.bytes_in_use(), 0u);
  EXPECT_EQ(free_visits, 2);
}

TEST(VirtualSubAllocatorTest, AFailedReservationSaysWhyInAvailability) {
  SilenceLog log;
  VirtualSubAllocator ok(kMiB);
  EXPECT_TRUE(ok.Availability().ok());
  VirtualSubAllocator huge(size_t{1} << 63);  // beyond any address space
  EXPECT_EQ(huge.Availability().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(huge.Availability().message().find(
                "cannot reserve 9223372036854775808 bytes"),
            absl::string_view::npos)
      << huge.Availability();
  VirtualSubAllocator empty(0);
  EXPECT_EQ(empty.Availability().code(), absl::StatusCode::kUnavailable);
}

TEST(VirtualSubAllocatorTest, ReusesFreedRangeFirstFit) {
  VirtualSubAllocator sub(64 * kMiB);
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, kMiB);
  char* c = AllocOrNull(sub, kMiB);
  ASSERT_NE(c, nullptr);
  sub.Free(b, kMiB);
  // First fit in address order: the hole at b, not the tail after c.
  EXPECT_EQ(AllocOrNull(sub, kMiB / 2), b);
  EXPECT_EQ(AllocOrNull(sub, kMiB / 2), b + kMiB / 2);
  // The hole is full now; the next block goes after c.
  EXPECT_EQ(AllocOrNull(sub, 256), c + kMiB);
  sub.Free(a, kMiB);
  EXPECT_EQ(AllocOrNull(sub, kMiB), a);
}

TEST(VirtualSubAllocatorTest, GapSeparatesBlocks) {
  VirtualSubAllocator::Options opts;
  opts.supports_coalescing = false;
  opts.gap_bytes = 64 * kKiB;
  VirtualSubAllocator sub(64 * kMiB, opts);
  char* a = AllocOrNull(sub, kMiB);
  char* b = AllocOrNull(sub, kMiB);
  char* c = AllocOrNull(sub, kMiB);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(b, a + kMiB + 64 * kKiB);
  EXPECT_EQ(c, b + kMiB + 64 * kKiB);
  EXPECT_EQ(sub.bytes_in_use(), 3 * kMiB);

  // A Free that spans a block and its gap is not a union of blocks.
  SilenceLog log;
  sub.Free(a, 2 * kMiB + 64 * kKiB);
  EXPECT_EQ(sub.invalid_frees(), 1u);
  EXPECT_EQ(sub.bytes_in_use(), 3 * kMiB);

  // Freeing b returns its gap too, so the hole is kMiB + gap long: a block
  // that long would leave no gap before c and goes after c instead, while a
  // kMiB block (plus its gap) fits the hole exactly.
  sub.Free(b, kMiB);
  EXPECT_EQ(AllocOrNull(sub, kMiB + 64 * kKiB), c + kMiB + 64 * kKiB);
  EXPECT_EQ(AllocOrNull(sub, kMiB), b);
}

TEST(VirtualSubAllocatorTest, GapIsClippedAtEndOfReservation) {
  VirtualSubAllocator::Options opts;
  opts.gap_bytes = kMiB;
  VirtualSubAllocator sub(4 * kMiB, opts);
  char* a = AllocOrNull(sub, kMiB);
  ASSERT_NE(a, nullptr);
  // 2 MiB + 1 MiB gap after a leaves exactly 2 MiB at the end: the last
  // block may fill it even though its gap has no room.
  char* b = AllocOrNull(sub, 2 * kMiB);
  EXPECT_EQ(b, a + 2 * kMiB);
  EXPECT_EQ(AllocOrNull(sub, 256), nullptr);
  sub.Free(b, 2 * kMiB);
  sub.Free(a, kMiB);
  EXPECT_EQ(AllocOrNull(sub, 4 * kMiB), a);
}

TEST(VirtualSubAllocatorTest, NeverReuseAddressesStrictlyIncrease) {
  VirtualSubAllocator::Options opts;
  opts.never_reuse = true;
  VirtualSubAllocator sub(64 * kMiB, opts);
  char* last = nullptr;
  for (int i = 0; i < 100; ++i) {
    SCOPED_TRACE(i);
    const size_t n = 256 * (1 + (i * 7) % 13);
    char* p = AllocOrNull(sub, n);
    ASSERT_NE(p, nullptr);
    EXPECT_GT(p, last);
    // Free right away: a reusing allocator would hand the same address back.
    sub.Free(p, n);
    last = p;
  }
  EXPECT_EQ(sub.bytes_in_use(), 0u);
  EXPECT_EQ(sub.invalid_frees(), 0u);
}

TEST(VirtualSubAllocatorTest, NeverReuseExhaustsEvenWhenAllFree) {
  VirtualSubAllocator::Options opts;
  opts.never_reuse = true;
  VirtualSubAllocator sub(kMiB, opts);
  for (int i = 0; i < 4; ++i) {
    char* p = AllocOrNull(sub, kMiB / 4);
    ASSERT_NE(p, nullptr) << i;
    sub.Free(p, kMiB / 4);
  }
  EXPECT_EQ(AllocOrNull(sub, 256), nullptr);
}

TEST(VirtualSubAllocatorTest, CapacityExhaustionGivesNullptr) {
  VirtualSubAllocator sub(4 * kMiB);
  EXPECT_EQ(AllocOrNull(sub, 4 * kMiB + 1), nullptr);
  char* a = AllocOrNull(sub, 4 * kMiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(AllocOrNull(sub, 256), nullptr);
  sub.Free(a, 4 * kMiB);
  EXPECT_EQ(AllocOrNull(sub, 256), a);
  // Free space split by live blocks: 2 MiB free in total but no 2 MiB hole.
  sub.Free(a, 256);
  char* b = AllocOrNull(sub, kMiB);
  char* c = AllocOrNull(sub, kMiB);
  char* d = AllocOrNull(sub, kMiB);
  char* e = AllocOrNull(sub, kMiB);
  ASSERT_NE(e, nullptr);
  sub.Free(b, kMiB);
  sub.Free(d, kMiB);
  EXPECT_EQ(sub.bytes_in_use(), 2 * kMiB);
  EXPECT_EQ(AllocOrNull(sub, 2 * kMiB), nullptr);
  (void)c;
}

TEST(VirtualSubAllocatorTest, VisitorsSeeRoundedSizeAndIndexZero) {
  std::vector<std::tuple<void*, int, size_t>> allocs, frees;
  VirtualSubAllocator sub(
      64 * kMiB, VirtualSubAllocator::Options(),
      {[&](void* p, int i, size_t n) { allocs.emplace_back(p, i, n); }},
      {[&](void* p, int i, size_t n) { frees.emplace_back(p, i, n); }});
  char* a = AllocOrNull(sub, 1000);
  char* b = AllocOrNull(sub, 256);
  ASSERT_EQ(allocs.size(), 2u);
  EXPECT_EQ(allocs[0], std::make_tuple(static_cast<void*>(a), 0, size_t{1024}));
  EXPECT_EQ(allocs[1], std::make_tuple(static_cast<void*>(b), 0, size_t{256}));
  sub.Free(a, 1024 + 256);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0], std::make_tuple(static_cast<void*>(a), 0, size_t{1280}));
}

TEST(VirtualSubAllocatorTest, TerabyteReservationCommitsNoMemory) {
  const auto before = Statm();
  ASSERT_GT(before.first, 0u) << "cannot read /proc/self/statm";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  {
    VirtualSubAllocator sub(kTiB);
    ASSERT_NE(sub.base(), nullptr) << "1 TiB MAP_NORESERVE reservation failed";
    EXPECT_EQ(sub.capacity(), kTiB);
    const auto reserved = Statm();
    // The address space is there...
    EXPECT_GE((reserved.first - before.first) * page, kTiB);
    // ...and handing all of it out in 1 GiB blocks touches nothing.
    std::vector<char*> blocks;
    for (size_t i = 0; i < kTiB / kGiB; ++i) {
      char* p = AllocOrNull(sub, kGiB);
      ASSERT_NE(p, nullptr) << i;
      blocks.push_back(p);
    }
    EXPECT_EQ(sub.bytes_in_use(), kTiB);
    EXPECT_EQ(AllocOrNull(sub, 256), nullptr);
    const auto used = Statm();
    // Bookkeeping for 1024 blocks is a few hundred KiB; 64 MiB of slack
    // leaves room for the test framework but not for committed pages.
    const long long resident_delta = static_cast<long long>(used.second) -
                                     static_cast<long long>(before.second);
    EXPECT_LT(resident_delta * static_cast<long long>(page),
              static_cast<long long>(64 * kMiB));
    sub.Free(blocks.front(), kTiB);  // one union of every block
    EXPECT_EQ(sub.bytes_in_use(), 0u);
    EXPECT_EQ(sub.invalid_frees(), 0u);
  }
  // The destructor gives the address space back.
  EXPECT_LT(Statm().first * page, before.first * page + kGiB);
}

TEST(VirtualSubAllocatorDeathTest, MemoryIsNotAccessible) {
  VirtualSubAllocator sub(kMiB);
  volatile char* p = AllocOrNull(sub, 256);
  ASSERT_NE(p, nullptr);
  // The range is PROT_NONE: a stray dereference must crash, not use memory.
  EXPECT_DEATH(*p = 1, "");
}

}  // namespace
}  // namespace bfc
