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
  ASSERT_GE(d.chunks.size(), testing::kLargeSampleMinChunks);
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

}  // namespace
}  // namespace bfc
