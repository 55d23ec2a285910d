// File: src/core/units.cc
// The byte-size grammar of bfc/units.h. Exact: the number is read as an
// integer mantissa and a count of fraction digits, scaled in integer
// arithmetic, so "0.1GB" is 100000000 and 2^64 - 1 is still accepted.
#include "bfc/units.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "bfc/internal/str_format.h"

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
  return absl::InvalidArgumentError(internal::Format(
      "bad byte size \"%s\": %s (expected %s)", text, why, kByteSizeGrammar));
}

}  // namespace

absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text,
                                       uint64_t default_unit) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return Bad(text, "empty");
  // The number: digits with at most one point. Zeros that end a fraction
  // change nothing and are not read ("1.000...0KiB" is 1024 however many).
  size_t i = 0;
  size_t point = absl::string_view::npos;
  for (; i < s.size(); ++i) {
    if (s[i] == '.' && point == absl::string_view::npos) {
      point = i;
    } else if (!absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) {
      break;
    }
  }
  if (i == 0 || (point == 0 && i == 1)) {
    return Bad(text, s[0] == '-' || s[0] == '+' ? "a sign is not allowed"
                                                : "no number");
  }
  size_t end = i;
  if (point != absl::string_view::npos) {
    while (end > point + 1 && s[end - 1] == '0') --end;
  }
  // An integer mantissa and a count of fraction digits. At most 30
  // significant digits (< 2^100): far more than any byte count needs.
  u128 mantissa = 0;
  size_t fraction_digits = 0;
  int digits = 0;
  for (size_t k = 0; k < end; ++k) {
    if (k == point) continue;
    const char c = s[k];
    if (mantissa == 0 && c == '0') {
      // Leading zeros add nothing.
    } else if (++digits > 30) {
      return Bad(text, "too many digits");
    }
    mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
    if (point != absl::string_view::npos && k > point) ++fraction_digits;
  }
  const absl::string_view unit_text = absl::StripAsciiWhitespace(s.substr(i));
  const std::string unit = absl::AsciiStrToLower(unit_text);
  uint64_t scale = default_unit == 0 ? 1 : default_unit;
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
  // A fraction of a larger unit rounds down to whole bytes; a fraction of a
  // byte is a typo, not a size (a review: memory_limit:1.5 was one byte).
  if (scale == 1 && fraction_digits > 0) {
    return Bad(text, "a fraction of a byte (bytes are whole)");
  }
  // bytes = floor(mantissa * scale / 10^fraction_digits), exactly. The
  // product (< 2^164) is kept in three 64-bit limbs and divided by ten once
  // per fraction digit (a floor of floors is the floor). A divisor built as
  // 10^k would not fit 128 bits from k = 39 on, and would wrap to 0 at
  // k = 128: leading zeros after the point are not limited.
  uint64_t limbs[3];
  {
    const u128 lo = static_cast<u128>(static_cast<uint64_t>(mantissa)) * scale;
    const u128 hi = static_cast<u128>(static_cast<uint64_t>(mantissa >> 64)) *
                    scale;  // < 2^36 * 2^64
    const u128 mid = (lo >> 64) + static_cast<uint64_t>(hi);
    limbs[0] = static_cast<uint64_t>(lo);
    limbs[1] = static_cast<uint64_t>(mid);
    limbs[2] =
        static_cast<uint64_t>(hi >> 64) + static_cast<uint64_t>(mid >> 64);
  }
  for (size_t f = 0; f < fraction_digits; ++f) {
    if ((limbs[0] | limbs[1] | limbs[2]) == 0) break;
    u128 rem = 0;
    for (int l = 2; l >= 0; --l) {
      const u128 cur = rem << 64 | limbs[l];
      limbs[l] = static_cast<uint64_t>(cur / 10);
      rem = cur % 10;
    }
  }
  if ((limbs[1] | limbs[2]) != 0)
    return Bad(text, "larger than 2^64 - 1 bytes");
  return limbs[0];
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
  return internal::Format("%.2f %s", v, kNames[unit]);
}

std::string HumanReadableBytesExact(uint64_t bytes) {
  if (bytes < kKiB) return HumanReadableBytes(bytes);
  return absl::StrCat(HumanReadableBytes(bytes), " (", bytes, " B)");
}

absl::StatusOr<double> ParseDecimalNumber(absl::string_view text) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  // MANTISSA [e[+-]DIGITS]; the mantissa needs a digit, the exponent too.
  auto digits_at = [&s](size_t i) {
    size_t j = i;
    while (j < s.size() &&
           absl::ascii_isdigit(static_cast<unsigned char>(s[j])))
      ++j;
    return j - i;
  };
  size_t i = digits_at(0);
  size_t mantissa_digits = i;
  if (i < s.size() && s[i] == '.') {
    const size_t n = digits_at(i + 1);
    mantissa_digits += n;
    i += 1 + n;
  }
  bool well_formed = mantissa_digits > 0;
  if (well_formed && i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t n = digits_at(i);
    well_formed = n > 0;
    i += n;
  }
  double value = 0;
  // What is left for SimpleAtod is a plain decimal, which it rounds
  // correctly; one past DBL_MAX still comes back infinite.
  if (!well_formed || i != s.size() || !absl::SimpleAtod(s, &value) ||
      !std::isfinite(value)) {
    return absl::InvalidArgumentError(internal::Format(
        "bad number \"%s\": expected decimal digits with at most one point "
        "and an optional exponent, e.g. 0.5 or 5e-1 (no sign, hex, nan or "
        "inf)",
        text));
  }
  return value;
}

}  // namespace bfc
