// File: bfc/planner/memory_management.h
// -----------------------------------------------------------------------------
//
// The offline memory planner: given every tensor's size and lifetime (see
// types.h), decide up front which tensors share memory. A static-graph runtime
// uses such a plan instead of an online allocator; bfc uses it as a yardstick
// for how much memory foresight would save over what BFC reserves online.
//
// The strategies are TensorFlow Lite's (GPU delegate memory management):
//
//   strategy            size_t   uint2/uint3   what it does
//   NAIVE               yes      yes           one object per tensor
//   EQUALITY            yes      yes           reuse only objects of equal size
//   GREEDY_IN_ORDER     yes      yes           tensors by first_task, best-fit
//                                              reuse of released objects
//   GREEDY_BY_BREADTH   yes      no            widest tasks first
//   GREEDY_BY_SIZE      yes      no            objects: size-and-distance
//                                              priority; offsets: largest
//                                              tensors first, best gap
//   GREEDY_BEST         yes      no            smallest of the greedy plans
//   MINCOSTFLOW         yes      no            min-cost flow on a bipartite
//                                              graph of tensor successions
//
// Example:
//
//   std::vector<TensorUsageRecord<size_t>> records = {
//       {/*size=*/16, /*first=*/0, /*last=*/1},
//       {/*size=*/8, /*first=*/1, /*last=*/2},
//       {/*size=*/64, /*first=*/2, /*last=*/3}};
//   ObjectsAssignment<size_t> objects;
//   absl::Status s = AssignObjectsToTensors(
//       records, MemoryStrategy::GREEDY_IN_ORDER, &objects);
//   // tensors 0 and 2 share an object of 64 bytes; tensor 1 has its own.
//
// Edge cases, for every function here: empty input gives an empty plan (no
// objects, total_size 0); a record with first_task > last_task, records whose
// sizes total more than 2^62 (elements; so no sum, offset or bound can wrap),
// 2^31 records or more, a base_addr_align_bytes outside [1, 2^30], an
// unsupported strategy/size-type combination, or a null output pointer is
// InvalidArgument and the output is left in an unspecified but valid state.
// Every plan is checked with ValidateAssignment before OK is returned: a plan
// that does not validate is Internal, naming the strategy. Records need not
// be sorted; strategies that walk tensors in time order sort a copy of the
// indices by first_task (stable), so unsorted input still gives valid plans.
// MINCOSTFLOW builds a graph with up to n^2/2 edges; inputs whose graph would
// exceed kMaxMinCostFlowEdges (min_cost_flow_assignment.h) are rejected with
// InvalidArgument rather than exhausting memory.
//
// Thread safety: stateless functions; concurrent calls on distinct outputs are
// safe.
#ifndef BFC_PLANNER_MEMORY_MANAGEMENT_H_
#define BFC_PLANNER_MEMORY_MANAGEMENT_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

enum class MemoryStrategy {
  // Every tensor gets its own object. Useful for debugging; the upper bound.
  NAIVE,
  // A tensor reuses a released object only if the sizes are equal.
  EQUALITY,
  // Tensors in order of first_task; each reuses the released object closest
  // in size (growing it if needed), or creates a new one if none is free.
  GREEDY_IN_ORDER,
  // Tasks in non-increasing order of breadth (sum of live tensor sizes); the
  // tensors of each task, largest first, go to the best-fitting object whose
  // schedule has room.
  GREEDY_BY_BREADTH,
  // Objects: tensors by size class and distance priority. Offsets: tensors in
  // non-increasing size, each in the smallest fitting gap of the arena.
  GREEDY_BY_SIZE,
  // The smallest of GREEDY_BY_SIZE, GREEDY_BY_BREADTH and GREEDY_IN_ORDER.
  GREEDY_BEST,
  // Minimum-cost flow in an auxiliary graph; saturated edges give the
  // successions of tensors in each shared object.
  MINCOSTFLOW,
};

// Returns "NAIVE", "EQUALITY", ... ("UNKNOWN" for out-of-range values).
const char* MemoryStrategyName(MemoryStrategy strategy);

// Assigns every tensor to a shared object. Supports every strategy.
absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<size_t>* assignment);

// Texture overloads: NAIVE, EQUALITY and GREEDY_IN_ORDER only (GREEDY_IN_ORDER
// reuses a released object only if it covers the tensor in every dimension).
// Other strategies return InvalidArgument.
absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<uint2>* assignment);
absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<uint3>* assignment);

// Places every tensor in one arena. GREEDY_BY_SIZE computes offsets directly;
// every other strategy computes shared objects and lays them end to end in
// object-id order. Every offset is a multiple of base_addr_align_bytes (which
// must be positive); between objects, padding up to the alignment is counted in
// total_size.
absl::Status AssignOffsetsToTensors(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    MemoryStrategy strategy, OffsetsAssignment* assignment,
    size_t base_addr_align_bytes = 1);

// Checks a plan against its records: one object id / offset per record, ids in
// range, every object at least as large as each of its tensors (element-wise),
// no two tensors with intersecting [first_task, last_task] sharing an object
// (objects) or overlapping byte ranges (offsets; zero-size tensors occupy
// nothing), every range inside total_size, and every offset a multiple of
// base_addr_align_bytes. Returns OkStatus or InvalidArgument naming the first
// violation found (tensor indices and tasks).
absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const ObjectsAssignment<size_t>& assignment);
absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    const ObjectsAssignment<uint2>& assignment);
absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    const ObjectsAssignment<uint3>& assignment);
absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const OffsetsAssignment& assignment, size_t base_addr_align_bytes = 1);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_MEMORY_MANAGEMENT_H_
