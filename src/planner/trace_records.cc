#include "bfc/planner/trace_records.h"

#include <new>
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
    // CompileTrace numbers slots densely below num_slots; a trace built by
    // hand may not (a slot of 2^32 - 1 asked for a 32 GiB table).
    if (op.slot >= trace.num_slots) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace '", trace.name, "' op ", k, " uses slot ",
                       op.slot, ", not below num_slots ", trace.num_slots));
    }
    if (op.slot >= open.size()) {
      try {
        open.resize(op.slot + size_t{1}, kNotAssigned);
      } catch (const std::bad_alloc&) {
        return absl::ResourceExhaustedError(
            absl::StrCat("trace '", trace.name, "' op ", k,
                         ": no host memory for a table "
                         "of ",
                         op.slot + size_t{1}, " slots"));
      }
    }
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
