// Tests of bfc::planner's strategies on hand-made records whose best plans are
// known, of the unsupported strategy/size-type combinations, and of
// ValidateAssignment on deliberately broken plans.
#include "bfc/planner/memory_management.h"

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Records = std::vector<TensorUsageRecord<size_t>>;

constexpr MemoryStrategy kAllStrategies[] = {
    MemoryStrategy::NAIVE,           MemoryStrategy::EQUALITY,
    MemoryStrategy::GREEDY_IN_ORDER, MemoryStrategy::GREEDY_BY_BREADTH,
    MemoryStrategy::GREEDY_BY_SIZE,  MemoryStrategy::GREEDY_BEST,
    MemoryStrategy::MINCOSTFLOW};

// Plans `records` with `strategy` as objects, validates, returns the total.
size_t ObjectsTotal(const Records& records, MemoryStrategy strategy,
                    ObjectsAssignment<size_t>* out = nullptr) {
  ObjectsAssignment<size_t> plan;
  absl::Status status = AssignObjectsToTensors(records, strategy, &plan);
  EXPECT_TRUE(status.ok()) << MemoryStrategyName(strategy) << ": " << status;
  absl::Status valid = ValidateAssignment(records, plan);
  EXPECT_TRUE(valid.ok()) << MemoryStrategyName(strategy) << ": " << valid;
  if (out != nullptr) *out = plan;
  return internal::TotalSize(plan);
}

// Same for offsets.
size_t OffsetsTotal(const Records& records, MemoryStrategy strategy,
                    size_t align = 1, OffsetsAssignment* out = nullptr) {
  OffsetsAssignment plan;
  absl::Status status = AssignOffsetsToTensors(records, strategy, &plan, align);
  EXPECT_TRUE(status.ok()) << MemoryStrategyName(strategy) << ": " << status;
  absl::Status valid = ValidateAssignment(records, plan, align);
  EXPECT_TRUE(valid.ok()) << MemoryStrategyName(strategy) << ": " << valid;
  if (out != nullptr) *out = plan;
  return plan.total_size;
}

// TFLite's chain: each tensor overlaps only its neighbours (at one task).
Records ChainRecords() {
  return {{16, 0, 1}, {8, 1, 2}, {64, 2, 3}, {32, 3, 4}, {8, 4, 5}};
}

TEST(PlannerTest, EmptyInputGivesEmptyPlans) {
  const Records none;
  for (MemoryStrategy strategy : kAllStrategies) {
    ObjectsAssignment<size_t> objects;
    objects.object_sizes = {7};  // stale contents must be cleared
    ASSERT_TRUE(AssignObjectsToTensors(none, strategy, &objects).ok())
        << MemoryStrategyName(strategy);
    EXPECT_TRUE(objects.object_ids.empty());
    EXPECT_TRUE(objects.object_sizes.empty());
    OffsetsAssignment offsets;
    offsets.total_size = 7;
    ASSERT_TRUE(AssignOffsetsToTensors(none, strategy, &offsets, 64).ok())
        << MemoryStrategyName(strategy);
    EXPECT_TRUE(offsets.offsets.empty());
    EXPECT_EQ(offsets.total_size, 0u);
  }
  EXPECT_EQ(internal::PeakLiveSize(none), 0u);
}

TEST(PlannerTest, ChainNaive) {
  ObjectsAssignment<size_t> plan;
  EXPECT_EQ(ObjectsTotal(ChainRecords(), MemoryStrategy::NAIVE, &plan), 128u);
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_EQ(OffsetsTotal(ChainRecords(), MemoryStrategy::NAIVE), 128u);
}

TEST(PlannerTest, ChainEqualityReusesOnlyEqualSizes) {
  ObjectsAssignment<size_t> plan;
  EXPECT_EQ(ObjectsTotal(ChainRecords(), MemoryStrategy::EQUALITY, &plan),
            120u);
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 2, 3, 1));
  EXPECT_THAT(plan.object_sizes, ElementsAre(16, 8, 64, 32));
}

TEST(PlannerTest, ChainGreedyStrategiesReachTheLowerBound) {
  const Records records = ChainRecords();
  ASSERT_EQ(internal::PeakLiveSize(records), 96u);
  for (MemoryStrategy strategy :
       {MemoryStrategy::GREEDY_IN_ORDER, MemoryStrategy::GREEDY_BY_BREADTH,
        MemoryStrategy::GREEDY_BY_SIZE, MemoryStrategy::GREEDY_BEST,
        MemoryStrategy::MINCOSTFLOW}) {
    ObjectsAssignment<size_t> plan;
    EXPECT_EQ(ObjectsTotal(records, strategy, &plan), 96u)
        << MemoryStrategyName(strategy);
    EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 0, 1, 0))
        << MemoryStrategyName(strategy);
    EXPECT_THAT(plan.object_sizes, ElementsAre(64, 32))
        << MemoryStrategyName(strategy);
  }
}

TEST(PlannerTest, ChainGreedyBySizeOffsets) {
  OffsetsAssignment plan;
  EXPECT_EQ(
      OffsetsTotal(ChainRecords(), MemoryStrategy::GREEDY_BY_SIZE, 1, &plan),
      96u);
  EXPECT_THAT(plan.offsets, ElementsAre(0, 64, 0, 64, 0));
}

TEST(PlannerTest, ObjectsLaidEndToEndForOffsets) {
  OffsetsAssignment plan;
  EXPECT_EQ(
      OffsetsTotal(ChainRecords(), MemoryStrategy::GREEDY_IN_ORDER, 1, &plan),
      96u);
  EXPECT_THAT(plan.offsets, ElementsAre(0, 64, 0, 64, 0));
  // Objects {16, 8, 64, 32} (EQUALITY) at 64-byte alignment: 0, 64, 128, 192.
  EXPECT_EQ(OffsetsTotal(ChainRecords(), MemoryStrategy::EQUALITY, 64, &plan),
            224u);
  EXPECT_THAT(plan.offsets, ElementsAre(0, 64, 128, 192, 64));
}

TEST(PlannerTest, FullyOverlappingTensorsShareNothing) {
  const Records records = {{10, 0, 5}, {20, 0, 5}, {30, 2, 3}, {40, 0, 5}};
  ASSERT_EQ(internal::PeakLiveSize(records), 100u);
  for (MemoryStrategy strategy : kAllStrategies) {
    ObjectsAssignment<size_t> plan;
    EXPECT_EQ(ObjectsTotal(records, strategy, &plan), 100u)
        << MemoryStrategyName(strategy);
    EXPECT_EQ(plan.object_sizes.size(), 4u) << MemoryStrategyName(strategy);
    EXPECT_EQ(OffsetsTotal(records, strategy), 100u)
        << MemoryStrategyName(strategy);
  }
  // Largest first, each end rounded up to 16: 40@0, 30@48, 20@80, 10@112.
  OffsetsAssignment plan;
  EXPECT_EQ(OffsetsTotal(records, MemoryStrategy::GREEDY_BY_SIZE, 16, &plan),
            122u);
  EXPECT_THAT(plan.offsets, ElementsAre(112, 80, 48, 0));
  // NAIVE objects in index order: 10@0, 20@16, 30@48, 40@80.
  EXPECT_EQ(OffsetsTotal(records, MemoryStrategy::NAIVE, 16, &plan), 120u);
  EXPECT_THAT(plan.offsets, ElementsAre(0, 16, 48, 80));
}

// One long-lived tensor around four short, disjoint ones: the best plan is
// the outer tensor plus one object for the inner ones (their maximum).
TEST(PlannerTest, NestedIntervals) {
  const Records records = {
      {100, 0, 9}, {50, 1, 2}, {60, 3, 4}, {40, 5, 6}, {60, 7, 8}};
  ASSERT_EQ(internal::PeakLiveSize(records), 160u);
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::NAIVE), 310u);
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::EQUALITY), 250u);
  for (MemoryStrategy strategy :
       {MemoryStrategy::GREEDY_IN_ORDER, MemoryStrategy::GREEDY_BY_BREADTH,
        MemoryStrategy::GREEDY_BY_SIZE, MemoryStrategy::GREEDY_BEST,
        MemoryStrategy::MINCOSTFLOW}) {
    ObjectsAssignment<size_t> plan;
    EXPECT_EQ(ObjectsTotal(records, strategy, &plan), 160u)
        << MemoryStrategyName(strategy);
    EXPECT_EQ(plan.object_ids[1], plan.object_ids[2]);
    EXPECT_EQ(plan.object_ids[1], plan.object_ids[3]);
    EXPECT_EQ(plan.object_ids[1], plan.object_ids[4]);
    EXPECT_NE(plan.object_ids[0], plan.object_ids[1]);
    EXPECT_EQ(OffsetsTotal(records, strategy), 160u)
        << MemoryStrategyName(strategy);
  }
  OffsetsAssignment plan;
  EXPECT_EQ(OffsetsTotal(records, MemoryStrategy::GREEDY_BY_SIZE, 1, &plan),
            160u);
  EXPECT_THAT(plan.offsets, ElementsAre(0, 100, 100, 100, 100));
}

TEST(PlannerTest, EqualSizesPairs) {
  const Records records = {{32, 0, 1}, {32, 0, 1}, {32, 2, 3}, {32, 2, 3}};
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::NAIVE), 128u);
  for (MemoryStrategy strategy : kAllStrategies) {
    if (strategy == MemoryStrategy::NAIVE) continue;
    EXPECT_EQ(ObjectsTotal(records, strategy), 64u)
        << MemoryStrategyName(strategy);
    EXPECT_EQ(OffsetsTotal(records, strategy), 64u)
        << MemoryStrategyName(strategy);
  }
}

// With equal sizes, EQUALITY and GREEDY_IN_ORDER are interval partitioning in
// start order and MINCOSTFLOW minimises the number of chains: all optimal.
TEST(PlannerTest, EqualSizesStaircaseIsOptimalForExactStrategies) {
  Records records;
  for (size_t i = 0; i < 20; ++i) records.emplace_back(48, i, i + 2);
  ASSERT_EQ(internal::PeakLiveSize(records), 3u * 48);
  for (MemoryStrategy strategy :
       {MemoryStrategy::EQUALITY, MemoryStrategy::GREEDY_IN_ORDER,
        MemoryStrategy::MINCOSTFLOW}) {
    EXPECT_EQ(ObjectsTotal(records, strategy), 3u * 48)
        << MemoryStrategyName(strategy);
  }
  for (MemoryStrategy strategy :
       {MemoryStrategy::GREEDY_BY_BREADTH, MemoryStrategy::GREEDY_BY_SIZE,
        MemoryStrategy::GREEDY_BEST}) {
    EXPECT_GE(ObjectsTotal(records, strategy), 3u * 48);
  }
}

TEST(PlannerTest, UnsortedRecordsStillGiveValidPlans) {
  // Later tensors first: a strategy walking indices without sorting by
  // first_task would release objects too early.
  const Records records = {{8, 6, 7}, {8, 4, 5}, {8, 0, 7}, {8, 2, 3}};
  for (MemoryStrategy strategy : kAllStrategies) {
    EXPECT_GE(ObjectsTotal(records, strategy), 16u);
    EXPECT_GE(OffsetsTotal(records, strategy), 16u);
  }
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::EQUALITY), 16u);
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::GREEDY_IN_ORDER), 16u);
}

TEST(PlannerTest, GreedyInOrderTakesClosestSize) {
  // At task 4 both objects are free: 100 is closer to 90 than 10 is.
  const Records records = {{100, 0, 1}, {10, 0, 2}, {90, 4, 5}};
  ObjectsAssignment<size_t> plan;
  EXPECT_EQ(ObjectsTotal(records, MemoryStrategy::GREEDY_IN_ORDER, &plan),
            110u);
  EXPECT_EQ(plan.object_ids[2], plan.object_ids[0]);
  // Here 60 is closer to 50 than 100 is: the smaller object grows.
  const Records grow = {{100, 0, 1}, {50, 0, 2}, {60, 4, 5}};
  EXPECT_EQ(ObjectsTotal(grow, MemoryStrategy::GREEDY_IN_ORDER, &plan), 160u);
  EXPECT_EQ(plan.object_ids[2], plan.object_ids[1]);
  EXPECT_THAT(plan.object_sizes, ElementsAre(100, 60));
}

TEST(PlannerTest, GreedyBestIsTheSmallestGreedy) {
  const Records records = {{100, 0, 1}, {50, 0, 2}, {60, 4, 5}, {60, 3, 3},
                           {20, 1, 6},  {70, 6, 8}, {5, 2, 7}};
  const size_t best = ObjectsTotal(records, MemoryStrategy::GREEDY_BEST);
  const size_t in_order =
      ObjectsTotal(records, MemoryStrategy::GREEDY_IN_ORDER);
  const size_t breadth =
      ObjectsTotal(records, MemoryStrategy::GREEDY_BY_BREADTH);
  const size_t by_size = ObjectsTotal(records, MemoryStrategy::GREEDY_BY_SIZE);
  EXPECT_EQ(best, std::min({in_order, breadth, by_size}));
}

TEST(PlannerTest, InvalidRecordsAndArguments) {
  const Records bad = {{8, 0, 1}, {8, 3, 2}};
  for (MemoryStrategy strategy : kAllStrategies) {
    ObjectsAssignment<size_t> objects;
    absl::Status status = AssignObjectsToTensors(bad, strategy, &objects);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << MemoryStrategyName(strategy);
    EXPECT_THAT(status.message(), HasSubstr("usage record 1"));
    OffsetsAssignment offsets;
    EXPECT_EQ(AssignOffsetsToTensors(bad, strategy, &offsets).code(),
              absl::StatusCode::kInvalidArgument)
        << MemoryStrategyName(strategy);
    EXPECT_EQ(AssignObjectsToTensors(ChainRecords(), strategy, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(AssignOffsetsToTensors(ChainRecords(), strategy, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(
        AssignOffsetsToTensors(ChainRecords(), strategy, &offsets, 0).code(),
        absl::StatusCode::kInvalidArgument);
  }
  ObjectsAssignment<size_t> objects;
  EXPECT_EQ(AssignObjectsToTensors(ChainRecords(),
                                   static_cast<MemoryStrategy>(99), &objects)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_STREQ(MemoryStrategyName(static_cast<MemoryStrategy>(99)), "UNKNOWN");
}

// --- textures ----------------------------------------------------------------

TEST(PlannerTest, Uint2GreedyInOrderReusesOnlyCoveringObjects) {
  const std::vector<TensorUsageRecord<uint2>> records = {
      {{4, 4}, 0, 1}, {{2, 8}, 0, 1}, {{3, 3}, 2, 3}, {{2, 5}, 2, 3}};
  ObjectsAssignment<uint2> plan;
  ASSERT_TRUE(
      AssignObjectsToTensors(records, MemoryStrategy::GREEDY_IN_ORDER, &plan)
          .ok());
  ASSERT_TRUE(ValidateAssignment(records, plan).ok());
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 0, 1));
  ASSERT_EQ(plan.object_sizes.size(), 2u);
  EXPECT_EQ(plan.object_sizes[0], (uint2{4, 4}));
  EXPECT_EQ(plan.object_sizes[1], (uint2{2, 8}));
  EXPECT_EQ(internal::TotalSize(plan), 32u);

  // {5, 1} is covered by neither (x too big for both): a new object.
  const std::vector<TensorUsageRecord<uint2>> wide = {{{4, 4}, 0, 1},
                                                      {{5, 1}, 2, 3}};
  ASSERT_TRUE(
      AssignObjectsToTensors(wide, MemoryStrategy::GREEDY_IN_ORDER, &plan)
          .ok());
  ASSERT_TRUE(ValidateAssignment(wide, plan).ok());
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1));
}

TEST(PlannerTest, Uint3EqualityAndNaive) {
  const std::vector<TensorUsageRecord<uint3>> records = {
      {{1, 2, 3}, 0, 1}, {{3, 2, 1}, 2, 3}, {{1, 2, 3}, 4, 5}};
  ObjectsAssignment<uint3> plan;
  ASSERT_TRUE(
      AssignObjectsToTensors(records, MemoryStrategy::EQUALITY, &plan).ok());
  ASSERT_TRUE(ValidateAssignment(records, plan).ok());
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 0));
  ASSERT_TRUE(
      AssignObjectsToTensors(records, MemoryStrategy::NAIVE, &plan).ok());
  ASSERT_TRUE(ValidateAssignment(records, plan).ok());
  EXPECT_THAT(plan.object_ids, ElementsAre(0, 1, 2));
  EXPECT_EQ(plan.object_sizes[1], (uint3{3, 2, 1}));
  ASSERT_TRUE(
      AssignObjectsToTensors(records, MemoryStrategy::GREEDY_IN_ORDER, &plan)
          .ok());
  ASSERT_TRUE(ValidateAssignment(records, plan).ok());
  EXPECT_EQ(plan.object_ids[2], plan.object_ids[0]);
}

TEST(PlannerTest, UnsupportedTextureStrategiesAreInvalidArgument) {
  const std::vector<TensorUsageRecord<uint2>> records2 = {{{1, 1}, 0, 1}};
  const std::vector<TensorUsageRecord<uint3>> records3 = {{{1, 1, 1}, 0, 1}};
  for (MemoryStrategy strategy :
       {MemoryStrategy::GREEDY_BY_BREADTH, MemoryStrategy::GREEDY_BY_SIZE,
        MemoryStrategy::GREEDY_BEST, MemoryStrategy::MINCOSTFLOW,
        static_cast<MemoryStrategy>(99)}) {
    ObjectsAssignment<uint2> plan2;
    absl::Status status = AssignObjectsToTensors(records2, strategy, &plan2);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << MemoryStrategyName(strategy);
    EXPECT_THAT(status.message(), HasSubstr("uint2"));
    ObjectsAssignment<uint3> plan3;
    status = AssignObjectsToTensors(records3, strategy, &plan3);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << MemoryStrategyName(strategy);
    EXPECT_THAT(status.message(), HasSubstr("uint3"));
  }
  for (MemoryStrategy strategy :
       {MemoryStrategy::NAIVE, MemoryStrategy::EQUALITY,
        MemoryStrategy::GREEDY_IN_ORDER}) {
    ObjectsAssignment<uint2> plan2;
    EXPECT_TRUE(AssignObjectsToTensors(records2, strategy, &plan2).ok());
    ObjectsAssignment<uint3> plan3;
    EXPECT_TRUE(AssignObjectsToTensors(records3, strategy, &plan3).ok());
    EXPECT_EQ(AssignObjectsToTensors(records3, strategy, nullptr).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// --- ValidateAssignment
// --------------------------------------------------------

TEST(ValidateAssignmentTest, AcceptsAGoodObjectsPlan) {
  ObjectsAssignment<size_t> plan;
  plan.object_ids = {0, 1, 0, 1, 0};
  plan.object_sizes = {64, 32};
  EXPECT_TRUE(ValidateAssignment(ChainRecords(), plan).ok());
}

TEST(ValidateAssignmentTest, CatchesBrokenObjectsPlans) {
  const Records records = ChainRecords();
  ObjectsAssignment<size_t> plan;
  plan.object_ids = {0, 1, 0, 1};  // one id missing
  plan.object_sizes = {64, 32};
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("4 object ids for 5"));

  plan.object_ids = {0, 1, 0, 1, 2};  // no object 2
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("object id 2"));

  plan.object_ids = {0, 1, 0, 1, kNotAssigned};
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("kNotAssigned"));

  plan.object_ids = {0, 1, 0, 1, 0};
  plan.object_sizes = {63, 32};  // tensor 2 needs 64
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("smaller than tensor 2"));

  // Tensors 0 and 1 touch at task 1: sharing is an overlap.
  plan.object_ids = {0, 0, 1, 0, 1};
  plan.object_sizes = {64, 64};
  absl::Status status = ValidateAssignment(records, plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensors 0"));
  EXPECT_THAT(status.message(), HasSubstr("live at task 1"));

  const Records bad = {{8, 2, 1}};
  plan.object_ids = {0};
  plan.object_sizes = {8};
  EXPECT_EQ(ValidateAssignment(bad, plan).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ValidateAssignmentTest, CatchesTooSmallTextureObjects) {
  const std::vector<TensorUsageRecord<uint2>> records = {{{4, 4}, 0, 1},
                                                         {{2, 8}, 2, 3}};
  ObjectsAssignment<uint2> plan;
  plan.object_ids = {0, 0};
  plan.object_sizes = {{4, 4}};  // covers the first, not the second (y = 8)
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("(4, 4) is smaller than tensor 1 of size (2, 8)"));
  plan.object_sizes = {{4, 8}};
  EXPECT_TRUE(ValidateAssignment(records, plan).ok());
}

TEST(ValidateAssignmentTest, CatchesBrokenOffsetsPlans) {
  const Records records = ChainRecords();
  OffsetsAssignment plan;
  plan.offsets = {0, 64, 0, 64, 0};
  plan.total_size = 96;
  EXPECT_TRUE(ValidateAssignment(records, plan).ok());
  EXPECT_TRUE(ValidateAssignment(records, plan, 32).ok());
  EXPECT_THAT(ValidateAssignment(records, plan, 128).message(),
              HasSubstr("not a multiple of 128"));
  EXPECT_EQ(ValidateAssignment(records, plan, 0).code(),
            absl::StatusCode::kInvalidArgument);

  plan.total_size = 95;  // tensor 3 (32 bytes at 64) ends at 96
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("ends past total_size 95"));

  plan.offsets = {0, 64, 0, 64};
  plan.total_size = 96;
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("4 offsets for 5"));

  // Tensor 3 (bytes 63..95) overlaps tensor 2 (bytes 0..64) at task 3.
  plan.offsets = {0, 64, 0, 63, 0};
  absl::Status status = ValidateAssignment(records, plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("overlap in time and memory"));

  // Tensor 1 (bytes 8..16) sits inside tensor 0 (bytes 0..16) at task 1.
  plan.offsets = {0, 8, 0, 64, 0};
  EXPECT_THAT(ValidateAssignment(records, plan).message(),
              HasSubstr("tensors 0"));

  // Same bytes, disjoint times: fine. Ranges that only touch: fine.
  const Records apart = {{16, 0, 1}, {16, 2, 3}, {16, 2, 3}};
  plan.offsets = {0, 0, 16};
  plan.total_size = 32;
  EXPECT_TRUE(ValidateAssignment(apart, plan).ok());
  plan.offsets = {0, 0, 8};
  EXPECT_THAT(ValidateAssignment(apart, plan).message(),
              HasSubstr("tensors 1"));

  // A zero-size tensor occupies no bytes.
  const Records empty_tensor = {{16, 0, 3}, {0, 1, 2}};
  plan.offsets = {0, 8};
  plan.total_size = 16;
  EXPECT_TRUE(ValidateAssignment(empty_tensor, plan).ok());
}

}  // namespace
}  // namespace planner
}  // namespace bfc
