// File: src/report/json_value.h
// -----------------------------------------------------------------------------
//
// nlohmann::json values for the dump types, so that documents that embed a
// dump (the replay report) build one tree instead of re-parsing text, and the
// one checked way to read a field. Private to bfc::report: nlohmann-json is
// not a dependency of the installed package.
//
// Readers throw std::invalid_argument (or nlohmann's exceptions) on malformed
// input; the public *FromJson functions catch them and return
// InvalidArgument.
#ifndef BFC_REPORT_JSON_VALUE_H_
#define BFC_REPORT_JSON_VALUE_H_

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/allocator_stats.h"
#include "bfc/memory_dump.h"
#include "nlohmann/json.hpp"

namespace bfc::internal {

nlohmann::json StatsToJsonValue(const AllocatorStats& stats);
// The readers take the JSON path of `j` for their messages ("" at the top).
AllocatorStats StatsFromJsonValue(const nlohmann::json& j,
                                  const std::string& path = "");
// StreamStats as an object of its fields; read back with each field a
// count in [0, 2^63).
nlohmann::json StreamStatsToJsonValue(const StreamStats& stats);
StreamStats StreamStatsFromJsonValue(const nlohmann::json& j,
                                     const std::string& path);
nlohmann::json MemoryDumpToJsonValue(const MemoryDump& dump);
MemoryDump MemoryDumpFromJsonValue(const nlohmann::json& j,
                                   const std::string& path = "");

// `value` for a message: a scalar as its JSON text, cut at 40 characters; an
// array or an object by its size only. Never recursive: dump() recurses, so a
// value nested 200,000 deep overflowed the stack while the message about it
// was built, and a huge one was copied whole into the message.
inline std::string DescribeJson(const nlohmann::json& value) {
  if (value.is_array()) return absl::StrCat("an array of ", value.size());
  if (value.is_object()) {
    return absl::StrCat("an object of ", value.size(),
                        value.size() == 1 ? " key" : " keys");
  }
  std::string s = value.dump(-1, ' ', /*ensure_ascii=*/true,
                             nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

// `value` as a T, checked: an integer field must hold a JSON integer within
// T's range (1.9, -1 for an unsigned field, 1e300 are errors, not silent
// casts); a double any number; a bool a bool; a string a string; a vector an
// array of such. The message names `what` (the field).
template <typename T>
T CheckedGet(const nlohmann::json& value, const std::string& what) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) {
      throw std::invalid_argument(absl::StrCat(what, " is not true/false"));
    }
    return value.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    bool in_range = false;
    if (value.is_number_unsigned()) {
      in_range = value.get<uint64_t>() <=
                 static_cast<uint64_t>(std::numeric_limits<T>::max());
    } else if (value.is_number_integer()) {
      const int64_t v = value.get<int64_t>();
      in_range = std::is_signed_v<T>
                     ? v >= static_cast<int64_t>(std::numeric_limits<T>::min())
                     : v >= 0;
      if (in_range && v > 0) {
        in_range = static_cast<uint64_t>(v) <=
                   static_cast<uint64_t>(std::numeric_limits<T>::max());
      }
    } else {
      throw std::invalid_argument(absl::StrCat(what, " is not an integer (got ",
                                               DescribeJson(value), ")"));
    }
    if (!in_range) {
      throw std::invalid_argument(
          absl::StrCat(what, " is out of range (got ", value.dump(), ")"));
    }
    return value.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!value.is_number()) {
      throw std::invalid_argument(absl::StrCat(what, " is not a number"));
    }
    const double d = value.get<double>();
    if (!std::isfinite(d) || std::abs(d) > std::numeric_limits<T>::max()) {
      throw std::invalid_argument(
          absl::StrCat(what, " is out of range (got ", value.dump(), ")"));
    }
    return static_cast<T>(d);
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!value.is_string()) {
      throw std::invalid_argument(absl::StrCat(what, " is not a string"));
    }
    return value.get<std::string>();
  } else {
    // std::vector<E>
    using E = typename T::value_type;
    if (!value.is_array()) {
      throw std::invalid_argument(absl::StrCat(what, " is not an array"));
    }
    T out;
    out.reserve(value.size());
    for (size_t i = 0; i < value.size(); ++i) {
      // "a.b"[3] is named "a.b[3]".
      const bool quoted =
          what.size() >= 2 && what.front() == '"' && what.back() == '"';
      out.push_back(CheckedGet<E>(
          value[i],
          quoted ? absl::StrCat(what.substr(0, what.size() - 1), "[", i, "]\"")
                 : absl::StrCat(what, "[", i, "]")));
    }
    return out;
  }
}

// CheckedGet of object member `key`; a missing key is an error naming it.
template <typename T>
T CheckedGet(const nlohmann::json& object, const char* key) {
  if (!object.is_object() || !object.contains(key)) {
    throw std::invalid_argument(absl::StrCat("missing \"", key, "\""));
  }
  return CheckedGet<T>(object.at(key), std::string("\"") + key + "\"");
}

// The same inside a document, where messages name the JSON path of the
// field: `path` is where `object` is ("" at the top, "chunks[3]",
// "snapshots[0].dump.stats"), and errors say "chunks[3].size".
inline std::string FieldPath(const std::string& path, const char* key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}
[[noreturn]] inline void FieldError(const std::string& field,
                                    const std::string& problem) {
  throw std::invalid_argument(absl::StrCat("\"", field, "\" ", problem));
}
// Member `key` of `object`: an error names `path` when it is not an object
// and path.key when the key is missing.
inline const nlohmann::json& Member(const nlohmann::json& object,
                                    const std::string& path, const char* key) {
  if (!object.is_object()) {
    if (path.empty()) throw std::invalid_argument("not a JSON object");
    FieldError(path, "is not an object");
  }
  const auto it = object.find(key);
  if (it == object.end()) {
    throw std::invalid_argument(
        absl::StrCat("missing \"", FieldPath(path, key), "\""));
  }
  return *it;
}
// Member `key` of `object`, which must be an array.
inline const nlohmann::json& ArrayMember(const nlohmann::json& object,
                                         const std::string& path,
                                         const char* key) {
  const nlohmann::json& value = Member(object, path, key);
  if (!value.is_array()) FieldError(FieldPath(path, key), "is not an array");
  return value;
}
template <typename T>
T CheckedGet(const nlohmann::json& object, const std::string& path,
             const char* key) {
  return CheckedGet<T>(Member(object, path, key),
                       absl::StrCat("\"", FieldPath(path, key), "\""));
}
// CheckedGet of a number that must lie in [lo, hi].
template <typename T>
T CheckedGetInRange(const nlohmann::json& object, const std::string& path,
                    const char* key, T lo, T hi) {
  const T v = CheckedGet<T>(object, path, key);
  if (!(v >= lo && v <= hi)) {
    FieldError(FieldPath(path, key),
               absl::StrCat("is out of range [", lo, ", ", hi, "] (got ",
                            object.at(key).dump(), ")"));
  }
  return v;
}

}  // namespace bfc::internal

#endif  // BFC_REPORT_JSON_VALUE_H_
