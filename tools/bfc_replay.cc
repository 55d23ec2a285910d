// bfc-replay: replays an allocation trace (RMM logging CSV, plain or gzip)
// against a bfc::Allocator and prints what the pool needed.
//
// Structure: arguments are parsed into a Flags struct (ParseArgs), the
// allocator is built from it (MakeAllocator), the replay runs, and
// PrintSummary renders the result; a new output flag adds a field to Flags and
// a printer beside PrintSummary.
//
// Exit status: 0 when the replay ran (failed allocations are a result, not an
// error), 1 when the trace cannot be read or is inconsistent, 2 for bad usage
// or an unavailable backend.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/report/memory_map_svg.h"
#include "bfc/planner/plan_report.h"
#include "bfc/replay/replay.h"
#include "bfc/report/replay_report.h"
#include "bfc/sub_allocator.h"
#include "bfc/replay/trace.h"
#include "bfc/virtual_sub_allocator.h"
#if defined(BFC_HAVE_CUDA)
#include "bfc/cuda_sub_allocator.h"
#endif

namespace {

constexpr const char* kDefaultTrace = "resnet18-train.csv";

enum class Backend { kVirtual, kHost, kCuda };

struct Flags {
  size_t memory_limit = size_t{16} << 30;
  bool growth = true;
  bool gc = false;
  double fragmentation_fraction = 0;
  Backend backend = Backend::kVirtual;
  bool skip_unknown_frees = false;
  bool plan = false;          // also print the offline planner's report
  bool record_sites = false;  // Options::record_allocation_sites
  // Outputs of the replay report (bfc/report/replay_report.h); empty: not written.
  std::string json_path;
  std::string svg_path;
  std::string html_path;
  bool help = false;
  std::string trace_path;  // empty: the bundled default trace
};

constexpr const char* kUsage =
    R"(usage: bfc-replay [options] [TRACE.csv|TRACE.csv.gz]

Replays an allocation trace (RAPIDS RMM logging CSV:
Thread,Time,Action,Pointer,Size,Stream) against bfc::Allocator and prints the
peak memory the pool needed. With no TRACE, replays the bundled
tests/data/resnet18-train.csv.

options:
  --memory-limit=SIZE           allocator total_memory (default 16GiB). SIZE is
                                bytes or a number with a unit: KiB MiB GiB TiB
                                (powers of 1024; K M G T too), KB MB GB TB
                                (powers of 1000), e.g. 16GiB, 512MiB, 1G
  --growth=true|false           allow_growth: start at 2 MiB and double (default true)
  --gc=true|false               garbage_collection on out-of-memory (default false)
  --fragmentation-fraction=F    split cap as a fraction of the limit, 0 <= F <= 1
                                (default 0: 128 MiB)
  --backend=virtual|host|cuda   where regions come from (default virtual: reserved
                                address space, no memory is touched)
  --skip-unknown-frees          skip frees of pointers that are not live instead of
                                failing
  --plan                        also plan the trace offline (TFLite's strategies)
                                and print each plan's memory against the lower
                                bound (peak live bytes) and this replay's pool
  --json FILE, --json=FILE      write the summary, the timeline (live, in use, pool
                                bytes and fragmentation after every op) and memory
                                maps at the peak of bytes in use and at the end
  --svg FILE                    write the memory maps at the peak and at the end
                                as an SVG picture
  --html FILE                   write a self-contained viewer page (no network):
                                the timeline chart, both maps (hover or click a
                                chunk), the summary numbers
  --record-allocation-sites     capture a stack per allocation (to measure its
                                cost; the sites are in --json and --html)
  --help                        this text
)";

// Human-readable bytes: "835.8 MB (835805832 B)". Decimal units, with the
// exact count beside them so nothing is lost to rounding.
std::string HumanBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"kB", "MB", "GB", "TB", "PB"};
  if (bytes < 1000 && bytes > -1000) return absl::StrFormat("%d B", bytes);
  double v = static_cast<double>(bytes);
  int u = -1;
  while (std::fabs(v) >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  return absl::StrFormat("%.1f %s (%d B)", v, kUnits[u], bytes);
}

// Parses "16GiB", "512MiB", "1G", "1.5GB", "4096". False on anything else.
bool ParseSize(std::string_view s, size_t* out) {
  std::string str(s);
  if (str.empty()) return false;
  const char* begin = str.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (end == begin || errno != 0 || !(v >= 0) || begin[0] == '-' ||
      begin[0] == '+') {
    return false;
  }
  std::string unit(end);
  double mult = 0;
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},         {"B", 1},      {"K", 0x1p10},   {"KiB", 0x1p10},
      {"KB", 1e3},     {"k", 0x1p10}, {"kB", 1e3},     {"M", 0x1p20},
      {"MiB", 0x1p20}, {"MB", 1e6},   {"G", 0x1p30},   {"GiB", 0x1p30},
      {"GB", 1e9},     {"T", 0x1p40}, {"TiB", 0x1p40}, {"TB", 1e12},
  };
  for (const auto& [name, m] : kUnits) {
    if (unit == name) mult = m;
  }
  if (mult == 0) return false;
  double bytes = std::floor(v * mult);
  if (bytes >= 0x1p63) return false;
  *out = static_cast<size_t>(bytes);
  return true;
}

bool ParseBool(std::string_view s, bool* out) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") {
    *out = true;
    return true;
  }
  if (s == "false" || s == "0" || s == "no" || s == "off") {
    *out = false;
    return true;
  }
  return false;
}

// Fills *flags from argv; on a bad argument returns false with *error set to
// one line naming the option and what it accepts.
bool ParseArgs(int argc, char** argv, Flags* flags, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg.size() < 2 || arg.substr(0, 2) != "--") {
      if (!flags->trace_path.empty()) {
        *error = absl::StrFormat(
            "more than one trace given ('%s' and '%s'); pass one",
            flags->trace_path, std::string(arg));
        return false;
      }
      flags->trace_path = std::string(arg);
      continue;
    }
    size_t eq = arg.find('=');
    std::string name(arg.substr(0, eq));
    std::optional<std::string> value;
    if (eq != std::string_view::npos) value = std::string(arg.substr(eq + 1));
    auto need_value = [&](const char* accepted) {
      if (value.has_value()) return true;
      *error = absl::StrFormat("%s needs a value: %s=%s", name, name, accepted);
      return false;
    };
    auto bad_value = [&](const char* accepted) {
      *error = absl::StrFormat("bad value '%s' for %s: expected %s", *value,
                               name, accepted);
      return false;
    };

    if (name == "--help" || name == "-h") {
      flags->help = true;
    } else if (name == "--memory-limit") {
      constexpr const char* kAccepted =
          "a size > 0 in bytes or with a unit (e.g. 16GiB, 512MiB, 1G, "
          "1073741824)";
      if (!need_value(kAccepted)) return false;
      if (!ParseSize(*value, &flags->memory_limit) ||
          flags->memory_limit == 0) {
        return bad_value(kAccepted);
      }
    } else if (name == "--growth" || name == "--gc") {
      if (!need_value("true|false")) return false;
      bool* target = name == "--growth" ? &flags->growth : &flags->gc;
      if (!ParseBool(*value, target)) return bad_value("true or false");
    } else if (name == "--fragmentation-fraction") {
      constexpr const char* kAccepted =
          "a number F with 0 <= F <= 1 (e.g. 0.05)";
      if (!need_value(kAccepted)) return false;
      char* end = nullptr;
      errno = 0;
      double f = std::strtod(value->c_str(), &end);
      if (value->empty() || *end != '\0' || errno != 0 || !(f >= 0 && f <= 1)) {
        return bad_value(kAccepted);
      }
      flags->fragmentation_fraction = f;
    } else if (name == "--backend") {
      constexpr const char* kAccepted = "virtual, host or cuda";
      if (!need_value(kAccepted)) return false;
      if (*value == "virtual") {
        flags->backend = Backend::kVirtual;
      } else if (*value == "host") {
        flags->backend = Backend::kHost;
      } else if (*value == "cuda") {
        flags->backend = Backend::kCuda;
      } else {
        return bad_value(kAccepted);
      }
    } else if (name == "--skip-unknown-frees") {
      if (!value.has_value()) {
        flags->skip_unknown_frees = true;
      } else if (!ParseBool(*value, &flags->skip_unknown_frees)) {
        return bad_value("true or false (or no value)");
      }
    } else if (name == "--json" || name == "--svg" || name == "--html") {
      // Also "--json FILE", as the output path usually follows.
      if (!value.has_value() && i + 1 < argc &&
          std::string_view(argv[i + 1]).substr(0, 2) != "--") {
        value = std::string(argv[++i]);
      }
      if (!need_value("FILE")) return false;
      if (value->empty()) return bad_value("an output file path");
      std::string* target = name == "--json"  ? &flags->json_path
                            : name == "--svg" ? &flags->svg_path
                                              : &flags->html_path;
      *target = *value;
    } else if (name == "--record-allocation-sites") {
      if (!value.has_value()) {
        flags->record_sites = true;
      } else if (!ParseBool(*value, &flags->record_sites)) {
        return bad_value("true or false (or no value)");
      }
    } else if (name == "--plan") {
      if (!value.has_value()) {
        flags->plan = true;
      } else if (!ParseBool(*value, &flags->plan)) {
        return bad_value("true or false (or no value)");
      }
    } else {
      *error =
          absl::StrFormat("unknown option '%s' (see --help)", std::string(arg));
      return false;
    }
  }
  return true;
}

bool FileExists(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

// The bundled trace: from the source tree this binary was built from, else
// next to the executable (build/tools/bfc-replay -> tests/data).
std::string DefaultTracePath() {
#if defined(BFC_SOURCE_DIR)
  std::string from_source =
      std::string(BFC_SOURCE_DIR) + "/tests/data/" + kDefaultTrace;
  if (FileExists(from_source)) return from_source;
#endif
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n > 0) {
    exe[n] = '\0';
    std::string dir(exe);
    dir = dir.substr(0, dir.find_last_of('/'));
    for (const char* rel :
         {"/../tests/data/", "/../../tests/data/", "/../share/bfc/"}) {
      std::string candidate = dir + rel + kDefaultTrace;
      if (FileExists(candidate)) return candidate;
    }
  }
  return std::string("tests/data/") + kDefaultTrace;
}

const char* BackendName(Backend b) {
  switch (b) {
    case Backend::kVirtual:
      return "virtual";
    case Backend::kHost:
      return "host";
    case Backend::kCuda:
      return "cuda";
  }
  return "?";
}

// nullptr with *error set when the backend is unavailable.
std::unique_ptr<bfc::SubAllocator> MakeSubAllocator(const Flags& flags,
                                                    std::string* error) {
  switch (flags.backend) {
    case Backend::kVirtual:
      return std::make_unique<bfc::VirtualSubAllocator>(flags.memory_limit);
    case Backend::kHost:
      return std::make_unique<bfc::HostSubAllocator>();
    case Backend::kCuda: {
#if defined(BFC_HAVE_CUDA)
      std::string why;
      if (bfc::CudaDeviceCount(&why) == 0) {
        *error = "no CUDA device: " +
                 (why.empty() ? std::string("none visible") : why);
        return nullptr;
      }
      return std::make_unique<bfc::CudaDeviceSubAllocator>(0);
#else
      *error = "no CUDA device: this bfc-replay was built without CUDA";
      return nullptr;
#endif
    }
  }
  *error = "unknown backend";
  return nullptr;
}

void PrintSummary(const Flags& flags, const std::string& path,
                  const bfc::CompiledTrace& trace, const bfc::ReplaySummary& s,
                  const bfc::Allocator& allocator) {
  std::printf("trace             %s (%s)\n", s.trace_name.c_str(),
              path.c_str());
  std::printf(
      "allocator         %s backend, limit %s, growth %s, gc %s, "
      "fragmentation fraction %g\n",
      BackendName(flags.backend),
      HumanBytes(static_cast<int64_t>(flags.memory_limit)).c_str(),
      flags.growth ? "on" : "off", flags.gc ? "on" : "off",
      flags.fragmentation_fraction);
  std::printf("events            %zu\n", s.events);
  std::printf("allocations       %zu\n", s.allocations);
  std::printf("frees             %zu\n", s.frees);
  std::printf("failures          %zu", s.failures);
  if (s.skipped_frees > 0)
    std::printf(" (%zu frees of failed allocations skipped)", s.skipped_frees);
  std::printf("\n");
  if (trace.num_failure_rows > 0 || trace.num_unknown_frees > 0) {
    std::printf(
        "not replayed      %zu 'allocate failure' rows, %zu unknown frees\n",
        trace.num_failure_rows, trace.num_unknown_frees);
  }
  if (s.live_at_end > 0) {
    std::printf(
        "live at end       %zu allocations, %s (freed after the summary)\n",
        s.live_at_end,
        HumanBytes(static_cast<int64_t>(s.live_bytes_at_end)).c_str());
  }
  std::printf("peak live bytes   %s\n",
              HumanBytes(static_cast<int64_t>(s.peak_live_bytes)).c_str());
  std::printf("peak in use       %s\n",
              HumanBytes(s.peak_bytes_in_use).c_str());
  std::printf("peak pool bytes   %s\n", HumanBytes(s.peak_pool_bytes).c_str());
  std::printf("footprint ratio   %.3f (peak pool / peak live)\n",
              s.footprint_ratio);
  std::printf("regions           %lld\n", static_cast<long long>(s.regions));
  std::printf("time              %.3f ms, %.1f ns/op\n", s.wall_seconds * 1e3,
              s.ns_per_op);
  std::printf("occupancy         %s\n", allocator.RenderOccupancy().c_str());
}

// The maps of all snapshots stacked in one SVG (nested <svg> elements).
std::string SnapshotsSvg(const bfc::ReplayReport& report) {
  std::string body;
  int y = 0;
  for (const bfc::ReplaySnapshot& s : report.snapshots) {
    bfc::MemoryMapSvgOptions o;
    o.title = absl::StrFormat(
        "Memory map of %s %s (event %d)", report.trace_name,
        s.label == "peak" ? "at the peak of bytes in use" : "at the end",
        s.event_index);
    std::string svg = bfc::RenderMemoryMapSvg(s.dump, o);
    svg = svg.substr(svg.find("<svg"));  // drop the XML declaration
    const int height = std::atoi(svg.c_str() + svg.find("height=\"") +
                                 std::strlen("height=\""));
    body += absl::StrFormat("<g transform=\"translate(0,%d)\">\n", y);
    body += svg;
    body += "</g>\n";
    y += height;
  }
  return absl::StrFormat(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\"%d\" "
      "viewBox=\"0 0 1200 %d\">\n%s</svg>\n",
      y, y, body);
}

bool WriteFile(const std::string& path, const std::string& text,
               const char* what) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "bfc-replay: cannot write %s to '%s': %s\n", what,
                 path.c_str(), std::strerror(errno));
    return false;
  }
  std::fprintf(stderr, "bfc-replay: wrote %s to %s\n", what, path.c_str());
  return true;
}

// --json / --svg / --html: replays again into fresh allocators configured
// like the first (BuildReplayReport needs two), then writes each output.
// Returns the exit status.
int WriteReport(const Flags& flags, const bfc::CompiledTrace& compiled,
                const bfc::Allocator::Options& options) {
  std::string error;
  auto make = [&]() -> std::unique_ptr<bfc::Allocator> {
    std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(flags, &error);
    if (sub == nullptr) return nullptr;
    return std::make_unique<bfc::Allocator>(std::move(sub), flags.memory_limit,
                                            "bfc-replay", options);
  };
  bfc::ReplayReportOptions report_options;
  // Progress on a terminal, once the work has taken a second.
  const bool tty = isatty(STDERR_FILENO) != 0;
  const absl::Time start = absl::Now();
  bool shown = false;
  report_options.progress = [&](size_t done, size_t total) {
    if (!tty || absl::Now() - start < absl::Seconds(1) || total == 0) return;
    shown = true;
    std::fprintf(stderr, "\rbfc-replay: building the report: %3d%%",
                 static_cast<int>(100 * done / total));
    std::fflush(stderr);
  };
  absl::StatusOr<bfc::ReplayReport> report =
      bfc::BuildReplayReport(compiled, make, report_options);
  if (shown) std::fprintf(stderr, "\r%50s\r", "");
  if (!report.ok()) {
    std::fprintf(stderr, "bfc-replay: report: %s\n",
                 std::string(report.status().message()).c_str());
    return 1;
  }
  bool ok = true;
  if (!flags.json_path.empty()) {
    ok &= WriteFile(flags.json_path, bfc::ReplayReportToJson(*report, 1),
                    "the JSON report");
  }
  if (!flags.svg_path.empty()) {
    ok &= WriteFile(flags.svg_path, SnapshotsSvg(*report), "the memory maps");
  }
  if (!flags.html_path.empty()) {
    ok &= WriteFile(flags.html_path, bfc::RenderReplayReportHtml(*report),
                    "the viewer page");
  }
  return ok ? 0 : 1;
}

int Main(int argc, char** argv) {
  Flags flags;
  std::string error;
  if (!ParseArgs(argc, argv, &flags, &error)) {
    std::fprintf(stderr, "bfc-replay: %s\n", error.c_str());
    return 2;
  }
  if (flags.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  std::string path =
      flags.trace_path.empty() ? DefaultTracePath() : flags.trace_path;

  // The backend is checked before the trace is read, so an unusable backend
  // is reported at once rather than after parsing a large file.
  std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(flags, &error);
  if (sub == nullptr) {
    std::fprintf(stderr, "bfc-replay: %s\n", error.c_str());
    return 2;
  }

  absl::StatusOr<bfc::Trace> trace = bfc::ReadTrace(path);
  if (!trace.ok()) {
    std::fprintf(stderr, "bfc-replay: %s\n",
                 std::string(trace.status().message()).c_str());
    return 1;
  }
  bfc::CompileOptions compile_options;
  compile_options.skip_unknown_frees = flags.skip_unknown_frees;
  absl::StatusOr<bfc::CompiledTrace> compiled =
      bfc::CompileTrace(*trace, compile_options);
  if (!compiled.ok()) {
    std::fprintf(stderr, "bfc-replay: %s\n",
                 std::string(compiled.status().message()).c_str());
    return 1;
  }
  trace = bfc::Trace();  // the events are not needed any more

  bfc::Allocator::Options options;
  options.allow_growth = flags.growth;
  options.garbage_collection = flags.gc;
  options.fragmentation_fraction = flags.fragmentation_fraction;
  options.allow_retry_on_failure = false;  // single-threaded: nobody would free
  options.record_allocation_sites = flags.record_sites;
  bfc::Allocator allocator(std::move(sub), flags.memory_limit, "bfc-replay",
                           options);

  bfc::Replayer replayer(*compiled, allocator);
  absl::StatusOr<bfc::ReplaySummary> summary = replayer.Run();
  if (!summary.ok()) {
    std::fprintf(stderr, "bfc-replay: %s\n",
                 std::string(summary.status().message()).c_str());
    return 1;
  }
  PrintSummary(flags, path, *compiled, *summary, allocator);
  replayer.ReleaseLive();
  if (!flags.json_path.empty() || !flags.svg_path.empty() ||
      !flags.html_path.empty()) {
    const int status = WriteReport(flags, *compiled, options);
    if (status != 0) return status;
  }
  if (flags.plan) {
    absl::StatusOr<bfc::planner::PlanReport> report =
        bfc::planner::PlanTrace(*compiled, bfc::planner::PlanOptions());
    if (!report.ok()) {
      std::fprintf(stderr, "bfc-replay: --plan: %s\n",
                   std::string(report.status().message()).c_str());
      return 1;
    }
    std::printf("\n%s",
                bfc::planner::FormatPlanReport(
                    *report, static_cast<size_t>(summary->peak_pool_bytes))
                    .c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
