// File: src/core/allocator_options.cc
// The option table of bfc/allocator_options.h, generated from
// BFC_ALLOCATOR_OPTION_FIELDS, and the value grammar per kind.
#include "bfc/allocator_options.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "bfc/internal/str_format.h"
#include "bfc/units.h"

namespace bfc {
namespace {

// The default as text, in the value grammar.
std::string ToText(bool v) { return v ? "true" : "false"; }
std::string ToText(int v) { return absl::StrCat(v); }
// The shortest text that reads back as exactly `v`.
std::string ToText(double v) {
  for (int precision = 6; precision < 17; ++precision) {
    std::string text = internal::Format("%.*g", precision, v);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == v) return text;
  }
  return internal::Format("%.17g", v);
}
std::string ToText(absl::Duration v) { return absl::FormatDuration(v); }
// Exact, in the largest binary unit that divides it (2MiB, 1536KiB, 1000).
std::string ToText(uint64_t v) {
  static constexpr struct {
    uint64_t unit;
    const char* name;
  } kUnits[] = {{kTiB, "TiB"}, {kGiB, "GiB"}, {kMiB, "MiB"}, {kKiB, "KiB"}};
  if (v != 0) {
    for (const auto& u : kUnits) {
      if (v % u.unit == 0) return absl::StrCat(v / u.unit, u.name);
    }
  }
  return absl::StrCat(v);
}
std::string ToText(GrowthPolicy v) { return std::string(GrowthPolicyName(v)); }

// Byte options stay below 2^62 so that sums and doublings of them cannot
// wrap.
constexpr uint64_t kMaxBytesOption = uint64_t{1} << 62;

constexpr OptionField kFields[] = {
#define BFC_INTERNAL_OPTION_ROW(type, name, default_value, kind, unit, doc) \
  {#name, OptionKind::kind, unit, doc},
    BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_OPTION_ROW)
#undef BFC_INTERNAL_OPTION_ROW
};

absl::Status BadValue(const OptionField& f, absl::string_view value) {
  return absl::InvalidArgumentError(
      internal::Format("bad value \"%s\" for option %s (accepted: %s)", value,
                       f.name, OptionKindGrammar(f.kind)));
}

absl::Status Parse(const OptionField& f, absl::string_view text, bool* out) {
  const std::string v = absl::AsciiStrToLower(text);
  // PyTorch's settings write True/False; 1/0 as environment variables do.
  if (v == "true" || v == "1") {
    *out = true;
  } else if (v == "false" || v == "0") {
    *out = false;
  } else {
    return BadValue(f, text);
  }
  return absl::OkStatus();
}

absl::Status Parse(const OptionField& f, absl::string_view text, int* out) {
  int v = 0;
  if (!absl::SimpleAtoi(text, &v) || v < 0) return BadValue(f, text);
  *out = v;
  return absl::OkStatus();
}

absl::Status Parse(const OptionField& f, absl::string_view text, double* out) {
  absl::StatusOr<double> v = ParseDecimalNumber(text);
  if (!v.ok() || !(*v >= 0 && *v <= 1)) return BadValue(f, text);
  *out = *v;
  return absl::OkStatus();
}

absl::Status Parse(const OptionField& f, absl::string_view text,
                   absl::Duration* out) {
  absl::Duration v;
  if (!absl::ParseDuration(text, &v) || v < absl::ZeroDuration() ||
      v == absl::InfiniteDuration()) {
    return BadValue(f, text);
  }
  *out = v;
  return absl::OkStatus();
}

absl::Status Parse(const OptionField& f, absl::string_view text,
                   uint64_t* out) {
  absl::StatusOr<uint64_t> v = ParseByteSize(text);
  if (!v.ok() || *v >= kMaxBytesOption) return BadValue(f, text);
  *out = *v;
  return absl::OkStatus();
}

absl::Status Parse(const OptionField& f, absl::string_view text,
                   GrowthPolicy* out) {
  for (GrowthPolicy p :
       {GrowthPolicy::kDoubling, GrowthPolicy::kSameAsRequested,
        GrowthPolicy::kFixedStep}) {
    if (absl::AsciiStrToLower(text) == GrowthPolicyName(p)) {
      *out = p;
      return absl::OkStatus();
    }
  }
  return BadValue(f, text);
}

std::string AcceptedNames() {
  std::string names;
  for (const OptionField& f : kFields) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", f.name);
  }
  return names;
}

}  // namespace

absl::Span<const OptionField> AllocatorOptionFields() { return kFields; }

absl::Span<const AllocatorPreset> AllocatorPresets() {
  // Measured on the shared traces over a non-coalescing sub-allocator
  // (bfc-replay --backend=sim-cudamalloc; README "Choosing a preset"):
  // exact-size regions, with a 2 MiB floor for requests of at most 1 MiB
  // (PyTorch's small-request segments), splitting any rest worth a chunk,
  // growing rather than breaking a free chunk four times the region while
  // that costs no peak, and giving wholly free regions back before taking
  // more.
  static constexpr AllocatorPreset kPresets[] = {
      {"tf",
       "growth_policy:doubling,initial_region_bytes:2MiB,"
       "max_growth_step_bytes:0,min_growth_step_bytes:0,"
       "min_growth_step_max_request_bytes:0,"
       "release_before_extend:false,huge_allocation_bytes:0,"
       "min_split_remainder_bytes:0,max_split_bytes:0,"
       "grow_below_peak_ratio:0,pool_release_threshold:0,"
       "extend_by_missing_tail:false,release_partial_regions:false",
       "TensorFlow's BFC: regions double from 2 MiB, TF's split rule (the "
       "default)"},
      {"low_footprint",
       "growth_policy:same_as_requested,initial_region_bytes:2MiB,"
       "max_growth_step_bytes:0,min_growth_step_bytes:2MiB,"
       "min_growth_step_max_request_bytes:1MiB,"
       "release_before_extend:true,huge_allocation_bytes:0,"
       "min_split_remainder_bytes:256,max_split_bytes:0,"
       "grow_below_peak_ratio:4,pool_release_threshold:0,"
       "extend_by_missing_tail:false,release_partial_regions:true",
       "Regions of what is missing (2 MiB for requests up to 1 MiB), any "
       "rest split off, a new region rather than a free chunk four times "
       "its size while the pool stays within its peak, "
       "fully free regions (and, over backend vmm, the free pages inside "
       "regions) given back before the pool would pass its peak"},
  };
  return kPresets;
}

absl::Status ApplyAllocatorPreset(AllocatorOptions& options,
                                  absl::string_view name) {
  for (const AllocatorPreset& p : AllocatorPresets()) {
    if (p.name != name) continue;
    AllocatorOptions out = options;
    for (absl::string_view entry : absl::StrSplit(p.conf, ',')) {
      const size_t colon = entry.find(':');
      absl::Status s = SetAllocatorOption(out, entry.substr(0, colon),
                                          entry.substr(colon + 1));
      if (!s.ok()) return s;  // a broken table; tested
    }
    options = out;
    return absl::OkStatus();
  }
  std::string names;
  for (const AllocatorPreset& p : AllocatorPresets()) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", p.name);
  }
  return absl::InvalidArgumentError(
      internal::Format("unknown preset \"%s\" (accepted: %s)", name, names));
}

absl::string_view GrowthPolicyName(GrowthPolicy policy) {
  switch (policy) {
    case GrowthPolicy::kDoubling:
      return "doubling";
    case GrowthPolicy::kSameAsRequested:
      return "same_as_requested";
    case GrowthPolicy::kFixedStep:
      return "fixed_step";
  }
  return "unknown";
}

const OptionField* FindAllocatorOptionField(absl::string_view name) {
  for (const OptionField& f : kFields) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::string_view OptionKindGrammar(OptionKind kind) {
  switch (kind) {
    case OptionKind::kBool:
      return "true, false, 1, 0 (any case)";
    case OptionKind::kCount:
      return "an integer >= 0";
    case OptionKind::kFraction:
      return "a number in [0, 1]";
    case OptionKind::kDuration:
      return "a finite duration >= 0 such as 10s, 500ms, 1m";
    case OptionKind::kBytes:
      return "a byte size below 2^62 such as 0, 4096, 2MiB, 1.5GiB";
    case OptionKind::kGrowthPolicy:
      return "doubling, same_as_requested, fixed_step";
  }
  return "";
}

absl::Status SetAllocatorOption(AllocatorOptions& options,
                                absl::string_view name,
                                absl::string_view value) {
  value = absl::StripAsciiWhitespace(value);
#define BFC_INTERNAL_SET_OPTION(type, field, default_value, kind, unit, doc) \
  if (name == #field) {                                                      \
    type parsed{};                                                           \
    absl::Status s = Parse(*FindAllocatorOptionField(name), value, &parsed); \
    if (s.ok()) options.field = parsed;                                      \
    return s;                                                                \
  }
  BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_SET_OPTION)
#undef BFC_INTERNAL_SET_OPTION
  return absl::InvalidArgumentError(internal::Format(
      "unknown option \"%s\" (accepted: %s)", name, AcceptedNames()));
}

absl::Status ValidateAllocatorOptions(const AllocatorOptions& options) {
  // The range of each field is its grammar's: the value's exact text must
  // parse back (NaN, negatives, fractions above 1, infinite durations fail).
#define BFC_INTERNAL_CHECK_OPTION(type, field, default_value, kind, unit, doc) \
  {                                                                            \
    type parsed{};                                                             \
    const std::string text = ToText(options.field);                            \
    if (!Parse(*FindAllocatorOptionField(#field), text, &parsed).ok()) {       \
      return absl::InvalidArgumentError(internal::Format(                      \
          "option %s = %s is out of range (accepted: %s)", #field, text,       \
          OptionKindGrammar(OptionKind::kind)));                               \
    }                                                                          \
  }
  BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_CHECK_OPTION)
#undef BFC_INTERNAL_CHECK_OPTION
  return absl::OkStatus();
}

std::string AllocatorOptionToString(const AllocatorOptions& options,
                                    absl::string_view name) {
#define BFC_INTERNAL_GET_OPTION(type, field, default_value, kind, unit, doc) \
  if (name == #field) return ToText(options.field);
  BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_GET_OPTION)
#undef BFC_INTERNAL_GET_OPTION
  return "";
}

std::string AllocatorOptionsMarkdownTable() {
  const AllocatorOptions defaults;
  std::string out =
      "| option | accepts | default | what it does |\n"
      "|---|---|---|---|\n";
  for (const OptionField& f : kFields) {
    absl::StrAppend(&out, "| `", f.name, "` | ", OptionKindGrammar(f.kind),
                    f.unit.empty() ? "" : absl::StrCat(" (", f.unit, ")"),
                    " | `", AllocatorOptionToString(defaults, f.name), "` | ",
                    f.doc, " |\n");
  }
  return out;
}

bool operator==(const AllocatorOptions& a, const AllocatorOptions& b) {
#define BFC_INTERNAL_EQ_OPTION(type, field, default_value, kind, unit, doc) \
  if (!(a.field == b.field)) return false;
  BFC_ALLOCATOR_OPTION_FIELDS(BFC_INTERNAL_EQ_OPTION)
#undef BFC_INTERNAL_EQ_OPTION
  return true;
}

}  // namespace bfc
