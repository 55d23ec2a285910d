#include "bfc/planner/trace_records.h"

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace bfc {
namespace planner {

absl::StatusOr<TraceUsage> UsageRecordsFromTrace(const CompiledTrace& trace) {
  TraceUsage usage;
  usage.num_tasks = trace.num_events;
  // open[slot]: the record of the slot's live allocation, or kNotAssigned.
  std::vector<size_t> open;
  size_t prev_event = 0;
  for (size_t k = 0; k < trace.ops.size(); ++k) {
    const ReplayOp& op = trace.ops[k];
    if (op.event_index >= trace.num_events || op.event_index < prev_event) {
      return absl::InvalidArgumentError(absl::StrCat(
          "trace '", trace.name, "' op ", k, " has event_index ",
          op.event_index, ": not in increasing order below num_events ",
          trace.num_events));
    }
    prev_event = op.event_index;
    if (op.slot >= open.size()) open.resize(op.slot + size_t{1}, kNotAssigned);
    size_t& record = open[op.slot];
    if (op.kind == ReplayOp::Kind::kAllocate) {
      if (record != kNotAssigned) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trace '", trace.name, "' op ", k, " (event ", op.event_index,
            ") allocates slot ", op.slot, ", which is already live"));
      }
      record = usage.records.size();
      usage.records.emplace_back(op.size, op.event_index, op.event_index);
    } else {
      if (record == kNotAssigned) {
        return absl::InvalidArgumentError(absl::StrCat(
            "trace '", trace.name, "' op ", k, " (event ", op.event_index,
            ") frees slot ", op.slot, ", which is not live"));
      }
      usage.records[record].last_task = op.event_index;
      record = kNotAssigned;
    }
  }
  for (size_t record : open) {
    if (record == kNotAssigned) continue;
    usage.records[record].last_task = trace.num_events - 1;
    ++usage.num_never_freed;
  }
  return usage;
}

}  // namespace planner
}  // namespace bfc
