// File: bfc/planner/greedy_by_size_assignment.h
// -----------------------------------------------------------------------------
//
// GREEDY_BY_SIZE (size_t only), in its two forms.
//
// Offsets (GreedyBySizeAssignment): tensors in non-increasing order of size
// (ties by index). Each is placed, among the already placed tensors whose
// intervals intersect its own, in the smallest gap that fits it; if none
// fits, right after the highest of them. Ends of placed tensors are rounded up
// to base_addr_align_bytes, so every offset is aligned. Only the placed
// tensors that intersect each new one are visited: O(n log n + sum of k log k)
// for k intersecting tensors each, linear in n while the live set is bounded.
//
// Objects (GreedyBySizeDistPriorityAssignment): positional maximums split the
// tensors into size classes (the rightmost position whose positional maximum
// is >= the tensor's size). Repeatedly the unassigned tensor with the highest
// priority is assigned: lower position first (bigger tensors), then the
// smallest distance in tasks to an object that can take it (a tight fit in
// time), then the bigger size. It joins that object (growing it if needed) or,
// with no object free over its interval, gets a new one; distances of the
// remaining tensors are then updated. O(n^2 + n * objects) time, O(n * objects)
// memory.
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_GREEDY_BY_SIZE_ASSIGNMENT_H_
#define BFC_PLANNER_GREEDY_BY_SIZE_ASSIGNMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// InvalidArgument for a record with first > last or base_addr_align_bytes 0.
absl::Status GreedyBySizeAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    size_t base_addr_align_bytes, OffsetsAssignment* assignment);

// InvalidArgument for a record with first > last.
absl::Status GreedyBySizeDistPriorityAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_GREEDY_BY_SIZE_ASSIGNMENT_H_
