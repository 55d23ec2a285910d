// bfc-plan: offline memory plans for allocation traces.
//
// For each trace (RMM logging CSV, plain or gzip) it builds the planner's
// usage records (an event is a task), runs every planner strategy in both
// forms (shared objects and arena offsets) and prints their totals and run
// times against the lower bound (peak live bytes), and against an online
// allocator's peak pool size when given with --online-peak.
//
// Exit status: 0 when every trace was planned, 1 when a trace cannot be read
// or is inconsistent, 2 for bad usage.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "bfc/planner/plan_report.h"
#include "bfc/replay/trace.h"

namespace {

constexpr const char* kUsage =
    R"(usage: bfc-plan [options] TRACE.csv[.gz]...

Plans every trace offline with TFLite's memory strategies and prints each
strategy's total (objects and offsets), its run time, and its ratio over the
lower bound (peak live bytes).

options:
  --round=N           round every tensor size up to a multiple of N (default 1;
                      256 mirrors BFC's minimum allocation size)
  --align=N           align arena offsets to N bytes (default 1)
  --online-peak=B     an online allocator's peak pool bytes, printed alongside
                      (applies to every trace given after it)
  --skip-unknown-frees  skip frees of pointers that are not live
  --no-validate       do not validate each plan
  -h, --help          this text
)";

bool ParseSize(std::string_view arg, std::string_view flag, size_t* out) {
  if (arg.substr(0, flag.size()) != flag) return false;
  uint64_t value = 0;
  if (!absl::SimpleAtoi(std::string(arg.substr(flag.size())), &value)) {
    std::fprintf(stderr, "bfc-plan: bad number in '%.*s'\n",
                 static_cast<int>(arg.size()), arg.data());
    std::exit(2);
  }
  *out = static_cast<size_t>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bfc::planner::PlanOptions options;
  bfc::CompileOptions compile_options;
  std::optional<size_t> online_peak;
  int planned = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    size_t value = 0;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (ParseSize(arg, "--round=", &options.round_sizes_to) ||
               ParseSize(arg, "--align=", &options.base_addr_align_bytes)) {
      if (options.round_sizes_to == 0 || options.base_addr_align_bytes == 0) {
        std::fputs("bfc-plan: --round and --align must be positive\n", stderr);
        return 2;
      }
    } else if (ParseSize(arg, "--online-peak=", &value)) {
      online_peak = value;
    } else if (arg == "--skip-unknown-frees") {
      compile_options.skip_unknown_frees = true;
    } else if (arg == "--no-validate") {
      options.validate = false;
    } else if (!arg.empty() && arg[0] == '-') {
      std::fprintf(stderr, "bfc-plan: unknown option '%s'\n%s", argv[i],
                   kUsage);
      return 2;
    } else {
      absl::StatusOr<bfc::Trace> trace = bfc::ReadTrace(argv[i]);
      if (!trace.ok()) {
        std::fprintf(stderr, "bfc-plan: %s\n",
                     trace.status().ToString().c_str());
        return 1;
      }
      absl::StatusOr<bfc::CompiledTrace> compiled =
          bfc::CompileTrace(*trace, compile_options);
      if (!compiled.ok()) {
        std::fprintf(stderr, "bfc-plan: %s\n",
                     compiled.status().ToString().c_str());
        return 1;
      }
      absl::StatusOr<bfc::planner::PlanReport> report =
          bfc::planner::PlanTrace(*compiled, options);
      if (!report.ok()) {
        std::fprintf(stderr, "bfc-plan: %s\n",
                     report.status().ToString().c_str());
        return 1;
      }
      if (planned++ > 0) std::fputs("\n", stdout);
      std::fputs(bfc::planner::FormatPlanReport(*report, online_peak).c_str(),
                 stdout);
    }
  }
  if (planned == 0) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  return 0;
}
