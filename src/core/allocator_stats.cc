// File: src/core/allocator_stats.cc
// The stats table of bfc/allocator_stats.h, generated from
// BFC_ALLOCATOR_STATS_FIELDS, and DebugString.
#include "bfc/allocator_stats.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"

namespace bfc {
namespace {

template <typename T>
constexpr StatKind KindOf() {
  if constexpr (std::is_same_v<T, double>) {
    return StatKind::kDouble;
  } else if constexpr (std::is_same_v<T, std::optional<int64_t>>) {
    return StatKind::kOptionalInt;
  } else {
    static_assert(std::is_same_v<T, int64_t>,
                  "a stat is int64_t, "
                  "std::optional<int64_t> or double");
    return StatKind::kInt;
  }
}

constexpr StatField kFields[] = {
#define BFC_INTERNAL_STAT_ROW(type, name, label, doc) \
  {#name, KindOf<type>(), label, doc},
    BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_STAT_ROW)
#undef BFC_INTERNAL_STAT_ROW
};

std::string ValueText(int64_t v) { return absl::StrCat(v); }
std::string ValueText(const std::optional<int64_t>& v) {
  return v.has_value() ? absl::StrCat(*v) : "n/a";
}
std::string ValueText(double v) { return internal::Format("%.4f", v); }

}  // namespace

absl::Span<const StatField> AllocatorStatsFields() { return kFields; }

std::string AllocatorStats::DebugString() const {
  std::string out;
  auto line = [&](absl::string_view label, const std::string& value) {
    internal::AppendFormat(&out, "%-18s%20s\n", absl::StrCat(label, ":"),
                           value);
  };
  // TF's eight lines first, in TF's order (tools read them by position as
  // well as by label); then bfc's own, in table order.
  line("Limit", ValueText(bytes_limit));
  line("InUse", ValueText(bytes_in_use));
  line("MaxInUse", ValueText(peak_bytes_in_use));
  line("NumAllocs", ValueText(num_allocs));
  line("MaxAllocSize", ValueText(largest_alloc_size));
  line("Reserved", ValueText(bytes_reserved));
  line("PeakReserved", ValueText(peak_bytes_reserved));
  line("LargestFreeBlock", ValueText(largest_free_block_bytes));
  static constexpr absl::string_view kTfFields[] = {
      "bytes_limit",         "bytes_in_use",
      "peak_bytes_in_use",   "num_allocs",
      "largest_alloc_size",  "bytes_reserved",
      "peak_bytes_reserved", "largest_free_block_bytes"};
  auto is_tf = [](absl::string_view name) {
    return std::find(std::begin(kTfFields), std::end(kTfFields), name) !=
           std::end(kTfFields);
  };
#define BFC_INTERNAL_STAT_LINE(type, name, label, doc) \
  if (!is_tf(#name)) line(label, ValueText(name));
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_STAT_LINE)
#undef BFC_INTERNAL_STAT_LINE
  return out;
}

bool operator==(const AllocatorStats& a, const AllocatorStats& b) {
#define BFC_INTERNAL_EQ_STAT(type, name, label, doc) \
  if (!(a.name == b.name)) return false;
  BFC_ALLOCATOR_STATS_FIELDS(BFC_INTERNAL_EQ_STAT)
#undef BFC_INTERNAL_EQ_STAT
  return true;
}

}  // namespace bfc
