#include "bfc/planner/memory_management.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/planner/equality_assignment.h"
#include "bfc/planner/greedy_by_breadth_assignment.h"
#include "bfc/planner/greedy_by_size_assignment.h"
#include "bfc/planner/greedy_in_order_assignment.h"
#include "bfc/planner/min_cost_flow_assignment.h"
#include "bfc/planner/naive_assignment.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

// GREEDY_BY_SIZE, then GREEDY_BY_BREADTH, then GREEDY_IN_ORDER; a later one
// replaces the plan only if strictly smaller.
absl::Status BestGreedy(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment) {
  absl::Status status =
      GreedyBySizeDistPriorityAssignment(usage_records, assignment);
  if (!status.ok()) return status;
  ObjectsAssignment<size_t> other;
  status = GreedyByBreadthAssignment(usage_records, &other);
  if (!status.ok()) return status;
  if (internal::TotalSize(other) < internal::TotalSize(*assignment)) {
    std::swap(*assignment, other);
  }
  status = GreedyInOrderAssignment(usage_records, &other);
  if (!status.ok()) return status;
  if (internal::TotalSize(other) < internal::TotalSize(*assignment)) {
    std::swap(*assignment, other);
  }
  return absl::OkStatus();
}

const char* SizeTypeName(const uint2&) { return "uint2"; }
const char* SizeTypeName(const uint3&) { return "uint3"; }

template <typename TensorSizeT>
absl::Status AssignMultidimensional(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<TensorSizeT>* assignment) {
  if (assignment == nullptr) {
    return absl::InvalidArgumentError("assignment must not be null");
  }
  switch (strategy) {
    case MemoryStrategy::NAIVE:
      return NaiveAssignment(usage_records, assignment);
    case MemoryStrategy::EQUALITY:
      return EqualityAssignment(usage_records, assignment);
    case MemoryStrategy::GREEDY_IN_ORDER:
      return GreedyInOrderAssignmentMultidimensional(usage_records, assignment);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "MemoryStrategy ", MemoryStrategyName(strategy),
          " is not supported for ", SizeTypeName(TensorSizeT{}),
          " (texture) sizes; use NAIVE, EQUALITY or GREEDY_IN_ORDER"));
  }
}

std::string SizeToString(size_t size) { return absl::StrCat(size); }
std::string SizeToString(const uint2& size) {
  return absl::StrCat("(", size.x, ", ", size.y, ")");
}
std::string SizeToString(const uint3& size) {
  return absl::StrCat("(", size.x, ", ", size.y, ", ", size.z, ")");
}

template <typename TensorSizeT>
absl::Status ValidateObjects(
    const std::vector<TensorUsageRecord<TensorSizeT>>& usage_records,
    const ObjectsAssignment<TensorSizeT>& assignment) {
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  if (assignment.object_ids.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment has ", assignment.object_ids.size(),
                     " object ids for ", n, " usage records"));
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t id = assignment.object_ids[i];
    if (id >= assignment.object_sizes.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", i, " has object id ",
          id == kNotAssigned ? std::string("kNotAssigned") : absl::StrCat(id),
          " but there are ", assignment.object_sizes.size(), " objects"));
    }
    if (!internal::IsCoveringObject(assignment.object_sizes[id],
                                    usage_records[i].tensor_size)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "object ", id, " of size ", SizeToString(assignment.object_sizes[id]),
          " is smaller than tensor ", i, " of size ",
          SizeToString(usage_records[i].tensor_size)));
    }
  }
  // Sorted by (object, first_task), tensors of one object must follow each
  // other in time without overlap.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_pair(assignment.object_ids[a],
                          usage_records[a].first_task) <
           std::make_pair(assignment.object_ids[b],
                          usage_records[b].first_task);
  });
  for (size_t k = 1; k < n; ++k) {
    const size_t a = order[k - 1];
    const size_t b = order[k];
    if (assignment.object_ids[a] == assignment.object_ids[b] &&
        usage_records[a].last_task >= usage_records[b].first_task) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors ", a, " (tasks ", usage_records[a].first_task, "..",
          usage_records[a].last_task, ") and ", b, " (tasks ",
          usage_records[b].first_task, "..", usage_records[b].last_task,
          ") are both live at task ", usage_records[b].first_task,
          " and share object ", assignment.object_ids[a]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* MemoryStrategyName(MemoryStrategy strategy) {
  switch (strategy) {
    case MemoryStrategy::NAIVE:
      return "NAIVE";
    case MemoryStrategy::EQUALITY:
      return "EQUALITY";
    case MemoryStrategy::GREEDY_IN_ORDER:
      return "GREEDY_IN_ORDER";
    case MemoryStrategy::GREEDY_BY_BREADTH:
      return "GREEDY_BY_BREADTH";
    case MemoryStrategy::GREEDY_BY_SIZE:
      return "GREEDY_BY_SIZE";
    case MemoryStrategy::GREEDY_BEST:
      return "GREEDY_BEST";
    case MemoryStrategy::MINCOSTFLOW:
      return "MINCOSTFLOW";
  }
  return "UNKNOWN";
}

namespace {

// A strategy's plan is checked before it is returned: a plan that does not
// validate is an error, never OK (the records were checked, so it would be a
// bug in the strategy, named here).
template <typename Plan, typename Records, typename... Extra>
absl::Status Validated(absl::Status status, MemoryStrategy strategy,
                       const Records& usage_records, const Plan& plan,
                       Extra... extra) {
  if (!status.ok()) return status;
  absl::Status valid = ValidateAssignment(usage_records, plan, extra...);
  if (valid.ok()) return valid;
  return absl::InternalError(
      absl::StrCat("MemoryStrategy ", MemoryStrategyName(strategy),
                   " made an invalid plan: ", valid.message()));
}

absl::Status RunObjectsStrategy(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<size_t>* assignment) {
  switch (strategy) {
    case MemoryStrategy::NAIVE:
      return NaiveAssignment(usage_records, assignment);
    case MemoryStrategy::EQUALITY:
      return EqualityAssignment(usage_records, assignment);
    case MemoryStrategy::GREEDY_IN_ORDER:
      return GreedyInOrderAssignment(usage_records, assignment);
    case MemoryStrategy::GREEDY_BY_BREADTH:
      return GreedyByBreadthAssignment(usage_records, assignment);
    case MemoryStrategy::GREEDY_BY_SIZE:
      return GreedyBySizeDistPriorityAssignment(usage_records, assignment);
    case MemoryStrategy::GREEDY_BEST:
      return BestGreedy(usage_records, assignment);
    case MemoryStrategy::MINCOSTFLOW:
      return MinCostFlowAssignment(usage_records, assignment);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown MemoryStrategy value ", static_cast<int>(strategy)));
}

}  // namespace

absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<size_t>* assignment) {
  if (assignment == nullptr) {
    return absl::InvalidArgumentError("assignment must not be null");
  }
  return Validated(RunObjectsStrategy(usage_records, strategy, assignment),
                   strategy, usage_records, *assignment);
}

absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<uint2>* assignment) {
  if (assignment == nullptr) {
    return absl::InvalidArgumentError("assignment must not be null");
  }
  return Validated(AssignMultidimensional(usage_records, strategy, assignment),
                   strategy, usage_records, *assignment);
}

absl::Status AssignObjectsToTensors(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    MemoryStrategy strategy, ObjectsAssignment<uint3>* assignment) {
  if (assignment == nullptr) {
    return absl::InvalidArgumentError("assignment must not be null");
  }
  return Validated(AssignMultidimensional(usage_records, strategy, assignment),
                   strategy, usage_records, *assignment);
}

absl::Status AssignOffsetsToTensors(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    MemoryStrategy strategy, OffsetsAssignment* assignment,
    size_t base_addr_align_bytes) {
  if (assignment == nullptr) {
    return absl::InvalidArgumentError("assignment must not be null");
  }
  absl::Status status =
      internal::CheckAlignment(base_addr_align_bytes, "base_addr_align_bytes");
  if (!status.ok()) return status;
  if (strategy == MemoryStrategy::GREEDY_BY_SIZE) {
    status = GreedyBySizeAssignment(usage_records, base_addr_align_bytes,
                                    assignment);
  } else {
    ObjectsAssignment<size_t> objects;
    status = AssignObjectsToTensors(usage_records, strategy, &objects);
    if (!status.ok()) return status;
    internal::ObjectsToOffsets(objects, base_addr_align_bytes, assignment);
  }
  return Validated(status, strategy, usage_records, *assignment,
                   base_addr_align_bytes);
}

absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const ObjectsAssignment<size_t>& assignment) {
  return ValidateObjects(usage_records, assignment);
}

absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<uint2>>& usage_records,
    const ObjectsAssignment<uint2>& assignment) {
  return ValidateObjects(usage_records, assignment);
}

absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<uint3>>& usage_records,
    const ObjectsAssignment<uint3>& assignment) {
  return ValidateObjects(usage_records, assignment);
}

absl::Status ValidateAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const OffsetsAssignment& assignment, size_t base_addr_align_bytes) {
  if (base_addr_align_bytes == 0) {
    return absl::InvalidArgumentError("base_addr_align_bytes must be positive");
  }
  absl::Status status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  const size_t n = usage_records.size();
  if (assignment.offsets.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("assignment has ", assignment.offsets.size(),
                     " offsets for ", n, " usage records"));
  }
  for (size_t i = 0; i < n; ++i) {
    const size_t offset = assignment.offsets[i];
    const size_t size = usage_records[i].tensor_size;
    if (offset % base_addr_align_bytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " has offset ", offset,
                       ", not a multiple of ", base_addr_align_bytes));
    }
    if (size > assignment.total_size || offset > assignment.total_size - size) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, " at offset ", offset, " of size ", size,
                       " ends past total_size ", assignment.total_size));
    }
  }
  // Sweep tasks in order; live byte ranges (offset -> end, tensor) must stay
  // disjoint, so checking each new range against its neighbours suffices.
  std::vector<size_t> by_first = internal::OrderByFirstTask(usage_records);
  std::vector<size_t> by_last(n);
  std::iota(by_last.begin(), by_last.end(), size_t{0});
  std::stable_sort(by_last.begin(), by_last.end(), [&](size_t a, size_t b) {
    return usage_records[a].last_task < usage_records[b].last_task;
  });
  std::map<size_t, std::pair<size_t, size_t>> live;
  size_t next_end = 0;
  for (size_t i : by_first) {
    const TensorUsageRecord<size_t>& rec = usage_records[i];
    while (next_end < n &&
           usage_records[by_last[next_end]].last_task < rec.first_task) {
      const size_t j = by_last[next_end++];
      auto it = live.find(assignment.offsets[j]);
      if (it != live.end() && it->second.second == j) live.erase(it);
    }
    if (rec.tensor_size == 0) continue;
    const size_t begin = assignment.offsets[i];
    const size_t end = begin + rec.tensor_size;
    auto overlap = [&](size_t j) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensors ", j, " (tasks ", usage_records[j].first_task, "..",
          usage_records[j].last_task, ", bytes ", assignment.offsets[j], "..",
          assignment.offsets[j] + usage_records[j].tensor_size, ") and ", i,
          " (tasks ", rec.first_task, "..", rec.last_task, ", bytes ", begin,
          "..", end, ") overlap in time and memory"));
    };
    auto next = live.lower_bound(begin);
    if (next != live.end() && next->first < end) {
      return overlap(next->second.second);
    }
    if (next != live.begin() && std::prev(next)->second.first > begin) {
      return overlap(std::prev(next)->second.second);
    }
    live.emplace(begin, std::make_pair(end, i));
  }
  return absl::OkStatus();
}

}  // namespace planner
}  // namespace bfc
