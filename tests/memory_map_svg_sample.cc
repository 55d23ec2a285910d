// File: tests/memory_map_svg_sample.cc
// Writes the sample memory maps as SVG files for tests/check_svg.py:
//   memory_map_svg_sample OUT_DIR  ->  OUT_DIR/small.svg, OUT_DIR/large.svg
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
  for (const char* name : {"small", "large"}) {
    const bfc::MemoryDump d = std::string(name) == "small"
                                  ? bfc::testing::SmallSampleDump()
                                  : bfc::testing::LargeSampleDump();
    std::ofstream out(dir + "/" + name + ".svg");
    out << bfc::RenderMemoryMapSvg(d);
    if (!out) {
      std::fprintf(stderr, "cannot write %s/%s.svg\n", dir.c_str(), name);
      return 1;
    }
  }
  return 0;
}
