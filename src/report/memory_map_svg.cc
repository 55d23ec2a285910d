// File: src/memory_map_svg.cc
#include "bfc/report/memory_map_svg.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"
#include "report/text_escape.h"

namespace bfc {
namespace {

constexpr const char* kRequestedColor = "#4e79a7";
constexpr const char* kPaddingColor = "#f28e2b";
constexpr const char* kFreeColor = "#e4e4e4";
constexpr const char* kTextColor = "#222";
constexpr double kMinChunkPx = 2.0;  // narrower chunks are pooled
constexpr double kLabelPx = 70.0;    // wider chunks get a size label
constexpr int kMargin = 16;
constexpr int kBarHeight = 34;
constexpr int kRegionBlock = 74;  // label + bar + address line + gap

// Text in the SVG (names, frames): well-formed UTF-8 XML whatever the bytes.
std::string Escape(std::string_view s) { return internal::EscapeXml(s); }

std::string Hex(uint64_t a) { return bfc::internal::Format("%#x", a); }

void Rect(std::string* out, double x, double y, double w, double h,
          const char* fill) {
  if (w <= 0 || h <= 0) return;
  bfc::internal::AppendFormat(out,
                              "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                              "height=\"%.2f\" fill=\"%s\"/>",
                              x, y, w, h, fill);
}

// Consecutive narrow chunks, drawn as one column.
struct Pool {
  double x0 = 0;
  double x1 = 0;
  uint64_t first = 0;
  uint64_t end = 0;
  uint64_t requested = 0;
  uint64_t padding = 0;
  uint64_t free = 0;
  uint64_t in_use_chunks = 0;
  uint64_t free_chunks = 0;
  bool empty() const { return in_use_chunks + free_chunks == 0; }
};

void DrawPool(std::string* out, const Pool& p, double y) {
  const double total = static_cast<double>(p.requested + p.padding + p.free);
  if (total <= 0) return;
  const double w = std::max(p.x1 - p.x0, 0.5);
  bfc::internal::AppendFormat(
      out,
      "<g class=\"pool\"><title>%d small chunks, %s to %s: %d in use "
      "(requested %s, padding %s), %d free (%s)</title>",
      p.in_use_chunks + p.free_chunks, Hex(p.first), Hex(p.end),
      p.in_use_chunks, HumanReadableBytes(p.requested),
      HumanReadableBytes(p.padding), p.free_chunks, HumanReadableBytes(p.free));
  // Stacked from the bottom: requested, padding, free.
  const double hr = kBarHeight * static_cast<double>(p.requested) / total;
  const double hp = kBarHeight * static_cast<double>(p.padding) / total;
  const double hf = kBarHeight - hr - hp;
  Rect(out, p.x0, y, w, hf, kFreeColor);
  Rect(out, p.x0, y + hf, w, hp, kPaddingColor);
  Rect(out, p.x0, y + hf + hp, w, hr, kRequestedColor);
  absl::StrAppend(out, "</g>\n");
}

void DrawChunk(std::string* out, const ChunkDump& c, double x0, double x1,
               double y) {
  const double w = x1 - x0;
  if (c.in_use) {
    bfc::internal::AppendFormat(
        out,
        "<g class=\"chunk in-use\"><title>in use, allocation #%d: %s at %s, "
        "requested %s (%d bytes of %d)",
        c.allocation_id, HumanReadableBytes(c.size), Hex(c.address),
        HumanReadableBytes(c.requested_size), c.requested_size, c.size);
    if (!c.site.empty())
      absl::StrAppend(out, "\nallocated at ", Escape(c.site[0]));
    absl::StrAppend(out, "</title>");
    const double wr =
        w * static_cast<double>(c.requested_size) / static_cast<double>(c.size);
    Rect(out, x0, y, wr, kBarHeight, kRequestedColor);
    Rect(out, x0 + wr, y, w - wr, kBarHeight, kPaddingColor);
  } else {
    bfc::internal::AppendFormat(
        out,
        "<g class=\"chunk free\"><title>free (bin %d): %s "
        "at %s (%d bytes)</title>",
        c.bin, HumanReadableBytes(c.size), Hex(c.address), c.size);
    Rect(out, x0, y, w, kBarHeight, kFreeColor);
  }
  // A hairline between chunks keeps neighbours apart.
  bfc::internal::AppendFormat(out,
                              "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                              "height=\"%d\" fill=\"none\" stroke=\"#fff\" "
                              "stroke-width=\"0.6\"/>",
                              x0, y, w, kBarHeight);
  if (w >= kLabelPx) {
    bfc::internal::AppendFormat(
        out,
        "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" font-size=\"11\" "
        "fill=\"%s\">%s</text>",
        x0 + w / 2, y + kBarHeight / 2.0 + 4, c.in_use ? "#fff" : kTextColor,
        HumanReadableBytes(c.size));
  }
  absl::StrAppend(out, "</g>\n");
}

}  // namespace

std::string RenderMemoryMapSvg(const MemoryDump& d,
                               const MemoryMapSvgOptions& options) {
  const int width = std::max(options.width, 300);
  const double bar_width = width - 2 * kMargin;
  const int max_regions = std::max(options.max_regions, 1);
  const size_t drawn =
      std::min(d.regions.size(), static_cast<size_t>(max_regions));
  const int header = 92;
  const int height = header + static_cast<int>(drawn) * kRegionBlock +
                     (drawn < d.regions.size() ? 24 : 0) + 8;

  std::string out;
  bfc::internal::AppendFormat(
      &out,
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"DejaVu Sans, Arial, sans-serif\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n",
      width, height, width, height);
  const std::string title =
      options.title.empty()
          ? absl::StrCat("Memory map of allocator '", d.allocator_name, "'")
          : options.title;
  bfc::internal::AppendFormat(&out,
                              "<text x=\"%d\" y=\"24\" font-size=\"17\" "
                              "font-weight=\"bold\" fill=\"%s\">%s</text>\n",
                              kMargin, kTextColor, Escape(title));
  const uint64_t pool = d.PoolBytes();
  const uint64_t in_use = static_cast<uint64_t>(d.stats.bytes_in_use);
  bfc::internal::AppendFormat(
      &out,
      "<text x=\"%d\" y=\"46\" font-size=\"12\" fill=\"%s\">pool %s in %d "
      "region(s), limit %s · in use %s in %d chunk(s), requested %s · free "
      "%s in %d chunk(s), largest %s · fragmentation %.1f%%</text>\n",
      kMargin, kTextColor, HumanReadableBytes(pool), d.regions.size(),
      HumanReadableBytes(d.limit), HumanReadableBytes(in_use),
      d.NumChunksInUse(),
      HumanReadableBytes(static_cast<uint64_t>(d.stats.bytes_requested_in_use)),
      HumanReadableBytes(d.FreeBytes()), d.chunks.size() - d.NumChunksInUse(),
      HumanReadableBytes(d.LargestFreeChunk()), 100.0 * d.stats.fragmentation);
  // Legend.
  struct Key {
    const char* color;
    const char* text;
  };
  const Key keys[] = {
      {kRequestedColor, "requested bytes"},
      {kPaddingColor, "allocated, not requested (rounding, unsplit tail)"},
      {kFreeColor, "free"},
  };
  double lx = kMargin;
  for (const Key& k : keys) {
    bfc::internal::AppendFormat(
        &out,
        "<rect x=\"%.1f\" y=\"58\" width=\"14\" height=\"14\" "
        "fill=\"%s\" stroke=\"#999\" stroke-width=\"0.5\"/>"
        "<text x=\"%.1f\" y=\"70\" font-size=\"12\" "
        "fill=\"%s\">%s</text>\n",
        lx, k.color, lx + 19, kTextColor, k.text);
    lx += 30 + 6.6 * std::string_view(k.text).size();
  }
  bfc::internal::AppendFormat(
      &out,
      "<text x=\"%.1f\" y=\"70\" font-size=\"12\" "
      "fill=\"#666\">columns: chunks under %.0f px pooled, "
      "heights show the mix</text>\n",
      lx, kMinChunkPx);

  size_t next_chunk = 0;
  for (size_t r = 0; r < drawn; ++r) {
    const RegionDump& region = d.regions[r];
    const double y_label = header + r * kRegionBlock;
    const double y_bar = y_label + 8;
    uint64_t region_in_use = 0;
    uint64_t region_chunks = 0;
    // Chunks are stored region by region in address order.
    while (next_chunk < d.chunks.size() &&
           d.chunks[next_chunk].region < static_cast<int>(r)) {
      ++next_chunk;
    }
    const size_t first_chunk = next_chunk;
    for (size_t i = first_chunk;
         i < d.chunks.size() && d.chunks[i].region == static_cast<int>(r);
         ++i) {
      ++region_chunks;
      if (d.chunks[i].in_use) region_in_use += d.chunks[i].size;
    }
    bfc::internal::AppendFormat(
        &out,
        "<text x=\"%d\" y=\"%.1f\" font-size=\"12\" fill=\"%s\"><tspan "
        "font-weight=\"bold\">region %d</tspan>  %s · %d chunk(s) · %s in "
        "use (%.1f%%)</text>\n",
        kMargin, y_label, kTextColor, r, HumanReadableBytes(region.size),
        region_chunks, HumanReadableBytes(region_in_use),
        region.size > 0 ? 100.0 * static_cast<double>(region_in_use) /
                              static_cast<double>(region.size)
                        : 0.0);
    bfc::internal::AppendFormat(&out,
                                "<g class=\"region\" data-region=\"%d\">\n", r);
    Rect(&out, kMargin, y_bar, bar_width, kBarHeight, kFreeColor);
    const double scale =
        region.size > 0 ? bar_width / static_cast<double>(region.size) : 0;
    Pool pool_col;
    for (size_t i = first_chunk;
         i < d.chunks.size() && d.chunks[i].region == static_cast<int>(r);
         ++i) {
      const ChunkDump& c = d.chunks[i];
      const uint64_t offset = c.address - region.base;
      const double x0 = kMargin + static_cast<double>(offset) * scale;
      const double x1 = kMargin + static_cast<double>(offset + c.size) * scale;
      if (x1 - x0 >= kMinChunkPx) {
        if (!pool_col.empty()) DrawPool(&out, pool_col, y_bar);
        pool_col = Pool();
        DrawChunk(&out, c, x0, x1, y_bar);
        continue;
      }
      if (pool_col.empty()) {
        pool_col.x0 = x0;
        pool_col.first = c.address;
      }
      pool_col.x1 = x1;
      pool_col.end = c.address + c.size;
      if (c.in_use) {
        ++pool_col.in_use_chunks;
        pool_col.requested += c.requested_size;
        pool_col.padding += c.size - c.requested_size;
      } else {
        ++pool_col.free_chunks;
        pool_col.free += c.size;
      }
      if (pool_col.x1 - pool_col.x0 >= kMinChunkPx) {
        DrawPool(&out, pool_col, y_bar);
        pool_col = Pool();
      }
    }
    if (!pool_col.empty()) DrawPool(&out, pool_col, y_bar);
    bfc::internal::AppendFormat(
        &out,
        "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" "
        "height=\"%d\" fill=\"none\" stroke=\"#555\"/>\n",
        kMargin, y_bar, bar_width, kBarHeight);
    absl::StrAppend(&out, "</g>\n");
    bfc::internal::AppendFormat(
        &out,
        "<text x=\"%d\" y=\"%.1f\" font-size=\"10\" fill=\"#555\">%s</text>"
        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#555\" "
        "text-anchor=\"end\">%s</text>\n",
        kMargin, y_bar + kBarHeight + 13, Hex(region.base), kMargin + bar_width,
        y_bar + kBarHeight + 13, Hex(region.base + region.size));
  }
  if (drawn < d.regions.size()) {
    uint64_t rest = 0;
    for (size_t r = drawn; r < d.regions.size(); ++r) rest += d.regions[r].size;
    bfc::internal::AppendFormat(&out,
                                "<text x=\"%d\" y=\"%d\" font-size=\"12\" "
                                "fill=\"%s\">... %d more region(s), %s, not "
                                "drawn</text>\n",
                                kMargin, height - 14, kTextColor,
                                d.regions.size() - drawn,
                                HumanReadableBytes(rest));
  }
  absl::StrAppend(&out, "</svg>\n");
  return out;
}

}  // namespace bfc
