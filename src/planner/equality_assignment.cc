#include "bfc/planner/equality_assignment.h"

#include <map>
#include <queue>
#include <set>
#include <type_traits>
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

  // Released objects, by size. TFLite reuses, for 1-D sizes (its hashed
  // pool), the most recently released object of the size: a stack; for 2-D
  // and 3-D sizes (its linear scan over objects), the lowest-numbered free
  // one: an ordered set. Both are kept here, with the same results.
  constexpr bool kStack = std::is_same_v<TensorSizeT, size_t>;
  using FreeIds =
      std::conditional_t<kStack, std::vector<size_t>, std::set<size_t>>;
  std::map<TensorSizeT, FreeIds, internal::SizeLess> released;
  std::priority_queue<internal::QueueRecord> in_use;
  for (size_t i : internal::OrderByFirstTask(usage_records)) {
    const TensorUsageRecord<TensorSizeT>& record = usage_records[i];
    while (!in_use.empty() && in_use.top().last_task < record.first_task) {
      const size_t id = in_use.top().object_id;
      FreeIds& ids = released[assignment->object_sizes[id]];
      if constexpr (kStack) {
        ids.push_back(id);
      } else {
        ids.insert(id);
      }
      in_use.pop();
    }
    size_t id;
    auto it = released.find(record.tensor_size);
    if (it != released.end() && !it->second.empty()) {
      if constexpr (kStack) {
        id = it->second.back();
        it->second.pop_back();
      } else {
        id = *it->second.begin();
        it->second.erase(it->second.begin());
      }
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
