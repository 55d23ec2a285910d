// Tests of the trace side of bfc::planner: usage records from a hand-made
// CompiledTrace, the plan report over it, and its formatting.
#include "bfc/planner/trace_records.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/plan_report.h"
#include "bfc/replay/trace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace planner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Kind = ReplayOp::Kind;

ReplayOp Op(Kind kind, uint32_t slot, size_t size, size_t event) {
  ReplayOp op;
  op.kind = kind;
  op.slot = slot;
  op.size = size;
  op.event_index = event;
  return op;
}

// Events: 0 alloc A(100), 1 alloc B(200), 2 free A, 3 alloc C(50) in A's
// slot, 4 free B, 5 an `allocate failure` row (no op). C is never freed.
CompiledTrace SmallTrace() {
  CompiledTrace trace;
  trace.name = "small";
  trace.ops = {Op(Kind::kAllocate, 0, 100, 0), Op(Kind::kAllocate, 1, 200, 1),
               Op(Kind::kFree, 0, 100, 2), Op(Kind::kAllocate, 0, 50, 3),
               Op(Kind::kFree, 1, 200, 4)};
  trace.num_slots = 2;
  trace.num_events = 6;
  trace.num_failure_rows = 1;
  trace.peak_live_bytes = 300;
  return trace;
}

TEST(TraceRecordsTest, ConvertsASmallTrace) {
  absl::StatusOr<TraceUsage> usage = UsageRecordsFromTrace(SmallTrace());
  ASSERT_TRUE(usage.ok()) << usage.status();
  ASSERT_EQ(usage->records.size(), 3u);
  EXPECT_EQ(usage->records[0].tensor_size, 100u);
  EXPECT_EQ(usage->records[0].first_task, 0u);
  EXPECT_EQ(usage->records[0].last_task, 2u);
  EXPECT_EQ(usage->records[1].tensor_size, 200u);
  EXPECT_EQ(usage->records[1].first_task, 1u);
  EXPECT_EQ(usage->records[1].last_task, 4u);
  EXPECT_EQ(usage->records[2].tensor_size, 50u);
  EXPECT_EQ(usage->records[2].first_task, 3u);
  EXPECT_EQ(usage->records[2].last_task, 5u);  // never freed: to the end
  EXPECT_EQ(usage->num_tasks, 6u);
  EXPECT_EQ(usage->num_never_freed, 1u);
}

TEST(TraceRecordsTest, EmptyTrace) {
  CompiledTrace trace;
  absl::StatusOr<TraceUsage> usage = UsageRecordsFromTrace(trace);
  ASSERT_TRUE(usage.ok());
  EXPECT_TRUE(usage->records.empty());
  absl::StatusOr<PlanReport> report = PlanTrace(trace, PlanOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->lower_bound_bytes, 0u);
  EXPECT_EQ(report->results.size(), 14u);
}

TEST(TraceRecordsTest, RejectsInconsistentTraces) {
  CompiledTrace trace = SmallTrace();
  trace.ops.push_back(Op(Kind::kFree, 1, 200, 5));  // B freed twice
  EXPECT_THAT(UsageRecordsFromTrace(trace).status().message(),
              HasSubstr("frees slot 1, which is not live"));

  trace = SmallTrace();
  trace.ops[3] = Op(Kind::kAllocate, 1, 50, 3);  // B's slot still live
  EXPECT_THAT(UsageRecordsFromTrace(trace).status().message(),
              HasSubstr("allocates slot 1, which is already live"));

  trace = SmallTrace();
  trace.num_events = 4;  // op 4 is at event 4
  EXPECT_EQ(UsageRecordsFromTrace(trace).status().code(),
            absl::StatusCode::kInvalidArgument);

  trace = SmallTrace();
  trace.ops[2].event_index = 0;  // goes backwards
  EXPECT_EQ(UsageRecordsFromTrace(trace).status().code(),
            absl::StatusCode::kInvalidArgument);

  // From a review: a hand-built trace's slot past num_slots sized a table by
  // it (2^32 - 1: 32 GiB, and std::bad_alloc out of the library).
  trace = SmallTrace();
  trace.ops[0].slot = 0xFFFFFFFFu;
  EXPECT_THAT(UsageRecordsFromTrace(trace).status().message(),
              HasSubstr("uses slot 4294967295, not below num_slots 2"));
}

TEST(PlanReportTest, PlansASmallTrace) {
  absl::StatusOr<PlanReport> report = PlanTrace(SmallTrace(), PlanOptions());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->trace_name, "small");
  EXPECT_EQ(report->num_tensors, 3u);
  EXPECT_EQ(report->num_tasks, 6u);
  EXPECT_EQ(report->lower_bound_bytes, 300u);  // A and B at event 1
  ASSERT_EQ(report->results.size(), 14u);
  for (const PlanResult& result : report->results) {
    EXPECT_TRUE(result.status.ok()) << MemoryStrategyName(result.strategy);
    EXPECT_GE(result.total_bytes, 300u) << MemoryStrategyName(result.strategy);
  }
  EXPECT_EQ(report->results[0].strategy, MemoryStrategy::NAIVE);
  EXPECT_FALSE(report->results[0].offsets);
  EXPECT_EQ(report->results[0].total_bytes, 350u);
  EXPECT_EQ(report->results[0].num_objects, 3u);
  // C reuses A's memory: 200 + 100.
  EXPECT_EQ(report->BestTotalBytes(), 300u);
}

TEST(PlanReportTest, RoundsSizesAndChecksOptions) {
  PlanOptions options;
  options.round_sizes_to = 256;
  options.strategies = {MemoryStrategy::GREEDY_BY_SIZE};
  options.offsets = false;
  absl::StatusOr<PlanReport> report = PlanTrace(SmallTrace(), options);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->lower_bound_bytes, 512u);
  ASSERT_EQ(report->results.size(), 1u);
  EXPECT_EQ(report->results[0].total_bytes, 512u);

  options.round_sizes_to = 0;
  EXPECT_EQ(PlanTrace(SmallTrace(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.round_sizes_to = 1;
  options.base_addr_align_bytes = 0;
  EXPECT_EQ(PlanTrace(SmallTrace(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanReportTest, FormatsATableWithRatios) {
  absl::StatusOr<PlanReport> report = PlanTrace(SmallTrace(), PlanOptions());
  ASSERT_TRUE(report.ok());
  const std::string text = FormatPlanReport(*report, 600);
  EXPECT_THAT(text,
              HasSubstr("Offline plan for small: 3 tensors over 6 tasks"));
  EXPECT_THAT(text, HasSubstr("lower bound (peak live bytes): 300 B"));
  EXPECT_THAT(text, HasSubstr("MINCOSTFLOW"));
  EXPECT_THAT(text, HasSubstr("1.167"));  // NAIVE: 350 / 300
  EXPECT_THAT(text, HasSubstr("online peak pool"));
  EXPECT_THAT(text, HasSubstr("2.000"));  // 600 / 300
  EXPECT_THAT(FormatPlanReport(*report), Not(HasSubstr("online peak pool")));
}

TEST(PlanReportTest, SkippedStrategiesPrintTheirReason) {
  PlanReport report;
  report.trace_name = "big";
  report.lower_bound_bytes = 100;
  report.options.strategies = {MemoryStrategy::MINCOSTFLOW};
  PlanResult skipped;
  skipped.strategy = MemoryStrategy::MINCOSTFLOW;
  skipped.status = absl::InvalidArgumentError("graph over the limit");
  report.results.push_back(skipped);
  const std::string text = FormatPlanReport(report);
  EXPECT_THAT(text, HasSubstr("skipped"));
  EXPECT_THAT(text, HasSubstr("graph over the limit"));
  EXPECT_EQ(report.BestTotalBytes(), 0u);
}

}  // namespace
}  // namespace planner
}  // namespace bfc
