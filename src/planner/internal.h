// File: bfc/planner/internal.h
// -----------------------------------------------------------------------------
//
// Helpers shared by the planner's strategies: input checks, time order,
// alignment, size arithmetic over size_t / uint2 / uint3, the lower bound, and
// the objects-to-offsets layout. Not part of the stable API; tests use them.
//
// Thread safety: stateless functions.
#ifndef BFC_PLANNER_INTERNAL_H_
#define BFC_PLANNER_INTERNAL_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {
namespace internal {

// Limits on what the planner accepts, so that no arithmetic in any strategy
// can wrap. Every object size, offset, total and bound a strategy computes is
// at most the records' total size plus one alignment (< kMaxAlignment) per
// record: with the total at most kMaxTotalSize (2^62, 4 EiB, beyond any
// device) and fewer than kMaxRecords records, that stays below 2^63, so it
// fits size_t, and MINCOSTFLOW's int64 costs and their negations are exact.
// The work one strategy may do before it stops, for PlanRecords' rows
// (PlanOptions::max_quadratic_tensors): steps are inner-loop visits that a
// strategy charges with ChargeWork, weighted as their cost grows. Unlimited
// unless a WorkBudgetScope on this thread sets it, so a direct call of a
// strategy (AssignOffsetsToTensors, ...) is never cut short.
// `tick`, when not empty, is called after about every kWorkStepsPerTick
// charged steps (so a tool can show that a long strategy is still running);
// it must not throw.
class WorkBudgetScope {
 public:
  explicit WorkBudgetScope(uint64_t steps,
                           const std::function<void()>* tick = nullptr);
  ~WorkBudgetScope();
  WorkBudgetScope(const WorkBudgetScope&) = delete;
  WorkBudgetScope& operator=(const WorkBudgetScope&) = delete;

 private:
  uint64_t saved_left_;
  uint64_t saved_budget_;
  const std::function<void()>* saved_tick_;
  uint64_t saved_until_tick_;
};
// Tens of milliseconds of the charged strategies' work.
inline constexpr uint64_t kWorkStepsPerTick = uint64_t{1} << 20;
// Charges `steps` to the budget; false once it is spent (the strategy then
// returns WorkBudgetSpent()).
bool ChargeWork(uint64_t steps);
// ResourceExhausted: the strategy stopped, the budget it had, what to raise.
absl::Status WorkBudgetSpent();

inline constexpr size_t kMaxTotalSize = size_t{1} << 62;
inline constexpr size_t kMaxAlignment = size_t{1} << 30;
inline constexpr size_t kMaxRecords = size_t{1} << 31;

// Number of elements of a size, false when the product overflows size_t.
inline bool CheckedNumElements(size_t size, size_t* out) {
  *out = size;
  return true;
}
inline bool CheckedNumElements(const uint2& size, size_t* out) {
  return !__builtin_mul_overflow(size_t{size.x}, size_t{size.y}, out);
}
inline bool CheckedNumElements(const uint3& size, size_t* out) {
  size_t xy;
  return !__builtin_mul_overflow(size_t{size.x}, size_t{size.y}, &xy) &&
         !__builtin_mul_overflow(xy, size_t{size.z}, out);
}

// InvalidArgument naming the first record with first_task > last_task, or
// the record whose size brings the records' total past kMaxTotalSize (or
// more than kMaxRecords records).
template <typename TensorSizeT>
absl::Status CheckRecords(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records) {
  if (usage_records.size() >= kMaxRecords) {
    return absl::InvalidArgumentError(
        absl::StrCat(usage_records.size(), " usage records; at most ",
                     kMaxRecords - 1, " are accepted"));
  }
  size_t total = 0;
  for (size_t i = 0; i < usage_records.size(); ++i) {
    if (usage_records[i].first_task > usage_records[i].last_task) {
      return absl::InvalidArgumentError(absl::StrCat(
          "usage record ", i, " has first_task ", usage_records[i].first_task,
          " > last_task ", usage_records[i].last_task));
    }
    size_t elements;
    if (!CheckedNumElements(usage_records[i].tensor_size, &elements) ||
        elements > kMaxTotalSize - total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "usage record ", i,
          ": its tensor_size brings the records' total "
          "size past 2^62 (the planner's limit, so that no offset or sum can "
          "wrap)"));
    }
    total += elements;
  }
  return absl::OkStatus();
}

// InvalidArgument unless 1 <= align <= kMaxAlignment; `what` names it.
inline absl::Status CheckAlignment(size_t align, const char* what) {
  if (align == 0 || align > kMaxAlignment) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", align, "; it must be in [1, ", kMaxAlignment, "]"));
  }
  return absl::OkStatus();
}

// Indices of the records sorted by first_task; ties keep index order.
template <typename TensorSizeT>
std::vector<size_t> OrderByFirstTask(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records) {
  std::vector<size_t> order(usage_records.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return usage_records[a].first_task < usage_records[b].first_task;
  });
  return order;
}

// n rounded up to a multiple of align. Callers keep n <= 2^63 and align <=
// kMaxAlignment (CheckRecords, CheckAlignment), so it cannot wrap.
inline size_t AlignByN(size_t n, size_t align) {
  return (n + align - 1) / align * align;
}

// n rounded up to a multiple of align (> 0, not only a power of two) into
// *out; false when that exceeds 2^64-1 (user-given sizes and roundings).
inline bool CheckedAlignByN(size_t n, size_t align, size_t* out) {
  if (n > ~size_t{0} - (align - 1)) return false;
  *out = (n + align - 1) / align * align;
  return true;
}

// An object in use, ordered for a std::priority_queue so that top() is the one
// released earliest (smallest last_task, then smallest id).
struct QueueRecord {
  TaskId last_task;
  size_t object_id;
  bool operator<(const QueueRecord& other) const {
    return std::tie(last_task, object_id) >
           std::tie(other.last_task, other.object_id);
  }
};

// Strict weak order on sizes, for ordered containers keyed by size.
struct SizeLess {
  bool operator()(size_t a, size_t b) const { return a < b; }
  bool operator()(const uint2& a, const uint2& b) const {
    return std::tie(a.x, a.y) < std::tie(b.x, b.y);
  }
  bool operator()(const uint3& a, const uint3& b) const {
    return std::tie(a.x, a.y, a.z) < std::tie(b.x, b.y, b.z);
  }
};

// Element-wise maximum.
inline size_t ElementwiseMax(size_t a, size_t b) { return std::max(a, b); }
inline uint2 ElementwiseMax(const uint2& a, const uint2& b) {
  return {std::max(a.x, b.x), std::max(a.y, b.y)};
}
inline uint3 ElementwiseMax(const uint3& a, const uint3& b) {
  return {std::max(a.x, b.x), std::max(a.y, b.y), std::max(a.z, b.z)};
}

// Whether an object of size `object` can hold a tensor of size `tensor` (in
// every dimension).
inline bool IsCoveringObject(size_t object, size_t tensor) {
  return object >= tensor;
}
inline bool IsCoveringObject(const uint2& object, const uint2& tensor) {
  return object.x >= tensor.x && object.y >= tensor.y;
}
inline bool IsCoveringObject(const uint3& object, const uint3& tensor) {
  return object.x >= tensor.x && object.y >= tensor.y && object.z >= tensor.z;
}

// Number of elements: the memory an object of this size occupies.
inline size_t NumElements(size_t size) { return size; }
inline size_t NumElements(const uint2& size) { return size_t{size.x} * size.y; }
inline size_t NumElements(const uint3& size) {
  return size_t{size.x} * size.y * size.z;
}

// Sum of object sizes (in elements).
template <typename TensorSizeT>
size_t TotalSize(const ObjectsAssignment<TensorSizeT>& assignment) {
  size_t total = 0;
  for (const TensorSizeT& size : assignment.object_sizes) {
    total += NumElements(size);
  }
  return total;
}

// Lays shared objects end to end in object-id order, each starting at a
// multiple of base_addr_align_bytes (> 0), and gives every tensor its object's
// offset. total_size is the end of the last object (0 with no objects).
void ObjectsToOffsets(const ObjectsAssignment<size_t>& objects,
                      size_t base_addr_align_bytes, OffsetsAssignment* offsets);

// The lower bound for any plan: max over tasks of the sum of the sizes of the
// tensors live at that task. Records must be valid (CheckRecords).
size_t PeakLiveSize(
    const std::vector<TensorUsageRecord<size_t>>& usage_records);

// positional_max[k] is the largest k-th biggest tensor size (0-based) over all
// tasks' sets of live tensors; its length is the maximum number of tensors live
// at once. Non-increasing. Records must be valid.
std::vector<size_t> CalculatePositionalMaximums(
    const std::vector<TensorUsageRecord<size_t>>& usage_records);

// Distinct first_task values in increasing order. Every task's set of live
// tensors is a subset of the set at the latest of these tasks at or before it,
// so algorithms that only need maximal live sets may look at these alone.
std::vector<TaskId> StartTasks(
    const std::vector<TensorUsageRecord<size_t>>& usage_records);

// The indices into `tasks` (StartTasks) of the start tasks `record` is live
// at: [*first, *last]. Every record is live at its own first_task, so the
// range is never empty.
inline void StartTaskRange(const std::vector<TaskId>& tasks,
                           const TensorUsageRecord<size_t>& record,
                           size_t* first, size_t* last) {
  *first = static_cast<size_t>(
      std::lower_bound(tasks.begin(), tasks.end(), record.first_task) -
      tasks.begin());
  *last = static_cast<size_t>(
              std::upper_bound(tasks.begin(), tasks.end(), record.last_task) -
              tasks.begin()) -
          1;
}

// Intervals over the points [0, num_points) (start-task indices), for
// "which intervals contain point k": a segment tree in which each interval is
// listed in the O(log T) nodes that cover it. The intervals listed on the
// path to leaf k are exactly those containing k, each once (an interval's
// nodes cover disjoint ranges; a path's nodes are nested). O(log T + found).
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

  // As Stab, and forgets every listing it read, for callers that are done
  // with an interval once it has been found at any point: each listing is
  // then read once over all calls (an interval listed in other nodes may
  // still come out at a later point).
  void Take(size_t point, std::vector<size_t>* out) {
    for (size_t node = point + leaves_; node >= 1; node /= 2) {
      out->insert(out->end(), lists_[node].begin(), lists_[node].end());
      std::vector<size_t>().swap(lists_[node]);
    }
  }

 private:
  size_t leaves_;
  std::vector<std::vector<size_t>> lists_;
};

}  // namespace internal
}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_INTERNAL_H_
