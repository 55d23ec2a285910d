// File: tests/planner/greedy_reference.h
// -----------------------------------------------------------------------------
//
// The planner's greedy strategies as they were before they were made
// O(n log n): plain rescans, quadratic in the number of tensors, kept verbatim
// (apart from the namespace) as the oracle the fast versions must match plan
// for plan. Test-only; not built into any library.
#ifndef BFC_TESTS_PLANNER_GREEDY_REFERENCE_H_
#define BFC_TESTS_PLANNER_GREEDY_REFERENCE_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {
namespace reference {

absl::Status GreedyBySizeAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    size_t base_addr_align_bytes, OffsetsAssignment* assignment);

absl::Status GreedyBySizeDistPriorityAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);

absl::Status GreedyByBreadthAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);

}  // namespace reference
}  // namespace planner
}  // namespace bfc

#endif  // BFC_TESTS_PLANNER_GREEDY_REFERENCE_H_
