// File: bfc/planner/naive_assignment.h
// -----------------------------------------------------------------------------
//
// NAIVE: every tensor gets an object of its own, so nothing is shared. The
// total is the sum of all tensor sizes: the upper bound every other strategy
// must beat. Works for size_t, uint2 and uint3.
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_NAIVE_ASSIGNMENT_H_
#define BFC_PLANNER_NAIVE_ASSIGNMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// Object i is tensor i. InvalidArgument for a record with first > last.
template <typename TensorSizeT>
absl::Status NaiveAssignment(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    ObjectsAssignment<TensorSizeT>* assignment);
extern template absl::Status NaiveAssignment<size_t>(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);
extern template absl::Status NaiveAssignment<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
extern template absl::Status NaiveAssignment<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_NAIVE_ASSIGNMENT_H_
