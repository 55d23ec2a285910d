// File: bfc/planner/trace_records.h
// -----------------------------------------------------------------------------
//
// From an allocation trace to the planner's usage records. A task is a trace
// event (a data row, by its 0-based event_index), so a tensor allocated at
// event a and freed at event f lives over tasks [a, f]: it is still in use when
// the free is issued and may share memory with anything allocated after it.
// A tensor never freed lives to the last event (num_events - 1).
//
// Records come out in allocation order (ReplayOp order), which is also
// first_task order.
//
// Thread safety: stateless.
#ifndef BFC_PLANNER_TRACE_RECORDS_H_
#define BFC_PLANNER_TRACE_RECORDS_H_

#include <cstddef>
#include <vector>

#include "absl/status/statusor.h"
#include "bfc/planner/types.h"
#include "bfc/replay/trace.h"

namespace bfc {
namespace planner {

struct TraceUsage {
  // One record per allocate op, in op order.
  std::vector<TensorUsageRecord<size_t>> records;
  // Tasks 0 .. num_tasks - 1 (the trace's num_events).
  size_t num_tasks = 0;
  // Allocations with no matching free (they live to the last task).
  size_t num_never_freed = 0;
};

// InvalidArgument, naming the op, if the ops are inconsistent: a free of a
// slot with no live allocation, an allocate of a slot already live, an
// event_index that goes backwards or is not below num_events.
absl::StatusOr<TraceUsage> UsageRecordsFromTrace(const CompiledTrace& trace);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_TRACE_RECORDS_H_
