// File: bfc/planner/plan_report.h
// -----------------------------------------------------------------------------
//
// How far is an online allocator from the best offline plan? PlanTrace turns a
// compiled trace into usage records (trace_records.h), runs every requested
// strategy in both forms (shared objects, and offsets in one arena), validates
// each plan, times it, and sets it against the lower bound: the peak of live
// bytes, which no plan can beat. FormatPlanReport prints the results side by
// side with an online allocator's peak pool size, all as ratios over the lower
// bound. This is what `bfc-plan` and `bfc-replay --plan` print.
//
// Example:
//
//   absl::StatusOr<CompiledTrace> trace = CompileTrace(*ReadTrace(path));
//   absl::StatusOr<PlanReport> report = PlanTrace(*trace, PlanOptions());
//   std::cout << FormatPlanReport(*report, replay_summary.peak_pool_bytes);
//
// A strategy that cannot run (MINCOSTFLOW over its graph limit) does not fail
// the report: its row carries the status and prints as skipped.
//
// Thread safety: stateless functions.
#ifndef BFC_PLANNER_PLAN_REPORT_H_
#define BFC_PLANNER_PLAN_REPORT_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/planner/memory_management.h"
#include "bfc/planner/types.h"
#include "bfc/replay/trace.h"

namespace bfc {
namespace planner {

// The largest round_sizes_to and base_addr_align_bytes accepted (1 GiB).
inline constexpr size_t kMaxPlanAlignment = size_t{1} << 30;

struct PlanOptions {
  // Strategies to run, in this order.
  std::vector<MemoryStrategy> strategies = {
      MemoryStrategy::NAIVE,           MemoryStrategy::EQUALITY,
      MemoryStrategy::GREEDY_IN_ORDER, MemoryStrategy::GREEDY_BY_BREADTH,
      MemoryStrategy::GREEDY_BY_SIZE,  MemoryStrategy::GREEDY_BEST,
      MemoryStrategy::MINCOSTFLOW};
  // Plan shared objects (AssignObjectsToTensors) and/or arena offsets
  // (AssignOffsetsToTensors).
  bool objects = true;
  bool offsets = true;
  // Alignment of arena offsets (AssignOffsetsToTensors); in [1, 2^30].
  size_t base_addr_align_bytes = 1;
  // Every tensor size is rounded up to a multiple of this before planning
  // (the lower bound too); in [1, 2^30]. A size whose rounding would pass
  // 2^64-1, or records whose sizes total more than 2^62 (before or after
  // rounding), are InvalidArgument naming the record. 256 mirrors BFC's
  // kMinAllocationSize, to compare like with like.
  size_t round_sizes_to = 1;
  // Strategies whose running time grows with the square of the tensors or
  // worse (GREEDY_BY_SIZE's objects form, GREEDY_BEST in both forms,
  // MINCOSTFLOW; see IsQuadraticStrategy) are not run on more tensors than
  // this: their row is ResourceExhausted, saying the count and this limit;
  // the shared traces have at most ~9.4k. And every row runs under a work
  // budget of this number squared plus 4096 steps per tensor (seconds on one
  // core): GREEDY_BY_BREADTH and GREEDY_BY_SIZE's offsets form are linear on
  // traces (few tensors live at once) but quadratic when all are live, and
  // MINCOSTFLOW near the limit can take minutes; a row that passes its budget
  // stops with ResourceExhausted saying so. 0: no limit and no budget.
  size_t max_quadratic_tensors = size_t{1} << 14;
  // Called before each strategy runs (row index, rows in all, its name), again
  // with the same arguments every few tens of milliseconds of a long
  // strategy's work (GREEDY_BY_BREADTH, GREEDY_BY_SIZE in both forms,
  // GREEDY_BEST, MINCOSTFLOW), and once with (rows, rows, "") at the end, so
  // a tool can
  // show progress and elapsed time; may be empty. Must not throw.
  std::function<void(size_t, size_t, const char*)> on_progress;
  // Run ValidateAssignment on every plan (not timed). A failure is an internal
  // error in the planner and makes that row's status Internal.
  bool validate = true;
};

// Whether a strategy's running time grows with the square of the number of
// tensors or worse (PlanOptions::max_quadratic_tensors guards them).
bool IsQuadraticStrategy(MemoryStrategy strategy, bool offsets);

// One strategy in one form.
struct PlanResult {
  MemoryStrategy strategy = MemoryStrategy::NAIVE;
  bool offsets = false;    // false: shared objects; true: arena offsets
  absl::Status status;     // not OK: the plan was not made (see message)
  size_t total_bytes = 0;  // sum of object sizes, or the arena size
  size_t num_objects = 0;  // objects form only
  double runtime_ms = 0;   // the Assign* call alone
};

struct PlanReport {
  std::string trace_name;
  size_t num_tensors = 0;
  size_t num_tasks = 0;
  size_t num_never_freed = 0;
  // Max over tasks of the bytes of live tensors (after rounding).
  size_t lower_bound_bytes = 0;
  PlanOptions options;
  std::vector<PlanResult> results;

  // The smallest total among successful results (0 if none).
  size_t BestTotalBytes() const;
};

// Plans given records. InvalidArgument for invalid options or records.
absl::StatusOr<PlanReport> PlanRecords(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const PlanOptions& options);

// Plans a compiled trace: UsageRecordsFromTrace, then PlanRecords.
absl::StatusOr<PlanReport> PlanTrace(const CompiledTrace& trace,
                                     const PlanOptions& options);

// A table: per strategy, objects and offsets totals (bytes, MiB, ratio over
// the lower bound) and run times; then the lower bound, the best plan and, if
// given, the online allocator's peak pool bytes with its ratio.
std::string FormatPlanReport(
    const PlanReport& report,
    std::optional<size_t> online_peak_pool_bytes = std::nullopt);

}  // namespace planner
}  // namespace bfc

#endif  // BFC_PLANNER_PLAN_REPORT_H_
