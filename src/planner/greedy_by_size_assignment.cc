#include "bfc/planner/greedy_by_size_assignment.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
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

// TFLite's rule, kept exactly (greedy_equivalence_test checks it against the
// quadratic original, which walked every placed tensor for each new one and
// skipped those not intersecting it in time): the placed tensors that
// intersect the new one's interval [f, l] are found directly, as those that
// start within it (an ordered index by first_task) and those that start
// before f and are still live at f (a stabbing query at f), then sorted by
// offset (ties in placement order, as the original's list kept them) for the
// same gap scan. Time O(n log n + sum of k log k), k the placed tensors that
// intersect each new one: linear in n while the live set is bounded, as on
// any trace; when everything is live at once k is n and nothing can do better
// for this rule, since each placement depends on every intersecting offset.
absl::Status GreedyBySizeAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    size_t base_addr_align_bytes, OffsetsAssignment* assignment) {
  absl::Status status =
      internal::CheckAlignment(base_addr_align_bytes, "base_addr_align_bytes");
  if (!status.ok()) return status;
  status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  assignment->offsets.assign(n, 0);
  assignment->total_size = 0;
  if (n == 0) return absl::OkStatus();

  // Placed tensors by (first_task, tensor), and by the start tasks they are
  // live at (start-task indices [start_index, end_index]).
  const std::vector<TaskId> tasks = internal::StartTasks(usage_records);
  std::set<std::pair<TaskId, size_t>> placed_by_first;
  internal::StabIndex placed_live(tasks.size());
  std::vector<size_t> start_index(n);
  // Placement order of each tensor: the tie order among equal offsets.
  std::vector<size_t> sequence(n);
  std::vector<size_t> near;
  size_t placed = 0;
  for (size_t i : OrderBySizeDescending(usage_records)) {
    const TensorUsageRecord<size_t>& rec = usage_records[i];
    size_t first_index, last_index;
    internal::StartTaskRange(tasks, rec, &first_index, &last_index);

    near.clear();
    placed_live.Stab(first_index, &near);
    // Those also start within [f, l]; they come next, once.
    near.erase(
        std::remove_if(near.begin(), near.end(),
                       [&](size_t j) { return start_index[j] == first_index; }),
        near.end());
    for (auto it = placed_by_first.lower_bound({rec.first_task, 0});
         it != placed_by_first.end() && it->first <= rec.last_task; ++it) {
      near.push_back(it->second);
    }
    // Linear on traces (few tensors live at once), quadratic when all are:
    // charged as the sort below costs.
    if (!internal::ChargeWork(
            near.size() *
            static_cast<uint64_t>(65 - __builtin_clzll(near.size() | 1)))) {
      return internal::WorkBudgetSpent();
    }
    std::sort(near.begin(), near.end(), [&](size_t a, size_t b) {
      if (assignment->offsets[a] != assignment->offsets[b]) {
        return assignment->offsets[a] < assignment->offsets[b];
      }
      return sequence[a] < sequence[b];
    });

    size_t best_gap = kNotAssigned;
    size_t best_offset = kNotAssigned;
    // End (aligned) of the highest intersecting tensor below the one being
    // looked at.
    size_t prev_end = 0;
    for (size_t j : near) {
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
    assignment->offsets[i] = best_offset;
    assignment->total_size =
        std::max(assignment->total_size, best_offset + rec.tensor_size);
    sequence[i] = placed++;
    start_index[i] = first_index;
    placed_by_first.emplace(rec.first_task, i);
    placed_live.Add(first_index, last_index, i);
  }
  return absl::OkStatus();
}

// TFLite's algorithm as it is: each round scans the unassigned tensors for
// the highest priority and updates their distances to the object that
// changed, O(n^2 + n * objects) time and O(n * objects) memory (the dist
// arrays). An event-driven version that visits only the tensors whose best
// distance changes was tried and measured slower (3x to 6x on lstm-train
// tiled to 1e4..1e5 events): on long traces those changes themselves grow
// faster than n, and recomputing a best over ordered schedules costs far
// more than this scan over flat arrays. PlanOptions::max_quadratic_tensors
// guards it.
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
    // Quadratic: each round scans every tensor (twice, but charged once, so
    // that n <= max_quadratic_tensors stays within its budget).
    if (!internal::ChargeWork(n)) return internal::WorkBudgetSpent();
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

}  // namespace planner
}  // namespace bfc
