#include "bfc/planner/greedy_by_breadth_assignment.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <vector>

#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

// The intervals of the tensors already in one object: first_task -> last_task,
// pairwise disjoint.
using Schedule = std::map<TaskId, TaskId>;

bool HasRoom(const Schedule& schedule, const TensorUsageRecord<size_t>& rec) {
  auto next = schedule.lower_bound(rec.first_task);
  if (next != schedule.end() && next->first <= rec.last_task) return false;
  if (next != schedule.begin() && std::prev(next)->second >= rec.first_task) {
    return false;
  }
  return true;
}

}  // namespace

absl::Status GreedyByBreadthAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  assignment->object_ids.assign(n, kNotAssigned);
  assignment->object_sizes.clear();
  if (n == 0) return absl::OkStatus();

  // Breadth of every start task, by a sweep over the records in time order.
  const std::vector<TaskId> tasks = internal::StartTasks(usage_records);
  std::vector<size_t> breadth(tasks.size(), 0);
  {
    // breadth = (sum of sizes starting at or before the task) - (sum of sizes
    // ending before it).
    std::vector<size_t> by_last(n);
    std::iota(by_last.begin(), by_last.end(), size_t{0});
    std::sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
      return usage_records[a].last_task < usage_records[b].last_task;
    });
    std::vector<size_t> started(tasks.size(), 0);
    for (const auto& rec : usage_records) {
      const size_t k = static_cast<size_t>(
          std::lower_bound(tasks.begin(), tasks.end(), rec.first_task) -
          tasks.begin());
      started[k] += rec.tensor_size;
    }
    size_t live = 0;
    size_t next_end = 0;
    for (size_t k = 0; k < tasks.size(); ++k) {
      while (next_end < n &&
             usage_records[by_last[next_end]].last_task < tasks[k]) {
        live -= usage_records[by_last[next_end++]].tensor_size;
      }
      live += started[k];
      breadth[k] = live;
    }
  }
  std::vector<size_t> task_order(tasks.size());
  std::iota(task_order.begin(), task_order.end(), size_t{0});
  std::stable_sort(task_order.begin(), task_order.end(),
                   [&](size_t a, size_t b) { return breadth[a] > breadth[b]; });

  // Unassigned tensors, largest first (ties by index), compacted after each
  // task so later tasks scan only what is left.
  std::vector<size_t> unassigned(n);
  std::iota(unassigned.begin(), unassigned.end(), size_t{0});
  std::stable_sort(
      unassigned.begin(), unassigned.end(), [&](size_t a, size_t b) {
        return usage_records[a].tensor_size > usage_records[b].tensor_size;
      });

  std::vector<Schedule> schedules;
  for (size_t k : task_order) {
    const TaskId task = tasks[k];
    bool assigned_any = false;
    for (size_t i : unassigned) {
      const TensorUsageRecord<size_t>& rec = usage_records[i];
      if (rec.first_task > task || rec.last_task < task) continue;
      const size_t num_objects = schedules.size();
      size_t best = num_objects;
      for (size_t id = 0; id < num_objects; ++id) {
        if (best != num_objects) {
          // Only look at objects that would beat the best so far: the
          // smallest one that holds the tensor, else the largest.
          const size_t best_size = assignment->object_sizes[best];
          const size_t size = assignment->object_sizes[id];
          if (best_size < rec.tensor_size) {
            if (size <= best_size) continue;
          } else if (size < rec.tensor_size || size >= best_size) {
            continue;
          }
        }
        if (HasRoom(schedules[id], rec)) best = id;
      }
      if (best == num_objects) {
        schedules.emplace_back();
        assignment->object_sizes.push_back(rec.tensor_size);
      } else {
        assignment->object_sizes[best] =
            std::max(assignment->object_sizes[best], rec.tensor_size);
      }
      schedules[best].emplace(rec.first_task, rec.last_task);
      assignment->object_ids[i] = best;
      assigned_any = true;
    }
    if (assigned_any) {
      unassigned.erase(std::remove_if(unassigned.begin(), unassigned.end(),
                                      [&](size_t i) {
                                        return assignment->object_ids[i] !=
                                               kNotAssigned;
                                      }),
                       unassigned.end());
    }
  }
  if (!unassigned.empty()) {
    return absl::InternalError(
        "GreedyByBreadthAssignment left tensors unassigned");
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc
