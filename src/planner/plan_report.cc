#include "bfc/planner/plan_report.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"
#include "bfc/planner/trace_records.h"
#include "bfc/units.h"
#include "planner/internal.h"

namespace bfc {
namespace planner {
namespace {

std::string Ratio(size_t bytes, size_t lower_bound) {
  if (lower_bound == 0) return "-";
  return bfc::internal::Format("%.3f",
                               static_cast<double>(bytes) / lower_bound);
}

PlanResult RunOne(const std::vector<TensorUsageRecord<size_t>>& records,
                  MemoryStrategy strategy, bool offsets,
                  const PlanOptions& options) {
  PlanResult result;
  result.strategy = strategy;
  result.offsets = offsets;
  const auto start = std::chrono::steady_clock::now();
  if (offsets) {
    OffsetsAssignment plan;
    result.status = AssignOffsetsToTensors(records, strategy, &plan,
                                           options.base_addr_align_bytes);
    result.runtime_ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    if (!result.status.ok()) return result;
    result.total_bytes = plan.total_size;
    if (options.validate) {
      absl::Status valid =
          ValidateAssignment(records, plan, options.base_addr_align_bytes);
      if (!valid.ok()) {
        result.status = absl::InternalError(
            absl::StrCat("invalid plan: ", valid.message()));
      }
    }
  } else {
    ObjectsAssignment<size_t> plan;
    result.status = AssignObjectsToTensors(records, strategy, &plan);
    result.runtime_ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    if (!result.status.ok()) return result;
    result.total_bytes = internal::TotalSize(plan);
    result.num_objects = plan.object_sizes.size();
    if (options.validate) {
      absl::Status valid = ValidateAssignment(records, plan);
      if (!valid.ok()) {
        result.status = absl::InternalError(
            absl::StrCat("invalid plan: ", valid.message()));
      }
    }
  }
  return result;
}

}  // namespace

static_assert(kMaxPlanAlignment == internal::kMaxAlignment,
              "the public limit is the one the strategies check");

size_t PlanReport::BestTotalBytes() const {
  size_t best = 0;
  for (const PlanResult& result : results) {
    if (result.status.ok() && (best == 0 || result.total_bytes < best)) {
      best = result.total_bytes;
    }
  }
  return best;
}

absl::StatusOr<PlanReport> PlanRecords(
    const std::vector<TensorUsageRecord<size_t>>& usage_records,
    const PlanOptions& options) {
  absl::Status status = internal::CheckAlignment(options.base_addr_align_bytes,
                                                 "base_addr_align_bytes");
  if (!status.ok()) return status;
  status = internal::CheckAlignment(options.round_sizes_to, "round_sizes_to");
  if (!status.ok()) return status;
  status = internal::CheckRecords(usage_records);
  if (!status.ok()) return status;
  std::vector<TensorUsageRecord<size_t>> records = usage_records;
  for (size_t i = 0; i < records.size(); ++i) {
    size_t rounded;
    if (!internal::CheckedAlignByN(records[i].tensor_size,
                                   options.round_sizes_to, &rounded)) {
      return absl::InvalidArgumentError(
          absl::StrCat("usage record ", i, ": tensor_size ",
                       records[i].tensor_size, " rounded up to a multiple of ",
                       options.round_sizes_to, " exceeds 2^64-1"));
    }
    records[i].tensor_size = rounded;
  }
  // Rounding may bring the total past the planner's limit.
  status = internal::CheckRecords(records);
  if (!status.ok()) return status;
  PlanReport report;
  report.options = options;
  report.num_tensors = records.size();
  report.lower_bound_bytes = internal::PeakLiveSize(records);
  std::vector<std::pair<MemoryStrategy, bool>> rows;
  for (MemoryStrategy strategy : options.strategies) {
    if (options.objects) rows.emplace_back(strategy, false);
    if (options.offsets) rows.emplace_back(strategy, true);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto [strategy, offsets] = rows[i];
    if (options.on_progress) {
      options.on_progress(i, rows.size(), MemoryStrategyName(strategy));
    }
    if (options.max_quadratic_tensors != 0 &&
        records.size() > options.max_quadratic_tensors &&
        IsQuadraticStrategy(strategy, offsets)) {
      PlanResult skipped;
      skipped.strategy = strategy;
      skipped.offsets = offsets;
      skipped.status = absl::ResourceExhaustedError(absl::StrCat(
          "not run: its time grows with the square of the tensors, and ",
          records.size(), " tensors exceed max_quadratic_tensors (",
          options.max_quadratic_tensors, "); raise the limit to run it"));
      report.results.push_back(std::move(skipped));
      continue;
    }
    // Every strategy runs under a work budget: those called linear above
    // are so on traces, not on every input (all tensors live at once makes
    // them quadratic too), and a quadratic one under the tensor limit can
    // still meet its worst case.
    uint64_t budget = std::numeric_limits<uint64_t>::max();
    if (options.max_quadratic_tensors != 0) {
      uint64_t square, per_tensor;
      if (!__builtin_mul_overflow(uint64_t{options.max_quadratic_tensors},
                                  uint64_t{options.max_quadratic_tensors},
                                  &square) &&
          !__builtin_mul_overflow(uint64_t{records.size()}, uint64_t{4096},
                                  &per_tensor) &&
          square <= budget - per_tensor) {
        budget = square + per_tensor;
      }
    }
    // While a long strategy runs, the same row is reported again now and
    // then (from its charged work), so a tool can show it is not stuck.
    std::function<void()> tick;
    if (options.on_progress) {
      tick = [&options, i = i, n = rows.size(), strategy = strategy] {
        options.on_progress(i, n, MemoryStrategyName(strategy));
      };
    }
    internal::WorkBudgetScope scope(budget, &tick);
    report.results.push_back(RunOne(records, strategy, offsets, options));
  }
  if (options.on_progress) {
    options.on_progress(rows.size(), rows.size(), "");
  }
  return report;
}

bool IsQuadraticStrategy(MemoryStrategy strategy, bool offsets) {
  switch (strategy) {
    // Its offsets form visits only intersecting tensors (linear on traces);
    // its objects form (TFLite's distance priority) must follow every change
    // of every tensor's nearest object, which grows faster than n.
    case MemoryStrategy::GREEDY_BY_SIZE:
      return !offsets;
    // Runs GREEDY_BY_SIZE's objects form in both forms.
    case MemoryStrategy::GREEDY_BEST:
    // Its graph limit alone lets 50k tensors run for minutes: shortest-path
    // phases times edges.
    case MemoryStrategy::MINCOSTFLOW:
      return true;
    case MemoryStrategy::NAIVE:
    case MemoryStrategy::EQUALITY:
    case MemoryStrategy::GREEDY_IN_ORDER:
    case MemoryStrategy::GREEDY_BY_BREADTH:
      return false;
  }
  return false;
}

absl::StatusOr<PlanReport> PlanTrace(const CompiledTrace& trace,
                                     const PlanOptions& options) {
  absl::StatusOr<TraceUsage> usage = UsageRecordsFromTrace(trace);
  if (!usage.ok()) return usage.status();
  absl::StatusOr<PlanReport> report = PlanRecords(usage->records, options);
  if (!report.ok()) return report.status();
  report->trace_name = trace.name;
  report->num_tasks = usage->num_tasks;
  report->num_never_freed = usage->num_never_freed;
  return report;
}

std::string FormatPlanReport(const PlanReport& report,
                             std::optional<size_t> online_peak_pool_bytes) {
  const size_t lb = report.lower_bound_bytes;
  std::string out = bfc::internal::Format(
      "Offline plan for %s: %d tensors over %d tasks (%d never freed); sizes "
      "rounded to %d, offsets aligned to %d\n",
      report.trace_name.empty() ? "(records)" : report.trace_name,
      report.num_tensors, report.num_tasks, report.num_never_freed,
      report.options.round_sizes_to, report.options.base_addr_align_bytes);
  bfc::internal::AppendFormat(&out, "lower bound (peak live bytes): %s\n\n",
                              HumanReadableBytesExact(lb));
  bfc::internal::AppendFormat(
      &out, "%-18s | %14s %10s %7s %9s | %14s %10s %7s %9s\n", "strategy",
      "objects bytes", "", "x LB", "ms", "offsets bytes", "", "x LB", "ms");
  std::vector<std::string> notes;
  auto cell = [&](const PlanResult* r) -> std::string {
    if (r == nullptr)
      return bfc::internal::Format("%14s %10s %7s %9s", "-", "", "", "");
    if (!r->status.ok()) {
      notes.push_back(absl::StrCat(MemoryStrategyName(r->strategy),
                                   r->offsets ? " offsets" : " objects", ": ",
                                   r->status.ToString()));
      return bfc::internal::Format("%14s %10s %7s %9.1f", "skipped", "", "",
                                   r->runtime_ms);
    }
    return bfc::internal::Format("%14d %10s %7s %9.1f", r->total_bytes,
                                 HumanReadableBytes(r->total_bytes),
                                 Ratio(r->total_bytes, lb), r->runtime_ms);
  };
  for (MemoryStrategy strategy : report.options.strategies) {
    const PlanResult* objects = nullptr;
    const PlanResult* offsets = nullptr;
    for (const PlanResult& r : report.results) {
      if (r.strategy != strategy) continue;
      (r.offsets ? offsets : objects) = &r;
    }
    bfc::internal::AppendFormat(&out, "%-18s | %s | %s\n",
                                MemoryStrategyName(strategy), cell(objects),
                                cell(offsets));
  }
  out += "\n";
  bfc::internal::AppendFormat(&out, "%-26s %14d %10s  x LB %s\n", "lower bound",
                              lb, HumanReadableBytes(lb), Ratio(lb, lb));
  const size_t best = report.BestTotalBytes();
  bfc::internal::AppendFormat(&out, "%-26s %14d %10s  x LB %s\n",
                              "best offline plan", best,
                              HumanReadableBytes(best), Ratio(best, lb));
  if (online_peak_pool_bytes.has_value()) {
    const size_t online = *online_peak_pool_bytes;
    bfc::internal::AppendFormat(&out, "%-26s %14d %10s  x LB %s",
                                "online peak pool", online,
                                HumanReadableBytes(online), Ratio(online, lb));
    if (best > 0) {
      bfc::internal::AppendFormat(&out, "  (x best plan %.3f)",
                                  static_cast<double>(online) / best);
    }
    out += "\n";
  }
  for (const std::string& note : notes)
    absl::StrAppend(&out, "note: ", note, "\n");
  return out;
}

}  // namespace planner
}  // namespace bfc
