// File: tests/str_format_test.cc
// -----------------------------------------------------------------------------
//
// internal::Format and AppendFormat: the same text as absl::StrFormat, and
// std::bad_alloc (which a caller can catch) when the host is out of memory.

#include "bfc/internal/str_format.h"

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

#include "gtest/gtest.h"
#include "testing/failing_new.h"

namespace bfc {
namespace {

using ::bfc::internal::AppendFormat;
using ::bfc::internal::Format;
using ::bfc::internal::kFormatStackBytes;
using ::bfc::testing::Armed;
using ::bfc::testing::g_host;
using ::bfc::testing::HostMemory;

TEST(FormatTest, ShortTexts) {
  EXPECT_EQ(
      Format("Allocator '%s': %d bytes at %#x (%.2f)", "gpu", -42, 255, 1.5),
      "Allocator 'gpu': -42 bytes at 0xff (1.50)");
  EXPECT_EQ(Format("%s", ""), "");
  EXPECT_EQ(Format("%u of %u", uint64_t{18446744073709551615u}, 0u),
            "18446744073709551615 of 0");
  EXPECT_EQ(Format("%s|%5s|%-5s|", std::string("a"), "b", "c"),
            "a|    b|c    |");
}

// Around the stack buffer's size: the text that fills it but for its '\0',
// the one that needs the '\0''s place, and longer ones.
TEST(FormatTest, TextsAroundTheBufferSize) {
  for (size_t n :
       {kFormatStackBytes - 2, kFormatStackBytes - 1, kFormatStackBytes,
        kFormatStackBytes + 1, 4 * kFormatStackBytes + 3, size_t{1} << 20}) {
    SCOPED_TRACE(n);
    const std::string body(n, 'x');
    const std::string out = Format("<%s>", body);
    ASSERT_EQ(out.size(), n + 2);
    EXPECT_EQ(out, "<" + body + ">");
    EXPECT_EQ(out.c_str()[out.size()], '\0');
  }
}

TEST(FormatTest, AppendFormatAppends) {
  std::string s = "head";
  AppendFormat(&s, " %d", 1);
  AppendFormat(&s, " %s", std::string(kFormatStackBytes, 'y'));
  EXPECT_EQ(s, "head 1 " + std::string(kFormatStackBytes, 'y'));
}

// Out of host memory, the string's own allocation fails and std::bad_alloc
// reaches the caller (absl::StrFormat ends the process with Debian's
// Abseil instead), for short texts and for long ones, where the failing
// allocation is the second pass's string.
TEST(FormatTest, NoHostMemoryThrowsBadAlloc) {
  for (size_t n : {size_t{100}, 3 * kFormatStackBytes}) {
    SCOPED_TRACE(n);
    const std::string body(n, 'z');
    g_host = HostMemory();
    g_host.fail_at = 0;
    g_host.fail_all = true;
    bool threw = false;
    {
      Armed armed;
      try {
        std::string out = Format("%s and %d", body, 7);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
    }
    EXPECT_TRUE(threw);
    EXPECT_EQ(g_host.failed, 1);  // the formatting itself took none
    std::string s = "kept";
    g_host = HostMemory();
    g_host.fail_at = 0;
    g_host.fail_all = true;
    threw = false;
    {
      Armed armed;
      try {
        AppendFormat(&s, "%s", body);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
    }
    g_host = HostMemory();
    EXPECT_TRUE(threw);
    EXPECT_EQ(s, "kept");
  }
}

}  // namespace
}  // namespace bfc
