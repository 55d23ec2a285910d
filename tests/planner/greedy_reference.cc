// The greedy strategies before their O(n log n) rewrite, verbatim apart from
// the namespace: the oracle of greedy_equivalence_test.
#include "planner/greedy_reference.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace reference {
namespace {

// Indices sorted by non-increasing tensor size, ties by index.
std::vector<size_t> OrderBySizeDescending(
    const std::vector<TensorUsageRecord<size_t>>& usage_records) {
  std::vector<size_t> order(usage_records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return usage_records[a].tensor_size > usage_records[b].tensor_size;
  });
  return order;
}

bool Intersect(const TensorUsageRecord<size_t>& a,
               const TensorUsageRecord<size_t>& b) {
  return a.first_task <= b.last_task && b.first_task <= a.last_task;
}

// Priority of an unassigned tensor in GreedyBySizeDistPriorityAssignment.
struct SizeDistPriority {
  size_t position = 0;  // size class: lower is bigger
  size_t tensor_size = 0;
  size_t index = 0;  // the tensor (usage record index)
  // dist[j]: the smallest gap in tasks between this tensor and the tensors of
  // object j, or kNotAssigned if one of them intersects it.
  std::vector<size_t> dist;
  size_t best_dist = kNotAssigned;
  size_t best_object = kNotAssigned;

  // Whether this tensor should be assigned before `other`.
  bool Precedes(const SizeDistPriority& other) const {
    if (position != other.position) return position < other.position;
    if (best_dist != other.best_dist) return best_dist < other.best_dist;
    return tensor_size > other.tensor_size;
  }

  void RecalcBestDist() {
    best_dist = kNotAssigned;
    best_object = kNotAssigned;
    for (size_t id = 0; id < dist.size(); ++id) {
      if (dist[id] < best_dist) {
        best_dist = dist[id];
        best_object = id;
      }
    }
  }
};

}  // namespace

absl::Status GreedyBySizeAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    size_t base_addr_align_bytes, OffsetsAssignment* assignment) {
  absl::Status status =
      internal::CheckAlignment(base_addr_align_bytes, "base_addr_align_bytes");
  if (!status.ok()) return status;
  status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  assignment->offsets.assign(usage_records.size(), 0);
  assignment->total_size = 0;

  // Placed tensors, ordered by offset.
  std::vector<size_t> placed;
  placed.reserve(usage_records.size());
  for (size_t i : OrderBySizeDescending(usage_records)) {
    const TensorUsageRecord<size_t>& rec = usage_records[i];
    size_t best_gap = kNotAssigned;
    size_t best_offset = kNotAssigned;
    // End (aligned) of the highest placed tensor that intersects `rec` in
    // time, among those below the one being looked at.
    size_t prev_end = 0;
    for (size_t j : placed) {
      if (!Intersect(usage_records[j], rec)) continue;
      const size_t offset = assignment->offsets[j];
      if (offset >= prev_end) {
        const size_t gap = offset - prev_end;
        if (gap >= rec.tensor_size && gap < best_gap) {
          best_gap = gap;
          best_offset = prev_end;
        }
      }
      prev_end = std::max(
          prev_end, internal::AlignByN(offset + usage_records[j].tensor_size,
                                       base_addr_align_bytes));
    }
    if (best_offset == kNotAssigned) best_offset = prev_end;
    auto at = std::upper_bound(placed.begin(), placed.end(), best_offset,
                               [&](size_t offset, size_t j) {
                                 return offset < assignment->offsets[j];
                               });
    placed.insert(at, i);
    assignment->offsets[i] = best_offset;
    assignment->total_size =
        std::max(assignment->total_size, best_offset + rec.tensor_size);
  }
  return absl::OkStatus();
}

absl::Status GreedyBySizeDistPriorityAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  assignment->object_ids.assign(n, kNotAssigned);
  assignment->object_sizes.clear();
  if (n == 0) return absl::OkStatus();

  const std::vector<size_t> positional_max =
      internal::CalculatePositionalMaximums(usage_records);
  std::vector<SizeDistPriority> info(n);
  for (size_t i = 0; i < n; ++i) {
    info[i].index = i;
    info[i].tensor_size = usage_records[i].tensor_size;
    // The rightmost position whose maximum still covers the tensor. Position
    // 0 always does: every tensor is live at its first task.
    size_t pos = 0;
    while (pos < positional_max.size() &&
           positional_max[pos] >= info[i].tensor_size) {
      ++pos;
    }
    if (pos == 0) {
      return absl::InternalError(absl::StrCat(
          "tensor ", i, " is larger than every positional maximum"));
    }
    info[i].position = pos - 1;
  }

  for (size_t round = 0; round < n; ++round) {
    size_t best = kNotAssigned;
    for (size_t k = 0; k < n; ++k) {
      if (assignment->object_ids[info[k].index] != kNotAssigned) continue;
      if (best == kNotAssigned || info[k].Precedes(info[best])) best = k;
    }
    if (best == kNotAssigned) {
      return absl::InternalError("no unassigned tensor left before the end");
    }
    const size_t chosen = info[best].index;
    const TensorUsageRecord<size_t>& chosen_rec = usage_records[chosen];
    size_t object = info[best].best_object;
    const bool new_object = info[best].best_dist == kNotAssigned;
    if (new_object) {
      object = assignment->object_sizes.size();
      assignment->object_sizes.push_back(chosen_rec.tensor_size);
    } else {
      assignment->object_sizes[object] =
          std::max(assignment->object_sizes[object], chosen_rec.tensor_size);
    }
    assignment->object_ids[chosen] = object;

    // The remaining tensors' distances to `object` may have changed.
    for (SizeDistPriority& other : info) {
      if (assignment->object_ids[other.index] != kNotAssigned) continue;
      if (!new_object && other.dist[object] == kNotAssigned) continue;
      const TensorUsageRecord<size_t>& rec = usage_records[other.index];
      size_t dist = kNotAssigned;
      if (rec.last_task < chosen_rec.first_task) {
        dist = chosen_rec.first_task - rec.last_task;
      } else if (chosen_rec.last_task < rec.first_task) {
        dist = rec.first_task - chosen_rec.last_task;
      }
      if (new_object) {
        other.dist.push_back(dist);
      } else if (dist == kNotAssigned) {
        other.dist[object] = kNotAssigned;
        if (other.best_object == object) other.RecalcBestDist();
      } else {
        other.dist[object] = std::min(other.dist[object], dist);
      }
      if (dist < other.best_dist) {
        other.best_dist = dist;
        other.best_object = object;
      }
    }
  }
  return absl::OkStatus();
}

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

}  // namespace reference
}  // namespace planner
}  // namespace bfc
