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
AllocatorStats StatsFromJsonValue(const nlohmann::json& j);
nlohmann::json MemoryDumpToJsonValue(const MemoryDump& dump);
MemoryDump MemoryDumpFromJsonValue(const nlohmann::json& j);

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
      throw std::invalid_argument(
          absl::StrCat(what, " is not an integer (got ", value.dump(), ")"));
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
    return value.get<T>();
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
      out.push_back(CheckedGet<E>(value[i], absl::StrCat(what, "[", i, "]")));
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

}  // namespace bfc::internal

#endif  // BFC_REPORT_JSON_VALUE_H_
