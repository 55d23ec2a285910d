// File: bfc/planner/types.h
// -----------------------------------------------------------------------------
//
// The vocabulary of the offline memory planner (after TensorFlow Lite's GPU
// delegate, `tensorflow/lite/delegates/gpu/common/memory_management/`).
//
// A program is a sequence of tasks (operators, or allocator events) numbered
// 0, 1, 2, ... Each tensor is described by a TensorUsageRecord: its size and
// the closed interval [first_task, last_task] of tasks during which its memory
// must stay valid. Two tensors whose intervals intersect must never share
// memory; two tensors whose intervals are disjoint may.
//
// A plan comes in one of two forms:
//   * ObjectsAssignment: every tensor is mapped to a shared object; an object
//     is at least as large as every tensor mapped to it. The plan's cost is the
//     sum of object sizes.
//   * OffsetsAssignment: every tensor gets an offset into one arena of
//     `total_size` bytes. The plan's cost is `total_size`.
//
// Sizes are `size_t` (bytes) for buffers; `uint2` / `uint3` stand for 2D / 3D
// textures, where a shared object must cover every tensor in each dimension
// (its size is the element-wise maximum).
//
// Thread safety: plain value types, thread-compatible.
#ifndef BFC_PLANNER_TYPES_H_
#define BFC_PLANNER_TYPES_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace bfc {
namespace planner {

using TaskId = size_t;

// Marks a tensor not (yet) assigned to any object, or "no distance".
inline constexpr size_t kNotAssigned = std::numeric_limits<size_t>::max();

// Size of a 2D texture (x by y elements).
struct uint2 {
  uint32_t x = 0;
  uint32_t y = 0;
};

// Size of a 3D texture (x by y by z elements).
struct uint3 {
  uint32_t x = 0;
  uint32_t y = 0;
  uint32_t z = 0;
};

inline bool operator==(const uint2& a, const uint2& b) {
  return a.x == b.x && a.y == b.y;
}
inline bool operator!=(const uint2& a, const uint2& b) { return !(a == b); }
inline bool operator==(const uint3& a, const uint3& b) {
  return a.x == b.x && a.y == b.y && a.z == b.z;
}
inline bool operator!=(const uint3& a, const uint3& b) { return !(a == b); }

// One tensor: its size and the closed interval of tasks that use it. A valid
// record has first_task <= last_task; the Assign* functions reject others.
template <typename TensorSizeT>
struct TensorUsageRecord {
  TensorSizeT tensor_size;
  TaskId first_task;
  TaskId last_task;

  TensorUsageRecord(TensorSizeT size, TaskId first, TaskId last)
      : tensor_size(size), first_task(first), last_task(last) {}

  // Records are ordered by first_task only (as in TFLite), so sorting a vector
  // of records with std::stable_sort keeps ties in their original order.
  bool operator<(const TensorUsageRecord<TensorSizeT>& other) const {
    return first_task < other.first_task;
  }
};

// Tensors mapped to shared objects.
template <typename TensorSizeT>
struct ObjectsAssignment {
  // object_ids[i] is the shared object that tensor i (the i-th usage record)
  // uses.
  std::vector<size_t> object_ids;
  // object_sizes[j] is the size of shared object j.
  std::vector<TensorSizeT> object_sizes;
};

// Tensors placed in one arena.
struct OffsetsAssignment {
  // offsets[i] is the byte offset of tensor i in the arena.
  std::vector<size_t> offsets;
  // Arena size: at least max(offsets[i] + size of tensor i).
  size_t total_size = 0;
};

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_TYPES_H_
