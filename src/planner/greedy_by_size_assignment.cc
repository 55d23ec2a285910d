#include "bfc/planner/greedy_by_size_assignment.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
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

// Intervals over [0, num_points) for stabbing queries: a segment tree in
// which each interval is listed in the O(log T) nodes that cover it, so the
// intervals containing a point are those listed on the path to its leaf, each
// exactly once. O(log T + found) per query.
class StabIndex {
 public:
  explicit StabIndex(size_t num_points) : leaves_(1) {
    while (leaves_ < num_points) leaves_ *= 2;
    lists_.resize(2 * leaves_);
  }

  // Lists `id` over the points [lo, hi] (inclusive).
  void Add(size_t lo, size_t hi, size_t id) {
    for (size_t l = lo + leaves_, r = hi + leaves_ + 1; l < r; l /= 2, r /= 2) {
      if (l & 1) lists_[l++].push_back(id);
      if (r & 1) lists_[--r].push_back(id);
    }
  }

  // Appends the ids of the intervals containing `point` to *out.
  void Stab(size_t point, std::vector<size_t>* out) const {
    for (size_t node = point + leaves_; node >= 1; node /= 2) {
      out->insert(out->end(), lists_[node].begin(), lists_[node].end());
    }
  }

 private:
  size_t leaves_;
  std::vector<std::vector<size_t>> lists_;
};

// A segment tree of maxima over n leaves, so that the leaves of an index
// range whose value exceeds a threshold are found in O((1 + found) * log n)
// time: a subtree whose maximum does not exceed it is never entered. Values are
// 128-bit so that task sums and differences need no saturation.
class MaxTree {
 public:
  __extension__ typedef __int128 Value;

  MaxTree(size_t n, Value initial) : leaves_(1) {
    while (leaves_ < n) leaves_ *= 2;
    nodes_.assign(2 * leaves_, initial);
  }

  void Set(size_t i, Value value) {
    size_t node = leaves_ + i;
    nodes_[node] = value;
    for (node /= 2; node >= 1; node /= 2) {
      nodes_[node] = std::max(nodes_[2 * node], nodes_[2 * node + 1]);
    }
  }

  // Appends to *out every leaf index in [lo, hi) whose value is > threshold.
  void FindAbove(size_t lo, size_t hi, Value threshold,
                 std::vector<size_t>* out) const {
    if (lo < hi) Find(1, 0, leaves_, lo, hi, threshold, out);
  }

 private:
  void Find(size_t node, size_t node_lo, size_t node_hi, size_t lo, size_t hi,
            Value threshold, std::vector<size_t>* out) const {
    if (node_hi <= lo || hi <= node_lo || nodes_[node] <= threshold) return;
    if (node >= leaves_) {
      out->push_back(node - leaves_);
      return;
    }
    const size_t mid = node_lo + (node_hi - node_lo) / 2;
    Find(2 * node, node_lo, mid, lo, hi, threshold, out);
    Find(2 * node + 1, mid, node_hi, lo, hi, threshold, out);
  }

  size_t leaves_;
  std::vector<Value> nodes_;
};

// The tensors of one object: first_task -> last_task, pairwise disjoint.
using Schedule = std::map<TaskId, TaskId>;

// The smallest gap in tasks between `rec` and the tensors of an object, or
// kNotAssigned if one of them intersects it. Objects are never empty, so a
// compatible object always has a finite distance (>= 1).
size_t DistanceToObject(const Schedule& schedule,
                        const TensorUsageRecord<size_t>& rec) {
  size_t dist = kNotAssigned;
  auto next = schedule.lower_bound(rec.first_task);
  if (next != schedule.end()) {
    if (next->first <= rec.last_task) return kNotAssigned;
    dist = next->first - rec.last_task;
  }
  if (next != schedule.begin()) {
    const TaskId prev_last = std::prev(next)->second;
    if (prev_last >= rec.first_task) return kNotAssigned;
    dist = std::min(dist, rec.first_task - prev_last);
  }
  return dist;
}

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
  StabIndex placed_live(tasks.size());
  std::vector<size_t> start_index(n);
  // Placement order of each tensor: the tie order among equal offsets.
  std::vector<size_t> sequence(n);
  std::vector<size_t> near;
  size_t placed = 0;
  for (size_t i : OrderBySizeDescending(usage_records)) {
    const TensorUsageRecord<size_t>& rec = usage_records[i];
    const size_t first_index = static_cast<size_t>(
        std::lower_bound(tasks.begin(), tasks.end(), rec.first_task) -
        tasks.begin());
    const size_t last_index =
        static_cast<size_t>(
            std::upper_bound(tasks.begin(), tasks.end(), rec.last_task) -
            tasks.begin()) -
        1;

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

// TFLite's rule, kept exactly (greedy_equivalence_test checks it against the
// quadratic original), without its rescan of every unassigned tensor after
// each assignment:
//  - best_dist[t] / best_object[t] are what the original keeps: the distance
//    to the nearest object free over t's interval and that object. After an
//    assignment only these can change: tensors intersecting the chosen one
//    whose best object it joined (recomputed over the objects: the lowest id
//    among the nearest), tensors not intersecting it that are now strictly
//    nearer to that object (it becomes their best, even on a tie with a lower
//    id, as in the original), and, for a new object, the tensors that had
//    none. Segment trees over the tensors in first_task / last_task order
//    find exactly the first two groups.
//  - the next tensor is the first of an ordered set keyed by the priority.
// Each round costs O((1 + changed) log n + recomputed * objects). What stays
// super-linear is `changed` itself: on a long trace a tensor's nearest object
// keeps getting nearer as the tensors around it are placed, and the rule
// needs every such update (they decide ties), so the number of updates grows
// faster than n (measured on lstm-train tiled: 0.6M, 2.9M, 15M updates for
// 5k, 10k, 20k tensors). PlanOptions::max_quadratic_tensors still guards it.
absl::Status GreedyBySizeDistPriorityAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  assignment->object_ids.assign(n, kNotAssigned);
  assignment->object_sizes.clear();
  if (n == 0) return absl::OkStatus();

  // position[i]: the rightmost position whose maximum still covers tensor i
  // (positional maximums are non-increasing). Position 0 always does: every
  // tensor is live at its first task.
  const std::vector<size_t> positional_max =
      internal::CalculatePositionalMaximums(usage_records);
  std::vector<size_t> position(n);
  for (size_t i = 0; i < n; ++i) {
    const size_t covering = static_cast<size_t>(
        std::upper_bound(positional_max.begin(), positional_max.end(),
                         usage_records[i].tensor_size, std::greater<size_t>()) -
        positional_max.begin());
    if (covering == 0) {
      return absl::InternalError(absl::StrCat(
          "tensor ", i, " is larger than every positional maximum"));
    }
    position[i] = covering - 1;
  }

  std::vector<size_t> best_dist(n, kNotAssigned);
  std::vector<size_t> best_object(n, kNotAssigned);
  // Unassigned tensors, highest priority first: lower position, then smaller
  // best_dist, then bigger size, then lower index (the original's scan order).
  auto precedes = [&](size_t a, size_t b) {
    if (position[a] != position[b]) return position[a] < position[b];
    if (best_dist[a] != best_dist[b]) return best_dist[a] < best_dist[b];
    if (usage_records[a].tensor_size != usage_records[b].tensor_size) {
      return usage_records[a].tensor_size > usage_records[b].tensor_size;
    }
    return a < b;
  };
  std::set<size_t, decltype(precedes)> queue(precedes);
  for (size_t i = 0; i < n; ++i) queue.insert(i);

  // by_first / by_last: tensors in first_task / last_task order; rank_* maps a
  // tensor to its leaf.
  std::vector<size_t> by_first = internal::OrderByFirstTask(usage_records);
  std::vector<size_t> by_last(n);
  std::iota(by_last.begin(), by_last.end(), size_t{0});
  std::stable_sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
    return usage_records[a].last_task < usage_records[b].last_task;
  });
  std::vector<size_t> rank_first(n), rank_last(n);
  for (size_t k = 0; k < n; ++k) {
    rank_first[by_first[k]] = k;
    rank_last[by_last[k]] = k;
  }
  using Value = MaxTree::Value;
  // Below any task and any negated task.
  const Value kNone = -(Value{1} << 65);
  // live_until (first_task order): last_task of an unassigned tensor, -1 once
  // assigned; finds the unassigned tensors that intersect an interval.
  MaxTree live_until(n, -1);
  // reach_right (last_task order): last_task + best_dist; a tensor that ends
  // before task f is strictly nearer to a tensor starting at f than to its
  // best object iff this exceeds f.
  MaxTree reach_right(n, kNone);
  // reach_left (first_task order): best_dist - first_task; a tensor that
  // starts after task l is strictly nearer to a tensor ending at l iff this
  // exceeds -l.
  MaxTree reach_left(n, kNone);
  // Unassigned tensors with no object free over their interval (best_dist
  // kNotAssigned). They are kept out of the reach trees: every existing object
  // has a tensor intersecting them, and an object never becomes free again,
  // so only a new object can change them. Without this they would be found,
  // and rejected, by every assignment: quadratic.
  std::set<size_t> no_object;
  auto update_reach = [&](size_t i) {
    const bool none = best_dist[i] == kNotAssigned;
    if (none) {
      no_object.insert(i);
    } else {
      no_object.erase(i);
    }
    reach_right.Set(
        rank_last[i],
        none ? kNone : Value{usage_records[i].last_task} + best_dist[i]);
    reach_left.Set(rank_first[i], none
                                      ? kNone
                                      : Value{best_dist[i]} -
                                            Value{usage_records[i].first_task});
  };
  for (size_t i = 0; i < n; ++i) {
    live_until.Set(rank_first[i], Value{usage_records[i].last_task});
    update_reach(i);
  }

  std::vector<Schedule> schedules;
  std::vector<size_t> found;
  while (!queue.empty()) {
    const size_t chosen = *queue.begin();
    queue.erase(queue.begin());
    const TensorUsageRecord<size_t>& chosen_rec = usage_records[chosen];
    size_t object = best_object[chosen];
    const bool new_object = best_dist[chosen] == kNotAssigned;
    if (new_object) {
      object = schedules.size();
      schedules.emplace_back();
      assignment->object_sizes.push_back(chosen_rec.tensor_size);
    } else {
      assignment->object_sizes[object] =
          std::max(assignment->object_sizes[object], chosen_rec.tensor_size);
    }
    assignment->object_ids[chosen] = object;
    schedules[object].emplace(chosen_rec.first_task, chosen_rec.last_task);
    live_until.Set(rank_first[chosen], -1);
    reach_right.Set(rank_last[chosen], kNone);
    reach_left.Set(rank_first[chosen], kNone);
    no_object.erase(chosen);

    // Sets a tensor's best (dist, object), keeping every index in step.
    auto set_best = [&](size_t i, size_t dist, size_t obj) {
      queue.erase(i);
      best_dist[i] = dist;
      best_object[i] = obj;
      queue.insert(i);
      update_reach(i);
    };

    // Tensors intersecting the chosen one whose best object it joined: that
    // object is no longer free for them. A new object was nobody's best.
    if (!new_object) {
      found.clear();
      // Unassigned tensors starting before the chosen one and still live at
      // its first task, then those starting within its interval.
      const size_t starts_before = static_cast<size_t>(
          std::lower_bound(by_first.begin(), by_first.end(),
                           chosen_rec.first_task,
                           [&](size_t i, TaskId task) {
                             return usage_records[i].first_task < task;
                           }) -
          by_first.begin());
      const size_t starts_within = static_cast<size_t>(
          std::upper_bound(by_first.begin(), by_first.end(),
                           chosen_rec.last_task,
                           [&](TaskId task, size_t i) {
                             return task < usage_records[i].first_task;
                           }) -
          by_first.begin());
      live_until.FindAbove(0, starts_before, Value{chosen_rec.first_task} - 1,
                           &found);
      live_until.FindAbove(starts_before, starts_within, -1, &found);
      for (size_t k : found) {
        const size_t i = by_first[k];
        if (best_object[i] != object) continue;
        const TensorUsageRecord<size_t>& rec = usage_records[i];
        size_t dist = kNotAssigned;
        size_t obj = kNotAssigned;
        for (size_t id = 0; id < schedules.size(); ++id) {
          const size_t d = DistanceToObject(schedules[id], rec);
          if (d < dist) {
            dist = d;
            obj = id;
          }
        }
        set_best(i, dist, obj);
      }
    }

    // Tensors not intersecting the chosen one that are now strictly nearer to
    // `object` than to their best, among those `object` is free for.
    found.clear();
    const size_t ends_before = static_cast<size_t>(
        std::lower_bound(by_last.begin(), by_last.end(), chosen_rec.first_task,
                         [&](size_t i, TaskId task) {
                           return usage_records[i].last_task < task;
                         }) -
        by_last.begin());
    reach_right.FindAbove(0, ends_before, Value{chosen_rec.first_task}, &found);
    const size_t num_before = found.size();
    const size_t starts_after = static_cast<size_t>(
        std::upper_bound(by_first.begin(), by_first.end(), chosen_rec.last_task,
                         [&](TaskId task, size_t i) {
                           return task < usage_records[i].first_task;
                         }) -
        by_first.begin());
    reach_left.FindAbove(starts_after, n, -Value{chosen_rec.last_task}, &found);
    for (size_t k = 0; k < found.size(); ++k) {
      const bool before = k < num_before;
      const size_t i = before ? by_last[found[k]] : by_first[found[k]];
      const TensorUsageRecord<size_t>& rec = usage_records[i];
      if (!new_object &&
          DistanceToObject(schedules[object], rec) == kNotAssigned) {
        continue;
      }
      const size_t dist = before ? chosen_rec.first_task - rec.last_task
                                 : rec.first_task - chosen_rec.last_task;
      set_best(i, dist, object);
    }
    // A new object is free for every tensor that does not intersect the
    // chosen one, at any distance: those that had no object take it.
    if (new_object) {
      found.clear();
      for (size_t i : no_object) {
        const TensorUsageRecord<size_t>& rec = usage_records[i];
        if (rec.last_task < chosen_rec.first_task ||
            chosen_rec.last_task < rec.first_task) {
          found.push_back(i);
        }
      }
      for (size_t i : found) {
        const TensorUsageRecord<size_t>& rec = usage_records[i];
        set_best(i,
                 rec.last_task < chosen_rec.first_task
                     ? chosen_rec.first_task - rec.last_task
                     : rec.first_task - chosen_rec.last_task,
                 object);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc
