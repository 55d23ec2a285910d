// The O(n log n) greedy strategies must give exactly the plans of the
// quadratic originals (tests/planner/greedy_reference.cc, TFLite's rules): the
// same object of every tensor, the same object sizes, the same offsets. Checked
// on random records of many shapes (ties in size, zero sizes, identical and
// nested lifetimes, one long-lived tensor over everything) and on the usage
// records of the real traces in tests/data.
#include <cstddef>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/greedy_by_breadth_assignment.h"
#include "bfc/planner/greedy_by_size_assignment.h"
#include "bfc/planner/trace_records.h"
#include "bfc/replay/trace.h"
#include "gtest/gtest.h"
#include "planner/greedy_reference.h"

namespace bfc {
namespace planner {
namespace {

using Records = std::vector<TensorUsageRecord<size_t>>;

// Shapes of random input. Each stresses a different tie or search path.
struct Shape {
  const char* name;
  size_t max_tensors;
  size_t num_tasks;
  size_t num_sizes;  // distinct sizes (few: many ties)
  size_t max_span;   // short lifetimes are 0..max_span tasks
  int long_percent;  // percent of tensors with a random long lifetime
  int zero_percent;  // percent of tensors of size 0
};

constexpr Shape kShapes[] = {
    {"short_few_sizes", 60, 40, 4, 3, 5, 5},
    {"short_many_sizes", 80, 60, 1000, 4, 5, 0},
    {"long_lived", 60, 30, 6, 2, 40, 0},
    {"dense_overlap", 50, 8, 5, 8, 30, 10},
    {"equal_intervals", 40, 3, 3, 0, 0, 20},
    {"all_same_size", 60, 50, 1, 5, 10, 0},
    {"many_zero", 40, 20, 3, 3, 10, 60},
    {"large", 400, 300, 30, 10, 5, 2},
};

Records RandomRecords(std::mt19937_64& rng, const Shape& shape) {
  std::uniform_int_distribution<size_t> count(1, shape.max_tensors);
  std::uniform_int_distribution<size_t> task(0, shape.num_tasks - 1);
  std::uniform_int_distribution<size_t> size_class(1, shape.num_sizes);
  std::uniform_int_distribution<size_t> span(0, shape.max_span);
  std::uniform_int_distribution<int> percent(0, 99);
  Records records;
  const size_t n = count(rng);
  for (size_t i = 0; i < n; ++i) {
    const size_t first = task(rng);
    const size_t length =
        percent(rng) < shape.long_percent ? task(rng) : span(rng);
    const size_t last = std::min(shape.num_tasks - 1, first + length);
    size_t size = size_class(rng) * 48 + 16;
    if (percent(rng) < shape.zero_percent) size = 0;
    records.emplace_back(size, first, last);
  }
  // Sometimes one tensor lives over the whole run (a weight).
  if (percent(rng) < 30) records.emplace_back(64, 0, shape.num_tasks - 1);
  return records;
}

std::string Describe(const Records& records) {
  std::string out;
  for (const auto& r : records) {
    out += "{" + std::to_string(r.tensor_size) + ", " +
           std::to_string(r.first_task) + ", " + std::to_string(r.last_task) +
           "}, ";
  }
  return out;
}

void ExpectSameObjects(const ObjectsAssignment<size_t>& want,
                       const ObjectsAssignment<size_t>& got,
                       const std::string& what) {
  EXPECT_EQ(want.object_ids, got.object_ids) << what;
  EXPECT_EQ(want.object_sizes, got.object_sizes) << what;
}

void ExpectSameOffsets(const OffsetsAssignment& want,
                       const OffsetsAssignment& got, const std::string& what) {
  EXPECT_EQ(want.offsets, got.offsets) << what;
  EXPECT_EQ(want.total_size, got.total_size) << what;
}

// Runs one strategy both ways on `records`; returns false on a mismatch so
// that callers stop at the first failing input.
bool CompareBySizeOffsets(const Records& records, size_t align,
                          const std::string& what) {
  OffsetsAssignment want, got;
  const absl::Status want_status =
      reference::GreedyBySizeAssignment(records, align, &want);
  const absl::Status got_status = GreedyBySizeAssignment(records, align, &got);
  EXPECT_EQ(want_status, got_status) << what;
  if (!want_status.ok()) return want_status == got_status;
  ExpectSameOffsets(want, got, what);
  return want.offsets == got.offsets && want.total_size == got.total_size;
}

bool CompareByBreadth(const Records& records, const std::string& what) {
  ObjectsAssignment<size_t> want, got;
  const absl::Status want_status =
      reference::GreedyByBreadthAssignment(records, &want);
  const absl::Status got_status = GreedyByBreadthAssignment(records, &got);
  EXPECT_EQ(want_status, got_status) << what;
  if (!want_status.ok()) return want_status == got_status;
  ExpectSameObjects(want, got, what);
  return want.object_ids == got.object_ids &&
         want.object_sizes == got.object_sizes;
}

bool CompareBySizeDistPriority(const Records& records,
                               const std::string& what) {
  ObjectsAssignment<size_t> want, got;
  const absl::Status want_status =
      reference::GreedyBySizeDistPriorityAssignment(records, &want);
  const absl::Status got_status =
      GreedyBySizeDistPriorityAssignment(records, &got);
  EXPECT_EQ(want_status, got_status) << what;
  if (!want_status.ok()) return want_status == got_status;
  ExpectSameObjects(want, got, what);
  return want.object_ids == got.object_ids &&
         want.object_sizes == got.object_sizes;
}

constexpr int kSeedsPerShape = 300;

TEST(GreedyEquivalenceTest, BySizeOffsetsOnRandomRecords) {
  for (const Shape& shape : kShapes) {
    std::mt19937_64 rng(0x512e);
    for (int seed = 0; seed < kSeedsPerShape; ++seed) {
      const Records records = RandomRecords(rng, shape);
      for (size_t align : {size_t{1}, size_t{64}, size_t{100}}) {
        const std::string what =
            std::string(shape.name) + " seed " + std::to_string(seed) +
            " align " + std::to_string(align) + ": " + Describe(records);
        if (!CompareBySizeOffsets(records, align, what)) return;
      }
    }
  }
}

TEST(GreedyEquivalenceTest, ByBreadthOnRandomRecords) {
  for (const Shape& shape : kShapes) {
    std::mt19937_64 rng(0xb7ead7);
    for (int seed = 0; seed < kSeedsPerShape; ++seed) {
      const Records records = RandomRecords(rng, shape);
      const std::string what = std::string(shape.name) + " seed " +
                               std::to_string(seed) + ": " + Describe(records);
      if (!CompareByBreadth(records, what)) return;
    }
  }
}

TEST(GreedyEquivalenceTest, BySizeDistPriorityOnRandomRecords) {
  for (const Shape& shape : kShapes) {
    std::mt19937_64 rng(0xd157);
    for (int seed = 0; seed < kSeedsPerShape; ++seed) {
      const Records records = RandomRecords(rng, shape);
      const std::string what = std::string(shape.name) + " seed " +
                               std::to_string(seed) + ": " + Describe(records);
      if (!CompareBySizeDistPriority(records, what)) return;
    }
  }
}

TEST(GreedyEquivalenceTest, EmptyRecords) {
  EXPECT_TRUE(CompareBySizeOffsets({}, 64, "empty"));
  EXPECT_TRUE(CompareByBreadth({}, "empty"));
  EXPECT_TRUE(CompareBySizeDistPriority({}, "empty"));
}

TEST(GreedyEquivalenceTest, InvalidRecordsGiveTheSameError) {
  const Records backwards = {{64, 0, 3}, {64, 5, 2}};
  EXPECT_TRUE(CompareBySizeOffsets(backwards, 64, "backwards"));
  EXPECT_TRUE(CompareByBreadth(backwards, "backwards"));
  EXPECT_TRUE(CompareBySizeDistPriority(backwards, "backwards"));
}

// The usage records of a real trace (sizes rounded to 256, as bfc-plan does by
// default).
Records TraceRecords(const std::string& name) {
  const std::string path = std::string(BFC_TEST_DATA_DIR) + "/" + name;
  absl::StatusOr<Trace> trace = ReadTrace(path);
  EXPECT_TRUE(trace.ok()) << trace.status();
  if (!trace.ok()) return {};
  absl::StatusOr<CompiledTrace> compiled = CompileTrace(*trace);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  absl::StatusOr<TraceUsage> usage = UsageRecordsFromTrace(*compiled);
  EXPECT_TRUE(usage.ok()) << usage.status();
  if (!usage.ok()) return {};
  return usage->records;
}

class GreedyEquivalenceTraceTest
    : public ::testing::TestWithParam<const char*> {};

TEST_P(GreedyEquivalenceTraceTest, SamePlansAsTheQuadraticOriginals) {
  const Records records = TraceRecords(GetParam());
  ASSERT_FALSE(records.empty());
  EXPECT_TRUE(CompareBySizeOffsets(records, 64, GetParam()));
  EXPECT_TRUE(CompareByBreadth(records, GetParam()));
  EXPECT_TRUE(CompareBySizeDistPriority(records, GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Traces, GreedyEquivalenceTraceTest,
                         ::testing::Values("resnet18-train.csv",
                                           "resnet50-infer.csv",
                                           "transformer-train.csv",
                                           "lstm-train.csv"),
                         [](const auto& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           for (char& c : name) {
                             if (c == '-') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace planner
}  // namespace bfc
