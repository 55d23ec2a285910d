#include "bfc/planner/equality_assignment.h"

#include <map>
#include <queue>
#include <vector>

#include "planner/internal.h"

namespace bfc {
namespace planner {

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

template absl::Status EqualityAssignment<size_t>(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);
template absl::Status EqualityAssignment<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
template absl::Status EqualityAssignment<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc
