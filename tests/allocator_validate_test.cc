// File: tests/allocator_validate_test.cc
// Allocator::Validate composes the components' validators and adds the
// invariants across them; these tests corrupt one thing at a time through a
// peer and expect the exact message, then undo it and expect OK again. Also
// the check ladder itself: BFC_DCHECK at level >= 1, Validate() after every
// mutating call at level 2.
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/internal/bin.h"
#include "bfc/internal/check.h"
#include "bfc/virtual_sub_allocator.h"
#include "core/internal/account_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_stream_ops.h"

namespace bfc {

// Reaches an Allocator's state to corrupt it on purpose (a friend). Tests are
// single-threaded, so the lock is not taken; Validate() takes it.
class AllocatorTestPeer {
 public:
  explicit AllocatorTestPeer(Allocator& a) : a_(a) {}
  internal::ChunkTable& chunks() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.chunks_;
  }
  internal::Bin& bin(int b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.bins_[b];
  }
  uint32_t& non_empty_bins() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.non_empty_bins_;
  }
  internal::RegionManager& region_manager() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.region_manager_;
  }
  AllocatorStats& stats() ABSL_NO_THREAD_SAFETY_ANALYSIS { return a_.stats_; }
  size_t& total_region_allocated_bytes() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.total_region_allocated_bytes_;
  }
  internal::ChunkHandle HandleOf(const void* p) {
    return region_manager().get_handle(p);
  }
  // The list of fully free regions release_before_extend gives back.
  internal::ChunkHandle free_region_head() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.free_region_head_;
  }
  internal::ChunkHandle free_region_tail() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.free_region_tail_;
  }
  internal::ChunkHandle& free_region_prev(internal::ChunkHandle h)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.free_region_links_[h].prev;
  }
  size_t& num_free_region_links() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.num_free_region_links_;
  }
  void LinkFreeRegion(internal::ChunkHandle h) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    a_.LinkFreeRegion(h);
  }
  void UnlinkFreeRegion(internal::ChunkHandle h)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    a_.UnlinkFreeRegion(h);
  }
  // Streams.
  std::vector<internal::ChunkHandle>& fenced_chunks()
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.fenced_chunks_;
  }
  std::vector<bool>& fence_listed() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.fence_listed_;
  }
  size_t num_multi_fences() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.multi_fences_.size();
  }
  uint32_t multi_fence_refs(size_t i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.multi_fences_[i].refs;
  }
  std::vector<std::pair<uint32_t, uint64_t>>& multi_fence_parts(size_t i)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.multi_fences_[i].parts;
  }
  std::vector<uint32_t>& free_multi_fences() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.free_multi_fences_;
  }
  std::unordered_map<StreamId, uint32_t>& stream_slots()
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.stream_slots_;
  }
  bool& force_timestamp_merge() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.force_timestamp_merge_;
  }
  // The chunk table's other columns.
  size_t handle_bound() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.chunks_.handle_bound();
  }
  std::vector<uint32_t>& chunk_account() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.chunk_account_;
  }
  // Accounts.
  std::shared_ptr<internal::AccountState> account(const std::string& path)
      ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& a : a_.accounts_) {
      if (a != nullptr && a->path == path) return a;
    }
    return nullptr;
  }
  std::vector<uint32_t>& free_account_ids() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return a_.free_account_ids_;
  }

 private:
  Allocator& a_;
};

namespace {

using internal::BinNumForSize;
using internal::ChunkHandle;

constexpr size_t kRegion = size_t{2} << 20;  // the first region with growth

// One 2 MiB region tiled by p1 (1024 bytes, in use), p2 (2048, in use) and
// the free rest, on a coalescing VirtualSubAllocator (no memory touched).
class AllocatorValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    alloc_ = std::make_unique<Allocator>(
        std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
        /*total_memory=*/size_t{64} << 20, "test", o);
    p1_ = alloc_->AllocateRaw(kMinAllocationSize, 1000);
    p2_ = alloc_->AllocateRaw(kMinAllocationSize, 2000);
    ASSERT_NE(p1_, nullptr);
    ASSERT_NE(p2_, nullptr);
    peer_ = std::make_unique<AllocatorTestPeer>(*alloc_);
    h1_ = peer_->HandleOf(p1_);
    h2_ = peer_->HandleOf(p2_);
    rest_ = static_cast<char*>(p2_) + 2048;
    hr_ = peer_->HandleOf(rest_);
    ASSERT_EQ(static_cast<char*>(p1_) + 1024, p2_);
    ASSERT_NE(hr_, internal::kInvalidChunkHandle);
    ASSERT_TRUE(alloc_->Validate().ok());
  }
  void TearDown() override {
    // Every test undoes its corruption.
    const absl::Status s = alloc_->Validate();
    EXPECT_TRUE(s.ok()) << s;
    for (void* p : {p1_, p2_}) {
      if (alloc_->AllocatedSize(p) > 0) alloc_->DeallocateRaw(p);
    }
  }

  std::string Region() const {
    const uintptr_t base = reinterpret_cast<uintptr_t>(p1_);
    return absl::StrFormat("region 0 [0x%x, 0x%x)", base, base + kRegion);
  }
  std::string Chunk(ChunkHandle h) {
    return absl::StrCat("chunk ", h, " ", peer_->chunks()[h].DebugString());
  }
  absl::Status Error(absl::string_view what) {
    return absl::InternalError(absl::StrCat("Allocator 'test': ", what));
  }
  void SetBit(internal::BinNum b, bool on) {
    if (on) {
      peer_->non_empty_bins() |= uint32_t{1} << b;
    } else {
      peer_->non_empty_bins() &= ~(uint32_t{1} << b);
    }
  }

  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<AllocatorTestPeer> peer_;
  void* p1_ = nullptr;
  void* p2_ = nullptr;
  void* rest_ = nullptr;
  ChunkHandle h1_ = 0, h2_ = 0, hr_ = 0;
};

TEST_F(AllocatorValidateTest, HealthyAllocatorsValidate) {
  // Splits, merges, growth, over-aligned requests, release.
  void* big = alloc_->AllocateRaw(kMinAllocationSize, 5 << 20);
  void* aligned = alloc_->AllocateRaw(size_t{1} << 16, 3000);
  ASSERT_NE(big, nullptr);
  ASSERT_NE(aligned, nullptr);
  EXPECT_TRUE(alloc_->Validate().ok());
  alloc_->DeallocateRaw(big);
  alloc_->DeallocateRaw(aligned);
  EXPECT_TRUE(alloc_->Validate().ok());
  alloc_->DeallocateRaw(p1_);
  alloc_->DeallocateRaw(p2_);
  EXPECT_GT(alloc_->ReleaseFreeRegions(), 0u);
  EXPECT_TRUE(alloc_->Validate().ok());
}

// --- A component's message, under the allocator's name ---------------------

TEST_F(AllocatorValidateTest, BinComponent) {
  // An entry naming the in-use p1 in bin 4.
  ASSERT_TRUE(peer_->bin(4).Insert(4096, p1_, h1_));
  SetBit(4, true);
  EXPECT_EQ(
      alloc_->Validate(),
      Error(absl::StrFormat("Bin 4: entry 0 (handle %d, ptr %p, size "
                            "4096) is in use: %s",
                            h1_, p1_, peer_->chunks()[h1_].DebugString())));
  ASSERT_TRUE(peer_->bin(4).Erase(4096, p1_));
  SetBit(4, false);
}

TEST_F(AllocatorValidateTest, RegionManagerComponent) {
  // A region no chunk tiles, well away from the real one.
  char* far = static_cast<char*>(p1_) + (size_t{16} << 20);
  peer_->region_manager().AddAllocationRegion(far, 4096);
  const uintptr_t a = reinterpret_cast<uintptr_t>(far);
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("RegionManager: region 1 [0x%x, 0x%x) has "
                                  "no chunk mapped at its base",
                                  a, a + 4096)));
  ASSERT_TRUE(peer_->region_manager().RemoveAllocationRegion(far));
}

// --- Cross-structure invariants --------------------------------------------

TEST_F(AllocatorValidateTest, LiveChunkReachableFromNoRegion) {
  const ChunkHandle leaked = peer_->chunks().Allocate();
  EXPECT_EQ(alloc_->Validate(),
            Error("4 live chunks but 3 reachable from the regions"));
  peer_->chunks().Deallocate(leaked);
}

TEST_F(AllocatorValidateTest, ChunksMustTileTheRegion) {
  peer_->chunks()[h2_].size += 256;
  EXPECT_EQ(
      alloc_->Validate(),
      Error(absl::StrFormat("%s: %s should start at 0x%x", Region(), Chunk(hr_),
                            reinterpret_cast<uintptr_t>(rest_) + 256)));
  peer_->chunks()[h2_].size -= 256;
}

TEST_F(AllocatorValidateTest, PrevAndNextAreMutual) {
  peer_->chunks()[hr_].prev = h1_;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s has prev %d, expected %d", Region(),
                                  Chunk(hr_), h1_, h2_)));
  peer_->chunks()[hr_].prev = h2_;
}

TEST_F(AllocatorValidateTest, NoTwoNeighboursAreBothFree) {
  // p2 marked free and binned, but not merged with the free rest.
  internal::Chunk& c = peer_->chunks()[h2_];
  const int64_t id = c.allocation_id;
  const size_t requested = c.requested_size;
  c.allocation_id = -1;
  c.requested_size = 0;
  const internal::BinNum b = BinNumForSize(2048);
  ASSERT_TRUE(peer_->bin(b).Insert(2048, p2_, h2_));
  SetBit(b, true);
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s and its free prev %s are not merged",
                                  Region(), Chunk(hr_), Chunk(h2_))));
  ASSERT_TRUE(peer_->bin(b).Erase(2048, p2_));
  SetBit(b, false);
  c.allocation_id = id;
  c.requested_size = requested;
}

TEST_F(AllocatorValidateTest, EveryFreeChunkIsInItsBin) {
  const size_t size = peer_->chunks()[hr_].size;
  const internal::BinNum b = BinNumForSize(size);
  ASSERT_TRUE(peer_->bin(b).Erase(size, rest_));
  SetBit(b, false);
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: free %s is missing from bin %d",
                                  Region(), Chunk(hr_), b)));
  ASSERT_TRUE(peer_->bin(b).Insert(size, rest_, hr_));
  SetBit(b, true);
}

TEST_F(AllocatorValidateTest, TheMapResolvesEveryChunk) {
  ASSERT_TRUE(peer_->region_manager().erase(p2_));
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: the region map resolves the start of %s "
                                  "to handle none",
                                  Region(), Chunk(h2_))));
  peer_->region_manager().set_handle(p2_, h2_);
}

TEST_F(AllocatorValidateTest, AllocationIdsComeFromHistory) {
  peer_->chunks()[h1_].allocation_id = 99;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s has an allocation id outside [1, 3)",
                                  Region(), Chunk(h1_))));
  peer_->chunks()[h1_].allocation_id = 1;
}

TEST_F(AllocatorValidateTest, NonEmptyBinBitmap) {
  SetBit(0, true);
  EXPECT_EQ(alloc_->Validate(),
            Error("bin 0 holds 0 entries but its bit in the non-empty-bin "
                  "bitmap is 1"));
  SetBit(0, false);
}

TEST_F(AllocatorValidateTest, StatsAgreeWithTheChunks) {
  peer_->stats().bytes_in_use += 256;
  EXPECT_EQ(alloc_->Validate(),
            Error("bytes_in_use is 3328 but in-use chunks sum to 3072"));
  peer_->stats().bytes_in_use -= 256;
  *peer_->stats().pool_bytes += 256;
  EXPECT_EQ(alloc_->Validate(),
            Error("regions sum to 2097152 bytes but pool_bytes is 2097408 and "
                  "the running total 2097152"));
  *peer_->stats().pool_bytes -= 256;
  peer_->stats().bytes_requested_in_use = 1;
  EXPECT_EQ(alloc_->Validate(),
            Error("bytes_requested_in_use is 1 but in-use chunks asked for "
                  "3000"));
  peer_->stats().bytes_requested_in_use = 3000;
}

// Every other check Validate() claims, one corruption each (the file comment
// of src/core/allocator_validate.cc lists them): a check that is never seen
// failing could be deleted without a test noticing.

TEST_F(AllocatorValidateTest, BitmapHasNoBitsPastTheLastBin) {
  peer_->non_empty_bins() |= uint32_t{1} << kNumBins;
  const uint32_t bitmap = peer_->non_empty_bins();
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("the non-empty-bin bitmap 0x%x has bits "
                                  "past bin %d",
                                  bitmap, kNumBins - 1)));
  peer_->non_empty_bins() &= ~(uint32_t{1} << kNumBins);
}

TEST_F(AllocatorValidateTest, LinksStayInTheTable) {
  const ChunkHandle bad = static_cast<ChunkHandle>(peer_->chunks().capacity());
  peer_->chunks()[h2_].next = bad;
  EXPECT_EQ(
      alloc_->Validate(),
      Error(absl::StrFormat("%s: chunk %d links to handle %d, out of "
                            "range (%d chunk slots)",
                            Region(), h2_, bad, peer_->chunks().capacity())));
  peer_->chunks()[h2_].next = hr_;
}

TEST_F(AllocatorValidateTest, ChunkSizesAreMultiplesOfTheGranule) {
  // An in-use chunk (no bin entry to disagree with), checked before the
  // next chunk's start is.
  peer_->chunks()[h1_].size -= 128;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s has a size or start that is not a "
                                  "multiple of 256",
                                  Region(), Chunk(h1_))));
  peer_->chunks()[h1_].size += 128;
}

TEST_F(AllocatorValidateTest, NoChunkRunsPastItsRegion) {
  // The RegionManager's own check sees it first (before the tiling walk).
  peer_->chunks()[h1_].size += kRegion;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("RegionManager: %s is mapped but does not "
                                  "lie inside a region",
                                  Chunk(h1_))));
  peer_->chunks()[h1_].size -= kRegion;
}

TEST_F(AllocatorValidateTest, ChunksReachTheRegionsEnd) {
  // The free rest shrinks by 256 (rebinned, so only the tiling is wrong).
  const size_t size = peer_->chunks()[hr_].size;
  const internal::BinNum b = BinNumForSize(size);
  ASSERT_EQ(BinNumForSize(size - 256), b);
  ASSERT_TRUE(peer_->bin(b).Erase(size, rest_));
  ASSERT_TRUE(peer_->bin(b).Insert(size - 256, rest_, hr_));
  peer_->chunks()[hr_].size = size - 256;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p1_);
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: its chunks end at 0x%x", Region(),
                                  base + kRegion - 256)));
  ASSERT_TRUE(peer_->bin(b).Erase(size - 256, rest_));
  ASSERT_TRUE(peer_->bin(b).Insert(size, rest_, hr_));
  peer_->chunks()[hr_].size = size;
}

TEST_F(AllocatorValidateTest, ThePoolNeverExceedsTheLimit) {
  // Region 0 and its free rest grow by the whole 64 MiB limit, with every
  // other account kept consistent (bins, bitmap, pool totals), so only the
  // limit check can see it.
  constexpr size_t kGrow = size_t{64} << 20;
  const size_t size = peer_->chunks()[hr_].size;
  const internal::BinNum b = BinNumForSize(size);
  const internal::BinNum grown_bin = BinNumForSize(size + kGrow);
  ASSERT_NE(b, grown_bin);
  ASSERT_EQ(peer_->bin(b).size(), 1u);
  ASSERT_TRUE(peer_->bin(grown_bin).empty());
  auto grow = [&](size_t from, size_t to, internal::BinNum from_bin,
                  internal::BinNum to_bin, size_t delta) {
    ASSERT_TRUE(peer_->bin(from_bin).Erase(from, rest_));
    ASSERT_TRUE(peer_->bin(to_bin).Insert(to, rest_, hr_));
    SetBit(from_bin, false);
    SetBit(to_bin, true);
    peer_->chunks()[hr_].size = to;
    // The vector's elements are not const objects; regions() only views them.
    const_cast<internal::AllocationRegion&>(
        peer_->region_manager().regions()[0])
        .extend(delta);
    *peer_->stats().pool_bytes += static_cast<int64_t>(delta);
    *peer_->stats().peak_pool_bytes += static_cast<int64_t>(delta);
    peer_->total_region_allocated_bytes() += delta;
  };
  grow(size, size + kGrow, b, grown_bin, kGrow);
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrCat("the pool of ", kRegion + kGrow,
                               " bytes exceeds the limit of ", kGrow)));
  grow(size + kGrow, size, grown_bin, b, -kGrow);  // wraps back: unsigned
}

TEST_F(AllocatorValidateTest, InUseChunksKeepTheirRequestedSize) {
  peer_->chunks()[h1_].requested_size = 2000;  // more than its 1024 bytes
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s has a requested size outside (0, "
                                  "size]",
                                  Region(), Chunk(h1_))));
  peer_->chunks()[h1_].requested_size = 0;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: %s has a requested size outside (0, "
                                  "size]",
                                  Region(), Chunk(h1_))));
  peer_->chunks()[h1_].requested_size = 1000;
}

TEST_F(AllocatorValidateTest, FreeChunksKeepNoRequestedSize) {
  peer_->chunks()[hr_].requested_size = 8;
  EXPECT_EQ(alloc_->Validate(),
            Error(absl::StrFormat("%s: free %s keeps a requested size",
                                  Region(), Chunk(hr_))));
  peer_->chunks()[hr_].requested_size = 0;
}

TEST_F(AllocatorValidateTest, PeaksAreNeverBelowTheCurrentValues) {
  const int64_t peak = peer_->stats().peak_bytes_in_use;
  peer_->stats().peak_bytes_in_use = 256;
  EXPECT_EQ(alloc_->Validate(),
            Error("peak_bytes_in_use 256 < bytes_in_use 3072"));
  peer_->stats().peak_bytes_in_use = peak;
  const int64_t peak_pool = *peer_->stats().peak_pool_bytes;
  *peer_->stats().peak_pool_bytes = 256;
  EXPECT_EQ(alloc_->Validate(), Error("peak_pool_bytes 256 < pool_bytes "
                                      "2097152"));
  *peer_->stats().peak_pool_bytes = peak_pool;
}

TEST_F(AllocatorValidateTest, CountersAreNeverNegative) {
  const int64_t n = peer_->stats().num_allocs;
  peer_->stats().num_allocs = -1;
  EXPECT_EQ(alloc_->Validate(),
            Error("negative counters: num_allocs -1, largest_alloc_size 2048, "
                  "num_retries 0"));
  peer_->stats().num_allocs = n;
}

TEST_F(AllocatorValidateTest, TheBinsHoldExactlyTheFreeChunks) {
  // A second entry naming the free rest under a size of another bin: the
  // rest is still found in its own bin, so only the totals disagree.
  const size_t size = peer_->chunks()[hr_].size;
  char* fake = static_cast<char*>(rest_) + 256;
  const internal::BinNum b = BinNumForSize(size);
  ASSERT_TRUE(peer_->bin(b).Insert(size - 256, fake, hr_));
  const absl::Status s = alloc_->Validate();
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  ASSERT_TRUE(peer_->bin(b).Erase(size - 256, fake));
}

// --- The ladder ------------------------------------------------------------

TEST(CheckLadderTest, LevelIsOneOfTheLadder) {
  EXPECT_GE(BFC_CHECK_LEVEL, 0);
  EXPECT_LE(BFC_CHECK_LEVEL, 2);
}

TEST(CheckLadderTest, ArgumentsAreEvaluatedOnlyWhenChecking) {
  int n = 0;
  BFC_DCHECK(++n == 1);
  BFC_DCHECK_EQ(++n, 2);
  EXPECT_EQ(n, BFC_CHECK_LEVEL >= 1 ? 2 : 0);
}

#if BFC_CHECK_LEVEL >= 1

TEST(CheckLadderDeathTest, AFailedCheckPrintsOneLineAndAborts) {
  EXPECT_DEATH(BFC_DCHECK(1 + 1 == 3),
               "bfc: check failed at .*allocator_validate_test\\.cc:[0-9]+: "
               "1 \\+ 1 == 3\n");
  EXPECT_DEATH(BFC_DCHECK_EQ(1 + 1, 3),
               "bfc: check failed at .*allocator_validate_test\\.cc:[0-9]+: "
               "1 \\+ 1 == 3 \\(2 vs\\. 3\\)\n");
  const void* a = reinterpret_cast<const void*>(0x1000);
  const void* b = reinterpret_cast<const void*>(0x2000);
  EXPECT_DEATH(BFC_DCHECK_EQ(a, b), ": a == b \\(0x1000 vs\\. 0x2000\\)");
  EXPECT_DEATH(BFC_DCHECK_LT(size_t{5}, size_t{3}),
               ": size_t\\{5\\} < size_t\\{3\\} \\(5 vs\\. 3\\)");
}

// A free chunk taken out of its bin behind the allocator's back: freeing its
// neighbour tries to take it out again, and the level-1 check on the bin's
// erase stops there.
TEST_F(AllocatorValidateTest, CheapChecksCatchABrokenBinOnFree) {
  const size_t size = peer_->chunks()[hr_].size;
  const internal::BinNum b = BinNumForSize(size);
  EXPECT_DEATH(
      {
        (void)peer_->bin(b).Erase(size, rest_);
        SetBit(b, false);
        alloc_->DeallocateRaw(p2_);
      },
      "bfc: check failed at .*allocator\\.cc:[0-9]+: erased\n");
}

#endif  // BFC_CHECK_LEVEL >= 1

// low_footprint over a sub-allocator whose regions never merge: each
// request of 2 MiB or more gets a region of its own, listed when wholly free.
std::unique_ptr<Allocator> SeparateRegions(const char* name) {
  Allocator::Options o;
  EXPECT_TRUE(ApplyAllocatorPreset(o, "low_footprint").ok());
  o.allow_retry_on_failure = false;
  VirtualSubAllocator::Options no_merge;
  no_merge.supports_coalescing = false;
  no_merge.gap_bytes = kMinAllocationSize;
  return std::make_unique<Allocator>(
      std::make_unique<VirtualSubAllocator>(size_t{1} << 30, no_merge),
      /*total_memory=*/size_t{256} << 20, name, o);
}

#if BFC_CHECK_LEVEL == 1

// A level-1 build rises to level 2 when the environment says
// BFC_CHECK_LEVEL=2 (how CI runs every test at level 2 without a second
// build). The variable is read once per process, so each side runs in a
// freshly started child ("threadsafe" re-executes the test binary), with the
// variable set before the allocator's first call.

// A pooled region left wholly free but missing from the free-region list: no
// level-1 check looks there, and Validate does.
void ClearStatsOverAnUnlistedFreeRegion(const char* level) {
  setenv("BFC_CHECK_LEVEL", level, /*overwrite=*/1);
  std::unique_ptr<Allocator> owned = SeparateRegions("env");
  Allocator& a = *owned;
  void* x = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  void* y = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  ASSERT_TRUE(x != nullptr && y != nullptr);
  a.DeallocateRaw(x);
  AllocatorTestPeer peer(a);
  peer.UnlinkFreeRegion(peer.HandleOf(x));
  a.ClearStats();
  // Put back, so that the destructor finds a consistent allocator.
  peer.LinkFreeRegion(peer.HandleOf(x));
  a.DeallocateRaw(y);
}

TEST(CheckLadderDeathTest, TheEnvironmentRaisesLevelOneToTwo) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      ClearStatsOverAnUnlistedFreeRegion("2"),
      "bfc: check failed at .*: Validate\\(\\) after ClearStats: .*fully "
      "free but missing "
      "from the free-region list");
  // Without it (or with 0 or 1) the same call goes through unchecked.
  for (const char* level : {"1", "0", ""}) {
    EXPECT_EXIT(
        {
          ClearStatsOverAnUnlistedFreeRegion(level);
          std::exit(7);
        },
        ::testing::ExitedWithCode(7), "")
        << "BFC_CHECK_LEVEL=" << level;
  }
  // Anything else is named once and ignored.
  EXPECT_EXIT(
      {
        ClearStatsOverAnUnlistedFreeRegion("3");
        std::exit(7);
      },
      ::testing::ExitedWithCode(7),
      "bfc: BFC_CHECK_LEVEL in the environment is '3', not 0, 1 or 2; "
      "ignored");
}

#endif  // BFC_CHECK_LEVEL == 1

#if BFC_CHECK_LEVEL == 0

TEST(CheckLadderTest, FailedChecksCompileToNothing) {
  BFC_DCHECK(1 + 1 == 3);
  BFC_DCHECK_EQ(1 + 1, 3);
  SUCCEED();
}

#endif  // BFC_CHECK_LEVEL == 0

// release_before_extend keeps the fully free regions in a list, least
// recently freed first; Validate checks that it holds exactly them.
TEST(AllocatorFreeRegionListTest, ValidateChecksTheListOfFullyFreeRegions) {
  std::unique_ptr<Allocator> owned = SeparateRegions("test");
  Allocator& a = *owned;
  // A 32 MiB peak pool, given back; then three exact regions of which the
  // first two become fully free, x before y.
  void* t = a.AllocateRaw(kMinAllocationSize, size_t{32} << 20);
  ASSERT_NE(t, nullptr);
  a.DeallocateRaw(t);
  ASSERT_EQ(a.ReleaseFreeRegions(), size_t{32} << 20);
  void* x = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  void* y = a.AllocateRaw(kMinAllocationSize, size_t{8} << 20);
  void* z = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  ASSERT_TRUE(x != nullptr && y != nullptr && z != nullptr);
  a.DeallocateRaw(x);
  a.DeallocateRaw(y);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  AllocatorTestPeer peer(a);
  const ChunkHandle hx = peer.HandleOf(x);
  const ChunkHandle hy = peer.HandleOf(y);
  const ChunkHandle hz = peer.HandleOf(z);
  EXPECT_EQ(peer.free_region_head(), hx);
  EXPECT_EQ(peer.free_region_tail(), hy);
  const uintptr_t ya = reinterpret_cast<uintptr_t>(y);
  auto error = [](absl::string_view what) {
    return absl::InternalError(absl::StrCat("Allocator 'test': ", what));
  };

  // A fully free region missing from the list.
  peer.UnlinkFreeRegion(hy);
  EXPECT_EQ(a.Validate(),
            error(absl::StrFormat("region 1 [0x%x, 0x%x) is fully free but "
                                  "missing from the free-region list",
                                  ya, ya + (size_t{8} << 20))));
  peer.LinkFreeRegion(hy);
  EXPECT_TRUE(a.Validate().ok());

  // A region in use on it.
  peer.LinkFreeRegion(hz);
  EXPECT_EQ(a.Validate(),
            error(absl::StrCat("the free-region list is longer than the 2 "
                               "fully free pooled regions; entry 2 is handle ",
                               hz)));
  peer.UnlinkFreeRegion(hz);
  EXPECT_TRUE(a.Validate().ok());

  // A broken back link.
  peer.free_region_prev(hy) = hy;
  EXPECT_EQ(a.Validate(), error(absl::StrCat(
                              "free-region list entry 1 (handle ", hy,
                              ") is not linked back to its predecessor ", hx)));
  peer.free_region_prev(hy) = hx;

  // A count that disagrees with the list.
  ++peer.num_free_region_links();
  EXPECT_EQ(a.Validate(),
            error(absl::StrCat("the free-region list has 2 entries ending at ",
                               hy, "; expected 2 ending at the tail ", hy,
                               " (count 3)")));
  --peer.num_free_region_links();
  EXPECT_TRUE(a.Validate().ok());

  // A request that fits no free region and would take the pool past its
  // 32 MiB peak gives back the least recently freed region first, and only
  // as many as needed: x (16 - 4 + 20 = 32), not y.
  void* w = a.AllocateRaw(kMinAllocationSize, size_t{20} << 20);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(*a.GetStats()->pool_bytes, int64_t{32} << 20);
  EXPECT_EQ(a.GetStats()->num_regions_released, 2);  // t and x
  EXPECT_EQ(peer.free_region_head(), hy);
  EXPECT_EQ(peer.free_region_tail(), hy);
  EXPECT_TRUE(a.Validate().ok());
  a.DeallocateRaw(w);
  a.DeallocateRaw(z);
  EXPECT_TRUE(a.Validate().ok());
}

// Over a coalescing sub-allocator, memory appended to a fully free region
// joins it: the region leaves the list while it has a chunk in use and is on
// it again, once, when it is fully free.
TEST(AllocatorFreeRegionListTest, AJoinedRegionIsListedOnceWhenFullyFree) {
  Allocator::Options o;
  ASSERT_TRUE(ApplyAllocatorPreset(o, "low_footprint").ok());
  o.allow_retry_on_failure = false;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              /*total_memory=*/size_t{256} << 20, "test", o);
  AllocatorTestPeer peer(a);
  // A 32 MiB peak, given back; below it nothing is released: 6 MiB more
  // are appended to x's fully free region and the joined free chunk is
  // split for the request.
  void* t = a.AllocateRaw(kMinAllocationSize, size_t{32} << 20);
  ASSERT_NE(t, nullptr);
  a.DeallocateRaw(t);
  ASSERT_EQ(a.ReleaseFreeRegions(), size_t{32} << 20);
  void* x = a.AllocateRaw(kMinAllocationSize, size_t{4} << 20);
  ASSERT_NE(x, nullptr);
  a.DeallocateRaw(x);
  EXPECT_EQ(peer.free_region_head(), peer.HandleOf(x));
  void* y = a.AllocateRaw(kMinAllocationSize, size_t{6} << 20);
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(peer.region_manager().regions().size(), 1u);
  EXPECT_EQ(peer.num_free_region_links(), 0u);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  a.DeallocateRaw(y);
  EXPECT_EQ(peer.num_free_region_links(), 1u);
  EXPECT_EQ(peer.free_region_head(),
            peer.HandleOf(peer.region_manager().regions()[0].ptr()));
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
}

// Every mutating public call ends with Validate() at level 2 (compiled or
// raised by the environment): a corruption (here, of bytes_in_use) aborts
// the next call, and the message says which.
TEST_F(AllocatorValidateTest, EveryMutatingCallValidatesAtLevel2) {
  if (!internal::ValidateEveryCall()) GTEST_SKIP() << "check level below 2";
  const struct {
    const char* where;
    std::function<void(Allocator&, void* p2)> call;
  } calls[] = {
      {"AllocateRaw", [](Allocator& a, void*) { a.AllocateRaw(256, 100); }},
      {"Deallocate", [](Allocator& a, void* p) { a.DeallocateRaw(p); }},
      {"ClearStats", [](Allocator& a, void*) { (void)a.ClearStats(); }},
      {"ResetPeakStats", [](Allocator& a, void*) { a.ResetPeakStats(); }},
      {"ReleaseFreeRegions",
       [](Allocator& a, void*) { (void)a.ReleaseFreeRegions(); }},
      {"AllocateRaw \\(invalid request\\)",
       [](Allocator& a, void*) { a.AllocateRaw(3, 100); }},
      {"Allocate \\(invalid request\\)",
       [](Allocator& a, void*) { (void)a.Allocate(100, 3); }},
      {"DeallocateRaw \\(invalid pointer\\)",
       [](Allocator& a, void* p) {
         a.DeallocateRaw(static_cast<char*>(p) + 8);
       }},
      {"Deallocate \\(invalid pointer\\)",
       [](Allocator& a, void* p) {
         (void)a.Deallocate(static_cast<char*>(p) + 8);
       }},
      {"AllocateRaw \\(out of memory\\)",
       [](Allocator& a, void*) { a.AllocateRaw(256, size_t{1} << 30); }},
  };
  for (const auto& c : calls) {
    EXPECT_DEATH(
        {
          peer_->stats().bytes_in_use += 256;
          c.call(*alloc_, p2_);
        },
        absl::StrCat("bfc: check failed at .*allocator_validate\\.cc:[0-9]+: "
                     "Validate\\(\\) after ",
                     c.where,
                     ": Allocator 'test': bytes_in_use is [0-9]+ but in-use "
                     "chunks sum to [0-9]+\n"))
        << c.where;
  }
}

// Below level 2 nothing validates on its own: the corruption shows only when
// Validate() is asked.
TEST_F(AllocatorValidateTest, NoAutomaticValidationBelowLevel2) {
  if (internal::ValidateEveryCall()) GTEST_SKIP() << "check level 2";
  peer_->stats().bytes_in_use += 256;
  (void)alloc_->ClearStats();
  alloc_->ResetPeakStats();
  EXPECT_FALSE(alloc_->Validate().ok());
  peer_->stats().bytes_in_use -= 256;
  alloc_->ResetPeakStats();
}

// --- State beyond the chunks: streams, the table's columns, accounts -------
// Each corrupts one thing the allocator relies on, expects Validate to name
// it, and undoes it.

absl::Status Named(absl::string_view name, absl::string_view what) {
  return absl::InternalError(absl::StrCat("Allocator '", name, "'", what));
}

AccountOptions RootOptions() {
  AccountOptions o;
  o.name = "root";
  return o;
}

// A chunk freed on stream A while A and B (RecordStreamUse) still use it:
// its fence is a multi-fence naming both streams' points.
struct FencedRig {
  FencedRig() {
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    alloc = std::make_unique<Allocator>(
        std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
        size_t{64} << 20, "streams", o);
    auto ops = std::make_unique<testing::FakeStreamOps>();
    dev = ops.get();
    EXPECT_TRUE(alloc->SetStreamOps(std::move(ops)).ok());
    absl::StatusOr<void*> q = alloc->AllocateOnStream(kA, 4096);
    EXPECT_TRUE(q.ok());
    p = *q;
    EXPECT_TRUE(alloc->RecordStreamUse(p, kB).ok());
    dev->Hold(kA);
    dev->Hold(kB);
    dev->Launch(kA);
    dev->Launch(kB);
    EXPECT_TRUE(alloc->DeallocateOnStream(p, kA).ok());
    EXPECT_TRUE(alloc->Validate().ok());
  }
  ~FencedRig() {
    dev->Release(kA);
    dev->Release(kB);
    dev->CompleteAll();
  }
  // The multi-fence's index.
  size_t MultiFence(AllocatorTestPeer& peer) const {
    for (size_t i = 0; i < peer.num_multi_fences(); ++i) {
      if (peer.multi_fence_refs(i) > 0) return i;
    }
    ADD_FAILURE() << "no multi-fence";
    return 0;
  }

  static inline const StreamId kA = reinterpret_cast<StreamId>(uintptr_t{1});
  static inline const StreamId kB = reinterpret_cast<StreamId>(uintptr_t{2});
  std::unique_ptr<Allocator> alloc;
  testing::FakeStreamOps* dev = nullptr;
  void* p = nullptr;
};

TEST(AllocatorValidateStateTest, TheFencedChunkListHoldsEachChunkOnce) {
  FencedRig r;
  AllocatorTestPeer peer(*r.alloc);
  std::vector<ChunkHandle>& list = peer.fenced_chunks();
  std::vector<bool>& marks = peer.fence_listed();
  ASSERT_FALSE(list.empty());
  // A duplicate, balanced by a marked chunk the list lacks: the counts
  // agree, but MergeDeferred would never visit the missing one.
  ChunkHandle unlisted = 0;
  while (unlisted < marks.size() && marks[unlisted]) ++unlisted;
  if (unlisted == marks.size()) marks.push_back(false);
  const ChunkHandle twice = list[0];
  list.push_back(twice);
  marks[unlisted] = true;
  EXPECT_EQ(r.alloc->Validate(),
            Named("streams", absl::StrCat(": fenced-chunk list holds chunk ",
                                          twice, " twice")));
  list.pop_back();
  marks[unlisted] = false;
  EXPECT_TRUE(r.alloc->Validate().ok()) << r.alloc->Validate();
}

TEST(AllocatorValidateStateTest, MultiFencesAreWellFormedAndFreedOnce) {
  FencedRig r;
  AllocatorTestPeer peer(*r.alloc);
  const size_t m = r.MultiFence(peer);
  auto& parts = peer.multi_fence_parts(m);
  ASSERT_EQ(parts.size(), 2u);

  // One part: it would be a plain fence.
  const auto last = parts.back();
  parts.pop_back();
  EXPECT_EQ(r.alloc->Validate(),
            Named("streams", absl::StrCat(": multi-fence ", m,
                                          " has 1 parts; it needs two or "
                                          "more")));
  parts.push_back(last);
  // Out of slot order.
  std::swap(parts[0], parts[1]);
  EXPECT_EQ(r.alloc->Validate(),
            Named("streams", absl::StrCat(": multi-fence ", m,
                                          ": its parts are not one per stream "
                                          "in slot order")));
  std::swap(parts[0], parts[1]);
  // A held record on the free list: the next fence made would overwrite it.
  peer.free_multi_fences().push_back(static_cast<uint32_t>(m));
  EXPECT_EQ(r.alloc->Validate(),
            Named("streams",
                  absl::StrCat(": free multi-fence list entry ", m,
                               " is out of range, listed twice, held or not "
                               "cleared")));
  peer.free_multi_fences().pop_back();
  EXPECT_TRUE(r.alloc->Validate().ok()) << r.alloc->Validate();
}

TEST(AllocatorValidateStateTest, AStaleStreamHandleIsCaught) {
  FencedRig r;
  AllocatorTestPeer peer(*r.alloc);
  auto& slots = peer.stream_slots();
  ASSERT_EQ(slots.count(FencedRig::kA), 1u);
  const uint32_t slot_b = slots.at(FencedRig::kB);
  // kA's handle now names B's slot (and B's handle still does).
  const uint32_t slot_a = slots.at(FencedRig::kA);
  slots[FencedRig::kA] = slot_b;
  EXPECT_FALSE(r.alloc->Validate().ok());
  slots[FencedRig::kA] = slot_a;
  // A handle nobody registered, naming a live slot (B forgotten first, so
  // there are no more handles than slots).
  ASSERT_TRUE(r.alloc->ForgetStream(FencedRig::kB).ok());
  ASSERT_TRUE(r.alloc->Validate().ok()) << r.alloc->Validate();
  const StreamId stray = reinterpret_cast<StreamId>(uintptr_t{0x63});
  slots[stray] = slot_a;
  EXPECT_EQ(
      r.alloc->Validate(),
      Named("streams", absl::StrCat(": stream handle 0x63 maps to slot ",
                                    slot_a, ", which is not that stream's")));
  slots.erase(stray);
  EXPECT_TRUE(r.alloc->Validate().ok()) << r.alloc->Validate();
}

TEST_F(AllocatorValidateTest, ForcedTimestampMergesAreOffBetweenCalls) {
  peer_->force_timestamp_merge() = true;
  EXPECT_EQ(alloc_->Validate(),
            Error("forced merges of timestamped chunks are still on"));
  peer_->force_timestamp_merge() = false;
}

TEST(AllocatorValidateStateTest, TheChunkColumnsCoverEverySlot) {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.release_before_extend = true;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{64} << 20, "columns", o);
  absl::StatusOr<std::shared_ptr<Account>> root =
      Account::CreateRoot(&a, RootOptions());
  ASSERT_TRUE(root.ok()) << root.status();
  absl::StatusOr<void*> p = (*root)->Allocate(4096);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  AllocatorTestPeer peer(a);
  const size_t bound = peer.handle_bound();
  ASSERT_GT(bound, 0u);

  std::vector<uint32_t>& tags = peer.chunk_account();
  const std::vector<uint32_t> saved = tags;
  tags.resize(bound - 1);
  EXPECT_EQ(a.Validate(),
            Named("columns", absl::StrCat(": account tags for ", bound - 1,
                                          " chunk slots of ", bound)));
  tags = saved;
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  ASSERT_TRUE((*root)->Deallocate(*p).ok());
}

TEST(AllocatorValidateStateTest, TheAccountRegistryIsConsistent) {
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  Allocator a(std::make_unique<VirtualSubAllocator>(size_t{1} << 30),
              size_t{64} << 20, "accounts", o);
  absl::StatusOr<std::shared_ptr<Account>> root =
      Account::CreateRoot(&a, RootOptions());
  ASSERT_TRUE(root.ok()) << root.status();
  AccountOptions kid;
  kid.name = "kid";
  kid.reservation_bytes = 1 << 20;
  absl::StatusOr<std::shared_ptr<Account>> child = (*root)->CreateChild(kid);
  ASSERT_TRUE(child.ok()) << child.status();
  // A closed child that goes once its handle does: its state is kept here.
  AccountOptions gone_options;
  gone_options.name = "gone";
  absl::StatusOr<std::shared_ptr<Account>> gone =
      (*root)->CreateChild(gone_options);
  ASSERT_TRUE(gone.ok()) << gone.status();
  AccountOptions idle_options;
  idle_options.name = "idle";
  absl::StatusOr<std::shared_ptr<Account>> idle =
      (*root)->CreateChild(idle_options);
  ASSERT_TRUE(idle.ok()) << idle.status();
  AllocatorTestPeer peer(a);
  std::shared_ptr<internal::AccountState> gone_state =
      peer.account("root/gone");
  ASSERT_NE(gone_state, nullptr);
  const uint32_t gone_id = gone_state->id;
  gone->reset();
  ASSERT_EQ(peer.account("root/gone"), nullptr);
  ASSERT_TRUE(a.Validate().ok()) << a.Validate();
  std::shared_ptr<internal::AccountState> r = peer.account("root");
  std::shared_ptr<internal::AccountState> c = peer.account("root/kid");
  ASSERT_TRUE(r != nullptr && c != nullptr);

  // A peak below the bytes in use.
  const int64_t peak = c->peak.load();
  c->peak.store(c->used.load() - 1);
  EXPECT_EQ(a.Validate(),
            Named("accounts",
                  absl::StrCat(" accounts: account 'root/kid' has a peak of ",
                               c->used.load() - 1, " bytes, below its ",
                               c->used.load(), " bytes in use")));
  c->peak.store(peak);

  // Closed, yet still reserving (with the parent's use counting it).
  c->closed = true;
  r->open_child_names.erase("kid");
  EXPECT_EQ(a.Validate(), Named("accounts",
                                " accounts: account 'root/kid' is closed but "
                                "still reserves 1048576 bytes of its parent"));
  c->closed = false;
  r->open_child_names.insert("kid");

  // A forgotten account still in its parent's list (its state may be gone).
  gone_state->index_in_parent = r->children.size();
  r->children.push_back(gone_state.get());
  EXPECT_EQ(a.Validate(), Named("accounts",
                                " accounts: the accounts list 3 children, but "
                                "2 registered accounts have a parent"));
  r->children.pop_back();

  // A registered child missing from its parent's list (one that adds
  // nothing to the parent's use, so only its own side can tell).
  std::shared_ptr<internal::AccountState> i = peer.account("root/idle");
  ASSERT_NE(i, nullptr);
  ASSERT_EQ(r->children.back(), i.get());
  r->children.pop_back();
  r->open_child_names.erase("idle");
  EXPECT_EQ(a.Validate(), Named("accounts",
                                " accounts: account 'root/idle' is not listed "
                                "under its parent 'root'"));
  r->children.push_back(i.get());
  r->open_child_names.insert("idle");

  // An id on the free list that an account holds, and one listed twice.
  std::vector<uint32_t>& free_ids = peer.free_account_ids();
  ASSERT_EQ(free_ids.size(), 1u);
  free_ids.push_back(c->id);
  EXPECT_EQ(a.Validate(),
            Named("accounts", absl::StrCat(" accounts: free account id ", c->id,
                                           " is out of range, in use or "
                                           "listed twice")));
  free_ids.back() = free_ids.front();
  EXPECT_EQ(a.Validate(),
            Named("accounts",
                  absl::StrCat(" accounts: free account id ", free_ids.front(),
                               " is out of range, in use or "
                               "listed twice")));
  // An unused id nobody can have again.
  free_ids.clear();
  EXPECT_EQ(a.Validate(),
            Named("accounts", absl::StrCat(" accounts: account id ", gone_id,
                                           " is unused but not on the free "
                                           "list")));
  free_ids.push_back(gone_id);
  EXPECT_TRUE(a.Validate().ok()) << a.Validate();
  ASSERT_TRUE((*idle)->Close().ok());
  ASSERT_TRUE((*child)->Close().ok());
  ASSERT_TRUE((*root)->Close().ok());
}

}  // namespace
}  // namespace bfc
