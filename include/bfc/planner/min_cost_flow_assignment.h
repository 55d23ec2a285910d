// File: bfc/planner/min_cost_flow_assignment.h
// -----------------------------------------------------------------------------
//
// MINCOSTFLOW (size_t only), after TFLite's min_cost_flow_assignment.cc.
//
// The model. Each tensor t has a left vertex L(t) ("t's object, once t is
// done, is free for a successor") and a right vertex R(t) ("t needs memory").
// Edges, all of capacity 1:
//   source -> L(t)   cost 0
//   R(t)   -> sink   cost 0
//   source -> R(t)   cost size(t)                   (t opens a new object)
//   L(r)   -> R(t)   cost max(0, size(t) - size(r)) (t takes r's object; only
//                                                    if last(r) < first(t))
// A minimum-cost flow of n units saturates every R(t) -> sink; the saturated
// edges into the R vertices split the tensors into chains, one chain per
// shared object, and the cost approximates the memory the plan needs.
//
// TFLite materialises every L(r) -> R(t) edge: n^2/2 of them, which for the
// shared traces (2k-9k tensors) is 1.8-41 million edges (up to ~1.6 GB of
// residual graph, and one shortest-path pass over all of it per tensor). Here
// the reuse edges are factored through release chains, one per distinct tensor
// size: L(r) feeds a hub vertex H(r) in the chain of size(r)'s class, hubs of a
// class are linked in release order (last_task) with unbounded capacity at cost
// 0, and R(t) is fed, at cost max(0, size(t) - s), from the latest hub of each
// class s released before first(t). A path L(r) -> H(r) -> ... -> R(t) exists
// exactly when TFLite's edge L(r) -> R(t) does, with the same cost, so the
// optimum is the same; the graph has O(n * distinct sizes) edges instead of
// O(n^2). Traces have few distinct sizes (11-39 on the shared ones: 67k-163k
// edges); adversarial inputs with all sizes distinct fall back to the quadratic
// size and are bounded below.
//
// The flow is solved by the primal-dual method: successive shortest paths with
// Dijkstra on reduced costs (Johnson potentials; all costs are non-negative),
// pushing a blocking flow over the zero-reduced-cost subgraph after each
// Dijkstra (Dinic-style), so one shortest-path computation serves every
// augmenting path of the same length.
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_MIN_COST_FLOW_ASSIGNMENT_H_
#define BFC_PLANNER_MIN_COST_FLOW_ASSIGNMENT_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// The largest flow graph MinCostFlowAssignment builds by default. The residual
// graph costs about 40 bytes per edge (both directions, CSR), so this caps it
// near 170 MB, and time grows with edges times shortest-path phases. The
// shared traces need at most ~163k edges (lstm-train).
inline constexpr size_t kMaxMinCostFlowEdges = size_t{1} << 22;

// The largest total of tensor sizes MinCostFlowAssignment accepts (2^59,
// 512 PiB): its path costs are int64 sums of sizes, which must stay below
// the "unreachable" distance (2^61) the shortest-path search uses.
inline constexpr size_t kMaxMinCostFlowTotalSize = size_t{1} << 59;

// Edges of the (factored) flow graph MinCostFlowAssignment would build for
// these records. Records must be valid.
size_t MinCostFlowEdgeCount(
    const std::vector<TensorUsageRecord<size_t>>& usage_records);

// InvalidArgument for a record with first > last, when the sizes total more
// than kMaxMinCostFlowTotalSize, or when the graph would have more than
// max_edges edges (the message gives the count and the limit).
absl::Status MinCostFlowAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment,
    size_t max_edges = kMaxMinCostFlowEdges);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_MIN_COST_FLOW_ASSIGNMENT_H_
