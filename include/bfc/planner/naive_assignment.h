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
#include "bfc/planner/internal.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// Object i is tensor i. InvalidArgument for a record with first > last.
template <typename TensorSizeT>
absl::Status NaiveAssignment(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    ObjectsAssignment<TensorSizeT>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  assignment->object_ids.resize(usage_records.size());
  assignment->object_sizes.clear();
  assignment->object_sizes.reserve(usage_records.size());
  for (size_t i = 0; i < usage_records.size(); ++i) {
    assignment->object_ids[i] = i;
    assignment->object_sizes.push_back(usage_records[i].tensor_size);
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_NAIVE_ASSIGNMENT_H_
