#include "bfc/planner/naive_assignment.h"

#include <map>
#include <queue>
#include <vector>

#include "planner/internal.h"

namespace bfc {
namespace planner {

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

template absl::Status NaiveAssignment<size_t>(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);
template absl::Status NaiveAssignment<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
template absl::Status NaiveAssignment<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc
