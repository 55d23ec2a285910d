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

#include <list>
#include <queue>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/internal.h"
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
    ObjectsAssignment<TensorSizeT>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  assignment->object_ids.assign(usage_records.size(), kNotAssigned);
  assignment->object_sizes.clear();

  std::list<size_t> released;
  std::priority_queue<internal::QueueRecord> in_use;
  for (size_t i : internal::OrderByFirstTask(usage_records)) {
    const TensorUsageRecord<TensorSizeT>& record = usage_records[i];
    while (!in_use.empty() && in_use.top().last_task < record.first_task) {
      released.push_back(in_use.top().object_id);
      in_use.pop();
    }
    auto best = released.end();
    size_t best_waste = 0;
    for (auto it = released.begin(); it != released.end(); ++it) {
      const TensorSizeT& object_size = assignment->object_sizes[*it];
      if (!internal::IsCoveringObject(object_size, record.tensor_size)) {
        continue;
      }
      const size_t waste = internal::NumElements(object_size) -
                           internal::NumElements(record.tensor_size);
      if (best == released.end() || waste < best_waste) {
        best = it;
        best_waste = waste;
      }
    }
    size_t id;
    if (best == released.end()) {
      id = assignment->object_sizes.size();
      assignment->object_sizes.push_back(record.tensor_size);
    } else {
      id = *best;
      released.erase(best);
    }
    assignment->object_ids[i] = id;
    in_use.push({record.last_task, id});
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_GREEDY_IN_ORDER_ASSIGNMENT_H_
