// bfc-plan: offline memory plans for allocation traces.
//
// For each trace (RMM logging CSV, plain or gzip) it builds the planner's
// usage records (an event is a task), runs every planner strategy in both
// forms (shared objects and arena offsets) and prints their totals and run
// times against the lower bound (peak live bytes), and against an online
// allocator's peak pool size when given with --online-peak.
//
// Flags: CLI11 (tools/tool_flags.h), chosen because it is header-only
// (nothing to link or ship), has no global flag registry (Abseil's flags are
// process-global and exit(1) on a bad flag, while a usage error here must exit
// 2), generates --help from the declarations, and has typed options with
// validators. Flags bfc-replay has too (--skip-unknown-frees,
// --summary-json, --quiet, --verbose) are declared once, in tool_flags.cc.
//
// Exit status: 0 when every trace was planned, 1 when a trace cannot be read
// or is inconsistent or an output could not be written, 2 for bad usage.
#include <unistd.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bfc/planner/memory_management.h"
#include "bfc/planner/plan_report.h"
#include "bfc/replay/trace.h"
#include "bfc/units.h"
#include "nlohmann/json.hpp"
#include "tool_flags.h"
#include "tool_io.h"

namespace {

using bfc::tools::kExitBadInput;
using bfc::tools::kExitOk;
using bfc::tools::kExitUsage;
using bfc::tools::PrintError;

constexpr char kToolName[] = "bfc-plan";

constexpr char kDescription[] =
    "Plans every trace offline with TFLite's memory strategies and prints "
    "each strategy's total (shared objects and arena offsets), its run time, "
    "and its ratio over the lower bound (peak live bytes).";

constexpr char kFooter[] =
    "Exit status: 0 ok; 1 bad input (a trace that cannot be read or is "
    "inconsistent) or an output that could not be written; 2 usage error.";

constexpr char kSummaryKeys[] =
    "traces: one object per TRACE with trace, trace_path, events, tensors, "
    "peak_live_bytes (the lower bound), best_total_bytes, "
    "online_peak_pool_bytes (with --online-peak) and plans (strategy, form, "
    "ok, total_bytes, ratio, runtime_ms)";

struct Flags {
  std::vector<std::string> traces;
  bool skip_unknown_frees = false;
  std::string round = "1";
  std::string align = "1";
  std::string online_peak;  // empty: not given
  bool no_validate = false;
  std::vector<std::string> strategies;  // empty: PlanOptions' default list
  size_t max_quadratic_tensors =
      bfc::planner::PlanOptions().max_quadratic_tensors;
  std::string summary_json_path;
  bfc::tools::Verbosity verbosity;
};

void DeclareFlags(CLI::App& app, Flags* f) {
  using namespace bfc::tools;  // NOLINT: group names and helpers
  app.add_option("TRACE", f->traces,
                 "RMM logging CSV (.csv or .csv.gz), one or more; '-' reads "
                 "standard input (plain or gzip)")
      ->type_name("")
      ->required()
      ->group(kGroupInputs);
  AddSkipUnknownFreesFlag(app, &f->skip_unknown_frees);

  app.add_option("--round", f->round,
                 "Round every tensor size up to a multiple of SIZE (256 "
                 "mirrors BFC's minimum allocation size); at most 1 GiB. "
                 "Default: 1")
      ->type_name("SIZE")
      ->check(
          ByteSizeValidator(/*positive=*/true, bfc::planner::kMaxPlanAlignment))
      ->group(kGroupPlanner);
  app.add_option("--align", f->align,
                 "Align arena offsets to SIZE bytes; at most 1 GiB. Default: 1")
      ->type_name("SIZE")
      ->check(
          ByteSizeValidator(/*positive=*/true, bfc::planner::kMaxPlanAlignment))
      ->group(kGroupPlanner);
  app.add_option("--online-peak", f->online_peak,
                 "An online allocator's peak pool bytes (bfc-replay's 'peak "
                 "pool bytes'), printed alongside every trace's plans")
      ->type_name("SIZE")
      ->check(ByteSizeValidator(/*positive=*/false))
      ->group(kGroupPlanner);
  app.add_flag("--no-validate", f->no_validate,
               "Do not validate each plan (validation is not timed)")
      ->group(kGroupPlanner);
  std::vector<std::string> names;
  for (bfc::planner::MemoryStrategy s :
       bfc::planner::PlanOptions().strategies) {
    names.push_back(bfc::planner::MemoryStrategyName(s));
  }
  app.add_option("--strategies", f->strategies,
                 "Run only these strategies, in this order (comma-separated). "
                 "Default: all")
      ->type_name("NAME,...")
      ->delimiter(',')
      ->check(CLI::IsMember(names, CLI::ignore_case))
      ->group(kGroupPlanner);
  app.add_option(
         "--max-quadratic-tensors", f->max_quadratic_tensors,
         "Skip the strategies whose time grows with the square of the "
         "tensors or worse (GREEDY_BY_SIZE's objects form, GREEDY_BEST, "
         "MINCOSTFLOW) on traces with more tensors than this, and stop any "
         "strategy past a work budget of this number squared plus 4096 steps "
         "per tensor, each with a note (0: neither)")
      ->type_name("COUNT")
      ->capture_default_str()
      // CLI11 reads "-1" into a size_t as 2^64 - 1, and "" as 0.
      ->check(CLI::Validator(
          [](std::string& v) {
            size_t n;
            return absl::SimpleAtoi(v, &n) && !v.empty() && v[0] != '-' &&
                           v[0] != '+'
                       ? std::string()
                       : std::string("a whole number of tensors, 0 or more");
          },
          ""))
      ->group(kGroupPlanner);

  AddSummaryJsonFlag(app, &f->summary_json_path, kSummaryKeys);
  AddVerbosityFlags(app, &f->verbosity);
}

nlohmann::ordered_json TraceJson(const std::string& path,
                                 const bfc::CompiledTrace& trace,
                                 const bfc::planner::PlanReport& report,
                                 std::optional<uint64_t> online_peak) {
  nlohmann::ordered_json j;
  j["trace"] = trace.name;
  j["trace_path"] = path;
  j["events"] = trace.num_events;
  j["tensors"] = report.num_tensors;
  j["tasks"] = report.num_tasks;
  j["never_freed"] = report.num_never_freed;
  j["peak_live_bytes"] = report.lower_bound_bytes;
  j["best_total_bytes"] = report.BestTotalBytes();
  if (online_peak.has_value()) j["online_peak_pool_bytes"] = *online_peak;
  nlohmann::ordered_json plans = nlohmann::ordered_json::array();
  for (const bfc::planner::PlanResult& r : report.results) {
    nlohmann::ordered_json p;
    p["strategy"] = bfc::planner::MemoryStrategyName(r.strategy);
    p["form"] = r.offsets ? "offsets" : "objects";
    p["ok"] = r.status.ok();
    if (r.status.ok()) {
      p["total_bytes"] = r.total_bytes;
      p["ratio"] = report.lower_bound_bytes == 0
                       ? 0.0
                       : static_cast<double>(r.total_bytes) /
                             static_cast<double>(report.lower_bound_bytes);
      if (!r.offsets) p["objects"] = r.num_objects;
      p["runtime_ms"] = r.runtime_ms;
    } else {
      p["error"] = std::string(r.status.message());
    }
    plans.push_back(std::move(p));
  }
  j["plans"] = std::move(plans);
  return j;
}

int Main(int argc, char** argv) {
  CLI::App app(kDescription, kToolName);
  bfc::tools::ConfigureApp(app, kFooter);
  Flags flags;
  DeclareFlags(app, &flags);
  if (std::optional<int> exit = bfc::tools::ParseCommandLine(app, argc, argv)) {
    return *exit;
  }
  const bool quiet = flags.verbosity.quiet;

  bfc::planner::PlanOptions options;
  options.round_sizes_to = bfc::tools::ByteSizeValue(flags.round);
  options.base_addr_align_bytes = bfc::tools::ByteSizeValue(flags.align);
  options.validate = !flags.no_validate;
  options.max_quadratic_tensors = flags.max_quadratic_tensors;
  if (!flags.strategies.empty()) {
    options.strategies.clear();
    for (const std::string& name : flags.strategies) {
      for (bfc::planner::MemoryStrategy s :
           bfc::planner::PlanOptions().strategies) {
        if (absl::EqualsIgnoreCase(name, bfc::planner::MemoryStrategyName(s))) {
          options.strategies.push_back(s);
        }
      }
    }
  }
  // Progress on a terminal only, one line rewritten in place: a plan of a
  // large trace takes seconds to minutes, and silence looks like a hang.
  if (!quiet && isatty(STDERR_FILENO)) {
    // Called again while a long strategy runs: the line then shows how long
    // it has been running, redrawn at most four times a second.
    options.on_progress = [rows = bfc::tools::RowProgress()](
                              size_t done, size_t total,
                              const char* name) mutable {
      if (done >= total) {
        rows.Reset();  // the next trace starts afresh
        std::fprintf(stderr, "\r%*s\r", 70, "");
        std::fflush(stderr);
        return;
      }
      int64_t seconds = 0;
      if (!rows.Update(done, total, absl::Now(), &seconds)) return;
      if (seconds > 0) {
        std::fprintf(stderr, "\r%s: planning %zu/%zu %-20s %4llds", kToolName,
                     done + 1, total, name, static_cast<long long>(seconds));
      } else {
        std::fprintf(stderr, "\r%s: planning %zu/%zu %-20s      ", kToolName,
                     done + 1, total, name);
      }
      std::fflush(stderr);
    };
  }
  bfc::CompileOptions compile_options;
  compile_options.skip_unknown_frees = flags.skip_unknown_frees;
  std::optional<uint64_t> online_peak;
  if (!flags.online_peak.empty()) {
    online_peak = bfc::tools::ByteSizeValue(flags.online_peak);
  }

  std::vector<bfc::tools::NamedPath> inputs;
  int from_stdin = 0;
  for (const std::string& t : flags.traces) {
    inputs.push_back({"TRACE", t});
    from_stdin += t == bfc::tools::kStdioPath;
  }
  if (from_stdin > 1) {
    PrintError(app, "'-' (standard input) is given more than once");
    return kExitUsage;
  }
  std::vector<bfc::tools::NamedPath> outputs;
  if (!flags.summary_json_path.empty()) {
    outputs.push_back({"--summary-json", flags.summary_json_path});
  }
  if (absl::Status s = bfc::tools::CheckDistinctPaths(inputs, outputs);
      !s.ok()) {
    PrintError(app, s.message());
    return kExitUsage;
  }
  if (flags.verbosity.verbose) {
    std::fprintf(stderr, "%s: round %zu, align %zu, validate %s%s\n", kToolName,
                 options.round_sizes_to, options.base_addr_align_bytes,
                 options.validate ? "true" : "false",
                 online_peak.has_value()
                     ? absl::StrCat(", online peak ",
                                    bfc::HumanReadableBytesExact(*online_peak))
                           .c_str()
                     : "");
  }

  // With the summary JSON on stdout, the text goes to stderr.
  std::FILE* text =
      flags.summary_json_path == bfc::tools::kStdioPath ? stderr : stdout;
  nlohmann::ordered_json traces = nlohmann::ordered_json::array();
  int planned = 0;
  for (const std::string& path : flags.traces) {
    if (flags.verbosity.verbose) {
      std::fprintf(stderr, "%s: planning %s\n", kToolName,
                   bfc::tools::ForTerminal(path).c_str());
    }
    absl::StatusOr<bfc::Trace> trace = bfc::tools::ReadTraceArg(path);
    if (!trace.ok()) {
      PrintError(app, trace.status().message());
      return kExitBadInput;
    }
    absl::StatusOr<bfc::CompiledTrace> compiled =
        bfc::CompileTrace(*trace, compile_options);
    if (!compiled.ok()) {
      PrintError(app, compiled.status().message());
      return kExitBadInput;
    }
    absl::StatusOr<bfc::planner::PlanReport> report =
        bfc::planner::PlanTrace(*compiled, options);
    if (!report.ok()) {
      PrintError(app, report.status().message());
      return kExitBadInput;
    }
    if (!quiet) {
      if (planned > 0) std::fputs("\n", text);
      std::optional<size_t> peak;
      if (online_peak.has_value()) peak = static_cast<size_t>(*online_peak);
      // The name as a terminal should show it; the JSON keeps it as it is.
      const std::string name = report->trace_name;
      report->trace_name = bfc::tools::ForTerminal(name);
      std::fputs(bfc::planner::FormatPlanReport(*report, peak).c_str(), text);
      report->trace_name = name;
    }
    ++planned;
    traces.push_back(TraceJson(path, *compiled, *report, online_peak));
  }

  if (!flags.summary_json_path.empty()) {
    nlohmann::ordered_json j;
    j["format"] = "bfc-plan-summary";
    j["round"] = options.round_sizes_to;
    j["align"] = options.base_addr_align_bytes;
    j["validate"] = options.validate;
    j["traces"] = std::move(traces);
    // Trace names may hold any bytes: invalid UTF-8 becomes U+FFFD.
    const std::string json =
        j.dump(2, ' ', /*ensure_ascii=*/false,
               nlohmann::ordered_json::error_handler_t::replace) +
        "\n";
    if (flags.summary_json_path == bfc::tools::kStdioPath) {
      std::fwrite(json.data(), 1, json.size(), stdout);  // checked in main
    } else {
      absl::Status s =
          bfc::tools::WriteFileAtomically(flags.summary_json_path, json);
      if (!s.ok()) {
        PrintError(app,
                   absl::StrCat("cannot write the summary: ", s.message()));
        return kExitBadInput;
      }
      if (!quiet) {
        std::fprintf(stderr, "%s: wrote the summary to %s\n", kToolName,
                     bfc::tools::ForTerminal(flags.summary_json_path).c_str());
      }
    }
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return bfc::tools::FinishStandardOutput(kToolName, Main(argc, argv));
}
