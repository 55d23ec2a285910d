// File: tests/fuzz/parsers/json_fuzzer.cc
// The JSON readers (MemoryDumpFromJson, AllocatorStatsFromJson,
// ReplayReportFromJson), then every writer on what they accepted: the SVG
// memory map, the PyTorch snapshot pickle, the viewer page and JSON again.
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bfc/pytorch_snapshot.h"
#include "bfc/report/memory_dump_json.h"
#include "bfc/report/memory_map_svg.h"
#include "bfc/report/replay_report.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto dump = bfc::MemoryDumpFromJson(text); dump.ok()) {
    (void)bfc::RenderMemoryMapSvg(*dump);
    (void)bfc::PyTorchSnapshotPickle(*dump, {});
    (void)bfc::MemoryDumpFromJson(bfc::MemoryDumpToJson(*dump));
  }
  if (auto stats = bfc::AllocatorStatsFromJson(text); stats.ok()) {
    (void)bfc::AllocatorStatsToJson(*stats);
  }
  if (auto report = bfc::ReplayReportFromJson(text); report.ok()) {
    (void)bfc::RenderReplayReportHtml(*report);
    (void)bfc::ReplayReportToJson(*report);
    if (!report->snapshots.empty()) {
      (void)bfc::PyTorchSnapshotPickle(report->snapshots.back().dump, {});
      (void)bfc::RenderMemoryMapSvg(report->snapshots.back().dump);
    }
  }
  return 0;
}
