// bfc-replay: replays an allocation trace (RMM logging CSV, plain or gzip)
// against a bfc::Allocator and prints what the pool needed.
//
// Flags: CLI11 (tools/tool_flags.h), chosen because it is header-only
// (nothing to link or ship), has no global flag registry (Abseil's flags are
// process-global and exit(1) on a bad flag, while a usage error here must exit
// 2), generates --help from the declarations, and has typed options with
// validators. Every allocator option gets a flag generated from the option
// table (bfc::AllocatorOptionFields()), so a new option appears here, in
// --help and in --conf without touching this file.
//
// Settings, each layer overriding the one before: bfc-replay's defaults
// (TF's, except allow_retry_on_failure=false: a one-thread replay has nobody
// to wait for), the BFC_ALLOC_CONF environment variable, --conf, then the
// flags given.
//
// Files: outputs are only ever the value of their flag, are refused when they
// name the trace, another output or an existing trace, and are written
// atomically (tools/tool_io.h), so a failed run leaves existing files as they
// were.
//
// Exit status: 0 ok; 1 bad input (a trace that cannot be read or is
// inconsistent) or an output that could not be written; 2 bad usage or an
// unavailable backend; 3 the replay ran but allocations failed (0 with
// --expect-failures, for runs that probe a limit on purpose).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/account.h"
#include "bfc/allocator.h"
#include "bfc/allocator_options.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/log.h"
#include "bfc/planner/plan_report.h"
#include "bfc/pytorch_snapshot.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/report/memory_map_svg.h"
#include "bfc/report/policy_panels_svg.h"
#include "bfc/report/replay_report.h"
#include "bfc/sub_allocator.h"
#include "bfc/units.h"
#include "bfc/virtual_sub_allocator.h"
#include "c_api/alloc_conf.h"
#include "nlohmann/json.hpp"
#include "replay_profile.h"
#include "tool_flags.h"
#include "tool_io.h"
#if defined(BFC_HAVE_CUDA)
#include "bfc/cuda_sub_allocator.h"
#include "bfc/cuda_vmm_sub_allocator.h"
#endif

namespace {

using bfc::c_api::Backend;
using bfc::tools::kExitBadInput;
using bfc::tools::kExitFailedAllocations;
using bfc::tools::kExitOk;
using bfc::tools::kExitUsage;
using bfc::tools::NamedPath;
using bfc::tools::PrintError;

constexpr char kToolName[] = "bfc-replay";
constexpr char kDefaultTrace[] = "resnet18-train.csv";
constexpr uint64_t kDefaultMemoryLimit = uint64_t{16} << 30;

// Where a setting came from, for --verbose.
constexpr char kFromDefault[] = "default";
constexpr char kFromEnv[] = "BFC_ALLOC_CONF";
constexpr char kFromConf[] = "--conf";

constexpr char kDescription[] =
    "Replays an allocation trace (RAPIDS RMM logging CSV: "
    "Thread,Time,Action,Pointer,Size,Stream; plain or gzip) against "
    "bfc::Allocator and prints the memory the pool needed. With no TRACE it "
    "replays the bundled resnet18-train.csv (installed in share/bfc/traces).";

constexpr char kFooter[] =
    "Settings apply in this order, each overriding the one before: "
    "bfc-replay's defaults, the BFC_ALLOC_CONF environment variable, --conf, "
    "then the flags given.\n"
    "Exit status: 0 ok; 1 bad input (a trace that cannot be read or is "
    "inconsistent) or an output that could not be written; 2 usage error or "
    "unavailable backend; 3 the replay ran but allocations failed (0 with "
    "--expect-failures).";

constexpr char kSummaryKeys[] =
    "trace, trace_path, events, allocations, frees, failures, "
    "peak_live_bytes, peak_bytes_in_use, peak_pool_bytes, footprint, regions, "
    "sub_allocator_allocs, sub_allocator_frees, ns_per_op, backend, "
    "memory_limit, options (each option as text); with --streams: streams "
    "(trace_streams, events_recorded, event_queries, waits_inserted, "
    "synchronizations, bytes_pending_at_end); with phases: phases_file, "
    "iterations, last_iteration (phase, events, sub_allocator_allocs, "
    "sub_allocator_frees, peak_pool_bytes); with --accounts: accounts (path, "
    "peak_bytes_in_use, allocations, frees, live_at_end, "
    "bytes_in_use_at_end)";

// Spellings the tool had before the option table, kept for scripts and docs.
const char* OptionAlias(absl::string_view name) {
  if (name == "allow_growth") return "--growth";
  if (name == "garbage_collection") return "--gc";
  return nullptr;
}

std::string OptionFlagName(absl::string_view name) {
  return absl::StrCat("--", absl::StrReplaceAll(name, {{"_", "-"}}));
}

// TF's defaults, but without retry: a replay is one thread, so nobody would
// free while an allocation waits.
bfc::AllocatorOptions ToolDefaultOptions() {
  bfc::AllocatorOptions o;
  o.allow_retry_on_failure = false;
  return o;
}

struct Flags {
  // Empty: the bundled default trace. More than one only with
  // --compare-policies.
  std::vector<std::string> trace_paths;
  std::string phases_path;  // empty: <trace dir>/meta/<name>.phases.csv
  bool compare_policies = false;
  std::string compare_svg_path;
  bool skip_unknown_frees = false;
  std::string conf;
  std::string backend;       // empty: not given
  std::string memory_limit;  // empty: not given
  // One per row of AllocatorOptionFields(); a flag's count() says if given.
  std::vector<std::string> option_values;
  std::vector<CLI::Option*> option_flags;
  std::string json_path;
  std::string svg_path;
  std::string html_path;
  std::string pytorch_snapshot_path;
  std::string summary_json_path;
  bool plan = false;
  bool expect_failures = false;  // failed allocations do not make exit 3
  bool streams = false;          // replay each row on its trace Stream
  bool accounts = false;         // an account per trace phase
  bfc::tools::Verbosity verbosity;
};

// The allocator to build, and where each setting came from.
struct Config {
  Backend backend = Backend::kVirtual;
  std::string backend_from = kFromDefault;
  uint64_t memory_limit = kDefaultMemoryLimit;
  std::optional<double> memory_fraction;  // resolved into memory_limit
  std::string memory_from = kFromDefault;
  bfc::AllocatorOptions options = ToolDefaultOptions();
  std::vector<std::string> option_from;  // per AllocatorOptionFields() row
  std::vector<std::string> conf_layers;  // "BFC_ALLOC_CONF=..." for the report
};

void DeclareFlags(CLI::App& app, Flags* f) {
  using namespace bfc::tools;  // NOLINT: group names and helpers
  app.add_option("TRACE", f->trace_paths,
                 "RMM logging CSV, plain or gzip (by content); '-' reads "
                 "standard input, and pipes such as <(...) work; several "
                 "only with --compare-policies. Default: the bundled "
                 "resnet18-train.csv")
      ->type_name("")
      ->group(kGroupInputs);
  AddSkipUnknownFreesFlag(app, &f->skip_unknown_frees);
  app.add_option("--phases", f->phases_path,
                 "The trace's phases (Phase,FirstEvent,Time; FirstEvent a "
                 "0-based event index; iterations are named iterN): the "
                 "summary then has the last iteration's sub-allocator calls "
                 "and pool peak. Default: <trace dir>/meta/<trace "
                 "name>.phases.csv if it exists")
      ->type_name("PATH")
      ->group(kGroupInputs);

  std::string presets;
  for (const bfc::AllocatorPreset& p : bfc::AllocatorPresets()) {
    absl::StrAppend(&presets, " preset:", p.name, " = ", p.conf, ".");
  }
  app.add_option(
         "--conf", f->conf,
         absl::StrCat("Allocator settings in the BFC_ALLOC_CONF "
                      "grammar, key:value[,key:value...]; keys: ",
                      bfc::c_api::AllocConfKeys(),
                      ". memory_fraction is of physical memory (host) "
                      "or of 16 GiB (virtual). A preset is applied "
                      "first, so keys beside it win:",
                      presets, " Overrides BFC_ALLOC_CONF; flags override it"))
      ->type_name("STRING")
      ->group(kGroupAllocator);
  app.add_option("--backend", f->backend,
                 "Where regions come from: virtual (reserved address space, "
                 "no memory touched, coalescing), sim-cudamalloc (the same, "
                 "but regions never adjacent, as cudaMalloc's), host "
                 "(malloc), cuda (GPU 0; exit status 2 without one), vmm "
                 "(GPU 0's virtual memory: pages mapped into one growing "
                 "range; runs on the fake driver given by "
                 "BFC_CUDA_DRIVER_LIBRARY). Default: virtual")
      ->type_name("NAME")
      ->check(
          CLI::IsMember({"host", "virtual", "sim-cudamalloc", "cuda", "vmm"}))
      ->group(kGroupAllocator);
  app.add_option(
         "--memory-limit", f->memory_limit,
         absl::StrCat(
             "The allocator's total_memory: ", bfc::kByteSizeGrammar,
             ". Default: ", bfc::HumanReadableBytes(kDefaultMemoryLimit)))
      ->type_name("SIZE")
      ->check(ByteSizeValidator(/*positive=*/true))
      ->group(kGroupAllocator);

  const bfc::AllocatorOptions tool_defaults = ToolDefaultOptions();
  const bfc::AllocatorOptions tf_defaults;
  const absl::Span<const bfc::OptionField> fields =
      bfc::AllocatorOptionFields();
  f->option_values.resize(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) {
    const bfc::OptionField& field = fields[i];
    std::string names = OptionFlagName(field.name);
    const char* alias = OptionAlias(field.name);
    if (alias != nullptr) absl::StrAppend(&names, ",", alias);
    const std::string def =
        bfc::AllocatorOptionToString(tool_defaults, field.name);
    const std::string tf =
        bfc::AllocatorOptionToString(tf_defaults, field.name);
    std::string doc = absl::StrCat(field.doc, ". Default: ", def);
    if (def != tf) absl::StrAppend(&doc, " (TF: ", tf, ")");
    CLI::Option* opt;
    if (field.kind == bfc::OptionKind::kBool) {
      // A flag: "--name" alone is true; a following word is not consumed.
      opt = app.add_flag(names, f->option_values[i], doc)
                ->option_text("[=true|false]");
    } else {
      const char* type = "DURATION";
      switch (field.kind) {
        case bfc::OptionKind::kCount:
          type = "COUNT";
          break;
        case bfc::OptionKind::kFraction:
          type = "FRACTION";
          break;
        case bfc::OptionKind::kBytes:
          type = "BYTES";
          break;
        case bfc::OptionKind::kGrowthPolicy:
          type = "POLICY";
          break;
        default:
          break;
      }
      opt = app.add_option(names, f->option_values[i], doc)
                ->type_name(type)
                ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    }
    const std::string also =
        alias == nullptr ? "" : absl::StrCat(" (also spelled ", alias, ")");
    opt->check(CLI::Validator(
                   [name = std::string(field.name), also](std::string& v) {
                     bfc::AllocatorOptions scratch;
                     absl::Status s = bfc::SetAllocatorOption(scratch, name, v);
                     return s.ok() ? std::string()
                                   : absl::StrCat(s.message(), also);
                   },
                   ""))
        ->group(kGroupAllocator);
    f->option_flags.push_back(opt);
  }

  AddOutputFlag(app, "--json", &f->json_path,
                "Write the summary, the timeline (live, in use, pool bytes "
                "and fragmentation after every op) and the memory maps at the "
                "peak of bytes in use and at the end, as JSON");
  AddOutputFlag(app, "--svg", &f->svg_path,
                "Write the memory maps at the peak and at the end as an SVG "
                "picture");
  AddOutputFlag(app, "--html", &f->html_path,
                "Write a self-contained viewer page (no network): the "
                "timeline chart, both maps (hover or click a chunk), the "
                "summary numbers");
  AddOutputFlag(app, "--pytorch-snapshot", &f->pytorch_snapshot_path,
                "Write a PyTorch memory-snapshot pickle (segments + "
                "device_traces) of the replay, for PyTorch's memory viewer "
                "(pytorch.org/memory_viz): regions as segments, chunks as "
                "blocks, every allocation, free, extend and failure in the "
                "trace, each with its trace line as its frame");
  AddSummaryJsonFlag(app, &f->summary_json_path, kSummaryKeys);
  AddOutputFlag(app, "--compare-svg", &f->compare_svg_path,
                "With --compare-policies: one SVG with a panel per policy "
                "(and a row per trace): pool and live bytes against the "
                "event index, titled with the footprint");

  app.add_flag("--compare-policies", f->compare_policies,
               "Replay each TRACE under every policy of a fixed list "
               "(presets, and single options over TF's defaults) and print "
               "a Markdown table per trace: footprint, peak pool, failures, "
               "sub-allocator calls (whole trace and last iteration), ns/op, "
               "then the best offline plan and the lower bound; "
               "--summary-json writes the rows as a JSON array. Backend: "
               "sim-cudamalloc unless --backend is given; --conf, "
               "BFC_ALLOC_CONF and option flags are not used")
      ->group(kGroupReporting);
  app.add_flag("--plan", f->plan,
               "Also plan the trace offline (TFLite's strategies) and print "
               "each plan's memory against the lower bound (peak live bytes) "
               "and this replay's pool")
      ->option_text("[=true|false]")
      ->group(kGroupReporting);
  app.add_flag("--streams", f->streams,
               "Replay each row on its trace Stream (stream-ordered reuse, on "
               "a simulated device whose work has completed whenever the "
               "allocator looks) and report what crossing streams cost; "
               "without it every row is on one stream, as TF replays it")
      ->option_text("[=true|false]")
      ->group(kGroupReporting);
  app.add_flag("--accounts", f->accounts,
               "Charge each allocation to an account named after the trace "
               "phase it falls in (bfc/account.h: a root 'replay', one child "
               "per phase; needs the phases): the summary lists each "
               "account's peak, allocations, frees and what it left live, "
               "and --json/--html chart each account's bytes over the trace. "
               "Charged allocations take the allocator's general path, so "
               "ns/op is higher")
      ->option_text("[=true|false]")
      ->group(kGroupReporting);
  app.add_flag("--expect-failures", f->expect_failures,
               "Failed allocations are expected (a limit probed on purpose): "
               "exit status 0 instead of 3, and no note about them")
      ->option_text("[=true|false]")
      ->group(kGroupReporting);
  AddVerbosityFlags(app, &f->verbosity);
}

// Applies the keys `text` gives over `config`; keys it leaves out keep their
// value (so --conf overrides BFC_ALLOC_CONF key by key).
absl::Status ApplyConf(absl::string_view text, const char* source,
                       Config* config) {
  absl::StatusOr<bfc::c_api::AllocConf> conf = bfc::c_api::ParseAllocConf(text);
  // A replay answers "what would bfc do with these settings": a key it
  // would take for nothing (the .so says it and goes on) is a usage error
  // here, before any work, so the answer is never for other settings.
  if (conf.ok() && !conf->ignored.empty()) {
    conf = absl::InvalidArgumentError(absl::StrJoin(conf->ignored, "\n"));
  }
  if (!conf.ok()) {
    absl::string_view message = conf.status().message();
    if (std::strcmp(source, kFromConf) != 0) return conf.status();
    // The parser names the variable; here the text came from --conf.
    absl::ConsumePrefix(&message, absl::StrCat(kFromEnv, ": "));
    return absl::InvalidArgumentError(absl::StrCat(
        kFromConf, ": ",
        absl::StrReplaceAll(message, {{absl::StrCat("\n", kFromEnv, ": "),
                                       absl::StrCat("\n", kFromConf, ": ")}})));
  }
  config->conf_layers.push_back(
      absl::StrCat(source, std::strcmp(source, kFromEnv) == 0 ? "=" : " ", "\"",
                   text, "\""));
  const absl::Span<const bfc::OptionField> fields =
      bfc::AllocatorOptionFields();
  for (const std::string& given : conf->keys) {
    // expandable_segments sets the backend; PyTorch's spellings, options.
    const std::string key = bfc::c_api::AllocConfSetting(given);
    if (key == "backend") {
      config->backend = conf->backend;
      config->backend_from = source;
    } else if (key == "memory_limit") {
      config->memory_limit = *conf->memory_limit;
      config->memory_fraction.reset();
      config->memory_from = source;
    } else if (key == "memory_fraction") {
      config->memory_fraction = conf->memory_fraction;
      config->memory_from = source;
    } else {
      size_t i = 0;
      while (i < fields.size() && fields[i].name != key) ++i;
      if (i == fields.size()) {
        // A key the parser took but nothing here applies: never dropped.
        return absl::InternalError(absl::StrCat(
            source, ": key ", given, " is accepted but not applied"));
      }
      absl::Status s = bfc::SetAllocatorOption(
          config->options, key,
          bfc::AllocatorOptionToString(conf->options, key));
      if (!s.ok()) return s;
      config->option_from[i] = source;
    }
  }
  return absl::OkStatus();
}

uint64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

// --backend's value (CLI11 has checked it is one of the four names).
Backend BackendFromFlag(absl::string_view name) {
  if (name == "host") return Backend::kHost;
  if (name == "cuda") return Backend::kCuda;
  if (name == "sim-cudamalloc") return Backend::kSimCudaMalloc;
  if (name == "vmm") return Backend::kVmm;
  return Backend::kVirtual;
}

// Defaults, then BFC_ALLOC_CONF, then --conf, then the flags given.
absl::Status BuildConfig(const Flags& flags, Config* config) {
  const absl::Span<const bfc::OptionField> fields =
      bfc::AllocatorOptionFields();
  config->option_from.assign(fields.size(), kFromDefault);
  if (const char* env = std::getenv(bfc::c_api::kAllocConfEnvVar);
      env != nullptr && *env != '\0') {
    absl::Status s = ApplyConf(env, kFromEnv, config);
    if (!s.ok()) return s;
  }
  if (!flags.conf.empty()) {
    absl::Status s = ApplyConf(flags.conf, kFromConf, config);
    if (!s.ok()) return s;
  }
  if (!flags.backend.empty()) {
    config->backend = BackendFromFlag(flags.backend);
    config->backend_from = "--backend";
  }
  if (!flags.memory_limit.empty()) {
    config->memory_limit = bfc::tools::ByteSizeValue(flags.memory_limit);
    config->memory_fraction.reset();
    config->memory_from = "--memory-limit";
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    if (flags.option_flags[i]->count() == 0) continue;
    absl::Status s = bfc::SetAllocatorOption(config->options, fields[i].name,
                                             flags.option_values[i]);
    if (!s.ok()) return s;  // the validator has already accepted it
    config->option_from[i] = OptionFlagName(fields[i].name);
  }
  if (config->memory_fraction.has_value()) {
    uint64_t total = 0;
    switch (config->backend) {
      case Backend::kHost:
        total = PhysicalMemoryBytes();
        break;
      case Backend::kVirtual:
      case Backend::kSimCudaMalloc:
        total = kDefaultMemoryLimit;
        break;
      case Backend::kCuda:
      case Backend::kVmm:
        return absl::InvalidArgumentError(absl::StrFormat(
            "memory_fraction (from %s) with the %s backend is not "
            "supported by %s; give memory_limit or --memory-limit",
            config->memory_from, bfc::c_api::BackendName(config->backend),
            kToolName));
    }
    config->memory_limit =
        static_cast<uint64_t>(*config->memory_fraction * total);
    if (config->memory_limit == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("memory_fraction %g (from %s) of %s is 0 bytes",
                          *config->memory_fraction, config->memory_from,
                          bfc::HumanReadableBytes(total)));
    }
  }
  return absl::OkStatus();
}

bool FileExists(const std::string& path) {
  return access(path.c_str(), R_OK) == 0;
}

// The bundled trace: installed, <bindir>/<BFC_TRACES_FROM_BINDIR> (relative,
// from CMake's install dirs); uninstalled, the build tree mirrors that layout
// and BFC_BUILD_TREE_TRACES_DIR names it too. "" when neither has it.
std::string DefaultTracePath() {
  std::vector<std::string> candidates;
  const std::string exe_dir = bfc::tools::ExecutableDir();
#if defined(BFC_TRACES_FROM_BINDIR)
  if (!exe_dir.empty()) {
    candidates.push_back(
        absl::StrCat(exe_dir, "/", BFC_TRACES_FROM_BINDIR, "/", kDefaultTrace));
  }
#endif
#if defined(BFC_BUILD_TREE_TRACES_DIR)
  candidates.push_back(
      absl::StrCat(BFC_BUILD_TREE_TRACES_DIR, "/", kDefaultTrace));
#endif
  for (const std::string& c : candidates) {
    if (FileExists(c)) return bfc::tools::NormalizePath(c);
  }
  return "";
}

// nullptr with *error set when the backend is unavailable.
std::unique_ptr<bfc::SubAllocator> MakeSubAllocator(const Config& config,
                                                    std::string* error) {
  switch (config.backend) {
    case Backend::kVirtual:
    case Backend::kSimCudaMalloc:
      return bfc::c_api::MakeVirtualSubAllocator(config.backend,
                                                 config.memory_limit);
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
    case Backend::kVmm: {
#if defined(BFC_HAVE_CUDA)
      std::string why;
      if (bfc::CudaDeviceCount(&why) == 0) {
        *error = "no CUDA device: " +
                 (why.empty() ? std::string("none visible") : why);
        return nullptr;
      }
      // Twice the limit of address space: holes are reused, so the range
      // only has to absorb fragmentation (Availability() reports a refusal).
      bfc::CudaVmmSubAllocator::Options o;
      o.address_bytes = config.memory_limit <= (uint64_t{1} << 46)
                            ? 2 * config.memory_limit
                            : uint64_t{1} << 47;
      return std::make_unique<bfc::CudaVmmSubAllocator>(0, o);
#else
      *error = "no CUDA device: this bfc-replay was built without CUDA";
      return nullptr;
#endif
    }
  }
  *error = "unknown backend";
  return nullptr;
}

void PrintConfig(const Config& config, const std::string& path, bool bundled) {
  std::fprintf(stderr, "%s: trace %s%s\n", kToolName,
               bfc::tools::ForTerminal(path).c_str(),
               bundled ? " (bundled)" : "");
  std::fprintf(stderr, "%s: backend %s (%s)\n", kToolName,
               bfc::c_api::BackendName(config.backend),
               config.backend_from.c_str());
  std::fprintf(stderr, "%s: memory limit %s (%s)\n", kToolName,
               bfc::HumanReadableBytesExact(config.memory_limit).c_str(),
               config.memory_from.c_str());
  const absl::Span<const bfc::OptionField> fields =
      bfc::AllocatorOptionFields();
  for (size_t i = 0; i < fields.size(); ++i) {
    std::fprintf(
        stderr, "%s: option %s=%s (%s)\n", kToolName,
        std::string(fields[i].name).c_str(),
        bfc::AllocatorOptionToString(config.options, fields[i].name).c_str(),
        config.option_from[i].c_str());
  }
}

void PrintSummary(std::FILE* out, const Config& config, const std::string& path,
                  bool bundled, const bfc::CompiledTrace& trace,
                  const bfc::ReplaySummary& s,
                  const bfc::Allocator& allocator) {
  std::fprintf(out, "trace             %s (%s%s)\n",
               bfc::tools::ForTerminal(s.trace_name).c_str(),
               bfc::tools::ForTerminal(path).c_str(),
               bundled ? ", bundled" : "");
  std::fprintf(out,
               "allocator         %s backend, limit %s, growth %s, gc %s, "
               "fragmentation fraction %g\n",
               bfc::c_api::BackendName(config.backend),
               bfc::HumanReadableBytesExact(config.memory_limit).c_str(),
               config.options.allow_growth ? "on" : "off",
               config.options.garbage_collection ? "on" : "off",
               config.options.fragmentation_fraction);
  if (!config.conf_layers.empty()) {
    std::fprintf(out, "configured by     %s\n",
                 absl::StrJoin(config.conf_layers, ", then ").c_str());
  }
  std::fprintf(out, "events            %zu\n", s.events);
  std::fprintf(out, "allocations       %zu\n", s.allocations);
  std::fprintf(out, "frees             %zu\n", s.frees);
  std::fprintf(out, "failures          %zu", s.failures);
  if (s.skipped_frees > 0) {
    std::fprintf(out, " (%zu frees of failed or 0-byte allocations skipped)",
                 s.skipped_frees);
  }
  std::fprintf(out, "\n");
  if (trace.num_failure_rows > 0 || trace.num_unknown_frees > 0) {
    std::fprintf(
        out,
        "not replayed      %zu 'allocate failure' rows, %zu unknown frees\n",
        trace.num_failure_rows, trace.num_unknown_frees);
  }
  if (s.live_at_end > 0) {
    std::fprintf(
        out,
        "live at end       %zu allocations, %s (freed after the summary)\n",
        s.live_at_end,
        bfc::HumanReadableBytesExact(s.live_bytes_at_end).c_str());
  }
  std::fprintf(out, "peak live bytes   %s\n",
               bfc::HumanReadableBytesExact(s.peak_live_bytes).c_str());
  std::fprintf(out, "peak in use       %s\n",
               bfc::HumanReadableBytesExact(s.peak_bytes_in_use).c_str());
  std::fprintf(out, "peak pool bytes   %s\n",
               bfc::HumanReadableBytesExact(s.peak_pool_bytes).c_str());
  std::fprintf(out, "footprint ratio   %.3f (peak pool / peak live)\n",
               s.footprint_ratio);
  std::fprintf(out, "regions           %lld\n",
               static_cast<long long>(s.regions));
  if (s.trace_streams > 0) {
    const bfc::StreamStats& t = s.stream_stats;
    std::fprintf(
        out,
        "streams           %zu in the trace; %lld events recorded, "
        "%lld queries, %lld waits, %lld synchronizations; %s "
        "pending at end\n",
        s.trace_streams, static_cast<long long>(t.events_recorded),
        static_cast<long long>(t.event_queries),
        static_cast<long long>(t.waits_inserted),
        static_cast<long long>(t.synchronizations),
        bfc::HumanReadableBytesExact(static_cast<uint64_t>(t.bytes_pending))
            .c_str());
  }
  std::fprintf(out, "time              %.3f ms, %.1f ns/op\n",
               s.wall_seconds * 1e3, s.ns_per_op);
  std::fprintf(out, "occupancy         %s\n",
               allocator.RenderOccupancy().c_str());
}

nlohmann::ordered_json PhaseJson(const bfc::tools::PhaseProfile& p) {
  nlohmann::ordered_json j;
  j["phase"] = p.phase;
  j["events"] = p.events;
  j["sub_allocator_allocs"] = p.sub_allocator_allocs;
  j["sub_allocator_frees"] = p.sub_allocator_frees;
  j["peak_pool_bytes"] = p.peak_pool_bytes;
  return j;
}

// The VMM backend's driver calls, or nullptr for another backend.
nlohmann::ordered_json VmmJson(const bfc::SubAllocator* sub) {
#if defined(BFC_HAVE_CUDA)
  const auto* vmm = dynamic_cast<const bfc::CudaVmmSubAllocator*>(sub);
  if (vmm == nullptr) return nullptr;
  const bfc::CudaVmmSubAllocator::Counters c = vmm->counters();
  nlohmann::ordered_json j;
  j["page_bytes"] = c.page_bytes;
  j["va_reserved_bytes"] = c.reserved_bytes;
  j["pages_mapped"] = c.maps;
  j["pages_unmapped"] = c.unmaps;
  j["set_access_calls"] = c.set_access;
  j["synchronizes"] = c.synchronizes;
  j["peak_mapped_bytes"] = c.peak_mapped_bytes;
  j["mapped_bytes_at_end"] = c.mapped_bytes;
  j["failed_allocs"] = c.failed_allocs;
  return j;
#else
  (void)sub;
  return nullptr;
#endif
}

std::string SummaryJson(const Config& config, const std::string& path,
                        bool bundled, const bfc::CompiledTrace& trace,
                        const bfc::ReplaySummary& s,
                        const bfc::tools::TracePhases* phases,
                        const bfc::tools::ReplayProfile* profile,
                        const nlohmann::ordered_json& vmm,
                        const nlohmann::ordered_json& accounts) {
  nlohmann::ordered_json j;
  j["format"] = "bfc-replay-summary";
  j["trace"] = s.trace_name;
  j["trace_path"] = path;
  j["bundled_trace"] = bundled;
  j["events"] = s.events;
  j["allocations"] = s.allocations;
  j["frees"] = s.frees;
  j["failures"] = s.failures;
  j["skipped_frees"] = s.skipped_frees;
  j["failure_rows_not_replayed"] = trace.num_failure_rows;
  j["unknown_frees_skipped"] = trace.num_unknown_frees;
  j["live_at_end"] = s.live_at_end;
  j["live_bytes_at_end"] = s.live_bytes_at_end;
  j["peak_live_bytes"] = s.peak_live_bytes;
  j["peak_bytes_in_use"] = s.peak_bytes_in_use;
  j["peak_pool_bytes"] = s.peak_pool_bytes;
  j["pool_bytes_at_end"] = s.pool_bytes_at_end;
  j["footprint"] = s.footprint_ratio;
  j["regions"] = s.regions;
  // What a GPU pays for: cudaMalloc and cudaFree calls (the destructor's
  // frees of what is still held at exit are not counted).
  j["sub_allocator_allocs"] = s.regions;
  j["sub_allocator_frees"] = s.regions_released;
  j["wall_seconds"] = s.wall_seconds;
  j["ns_per_op"] = s.ns_per_op;
  if (s.trace_streams > 0) {
    const bfc::StreamStats& t = s.stream_stats;
    j["streams"] = {{"trace_streams", s.trace_streams},
                    {"events_recorded", t.events_recorded},
                    {"event_queries", t.event_queries},
                    {"waits_inserted", t.waits_inserted},
                    {"synchronizations", t.synchronizations},
                    {"bytes_pending_at_end", t.bytes_pending}};
  }
  j["backend"] = bfc::c_api::BackendName(config.backend);
  if (!vmm.is_null()) j["vmm"] = vmm;
  j["memory_limit"] = config.memory_limit;
  nlohmann::ordered_json options = nlohmann::ordered_json::object();
  for (const bfc::OptionField& f : bfc::AllocatorOptionFields()) {
    options[std::string(f.name)] =
        bfc::AllocatorOptionToString(config.options, f.name);
  }
  j["options"] = std::move(options);
  if (phases != nullptr && profile != nullptr) {
    j["phases_file"] = phases->path;
    j["iterations"] = profile->iterations;
    if (profile->last_iteration.has_value()) {
      j["last_iteration"] = PhaseJson(*profile->last_iteration);
    }
  }
  if (!accounts.is_null()) j["accounts"] = accounts;
  // A trace's file name may hold any bytes: invalid UTF-8 becomes U+FFFD
  // (nlohmann's default handler throws type_error 316 instead).
  return j.dump(2, ' ', /*ensure_ascii=*/false,
                nlohmann::ordered_json::error_handler_t::replace) +
         "\n";
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

// Writes an output (atomically; "-" is standard output). False after
// printing why not.
bool WriteOutput(const Flags& flags, const std::string& path,
                 const std::string& text, const char* what) {
  if (path == bfc::tools::kStdioPath) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    if (std::fflush(stdout) == 0) return true;
    std::fprintf(stderr, "%s: cannot write %s to standard output: %s\n",
                 kToolName, what, std::strerror(errno));
    std::clearerr(stdout);  // said once here, not again at exit
    return false;
  }
  absl::Status s = bfc::tools::WriteFileAtomically(path, text);
  if (!s.ok()) {
    std::fprintf(stderr, "%s: cannot write %s: %s\n", kToolName, what,
                 std::string(s.message()).c_str());
    return false;
  }
  if (!flags.verbosity.quiet) {
    std::fprintf(stderr, "%s: wrote %s to %s\n", kToolName, what,
                 bfc::tools::ForTerminal(path).c_str());
  }
  return true;
}

// Account samples (accounts x ops) a report may hold: checked where
// --accounts opens them, before any work.
constexpr size_t kMaxAccountSamples = size_t{1} << 25;

// --accounts: a root account "replay" on the replay's allocator and one
// child per phase name; each allocation is charged to its phase's account.
class PhaseAccounts {
 public:
  static constexpr size_t kMaxPhaseAccounts = 256;

  absl::Status Open(bfc::Allocator* allocator, const bfc::CompiledTrace& trace,
                    const bfc::tools::TracePhases& phases) {
    map_ = bfc::tools::MapOpsToPhases(trace, phases);
    // The report keeps 8 bytes per account per op: a bound keeps a phase
    // file with thousands of names from exhausting memory.
    if (map_.names.size() > kMaxPhaseAccounts) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: --accounts opens one account per phase name, and this file "
          "has %d names (at most %d)",
          phases.path, map_.names.size(), kMaxPhaseAccounts));
    }
    absl::Status s = accounts_.Open(allocator, map_.names, [this](size_t i) {
      return static_cast<size_t>(map_.op_account[i]);
    });
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          phases.path, ": a phase cannot name an account: ", s.message()));
    }
    opened_ = true;
    return absl::OkStatus();
  }

  // Charges the replay's allocations (nothing when not opened).
  void Attach(bfc::ReplayOptions* replay) const { accounts_.Attach(replay); }

  // Each account's numbers now (after the replay, before what the trace
  // left live is freed): root first, then the phases.
  void TakeStats() {
    if (!opened_) return;
    stats_.clear();
    stats_.push_back({accounts_.root()->path(), accounts_.root()->GetStats()});
    for (const std::shared_ptr<bfc::Account>& c : accounts_.children()) {
      stats_.push_back({c->path(), c->GetStats()});
    }
  }

  void Print(std::FILE* out) const {
    for (const auto& [path, st] : stats_) {
      std::fprintf(
          out, "account           %s: peak %s, %lld allocations, %lld frees",
          bfc::tools::ForTerminal(path).c_str(),
          bfc::HumanReadableBytesExact(
              static_cast<uint64_t>(st.peak_bytes_in_use))
              .c_str(),
          static_cast<long long>(st.allocations),
          static_cast<long long>(st.frees));
      if (st.live_allocations > 0) {
        std::fprintf(
            out, ", %lld live at end (%s)",
            static_cast<long long>(st.live_allocations),
            bfc::HumanReadableBytesExact(static_cast<uint64_t>(st.own_bytes))
                .c_str());
      }
      std::fprintf(out, "\n");
    }
  }

  // null when not opened.
  nlohmann::ordered_json Json() const {
    if (!opened_) return nullptr;
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (const auto& [path, st] : stats_) {
      a.push_back({{"path", path},
                   {"peak_bytes_in_use", st.peak_bytes_in_use},
                   {"allocations", st.allocations},
                   {"frees", st.frees},
                   {"live_at_end", st.live_allocations},
                   {"bytes_in_use_at_end", st.bytes_in_use}});
    }
    return a;
  }

  // Once the trace's leftovers are freed, nothing is charged.
  void Close() { accounts_.Close(); }

  const bfc::tools::PhaseAccountMap* map() const {
    return opened_ ? &map_ : nullptr;
  }

 private:
  bfc::tools::PhaseAccountMap map_;
  bfc::ReplayAccounts accounts_;
  bool opened_ = false;
  std::vector<std::pair<std::string, bfc::AccountStats>> stats_;
};

// --json / --svg / --html: replays again into fresh allocators configured
// like the first (BuildReplayReport needs two), then writes each output.
// Returns the exit status.
int WriteReport(const Flags& flags, const Config& config,
                const std::string& trace_path, const bfc::Trace& trace,
                const bfc::CompiledTrace& compiled,
                const bfc::tools::PhaseAccountMap* accounts) {
  std::string error;
  auto make = [&]() -> std::unique_ptr<bfc::Allocator> {
    std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(config, &error);
    if (sub == nullptr) return nullptr;
    auto allocator = std::make_unique<bfc::Allocator>(
        std::move(sub), config.memory_limit, kToolName, config.options);
    if (flags.streams) {
      (void)allocator->SetStreamOps(bfc::MakeCompletedWorkStreamOps());
    }
    return allocator;
  };
  bfc::ReplayReportOptions report_options;
  report_options.source = &trace;
  report_options.replay.streams = flags.streams;
  if (accounts != nullptr) {
    report_options.account_names = accounts->names;
    report_options.account_of_op = [accounts](size_t i) -> size_t {
      return accounts->op_account[i];
    };
  }
  // Progress on a terminal, once the work has taken a second.
  const bool tty = isatty(STDERR_FILENO) != 0 && !flags.verbosity.quiet;
  const absl::Time start = absl::Now();
  bool shown = false;
  report_options.progress = [&](size_t done, size_t total) {
    if (!tty || absl::Now() - start < absl::Seconds(1) || total == 0) return;
    shown = true;
    std::fprintf(stderr, "\r%s: building the report: %3d%%", kToolName,
                 static_cast<int>(100 * done / total));
    std::fflush(stderr);
  };
  absl::StatusOr<bfc::ReplayReport> report =
      bfc::BuildReplayReport(compiled, make, report_options);
  if (shown) std::fprintf(stderr, "\r%50s\r", "");
  if (!report.ok()) {
    std::fprintf(stderr, "%s: report: %s\n", kToolName,
                 std::string(report.status().message()).c_str());
    return kExitBadInput;
  }
  bool ok = true;
  if (!flags.json_path.empty()) {
    ok &= WriteOutput(flags, flags.json_path,
                      bfc::ReplayReportToJson(*report, 1), "the JSON report");
  }
  if (!flags.svg_path.empty()) {
    ok &= WriteOutput(flags, flags.svg_path, SnapshotsSvg(*report),
                      "the memory maps");
  }
  if (!flags.html_path.empty()) {
    ok &= WriteOutput(flags, flags.html_path,
                      bfc::RenderReplayReportHtml(*report), "the viewer page");
  }
  if (!flags.pytorch_snapshot_path.empty()) {
    // The state is the end of the trace (what it left live), which the
    // viewer replays the events backwards from; each event's frame is the
    // trace row of the op it happened in.
    std::vector<bfc::MemoryEvent> events;
    events.reserve(report->history.size());
    for (const bfc::ReplayHistoryEvent& e : report->history)
      events.push_back(e.event);
    bfc::PyTorchSnapshotOptions snapshot_options;
    const std::string file = trace_path;
    snapshot_options.event_frames = [&](size_t i) {
      const bfc::ReplayHistoryEvent& e = report->history[i];
      std::vector<bfc::PyTorchFrame> frames;
      if (e.line == 0) return frames;
      frames.push_back({file, static_cast<int64_t>(e.line),
                        e.pointer != 0 ? absl::StrCat("trace row, pointer 0x",
                                                      absl::Hex(e.pointer))
                                       : std::string("trace row")});
      return frames;
    };
    ok &= WriteOutput(flags, flags.pytorch_snapshot_path,
                      bfc::PyTorchSnapshotPickle(report->snapshots.back().dump,
                                                 events, snapshot_options),
                      "the PyTorch snapshot");
  }
  return ok ? kExitOk : kExitBadInput;
}

// Phases: --phases, else <trace dir>/meta/<name>.phases.csv when present.
// Leaves *phases empty when there are none; an error for a bad file.
absl::Status LoadPhases(const std::string& flag_path,
                        const std::string& trace_path,
                        const bfc::CompiledTrace& trace, bool verbose,
                        std::optional<bfc::tools::TracePhases>* phases) {
  std::string path = flag_path;
  const char* how = "--phases";
  if (path.empty()) {
    path = bfc::tools::FindPhasesFile(trace_path, trace.name);
    how = "found beside the trace";
    if (path.empty()) {
      if (verbose && trace_path != bfc::tools::kStdioPath) {
        std::fprintf(stderr,
                     "%s: phases: none (no meta/%s.phases.csv beside "
                     "the trace)\n",
                     kToolName, trace.name.c_str());
      }
      return absl::OkStatus();
    }
  }
  absl::StatusOr<bfc::tools::TracePhases> p =
      bfc::tools::ReadTracePhases(path, trace.num_events);
  if (!p.ok()) return p.status();
  if (verbose) {
    std::fprintf(
        stderr, "%s: phases from %s (%s): %zu phases, %zu iterations\n",
        kToolName, path.c_str(), how, p->phases.size(), p->NumIterations());
  }
  *phases = *std::move(p);
  return absl::OkStatus();
}

// A phase file found beside the trace is an input too: refused as an
// output's destination (--phases is checked with the other inputs).
absl::Status CheckFoundPhasesAreNoOutput(
    const std::string& flag_path,
    const std::optional<bfc::tools::TracePhases>& phases,
    const std::vector<NamedPath>& outputs) {
  if (!flag_path.empty() || !phases.has_value()) return absl::OkStatus();
  return bfc::tools::CheckDistinctPaths(
      {{"the phase file found beside the trace", phases->path}}, outputs);
}

absl::Status LoadPhases(const Flags& flags, const std::string& trace_path,
                        const bfc::CompiledTrace& trace,
                        std::optional<bfc::tools::TracePhases>* phases) {
  return LoadPhases(flags.phases_path, trace_path, trace,
                    flags.verbosity.verbose, phases);
}

void PrintPhases(std::FILE* out, const bfc::tools::TracePhases& phases,
                 const bfc::tools::ReplayProfile& profile) {
  std::fprintf(out, "phases            %s (%zu iteration%s)\n",
               bfc::tools::ForTerminal(phases.path).c_str(), profile.iterations,
               profile.iterations == 1 ? "" : "s");
  if (!profile.last_iteration.has_value()) return;
  const bfc::tools::PhaseProfile& p = *profile.last_iteration;
  std::fprintf(out,
               "last iteration    %s: %zu events, sub-allocator %lld allocs / "
               "%lld frees, peak pool %s\n",
               bfc::tools::ForTerminal(p.phase).c_str(), p.events,
               static_cast<long long>(p.sub_allocator_allocs),
               static_cast<long long>(p.sub_allocator_frees),
               bfc::HumanReadableBytesExact(p.peak_pool_bytes).c_str());
}

// --- --compare-policies ------------------------------------------------------

// The policies --compare-policies replays, in the order of its table: a name
// and the BFC_ALLOC_CONF text applied over bfc-replay's defaults (TF's, retry
// off). To compare a new option, append a row.
struct ComparedPolicy {
  const char* name;
  const char* conf;
};
constexpr ComparedPolicy kComparedPolicies[] = {
    {"tf", "preset:tf"},
    {"low_footprint", "preset:low_footprint"},
    {"same_as_requested", "growth_policy:same_as_requested"},
    {"same_as_requested, 2 MiB floor",
     "growth_policy:same_as_requested,min_growth_step_bytes:2MiB"},
    {"fixed_step 64 MiB",
     "growth_policy:fixed_step,initial_region_bytes:64MiB"},
    {"doubling capped at 64 MiB", "max_growth_step_bytes:64MiB"},
    {"same_as_requested, release first",
     "release_before_extend:true,growth_policy:same_as_requested"},
    {"same_as_requested, split any rest",
     "min_split_remainder_bytes:256,growth_policy:same_as_requested"},
    // Alone over same_as_requested the pool never stands below its peak, so
    // the rule acts only beside release_before_extend.
    {"same_as_requested, release first, grow below the peak",
     "release_before_extend:true,growth_policy:same_as_requested,"
     "grow_below_peak_ratio:4"},
    {"huge allocations alone", "huge_allocation_bytes:64MiB"},
};

// At most this many points per line in --compare-svg's panels.
constexpr size_t kCompareSvgPoints = 2000;

struct PolicyRow {
  std::string name;
  std::string conf;
  std::string error;  // a policy that could not be configured
  bfc::ReplaySummary summary;
  std::optional<bfc::tools::ReplayProfile> profile;
};

std::string MiBText(int64_t bytes) {
  return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1 << 20));
}

// Text for one Markdown table cell: '|' escaped, line breaks as spaces.
std::string MarkdownCell(absl::string_view text) {
  return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\r", " "}, {"\n", " "}});
}

std::string CallsText(int64_t allocs, int64_t frees) {
  return absl::StrCat(allocs, " / ", frees);
}

// Replays one trace under one policy: a timed replay for the summary, then
// (with phases or an SVG to draw) a profiled one. An error status only for
// an inconsistent trace; a policy that cannot be configured or served is a
// row with its error.
absl::StatusOr<PolicyRow> ReplayPolicy(const ComparedPolicy& policy,
                                       const Config& base,
                                       const bfc::CompiledTrace& trace,
                                       const bfc::tools::TracePhases* phases,
                                       bool curves) {
  PolicyRow row;
  row.name = policy.name;
  row.conf = policy.conf;
  Config config = base;
  if (absl::Status s = ApplyConf(policy.conf, kFromConf, &config); !s.ok()) {
    row.error = std::string(s.message());
    return row;
  }
  std::string error;
  std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(config, &error);
  if (sub == nullptr) {
    row.error = error;
    return row;
  }
  {
    bfc::Allocator allocator(std::move(sub), config.memory_limit, kToolName,
                             config.options);
    absl::StatusOr<bfc::ReplaySummary> s = bfc::ReplayTrace(trace, allocator);
    if (!s.ok()) return s.status();
    row.summary = *std::move(s);
  }
  if (phases == nullptr && !curves) return row;
  sub = MakeSubAllocator(config, &error);
  if (sub == nullptr) {
    row.error = error;
    return row;
  }
  bfc::Allocator allocator(std::move(sub), config.memory_limit, kToolName,
                           config.options);
  absl::StatusOr<bfc::tools::ReplayProfile> p = bfc::tools::ProfileReplay(
      trace, allocator, phases, curves ? kCompareSvgPoints : 0);
  if (!p.ok()) return p.status();
  row.profile = *std::move(p);
  return row;
}

// The Markdown table of one trace, and its rows as JSON.
std::string CompareTable(const std::string& trace_path,
                         const bfc::CompiledTrace& trace, const Config& base,
                         const bfc::tools::TracePhases* phases,
                         const std::vector<PolicyRow>& rows,
                         const absl::StatusOr<bfc::planner::PlanReport>& plan,
                         nlohmann::ordered_json* json) {
  std::string md;
  const bfc::tools::TracePhase* last =
      phases != nullptr ? phases->LastIteration() : nullptr;
  absl::StrAppendFormat(&md, "%s: %zu events, %s backend, limit %s",
                        bfc::tools::ForTerminal(trace.name).c_str(),
                        trace.num_events, bfc::c_api::BackendName(base.backend),
                        bfc::HumanReadableBytes(base.memory_limit).c_str());
  if (last != nullptr) {
    absl::StrAppendFormat(&md,
                          "; last iteration %s (%zu events, phases from %s)",
                          bfc::tools::ForTerminal(last->name).c_str(),
                          last->end_event - last->first_event,
                          bfc::tools::ForTerminal(phases->path).c_str());
  }
  absl::StrAppendFormat(&md, "\n\n");
  const std::string last_header =
      last != nullptr ? absl::StrCat(" last iteration (",
                                     bfc::tools::ForTerminal(last->name),
                                     ") allocs / frees |")
                      : "";
  absl::StrAppendFormat(
      &md,
      "| policy | BFC_ALLOC_CONF | footprint | peak pool | failures "
      "| sub-allocator allocs / frees |%s ns/op |\n",
      last_header.c_str());
  absl::StrAppendFormat(&md, "|---|---|---:|---:|---:|---:|%s---:|\n",
                        last != nullptr ? "---:|" : "");
  auto base_json = [&](const char* kind, const std::string& name) {
    nlohmann::ordered_json j;
    j["trace"] = trace.name;
    j["trace_path"] = trace_path;
    j["kind"] = kind;
    j["policy"] = name;
    return j;
  };
  for (const PolicyRow& r : rows) {
    nlohmann::ordered_json j = base_json("policy", r.name);
    j["conf"] = r.conf;
    j["backend"] = bfc::c_api::BackendName(base.backend);
    if (!r.error.empty()) {
      absl::StrAppendFormat(&md, "| %s | `%s` | error: %s | | | |%s |\n",
                            r.name.c_str(), r.conf.c_str(),
                            MarkdownCell(r.error).c_str(),
                            last != nullptr ? " |" : "");
      j["error"] = r.error;
      json->push_back(std::move(j));
      continue;
    }
    const bfc::ReplaySummary& s = r.summary;
    std::string last_cell;
    if (last != nullptr) {
      last_cell = " n/a |";
      if (r.profile.has_value() && r.profile->last_iteration.has_value()) {
        const bfc::tools::PhaseProfile& p = *r.profile->last_iteration;
        last_cell = absl::StrCat(
            " ", CallsText(p.sub_allocator_allocs, p.sub_allocator_frees),
            " |");
      }
    }
    absl::StrAppendFormat(
        &md, "| %s | `%s` | %.3f | %s | %zu | %s |%s %.1f |\n", r.name.c_str(),
        r.conf.c_str(), s.footprint_ratio, MiBText(s.peak_pool_bytes).c_str(),
        s.failures, CallsText(s.regions, s.regions_released).c_str(),
        last_cell.c_str(), s.ns_per_op);
    j["footprint"] = s.footprint_ratio;
    j["peak_pool_bytes"] = s.peak_pool_bytes;
    j["peak_live_bytes"] = s.peak_live_bytes;
    j["failures"] = s.failures;
    j["sub_allocator_allocs"] = s.regions;
    j["sub_allocator_frees"] = s.regions_released;
    j["ns_per_op"] = s.ns_per_op;
    if (r.profile.has_value() && phases != nullptr) {
      j["iterations"] = r.profile->iterations;
      if (r.profile->last_iteration.has_value()) {
        j["last_iteration"] = PhaseJson(*r.profile->last_iteration);
      }
    }
    json->push_back(std::move(j));
  }
  const std::string empty_last = last != nullptr ? " |" : "";
  if (!plan.ok()) {
    absl::StrAppendFormat(&md, "| offline plan | | error: %s | | | |%s |\n",
                          MarkdownCell(plan.status().message()).c_str(),
                          empty_last.c_str());
    nlohmann::ordered_json j = base_json("plan", "offline plan");
    j["error"] = std::string(plan.status().message());
    json->push_back(std::move(j));
    return md;
  }
  const double bound = static_cast<double>(plan->lower_bound_bytes);
  auto ratio = [&](size_t bytes) {
    return bound == 0 ? 0.0 : static_cast<double>(bytes) / bound;
  };
  // The smallest arena (offsets form) among the strategies that ran.
  const bfc::planner::PlanResult* best = nullptr;
  size_t skipped = 0;
  for (const bfc::planner::PlanResult& r : plan->results) {
    if (!r.offsets) continue;
    if (!r.status.ok()) {
      ++skipped;
      continue;
    }
    if (best == nullptr || r.total_bytes < best->total_bytes) best = &r;
  }
  nlohmann::ordered_json pj = base_json("plan", "offline plan");
  if (best == nullptr) {
    absl::StrAppendFormat(&md,
                          "| offline plan | no strategy ran | | | | |%s |\n",
                          empty_last.c_str());
    pj["error"] = "no strategy ran";
  } else {
    const std::string strategy =
        bfc::planner::MemoryStrategyName(best->strategy);
    absl::StrAppendFormat(
        &md, "| offline plan | %s arena%s | %.3f | %s | | | %s |\n",
        strategy.c_str(),
        skipped > 0 ? absl::StrFormat(" (%d skipped)", skipped).c_str() : "",
        ratio(best->total_bytes),
        MiBText(static_cast<int64_t>(best->total_bytes)).c_str(),
        empty_last.c_str());
    pj["strategy"] = strategy;
    pj["footprint"] = ratio(best->total_bytes);
    pj["peak_pool_bytes"] = best->total_bytes;
    pj["strategies_skipped"] = skipped;
  }
  json->push_back(std::move(pj));
  absl::StrAppendFormat(
      &md, "| lower bound | peak live bytes | %.3f | %s | | | %s |\n",
      ratio(plan->lower_bound_bytes),
      MiBText(static_cast<int64_t>(plan->lower_bound_bytes)).c_str(),
      empty_last.c_str());
  nlohmann::ordered_json bj = base_json("bound", "lower bound");
  bj["footprint"] = ratio(plan->lower_bound_bytes);
  bj["peak_pool_bytes"] = plan->lower_bound_bytes;
  json->push_back(std::move(bj));
  return md;
}

// --compare-policies: every TRACE under every policy, the offline plan and
// the lower bound. Returns the exit status.
int ComparePolicies(const CLI::App& app, const Flags& flags) {
  const bool quiet = flags.verbosity.quiet;
  const bool verbose = flags.verbosity.verbose;
  for (const auto& [flag, out] :
       {std::pair<const char*, const std::string*>{"--json", &flags.json_path},
        {"--svg", &flags.svg_path},
        {"--html", &flags.html_path},
        {"--pytorch-snapshot", &flags.pytorch_snapshot_path},
        {"--conf", &flags.conf}}) {
    if (!out->empty()) {
      PrintError(app, absl::StrCat(flag,
                                   " cannot be combined with "
                                   "--compare-policies"));
      return kExitUsage;
    }
  }
  if (flags.plan) {
    PrintError(app,
               "--compare-policies prints the offline plan itself; "
               "leave out --plan");
    return kExitUsage;
  }
  if (flags.streams) {
    PrintError(app,
               "--streams cannot be combined with --compare-policies (the "
               "policies are compared on one stream, as TF replays)");
    return kExitUsage;
  }
  if (flags.accounts) {
    PrintError(app,
               "--accounts cannot be combined with --compare-policies (the "
               "policies are compared without accounts)");
    return kExitUsage;
  }
  const absl::Span<const bfc::OptionField> fields =
      bfc::AllocatorOptionFields();
  for (size_t i = 0; i < fields.size(); ++i) {
    if (flags.option_flags[i]->count() == 0) continue;
    // Named both ways where the flag has an alias: the user may have typed
    // either.
    std::string flag = OptionFlagName(fields[i].name);
    if (const char* alias = OptionAlias(fields[i].name); alias != nullptr) {
      absl::StrAppend(&flag, " (", alias, ")");
    }
    PrintError(app, absl::StrCat(flag,
                                 " cannot be combined with --compare-policies "
                                 "(each row sets its own options)"));
    return kExitUsage;
  }
  if (flags.trace_paths.size() > 1 && !flags.phases_path.empty()) {
    PrintError(app,
               "--phases names one trace's phases; with several TRACEs "
               "each uses <trace dir>/meta/<name>.phases.csv");
    return kExitUsage;
  }

  // The base every row starts from: bfc-replay's defaults, the backend
  // (sim-cudamalloc unless given) and the memory limit.
  Config base;
  base.option_from.assign(fields.size(), kFromDefault);
  base.backend = Backend::kSimCudaMalloc;
  if (!flags.backend.empty()) {
    base.backend = BackendFromFlag(flags.backend);
  }
  if (!flags.memory_limit.empty()) {
    base.memory_limit = bfc::tools::ByteSizeValue(flags.memory_limit);
  }
  if (verbose) {
    const char* env = std::getenv(bfc::c_api::kAllocConfEnvVar);
    if (env != nullptr && *env != '\0') {
      std::fprintf(stderr,
                   "%s: BFC_ALLOC_CONF is not used by "
                   "--compare-policies (each row sets its own options)\n",
                   kToolName);
    }
    std::fprintf(stderr, "%s: backend %s, memory limit %s\n", kToolName,
                 bfc::c_api::BackendName(base.backend),
                 bfc::HumanReadableBytesExact(base.memory_limit).c_str());
  }

  std::vector<std::string> paths = flags.trace_paths;
  if (paths.empty()) {
    paths.push_back(DefaultTracePath());
    if (paths[0].empty()) {
      PrintError(app, absl::StrCat("the bundled trace ", kDefaultTrace,
                                   " is not installed next to this program "
                                   "(share/bfc/traces); give a TRACE"));
      return kExitBadInput;
    }
  }
  std::vector<NamedPath> inputs, outputs;
  int from_stdin = 0;
  for (const std::string& p : paths) {
    inputs.push_back({"TRACE", p});
    from_stdin += p == bfc::tools::kStdioPath;
  }
  if (from_stdin > 1) {
    PrintError(app, "'-' (standard input) is given more than once");
    return kExitUsage;
  }
  if (!flags.phases_path.empty()) {
    inputs.push_back({"--phases", flags.phases_path});
  }
  if (!flags.summary_json_path.empty()) {
    outputs.push_back({"--summary-json", flags.summary_json_path});
  }
  if (!flags.compare_svg_path.empty()) {
    outputs.push_back({"--compare-svg", flags.compare_svg_path});
  }
  if (absl::Status s = bfc::tools::CheckDistinctPaths(inputs, outputs);
      !s.ok()) {
    PrintError(app, s.message());
    return kExitUsage;
  }
  {
    std::string error;
    std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(base, &error);
    if (sub == nullptr) {
      PrintError(app, error);
      return kExitUsage;
    }
    if (absl::Status available = sub->Availability(); !available.ok()) {
      PrintError(app,
                 absl::StrCat("the ", bfc::c_api::BackendName(base.backend),
                              " backend cannot serve: ", available.message()));
      return kExitUsage;
    }
  }

  std::FILE* text =
      flags.summary_json_path == bfc::tools::kStdioPath ? stderr : stdout;
  const bool tty = isatty(STDERR_FILENO) != 0 && !quiet;
  auto progress = [&](const std::string& line) {
    if (!tty) return;
    std::fprintf(stderr, "\r%-78.78s", bfc::tools::ForTerminal(line).c_str());
    std::fflush(stderr);
  };
  auto clear_progress = [&]() {
    if (!tty) return;
    std::fprintf(stderr, "\r%78s\r", "");
    std::fflush(stderr);
  };
  const bool curves = !flags.compare_svg_path.empty();
  const size_t num_policies = std::size(kComparedPolicies);
  nlohmann::ordered_json json = nlohmann::ordered_json::array();
  std::vector<bfc::PolicyPanelGroup> groups;
  bool failed = false;
  for (size_t t = 0; t < paths.size(); ++t) {
    const std::string& path = paths[t];
    absl::StatusOr<bfc::Trace> trace = bfc::tools::ReadTraceArg(path);
    if (!trace.ok()) {
      clear_progress();
      PrintError(app, trace.status().message());
      return kExitBadInput;
    }
    bfc::CompileOptions compile_options;
    compile_options.skip_unknown_frees = flags.skip_unknown_frees;
    absl::StatusOr<bfc::CompiledTrace> compiled =
        bfc::CompileTrace(*trace, compile_options);
    trace = bfc::Trace();
    if (!compiled.ok()) {
      clear_progress();
      PrintError(app, compiled.status().message());
      return kExitBadInput;
    }
    std::optional<bfc::tools::TracePhases> phases;
    if (absl::Status s =
            LoadPhases(flags.phases_path, path, *compiled, verbose, &phases);
        !s.ok()) {
      clear_progress();
      PrintError(app, s.message());
      return kExitBadInput;
    }
    if (absl::Status s =
            CheckFoundPhasesAreNoOutput(flags.phases_path, phases, outputs);
        !s.ok()) {
      clear_progress();
      PrintError(app, s.message());
      return kExitUsage;
    }
    const bfc::tools::TracePhases* phases_ptr =
        phases.has_value() ? &*phases : nullptr;
    std::vector<PolicyRow> rows;
    for (size_t i = 0; i < num_policies; ++i) {
      progress(absl::StrFormat("%s: %s (%d/%d): policy %d/%d %s", kToolName,
                               compiled->name, t + 1, paths.size(), i + 1,
                               num_policies, kComparedPolicies[i].name));
      absl::StatusOr<PolicyRow> row = ReplayPolicy(
          kComparedPolicies[i], base, *compiled, phases_ptr, curves);
      if (!row.ok()) {
        clear_progress();
        PrintError(app, row.status().message());
        return kExitBadInput;
      }
      failed |= row->summary.failures > 0;
      rows.push_back(*std::move(row));
    }
    bfc::planner::PlanOptions plan_options;
    // Called again while a long strategy runs (PlanOptions::on_progress):
    // the line then shows how long it has been running, redrawn at most four
    // times a second.
    plan_options.on_progress = [&, rows = bfc::tools::RowProgress()](
                                   size_t done, size_t total,
                                   const char* name) mutable {
      int64_t seconds = 0;
      if (done >= total || !rows.Update(done, total, absl::Now(), &seconds))
        return;
      progress(absl::StrFormat(
          "%s: %s (%d/%d): planning %d/%d %s%s", kToolName, compiled->name,
          t + 1, paths.size(), done + 1, total, name,
          seconds > 0 ? absl::StrFormat(" %ds", seconds) : ""));
    };
    absl::StatusOr<bfc::planner::PlanReport> plan =
        bfc::planner::PlanTrace(*compiled, plan_options);
    clear_progress();
    const std::string table =
        CompareTable(path, *compiled, base, phases_ptr, rows, plan, &json);
    if (!quiet) {
      if (t > 0) std::fputs("\n", text);
      std::fputs(table.c_str(), text);
      std::fflush(text);
    }
    if (curves) {
      bfc::PolicyPanelGroup g;
      g.trace = compiled->name;
      g.num_events = compiled->num_events;
      for (const PolicyRow& r : rows) {
        bfc::PolicyPanel panel;
        panel.policy = r.error.empty() ? r.name : r.name + " (error)";
        panel.footprint = r.summary.footprint_ratio;
        panel.failures = r.summary.failures;
        if (r.profile.has_value()) {
          panel.pool_bytes = r.profile->pool_bytes;
          panel.live_bytes = r.profile->live_bytes;
        }
        g.panels.push_back(std::move(panel));
      }
      groups.push_back(std::move(g));
    }
  }

  bool written = true;
  if (!flags.summary_json_path.empty()) {
    written &= WriteOutput(
        flags, flags.summary_json_path,
        json.dump(2, ' ', /*ensure_ascii=*/false,
                  nlohmann::ordered_json::error_handler_t::replace) +
            "\n",
        "the comparison rows");
  }
  if (curves) {
    written &=
        WriteOutput(flags, flags.compare_svg_path,
                    bfc::RenderPolicyPanelsSvg(groups), "the policy panels");
  }
  if (!written) return kExitBadInput;
  if (failed && !flags.expect_failures) {
    if (!quiet) {
      std::fprintf(stderr,
                   "%s: allocations failed under some policies (exit status "
                   "%d)\n",
                   kToolName, kExitFailedAllocations);
    }
    return kExitFailedAllocations;
  }
  return kExitOk;
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
  if (quiet) {
    // The allocator's warnings (out-of-memory reports) are not errors of the
    // run: the exit status and the summary say that allocations failed.
    bfc::SetLogSink([](bfc::LogSeverity severity, std::string_view message) {
      if (severity < bfc::LogSeverity::kError) return;
      std::fprintf(stderr, "[bfc %s] %.*s\n", bfc::LogSeverityName(severity),
                   static_cast<int>(message.size()), message.data());
    });
  }

  // An empty --phases would silently mean "look beside the trace".
  if (app.count("--phases") > 0 && flags.phases_path.empty()) {
    PrintError(app,
               "--phases: an empty path (leave the flag out to use "
               "the phases found beside the trace)");
    return kExitUsage;
  }
  if (flags.compare_policies) return ComparePolicies(app, flags);
  if (flags.trace_paths.size() > 1) {
    PrintError(app, "more than one TRACE is only for --compare-policies");
    return kExitUsage;
  }
  if (!flags.compare_svg_path.empty()) {
    PrintError(app, "--compare-svg needs --compare-policies");
    return kExitUsage;
  }

  Config config;
  if (absl::Status s = BuildConfig(flags, &config); !s.ok()) {
    PrintError(app, s.message());
    return kExitUsage;
  }

  std::string path = flags.trace_paths.empty() ? "" : flags.trace_paths[0];
  const bool bundled = flags.trace_paths.empty();
  if (!bundled && path.empty()) {
    // An unset "$TRACE" must not silently replay the bundled trace.
    PrintError(app,
               "TRACE is an empty path; name a trace file, or give none "
               "for the bundled one");
    return kExitBadInput;
  }
  if (bundled) {
    path = DefaultTracePath();
    if (path.empty()) {
      PrintError(app, absl::StrCat("the bundled trace ", kDefaultTrace,
                                   " is not installed next to this program "
                                   "(share/bfc/traces); give a TRACE"));
      return kExitBadInput;
    }
  }

  std::vector<NamedPath> outputs;
  for (const auto& [flag, out] :
       {std::pair<const char*, const std::string*>{"--json", &flags.json_path},
        {"--svg", &flags.svg_path},
        {"--html", &flags.html_path},
        {"--pytorch-snapshot", &flags.pytorch_snapshot_path},
        {"--summary-json", &flags.summary_json_path}}) {
    if (!out->empty()) outputs.push_back({flag, *out});
  }
  std::vector<NamedPath> inputs = {{"TRACE", path}};
  if (!flags.phases_path.empty()) {
    inputs.push_back({"--phases", flags.phases_path});
  }
  if (absl::Status s = bfc::tools::CheckDistinctPaths(inputs, outputs);
      !s.ok()) {
    PrintError(app, s.message());
    return kExitUsage;
  }

  // The backend is checked before the trace is read, so an unusable backend
  // is reported at once rather than after parsing a large file.
  std::string error;
  std::unique_ptr<bfc::SubAllocator> sub = MakeSubAllocator(config, &error);
  if (sub == nullptr) {
    PrintError(app, error);
    return kExitUsage;
  }
  // A backend that can never serve (a virtual pool larger than the address
  // space can reserve, a CUDA backend without a driver) would fail every
  // allocation: refuse it here with its own reason, as a usage error.
  if (absl::Status available = sub->Availability(); !available.ok()) {
    PrintError(app,
               absl::StrCat("the ", bfc::c_api::BackendName(config.backend),
                            " backend cannot serve: ", available.message()));
    return kExitUsage;
  }
  if (flags.verbosity.verbose) PrintConfig(config, path, bundled);

  absl::StatusOr<bfc::Trace> trace = bfc::tools::ReadTraceArg(path);
  if (!trace.ok()) {
    PrintError(app, trace.status().message());
    return kExitBadInput;
  }
  bfc::CompileOptions compile_options;
  compile_options.skip_unknown_frees = flags.skip_unknown_frees;
  absl::StatusOr<bfc::CompiledTrace> compiled =
      bfc::CompileTrace(*trace, compile_options);
  if (!compiled.ok()) {
    PrintError(app, compiled.status().message());
    return kExitBadInput;
  }
  std::optional<bfc::tools::TracePhases> phases;
  if (absl::Status s = LoadPhases(flags, path, *compiled, &phases); !s.ok()) {
    PrintError(app, s.message());
    return kExitBadInput;
  }
  if (absl::Status s =
          CheckFoundPhasesAreNoOutput(flags.phases_path, phases, outputs);
      !s.ok()) {
    PrintError(app, s.message());
    return kExitUsage;
  }
  const bool report = !flags.json_path.empty() || !flags.svg_path.empty() ||
                      !flags.html_path.empty() ||
                      !flags.pytorch_snapshot_path.empty();

  // The report's history names each event's trace line and pointer; without
  // a report the events are not needed any more.
  if (!report) trace = bfc::Trace();

  if (flags.accounts && !phases.has_value()) {
    PrintError(app, absl::StrCat("--accounts needs the trace's phases: give "
                                 "--phases or put them in meta/",
                                 compiled->name, ".phases.csv beside ", path));
    return kExitUsage;
  }
  const bfc::SubAllocator* sub_ptr = sub.get();
  bfc::Allocator allocator(std::move(sub), config.memory_limit, kToolName,
                           config.options);
  // Declared after the allocator: closed and gone before it.
  PhaseAccounts accounts;
  if (flags.accounts) {
    if (absl::Status s = accounts.Open(&allocator, *compiled, *phases);
        !s.ok()) {
      PrintError(app, s.message());
      return kExitBadInput;
    }
    // The report keeps each account's bytes in use after every op: 8 bytes
    // a sample, and about 28 while it is written (726 MB for 100k ops and
    // 256 accounts). Bounded before any work, so that a long trace with many
    // phase names cannot exhaust memory.
    const size_t names = accounts.map()->names.size();
    if (report && names > 0 &&
        compiled->ops.size() > kMaxAccountSamples / names) {
      PrintError(app,
                 absl::StrFormat(
                     "--accounts with a report (--json, --svg, --html, "
                     "--pytorch-snapshot) records %d accounts after each of "
                     "%d ops; at most %d samples (about 1 GB while written): "
                     "use fewer phase names or drop the report",
                     names, compiled->ops.size(), kMaxAccountSamples));
      return kExitBadInput;
    }
  }
  bfc::ReplayOptions replay_options;
  accounts.Attach(&replay_options);
  if (flags.streams) {
    replay_options.streams = true;
    (void)allocator.SetStreamOps(bfc::MakeCompletedWorkStreamOps());
  }
  bfc::Replayer replayer(*compiled, allocator, replay_options);
  absl::StatusOr<bfc::ReplaySummary> summary = replayer.Run();
  if (!summary.ok()) {
    PrintError(app, summary.status().message());
    return kExitBadInput;
  }
  // The last iteration, measured on a second replay with a stats read after
  // every op (kept out of the timed one).
  std::optional<bfc::tools::ReplayProfile> profile;
  if (phases.has_value()) {
    std::unique_ptr<bfc::SubAllocator> profile_sub =
        MakeSubAllocator(config, &error);
    if (profile_sub == nullptr) {
      PrintError(app, error);
      return kExitUsage;
    }
    bfc::Allocator profiled(std::move(profile_sub), config.memory_limit,
                            kToolName, config.options);
    if (flags.streams) {
      (void)profiled.SetStreamOps(bfc::MakeCompletedWorkStreamOps());
    }
    absl::StatusOr<bfc::tools::ReplayProfile> p = bfc::tools::ProfileReplay(
        *compiled, profiled, &*phases, /*max_points=*/0, flags.streams);
    if (!p.ok()) {
      PrintError(app, p.status().message());
      return kExitBadInput;
    }
    profile = *std::move(p);
  }
  // With the summary JSON on stdout, the text goes to stderr.
  std::FILE* text =
      flags.summary_json_path == bfc::tools::kStdioPath ? stderr : stdout;
  if (!quiet) {
    PrintSummary(text, config, path, bundled, *compiled, *summary, allocator);
    if (profile.has_value()) PrintPhases(text, *phases, *profile);
  }
  accounts.TakeStats();
  if (!quiet) accounts.Print(text);
  replayer.ReleaseLive();
  accounts.Close();

  bool written = true;
  if (report) {
    written &= WriteReport(flags, config, path, *trace, *compiled,
                           accounts.map()) == kExitOk;
  }
  if (flags.plan) {
    absl::StatusOr<bfc::planner::PlanReport> report =
        bfc::planner::PlanTrace(*compiled, bfc::planner::PlanOptions());
    if (!report.ok()) {
      // The replay's results are still written below; the status says 1.
      PrintError(app, absl::StrCat("--plan: ", report.status().message()));
      written = false;
    } else if (!quiet) {
      report->trace_name = bfc::tools::ForTerminal(report->trace_name);
      std::fprintf(text, "\n%s",
                   bfc::planner::FormatPlanReport(
                       *report, static_cast<size_t>(summary->peak_pool_bytes))
                       .c_str());
    }
  }
  if (!flags.summary_json_path.empty()) {
    written &=
        WriteOutput(flags, flags.summary_json_path,
                    SummaryJson(config, path, bundled, *compiled, *summary,
                                phases.has_value() ? &*phases : nullptr,
                                profile.has_value() ? &*profile : nullptr,
                                VmmJson(sub_ptr), accounts.Json()),
                    "the summary");
  }
  if (!written) return kExitBadInput;
  if (summary->failures > 0 && !flags.expect_failures) {
    if (!quiet) {
      std::fprintf(stderr, "%s: %zu allocations failed (exit status %d)\n",
                   kToolName, summary->failures, kExitFailedAllocations);
    }
    return kExitFailedAllocations;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return bfc::tools::FinishStandardOutput(kToolName, Main(argc, argv));
}
