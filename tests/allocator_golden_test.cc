// Fidelity: replays the four real traces with TensorFlow's configuration and
// compares every placement with what TF/XLA's own BFCAllocator produced
// (tests/data/NAME.{fixed,grow}.txt, see shared/golden/README.md). One test
// per golden file; a failure prints the first differing line with context.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bfc/allocator.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/virtual_sub_allocator.h"
#include "gtest/gtest.h"

namespace bfc {
namespace {

constexpr size_t kTotalMemory = size_t{16} << 30;
// Room for the 16 GiB region (fixed) or a doubling series up to 16 GiB (grow),
// plus the gaps between regions.
constexpr size_t kCapacity = size_t{64} << 30;
constexpr size_t kGapBytes = size_t{2} << 20;
constexpr size_t kValidateEvery = 500;

struct GoldenCase {
  const char* trace;
  bool grow;
};

std::string CaseName(const GoldenCase& c) {
  std::string n = absl::StrFormat("%s_%s", c.trace, c.grow ? "grow" : "fixed");
  std::replace(n.begin(), n.end(), '-', '_');
  return n;
}

std::vector<std::string> ReadLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// "line N: want '...' got '...'" plus a few lines before it from both sides.
std::string FirstMismatch(const std::vector<std::string>& want,
                          const std::vector<std::string>& got) {
  size_t n = std::max(want.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string w = i < want.size() ? want[i] : "<end of file>";
    const std::string g = i < got.size() ? got[i] : "<end of output>";
    if (w == g) continue;
    std::ostringstream os;
    os << "first difference at line " << i + 1 << " of " << want.size()
       << ":\n";
    for (size_t j = i >= 3 ? i - 3 : 0; j < i; ++j)
      os << "    same: " << want[j] << "\n";
    os << "  golden: " << w << "\n";
    os << "  ours:   " << g << "\n";
    return os.str();
  }
  return "";
}

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << CaseName(c); }

class GoldenTest : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenTest, PlacementsMatchTensorFlow) {
  const GoldenCase& c = GetParam();
  const std::string dir = BFC_TEST_DATA_DIR;
  const std::string golden_path =
      absl::StrFormat("%s/%s.%s.txt", dir, c.trace, c.grow ? "grow" : "fixed");
  const std::vector<std::string> want = ReadLines(golden_path);
  ASSERT_GT(want.size(), 3u) << "cannot read " << golden_path;

  absl::StatusOr<Trace> trace = ReadTrace(dir + "/" + c.trace + ".csv");
  ASSERT_TRUE(trace.ok()) << trace.status();
  absl::StatusOr<CompiledTrace> compiled = CompileTrace(*trace);
  ASSERT_TRUE(compiled.ok()) << compiled.status();

  // Regions in hand-out order. never_reuse makes bases strictly increasing,
  // so a pointer's region is found by binary search over the bases.
  struct Region {
    uintptr_t base;
    size_t size;
  };
  std::vector<Region> regions;
  SubAllocator::Visitor on_region = [&regions](void* ptr, int, size_t n) {
    regions.push_back(Region{reinterpret_cast<uintptr_t>(ptr), n});
  };
  VirtualSubAllocator::Options sub_options;
  sub_options.supports_coalescing = false;
  sub_options.gap_bytes = kGapBytes;
  sub_options.never_reuse = true;
  auto sub = std::make_unique<VirtualSubAllocator>(
      kCapacity, sub_options, std::vector<SubAllocator::Visitor>{on_region},
      std::vector<SubAllocator::Visitor>{});

  Allocator::Options options;
  options.allow_growth = c.grow;
  options.allow_retry_on_failure = false;
  options.garbage_collection = false;
  options.fragmentation_fraction = 0;
  Allocator allocator(std::move(sub), kTotalMemory, "golden", options);

  std::vector<std::string> got;
  got.reserve(want.size());
  std::string region_error;
  std::string validate_error;
  ReplayOptions replay;
  replay.alignment = 256;
  replay.on_allocate = [&](const ReplayOp& op, void* ptr) {
    if (ptr == nullptr) {
      got.push_back(absl::StrFormat("%d FAIL %d", op.event_index, op.size));
      return;
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(ptr);
    auto it = std::upper_bound(
        regions.begin(), regions.end(), p,
        [](uintptr_t v, const Region& r) { return v < r.base; });
    if (it == regions.begin() ||
        p >= std::prev(it)->base + std::prev(it)->size) {
      if (region_error.empty()) {
        region_error = absl::StrFormat("event %d: pointer %p is in no region",
                                       op.event_index, ptr);
      }
      got.push_back(absl::StrFormat("%d ? ? %d", op.event_index, op.size));
      return;
    }
    --it;
    got.push_back(absl::StrFormat("%d %d %d %d", op.event_index,
                                  it - regions.begin(), p - it->base, op.size));
  };
  replay.after_op = [&](size_t i, const ReplayOp& op, void*) {
    if ((i + 1) % kValidateEvery != 0 || !validate_error.empty()) return;
    absl::Status st = allocator.Validate();
    if (!st.ok()) {
      validate_error = absl::StrFormat("after op %d (event %d): %s", i,
                                       op.event_index, st.ToString());
    }
  };

  absl::StatusOr<ReplaySummary> summary =
      ReplayTrace(*compiled, allocator, replay);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(region_error, "");
  EXPECT_EQ(validate_error, "");
  absl::Status final_validate = allocator.Validate();
  EXPECT_TRUE(final_validate.ok()) << final_validate;
  EXPECT_EQ(summary->failures, 0u);

  std::string regions_line = "# regions";
  for (const Region& r : regions)
    regions_line += absl::StrFormat(" %d", r.size);
  got.push_back(regions_line);
  std::optional<AllocatorStats> stats = allocator.GetStats();
  ASSERT_TRUE(stats.has_value());
  got.push_back(absl::StrFormat("# peak_pool_bytes %d",
                                stats->peak_pool_bytes.value_or(-1)));
  got.push_back(
      absl::StrFormat("# final_stats num_allocs=%d bytes_in_use=%d "
                      "peak_bytes_in_use=%d largest_alloc_size=%d",
                      stats->num_allocs, stats->bytes_in_use,
                      stats->peak_bytes_in_use, stats->largest_alloc_size));

  // The trailer lines are compared on their own too, so a placement drift
  // early on does not hide whether the totals agree.
  ASSERT_GE(got.size(), 3u);
  for (size_t k = 1; k <= 3; ++k) {
    EXPECT_EQ(got[got.size() - k], want[want.size() - k])
        << "trailer line " << 4 - k;
  }
  EXPECT_EQ(got.size(), want.size());
  std::string mismatch = FirstMismatch(want, got);
  EXPECT_TRUE(mismatch.empty()) << golden_path << ": " << mismatch;

  // The replay summary agrees with the allocator and the trace.
  EXPECT_EQ(summary->peak_live_bytes, compiled->peak_live_bytes);
  EXPECT_EQ(summary->peak_pool_bytes, stats->peak_pool_bytes.value_or(-1));
  EXPECT_EQ(summary->regions, static_cast<int64_t>(regions.size()));
}

INSTANTIATE_TEST_SUITE_P(
    Golden, GoldenTest,
    ::testing::Values(
        GoldenCase{"resnet18-train", false}, GoldenCase{"resnet18-train", true},
        GoldenCase{"transformer-train", false},
        GoldenCase{"transformer-train", true}, GoldenCase{"lstm-train", false},
        GoldenCase{"lstm-train", true}, GoldenCase{"resnet50-infer", false},
        GoldenCase{"resnet50-infer", true}),
    [](const ::testing::TestParamInfo<GoldenCase>& info) {
      return CaseName(info.param);
    });

}  // namespace
}  // namespace bfc
