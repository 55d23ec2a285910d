// File: src/report/memory_dump_json.cc
// JSON for MemoryDump and AllocatorStats, with nlohmann-json. The library is
// an implementation detail: nothing of it appears in public headers, and its
// exceptions never leave this file.
#include "bfc/report/memory_dump_json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "bfc/allocator_options.h"
#include "bfc/memory_dump.h"
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

// A stat named `key` of `j`; an optional one may be null (unset).
template <typename T>
T ReadStat(const json& j, const char* key) {
  if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    if (j.contains(key) && j.at(key).is_null()) return std::nullopt;
    return internal::CheckedGet<int64_t>(j, key);
  } else {
    return internal::CheckedGet<T>(j, key);
  }
}

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
        out[JsonKey(f)] = absl::ToDoubleSeconds(d);
        break;
      }
    }
  }
  return out;
}

AllocatorOptions OptionsFromJsonValue(const json& j) {
  if (!j.is_object())
    throw std::invalid_argument("\"options\" is not an object");
  AllocatorOptions o;
  for (const auto& [key, value] : j.items()) {
    const OptionField* field = nullptr;
    for (const OptionField& f : AllocatorOptionFields()) {
      if (JsonKey(f) == key) field = &f;
    }
    if (field == nullptr) {
      throw std::invalid_argument(absl::StrCat("unknown option \"", key, "\""));
    }
    std::string text;
    switch (field->kind) {
      case OptionKind::kBool:
        text = internal::CheckedGet<bool>(value, key) ? "true" : "false";
        break;
      case OptionKind::kCount:
      case OptionKind::kFraction:
        text = value.dump();
        break;
      case OptionKind::kDuration:
        text =
            absl::StrFormat("%.9fs", internal::CheckedGet<double>(value, key));
        break;
    }
    absl::Status s = SetAllocatorOption(o, field->name, text);
    if (!s.ok()) throw std::invalid_argument(std::string(s.message()));
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
AllocatorStats StatsFromJsonValue(const json& j) {
  if (!j.is_object()) throw std::invalid_argument("\"stats\" is not an object");
  AllocatorStats s;
#define BFC_INTERNAL_STAT_FROM_JSON(type, name, label, doc) \
  s.name = ReadStat<type>(j, #name);
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_STAT_FROM_JSON)
#undef BFC_INTERNAL_STAT_FROM_JSON
  for (const auto& item : j.items()) {
    bool known = false;
    for (const StatField& f : AllocatorStatsFields()) {
      if (f.name == item.key()) known = true;
    }
    if (!known) {
      throw std::invalid_argument(
          absl::StrCat("unknown stat \"", item.key(), "\""));
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
    chunks.push_back({{"address", c.address},
                      {"size", c.size},
                      {"requested_size", c.requested_size},
                      {"in_use", c.in_use},
                      {"bin", c.bin},
                      {"allocation_id", c.allocation_id},
                      {"region", c.region},
                      {"site", c.site}});
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
  return json{
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
}

MemoryDump MemoryDumpFromJsonValue(const json& j) {
  if (internal::CheckedGet<std::string>(j, "format") != kFormat) {
    throw std::invalid_argument(
        absl::StrCat("\"format\" is not \"", kFormat, "\""));
  }
  if (internal::CheckedGet<int>(j, "version") != kVersion) {
    throw std::invalid_argument(
        absl::StrCat("unsupported version ", j.at("version").dump(),
                     " (this library reads version ", kVersion, ")"));
  }
  MemoryDump d;
  d.allocator_name = internal::CheckedGet<std::string>(j, "allocator");
  d.limit = internal::CheckedGet<uint64_t>(j, "limit");
  d.options = OptionsFromJsonValue(j.at("options"));
  d.stats = StatsFromJsonValue(j.at("stats"));
  for (const json& r : j.at("regions")) {
    d.regions.push_back({internal::CheckedGet<uint64_t>(r, "base"),
                         internal::CheckedGet<uint64_t>(r, "size")});
  }
  for (const json& c : j.at("chunks")) {
    ChunkDump cd;
    cd.address = internal::CheckedGet<uint64_t>(c, "address");
    cd.size = internal::CheckedGet<uint64_t>(c, "size");
    cd.requested_size = internal::CheckedGet<uint64_t>(c, "requested_size");
    cd.in_use = internal::CheckedGet<bool>(c, "in_use");
    cd.bin = internal::CheckedGet<int>(c, "bin");
    cd.allocation_id = internal::CheckedGet<int64_t>(c, "allocation_id");
    cd.region = internal::CheckedGet<int>(c, "region");
    cd.site = internal::CheckedGet<std::vector<std::string>>(c, "site");
    if (cd.region < 0 || static_cast<size_t>(cd.region) >= d.regions.size()) {
      throw std::invalid_argument(absl::StrCat("chunk at ", cd.address,
                                               " names region ", cd.region,
                                               " of ", d.regions.size()));
    }
    d.chunks.push_back(std::move(cd));
  }
  for (const json& b : j.at("bins")) {
    BinDump bd;
    bd.bin = internal::CheckedGet<int>(b, "bin");
    bd.bin_size = internal::CheckedGet<uint64_t>(b, "bin_size");
    bd.total_chunks = internal::CheckedGet<int64_t>(b, "total_chunks");
    bd.total_bytes = internal::CheckedGet<int64_t>(b, "total_bytes");
    bd.chunks_in_use = internal::CheckedGet<int64_t>(b, "chunks_in_use");
    bd.bytes_in_use = internal::CheckedGet<int64_t>(b, "bytes_in_use");
    bd.requested_bytes_in_use =
        internal::CheckedGet<int64_t>(b, "requested_bytes_in_use");
    bd.free_chunks = internal::CheckedGet<int64_t>(b, "free_chunks");
    bd.free_bytes = internal::CheckedGet<int64_t>(b, "free_bytes");
    d.bins.push_back(bd);
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
