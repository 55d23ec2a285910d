// File: bfc/report/policy_panels_svg.h
// -----------------------------------------------------------------------------
//
// Small multiples for `bfc-replay --compare-policies --compare-svg`: one row
// of panels per trace, one panel per allocator policy, each drawing the pool
// bytes (what the allocator held from its sub-allocator) and the live bytes
// (what the program had asked for and not freed) against the event index.
// Panels of one trace share their y scale, so a taller pool line is a larger
// footprint at a glance; each panel is titled with its policy and footprint.
//
// The series are drawn as given: a caller downsamples long traces first
// (PeakSeries keeps the maximum of each bucket, so no peak is lost).
//
// Example:
//   bfc::PolicyPanelGroup g{"resnet50-infer", 4440, {...panels...}};
//   std::string svg = bfc::RenderPolicyPanelsSvg({g});
//
// Thread-safe (pure functions; PeakSeries is thread-compatible).
#ifndef BFC_POLICY_PANELS_SVG_H_
#define BFC_POLICY_PANELS_SVG_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bfc {

// A series of at most `max_points` values over `num_events` events: point i
// is the largest value seen at events [i * events_per_point,
// (i + 1) * events_per_point). A bucket where nothing was added (events that
// are no op, such as a trace's `allocate failure` rows) holds the last value
// added before it, so a line never drops to 0 where the value did not.
class PeakSeries {
 public:
  PeakSeries(size_t num_events, size_t max_points);
  // Records `value` at `event` (events past the end count as the last).
  // Events are added in nondecreasing order.
  void Add(size_t event, int64_t value);
  // The points, empty buckets filled as above (0 before the first Add).
  std::vector<int64_t> points() const;
  size_t events_per_point() const { return per_point_; }

 private:
  size_t per_point_ = 1;
  std::vector<int64_t> points_;
  std::vector<int64_t> last_;  // per bucket, the last value added
  std::vector<bool> set_;      // per bucket, whether anything was added
};

struct PolicyPanel {
  std::string policy;               // the title: a policy's name
  double footprint = 0;             // peak pool / peak live, in the title
  size_t failures = 0;              // shown in the title when not 0
  std::vector<int64_t> pool_bytes;  // evenly spaced over the trace's events
  std::vector<int64_t> live_bytes;
};

struct PolicyPanelGroup {
  std::string trace;  // the row's heading
  size_t num_events = 0;
  std::vector<PolicyPanel> panels;
};

// One standalone SVG document (no scripts, no external references). Names
// may hold any bytes; they are escaped for XML.
std::string RenderPolicyPanelsSvg(const std::vector<PolicyPanelGroup>& groups);

}  // namespace bfc

#endif  // BFC_POLICY_PANELS_SVG_H_
