// File: bfc/units.h
// -----------------------------------------------------------------------------
//
// Byte sizes as people type and read them: the one parser and the one
// formatter that every surface of bfc uses (BFC_ALLOC_CONF, the tools' flags,
// the JSON readers, logs, dumps, reports).
//
// Input grammar (ParseByteSize), case-insensitive, spaces allowed between the
// number and the unit:
//
//   NUMBER [UNIT]
//   NUMBER  decimal digits with an optional fraction: 4096, 1.5, .5
//   UNIT    B (or none)          bytes
//           KiB MiB GiB TiB PiB  powers of 1024 (IEC)
//           KB  MB  GB  TB  PB   powers of 1000 (SI, with the SI meaning)
//
// The value is computed exactly (no floating point) and rounded down to a
// whole byte: "1.5GiB" is 1610612736, "0.3KiB" is 307; a fraction of a byte
// ("1.5", "2.5B") is refused. Bare K, M, G, T are
// rejected as ambiguous (2^30 or 10^9?): the message names both spellings.
// A sign, an exponent, hex, an unknown unit or a value above 2^64 - 1 is
// InvalidArgument naming the text and the grammar.
//
// PyTorch's `*_mb` settings are MiB counts: ParseByteSize(text, kMiB) reads a
// bare number in that unit ("512" -> 512 MiB); an explicit unit still wins.
//
// Output (HumanReadableBytes) is always binary: "256 B", "1.50 KiB",
// "16.00 GiB"; HumanReadableBytesExact adds the exact count where precision
// matters: "835.80 MiB (876401152 B)".
//
// Thread safety: stateless functions.
#ifndef BFC_UNITS_H_
#define BFC_UNITS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace bfc {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;
inline constexpr uint64_t kTiB = uint64_t{1} << 40;

// Parses `text` by the grammar above. `default_unit`: what a bare number
// counts (1 = bytes). InvalidArgument on anything else.
[[nodiscard]] absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text,
                                                     uint64_t default_unit = 1);

// Parses a plain decimal number: digits with at most one point and an
// optional exponent ("0.5", ".5", "1", "5e-1"), surrounding spaces allowed.
// The fractions of BFC_ALLOC_CONF and the options (memory_fraction,
// pool_release_threshold) read through it, so that a sign, "0x1p-1", "nan"
// and "inf", which strtod would take, are refused; the exponent stays so that
// every fraction the summary prints reads back. InvalidArgument naming the
// text otherwise.
[[nodiscard]] absl::StatusOr<double> ParseDecimalNumber(absl::string_view text);

// The grammar in one line, for error messages and --help.
inline constexpr char kByteSizeGrammar[] =
    "bytes or a number with a unit: B, KiB, MiB, GiB, TiB, PiB (powers of "
    "1024) or KB, MB, GB, TB, PB (powers of 1000), e.g. 4096, 512MiB, 1.5GiB";

// "256 B", "1.50 KiB", ..., "2.00 EiB". Binary units, two decimals.
std::string HumanReadableBytes(uint64_t bytes);
// HumanReadableBytes plus the exact count: "1.50 KiB (1536 B)"; below 1 KiB
// just "256 B".
std::string HumanReadableBytesExact(uint64_t bytes);

}  // namespace bfc

#endif  // BFC_UNITS_H_
