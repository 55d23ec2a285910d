// The one byte-size grammar (bfc/units.h): every unit, exactness, rounding,
// overflow and the messages for what it refuses.
#include "bfc/units.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;

uint64_t Parsed(absl::string_view text, uint64_t default_unit = 1) {
  absl::StatusOr<uint64_t> v = ParseByteSize(text, default_unit);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.value_or(0);
}

TEST(ParseByteSizeTest, BareNumbersAreBytes) {
  EXPECT_EQ(Parsed("0"), 0u);
  EXPECT_EQ(Parsed("4096"), 4096u);
  EXPECT_EQ(Parsed("  4096  "), 4096u);
  EXPECT_EQ(Parsed("007"), 7u);
  EXPECT_EQ(Parsed("4096B"), 4096u);
  EXPECT_EQ(Parsed("4096 b"), 4096u);
}

TEST(ParseByteSizeTest, IecUnitsArePowersOf1024) {
  EXPECT_EQ(Parsed("1KiB"), 1024u);
  EXPECT_EQ(Parsed("1 MiB"), uint64_t{1} << 20);
  EXPECT_EQ(Parsed("16GiB"), uint64_t{16} << 30);
  EXPECT_EQ(Parsed("2TiB"), uint64_t{2} << 40);
  EXPECT_EQ(Parsed("1PiB"), uint64_t{1} << 50);
  EXPECT_EQ(Parsed("512mib"), uint64_t{512} << 20);  // any case
}

TEST(ParseByteSizeTest, SiUnitsKeepTheirSiMeaning) {
  EXPECT_EQ(Parsed("1KB"), 1000u);
  EXPECT_EQ(Parsed("1kb"), 1000u);
  EXPECT_EQ(Parsed("1MB"), 1000000u);
  EXPECT_EQ(Parsed("8GB"), 8000000000u);
  EXPECT_EQ(Parsed("1TB"), 1000000000000u);
  EXPECT_EQ(Parsed("1PB"), 1000000000000000u);
}

TEST(ParseByteSizeTest, FractionsAreExactAndRoundDown) {
  EXPECT_EQ(Parsed("1.5GiB"), uint64_t{3} << 29);
  EXPECT_EQ(Parsed("0.1GB"), 100000000u);  // exact: no binary float error
  EXPECT_EQ(Parsed(".5KiB"), 512u);
  EXPECT_EQ(Parsed("0.3KiB"), 307u);  // 307.2 rounds down
  EXPECT_EQ(Parsed("2.0"), 2u);       // trailing zeros are no fraction
}

// From a review: memory_limit:1.5 was taken as one byte. A fraction of a
// byte is refused, with or without the B; in a larger unit it still rounds.
TEST(ParseByteSizeTest, AFractionOfAByteIsRefused) {
  for (const char* text : {"2.75", "1.5", "0.5B", "1.50 b"}) {
    absl::StatusOr<uint64_t> v = ParseByteSize(text);
    ASSERT_FALSE(v.ok()) << text << " -> " << *v;
    EXPECT_THAT(std::string(v.status().message()),
                HasSubstr("a fraction of a byte"));
  }
  EXPECT_EQ(Parsed("1.5", kMiB), uint64_t{3} << 19);  // PyTorch's *_mb
}

TEST(ParseByteSizeTest, LongFractionsStayExact) {
  // Leading zeros after the point are unlimited. A divisor of 10^k wraps in
  // 128 bits from k = 39 and is 0 from k = 128: the fuzzer's "." and 128
  // zeros divided by zero, and 62 zeros before a 24-digit number gave 45
  // bytes instead of 0.
  EXPECT_EQ(Parsed("." + std::string(128, '0')), 0u);
  EXPECT_EQ(Parsed("0." + std::string(4096, '0') + "1PiB"), 0u);
  EXPECT_EQ(Parsed("0." + std::string(62, '0') + "340282366920938463463374PB"),
            0u);
  // 39-40 fraction digits and still bytes left: 1.2345...e29 x 2^50 / 10^40
  // (worked out by hand in arbitrary precision).
  EXPECT_EQ(
      Parsed("0." + std::string(10, '0') + "123456789012345678901234567890PiB"),
      13899u);
  EXPECT_EQ(Parsed("1." + std::string(200, '0') + "KiB"), 1024u);
}

TEST(ParseByteSizeTest, DefaultUnitCountsBareNumbers) {
  // PyTorch's *_mb settings: a bare number is MiB, an explicit unit wins.
  EXPECT_EQ(Parsed("512", kMiB), uint64_t{512} << 20);
  EXPECT_EQ(Parsed("1.5", kMiB), uint64_t{3} << 19);
  EXPECT_EQ(Parsed("1GiB", kMiB), uint64_t{1} << 30);
}

TEST(ParseByteSizeTest, LimitsAreCheckedNotWrapped) {
  EXPECT_EQ(Parsed("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(Parsed("16383.999PiB"), 18446742947809644773u);
  for (const char* text : {"18446744073709551616", "16EiB", "16384PiB",
                           "99999999999999999999999999999GiB",
                           "1000000000000000000000000000000000"}) {
    absl::StatusOr<uint64_t> v = ParseByteSize(text);
    EXPECT_FALSE(v.ok()) << text << " gave " << v.value_or(0);
    if (!v.ok()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  EXPECT_THAT(ParseByteSize("16384PiB").status().message(),
              HasSubstr("larger than 2^64 - 1 bytes"));
}

TEST(ParseByteSizeTest, RefusesWhatIsNotASize) {
  struct Case {
    const char* text;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "empty"},
           Case{"   ", "empty"},
           Case{"-1", "a sign is not allowed"},
           Case{"+5", "a sign is not allowed"},
           Case{"GiB", "no number"},
           Case{".", "no number"},
           Case{"1e9", "unknown unit \"e9\""},
           Case{"0x100", "unknown unit \"x100\""},
           Case{"1.2.3", "unknown unit \".3\""},
           Case{"12 apples", "unknown unit \"apples\""},
           Case{"1G",
                "unit \"G\" is ambiguous: write GiB (powers of 1024) or "
                "GB (powers of 1000)"},
           Case{"4k", "unit \"k\" is ambiguous"},
           Case{"nan", "no number"},
       }) {
    absl::StatusOr<uint64_t> v = ParseByteSize(c.text);
    ASSERT_FALSE(v.ok()) << "'" << c.text << "'";
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(), HasSubstr(c.why)) << c.text;
    EXPECT_THAT(v.status().message(),
                HasSubstr(std::string("bad byte size \"") + c.text + "\""));
    EXPECT_THAT(v.status().message(), HasSubstr(kByteSizeGrammar));
  }
}

TEST(ParseDecimalNumberTest, ReadsPlainDecimals) {
  for (const auto& [text, value] :
       std::initializer_list<std::pair<const char*, double>>{
           {"0.5", 0.5},
           {".5", 0.5},
           {"5.", 5.0},
           {" 1 ", 1.0},
           {"0", 0.0},
           {"5e-1", 0.5},
           {"1E+0", 1.0},
           {"0.1", 0.1},
           {"1e-05", 1e-05}}) {
    absl::StatusOr<double> v = ParseDecimalNumber(text);
    ASSERT_TRUE(v.ok()) << text << ": " << v.status();
    EXPECT_EQ(*v, value) << text;
  }
}

TEST(ParseDecimalNumberTest, RefusesStrtodsOtherSpellings) {
  for (const char* text :
       {"",    " ",     ".",   "-0.5",     "+0.5",  "0x1p-1", "0X.8",
        "nan", "NAN",   "inf", "infinity", "1e",    "1e+",    "e5",
        ".e5", "0.5.5", "1 2", "0.5x",     "1e999", "5%"}) {
    absl::StatusOr<double> v = ParseDecimalNumber(text);
    ASSERT_FALSE(v.ok()) << "'" << text << "' read as " << *v;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(v.status().message(),
                HasSubstr(std::string("bad number \"") + text + "\""));
  }
}

TEST(HumanReadableBytesTest, AlwaysBinaryUnits) {
  EXPECT_EQ(HumanReadableBytes(0), "0 B");
  EXPECT_EQ(HumanReadableBytes(1023), "1023 B");
  EXPECT_EQ(HumanReadableBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanReadableBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanReadableBytes(uint64_t{3} << 30), "3.00 GiB");
  EXPECT_EQ(HumanReadableBytes(uint64_t{5} << 40), "5.00 TiB");
  EXPECT_EQ(HumanReadableBytes(UINT64_MAX), "16.00 EiB");
}

TEST(HumanReadableBytesTest, ExactFormKeepsTheByteCount) {
  EXPECT_EQ(HumanReadableBytesExact(256), "256 B");
  EXPECT_EQ(HumanReadableBytesExact(835805832), "797.09 MiB (835805832 B)");
}

TEST(HumanReadableBytesTest, RoundTripsThroughTheParserWithinRounding) {
  for (uint64_t bytes : {uint64_t{1} << 10, uint64_t{3} << 29,
                         uint64_t{16} << 30, uint64_t{7} << 40}) {
    std::string text = HumanReadableBytes(bytes);
    text.erase(text.find(' '), 1);
    EXPECT_EQ(Parsed(text), bytes) << text;
  }
}

}  // namespace
}  // namespace bfc
