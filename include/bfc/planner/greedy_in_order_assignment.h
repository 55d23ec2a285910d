// File: bfc/planner/greedy_in_order_assignment.h
// -----------------------------------------------------------------------------
//
// GREEDY_IN_ORDER: walk tensors in order of first_task (ties by index), the way
// a runtime would execute them. Objects whose tensor's last_task is before the
// current tensor's first_task are released to a pool.
//
//   * size_t: if the pool is not empty the tensor takes the released object
//     whose size is closest to its own (the smallest one at least as large, or
//     the largest smaller one, growing it, whichever differs less; ties go to
//     the larger); otherwise it gets a new object. O(n log n).
//   * uint2 / uint3: only objects covering the tensor in every dimension are
//     candidates (textures are not grown); among them the one wasting the
//     fewest elements wins. O(n * objects).
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_GREEDY_IN_ORDER_ASSIGNMENT_H_
#define BFC_PLANNER_GREEDY_IN_ORDER_ASSIGNMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// InvalidArgument for a record with first > last.
absl::Status GreedyInOrderAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);

// For uint2 / uint3. InvalidArgument for a record with first > last.
template <typename TensorSizeT>
absl::Status GreedyInOrderAssignmentMultidimensional(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    ObjectsAssignment<TensorSizeT>* assignment);
extern template absl::Status GreedyInOrderAssignmentMultidimensional<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
extern template absl::Status GreedyInOrderAssignmentMultidimensional<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_GREEDY_IN_ORDER_ASSIGNMENT_H_
