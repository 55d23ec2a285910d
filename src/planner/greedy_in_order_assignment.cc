#include "bfc/planner/greedy_in_order_assignment.h"

#include <iterator>
#include <list>
#include <map>
#include <queue>
#include <set>
#include <utility>
#include <vector>

#include "planner/internal.h"

namespace bfc {
namespace planner {

absl::Status GreedyInOrderAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  assignment->object_ids.assign(usage_records.size(), kNotAssigned);
  assignment->object_sizes.clear();

  // Released objects as (size, id), so lower_bound finds the closest sizes.
  std::set<std::pair<size_t, size_t>> released;
  std::priority_queue<internal::QueueRecord> in_use;
  for (size_t i : internal::OrderByFirstTask(usage_records)) {
    const TensorUsageRecord<size_t>& record = usage_records[i];
    while (!in_use.empty() && in_use.top().last_task < record.first_task) {
      const size_t id = in_use.top().object_id;
      released.emplace(assignment->object_sizes[id], id);
      in_use.pop();
    }
    const size_t size = record.tensor_size;
    size_t id;
    if (released.empty()) {
      id = assignment->object_sizes.size();
      assignment->object_sizes.push_back(size);
    } else {
      // The smallest object at least as large, against the largest smaller
      // one (which would grow): whichever is closer in size.
      auto best = released.lower_bound({size, 0});
      if (best == released.end() ||
          (best != released.begin() &&
           size - std::prev(best)->first < best->first - size)) {
        best = std::prev(best);
      }
      id = best->second;
      released.erase(best);
      assignment->object_sizes[id] =
          std::max(assignment->object_sizes[id], size);
    }
    assignment->object_ids[i] = id;
    in_use.push({record.last_task, id});
  }
  return absl::OkStatus();
}

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

template absl::Status GreedyInOrderAssignmentMultidimensional<uint2>(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    ObjectsAssignment<uint2>* assignment);
template absl::Status GreedyInOrderAssignmentMultidimensional<uint3>(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    ObjectsAssignment<uint3>* assignment);

}  // namespace planner
}  // namespace bfc
