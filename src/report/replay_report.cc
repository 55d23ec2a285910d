// File: src/replay_report.cc
// BuildReplayReport, its JSON (nlohmann-json, private) and the HTML viewer
// page, whose template (tools/viewer/viewer.html) is compiled in as
// internal::kViewerHtml by cmake/BfcEmbedText.cmake.
#include "bfc/report/replay_report.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "report/json_value.h"
#include "report/text_escape.h"

namespace bfc {
namespace internal {
extern const char kViewerHtml[];  // generated: viewer_html.cc
}  // namespace internal

namespace {

using nlohmann::json;

constexpr const char* kFormat = "bfc-replay-report";
constexpr int kVersion = 1;
constexpr size_t kProgressEvery = 4096;

void Sample(const Allocator& allocator, const ReplayOp& op, ReplayTimeline* t) {
  const AllocatorStats s = *allocator.GetStats();
  t->event_index.push_back(op.event_index);
  t->live_bytes.push_back(s.bytes_requested_in_use);
  t->in_use_bytes.push_back(s.bytes_in_use);
  t->pool_bytes.push_back(s.pool_bytes.value_or(0));
  t->fragmentation.push_back(s.fragmentation);
}

json SummaryToJson(const ReplaySummary& s) {
  return json{{"trace_name", s.trace_name},
              {"events", s.events},
              {"ops", s.ops},
              {"allocations", s.allocations},
              {"frees", s.frees},
              {"failures", s.failures},
              {"skipped_frees", s.skipped_frees},
              {"live_at_end", s.live_at_end},
              {"live_bytes_at_end", s.live_bytes_at_end},
              {"peak_live_bytes", s.peak_live_bytes},
              {"peak_bytes_in_use", s.peak_bytes_in_use},
              {"peak_pool_bytes", s.peak_pool_bytes},
              {"pool_bytes_at_end", s.pool_bytes_at_end},
              {"regions", s.regions},
              {"footprint_ratio", s.footprint_ratio},
              {"wall_seconds", s.wall_seconds},
              {"ns_per_op", s.ns_per_op}};
}

ReplaySummary SummaryFromJson(const json& j) {
  ReplaySummary s;
  s.trace_name = internal::CheckedGet<std::string>(j, "trace_name");
  s.events = internal::CheckedGet<size_t>(j, "events");
  s.ops = internal::CheckedGet<size_t>(j, "ops");
  s.allocations = internal::CheckedGet<size_t>(j, "allocations");
  s.frees = internal::CheckedGet<size_t>(j, "frees");
  s.failures = internal::CheckedGet<size_t>(j, "failures");
  s.skipped_frees = internal::CheckedGet<size_t>(j, "skipped_frees");
  s.live_at_end = internal::CheckedGet<size_t>(j, "live_at_end");
  s.live_bytes_at_end = internal::CheckedGet<size_t>(j, "live_bytes_at_end");
  s.peak_live_bytes = internal::CheckedGet<size_t>(j, "peak_live_bytes");
  s.peak_bytes_in_use = internal::CheckedGet<int64_t>(j, "peak_bytes_in_use");
  s.peak_pool_bytes = internal::CheckedGet<int64_t>(j, "peak_pool_bytes");
  s.pool_bytes_at_end = internal::CheckedGet<int64_t>(j, "pool_bytes_at_end");
  s.regions = internal::CheckedGet<int64_t>(j, "regions");
  s.footprint_ratio = internal::CheckedGet<double>(j, "footprint_ratio");
  s.wall_seconds = internal::CheckedGet<double>(j, "wall_seconds");
  s.ns_per_op = internal::CheckedGet<double>(j, "ns_per_op");
  return s;
}

json ReportToJsonValue(const ReplayReport& r) {
  const ReplayTimeline& t = r.timeline;
  json snapshots = json::array();
  for (const ReplaySnapshot& s : r.snapshots) {
    snapshots.push_back({{"label", s.label},
                         {"op_index", s.op_index},
                         {"event_index", s.event_index},
                         {"dump", internal::MemoryDumpToJsonValue(s.dump)}});
  }
  return json{{"format", kFormat},
              {"version", kVersion},
              {"trace", r.trace_name},
              {"summary", SummaryToJson(r.summary)},
              {"timeline",
               {{"event_index", t.event_index},
                {"live_bytes", t.live_bytes},
                {"in_use_bytes", t.in_use_bytes},
                {"pool_bytes", t.pool_bytes},
                {"fragmentation", t.fragmentation}}},
              {"snapshots", std::move(snapshots)}};
}

}  // namespace

absl::StatusOr<ReplayReport> BuildReplayReport(
    const CompiledTrace& trace,
    const std::function<std::unique_ptr<Allocator>()>& make_allocator,
    const ReplayReportOptions& options) {
  const size_t n = trace.ops.size();
  const size_t total = 2 * n;
  auto progress = [&](size_t done) {
    if (options.progress) options.progress(done, total);
  };
  ReplayReport report;
  report.trace_name = trace.name;

  // Pass 1: the timeline, the summary, the end snapshot, and where the peak
  // of bytes in use is (its first op).
  std::unique_ptr<Allocator> allocator = make_allocator();
  if (allocator == nullptr) {
    return absl::InternalError("BuildReplayReport: make_allocator gave null");
  }
  ReplayTimeline& t = report.timeline;
  t.event_index.reserve(n);
  t.live_bytes.reserve(n);
  t.in_use_bytes.reserve(n);
  t.pool_bytes.reserve(n);
  t.fragmentation.reserve(n);
  int64_t peak = -1;
  size_t peak_op = 0;
  ReplayOptions replay = options.replay;
  replay.after_op = [&](size_t i, const ReplayOp& op, void*) {
    Sample(*allocator, op, &t);
    if (t.in_use_bytes.back() > peak) {
      peak = t.in_use_bytes.back();
      peak_op = i;
    }
    if (i % kProgressEvery == 0) progress(i);
  };
  ReplaySnapshot end;
  {
    Replayer replayer(trace, *allocator, replay);
    absl::StatusOr<ReplaySummary> summary = replayer.Run();
    if (!summary.ok()) return summary.status();
    report.summary = *std::move(summary);
    end.label = "end";
    end.op_index = n > 0 ? n - 1 : 0;
    end.event_index = n > 0 ? trace.ops.back().event_index : 0;
    end.dump = allocator->RecordMemoryMap();
  }
  progress(n);

  // Pass 2: replay into a fresh allocator up to the peak and take its map.
  ReplaySnapshot at_peak;
  at_peak.label = "peak";
  if (n > 0) {
    std::unique_ptr<Allocator> second = make_allocator();
    if (second == nullptr) {
      return absl::InternalError("BuildReplayReport: make_allocator gave null");
    }
    bool taken = false;
    replay.after_op = [&](size_t i, const ReplayOp& op, void*) {
      if (i == peak_op && !taken) {
        at_peak.op_index = i;
        at_peak.event_index = op.event_index;
        at_peak.dump = second->RecordMemoryMap();
        taken = true;
      }
      if (i % kProgressEvery == 0) progress(n + i);
    };
    Replayer replayer(trace, *second, replay);
    absl::StatusOr<ReplaySummary> again = replayer.Run();
    if (!again.ok()) return again.status();
  } else {
    at_peak.dump = end.dump;
  }
  progress(total);
  report.snapshots.push_back(std::move(at_peak));
  report.snapshots.push_back(std::move(end));
  return report;
}

std::string ReplayReportToJson(const ReplayReport& report, int indent) {
  return ReportToJsonValue(report).dump(indent, ' ', /*ensure_ascii=*/false,
                                        json::error_handler_t::replace);
}

absl::StatusOr<ReplayReport> ReplayReportFromJson(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (internal::CheckedGet<std::string>(j, "format") != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a bfc replay report: \"format\" is not \"", kFormat, "\""));
    }
    if (internal::CheckedGet<int>(j, "version") != kVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bfc replay report version ", j.at("version").dump(),
          " is not supported (this library reads ", kVersion, ")"));
    }
    ReplayReport r;
    r.trace_name = internal::CheckedGet<std::string>(j, "trace");
    r.summary = SummaryFromJson(j.at("summary"));
    const json& t = j.at("timeline");
    r.timeline.event_index =
        internal::CheckedGet<std::vector<uint64_t>>(t, "event_index");
    r.timeline.live_bytes =
        internal::CheckedGet<std::vector<int64_t>>(t, "live_bytes");
    r.timeline.in_use_bytes =
        internal::CheckedGet<std::vector<int64_t>>(t, "in_use_bytes");
    r.timeline.pool_bytes =
        internal::CheckedGet<std::vector<int64_t>>(t, "pool_bytes");
    r.timeline.fragmentation =
        internal::CheckedGet<std::vector<double>>(t, "fragmentation");
    const size_t n = r.timeline.event_index.size();
    if (r.timeline.live_bytes.size() != n ||
        r.timeline.in_use_bytes.size() != n ||
        r.timeline.pool_bytes.size() != n ||
        r.timeline.fragmentation.size() != n) {
      return absl::InvalidArgumentError(
          "bfc replay report: timeline series differ in length");
    }
    for (const json& s : j.at("snapshots")) {
      ReplaySnapshot snap;
      snap.label = internal::CheckedGet<std::string>(s, "label");
      snap.op_index = internal::CheckedGet<uint64_t>(s, "op_index");
      snap.event_index = internal::CheckedGet<uint64_t>(s, "event_index");
      snap.dump = internal::MemoryDumpFromJsonValue(s.at("dump"));
      r.snapshots.push_back(std::move(snap));
    }
    return r;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a bfc replay report: ", e.what()));
  }
}

std::string RenderReplayReportHtml(const ReplayReport& report) {
  // The JSON goes into a <script> element: escaped so that no name can end
  // it early or turn the rest of the page into script (report/text_escape.h).
  const std::string data =
      internal::EscapeJsonForHtmlScript(ReplayReportToJson(report));
  std::string html = internal::kViewerHtml;
  constexpr std::string_view kSlot = "/*BFC_REPORT_JSON*/null";
  const size_t at = html.find(kSlot);
  if (at == std::string::npos) return html;  // a broken template shows so
  html.replace(at, kSlot.size(), data);
  return html;
}

}  // namespace bfc
