// File: tests/sub_allocator_conformance_test.cc
// -----------------------------------------------------------------------------
//
// One typed suite run against every SubAllocator: first the SubAllocator
// contract itself, then a bfc::Allocator on top of it, checking what a user
// relies on whatever the memory is: distinct, aligned, non-overlapping
// blocks, exact stats, complete coalescing, and every region given back.
//
// Each kind is a small traits struct with a factory. Kinds that need a GPU
// skip with the runtime's reason when there is none.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/sub_allocator.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"
#ifdef BFC_HAVE_CUDA
#include "bfc/cuda_sub_allocator.h"
#endif

namespace bfc {
namespace {

// --- kinds -----------------------------------------------------------------
// Each kind says how to make one, what it promises, and whether the host may
// touch the memory. Make() returns nullptr with *skip set when the kind is
// not available on this machine.

struct HostKind {
  static constexpr MemoryType kType = MemoryType::kHostPageable;
  static constexpr bool kCoalescing = false;
  static constexpr bool kHostWritable = true;
  static std::unique_ptr<SubAllocator> Make(
      std::vector<SubAllocator::Visitor> a,
      std::vector<SubAllocator::Visitor> f, std::string* skip) {
    return std::make_unique<HostSubAllocator>(std::move(a), std::move(f));
  }
};

struct VirtualKind {
  static constexpr MemoryType kType = MemoryType::kUnknown;
  static constexpr bool kCoalescing = true;
  static constexpr bool kHostWritable = false;
  static std::unique_ptr<SubAllocator> Make(
      std::vector<SubAllocator::Visitor> a,
      std::vector<SubAllocator::Visitor> f, std::string* skip) {
    return std::make_unique<VirtualSubAllocator>(size_t{1} << 34,
                                                 VirtualSubAllocator::Options(),
                                                 std::move(a), std::move(f));
  }
};

// TF's GPU sub-allocator as the fidelity tests model it: no merging, and
// regions that are never adjacent.
struct VirtualGapKind {
  static constexpr MemoryType kType = MemoryType::kUnknown;
  static constexpr bool kCoalescing = false;
  static constexpr bool kHostWritable = false;
  static std::unique_ptr<SubAllocator> Make(
      std::vector<SubAllocator::Visitor> a,
      std::vector<SubAllocator::Visitor> f, std::string* skip) {
    VirtualSubAllocator::Options opts;
    opts.supports_coalescing = false;
    opts.gap_bytes = 2 * kMiB;
    return std::make_unique<VirtualSubAllocator>(size_t{1} << 34, opts,
                                                 std::move(a), std::move(f));
  }
};

#ifdef BFC_HAVE_CUDA
struct CudaDeviceKind {
  static constexpr MemoryType kType = MemoryType::kDevice;
  static constexpr bool kCoalescing = false;
  static constexpr bool kHostWritable = false;
  static std::unique_ptr<SubAllocator> Make(
      std::vector<SubAllocator::Visitor> a,
      std::vector<SubAllocator::Visitor> f, std::string* skip) {
    std::string why;
    if (CudaDeviceCount(&why) == 0) {
      *skip = "no CUDA device: " + why;
      return nullptr;
    }
    return std::make_unique<CudaDeviceSubAllocator>(0, std::move(a),
                                                    std::move(f));
  }
};

struct CudaPinnedKind {
  static constexpr MemoryType kType = MemoryType::kHostPinned;
  static constexpr bool kCoalescing = false;
  static constexpr bool kHostWritable = true;
  static std::unique_ptr<SubAllocator> Make(
      std::vector<SubAllocator::Visitor> a,
      std::vector<SubAllocator::Visitor> f, std::string* skip) {
    // Pinning needs the driver; that is what a device count tells us.
    std::string why;
    if (CudaDeviceCount(&why) == 0) {
      *skip = "no CUDA device (pinned memory needs the driver): " + why;
      return nullptr;
    }
    return std::make_unique<CudaPinnedSubAllocator>(std::move(a), std::move(f));
  }
};
#endif

// --- fixture ---------------------------------------------------------------

// Keeps library messages out of the test log, but keeps them for failures.
class CaptureLog {
 public:
  CaptureLog()
      : previous_(SetLogSink([this](LogSeverity, std::string_view msg) {
          all_ += std::string(msg) + "\n";
        })) {}
  ~CaptureLog() { SetLogSink(previous_); }
  const std::string& all() const { return all_; }

 private:
  std::string all_;
  LogSink previous_;
};

bool IsAligned(const void* p, size_t a) {
  return (reinterpret_cast<uintptr_t>(p) % a) == 0;
}

template <typename Kind>
class SubAllocatorConformanceTest : public ::testing::Test {
 protected:
  // Makes a sub-allocator whose visitors keep `outstanding_` = bytes handed
  // out by Alloc and not yet given back by Free, and count the calls.
  std::unique_ptr<SubAllocator> Make() {
    std::string skip;
    auto sub = Kind::Make({[this](void* p, int, size_t n) {
                            ++alloc_visits_;
                            outstanding_ += static_cast<int64_t>(n);
                            last_alloc_visit_ = p;
                          }},
                          {[this](void* p, int, size_t n) {
                            ++free_visits_;
                            outstanding_ -= static_cast<int64_t>(n);
                            last_free_visit_ = p;
                          }},
                          &skip);
    if (sub == nullptr) skip_reason_ = skip;
    return sub;
  }

  std::unique_ptr<Allocator> MakeAllocator(size_t total_memory,
                                           bool allow_growth = true) {
    std::unique_ptr<SubAllocator> sub = Make();
    if (sub == nullptr) return nullptr;
    Allocator::Options opts;
    opts.allow_growth = allow_growth;
    // Out-of-memory must fail at once, not wait for frees that never come.
    opts.allow_retry_on_failure = false;
    return std::make_unique<Allocator>(std::move(sub), total_memory,
                                       "conformance", opts);
  }

  CaptureLog log_;
  std::string skip_reason_;
  int64_t outstanding_ = 0;
  int alloc_visits_ = 0;
  int free_visits_ = 0;
  void* last_alloc_visit_ = nullptr;
  void* last_free_visit_ = nullptr;
};

#define BFC_MAKE_OR_SKIP(var, expr) \
  auto var = (expr);                \
  if (var == nullptr) GTEST_SKIP() << this->skip_reason_;

using Kinds = ::testing::Types<HostKind, VirtualKind, VirtualGapKind
#ifdef BFC_HAVE_CUDA
                               ,
                               CudaDeviceKind, CudaPinnedKind
#endif
                               >;

class KindNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, HostKind>) return "Host";
    if (std::is_same_v<T, VirtualKind>) return "Virtual";
    if (std::is_same_v<T, VirtualGapKind>) return "VirtualGap";
#ifdef BFC_HAVE_CUDA
    if (std::is_same_v<T, CudaDeviceKind>) return "CudaDevice";
    if (std::is_same_v<T, CudaPinnedKind>) return "CudaPinned";
#endif
    return "Unknown";
  }
};

TYPED_TEST_SUITE(SubAllocatorConformanceTest, Kinds, KindNames);

// --- the SubAllocator contract ---------------------------------------------

TYPED_TEST(SubAllocatorConformanceTest, ReportsItsKind) {
  BFC_MAKE_OR_SKIP(sub, this->Make());
  EXPECT_EQ(sub->GetMemoryType(), TypeParam::kType);
  EXPECT_EQ(sub->SupportsCoalescing(), TypeParam::kCoalescing);
}

TYPED_TEST(SubAllocatorConformanceTest, AllocGivesAlignedBlocksAndVisits) {
  BFC_MAKE_OR_SKIP(sub, this->Make());
  for (size_t alignment = 256; alignment <= kMiB; alignment *= 4) {
    for (size_t n : {size_t{1}, size_t{256}, size_t{1000}, 2 * kMiB + 1}) {
      SCOPED_TRACE(testing::Message()
                   << "alignment " << alignment << " n " << n);
      size_t received = 0;
      void* p = sub->Alloc(alignment, n, &received);
      // CUDA may refuse alignments above what it guarantees; everything
      // else must honour them. A block that comes back must be aligned.
      if (alignment > 256 && p == nullptr &&
          (TypeParam::kType == MemoryType::kDevice ||
           TypeParam::kType == MemoryType::kHostPinned)) {
        continue;
      }
      ASSERT_NE(p, nullptr) << this->log_.all();
      EXPECT_TRUE(IsAligned(p, alignment)) << p;
      EXPECT_GE(received, n);
      EXPECT_EQ(this->last_alloc_visit_, p);
      EXPECT_EQ(this->outstanding_, static_cast<int64_t>(received));
      if (TypeParam::kHostWritable) std::memset(p, 0x77, received);
      sub->Free(p, received);
      EXPECT_EQ(this->last_free_visit_, p);
      EXPECT_EQ(this->outstanding_, 0);
    }
  }
  EXPECT_EQ(this->alloc_visits_, this->free_visits_);
  EXPECT_GT(this->alloc_visits_, 0);
}

TYPED_TEST(SubAllocatorConformanceTest, BadRequestsGiveNullptr) {
  BFC_MAKE_OR_SKIP(sub, this->Make());
  size_t received = 123;
  EXPECT_EQ(sub->Alloc(256, 0, &received), nullptr);
  EXPECT_EQ(received, 0u);
  received = 123;
  EXPECT_EQ(sub->Alloc(768, kMiB, &received), nullptr);
  EXPECT_EQ(received, 0u);
  EXPECT_EQ(this->alloc_visits_, 0);
  sub->Free(nullptr, 0);
  EXPECT_EQ(this->free_visits_, 0);
}

TYPED_TEST(SubAllocatorConformanceTest, LiveBlocksDoNotOverlap) {
  BFC_MAKE_OR_SKIP(sub, this->Make());
  std::vector<std::pair<char*, size_t>> blocks;
  for (int i = 0; i < 16; ++i) {
    size_t received = 0;
    char* p = static_cast<char*>(
        sub->Alloc(256, (i + 1) * 64 * 1024 + 17, &received));
    ASSERT_NE(p, nullptr) << i << this->log_.all();
    blocks.push_back({p, received});
  }
  std::sort(blocks.begin(), blocks.end());
  for (size_t i = 1; i < blocks.size(); ++i) {
    EXPECT_LE(blocks[i - 1].first + blocks[i - 1].second, blocks[i].first) << i;
  }
  for (auto& [p, n] : blocks) sub->Free(p, n);
  EXPECT_EQ(this->outstanding_, 0);
}

// --- a bfc::Allocator over the sub-allocator -------------------------------

// Deterministic mix of sizes: tiny, odd, around bin edges and multi-MiB.
std::vector<size_t> RequestSizes() {
  std::vector<size_t> sizes = {1,        255,  256,      257,
                               1000,     4096, 65535,    65537,
                               kMiB - 1, kMiB, kMiB + 1, 3 * kMiB + 5};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    // Mostly small, some up to 512 KiB.
    sizes.push_back(1 + (i % 10 == 0 ? x % (512 * 1024) : x % 8192));
  }
  return sizes;
}

TYPED_TEST(SubAllocatorConformanceTest,
           AllocatorBlocksAreDistinctAndStatsExact) {
  BFC_MAKE_OR_SKIP(alloc, this->MakeAllocator(256 * kMiB));
  EXPECT_EQ(alloc->GetMemoryType(), TypeParam::kType);
  const std::vector<size_t> sizes = RequestSizes();
  std::vector<std::pair<char*, size_t>> live;  // ptr, requested
  int64_t expected_in_use = 0;
  for (size_t n : sizes) {
    char* p = static_cast<char*>(alloc->AllocateRaw(256, n));
    ASSERT_NE(p, nullptr) << n << "\n" << this->log_.all();
    ASSERT_TRUE(IsAligned(p, 256)) << p;
    EXPECT_EQ(alloc->RequestedSize(p), n);
    EXPECT_GE(alloc->AllocatedSize(p), n);
    EXPECT_EQ(alloc->AllocatedSize(p) % 256, 0u);
    EXPECT_GT(alloc->AllocationId(p), 0);
    expected_in_use += static_cast<int64_t>(alloc->AllocatedSize(p));
    live.push_back({p, n});
  }
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();

  std::optional<AllocatorStats> stats = alloc->GetStats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->num_allocs, static_cast<int64_t>(sizes.size()));
  EXPECT_EQ(stats->bytes_in_use, expected_in_use);
  EXPECT_EQ(stats->peak_bytes_in_use, expected_in_use);
  ASSERT_TRUE(stats->pool_bytes.has_value());
  EXPECT_GE(*stats->pool_bytes, expected_in_use);
  EXPECT_LE(*stats->pool_bytes, static_cast<int64_t>(256 * kMiB));
  // Every pool byte came from the sub-allocator and is still out.
  EXPECT_EQ(this->outstanding_, *stats->pool_bytes);

  // No two allocations overlap (by address, using the chunk sizes).
  std::vector<std::pair<char*, size_t>> by_addr;
  for (auto& [p, n] : live) by_addr.push_back({p, alloc->AllocatedSize(p)});
  std::sort(by_addr.begin(), by_addr.end());
  for (size_t i = 1; i < by_addr.size(); ++i) {
    ASSERT_LE(by_addr[i - 1].first + by_addr[i - 1].second, by_addr[i].first)
        << "allocations " << i - 1 << " and " << i << " overlap";
  }

  // Host memory: every requested byte is usable and nothing overlaps in
  // practice either (patterns written to all survive).
  if (TypeParam::kHostWritable) {
    for (size_t i = 0; i < live.size(); ++i) {
      std::memset(live[i].first, static_cast<int>(i & 0xff), live[i].second);
    }
    for (size_t i = 0; i < live.size(); ++i) {
      const auto expect = static_cast<char>(i & 0xff);
      ASSERT_EQ(live[i].first[0], expect) << i;
      ASSERT_EQ(live[i].first[live[i].second - 1], expect) << i;
    }
  }

  // Free in an interleaved order (odd indices, then even, then backwards) so
  // merges happen with both neighbours.
  std::vector<size_t> order;
  for (size_t i = 1; i < live.size(); i += 2) order.push_back(i);
  for (size_t i = live.size(); i-- > 0;) {
    if (i % 2 == 0) order.push_back(i);
  }
  int64_t in_use = expected_in_use;
  for (size_t k = 0; k < order.size(); ++k) {
    char* p = live[order[k]].first;
    in_use -= static_cast<int64_t>(alloc->AllocatedSize(p));
    alloc->DeallocateRaw(p);
    if (k % 25 == 0) {
      ASSERT_TRUE(alloc->Validate().ok()) << alloc->Validate();
      EXPECT_EQ(alloc->GetStats()->bytes_in_use, in_use);
    }
  }
  stats = alloc->GetStats();
  EXPECT_EQ(stats->bytes_in_use, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  const int64_t pool = *stats->pool_bytes;
  if (TypeParam::kCoalescing) {
    // Contiguous regions merge: everything is one free chunk again.
    EXPECT_EQ(stats->largest_free_block_bytes, pool);
  } else {
    EXPECT_GT(stats->largest_free_block_bytes, 0);
    EXPECT_LE(stats->largest_free_block_bytes, pool);
  }

  // Every region is fully free, so all of it goes back.
  EXPECT_EQ(alloc->ReleaseFreeRegions(), static_cast<size_t>(pool));
  EXPECT_EQ(this->outstanding_, 0);
  EXPECT_EQ(this->alloc_visits_ > 0, true);
  EXPECT_EQ(*alloc->GetStats()->pool_bytes, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  // The allocator still works after giving everything back.
  void* again = alloc->AllocateRaw(256, 4096);
  EXPECT_NE(again, nullptr);
  alloc->DeallocateRaw(again);
}

TYPED_TEST(SubAllocatorConformanceTest, AllocatorHonoursLargeAlignments) {
  BFC_MAKE_OR_SKIP(alloc, this->MakeAllocator(64 * kMiB));
  std::vector<void*> ptrs;
  for (size_t alignment = 512; alignment <= kMiB; alignment *= 2) {
    void* p = alloc->AllocateRaw(alignment, 1000);
    ASSERT_NE(p, nullptr) << alignment << "\n" << this->log_.all();
    EXPECT_TRUE(IsAligned(p, alignment)) << alignment << " " << p;
    ptrs.push_back(p);
  }
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
  for (void* p : ptrs) alloc->DeallocateRaw(p);
  EXPECT_EQ(alloc->GetStats()->bytes_in_use, 0);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
}

TYPED_TEST(SubAllocatorConformanceTest, AllocatorWithoutGrowthTakesTheLimit) {
  BFC_MAKE_OR_SKIP(alloc,
                   this->MakeAllocator(32 * kMiB, /*allow_growth=*/false));
  void* p = alloc->AllocateRaw(256, 1000);
  ASSERT_NE(p, nullptr) << this->log_.all();
  EXPECT_EQ(*alloc->GetStats()->pool_bytes, static_cast<int64_t>(32 * kMiB));
  EXPECT_EQ(this->outstanding_, static_cast<int64_t>(32 * kMiB));
  // More than the limit fails with a clear status and changes nothing.
  absl::StatusOr<void*> big = alloc->Allocate(33 * kMiB);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted)
      << big.status();
  EXPECT_EQ(alloc->GetStats()->bytes_in_use,
            static_cast<int64_t>(alloc->AllocatedSize(p)));
  alloc->DeallocateRaw(p);
  EXPECT_TRUE(alloc->Validate().ok()) << alloc->Validate();
}

TYPED_TEST(SubAllocatorConformanceTest,
           AllocatorDestructorGivesEverythingBack) {
  {
    BFC_MAKE_OR_SKIP(alloc, this->MakeAllocator(64 * kMiB));
    for (size_t n : {size_t{100}, 3 * kMiB, size_t{5000}}) {
      ASSERT_NE(alloc->AllocateRaw(256, n), nullptr) << this->log_.all();
    }
    EXPECT_GT(this->outstanding_, 0);
    // Destroyed with allocations still live: they are reported, and the
    // regions still go back.
  }
  EXPECT_EQ(this->outstanding_, 0);
  EXPECT_EQ(this->alloc_visits_ > 0, this->free_visits_ > 0);
}

}  // namespace
}  // namespace bfc
