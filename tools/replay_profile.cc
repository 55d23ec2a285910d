// File: tools/replay_profile.cc
// Phase files, and the profiled second replay behind bfc-replay's
// last_iteration and --compare-svg.
#include "replay_profile.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "bfc/replay/replay.h"
#include "bfc/report/policy_panels_svg.h"

namespace bfc::tools {

namespace {

// A phase file is a few hundred bytes; anything near this is something else.
constexpr size_t kMaxPhaseFileBytes = size_t{16} << 20;
constexpr char kUtf8Bom[] = "\xEF\xBB\xBF";

// At most 60 bytes of `text` for a message, bytes that are not printable
// ASCII escaped.
std::string Snippet(absl::string_view text) {
  constexpr size_t kMax = 60;
  std::string out = absl::CHexEscape(text.substr(0, kMax));
  if (text.size() > kMax) out += "...";
  return out;
}

bool IsIteration(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, "iter") || name.empty()) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isdigit(c); });
}

}  // namespace

size_t TracePhases::NumIterations() const {
  return static_cast<size_t>(
      std::count_if(phases.begin(), phases.end(),
                    [](const TracePhase& p) { return IsIteration(p.name); }));
}

const TracePhase* TracePhases::LastIteration() const {
  for (auto it = phases.rbegin(); it != phases.rend(); ++it) {
    if (IsIteration(it->name)) return &*it;
  }
  return nullptr;
}

PhaseAccountMap MapOpsToPhases(const CompiledTrace& trace,
                               const TracePhases& phases) {
  PhaseAccountMap m;
  std::vector<uint32_t> phase_account;  // per phase
  // A phase file may hold a million names: no search per name.
  absl::flat_hash_map<std::string, uint32_t> index;
  for (const TracePhase& p : phases.phases) {
    auto [it, added] =
        index.try_emplace(p.name, static_cast<uint32_t>(m.names.size()));
    if (added) m.names.push_back(p.name);
    phase_account.push_back(it->second);
  }
  const uint32_t none = static_cast<uint32_t>(m.names.size());
  m.op_account.reserve(trace.ops.size());
  // Ops are in event order and phases in first-event order: one sweep.
  size_t k = 0;
  for (const ReplayOp& op : trace.ops) {
    while (k < phases.phases.size() &&
           phases.phases[k].end_event <= op.event_index) {
      ++k;
    }
    const bool inside = k < phases.phases.size() &&
                        phases.phases[k].first_event <= op.event_index;
    m.op_account.push_back(inside ? phase_account[k] : none);
  }
  return m;
}

absl::StatusOr<TracePhases> ReadTracePhases(const std::string& path,
                                            size_t num_events) {
  auto file_error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("phase file ", path, ": ", why));
  };
  if (path == "-") {
    return file_error(
        "standard input is not read for phases; give the file's path");
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(
        "phase file ", path, ": cannot be read (", std::strerror(errno), ")"));
  }
  if (S_ISDIR(st.st_mode)) return file_error("is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("phase file ", path, ": cannot be read"));
  }
  // Read at most kMaxPhaseFileBytes (and one byte more to see that there is
  // more): a device such as /dev/zero or a trace given by mistake must not
  // fill memory.
  std::string text;
  {
    std::vector<char> buf(64 << 10);
    while (
        text.size() <= kMaxPhaseFileBytes &&
        in.read(buf.data(), static_cast<std::streamsize>(buf.size())).gcount() >
            0) {
      text.append(buf.data(), static_cast<size_t>(in.gcount()));
      if (!in) break;
    }
    if (in.bad()) return file_error("read error");
  }
  if (text.size() > kMaxPhaseFileBytes) {
    return file_error(absl::StrCat("larger than ", kMaxPhaseFileBytes >> 20,
                                   " MiB; not a phase file"));
  }

  auto bad = [&](size_t line, absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("phase file ", path, " line ", line, ": ", why));
  };
  TracePhases out;
  out.path = path;
  size_t line_number = 0;
  bool header = false;
  size_t header_line = 0;
  size_t name_column = 0, first_column = 0, min_fields = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line_number == 1) absl::ConsumePrefix(&raw, kUtf8Bom);
    const absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty()) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    for (absl::string_view& f : fields) f = absl::StripAsciiWhitespace(f);
    if (!header) {
      const auto name_it = std::find(fields.begin(), fields.end(), "Phase");
      const auto first_it =
          std::find(fields.begin(), fields.end(), "FirstEvent");
      if (name_it == fields.end() || first_it == fields.end()) {
        return bad(line_number,
                   absl::StrCat("expected a header with the columns Phase "
                                "and FirstEvent (as in "
                                "'Phase,FirstEvent,Time'), got '",
                                Snippet(line), "'"));
      }
      name_column = static_cast<size_t>(name_it - fields.begin());
      first_column = static_cast<size_t>(first_it - fields.begin());
      min_fields = std::max(name_column, first_column) + 1;
      header = true;
      header_line = line_number;
      continue;
    }
    if (fields.size() < min_fields) {
      return bad(line_number, absl::StrCat(fields.size(), " column",
                                           fields.size() == 1 ? "" : "s",
                                           ", expected ", min_fields,
                                           " or more (Phase and FirstEvent), "
                                           "got '",
                                           Snippet(line), "'"));
    }
    const absl::string_view name = fields[name_column];
    const absl::string_view index = fields[first_column];
    if (name.empty()) return bad(line_number, "the phase has no name");
    uint64_t first = 0;
    if (index.empty() ||
        !std::all_of(index.begin(), index.end(),
                     [](char c) { return absl::ascii_isdigit(c); }) ||
        !absl::SimpleAtoi(index, &first)) {
      return bad(line_number,
                 absl::StrCat("FirstEvent '", Snippet(index),
                              "' is not an event index (a whole number)"));
    }
    if (first > num_events) {
      return bad(
          line_number,
          absl::StrCat("phase ", Snippet(name), " starts at event ", first,
                       ", past the trace's ", num_events, " events"));
    }
    if (!out.phases.empty() && first < out.phases.back().first_event) {
      return bad(line_number,
                 absl::StrCat("phase ", Snippet(name), " starts at event ",
                              first, ", before the previous phase (",
                              Snippet(out.phases.back().name), " at ",
                              out.phases.back().first_event, ")"));
    }
    out.phases.push_back({std::string(name), static_cast<size_t>(first), 0});
  }
  if (!header) return bad(1, "no header (the file is empty)");
  if (out.phases.empty()) return bad(header_line, "no phase after the header");
  for (size_t i = 0; i < out.phases.size(); ++i) {
    out.phases[i].end_event =
        i + 1 < out.phases.size() ? out.phases[i + 1].first_event : num_events;
  }
  return out;
}

std::string FindPhasesFile(const std::string& trace_path,
                           const std::string& trace_name) {
  if (trace_path.empty() || trace_path == "-" || trace_name.empty()) return "";
  const size_t slash = trace_path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : trace_path.substr(0, slash + 1);
  const std::string candidate =
      absl::StrCat(dir, slash == std::string::npos ? "/" : "", "meta/",
                   trace_name, ".phases.csv");
  // Present but unreadable is read (and fails, naming the file) rather than
  // passed over in silence: the iteration figures would go missing.
  struct stat st;
  return stat(candidate.c_str(), &st) == 0 ? candidate : "";
}

absl::StatusOr<ReplayProfile> ProfileReplay(const CompiledTrace& trace,
                                            Allocator& allocator,
                                            const TracePhases* phases,
                                            size_t max_points, bool streams) {
  struct Counters {
    int64_t allocs = 0, frees = 0, pool = 0;
  };
  auto read = [&allocator]() {
    Counters c;
    if (std::optional<AllocatorStats> s = allocator.GetStats()) {
      c.allocs = s->num_extends;
      c.frees = s->num_regions_released + s->num_partial_releases;
      c.pool = s->pool_bytes.value_or(0);
    }
    return c;
  };
  const Counters start = read();
  Counters prev = start;

  const TracePhase* last =
      phases != nullptr ? phases->LastIteration() : nullptr;
  std::optional<Counters> at_begin, at_end;
  int64_t phase_peak = 0;

  const size_t points = max_points == 0 ? 1 : max_points;
  PeakSeries pool(trace.num_events, points), live(trace.num_events, points);
  int64_t live_bytes = 0;

  ReplayOptions options;
  options.streams = streams;
  options.after_op = [&](size_t, const ReplayOp& op, void* ptr) {
    if (ptr != nullptr) {
      live_bytes += op.kind == ReplayOp::Kind::kAllocate
                        ? static_cast<int64_t>(op.size)
                        : -static_cast<int64_t>(op.size);
    }
    if (last != nullptr) {
      if (!at_begin && op.event_index >= last->first_event) {
        at_begin = prev;
        phase_peak = prev.pool;
      }
      if (!at_end && op.event_index >= last->end_event) at_end = prev;
    }
    const Counters now = read();
    if (at_begin && !at_end) phase_peak = std::max(phase_peak, now.pool);
    pool.Add(op.event_index, now.pool);
    live.Add(op.event_index, live_bytes);
    prev = now;
  };
  Replayer replayer(trace, allocator, std::move(options));
  absl::StatusOr<ReplaySummary> summary = replayer.Run();
  if (!summary.ok()) return summary.status();
  const Counters end = read();
  replayer.ReleaseLive();

  ReplayProfile out;
  out.sub_allocator_allocs = end.allocs - start.allocs;
  out.sub_allocator_frees = end.frees - start.frees;
  if (max_points > 0) {
    out.pool_bytes = pool.points();
    out.live_bytes = live.points();
  }
  if (phases != nullptr) out.iterations = phases->NumIterations();
  if (last != nullptr) {
    // A phase with no op (or past the last op) starts and ends where the
    // replay was then.
    if (!at_begin) {
      at_begin = end;
      phase_peak = end.pool;
    }
    if (!at_end) at_end = end;
    PhaseProfile p;
    p.phase = last->name;
    p.events = last->end_event - last->first_event;
    p.sub_allocator_allocs = at_end->allocs - at_begin->allocs;
    p.sub_allocator_frees = at_end->frees - at_begin->frees;
    p.peak_pool_bytes = phase_peak;
    out.last_iteration = p;
  }
  return out;
}

}  // namespace bfc::tools
