// File: bfc/planner/greedy_by_breadth_assignment.h
// -----------------------------------------------------------------------------
//
// GREEDY_BY_BREADTH (size_t only): the breadth of a task is the sum of the
// sizes of the tensors live at it. Tasks are visited widest first (ties: lower
// task id first); at each, its not yet assigned tensors, largest first (ties:
// lower index first), go to the existing object that fits best among those
// whose schedule (the intervals of the tensors already in it) leaves room for
// the tensor: the smallest object at least as large as the tensor, or failing
// that the largest object (which grows). With no such object, a new one.
//
// Only tasks where some tensor starts are visited: every other task's live set
// is a subset of such a task's, with no larger breadth, so it would find all
// its tensors already assigned. This keeps the walk to n tasks even when tasks
// are trace events. Time O(n log n) plus, per tensor, one schedule lookup for
// each object passed over because it is busy over the tensor's interval;
// memory O(n log n). Plans are identical to TFLite's rescanning version
// (tests/planner/greedy_equivalence_test.cc).
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_GREEDY_BY_BREADTH_ASSIGNMENT_H_
#define BFC_PLANNER_GREEDY_BY_BREADTH_ASSIGNMENT_H_

#include <vector>

#include "absl/status/status.h"
#include "bfc/planner/types.h"

namespace bfc {
namespace planner {

// InvalidArgument for a record with first > last.
absl::Status GreedyByBreadthAssignment(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    ObjectsAssignment<size_t>* assignment);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_GREEDY_BY_BREADTH_ASSIGNMENT_H_
