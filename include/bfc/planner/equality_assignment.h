// File: bfc/planner/equality_assignment.h
// -----------------------------------------------------------------------------
//
// EQUALITY: walk tensors in order of first_task; a tensor reuses a released
// object only if the object has exactly its size, otherwise it gets a new one.
// Objects never grow. Good when a graph has many same-shaped activations;
// poor otherwise. Works for size_t, uint2 and uint3 (equal in every
// dimension).
//
// An object is released once the task after its current tensor's last_task
// begins, i.e. it can serve a tensor whose first_task > that last_task.
//
// Runs in O(n log n).
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_EQUALITY_ASSIGNMENT_H_
#define BFC_PLANNER_EQUALITY_ASSIGNMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// InvalidArgument for a record with first > last.
template <typename TensorSizeT>
absl::Status EqualityAssignment(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    ObjectsAssignment<TensorSizeT>* assignment);
extern template absl::Status EqualityAssignment<size_t>(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);
extern template absl::Status EqualityAssignment<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
extern template absl::Status EqualityAssignment<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_EQUALITY_ASSIGNMENT_H_
