// File: src/core/units.cc
// The byte-size grammar of bfc/units.h. Exact: the number is read as an
// integer mantissa and a count of fraction digits, scaled in 128-bit
// arithmetic, so "0.1GB" is 100000000 and 2^64 - 1 is still accepted.
#include "bfc/units.h"

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace bfc {
namespace {

using u128 = unsigned __int128;

struct Unit {
  const char* name;  // lower case
  uint64_t bytes;
};

constexpr uint64_t kKB = 1000;
constexpr Unit kUnits[] = {
    {"b", 1},
    {"kib", kKiB},
    {"mib", kMiB},
    {"gib", kGiB},
    {"tib", kTiB},
    {"pib", kTiB* kKiB},
    {"kb", kKB},
    {"mb", kKB* kKB},
    {"gb", kKB* kKB* kKB},
    {"tb", kKB* kKB* kKB* kKB},
    {"pb", kKB* kKB* kKB* kKB* kKB},
};

absl::Status Bad(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad byte size \"%s\": %s (expected %s)", text, why, kByteSizeGrammar));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text,
                                       uint64_t default_unit) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Bad(text, "empty");
  // Mantissa digits and fraction digits; at most 38 significant digits fit
  // in 128 bits, far more than any byte count needs.
  u128 mantissa = 0;
  int fraction_digits = 0;
  int digits = 0;
  bool seen_point = false;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '.' && !seen_point) {
      seen_point = true;
      continue;
    }
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) break;
    if (mantissa == 0 && c == '0') {
      // Leading zeros add nothing.
    } else if (++digits > 30) {
      return Bad(text, "too many digits");
    }
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (seen_point) ++fraction_digits;
  }
  if (i == 0 || (seen_point && i == 1)) {
    return Bad(text, s[0] == '-' || s[0] == '+' ? "a sign is not allowed"
                                                : "no number");
  }
  const absl::string_view unit_text = absl::StripAsciiWhitespace(s.substr(i));
  const std::string unit = absl::AsciiStrToLower(unit_text);
  u128 scale = default_unit == 0 ? 1 : default_unit;
  if (!unit.empty()) {
    scale = 0;
    for (const Unit& u : kUnits) {
      if (unit == u.name) scale = u.bytes;
    }
    if (scale == 0) {
      if (unit == "k" || unit == "m" || unit == "g" || unit == "t" ||
          unit == "p") {
        return Bad(
            text,
            absl::StrCat("unit \"", unit_text, "\" is ambiguous: write ",
                         absl::AsciiStrToUpper(unit), "iB (powers of 1024) or ",
                         absl::AsciiStrToUpper(unit), "B (powers of 1000)"));
      }
      return Bad(text, absl::StrCat("unknown unit \"", unit_text, "\""));
    }
  }
  u128 divisor = 1;
  for (int f = 0; f < fraction_digits; ++f) divisor *= 10;
  // mantissa < 10^30 < 2^100 and scale <= 2^50 would overflow 128 bits;
  // check before multiplying.
  const u128 max = ~uint64_t{0};
  if (mantissa != 0 && scale > (~u128{0}) / mantissa) {
    return Bad(text, "larger than 2^64 - 1 bytes");
  }
  const u128 bytes = mantissa * scale / divisor;
  if (bytes > max) return Bad(text, "larger than 2^64 - 1 bytes");
  return static_cast<uint64_t>(bytes);
}

std::string HumanReadableBytes(uint64_t bytes) {
  if (bytes < kKiB) return absl::StrCat(bytes, " B");
  static const char* const kNames[] = {"KiB", "MiB", "GiB",
                                       "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.2f %s", v, kNames[unit]);
}

std::string HumanReadableBytesExact(uint64_t bytes) {
  if (bytes < kKiB) return HumanReadableBytes(bytes);
  return absl::StrCat(HumanReadableBytes(bytes), " (", bytes, " B)");
}

}  // namespace bfc
