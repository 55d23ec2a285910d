// File: tests/allocator_bad_input_test.cc
// Every kind of bad input the error policy in DESIGN.md names, through both
// the TF-style raw calls and the status calls, on allocators with growth on
// and off and coalescing and non-coalescing sub-allocators. After each bad
// call: a clear error (a Status or a logged line and a counter), Validate()
// true, and nothing lost or taken (bytes_in_use, pool_bytes and the
// sub-allocator's journal unchanged). The queries (RequestedSize,
// AllocatedSize, AllocationId) on a pointer that is not a live allocation of
// this allocator answer 0 / 0 / -1, as allocator.h documents.
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/internal/bin.h"
#include "bfc/units.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/fake_sub_allocator.h"

namespace bfc {
namespace {

using ::bfc::testing::FakeSubAllocator;
using ::bfc::testing::LogCapture;
using ::bfc::testing::SubAllocatorJournal;
using ::testing::HasSubstr;

constexpr size_t kLimit = 64 * kMiB;

struct Config {
  bool allow_growth;
  bool coalescing;
  const char* name;
};

class BadInputTest : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    Allocator::Options o;
    o.allow_growth = GetParam().allow_growth;
    o.allow_retry_on_failure = false;
    FakeSubAllocator::Options fake;
    fake.supports_coalescing = GetParam().coalescing;
    journal_ = std::make_shared<SubAllocatorJournal>();
    alloc_ = std::make_unique<Allocator>(
        std::make_unique<FakeSubAllocator>(fake, journal_), kLimit, "bad", o);
    other_ = std::make_unique<Allocator>(
        std::make_unique<FakeSubAllocator>(fake), kLimit, "other", o);
    // Some state to protect: live chunks, a free chunk between live ones, a
    // free tail.
    live_ = alloc_->AllocateRaw(256, 4096);
    freed_ = alloc_->AllocateRaw(256, 8192);
    live2_ = alloc_->AllocateRaw(256, 1000);
    ASSERT_NE(live_, nullptr);
    ASSERT_NE(freed_, nullptr);
    ASSERT_NE(live2_, nullptr);
    alloc_->DeallocateRaw(freed_);
    other_live_ = other_->AllocateRaw(256, 4096);
    ASSERT_NE(other_live_, nullptr);
    ASSERT_FALSE(journal_->alloc_results.empty());
    region_base_ = static_cast<char*>(journal_->alloc_results[0]);
    region_size_ = journal_->alloc_requests[0];
    Snapshot();
  }

  void TearDown() override {
    if (alloc_ == nullptr) return;
    ExpectUnchanged("TearDown");
    alloc_->DeallocateRaw(live_);
    alloc_->DeallocateRaw(live2_);
    other_->DeallocateRaw(other_live_);
    EXPECT_TRUE(alloc_->Validate().ok());
    EXPECT_EQ(alloc_->GetStats()->bytes_in_use, 0);
  }

  void Snapshot() {
    before_ = *alloc_->GetStats();
    sub_calls_ = journal_->alloc_requests.size();
    sub_frees_ = journal_->frees.size();
  }

  // Nothing lost, nothing taken, every invariant holds.
  void ExpectUnchanged(const std::string& what) {
    SCOPED_TRACE(what);
    const absl::Status v = alloc_->Validate();
    EXPECT_TRUE(v.ok()) << v;
    const AllocatorStats s = *alloc_->GetStats();
    EXPECT_EQ(s.bytes_in_use, before_.bytes_in_use);
    EXPECT_EQ(s.pool_bytes, before_.pool_bytes);
    EXPECT_EQ(s.num_allocs, before_.num_allocs);
    EXPECT_EQ(s.largest_free_block_bytes, before_.largest_free_block_bytes);
    EXPECT_EQ(journal_->alloc_requests.size(), sub_calls_);
    EXPECT_EQ(journal_->frees.size(), sub_frees_);
    // The live allocations are untouched.
    EXPECT_EQ(alloc_->RequestedSize(live_), 4096u);
    EXPECT_EQ(alloc_->RequestedSize(live2_), 1000u);
    EXPECT_EQ(other_->RequestedSize(other_live_), 4096u);
  }

  // The documented answers for a pointer that is not a live allocation.
  void ExpectNoAnswers(const void* p, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(alloc_->RequestedSize(p), 0u);
    EXPECT_EQ(alloc_->AllocatedSize(p), 0u);
    EXPECT_EQ(alloc_->AllocationId(p), -1);
  }

  // Frees `p` through both calls: each is reported, counted, and changes
  // nothing. `message` is in both the log line and the Status.
  void ExpectInvalidFree(void* p, const std::string& what,
                         const std::string& message) {
    SCOPED_TRACE(what);
    ExpectNoAnswers(p, what);
    const int64_t invalid = alloc_->GetStats()->num_invalid_frees;
    {
      LogCapture log;
      alloc_->DeallocateRaw(p);
      EXPECT_TRUE(log.Contains(message, LogSeverity::kError))
          << "no log line with '" << message << "'";
      EXPECT_TRUE(log.Contains("'bad'", LogSeverity::kError));
    }
    EXPECT_EQ(alloc_->GetStats()->num_invalid_frees, invalid + 1);
    ExpectUnchanged(what + " (DeallocateRaw)");
    const absl::Status s = alloc_->Deallocate(p);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
    EXPECT_EQ(alloc_->GetStats()->num_invalid_frees, invalid + 2);
    ExpectUnchanged(what + " (Deallocate)");
    ExpectNoAnswers(p, what);
  }

  // A bad request through both calls: nullptr + a logged error + a counter,
  // and InvalidArgument (or ResourceExhausted for `oom`).
  void ExpectBadRequest(size_t alignment, size_t num_bytes,
                        const std::string& message, bool oom = false) {
    SCOPED_TRACE(::testing::Message()
                 << "alignment " << alignment << " size " << num_bytes);
    const AllocatorStats s0 = *alloc_->GetStats();
    {
      LogCapture log;
      EXPECT_EQ(alloc_->AllocateRaw(alignment, num_bytes), nullptr);
      EXPECT_TRUE(log.Contains(
          message, oom ? LogSeverity::kWarning : LogSeverity::kError))
          << "no log line with '" << message << "'";
    }
    absl::StatusOr<void*> p = alloc_->Allocate(num_bytes, alignment);
    EXPECT_EQ(p.status().code(), oom ? absl::StatusCode::kResourceExhausted
                                     : absl::StatusCode::kInvalidArgument)
        << p.status();
    EXPECT_THAT(std::string(p.status().message()),
                HasSubstr(oom ? "ran out of memory" : message));
    const AllocatorStats s1 = *alloc_->GetStats();
    EXPECT_EQ(s1.num_invalid_requests, s0.num_invalid_requests + (oom ? 0 : 2));
    EXPECT_EQ(s1.num_ooms, s0.num_ooms + (oom ? 2 : 0));
    ExpectUnchanged("bad request");
  }

  std::shared_ptr<SubAllocatorJournal> journal_;
  std::unique_ptr<Allocator> alloc_;
  std::unique_ptr<Allocator> other_;
  void* live_ = nullptr;
  void* freed_ = nullptr;
  void* live2_ = nullptr;
  void* other_live_ = nullptr;
  char* region_base_ = nullptr;
  size_t region_size_ = 0;
  AllocatorStats before_;
  size_t sub_calls_ = 0;
  size_t sub_frees_ = 0;
};

// --- Requests ----------------------------------------------------------------

TEST_P(BadInputTest, ZeroBytes) {
  LogCapture log;
  EXPECT_EQ(alloc_->AllocateRaw(256, 0), nullptr);
  EXPECT_EQ(alloc_->AllocateRaw(3, 0), nullptr);  // zero wins, as in TF
  EXPECT_EQ(log.size(), 0u);  // TF behaviour: not an error for the raw call
  EXPECT_EQ(alloc_->GetStats()->num_invalid_requests, 0);
  absl::StatusOr<void*> p = alloc_->Allocate(0);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("0 bytes"));
  ExpectUnchanged("zero");
}

TEST_P(BadInputTest, SizeMax) {
  ExpectBadRequest(256, SIZE_MAX, "overflows");
  ExpectBadRequest(1, SIZE_MAX, "overflows");
  ExpectBadRequest(4096, SIZE_MAX, "overflows");
}

TEST_P(BadInputTest, RoundingTo256Overflows) {
  // Every size above the largest multiple of 256 overflows when rounded.
  const size_t max_roundable = internal::kMaxRoundableBytes;
  for (size_t n :
       {max_roundable + 1, SIZE_MAX - 254, SIZE_MAX - 100, SIZE_MAX - 1}) {
    ExpectBadRequest(256, n, "overflows");
  }
}

TEST_P(BadInputTest, AlignmentPaddingOverflows) {
  // Representable once rounded, but not once padded for the alignment. The
  // 64 MiB limit lets alignments up to 64 MiB through to the padding check.
  const size_t max_roundable = internal::kMaxRoundableBytes;
  ExpectBadRequest(kMiB, max_roundable, "overflows once padded");
  ExpectBadRequest(512, max_roundable, "overflows once padded");
  ExpectBadRequest(32 * kMiB, SIZE_MAX - 16 * kMiB, "overflows once padded");
}

TEST_P(BadInputTest, AlignmentPaddingOverflowsUnderAHugeLimit) {
  // With no practical limit the alignment check cannot catch 2^40: only the
  // padding arithmetic stands between the request and an overflow.
  auto journal = std::make_shared<SubAllocatorJournal>();
  Allocator::Options o;
  o.allow_retry_on_failure = false;
  o.allow_growth = GetParam().allow_growth;
  Allocator huge(
      std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}, journal),
      SIZE_MAX, "huge", o);
  LogCapture log;
  EXPECT_EQ(huge.AllocateRaw(size_t{1} << 40, SIZE_MAX - (size_t{1} << 39)),
            nullptr);
  EXPECT_EQ(huge.AllocateRaw(size_t{1} << 63, (size_t{3} << 62) + 1), nullptr);
  EXPECT_EQ(huge.Allocate(SIZE_MAX - (size_t{1} << 40), size_t{1} << 41)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(log.Contains("overflows once padded", LogSeverity::kError));
  EXPECT_EQ(huge.GetStats()->num_invalid_requests, 3);
  EXPECT_TRUE(journal->alloc_requests.empty());
  EXPECT_TRUE(huge.Validate().ok());
}

TEST_P(BadInputTest, OverTheLimit) {
  // Representable but larger than the limit: a clean out-of-memory failure
  // without asking the sub-allocator for anything.
  ExpectBadRequest(256, kLimit + 1, "ran out of memory", /*oom=*/true);
  ExpectBadRequest(256, 4 * kLimit, "ran out of memory", /*oom=*/true);
  ExpectBadRequest(256, internal::kMaxRoundableBytes, "ran out of memory",
                   /*oom=*/true);
  // Fits, but not once padded for its alignment.
  ExpectBadRequest(kMiB, kLimit, "ran out of memory", /*oom=*/true);
  // The message's human-readable size is the request's, however large (at
  // 2^63 and above it read "0B").
  ExpectBadRequest(256, size_t{1} << 63,
                   "trying to allocate 8.00EiB (9223372036854775808 bytes",
                   /*oom=*/true);
}

TEST_P(BadInputTest, OverTheLimitDoesNotWaitForARetry) {
  // Waiting for frees cannot help a request that can never fit: with retry
  // on (and a long timeout) it still fails at once.
  Allocator::Options o;
  o.allow_growth = GetParam().allow_growth;
  o.retry_timeout = absl::Seconds(30);
  Allocator a(std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}),
              kLimit, "retry", o);
  LogCapture log;
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(a.AllocateRaw(256, kLimit + 1), nullptr);
  EXPECT_EQ(a.Allocate(4 * kLimit).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(a.GetStats()->num_ooms, 2);
  EXPECT_TRUE(a.Validate().ok());
}

TEST_P(BadInputTest, AlignmentNotAPowerOfTwo) {
  for (size_t alignment : {size_t{0}, size_t{3}, size_t{48}, size_t{257},
                           size_t{768}, (size_t{1} << 40) + 1, SIZE_MAX}) {
    ExpectBadRequest(alignment, 1024, "not a power of two");
  }
}

TEST_P(BadInputTest, AlignmentLargerThanTheLimit) {
  ExpectBadRequest(size_t{1} << 40, 1024, "exceeds the allocator's limit");
  ExpectBadRequest(size_t{1} << 63, 1, "exceeds the allocator's limit");
  ExpectBadRequest(2 * kLimit, 1, "exceeds the allocator's limit");
}

// --- Frees -------------------------------------------------------------------

TEST_P(BadInputTest, NullptrIsANoOp) {
  LogCapture log;
  alloc_->DeallocateRaw(nullptr);
  EXPECT_TRUE(alloc_->Deallocate(nullptr).ok());
  EXPECT_EQ(log.size(), 0u);
  EXPECT_EQ(alloc_->GetStats()->num_invalid_frees, 0);
  ExpectNoAnswers(nullptr, "nullptr");
  ExpectUnchanged("nullptr");
}

TEST_P(BadInputTest, StackAddress) {
  int local = 0;
  ExpectInvalidFree(&local, "stack", "not allocated by this allocator");
}

TEST_P(BadInputTest, MallocHeapAddress) {
  void* heap = std::malloc(64);
  ASSERT_NE(heap, nullptr);
  ExpectInvalidFree(heap, "malloc", "not allocated by this allocator");
  std::free(heap);
}

TEST_P(BadInputTest, InsideALiveChunk) {
  char* p = static_cast<char*>(live_);
  for (size_t off :
       {size_t{1}, size_t{8}, size_t{255}, size_t{256}, size_t{4095}}) {
    ExpectInvalidFree(p + off, "interior live " + std::to_string(off),
                      "bytes into a live chunk");
  }
}

TEST_P(BadInputTest, InsideAFreeChunk) {
  char* q = static_cast<char*>(freed_);
  ExpectInvalidFree(q + 256, "interior free", "bytes into a free chunk");
  ExpectInvalidFree(q + 1, "interior free +1", "bytes into a free chunk");
  // The free tail of the region, near its end.
  ExpectInvalidFree(region_base_ + region_size_ - 256, "free tail",
                    "bytes into a free chunk");
  ExpectInvalidFree(region_base_ + region_size_ - 1, "last byte",
                    "bytes into a free chunk");
}

TEST_P(BadInputTest, OnePastARegion) {
  // Without coalescing regions may still be adjacent in address space (the
  // fake hands out contiguous blocks), but only one exists here.
  ASSERT_EQ(*alloc_->GetStats()->pool_bytes,
            static_cast<int64_t>(region_size_));
  ExpectInvalidFree(region_base_ + region_size_, "one past",
                    "not allocated by this allocator");
  ExpectInvalidFree(region_base_ - 256, "one chunk before",
                    "not allocated by this allocator");
  ExpectInvalidFree(region_base_ - 1, "one byte before",
                    "not allocated by this allocator");
}

TEST_P(BadInputTest, TheStartOfAFreeChunk) {
  // `freed_` was given back in SetUp: freeing it again is a double free.
  ExpectInvalidFree(freed_, "freed", "already freed");
}

TEST_P(BadInputTest, DoubleFree) {
  void* p = alloc_->AllocateRaw(256, 3000);
  ASSERT_NE(p, nullptr);
  const int64_t id = alloc_->AllocationId(p);
  EXPECT_GT(id, 0);
  alloc_->DeallocateRaw(p);
  Snapshot();
  ExpectInvalidFree(p, "double", "already freed");
  // Still double after a neighbour merges with it and a new allocation
  // takes a different place.
  void* r = alloc_->AllocateRaw(256, 40000);
  ASSERT_NE(r, nullptr);
  if (r != p) {
    Snapshot();
    ExpectInvalidFree(p, "double after reuse elsewhere", "");
  }
  alloc_->DeallocateRaw(r);
  Snapshot();
}

TEST_P(BadInputTest, ReusedAddressIsANewAllocation) {
  // A freed pointer whose address is handed out again is live again: the
  // queries describe the new allocation (a new id), not the old one.
  void* p = alloc_->AllocateRaw(256, 3000);
  const int64_t id = alloc_->AllocationId(p);
  alloc_->DeallocateRaw(p);
  void* q = alloc_->AllocateRaw(256, 3000);
  ASSERT_EQ(q, p);  // best fit, lowest address: the same place
  EXPECT_GT(alloc_->AllocationId(q), id);
  alloc_->DeallocateRaw(q);
  Snapshot();
}

TEST_P(BadInputTest, AnotherAllocatorsPointer) {
  ExpectInvalidFree(other_live_, "other allocator",
                    "not allocated by this allocator");
  // And the other allocator's state is untouched.
  EXPECT_EQ(other_->AllocatedSize(other_live_), 4096u);
  EXPECT_TRUE(other_->Validate().ok());
  EXPECT_EQ(other_->GetStats()->num_invalid_frees, 0);
}

TEST_P(BadInputTest, WildAddresses) {
  for (uintptr_t a : {uintptr_t{1}, uintptr_t{256}, uintptr_t{4096},
                      std::numeric_limits<uintptr_t>::max() - 255,
                      std::numeric_limits<uintptr_t>::max()}) {
    ExpectInvalidFree(reinterpret_cast<void*>(a), "wild",
                      "not allocated by this allocator");
  }
}

TEST_P(BadInputTest, QueriesOnLivePointersStillAnswer) {
  EXPECT_EQ(alloc_->RequestedSize(live_), 4096u);
  EXPECT_EQ(alloc_->AllocatedSize(live_), 4096u);
  EXPECT_GT(alloc_->AllocationId(live_), 0);
  EXPECT_EQ(alloc_->AllocatedSize(live2_), 1024u);
  EXPECT_NE(alloc_->AllocationId(live_), alloc_->AllocationId(live2_));
}

INSTANTIATE_TEST_SUITE_P(
    Configs, BadInputTest,
    ::testing::Values(Config{true, false, "GrowthNonCoalescing"},
                      Config{true, true, "GrowthCoalescing"},
                      Config{false, false, "FixedNonCoalescing"},
                      Config{false, true, "FixedCoalescing"}),
    [](const ::testing::TestParamInfo<Config>& info) {
      return std::string(info.param.name);
    });

// --- abort_on_invalid_input
// ---------------------------------------------------

class AbortOnInvalidInputDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Allocator::Options o;
    o.allow_retry_on_failure = false;
    o.abort_on_invalid_input = true;
    alloc_ = std::make_unique<Allocator>(
        std::make_unique<FakeSubAllocator>(FakeSubAllocator::Options{}), kLimit,
        "abort", o);
    live_ = alloc_->AllocateRaw(256, 4096);
    ASSERT_NE(live_, nullptr);
  }
  void TearDown() override { alloc_->DeallocateRaw(live_); }

  std::unique_ptr<Allocator> alloc_;
  void* live_ = nullptr;
};

TEST_F(AbortOnInvalidInputDeathTest, InvalidFreesAbort) {
  int local = 0;
  EXPECT_DEATH(alloc_->DeallocateRaw(&local), "abort_on_invalid_input");
  EXPECT_DEATH(alloc_->DeallocateRaw(static_cast<char*>(live_) + 256),
               "bytes into a live chunk");
  void* p = alloc_->AllocateRaw(256, 1000);
  alloc_->DeallocateRaw(p);
  EXPECT_DEATH(alloc_->DeallocateRaw(p), "already freed");
}

TEST_F(AbortOnInvalidInputDeathTest, InvalidRequestsAbort) {
  EXPECT_DEATH(alloc_->AllocateRaw(3, 1024), "not a power of two");
  EXPECT_DEATH(alloc_->AllocateRaw(256, SIZE_MAX), "overflows");
}

TEST_F(AbortOnInvalidInputDeathTest, ValidCallsAndNullptrDoNotAbort) {
  alloc_->DeallocateRaw(nullptr);
  EXPECT_EQ(alloc_->AllocateRaw(256, 0), nullptr);  // TF: not an error
  // Out of memory is not bad input.
  EXPECT_EQ(alloc_->AllocateRaw(256, 2 * kLimit), nullptr);
  void* p = alloc_->AllocateRaw(256, 1000);
  alloc_->DeallocateRaw(p);
  EXPECT_TRUE(alloc_->Validate().ok());
}

TEST_F(AbortOnInvalidInputDeathTest, StatusCallsReturnTheErrorInstead) {
  // The status calls already hand the caller an error to act on; they do
  // not abort.
  int local = 0;
  EXPECT_EQ(alloc_->Deallocate(&local).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc_->Allocate(1024, 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(alloc_->GetStats()->num_invalid_frees, 1);
  EXPECT_TRUE(alloc_->Validate().ok());
}

TEST(BadInputDefaultsTest, DefaultIsReportAndContinue) {
  EXPECT_FALSE(Allocator::Options().abort_on_invalid_input);
}

TEST(BadInputNoSubAllocatorTest, NullSubAllocatorFailsEveryAllocation) {
  LogCapture log;
  Allocator a(nullptr, kLimit, "none");
  EXPECT_TRUE(log.Contains("no sub-allocator", LogSeverity::kError));
  AllocationAttributes no_retry;
  no_retry.retry_on_failure = false;
  EXPECT_EQ(a.AllocateRaw(256, 1024, no_retry), nullptr);
  EXPECT_EQ(a.ReleaseFreeRegions(), 0u);
  EXPECT_TRUE(a.Validate().ok());
  int local = 0;
  a.DeallocateRaw(&local);
  EXPECT_EQ(a.GetStats()->num_invalid_frees, 1);
}

}  // namespace
}  // namespace bfc
