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
#include <numeric>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {
namespace internal {

// InvalidArgument naming the first record with first_task > last_task.
template <typename TensorSizeT>
absl::Status CheckRecords(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records) {
  for (size_t i = 0; i < usage_records.size(); ++i) {
    if (usage_records[i].first_task > usage_records[i].last_task) {
      return absl::InvalidArgumentError(absl::StrCat(
          "usage record ", i, " has first_task ", usage_records[i].first_task,
          " > last_task ", usage_records[i].last_task));
    }
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

// n rounded up to a multiple of align (align > 0).
inline size_t AlignByN(size_t n, size_t align) {
  return (n + align - 1) / align * align;
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

}  // namespace internal
}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_INTERNAL_H_
