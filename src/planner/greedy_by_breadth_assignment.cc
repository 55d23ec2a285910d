#include "bfc/planner/greedy_by_breadth_assignment.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <utility>
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

// TFLite's rule, kept exactly (greedy_equivalence_test checks it against the
// quadratic original, which rescanned every unassigned tensor at each task and
// every object for each tensor):
//  - the tensors live at a task come from a StabIndex over start tasks,
//    taken as they are found (each listing read once);
//  - the object is found in an ordered index of (size, id): the smallest
//    object at least as big as the tensor with room, else the biggest smaller
//    one with room, the lowest id among equal sizes. Only objects without room
//    are passed over, so the search is output-sensitive: O(log objects) plus
//    one HasRoom per object that is busy over the tensor's interval.
// Time O(n log n + sum over tensors of the objects skipped); memory O(n log n).
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

  // Each tensor listed over the start tasks it is live at. Every tensor live
  // at a visited task is assigned there, so each visit takes (and forgets)
  // what it finds: each listing is read once.
  internal::StabIndex live_at(tasks.size());
  for (size_t i = 0; i < n; ++i) {
    const TensorUsageRecord<size_t>& rec = usage_records[i];
    size_t lo, hi;
    internal::StartTaskRange(tasks, rec, &lo, &hi);
    live_at.Add(lo, hi, i);
  }

  // Objects by (size, id): the order the choice is made in.
  std::set<std::pair<size_t, size_t>> by_size;
  std::vector<Schedule> schedules;
  size_t num_assigned = 0;
  std::vector<size_t> live;
  for (size_t k : task_order) {
    live.clear();
    live_at.Take(k, &live);
    // Largest first, ties by index (the original's stable order). Tensors
    // already assigned at an earlier task through another of their nodes are
    // skipped below.
    std::sort(live.begin(), live.end(), [&](size_t a, size_t b) {
      if (usage_records[a].tensor_size != usage_records[b].tensor_size) {
        return usage_records[a].tensor_size > usage_records[b].tensor_size;
      }
      return a < b;
    });
    for (size_t i : live) {
      if (assignment->object_ids[i] != kNotAssigned) continue;
      const TensorUsageRecord<size_t>& rec = usage_records[i];
      size_t best = kNotAssigned;
      // Objects looked at: few on traces, every one when all are busy.
      uint64_t visits = 1;
      // The smallest object that holds the tensor, lowest id among equals.
      for (auto it = by_size.lower_bound({rec.tensor_size, 0});
           it != by_size.end(); ++it) {
        ++visits;
        if (HasRoom(schedules[it->second], rec)) {
          best = it->second;
          break;
        }
      }
      // Else the biggest smaller one, lowest id among equals: walk down to
      // the first size with room, then take its lowest id with room.
      if (best == kNotAssigned) {
        auto it = by_size.lower_bound({rec.tensor_size, 0});
        while (it != by_size.begin()) {
          --it;
          ++visits;
          if (!HasRoom(schedules[it->second], rec)) continue;
          const size_t size = it->first;
          best = it->second;
          while (it != by_size.begin() && std::prev(it)->first == size) {
            --it;
            if (HasRoom(schedules[it->second], rec)) best = it->second;
          }
          break;
        }
      }
      if (!internal::ChargeWork(visits)) return internal::WorkBudgetSpent();
      if (best == kNotAssigned) {
        best = schedules.size();
        schedules.emplace_back();
        assignment->object_sizes.push_back(rec.tensor_size);
        by_size.emplace(rec.tensor_size, best);
      } else if (assignment->object_sizes[best] < rec.tensor_size) {
        by_size.erase({assignment->object_sizes[best], best});
        assignment->object_sizes[best] = rec.tensor_size;
        by_size.emplace(rec.tensor_size, best);
      }
      schedules[best].emplace(rec.first_task, rec.last_task);
      assignment->object_ids[i] = best;
      ++num_assigned;
    }
  }
  if (num_assigned != n) {
    return absl::InternalError(
        "GreedyByBreadthAssignment left tensors unassigned");
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc
