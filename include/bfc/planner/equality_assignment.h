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

#include <map>
#include <queue>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/internal.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// InvalidArgument for a record with first > last.
template <typename TensorSizeT>
absl::Status EqualityAssignment(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    ObjectsAssignment<TensorSizeT>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  assignment->object_ids.assign(usage_records.size(), kNotAssigned);
  assignment->object_sizes.clear();

  // Released objects, by size. Each vector is used as a stack, so the most
  // recently released object of a size is reused first.
  std::map<TensorSizeT, std::vector<size_t>, internal::SizeLess> released;
  std::priority_queue<internal::QueueRecord> in_use;
  for (size_t i : internal::OrderByFirstTask(usage_records)) {
    const TensorUsageRecord<TensorSizeT>& record = usage_records[i];
    while (!in_use.empty() && in_use.top().last_task < record.first_task) {
      const size_t id = in_use.top().object_id;
      released[assignment->object_sizes[id]].push_back(id);
      in_use.pop();
    }
    size_t id;
    auto it = released.find(record.tensor_size);
    if (it != released.end() && !it->second.empty()) {
      id = it->second.back();
      it->second.pop_back();
    } else {
      id = assignment->object_sizes.size();
      assignment->object_sizes.push_back(record.tensor_size);
    }
    assignment->object_ids[i] = id;
    in_use.push({record.last_task, id});
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_EQUALITY_ASSIGNMENT_H_
