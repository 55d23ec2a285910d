// File: src/replay_report.cc
// BuildReplayReport, its JSON (written directly, nlohmann-json for the small
// parts and for reading; private) and the HTML viewer
// page, whose template (tools/viewer/viewer.html) is compiled in as
// internal::kViewerHtml by cmake/BfcEmbedText.cmake.
#include "bfc/report/replay_report.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bfc/account.h"
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

// The accounts of `options` on `allocator`, charged by `replay` (nothing
// when it names none).
absl::Status OpenAccounts(Allocator* allocator,
                          const ReplayReportOptions& options,
                          ReplayAccounts* accounts, ReplayOptions* replay) {
  if (options.account_names.empty()) return absl::OkStatus();
  absl::Status s =
      accounts->Open(allocator, options.account_names, options.account_of_op);
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("BuildReplayReport: ", s.message()));
  }
  accounts->Attach(replay);
  return absl::OkStatus();
}

json SummaryToJson(const ReplaySummary& s) {
  json j{{"trace_name", s.trace_name},
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
         {"regions_released", s.regions_released},
         {"footprint_ratio", s.footprint_ratio},
         {"wall_seconds", s.wall_seconds},
         {"ns_per_op", s.ns_per_op}};
  if (s.trace_streams > 0) {
    j["trace_streams"] = s.trace_streams;
    j["stream_stats"] = internal::StreamStatsToJsonValue(s.stream_stats);
  }
  return j;
}

// Counts and byte totals are never negative; ratios and times are finite
// and not negative. Errors name the JSON path ("summary.ops").
ReplaySummary SummaryFromJson(const json& j) {
  using internal::CheckedGet;
  using internal::CheckedGetInRange;
  const std::string p = "summary";
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr double kHuge = std::numeric_limits<double>::max();
  ReplaySummary s;
  s.trace_name = CheckedGet<std::string>(j, p, "trace_name");
  s.events = CheckedGet<size_t>(j, p, "events");
  s.ops = CheckedGet<size_t>(j, p, "ops");
  s.allocations = CheckedGet<size_t>(j, p, "allocations");
  s.frees = CheckedGet<size_t>(j, p, "frees");
  s.failures = CheckedGet<size_t>(j, p, "failures");
  s.skipped_frees = CheckedGet<size_t>(j, p, "skipped_frees");
  s.live_at_end = CheckedGet<size_t>(j, p, "live_at_end");
  s.live_bytes_at_end = CheckedGet<size_t>(j, p, "live_bytes_at_end");
  s.peak_live_bytes = CheckedGet<size_t>(j, p, "peak_live_bytes");
  s.peak_bytes_in_use =
      CheckedGetInRange<int64_t>(j, p, "peak_bytes_in_use", 0, kMax);
  s.peak_pool_bytes =
      CheckedGetInRange<int64_t>(j, p, "peak_pool_bytes", 0, kMax);
  s.pool_bytes_at_end =
      CheckedGetInRange<int64_t>(j, p, "pool_bytes_at_end", 0, kMax);
  s.regions = CheckedGetInRange<int64_t>(j, p, "regions", 0, kMax);
  // Absent in reports written before it existed.
  if (j.contains("regions_released")) {
    s.regions_released =
        CheckedGetInRange<int64_t>(j, p, "regions_released", 0, kMax);
  }
  s.footprint_ratio =
      CheckedGetInRange<double>(j, p, "footprint_ratio", 0, kHuge);
  s.wall_seconds = CheckedGetInRange<double>(j, p, "wall_seconds", 0, kHuge);
  s.ns_per_op = CheckedGetInRange<double>(j, p, "ns_per_op", 0, kHuge);
  // Only in reports of a replay on the trace's streams.
  if (j.contains("trace_streams")) {
    s.trace_streams = CheckedGetInRange<size_t>(j, p, "trace_streams", 1,
                                                size_t{UINT16_MAX} + 1);
    if (!j.contains("stream_stats")) {
      internal::FieldError(p + ".stream_stats", "missing");
    }
    s.stream_stats = internal::StreamStatsFromJsonValue(j["stream_stats"],
                                                        p + ".stream_stats");
  }
  return s;
}

// Each element of `values` (at `what`) within [lo, hi].
template <typename T>
void CheckEach(const std::vector<T>& values, const char* what, T lo, T hi) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(values[i] >= lo && values[i] <= hi)) {
      internal::FieldError(absl::StrCat("timeline.", what, "[", i, "]"),
                           absl::StrCat("is out of range [", lo, ", ", hi,
                                        "] (got ", values[i], ")"));
    }
  }
}

// The report's JSON text, written directly: a tree of nlohmann values costs
// ~0.7 KB per trace operation (every number of the timeline and history
// columns a node), 780 MB for a trace of a million events. Only the small
// parts (summary, snapshots, accounts, scalars) go through nlohmann. The text
// is what nlohmann's dump of the same value writes: keys in its (sorted)
// order, its separators and, for indent >= 0, its line breaks and
// indentation, so a parsed and re-dumped report reads the same.
class ReportWriter {
 public:
  ReportWriter(std::string* out, int indent) : out_(*out), indent_(indent) {}

  // Objects: Begin, then Key and a value per member, then End.
  void BeginObject() {
    out_ += '{';
    first_.push_back(true);
  }
  void Key(std::string_view name) {
    if (!first_.back()) out_ += ',';
    first_.back() = false;
    Newline(first_.size());
    out_ += '"';
    out_ += name;  // the writer's own keys: plain ASCII
    out_ += indent_ >= 0 ? "\": " : "\":";
  }
  void EndObject() {
    const bool empty = first_.back();
    first_.pop_back();
    if (!empty) Newline(first_.size());
    out_ += '}';
  }
  // A value through nlohmann, indented to the current depth.
  void Value(const json& j) {
    const std::string text = j.dump(indent_, ' ', /*ensure_ascii=*/false,
                                    json::error_handler_t::replace);
    if (indent_ < 0) {
      out_ += text;
      return;
    }
    // Raw newlines occur in a dump only between tokens (never in a string).
    const std::string pad(first_.size() * static_cast<size_t>(indent_), ' ');
    for (char c : text) {
      out_ += c;
      if (c == '\n') out_ += pad;
    }
  }
  // An array of numbers (or of plain ASCII strings), one element at a time.
  template <typename T, typename Format>
  void Array(const std::vector<T>& values, Format format) {
    if (values.empty()) {
      out_ += "[]";
      return;
    }
    out_ += '[';
    const size_t depth = first_.size() + 1;
    for (size_t i = 0; i < values.size(); ++i) {
      if (i != 0) out_ += ',';
      Newline(depth);
      format(values[i]);
    }
    Newline(depth - 1);
    out_ += ']';
  }
  template <typename T>
  void IntArray(const std::vector<T>& values) {
    Array(values, [this](T v) { absl::StrAppend(&out_, v); });
  }

 private:
  void Newline(size_t depth) {
    if (indent_ < 0) return;
    out_ += '\n';
    out_.append(depth * static_cast<size_t>(indent_), ' ');
  }

  std::string& out_;
  int indent_;
  std::vector<bool> first_;  // per open object: no member written yet
};

void WriteReport(const ReplayReport& r, int indent, std::string* out) {
  const ReplayTimeline& t = r.timeline;
  ReportWriter w(out, indent);
  w.BeginObject();
  w.Key("format");
  w.Value(kFormat);
  if (r.has_history) {
    const std::vector<ReplayHistoryEvent>& h = r.history;
    // Each column straight from the events.
    auto column = [&](auto field) {
      w.Array(h, [&](const ReplayHistoryEvent& e) {
        absl::StrAppend(out, field(e));
      });
    };
    w.Key("history");
    w.BeginObject();
    // nlohmann's order: sorted by key.
    w.Key("action");
    column([](const ReplayHistoryEvent& e) {
      return static_cast<int>(e.event.action);
    });
    w.Key("address");
    column([](const ReplayHistoryEvent& e) { return e.event.address; });
    w.Key("allocation_id");
    column([](const ReplayHistoryEvent& e) { return e.event.allocation_id; });
    w.Key("line");
    column([](const ReplayHistoryEvent& e) { return uint64_t{e.line}; });
    w.Key("op_index");
    column([](const ReplayHistoryEvent& e) { return uint64_t{e.op_index}; });
    w.Key("pointer");
    w.Array(h, [&](const ReplayHistoryEvent& e) {
      if (e.pointer != 0) {
        absl::StrAppend(out, "\"0x", absl::Hex(e.pointer), "\"");
      } else {
        *out += "\"\"";
      }
    });
    w.Key("requested_size");
    column([](const ReplayHistoryEvent& e) { return e.event.requested_size; });
    w.Key("size");
    column([](const ReplayHistoryEvent& e) { return e.event.size; });
    w.Key("time_us");
    column([](const ReplayHistoryEvent& e) { return e.event.time_us; });
    w.EndObject();
  }
  w.Key("snapshots");
  json snapshots = json::array();
  for (const ReplaySnapshot& s : r.snapshots) {
    snapshots.push_back({{"label", s.label},
                         {"op_index", s.op_index},
                         {"event_index", s.event_index},
                         {"dump", internal::MemoryDumpToJsonValue(s.dump)}});
  }
  w.Value(snapshots);
  snapshots = json();
  w.Key("summary");
  w.Value(SummaryToJson(r.summary));
  w.Key("timeline");
  w.BeginObject();
  // Only a replay with accounts has them (the series are parallel to the
  // others: tools that check every timeline key see none that is empty).
  if (!t.accounts.empty()) {
    json accounts = json::array();
    for (const ReplayAccountSeries& a : t.accounts) {
      accounts.push_back({{"path", a.path}, {"bytes_in_use", a.bytes_in_use}});
    }
    w.Key("accounts");
    w.Value(accounts);
  }
  w.Key("event_index");
  w.IntArray(t.event_index);
  w.Key("fragmentation");
  w.Array(t.fragmentation, [&](double v) { *out += json(v).dump(); });
  w.Key("in_use_bytes");
  w.IntArray(t.in_use_bytes);
  w.Key("live_bytes");
  w.IntArray(t.live_bytes);
  w.Key("pool_bytes");
  w.IntArray(t.pool_bytes);
  w.EndObject();
  w.Key("trace");
  w.Value(r.trace_name);
  w.Key("version");
  w.Value(kVersion);
  w.EndObject();
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
  report.has_history = options.history;
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
  // Declared after the allocator: closed and gone before it.
  ReplayAccounts accounts;
  if (absl::Status s =
          OpenAccounts(allocator.get(), options, &accounts, &replay);
      !s.ok()) {
    return s;
  }
  for (const std::shared_ptr<Account>& c : accounts.children()) {
    t.accounts.push_back({c->path(), {}});
    t.accounts.back().bytes_in_use.reserve(n);
  }
  // events_before[i]: history events recorded before op i ran.
  std::vector<uint64_t> events_before;
  if (options.history) {
    allocator->RecordMemoryHistory(std::numeric_limits<size_t>::max());
    events_before.reserve(n + 1);
    events_before.push_back(0);
  }
  replay.after_op = [&](size_t i, const ReplayOp& op, void*) {
    if (options.history)
      events_before.push_back(allocator->NumMemoryEventsRecorded());
    Sample(*allocator, op, &t);
    for (size_t k = 0; k < accounts.children().size(); ++k) {
      t.accounts[k].bytes_in_use.push_back(
          accounts.children()[k]->GetStats().bytes_in_use);
    }
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
    if (options.history) {
      // Before the Replayer frees what the trace left live.
      MemoryHistory h = allocator->GetMemoryHistory();
      allocator->RecordMemoryHistory(0);
      report.history.reserve(h.events.size());
      size_t op = 0;
      for (size_t e = 0; e < h.events.size(); ++e) {
        while (op + 1 < events_before.size() && events_before[op + 1] <= e)
          ++op;
        ReplayHistoryEvent he;
        he.event = h.events[e];
        he.op_index = std::min(op, n > 0 ? n - 1 : 0);
        const uint64_t row = n > 0 ? trace.ops[he.op_index].event_index : 0;
        if (options.source != nullptr && row < options.source->events.size()) {
          he.line = options.source->events[row].line;
          he.pointer = options.source->events[row].pointer;
        }
        report.history.push_back(he);
      }
    }
  }
  accounts.Close();
  progress(n);

  // Pass 2: replay into a fresh allocator up to the peak and take its map.
  ReplaySnapshot at_peak;
  at_peak.label = "peak";
  if (n > 0) {
    std::unique_ptr<Allocator> second = make_allocator();
    if (second == nullptr) {
      return absl::InternalError("BuildReplayReport: make_allocator gave null");
    }
    ReplayAccounts second_accounts;
    if (absl::Status s =
            OpenAccounts(second.get(), options, &second_accounts, &replay);
        !s.ok()) {
      return s;
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
    {
      Replayer replayer(trace, *second, replay);
      absl::StatusOr<ReplaySummary> again = replayer.Run();
      if (!again.ok()) return again.status();
    }
    second_accounts.Close();
  } else {
    at_peak.dump = end.dump;
  }
  progress(total);
  report.snapshots.push_back(std::move(at_peak));
  report.snapshots.push_back(std::move(end));
  return report;
}

std::string ReplayReportToJson(const ReplayReport& report, int indent) {
  std::string out;
  WriteReport(report, indent, &out);
  return out;
}

absl::StatusOr<ReplayReport> ReplayReportFromJson(std::string_view text) {
  try {
    const json j = json::parse(text);
    if (!j.is_object()) {
      return absl::InvalidArgumentError(
          "not a bfc replay report: not a JSON object");
    }
    if (internal::CheckedGet<std::string>(j, "format") != kFormat) {
      return absl::InvalidArgumentError(absl::StrCat(
          "not a bfc replay report: \"format\" is not \"", kFormat, "\""));
    }
    if (internal::CheckedGet<int>(j, "version") != kVersion) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bfc replay report version ", j.at("version").dump(),
          " is not supported (this library reads ", kVersion, ")"));
    }
    using internal::CheckedGet;
    ReplayReport r;
    r.trace_name = CheckedGet<std::string>(j, "", "trace");
    r.summary = SummaryFromJson(internal::Member(j, "", "summary"));
    const json& t = internal::Member(j, "", "timeline");
    const std::string tp = "timeline";
    r.timeline.event_index =
        CheckedGet<std::vector<uint64_t>>(t, tp, "event_index");
    r.timeline.live_bytes =
        CheckedGet<std::vector<int64_t>>(t, tp, "live_bytes");
    r.timeline.in_use_bytes =
        CheckedGet<std::vector<int64_t>>(t, tp, "in_use_bytes");
    r.timeline.pool_bytes =
        CheckedGet<std::vector<int64_t>>(t, tp, "pool_bytes");
    r.timeline.fragmentation =
        CheckedGet<std::vector<double>>(t, tp, "fragmentation");
    const size_t n = r.timeline.event_index.size();
    if (r.timeline.live_bytes.size() != n ||
        r.timeline.in_use_bytes.size() != n ||
        r.timeline.pool_bytes.size() != n ||
        r.timeline.fragmentation.size() != n) {
      return absl::InvalidArgumentError(
          "bfc replay report: timeline series differ in length");
    }
    constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
    CheckEach<int64_t>(r.timeline.live_bytes, "live_bytes", 0, kMax);
    CheckEach<int64_t>(r.timeline.in_use_bytes, "in_use_bytes", 0, kMax);
    CheckEach<int64_t>(r.timeline.pool_bytes, "pool_bytes", 0, kMax);
    CheckEach<double>(r.timeline.fragmentation, "fragmentation", 0.0, 1.0);
    if (t.contains("accounts")) {
      const json& aj = internal::ArrayMember(t, tp, "accounts");
      for (size_t i = 0; i < aj.size(); ++i) {
        const std::string ap = absl::StrCat("timeline.accounts[", i, "]");
        ReplayAccountSeries a;
        a.path = CheckedGet<std::string>(aj[i], ap, "path");
        a.bytes_in_use =
            CheckedGet<std::vector<int64_t>>(aj[i], ap, "bytes_in_use");
        if (a.bytes_in_use.size() != n) {
          internal::FieldError(ap + ".bytes_in_use",
                               "differs in length from the timeline");
        }
        for (size_t k = 0; k < n; ++k) {
          if (a.bytes_in_use[k] < 0) {
            internal::FieldError(
                absl::StrCat(ap, ".bytes_in_use[", k, "]"),
                absl::StrCat("is negative (got ", a.bytes_in_use[k], ")"));
          }
        }
        r.timeline.accounts.push_back(std::move(a));
      }
    }
    for (size_t i = 1; i < n; ++i) {
      if (r.timeline.event_index[i] < r.timeline.event_index[i - 1]) {
        internal::FieldError(absl::StrCat("timeline.event_index[", i, "]"),
                             "goes back: samples must be in trace order");
      }
    }
    const json& snapshots = internal::ArrayMember(j, "", "snapshots");
    // The viewer draws the first as the peak and the last as the end.
    if (snapshots.empty()) {
      internal::FieldError("snapshots", "is empty (a report has its maps)");
    }
    for (size_t i = 0; i < snapshots.size(); ++i) {
      const json& s = snapshots[i];
      const std::string sp = absl::StrCat("snapshots[", i, "]");
      ReplaySnapshot snap;
      snap.label = CheckedGet<std::string>(s, sp, "label");
      snap.op_index = CheckedGet<uint64_t>(s, sp, "op_index");
      if (snap.op_index >= std::max<size_t>(n, 1)) {
        internal::FieldError(sp + ".op_index", "is past the timeline");
      }
      snap.event_index = CheckedGet<uint64_t>(s, sp, "event_index");
      snap.dump = internal::MemoryDumpFromJsonValue(
          internal::Member(s, sp, "dump"), absl::StrCat(sp, ".dump"));
      r.snapshots.push_back(std::move(snap));
    }
    r.has_history = j.contains("history");
    if (r.has_history) {
      const json& hj = internal::Member(j, "", "history");
      const std::string hp = "history";
      const auto action = CheckedGet<std::vector<int>>(hj, hp, "action");
      const auto op_index =
          CheckedGet<std::vector<uint64_t>>(hj, hp, "op_index");
      const auto address = CheckedGet<std::vector<uint64_t>>(hj, hp, "address");
      const auto size = CheckedGet<std::vector<uint64_t>>(hj, hp, "size");
      const auto requested =
          CheckedGet<std::vector<uint64_t>>(hj, hp, "requested_size");
      const auto allocation_id =
          CheckedGet<std::vector<int64_t>>(hj, hp, "allocation_id");
      const auto time_us = CheckedGet<std::vector<int64_t>>(hj, hp, "time_us");
      const auto line = CheckedGet<std::vector<uint64_t>>(hj, hp, "line");
      const auto pointer =
          CheckedGet<std::vector<std::string>>(hj, hp, "pointer");
      const size_t m = action.size();
      if (op_index.size() != m || address.size() != m || size.size() != m ||
          requested.size() != m || allocation_id.size() != m ||
          time_us.size() != m || line.size() != m || pointer.size() != m) {
        return absl::InvalidArgumentError(
            "bfc replay report: history columns differ in length");
      }
      r.history.resize(m);
      for (size_t i = 0; i < m; ++i) {
        const std::string at = absl::StrCat("history[", i, "]");
        if (action[i] < 0 ||
            action[i] > static_cast<int>(MemoryEvent::Action::kOutOfMemory)) {
          internal::FieldError(
              absl::StrCat(at, ".action"),
              absl::StrCat("is not an action (got ", action[i], ")"));
        }
        if (op_index[i] >= std::max<size_t>(n, 1) ||
            (i > 0 && op_index[i] < op_index[i - 1])) {
          internal::FieldError(absl::StrCat(at, ".op_index"),
                               "is past the timeline or goes back");
        }
        ReplayHistoryEvent& e = r.history[i];
        e.event.action = static_cast<MemoryEvent::Action>(action[i]);
        e.event.address = address[i];
        e.event.size = size[i];
        e.event.requested_size = requested[i];
        e.event.allocation_id = allocation_id[i];
        e.event.time_us = time_us[i];
        e.op_index = op_index[i];
        e.line = line[i];
        if (!pointer[i].empty()) {
          const std::string& p = pointer[i];
          if (p.size() < 3 || p.size() > 18 || p.compare(0, 2, "0x") != 0 ||
              !absl::SimpleHexAtoi(p.substr(2), &e.pointer)) {
            internal::FieldError(absl::StrCat(at, ".pointer"),
                                 absl::StrCat("is not a 0x hex pointer (got \"",
                                              p.substr(0, 40), "\")"));
          }
        }
      }
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
