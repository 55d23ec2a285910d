// Randomized tests of bfc::planner: every strategy on random records (fixed
// seeds) must give a valid plan between the lower bound and NAIVE, and
// MINCOSTFLOW's factored graph must reach the same optimum as TFLite's
// explicit quadratic graph, solved here by plain Bellman-Ford augmentation.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/memory_management.h"
#include "bfc/planner/min_cost_flow_assignment.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

using ::testing::HasSubstr;
using Records = std::vector<TensorUsageRecord<size_t>>;

constexpr MemoryStrategy kAllStrategies[] = {
    MemoryStrategy::NAIVE,           MemoryStrategy::EQUALITY,
    MemoryStrategy::GREEDY_IN_ORDER, MemoryStrategy::GREEDY_BY_BREADTH,
    MemoryStrategy::GREEDY_BY_SIZE,  MemoryStrategy::GREEDY_BEST,
    MemoryStrategy::MINCOSTFLOW};

// Random records: `max_tensors` at most, tasks below `num_tasks`, sizes drawn
// from `num_sizes` distinct values (few distinct sizes, as in real traces, or
// many), some tensors of size 0.
Records RandomRecords(std::mt19937_64& rng, size_t max_tensors,
                      size_t num_tasks, size_t num_sizes) {
  std::uniform_int_distribution<size_t> count(1, max_tensors);
  std::uniform_int_distribution<size_t> task(0, num_tasks - 1);
  std::uniform_int_distribution<size_t> size_class(0, num_sizes - 1);
  std::uniform_int_distribution<size_t> span(0, 6);
  Records records;
  const size_t n = count(rng);
  for (size_t i = 0; i < n; ++i) {
    const size_t first = task(rng);
    // Mostly short lifetimes, a few long ones.
    const size_t length = span(rng) == 0 ? task(rng) : span(rng);
    const size_t last = std::min(num_tasks - 1, first + length);
    const size_t cls = size_class(rng);
    const size_t size = cls == 0 ? 0 : cls * 40 + (cls * cls) % 7;
    records.emplace_back(size, first, last);
  }
  return records;
}

size_t NaiveTotal(const Records& records) {
  size_t total = 0;
  for (const auto& rec : records) total += rec.tensor_size;
  return total;
}

TEST(RandomRecordsTest, EveryStrategyGivesValidPlansWithinBounds) {
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 300; ++round) {
    const size_t num_sizes = round % 3 == 0 ? 200 : 6;
    const Records records = RandomRecords(rng, 60, 40, num_sizes);
    const size_t lower = internal::PeakLiveSize(records);
    const size_t naive = NaiveTotal(records);
    size_t greedy_min = std::numeric_limits<size_t>::max();
    size_t best = 0;
    for (MemoryStrategy strategy : kAllStrategies) {
      SCOPED_TRACE(testing::Message()
                   << "round " << round << " " << MemoryStrategyName(strategy));
      ObjectsAssignment<size_t> objects;
      ASSERT_TRUE(AssignObjectsToTensors(records, strategy, &objects).ok());
      ASSERT_TRUE(ValidateAssignment(records, objects).ok())
          << ValidateAssignment(records, objects);
      const size_t total = internal::TotalSize(objects);
      EXPECT_GE(total, lower);
      EXPECT_LE(total, naive);
      if (strategy == MemoryStrategy::GREEDY_IN_ORDER ||
          strategy == MemoryStrategy::GREEDY_BY_BREADTH ||
          strategy == MemoryStrategy::GREEDY_BY_SIZE) {
        greedy_min = std::min(greedy_min, total);
      }
      if (strategy == MemoryStrategy::GREEDY_BEST) best = total;
      for (size_t align : {size_t{1}, size_t{64}}) {
        OffsetsAssignment offsets;
        ASSERT_TRUE(
            AssignOffsetsToTensors(records, strategy, &offsets, align).ok());
        ASSERT_TRUE(ValidateAssignment(records, offsets, align).ok())
            << ValidateAssignment(records, offsets, align);
        EXPECT_GE(offsets.total_size, lower);
        if (align == 1) {
          EXPECT_LE(offsets.total_size, naive);
        }
      }
    }
    EXPECT_EQ(best, greedy_min) << "round " << round;
  }
}

TEST(RandomRecordsTest, TextureStrategiesGiveValidPlans) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint32_t> dim(1, 4);
  for (int round = 0; round < 100; ++round) {
    const Records shape = RandomRecords(rng, 40, 30, 6);
    std::vector<TensorUsageRecord<uint2>> records2;
    std::vector<TensorUsageRecord<uint3>> records3;
    for (const auto& rec : shape) {
      records2.push_back({{dim(rng), dim(rng)}, rec.first_task, rec.last_task});
      records3.push_back(
          {{dim(rng), dim(rng), dim(rng)}, rec.first_task, rec.last_task});
    }
    for (MemoryStrategy strategy :
         {MemoryStrategy::NAIVE, MemoryStrategy::EQUALITY,
          MemoryStrategy::GREEDY_IN_ORDER}) {
      SCOPED_TRACE(testing::Message()
                   << "round " << round << " " << MemoryStrategyName(strategy));
      ObjectsAssignment<uint2> plan2;
      ASSERT_TRUE(AssignObjectsToTensors(records2, strategy, &plan2).ok());
      EXPECT_TRUE(ValidateAssignment(records2, plan2).ok())
          << ValidateAssignment(records2, plan2);
      ObjectsAssignment<uint3> plan3;
      ASSERT_TRUE(AssignObjectsToTensors(records3, strategy, &plan3).ok());
      EXPECT_TRUE(ValidateAssignment(records3, plan3).ok())
          << ValidateAssignment(records3, plan3);
    }
  }
}

// The cost TFLite's flow assigns to a plan: per object (its tensors in time
// order), the first tensor's size plus every growth from one tensor to the
// next.
int64_t FlowCost(const Records& records,
                 const ObjectsAssignment<size_t>& plan) {
  std::vector<std::vector<size_t>> members(plan.object_sizes.size());
  for (size_t i = 0; i < records.size(); ++i) {
    members[plan.object_ids[i]].push_back(i);
  }
  int64_t cost = 0;
  for (auto& tensors : members) {
    std::sort(tensors.begin(), tensors.end(), [&](size_t a, size_t b) {
      return records[a].first_task < records[b].first_task;
    });
    for (size_t k = 0; k < tensors.size(); ++k) {
      const int64_t size =
          static_cast<int64_t>(records[tensors[k]].tensor_size);
      const int64_t prev =
          k == 0 ? 0
                 : static_cast<int64_t>(records[tensors[k - 1]].tensor_size);
      cost += std::max<int64_t>(0, size - prev);
    }
  }
  return cost;
}

// TFLite's graph with every L(r) -> R(t) edge, min-cost flow by successive
// shortest paths with Bellman-Ford. Returns the optimal cost.
int64_t ReferenceMinCostFlow(const Records& records) {
  const size_t n = records.size();
  const size_t source = 2 * n;
  const size_t sink = 2 * n + 1;
  struct Edge {
    size_t to;
    int64_t cap;
    int64_t cost;
  };
  std::vector<Edge> edges;
  std::vector<std::vector<size_t>> out(2 * n + 2);
  auto add = [&](size_t u, size_t v, int64_t cost) {
    out[u].push_back(edges.size());
    edges.push_back({v, 1, cost});
    out[v].push_back(edges.size());
    edges.push_back({u, 0, -cost});
  };
  for (size_t t = 0; t < n; ++t) {
    add(source, t, 0);
    add(n + t, sink, 0);
    add(source, n + t, static_cast<int64_t>(records[t].tensor_size));
    for (size_t r = 0; r < n; ++r) {
      if (records[r].last_task < records[t].first_task) {
        add(r, n + t,
            std::max<int64_t>(
                0, static_cast<int64_t>(records[t].tensor_size) -
                       static_cast<int64_t>(records[r].tensor_size)));
      }
    }
  }
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  int64_t total = 0;
  for (size_t unit = 0; unit < n; ++unit) {
    std::vector<int64_t> dist(2 * n + 2, kInf);
    std::vector<size_t> via(2 * n + 2, SIZE_MAX);
    dist[source] = 0;
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t u = 0; u < out.size(); ++u) {
        if (dist[u] == kInf) continue;
        for (size_t e : out[u]) {
          if (edges[e].cap > 0 && dist[u] + edges[e].cost < dist[edges[e].to]) {
            dist[edges[e].to] = dist[u] + edges[e].cost;
            via[edges[e].to] = e;
            changed = true;
          }
        }
      }
    }
    if (dist[sink] == kInf) return -1;
    total += dist[sink];
    for (size_t v = sink; v != source; v = edges[via[v] ^ 1].to) {
      edges[via[v]].cap -= 1;
      edges[via[v] ^ 1].cap += 1;
    }
  }
  return total;
}

TEST(RandomRecordsTest, MinCostFlowMatchesTheExplicitGraphOptimum) {
  std::mt19937_64 rng(99);
  for (int round = 0; round < 200; ++round) {
    const Records records =
        RandomRecords(rng, 25, 30, round % 2 == 0 ? 5 : 100);
    ObjectsAssignment<size_t> plan;
    ASSERT_TRUE(
        AssignObjectsToTensors(records, MemoryStrategy::MINCOSTFLOW, &plan)
            .ok());
    ASSERT_TRUE(ValidateAssignment(records, plan).ok());
    EXPECT_EQ(FlowCost(records, plan), ReferenceMinCostFlow(records))
        << "round " << round;
  }
}

TEST(MinCostFlowTest, RejectsGraphsOverTheEdgeLimit) {
  Records chain;
  for (size_t i = 0; i < 50; ++i) chain.emplace_back(i + 1, 2 * i, 2 * i);
  const size_t edges = MinCostFlowEdgeCount(chain);
  // 4 edges per tensor plus one chain edge per size class released... with all
  // sizes distinct, tensor t is fed from every earlier class: ~n^2 / 2.
  EXPECT_GT(edges, 50u * 49 / 2);
  ObjectsAssignment<size_t> plan;
  absl::Status status = MinCostFlowAssignment(chain, &plan, edges - 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("over the limit"));
  ASSERT_TRUE(MinCostFlowAssignment(chain, &plan, edges).ok());
  EXPECT_TRUE(ValidateAssignment(chain, plan).ok());
  // Growing one object through the whole chain costs 50, its final size.
  EXPECT_EQ(internal::TotalSize(plan), 50u);
}

// A chain of distinct sizes needs ~n^2 / 2 edges: 2 * 10^10 here. The count
// (and so the refusal) must not walk them one by one (it took minutes).
TEST(MinCostFlowTest, AnOversizedGraphIsCountedAndRefusedAtOnce) {
  constexpr size_t n = 200000;
  Records chain;
  chain.reserve(n);
  for (size_t i = 0; i < n; ++i) chain.emplace_back(i + 1, 2 * i, 2 * i);
  // Per tensor: source -> L, R -> sink, source -> R, and one edge from each
  // of the t earlier sizes' hubs; each of the first n - 1 tensors is
  // released into its hub (L -> H) when the next begins; no two share a
  // size, so no hub chains.
  EXPECT_EQ(MinCostFlowEdgeCount(chain), 3 * n + n * (n - 1) / 2 + (n - 1));
  ObjectsAssignment<size_t> plan;
  absl::Status status = MinCostFlowAssignment(chain, &plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("over the limit"));
}

TEST(MinCostFlowTest, FewDistinctSizesKeepTheGraphLinear) {
  Records records;
  for (size_t i = 0; i < 4000; ++i) {
    records.emplace_back(256 << (i % 4), i, i + 3);
  }
  // At most 4 classes feed each tensor: about 9 edges per tensor, against
  // ~8 million in the explicit graph.
  EXPECT_LT(MinCostFlowEdgeCount(records), 4000u * 9);
  ObjectsAssignment<size_t> plan;
  ASSERT_TRUE(
      AssignObjectsToTensors(records, MemoryStrategy::MINCOSTFLOW, &plan).ok());
  EXPECT_TRUE(ValidateAssignment(records, plan).ok());
}

}  // namespace
}  // namespace planner
}  // namespace bfc
