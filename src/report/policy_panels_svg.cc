// File: src/report/policy_panels_svg.cc
#include "bfc/report/policy_panels_svg.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bfc/internal/str_format.h"
#include "report/text_escape.h"

namespace bfc {

PeakSeries::PeakSeries(size_t num_events, size_t max_points) {
  max_points = std::max<size_t>(max_points, 1);
  per_point_ = std::max<size_t>(1, (num_events + max_points - 1) / max_points);
  const size_t n =
      std::max<size_t>(1, (num_events + per_point_ - 1) / per_point_);
  points_.assign(n, 0);
  last_.assign(n, 0);
  set_.assign(n, false);
}

void PeakSeries::Add(size_t event, int64_t value) {
  const size_t i = std::min(event / per_point_, points_.size() - 1);
  points_[i] = set_[i] ? std::max(points_[i], value) : value;
  last_[i] = value;
  set_[i] = true;
}

std::vector<int64_t> PeakSeries::points() const {
  std::vector<int64_t> out = points_;
  int64_t carried = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (set_[i]) {
      carried = last_[i];
    } else {
      out[i] = carried;
    }
  }
  return out;
}

namespace {

constexpr int kColumns = 3;
constexpr int kPanelWidth = 380;
constexpr int kPanelHeight = 180;
constexpr int kPlotLeft = 58;  // room for the y labels
constexpr int kPlotRight = 12;
constexpr int kPlotTop = 34;  // room for the two title lines
constexpr int kPlotBottom = 22;
constexpr int kGroupHeading = 30;
constexpr char kPoolColor[] = "#1f77b4";
constexpr char kLiveColor[] = "#ff7f0e";

std::string MiB(int64_t bytes) {
  return bfc::internal::Format("%.0f MiB",
                               static_cast<double>(bytes) / (1 << 20));
}

std::string Polyline(const std::vector<int64_t>& v, double x0, double y0,
                     double w, double h, int64_t y_max, const char* color) {
  if (v.empty()) return "";
  std::string points;
  const double dx = v.size() > 1 ? w / static_cast<double>(v.size() - 1) : 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const double y =
        y0 + h - h * static_cast<double>(v[i]) / static_cast<double>(y_max);
    bfc::internal::AppendFormat(&points, "%s%.1f,%.1f", i == 0 ? "" : " ",
                                x0 + dx * static_cast<double>(i), y);
  }
  return bfc::internal::Format(
      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.2\" "
      "points=\"%s\"/>\n",
      color, points);
}

}  // namespace

std::string RenderPolicyPanelsSvg(const std::vector<PolicyPanelGroup>& groups) {
  std::string body;
  int y = 40;  // below the legend
  for (const PolicyPanelGroup& g : groups) {
    bfc::internal::AppendFormat(
        &body,
        "<text x=\"8\" y=\"%d\" font-size=\"15\" font-weight=\"bold\">%s "
        "(%d events)</text>\n",
        y + 20, internal::EscapeXml(g.trace), g.num_events);
    y += kGroupHeading;
    int64_t y_max = 1;
    for (const PolicyPanel& p : g.panels) {
      for (int64_t v : p.pool_bytes) y_max = std::max(y_max, v);
      for (int64_t v : p.live_bytes) y_max = std::max(y_max, v);
    }
    for (size_t i = 0; i < g.panels.size(); ++i) {
      const PolicyPanel& p = g.panels[i];
      const int px = 8 + static_cast<int>(i % kColumns) * kPanelWidth;
      const int py = y + static_cast<int>(i / kColumns) * kPanelHeight;
      const double x0 = px + kPlotLeft, y0 = py + kPlotTop;
      const double w = kPanelWidth - kPlotLeft - kPlotRight;
      const double h = kPanelHeight - kPlotTop - kPlotBottom;
      std::string title = bfc::internal::Format("footprint %.3f", p.footprint);
      if (p.failures > 0) {
        bfc::internal::AppendFormat(&title, ", %d failed allocations",
                                    p.failures);
      }
      bfc::internal::AppendFormat(
          &body,
          "<g>\n<text x=\"%d\" y=\"%d\" font-size=\"12\" "
          "font-weight=\"bold\">%s</text>\n"
          "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>\n"
          "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
          "fill=\"#fafafa\" stroke=\"#999\" stroke-width=\"0.5\"/>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
          "text-anchor=\"end\">%s</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
          "text-anchor=\"end\">0</text>\n"
          "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" "
          "text-anchor=\"end\">event %d</text>\n",
          px + kPlotLeft, py + 13, internal::EscapeXml(p.policy),
          px + kPlotLeft, py + 27, title, x0, y0, w, h, x0 - 4, y0 + 9,
          MiB(y_max), x0 - 4, y0 + h, x0 + w, y0 + h + 14, g.num_events);
      body += Polyline(p.pool_bytes, x0, y0, w, h, y_max, kPoolColor);
      body += Polyline(p.live_bytes, x0, y0, w, h, y_max, kLiveColor);
      body += "</g>\n";
    }
    const int rows =
        (static_cast<int>(g.panels.size()) + kColumns - 1) / kColumns;
    y += rows * kPanelHeight + 10;
  }
  const int width = 16 + kColumns * kPanelWidth;
  const std::string legend = bfc::internal::Format(
      "<text x=\"8\" y=\"16\" font-size=\"14\" font-weight=\"bold\">Pool "
      "bytes and live bytes per policy</text>\n"
      "<line x1=\"8\" y1=\"30\" x2=\"28\" y2=\"30\" stroke=\"%s\" "
      "stroke-width=\"2\"/><text x=\"32\" y=\"34\" font-size=\"11\">pool "
      "bytes (held from the sub-allocator)</text>\n"
      "<line x1=\"260\" y1=\"30\" x2=\"280\" y2=\"30\" stroke=\"%s\" "
      "stroke-width=\"2\"/><text x=\"284\" y=\"34\" font-size=\"11\">live "
      "bytes (asked for, not yet freed); x: event index, each point the "
      "maximum of its bucket</text>\n",
      kPoolColor, kLiveColor);
  return bfc::internal::Format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg "
      "xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n<rect "
      "width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n%s%s</svg>\n",
      width, y, width, y, legend, body);
}

}  // namespace bfc
