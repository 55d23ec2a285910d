// File: bench/main.cc
// The one benchmark binary: synthetic suites register themselves; trace
// suites are registered here from the trace directory, which is
// $BFC_BENCH_TRACE_DIR if set, else the source tree's tests/data (phase files
// from $BFC_BENCH_PHASE_DIR, else bench/data).
//
// $BFC_BENCH_CONFS adds trace rows for configurations of one's own, beside
// the presets tf and low_footprint, so that a policy's speed is measured in
// the same run as theirs:
//
//   BFC_BENCH_CONFS='nosplit=preset:low_footprint,min_split_remainder_bytes:0'
//
// registers BM_Trace/TRACE/{cold,warm}_nosplit_{sim,addr,pages,vmm}. Entries
// are NAME=CONF separated by ';'; NAME is letters, digits and '_'; CONF is
// BFC_ALLOC_CONF's grammar (presets and option keys; the backing is the
// row's suffix, so backend and memory keys are refused, as is any key
// BFC_ALLOC_CONF would ignore).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bench_util.h"
#include "c_api/alloc_conf.h"

namespace bfc::bench {
void RegisterTraceBenchmarks(const std::vector<PhasedTrace>& traces,
                             const std::vector<TraceConf>& confs);

namespace {

constexpr char kConfsEnvVar[] = "BFC_BENCH_CONFS";

bool IsRowName(absl::string_view name) {
  if (name.empty()) return false;
  for (const char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_') {
      return false;
    }
  }
  return true;
}

// The presets' rows, then one per entry of `text` (BFC_BENCH_CONFS).
absl::StatusOr<std::vector<TraceConf>> TraceConfs(absl::string_view text) {
  std::vector<TraceConf> confs;
  for (const char* preset : {"tf", "low_footprint"}) {
    TraceConf conf{preset, AllocatorOptions()};
    if (absl::Status s = ApplyAllocatorPreset(conf.options, preset); !s.ok()) {
      return s;
    }
    confs.push_back(std::move(conf));
  }
  for (absl::string_view entry :
       absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    const size_t eq = entry.find('=');
    const absl::string_view name =
        eq == absl::string_view::npos
            ? absl::string_view()
            : absl::StripAsciiWhitespace(entry.substr(0, eq));
    if (!IsRowName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          kConfsEnvVar, ": \"", entry,
          "\" is not NAME=CONF with NAME of letters, digits and '_'"));
    }
    for (const TraceConf& c : confs) {
      if (c.name == name) {
        return absl::InvalidArgumentError(absl::StrCat(
            kConfsEnvVar, ": the row name \"", name, "\" is taken"));
      }
    }
    absl::StatusOr<c_api::AllocConf> parsed =
        c_api::ParseAllocConf(entry.substr(eq + 1));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kConfsEnvVar, " (", name, "): ", parsed.status().message()));
    }
    if (!parsed->ignored.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          kConfsEnvVar, " (", name, "): ", parsed->ignored.front()));
    }
    for (const std::string& key : parsed->keys) {
      const std::string setting = c_api::AllocConfSetting(key);
      if (setting == "backend" || setting == "memory_limit" ||
          setting == "memory_fraction") {
        return absl::InvalidArgumentError(absl::StrCat(
            kConfsEnvVar, " (", name, "): ", key,
            " is not for the bench: each row's suffix (_sim, _addr, _pages, "
            "_vmm) names its backing, and the limit is the suite's"));
      }
    }
    confs.push_back(TraceConf{std::string(name), parsed->options});
  }
  return confs;
}

}  // namespace
}  // namespace bfc::bench

int main(int argc, char** argv) {
  const char* trace_dir = std::getenv("BFC_BENCH_TRACE_DIR");
  const char* phase_dir = std::getenv("BFC_BENCH_PHASE_DIR");
  const char* confs_text = std::getenv(bfc::bench::kConfsEnvVar);
  static const absl::StatusOr<std::vector<bfc::bench::TraceConf>> confs =
      bfc::bench::TraceConfs(confs_text ? confs_text : "");
  if (!confs.ok()) {
    std::fprintf(stderr, "%s\n", std::string(confs.status().message()).c_str());
    return 2;
  }
  static const std::vector<bfc::bench::PhasedTrace> traces =
      bfc::bench::LoadTraces(trace_dir ? trace_dir : BFC_BENCH_TRACE_DIR,
                             phase_dir ? phase_dir : BFC_BENCH_PHASE_DIR);
  bfc::bench::RegisterTraceBenchmarks(traces, *confs);
  // Debug checks change timings: every result records the level it ran at.
  benchmark::AddCustomContext("bfc_check_level",
                              std::to_string(BFC_CHECK_LEVEL));
  benchmark::AddCustomContext("bfc_build_type", BFC_BENCH_BUILD_TYPE);
  if (confs_text != nullptr && *confs_text != '\0') {
    benchmark::AddCustomContext(bfc::bench::kConfsEnvVar, confs_text);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
