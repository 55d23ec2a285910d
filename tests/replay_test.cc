// Tests for bfc/replay/replay.h: counting, failed allocations and their skipped
// frees, callbacks, allocations left live, repeated runs and inconsistent
// compiled traces.
#include "bfc/replay/replay.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "bfc/allocator.h"
#include "bfc/replay/trace.h"
#include "bfc/virtual_sub_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;

CompiledTrace Compile(const std::string& rows) {
  absl::StatusOr<Trace> t =
      ParseTrace("Thread,Time,Action,Pointer,Size,Stream\n" + rows, "t");
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return CompiledTrace();
  absl::StatusOr<CompiledTrace> c = CompileTrace(*t);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : CompiledTrace();
}

// `*base`, when given, gets the start of the sub-allocator's address range:
// two allocators' placements compare as offsets from it (each reserves its
// own range, wherever the kernel puts it).
std::unique_ptr<Allocator> MakeAllocator(size_t limit,
                                         uintptr_t* base = nullptr) {
  Allocator::Options options;
  options.allow_growth = false;
  options.allow_retry_on_failure = false;
  auto sub = std::make_unique<VirtualSubAllocator>(size_t{1} << 30);
  if (base != nullptr) *base = reinterpret_cast<uintptr_t>(sub->base());
  return std::make_unique<Allocator>(std::move(sub), limit, "replay_test",
                                     options);
}

// The trace's Stream column: compiled into a stream table (0 first), and
// replayed on those streams only with ReplayOptions::streams. Memory freed on
// stream 7 goes to stream 9 once the (simulated) device says 7's work is
// done: one event recorded, one query, no wait; the placement is the one
// stream's.
TEST(ReplayTest, StreamsAreCompiledAndReplayedWhenAsked) {
  const std::string rows =
      "1,0,allocate,0xa,1000,7\n"
      "1,0,free,0xa,1000,7\n"
      "1,0,allocate,0xb,1000,9\n"
      "1,0,free,0xb,1000,9\n";
  CompiledTrace c = Compile(rows);
  EXPECT_EQ(c.streams, (std::vector<uint64_t>{0, 7, 9}));
  ASSERT_EQ(c.ops.size(), 4u);
  EXPECT_EQ(c.ops[0].stream, 1);
  EXPECT_EQ(c.ops[2].stream, 2);

  // Offsets into each allocator's own range: comparing the pointers of two
  // ranges reserved one after the other held only while the kernel happened
  // to put the second where the first had been.
  std::vector<uintptr_t> one_stream, streams;
  for (bool with_streams : {false, true}) {
    uintptr_t base = 0;
    std::unique_ptr<Allocator> a = MakeAllocator(1 << 20, &base);
    ASSERT_NE(base, 0u);
    ReplayOptions options;
    options.streams = with_streams;
    std::vector<uintptr_t>& got = with_streams ? streams : one_stream;
    options.on_allocate = [&got, base](const ReplayOp&, void* p) {
      got.push_back(reinterpret_cast<uintptr_t>(p) - base);
    };
    if (with_streams) {
      ASSERT_TRUE(a->SetStreamOps(MakeCompletedWorkStreamOps()).ok());
    }
    absl::StatusOr<ReplaySummary> s = ReplayTrace(c, *a, options);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->failures, 0u);
    if (with_streams) {
      EXPECT_EQ(s->trace_streams, 3u);
      EXPECT_EQ(s->stream_stats.streams, 3);  // slot 0 is the implicit one
      EXPECT_EQ(s->stream_stats.events_recorded, 1);
      EXPECT_GE(s->stream_stats.event_queries, 1);
      EXPECT_EQ(s->stream_stats.waits_inserted, 0);
      // The last free, on 9: nobody has looked since (the whole region,
      // merged with it, waits with it).
      EXPECT_EQ(s->stream_stats.bytes_pending, 1 << 20);
    } else {
      EXPECT_EQ(s->trace_streams, 0u);
      EXPECT_EQ(s->stream_stats.events_recorded, 0);
    }
    EXPECT_TRUE(a->Validate().ok());
  }
  EXPECT_EQ(streams, one_stream);
}

// A hand-made trace naming a stream outside its table is refused.
TEST(ReplayTest, AStreamOutsideTheTableIsRefused) {
  CompiledTrace bad;
  bad.name = "bad";
  bad.num_slots = 1;
  bad.ops = {ReplayOp{ReplayOp::Kind::kAllocate, 3, 0, 100, 0}};
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  absl::StatusOr<ReplaySummary> s = ReplayTrace(bad, *a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("names stream 3"));
}

TEST(ReplayTest, CountsAndPeaks) {
  CompiledTrace c = Compile(
      "1,0,allocate,0xa,1000,0\n"
      "1,0,allocate,0xb,3000,0\n"
      "1,0,free,0xa,1000,0\n"
      "1,0,allocate,0xc,500,0\n"
      "1,0,free,0xb,3000,0\n"
      "1,0,free,0xc,500,0\n");
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  absl::StatusOr<ReplaySummary> s = ReplayTrace(c, *a);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->trace_name, "t");
  EXPECT_EQ(s->events, 6u);
  EXPECT_EQ(s->ops, 6u);
  EXPECT_EQ(s->allocations, 3u);
  EXPECT_EQ(s->frees, 3u);
  EXPECT_EQ(s->failures, 0u);
  EXPECT_EQ(s->skipped_frees, 0u);
  EXPECT_EQ(s->live_at_end, 0u);
  EXPECT_EQ(s->peak_live_bytes, 4000u);
  EXPECT_EQ(s->peak_pool_bytes, 1 << 20);  // no growth: the whole limit
  EXPECT_EQ(s->regions, 1);
  EXPECT_GE(s->peak_bytes_in_use, 4096);
  EXPECT_DOUBLE_EQ(s->footprint_ratio, (1 << 20) / 4000.0);
  EXPECT_GE(s->wall_seconds, 0);
  EXPECT_EQ(a->GetStats()->bytes_in_use, 0);
}

TEST(ReplayTest, FailedAllocationsSkipTheirFrees) {
  CompiledTrace c = Compile(
      "1,0,allocate,0xa,600000,0\n"
      "1,0,allocate,0xb,600000,0\n"  // does not fit in 1 MiB
      "1,0,free,0xb,600000,0\n"
      "1,0,free,0xa,600000,0\n"
      "1,0,allocate,0xb,600000,0\n"  // fits again
      "1,0,free,0xb,600000,0\n");
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  std::vector<void*> got;
  ReplayOptions options;
  options.on_allocate = [&got](const ReplayOp&, void* p) { got.push_back(p); };
  absl::StatusOr<ReplaySummary> s = ReplayTrace(c, *a, options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->allocations, 2u);
  EXPECT_EQ(s->failures, 1u);
  EXPECT_EQ(s->skipped_frees, 1u);
  EXPECT_EQ(s->frees, 2u);
  EXPECT_EQ(s->peak_live_bytes, 600000u);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_NE(got[0], nullptr);
  EXPECT_EQ(got[1], nullptr);
  EXPECT_NE(got[2], nullptr);
  EXPECT_TRUE(a->Validate().ok());
}

TEST(ReplayTest, AfterOpSeesEveryOpInOrder) {
  CompiledTrace c = Compile(
      "1,0,allocate,0xa,10,0\n"
      "1,0,allocate,0xb,20,0\n"
      "1,0,free,0xb,20,0\n"
      "1,0,free,0xa,10,0\n");
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  std::vector<size_t> indices;
  std::vector<void*> ptrs;
  ReplayOptions options;
  options.after_op = [&](size_t i, const ReplayOp& op, void* p) {
    indices.push_back(i);
    ptrs.push_back(p);
    EXPECT_EQ(op.event_index, i);
  };
  absl::StatusOr<ReplaySummary> s = ReplayTrace(c, *a, options);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(indices, (std::vector<size_t>{0, 1, 2, 3}));
  ASSERT_EQ(ptrs.size(), 4u);
  EXPECT_EQ(ptrs[2], ptrs[1]);  // a free reports the pointer it freed
  EXPECT_EQ(ptrs[3], ptrs[0]);
}

TEST(ReplayTest, LiveAtEndIsReportedAndReleased) {
  CompiledTrace c = Compile(
      "1,0,allocate,0xa,300,0\n"
      "1,0,allocate,0xb,700,0\n"
      "1,0,free,0xa,300,0\n");
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  {
    Replayer r(c, *a);
    absl::StatusOr<ReplaySummary> s = r.Run();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->live_at_end, 1u);
    EXPECT_EQ(s->live_bytes_at_end, 700u);
    EXPECT_NE(r.SlotPointer(c.ops[1].slot), nullptr);
    EXPECT_EQ(a->GetStats()->bytes_in_use, 768);
    // A second run frees the leftovers first, so nothing accumulates.
    s = r.Run();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(a->GetStats()->bytes_in_use, 768);
    EXPECT_EQ(r.ReleaseLive(), 1u);
    EXPECT_EQ(a->GetStats()->bytes_in_use, 0);
    s = r.Run();
    ASSERT_TRUE(s.ok());
  }
  // The destructor released what the last run left.
  EXPECT_EQ(a->GetStats()->bytes_in_use, 0);
}

TEST(ReplayTest, InconsistentCompiledTraceIsRejectedBeforeAllocating) {
  std::unique_ptr<Allocator> a = MakeAllocator(1 << 20);
  CompiledTrace bad;
  bad.name = "hand-made";
  bad.num_slots = 1;
  bad.ops = {ReplayOp{ReplayOp::Kind::kAllocate, 0, 0, 100, 0},
             ReplayOp{ReplayOp::Kind::kAllocate, 0, 0, 100, 1}};
  absl::StatusOr<ReplaySummary> s = ReplayTrace(bad, *a);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("still live"));
  EXPECT_EQ(a->GetStats()->num_allocs, 0);

  bad.ops = {ReplayOp{ReplayOp::Kind::kAllocate, 0, 3, 100, 0}};
  s = ReplayTrace(bad, *a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("slot 3"));

  bad.ops = {ReplayOp{ReplayOp::Kind::kFree, 0, 0, 100, 0}};
  s = ReplayTrace(bad, *a);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("not live"));
}

}  // namespace
}  // namespace bfc
