// File: src/report/memory_dump_json.cc
// JSON for MemoryDump and AllocatorStats, with nlohmann-json. The library is
// an implementation detail: nothing of it appears in public headers, and its
// exceptions never leave this file.
#include "bfc/report/memory_dump_json.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
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

json Optional(const std::optional<int64_t>& v) {
  return v.has_value() ? json(*v) : json(nullptr);
}

std::optional<int64_t> GetOptional(const json& j, const char* key) {
  const json& v = j.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<int64_t>();
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
        text = value.get<bool>() ? "true" : "false";
        break;
      case OptionKind::kCount:
      case OptionKind::kFraction:
        text = value.dump();
        break;
      case OptionKind::kDuration:
        text = absl::StrCat(value.get<double>(), "s");
        break;
    }
    absl::Status s = SetAllocatorOption(o, field->name, text);
    if (!s.ok()) throw std::invalid_argument(std::string(s.message()));
  }
  return o;
}

}  // namespace

namespace internal {

json StatsToJsonValue(const AllocatorStats& s) {
  return json{
      {"num_allocs", s.num_allocs},
      {"bytes_in_use", s.bytes_in_use},
      {"peak_bytes_in_use", s.peak_bytes_in_use},
      {"largest_alloc_size", s.largest_alloc_size},
      {"bytes_limit", Optional(s.bytes_limit)},
      {"bytes_reserved", s.bytes_reserved},
      {"peak_bytes_reserved", s.peak_bytes_reserved},
      {"bytes_reservable_limit", Optional(s.bytes_reservable_limit)},
      {"largest_free_block_bytes", s.largest_free_block_bytes},
      {"pool_bytes", Optional(s.pool_bytes)},
      {"peak_pool_bytes", Optional(s.peak_pool_bytes)},
      {"num_invalid_frees", s.num_invalid_frees},
      {"num_invalid_requests", s.num_invalid_requests},
      {"num_ooms", s.num_ooms},
      {"num_extends", s.num_extends},
      {"num_regions_released", s.num_regions_released},
      {"num_sub_allocator_rejects", s.num_sub_allocator_rejects},
      {"num_retries", s.num_retries},
      {"bytes_requested_in_use", s.bytes_requested_in_use},
      {"fragmentation", s.fragmentation},
  };
}

AllocatorStats StatsFromJsonValue(const json& j) {
  AllocatorStats s;
  s.num_allocs = j.at("num_allocs").get<int64_t>();
  s.bytes_in_use = j.at("bytes_in_use").get<int64_t>();
  s.peak_bytes_in_use = j.at("peak_bytes_in_use").get<int64_t>();
  s.largest_alloc_size = j.at("largest_alloc_size").get<int64_t>();
  s.bytes_limit = GetOptional(j, "bytes_limit");
  s.bytes_reserved = j.at("bytes_reserved").get<int64_t>();
  s.peak_bytes_reserved = j.at("peak_bytes_reserved").get<int64_t>();
  s.bytes_reservable_limit = GetOptional(j, "bytes_reservable_limit");
  s.largest_free_block_bytes = j.at("largest_free_block_bytes").get<int64_t>();
  s.pool_bytes = GetOptional(j, "pool_bytes");
  s.peak_pool_bytes = GetOptional(j, "peak_pool_bytes");
  s.num_invalid_frees = j.at("num_invalid_frees").get<int64_t>();
  s.num_invalid_requests = j.at("num_invalid_requests").get<int64_t>();
  s.num_ooms = j.at("num_ooms").get<int64_t>();
  s.num_extends = j.at("num_extends").get<int64_t>();
  s.num_regions_released = j.at("num_regions_released").get<int64_t>();
  s.num_sub_allocator_rejects =
      j.at("num_sub_allocator_rejects").get<int64_t>();
  s.num_retries = j.at("num_retries").get<int64_t>();
  s.bytes_requested_in_use = j.at("bytes_requested_in_use").get<int64_t>();
  s.fragmentation = j.at("fragmentation").get<double>();
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
  if (j.at("format").get<std::string>() != kFormat) {
    throw std::invalid_argument(
        absl::StrCat("\"format\" is not \"", kFormat, "\""));
  }
  if (j.at("version").get<int>() != kVersion) {
    throw std::invalid_argument(
        absl::StrCat("unsupported version ", j.at("version").dump(),
                     " (this library reads version ", kVersion, ")"));
  }
  MemoryDump d;
  d.allocator_name = j.at("allocator").get<std::string>();
  d.limit = j.at("limit").get<uint64_t>();
  d.options = OptionsFromJsonValue(j.at("options"));
  d.stats = StatsFromJsonValue(j.at("stats"));
  for (const json& r : j.at("regions")) {
    d.regions.push_back(
        {r.at("base").get<uint64_t>(), r.at("size").get<uint64_t>()});
  }
  for (const json& c : j.at("chunks")) {
    ChunkDump cd;
    cd.address = c.at("address").get<uint64_t>();
    cd.size = c.at("size").get<uint64_t>();
    cd.requested_size = c.at("requested_size").get<uint64_t>();
    cd.in_use = c.at("in_use").get<bool>();
    cd.bin = c.at("bin").get<int>();
    cd.allocation_id = c.at("allocation_id").get<int64_t>();
    cd.region = c.at("region").get<int>();
    cd.site = c.at("site").get<std::vector<std::string>>();
    if (cd.region < 0 || static_cast<size_t>(cd.region) >= d.regions.size()) {
      throw std::invalid_argument(absl::StrCat("chunk at ", cd.address,
                                               " names region ", cd.region,
                                               " of ", d.regions.size()));
    }
    d.chunks.push_back(std::move(cd));
  }
  for (const json& b : j.at("bins")) {
    BinDump bd;
    bd.bin = b.at("bin").get<int>();
    bd.bin_size = b.at("bin_size").get<uint64_t>();
    bd.total_chunks = b.at("total_chunks").get<int64_t>();
    bd.total_bytes = b.at("total_bytes").get<int64_t>();
    bd.chunks_in_use = b.at("chunks_in_use").get<int64_t>();
    bd.bytes_in_use = b.at("bytes_in_use").get<int64_t>();
    bd.requested_bytes_in_use = b.at("requested_bytes_in_use").get<int64_t>();
    bd.free_chunks = b.at("free_chunks").get<int64_t>();
    bd.free_bytes = b.at("free_bytes").get<int64_t>();
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
