// File: tests/memory_map_svg_test.cc
// The SVG memory map: content for a few chunks, bounded size for 100k, and
// escaping. tests/check_svg.py parses the output as XML (ctest
// memory_map_svg_xml), with the maps written by memory_map_svg_sample.
#include "bfc/report/memory_map_svg.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bfc/allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/memory_map_samples.h"

namespace bfc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t Count(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = s.find(needle); at != std::string::npos;
       at = s.find(needle, at + needle.size())) {
    ++n;
  }
  return n;
}

TEST(MemoryMapSvgTest, SmallMapLabelsEveryChunk) {
  const MemoryDump d = testing::SmallSampleDump();
  ASSERT_EQ(d.chunks.size(), 10u);
  const std::string svg = RenderMemoryMapSvg(d);
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(
      svg,
      HasSubstr("Memory map of allocator &apos;small &lt;sample&gt;&apos;"));
  // One group with a tooltip per chunk: none is pooled at this scale.
  EXPECT_EQ(Count(svg, "<g class=\"chunk"), 10u);
  EXPECT_EQ(Count(svg, "<g class=\"pool\""), 0u);
  EXPECT_EQ(Count(svg, "<g class=\"chunk in-use\""), d.NumChunksInUse());
  // Legend, region label and addresses.
  EXPECT_THAT(svg, HasSubstr("requested bytes"));
  EXPECT_THAT(svg, HasSubstr("allocated, not requested"));
  EXPECT_THAT(svg, HasSubstr("region 0"));
  EXPECT_THAT(svg, HasSubstr(absl::StrFormat("%#x", d.regions[0].base)));
  EXPECT_THAT(svg, HasSubstr("allocation #"));
  EXPECT_THAT(svg, HasSubstr(">2.00 MiB<"));  // a size label
  // The 1200 KiB request reused the 1.46 MiB hole unsplit: visible padding.
  EXPECT_THAT(svg, HasSubstr("requested 1.17 MiB"));
  EXPECT_THAT(svg, HasSubstr("fill=\"#f28e2b\""));
}

TEST(MemoryMapSvgTest, HundredThousandChunksArePooled) {
  const MemoryDump d = testing::LargeSampleDump();
  ASSERT_GE(d.chunks.size(), testing::LargeSampleMinChunks());
  const std::string svg = RenderMemoryMapSvg(d);
  // Bounded by the pixels, not the chunks.
  EXPECT_LT(Count(svg, "<rect"), 20000u);
  EXPECT_GT(Count(svg, "<g class=\"pool\""), 100u);
  EXPECT_LT(svg.size(), size_t{4} << 20);
  EXPECT_THAT(svg, HasSubstr("small chunks"));
}

TEST(MemoryMapSvgTest, ManyRegionsAreSummarized) {
  MemoryDump d;
  d.allocator_name = "many";
  for (int i = 0; i < 10; ++i) {
    d.regions.push_back({uint64_t{1} << 32 | (uint64_t(i) << 24), 1 << 20});
    ChunkDump c;
    c.address = d.regions.back().base;
    c.size = 1 << 20;
    c.region = i;
    d.chunks.push_back(c);
  }
  MemoryMapSvgOptions o;
  o.max_regions = 4;
  o.title = "custom & title";
  const std::string svg = RenderMemoryMapSvg(d, o);
  EXPECT_EQ(Count(svg, "<g class=\"region\""), 4u);
  EXPECT_THAT(svg, HasSubstr("6 more region(s)"));
  EXPECT_THAT(svg, HasSubstr("custom &amp; title"));
  EXPECT_THAT(svg, Not(HasSubstr("custom & title")));
}

// Names are bytes (a file name, a frame): whatever they hold, the SVG is
// well-formed UTF-8 XML. Expected text written out by hand: & < > " ' as
// entities, CR as &#13;, every byte that does not start well-formed UTF-8
// (0xFF, overlongs, a surrogate 0xED 0xA0 0x80, a cut-off 0xE2 0x82, beyond
// U+10FFFF) and every character XML forbids (0x01, 0x1B, U+FFFE) as U+FFFD.
TEST(MemoryMapSvgTest, HostileNamesBecomeWellFormedXml) {
  const std::string kFffd = "\xEF\xBF\xBD";
  struct Case {
    std::string name;
    std::string expected;
  };
  const Case cases[] = {
      {"a<!--b-->]]>&\"'", "a&lt;!--b--&gt;]]&gt;&amp;&quot;&apos;"},
      {"x\xFFy", "x" + kFffd + "y"},
      {"over\xC0\x80long", "over" + kFffd + kFffd + "long"},
      {"sur\xED\xA0\x80rogate", "sur" + kFffd + kFffd + kFffd + "rogate"},
      {"cut\xE2\x82", "cut" + kFffd + kFffd},
      // Overlong 3- and 4-byte forms, and a code point above U+10FFFF.
      {"o3\xE0\x80\xAF", "o3" + kFffd + kFffd + kFffd},
      {"o4\xF0\x80\x80\xAF", "o4" + kFffd + kFffd + kFffd + kFffd},
      {"big\xF4\x90\x80\x80", "big" + kFffd + kFffd + kFffd + kFffd},
      {"ctl\x01\x1B\r\tz", "ctl" + kFffd + kFffd + "&#13;\tz"},
      {"nonchar\xEF\xBF\xBE", "nonchar" + kFffd},
      // Well-formed UTF-8 stays as it is: e-acute, CJK, an emoji.
      {"caf\xC3\xA9 \xE6\xBC\xA2 \xF0\x9F\x98\x80",
       "caf\xC3\xA9 \xE6\xBC\xA2 \xF0\x9F\x98\x80"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    MemoryDump d = testing::SmallSampleDump();
    d.allocator_name = c.name;
    ASSERT_FALSE(d.chunks.empty());
    d.chunks[0].site = {c.name};  // a frame, shown in the chunk's tooltip
    if (!d.chunks[0].in_use) d.chunks[0].in_use = true;
    const std::string svg = RenderMemoryMapSvg(d);
    EXPECT_THAT(svg, HasSubstr("Memory map of allocator &apos;" + c.expected +
                               "&apos;"));
    MemoryMapSvgOptions titled;
    titled.title = c.name;
    EXPECT_THAT(RenderMemoryMapSvg(d, titled),
                HasSubstr(">" + c.expected + "<"));
    // Nothing raw: no control byte but TAB/LF, no 0xFF/0xC0, no surrogate.
    for (char ch : svg) {
      const unsigned char u = static_cast<unsigned char>(ch);
      EXPECT_TRUE(u >= 0x20 || u == '\t' || u == '\n') << int{u};
      EXPECT_TRUE(u != 0xFF && u != 0xC0 && u != 0xED) << int{u};
    }
  }
}

}  // namespace
}  // namespace bfc
