// File: src/report/memory_dump_json.cc
// JSON for MemoryDump and AllocatorStats, with nlohmann-json. The library is
// an implementation detail: nothing of it appears in public headers, and its
// exceptions never leave this file.
#include "bfc/report/memory_dump_json.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bfc/allocator_options.h"
#include "bfc/internal/constants.h"
#include "bfc/internal/str_format.h"
#include "bfc/memory_dump.h"
#include "bfc/units.h"
#include "nlohmann/json.hpp"
#include "report/json_value.h"

namespace bfc {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "bfc-memory-dump";
constexpr int kVersion = 1;

json ToJson(int64_t v) { return v; }
json ToJson(double v) { return v; }
json ToJson(const std::optional<int64_t>& v) {
  return v.has_value() ? json(*v) : json(nullptr);
}

// A stat named `key` of `j` (at `path`); an optional one may be null
// (unset). Every stat is a count or a byte total, never negative, except the
// one double, fragmentation, a fraction in [0, 1].
template <typename T>
T ReadStat(const json& j, const std::string& path, const char* key) {
  if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    if (internal::Member(j, path, key).is_null()) return std::nullopt;
    return ReadStat<int64_t>(j, path, key);
  } else if constexpr (std::is_same_v<T, double>) {
    return internal::CheckedGetInRange<double>(j, path, key, 0.0, 1.0);
  } else {
    static_assert(std::is_same_v<T, int64_t>);
    return internal::CheckedGetInRange<int64_t>(
        j, path, key, 0, std::numeric_limits<int64_t>::max());
  }
}

// A duration is written as seconds under "<name>_seconds", at most this
// many: absl::Duration holds about 2^63 s, but nobody means a timeout near
// that, and %f of 1e300 would be 300 digits.
constexpr double kMaxJsonSeconds = 1e12;

// A duration is written as seconds under "<name>_seconds".
std::string JsonKey(const OptionField& f) {
  return f.kind == OptionKind::kDuration ? absl::StrCat(f.name, "_seconds")
                                         : std::string(f.name);
}

// The options object, one key per row of the option table: the value is
// converted through the option's text form, so the JSON and BFC_ALLOC_CONF
// accept exactly the same values.
json OptionsToJsonValue(const AllocatorOptions& o) {
  json out = json::object();
  for (const OptionField& f : AllocatorOptionFields()) {
    const std::string text = AllocatorOptionToString(o, f.name);
    switch (f.kind) {
      case OptionKind::kBool:
        out[JsonKey(f)] = text == "true";
        break;
      case OptionKind::kCount:
        out[JsonKey(f)] = std::stoll(text);
        break;
      case OptionKind::kFraction:
        out[JsonKey(f)] = std::stod(text);
        break;
      case OptionKind::kDuration: {
        absl::Duration d;
        (void)absl::ParseDuration(text, &d);
        // The reader takes [0, kMaxJsonSeconds]. A value set in code can lie
        // outside (negative: no wait; infinite, or past 31,000 years: wait
        // for good); written clamped, it reads back as the same behaviour
        // (JSON has no infinity: nlohmann writes it as null).
        out[JsonKey(f)] =
            std::clamp(absl::ToDoubleSeconds(d), 0.0, kMaxJsonSeconds);
        break;
      }
      case OptionKind::kBytes: {
        absl::StatusOr<uint64_t> bytes = ParseByteSize(text);
        out[JsonKey(f)] = bytes.value_or(0);
        break;
      }
      case OptionKind::kGrowthPolicy:
        out[JsonKey(f)] = text;
        break;
    }
  }
  return out;
}

AllocatorOptions OptionsFromJsonValue(const json& j, const std::string& path) {
  if (!j.is_object()) internal::FieldError(path, "is not an object");
  AllocatorOptions o;
  for (const auto& [key, value] : j.items()) {
    const OptionField* field = nullptr;
    for (const OptionField& f : AllocatorOptionFields()) {
      if (JsonKey(f) == key) field = &f;
    }
    if (field == nullptr) {
      throw std::invalid_argument(
          absl::StrCat("unknown option \"", key, "\" in \"", path, "\""));
    }
    const std::string what = absl::StrCat("\"", path, ".", key, "\"");
    std::string text;
    switch (field->kind) {
      case OptionKind::kBool:
        text = internal::CheckedGet<bool>(value, what) ? "true" : "false";
        break;
      case OptionKind::kCount:
        text = absl::StrCat(internal::CheckedGet<int64_t>(value, what));
        break;
      case OptionKind::kFraction:
        (void)internal::CheckedGet<double>(value, what);  // a finite number
        text = value.dump();  // shortest text that reads back exactly
        break;
      case OptionKind::kDuration: {
        const double seconds = internal::CheckedGet<double>(value, what);
        if (!(seconds >= 0 && seconds <= kMaxJsonSeconds)) {
          internal::FieldError(absl::StrCat(path, ".", key),
                               absl::StrCat("is out of range [0, 1e12] (got ",
                                            value.dump(), ")"));
        }
        text = bfc::internal::Format("%.9fs", seconds);
        break;
      }
      case OptionKind::kBytes:
        text = absl::StrCat(internal::CheckedGet<uint64_t>(value, what));
        break;
      case OptionKind::kGrowthPolicy:
        text = internal::CheckedGet<std::string>(value, what);
        break;
    }
    absl::Status s = SetAllocatorOption(o, field->name, text);
    if (!s.ok()) {
      throw std::invalid_argument(
          absl::StrCat(what, ": ", std::string(s.message())));
    }
  }
  return o;
}

}  // namespace

namespace internal {

// One key per row of the stats table (bfc/allocator_stats.h).
json StatsToJsonValue(const AllocatorStats& s) {
  json out = json::object();
#define BFC_INTERNAL_STAT_TO_JSON(type, name, label, doc) \
  out[#name] = ToJson(s.name);
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_STAT_TO_JSON)
#undef BFC_INTERNAL_STAT_TO_JSON
  return out;
}

// Every stat must be present (a dump always writes all of them); an unknown
// key is an error rather than silently dropped.
AllocatorStats StatsFromJsonValue(const json& j, const std::string& path) {
  if (!j.is_object()) {
    if (path.empty()) throw std::invalid_argument("not a JSON object");
    internal::FieldError(path, "is not an object");
  }
  AllocatorStats s;
#define BFC_INTERNAL_STAT_FROM_JSON(type, name, label, doc) \
  s.name = ReadStat<type>(j, path, #name);
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_STAT_FROM_JSON)
#undef BFC_INTERNAL_STAT_FROM_JSON
  for (const auto& item : j.items()) {
    bool known = false;
    for (const StatField& f : AllocatorStatsFields()) {
      if (f.name == item.key()) known = true;
    }
    if (!known) {
      throw std::invalid_argument(
          absl::StrCat("unknown stat \"",
                       internal::FieldPath(path, item.key().c_str()), "\""));
    }
  }
  return s;
}

json MemoryDumpToJsonValue(const MemoryDump& d) {
  json regions = json::array();
  for (const RegionDump& r : d.regions) {
    regions.push_back({{"base", r.base}, {"size", r.size}});
  }
  json chunks = json::array();
  for (const ChunkDump& c : d.chunks) {
    json chunk = {{"address", c.address},
                  {"size", c.size},
                  {"requested_size", c.requested_size},
                  {"in_use", c.in_use},
                  {"bin", c.bin},
                  {"allocation_id", c.allocation_id},
                  {"region", c.region},
                  {"site", c.site}};
    // Only where streams left memory pending: dumps of one-stream programs
    // stay as they were.
    if (!c.pending_streams.empty()) {
      chunk["pending_streams"] = c.pending_streams;
    }
    // Only for charged chunks: dumps without accounts stay as they were.
    if (c.account >= 0) chunk["account"] = c.account;
    chunks.push_back(std::move(chunk));
  }
  json bins = json::array();
  for (const BinDump& b : d.bins) {
    bins.push_back({{"bin", b.bin},
                    {"bin_size", b.bin_size},
                    {"total_chunks", b.total_chunks},
                    {"total_bytes", b.total_bytes},
                    {"chunks_in_use", b.chunks_in_use},
                    {"bytes_in_use", b.bytes_in_use},
                    {"requested_bytes_in_use", b.requested_bytes_in_use},
                    {"free_chunks", b.free_chunks},
                    {"free_bytes", b.free_bytes}});
  }
  json out{
      {"format", kFormat},
      {"version", kVersion},
      {"allocator", d.allocator_name},
      {"limit", d.limit},
      {"options", OptionsToJsonValue(d.options)},
      {"stats", StatsToJsonValue(d.stats)},
      {"regions", std::move(regions)},
      {"chunks", std::move(chunks)},
      {"bins", std::move(bins)},
  };
  if (!d.streams.empty()) {
    json streams = json::array();
    for (const StreamDump& s : d.streams) {
      streams.push_back({{"stream", s.stream},
                         {"forgotten", s.forgotten},
                         {"bytes_pending", s.bytes_pending},
                         {"events_pending", s.events_pending}});
    }
    out["streams"] = std::move(streams);
    out["stream_stats"] = StreamStatsToJsonValue(d.stream_stats);
  }
  if (!d.accounts.empty()) {
    json accounts = json::array();
    for (const AccountDump& a : d.accounts) {
      accounts.push_back({{"path", a.path},
                          {"parent", a.parent},
                          {"limit_bytes", a.limit_bytes},
                          {"reservation_bytes", a.reservation_bytes},
                          {"bytes_in_use", a.bytes_in_use},
                          {"own_bytes", a.own_bytes},
                          {"peak_bytes_in_use", a.peak_bytes_in_use},
                          {"allocations", a.allocations},
                          {"frees", a.frees},
                          {"failures", a.failures},
                          {"live_allocations", a.live_allocations},
                          {"closed", a.closed}});
    }
    out["accounts"] = std::move(accounts);
  }
  return out;
}

json StreamStatsToJsonValue(const StreamStats& t) {
  return json{{"streams", t.streams},
              {"events_recorded", t.events_recorded},
              {"event_queries", t.event_queries},
              {"waits_inserted", t.waits_inserted},
              {"synchronizations", t.synchronizations},
              {"stream_op_errors", t.stream_op_errors},
              {"bytes_pending", t.bytes_pending}};
}

StreamStats StreamStatsFromJsonValue(const json& t, const std::string& path) {
  if (!t.is_object()) FieldError(path, "is not an object");
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  StreamStats s;
  s.streams = CheckedGetInRange<int64_t>(t, path, "streams", 0, kMax);
  s.events_recorded =
      CheckedGetInRange<int64_t>(t, path, "events_recorded", 0, kMax);
  s.event_queries =
      CheckedGetInRange<int64_t>(t, path, "event_queries", 0, kMax);
  s.waits_inserted =
      CheckedGetInRange<int64_t>(t, path, "waits_inserted", 0, kMax);
  s.synchronizations =
      CheckedGetInRange<int64_t>(t, path, "synchronizations", 0, kMax);
  s.stream_op_errors =
      CheckedGetInRange<int64_t>(t, path, "stream_op_errors", 0, kMax);
  s.bytes_pending =
      CheckedGetInRange<int64_t>(t, path, "bytes_pending", 0, kMax);
  return s;
}

// Every field is checked for its type and range, and cheap cross-field
// rules hold (what a dump of a live allocator always satisfies): regions in
// address order, apart, within the address space; each chunk inside the
// region it names, after the previous one, no larger than its region, its
// request no larger than itself, its bin and allocation id agreeing with its
// state; bins numbered [0, kNumBins) at most once. Errors name the JSON path.
MemoryDump MemoryDumpFromJsonValue(const json& j, const std::string& path) {
  const auto at = [&](const char* key) { return FieldPath(path, key); };
  if (CheckedGet<std::string>(j, path, "format") != kFormat) {
    FieldError(at("format"), absl::StrCat("is not \"", kFormat, "\""));
  }
  if (CheckedGet<int>(j, path, "version") != kVersion) {
    throw std::invalid_argument(
        absl::StrCat("unsupported version ", j.at("version").dump(),
                     " (this library reads version ", kVersion, ")"));
  }
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  MemoryDump d;
  d.allocator_name = CheckedGet<std::string>(j, path, "allocator");
  d.limit = CheckedGet<uint64_t>(j, path, "limit");
  d.options = OptionsFromJsonValue(Member(j, path, "options"), at("options"));
  d.stats = StatsFromJsonValue(Member(j, path, "stats"), at("stats"));

  const json& regions = ArrayMember(j, path, "regions");
  for (size_t i = 0; i < regions.size(); ++i) {
    const std::string where = absl::StrCat(at("regions"), "[", i, "]");
    RegionDump r;
    r.base = CheckedGet<uint64_t>(regions[i], where, "base");
    // Not empty, and its end (base + size) is an address.
    r.size = CheckedGetInRange<uint64_t>(regions[i], where, "size", 1,
                                         kMax - r.base);
    if (!d.regions.empty()) {
      const RegionDump& prev = d.regions.back();
      if (r.base < prev.base + prev.size) {
        FieldError(
            absl::StrCat(where, ".base"),
            bfc::internal::Format("%#x is before the end of region %d (%#x): "
                                  "regions must be in address order, apart",
                                  r.base, i - 1, prev.base + prev.size));
      }
    }
    d.regions.push_back(r);
  }

  const json& chunks = ArrayMember(j, path, "chunks");
  uint64_t previous_end = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i];
    const std::string where = absl::StrCat(at("chunks"), "[", i, "]");
    ChunkDump cd;
    cd.region = CheckedGet<int>(c, where, "region");
    if (cd.region < 0 || static_cast<size_t>(cd.region) >= d.regions.size()) {
      FieldError(
          absl::StrCat(where, ".region"),
          absl::StrCat("names region ", cd.region, " of ", d.regions.size()));
    }
    const RegionDump& r = d.regions[static_cast<size_t>(cd.region)];
    cd.address = CheckedGetInRange<uint64_t>(c, where, "address", r.base,
                                             r.base + r.size - 1);
    cd.size = CheckedGetInRange<uint64_t>(c, where, "size", 1,
                                          r.base + r.size - cd.address);
    if (cd.address < previous_end) {
      FieldError(
          absl::StrCat(where, ".address"),
          bfc::internal::Format("%#x overlaps the previous chunk (which ends "
                                "at %#x): chunks must be in address order",
                                cd.address, previous_end));
    }
    previous_end = cd.address + cd.size;
    cd.requested_size =
        CheckedGetInRange<uint64_t>(c, where, "requested_size", 0, cd.size);
    cd.in_use = CheckedGet<bool>(c, where, "in_use");
    if (cd.in_use) {
      cd.bin = CheckedGetInRange<int>(c, where, "bin", -1, -1);
      cd.allocation_id = CheckedGetInRange<int64_t>(
          c, where, "allocation_id", 1, std::numeric_limits<int64_t>::max());
    } else {
      cd.bin = CheckedGetInRange<int>(c, where, "bin", 0, kNumBins - 1);
      cd.allocation_id =
          CheckedGetInRange<int64_t>(c, where, "allocation_id", -1, -1);
    }
    cd.site = CheckedGet<std::vector<std::string>>(c, where, "site");
    if (c.contains("pending_streams")) {
      if (cd.in_use) {
        FieldError(absl::StrCat(where, ".pending_streams"),
                   "only a free chunk can wait for streams");
      }
      cd.pending_streams =
          CheckedGet<std::vector<uint64_t>>(c, where, "pending_streams");
    }
    d.chunks.push_back(std::move(cd));
  }

  // Accounts (optional: written only when the allocator had some); a
  // chunk's "account" is checked against them.
  if (j.contains("accounts")) {
    const json& accounts = ArrayMember(j, path, "accounts");
    constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < accounts.size(); ++i) {
      const json& a = accounts[i];
      const std::string where = absl::StrCat(at("accounts"), "[", i, "]");
      AccountDump ad;
      ad.path = CheckedGet<std::string>(a, where, "path");
      // Parents come first.
      ad.parent = CheckedGetInRange<int>(a, where, "parent", -1,
                                         static_cast<int>(i) - 1);
      ad.limit_bytes =
          CheckedGetInRange<int64_t>(a, where, "limit_bytes", -1, kMaxBytes);
      ad.reservation_bytes = CheckedGetInRange<int64_t>(
          a, where, "reservation_bytes", 0, kMaxBytes);
      ad.bytes_in_use =
          CheckedGetInRange<int64_t>(a, where, "bytes_in_use", 0, kMaxBytes);
      ad.own_bytes =
          CheckedGetInRange<int64_t>(a, where, "own_bytes", 0, ad.bytes_in_use);
      ad.peak_bytes_in_use = CheckedGetInRange<int64_t>(
          a, where, "peak_bytes_in_use", 0, kMaxBytes);
      ad.allocations =
          CheckedGetInRange<int64_t>(a, where, "allocations", 0, kMaxBytes);
      ad.frees = CheckedGetInRange<int64_t>(a, where, "frees", 0, kMaxBytes);
      ad.failures =
          CheckedGetInRange<int64_t>(a, where, "failures", 0, kMaxBytes);
      ad.live_allocations = CheckedGetInRange<int64_t>(
          a, where, "live_allocations", 0, kMaxBytes);
      ad.closed = CheckedGet<bool>(a, where, "closed");
      d.accounts.push_back(std::move(ad));
    }
  }
  for (size_t i = 0; i < d.chunks.size(); ++i) {
    const json& c = j["chunks"][i];
    if (!c.contains("account")) continue;
    const std::string where = absl::StrCat(at("chunks"), "[", i, "]");
    if (!d.chunks[i].in_use) {
      FieldError(absl::StrCat(where, ".account"),
                 "only an in-use chunk is charged to an account");
    }
    d.chunks[i].account = CheckedGetInRange<int>(
        c, where, "account", 0, static_cast<int>(d.accounts.size()) - 1);
  }

  const json& bins = ArrayMember(j, path, "bins");
  std::vector<bool> seen(kNumBins, false);
  for (size_t i = 0; i < bins.size(); ++i) {
    const json& b = bins[i];
    const std::string where = absl::StrCat(at("bins"), "[", i, "]");
    constexpr int64_t kMaxCount = std::numeric_limits<int64_t>::max();
    BinDump bd;
    bd.bin = CheckedGetInRange<int>(b, where, "bin", 0, kNumBins - 1);
    if (seen[static_cast<size_t>(bd.bin)]) {
      FieldError(absl::StrCat(where, ".bin"),
                 absl::StrCat("repeats bin ", bd.bin));
    }
    seen[static_cast<size_t>(bd.bin)] = true;
    bd.bin_size = CheckedGet<uint64_t>(b, where, "bin_size");
    bd.total_chunks =
        CheckedGetInRange<int64_t>(b, where, "total_chunks", 0, kMaxCount);
    bd.total_bytes =
        CheckedGetInRange<int64_t>(b, where, "total_bytes", 0, kMaxCount);
    bd.chunks_in_use = CheckedGetInRange<int64_t>(b, where, "chunks_in_use", 0,
                                                  bd.total_chunks);
    bd.bytes_in_use =
        CheckedGetInRange<int64_t>(b, where, "bytes_in_use", 0, bd.total_bytes);
    bd.requested_bytes_in_use = CheckedGetInRange<int64_t>(
        b, where, "requested_bytes_in_use", 0, bd.bytes_in_use);
    bd.free_chunks = CheckedGetInRange<int64_t>(
        b, where, "free_chunks", 0, bd.total_chunks - bd.chunks_in_use);
    bd.free_bytes = CheckedGetInRange<int64_t>(
        b, where, "free_bytes", 0, bd.total_bytes - bd.bytes_in_use);
    d.bins.push_back(bd);
  }

  // Streams (optional: written only once several streams were used).
  if (j.contains("streams")) {
    const json& streams = ArrayMember(j, path, "streams");
    constexpr int64_t kMaxBytes = std::numeric_limits<int64_t>::max();
    for (size_t i = 0; i < streams.size(); ++i) {
      const std::string where = absl::StrCat(at("streams"), "[", i, "]");
      StreamDump sd;
      sd.stream = CheckedGet<uint64_t>(streams[i], where, "stream");
      sd.forgotten = CheckedGet<bool>(streams[i], where, "forgotten");
      sd.bytes_pending = CheckedGetInRange<int64_t>(
          streams[i], where, "bytes_pending", 0, kMaxBytes);
      sd.events_pending = CheckedGetInRange<int64_t>(
          streams[i], where, "events_pending", 0, kMaxBytes);
      d.streams.push_back(sd);
    }
    if (!j.contains("stream_stats")) {
      FieldError(at("stream_stats"), "missing (\"streams\" needs it)");
    }
    d.stream_stats =
        StreamStatsFromJsonValue(j["stream_stats"], at("stream_stats"));
  }
  return d;
}

}  // namespace internal

std::string MemoryDumpToJson(const MemoryDump& dump, int indent) {
  return internal::MemoryDumpToJsonValue(dump).dump(
      indent, ' ', /*ensure_ascii=*/false, json::error_handler_t::replace);
}

absl::StatusOr<MemoryDump> MemoryDumpFromJson(std::string_view text) {
  try {
    return internal::MemoryDumpFromJsonValue(json::parse(text));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a bfc memory dump: ", e.what()));
  }
}

std::string AllocatorStatsToJson(const AllocatorStats& stats, int indent) {
  return internal::StatsToJsonValue(stats).dump(indent);
}

absl::StatusOr<AllocatorStats> AllocatorStatsFromJson(std::string_view text) {
  try {
    return internal::StatsFromJsonValue(json::parse(text));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("not bfc allocator stats: ", e.what()));
  }
}

}  // namespace bfc
