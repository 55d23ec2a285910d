// File: src/replay_report.cc
// BuildReplayReport, its JSON (nlohmann-json, private) and the HTML viewer
// page, whose template (tools/viewer/viewer.html) is compiled in as
// internal::kViewerHtml by cmake/BfcEmbedText.cmake.
#include "bfc/report/replay_report.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "report/json_value.h"
#include "nlohmann/json.hpp"

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
  s.trace_name = j.at("trace_name").get<std::string>();
  s.events = j.at("events").get<size_t>();
  s.ops = j.at("ops").get<size_t>();
  s.allocations = j.at("allocations").get<size_t>();
  s.frees = j.at("frees").get<size_t>();
  s.failures = j.at("failures").get<size_t>();
  s.skipped_frees = j.at("skipped_frees").get<size_t>();
  s.live_at_end = j.at("live_at_end").get<size_t>();
  s.live_bytes_at_end = j.at("live_bytes_at_end").get<size_t>();
  s.peak_live_bytes = j.at("peak_live_bytes").get<size_t>();
  s.peak_bytes_in_use = j.at("peak_bytes_in_use").get<int64_t>();
  s.peak_pool_bytes = j.at("peak_pool_bytes").get<int64_t>();
  s.pool_bytes_at_end = j.at("pool_bytes_at_end").get<int64_t>();
  s.regions = j.at("regions").get<int64_t>();
  s.footprint_ratio = j.at("footprint_ratio").get<double>();
  s.wall_seconds = j.at("wall_seconds").get<double>();
  s.ns_per_op = j.at("ns_per_op").get<double>();
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
    if (j.at("format").get<std::string>() != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a bfc replay report: \"format\" is not \"", kFormat, "\""));
    }
    if (j.at("version").get<int>() != kVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bfc replay report version ", j.at("version").dump(),
          " is not supported (this library reads ", kVersion, ")"));
    }
    ReplayReport r;
    r.trace_name = j.at("trace").get<std::string>();
    r.summary = SummaryFromJson(j.at("summary"));
    const json& t = j.at("timeline");
    r.timeline.event_index = t.at("event_index").get<std::vector<uint64_t>>();
    r.timeline.live_bytes = t.at("live_bytes").get<std::vector<int64_t>>();
    r.timeline.in_use_bytes = t.at("in_use_bytes").get<std::vector<int64_t>>();
    r.timeline.pool_bytes = t.at("pool_bytes").get<std::vector<int64_t>>();
    r.timeline.fragmentation = t.at("fragmentation").get<std::vector<double>>();
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
      snap.label = s.at("label").get<std::string>();
      snap.op_index = s.at("op_index").get<uint64_t>();
      snap.event_index = s.at("event_index").get<uint64_t>();
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
  // Inside <script>, "</" could close the element early; "<\/" is the same
  // JSON string.
  const std::string data =
      absl::StrReplaceAll(ReplayReportToJson(report), {{"</", "<\\/"}});
  std::string html = internal::kViewerHtml;
  constexpr std::string_view kSlot = "/*BFC_REPORT_JSON*/null";
  const size_t at = html.find(kSlot);
  if (at == std::string::npos) return html;  // a broken template shows so
  html.replace(at, kSlot.size(), data);
  return html;
}

}  // namespace bfc
