// File: tests/memory_map_svg_sample.cc
// Writes the sample memory maps as SVG files for tests/check_svg.py:
//   memory_map_svg_sample OUT_DIR  ->  OUT_DIR/small.svg, OUT_DIR/large.svg,
//                                      OUT_DIR/hostile.svg
// hostile.svg is the small map under a name no XML text may hold raw: not
// UTF-8, control characters, markup, a noncharacter.
#include <cstdio>
#include <fstream>
#include <string>

#include "bfc/report/memory_map_svg.h"
#include "testing/memory_map_samples.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: memory_map_svg_sample OUT_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* name : {"small", "large", "hostile"}) {
    bfc::MemoryDump d = std::string(name) == "large"
                            ? bfc::testing::LargeSampleDump()
                            : bfc::testing::SmallSampleDump();
    if (std::string(name) == "hostile") {
      const std::string bad =
          "<!--]]>&\"'\x01\x1b\r\xff\xc0\x80\xed\xa0\x80\xef\xbf\xbe"
          "\xe2\x80\xa8</svg>";
      d.allocator_name = bad;
      for (bfc::ChunkDump& c : d.chunks) {
        if (c.in_use) c.site = {bad};
      }
    }
    std::ofstream out(dir + "/" + name + ".svg");
    out << bfc::RenderMemoryMapSvg(d);
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s.svg\n", dir.c_str(), name);
      return 1;
    }
  }
  return 0;
}
