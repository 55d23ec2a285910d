// File: bfc/report/memory_map_svg.h
// -----------------------------------------------------------------------------
//
// Draws a MemoryDump (bfc/memory_dump.h) as a standalone SVG memory map: one
// horizontal bar per region, scaled to the bar's width (regions differ in size
// by orders of magnitude, so each gets the full width and its size is
// labelled). Inside a bar, chunks in address order:
//
//   blue    bytes the caller asked for (requested_size)
//   orange  bytes handed out but not asked for (rounding to 256, unsplit tail)
//   grey    free chunks
//
// A chunk narrower than two pixels is not drawn alone: consecutive narrow
// chunks are pooled into one column whose blue/orange/grey heights show their
// mix, so a region of 100k chunks costs a few hundred elements, not 100k.
// Every chunk or column carries a <title> (a tooltip in browsers) with its
// address, sizes and allocation id; chunks wide enough are labelled with their
// size, and each bar with its base and end address.
//
// Example:
//   std::ofstream("map.svg") <<
//   bfc::RenderMemoryMapSvg(alloc.RecordMemoryMap());
//
// Thread-safe (a pure function).
#ifndef BFC_MEMORY_MAP_SVG_H_
#define BFC_MEMORY_MAP_SVG_H_

#include <string>

#include "bfc/memory_dump.h"

namespace bfc {

struct MemoryMapSvgOptions {
  int width = 1200;  // pixels; at least 300 is used
  // Regions after this many are summarized in one line, not drawn.
  int max_regions = 64;
  // Heading; empty: "Memory map of allocator '<name>'".
  std::string title;
};

std::string RenderMemoryMapSvg(
    const MemoryDump& dump,
    const MemoryMapSvgOptions& options = MemoryMapSvgOptions());

}  // namespace bfc

#endif  // BFC_MEMORY_MAP_SVG_H_
