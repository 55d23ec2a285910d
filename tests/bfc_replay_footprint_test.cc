// File: tests/bfc_replay_footprint_test.cc
// preset:low_footprint on every real trace the project has: the four shared
// traces (tests/data) and the forty captured ones (tests/data/captured),
// replayed by bfc-replay over the simulated cudaMalloc as a user would
// (issue 15's "Done when" command). Each trace is held to the footprint
// measured when its guard was written (rounded up, by at most 0.005), to no
// failures, and to at most 20 sub-allocator calls in its last iteration: a
// policy change that costs any trace memory or calls fails here, naming it.
#include <cctype>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/tool_test.h"

namespace bfc {
namespace {

using Result = ::bfc::testing::ToolResult;

struct FootprintCase {
  const char* trace;   // under tests/data
  const char* phases;  // under tests/data; "": meta/ beside the trace
  double guard;        // measured footprint, rounded up
};

// Measured with the preset's current bundle (README, "Choosing a preset").
// Issue 15's goal is 1.10: densenet121-infer misses it (1.134, small
// long-lived feature maps pin regions freed by large ones while the pool
// is at its peak), and so do three small models and one trace with dynamic
// shapes; each is held to what it is, so that none gets worse unnoticed.
constexpr FootprintCase kCases[] = {
    {"lstm-train.csv", "phases/lstm-train.phases.csv", 1.035},
    {"resnet18-train.csv", "phases/resnet18-train.phases.csv", 1.058},
    {"resnet50-infer.csv", "phases/resnet50-infer.phases.csv", 1.091},
    {"transformer-train.csv", "phases/transformer-train.phases.csv", 1.021},
    {"captured/bert-infer.csv.gz", "", 1.041},
    {"captured/densenet121-infer.csv.gz", "", 1.136},
    {"captured/efficientnet_b0-train.csv.gz", "", 1.014},
    {"captured/gpt-decoder-train.csv.gz", "", 1.032},
    {"captured/gru-seq2seq-train.csv.gz", "", 1.010},
    {"captured/mobilenet_v2-train.csv.gz", "", 1.011},
    {"captured/squeezenet1_1-train.csv.gz", "", 1.076},
    {"captured/vgg11-train.csv.gz", "", 1.025},
    // Small models (peak live 11-195 MiB): three of the seven miss the goal,
    // to the 2 MiB growth floor and to pinning (README).
    {"captured/densenet121-infer-b2.csv.gz", "", 1.088},
    {"captured/gru-small-train.csv.gz", "", 1.190},
    {"captured/mlp-train.csv.gz", "", 1.155},
    {"captured/mobilenet_v2-infer-b1.csv.gz", "", 1.048},
    {"captured/resnet18-infer-b1.csv.gz", "", 1.030},
    {"captured/resnet18-train-b2.csv.gz", "", 1.049},
    {"captured/squeezenet1_1-infer-b4.csv.gz", "", 1.355},
    // Dynamic shapes (sequence length or batch size per iteration): one of
    // the three whose largest shape comes last misses, to the pinning
    // (README).
    {"captured/gpt-dynseq-train.csv.gz", "", 1.056},
    {"captured/bert-dynbatch-infer.csv.gz", "", 1.045},
    {"captured/resnet18-dynbatch-infer.csv.gz", "", 1.027},
    {"captured/resnet18-dyngrow-infer.csv.gz", "", 1.108},
    {"captured/gru-dynseq-train.csv.gz", "", 1.071},
    {"captured/gpt-dyngrow-train.csv.gz", "", 1.074},
    {"captured/bert-dyngrow-infer.csv.gz", "", 1.043},
    // Recorded after the preset was chosen, from ten models none of the
    // traces above came from (README): four miss the goal, three to the
    // pinning (a smaller tensor of a later step takes a freed region that a
    // large one then needs again), googlenet-infer to small tensors left in
    // one of two freed regions in its first iteration.
    {"captured/alexnet-train.csv.gz", "", 1.165},
    {"captured/googlenet-infer.csv.gz", "", 1.187},
    {"captured/shufflenet_v2-train.csv.gz", "", 1.038},
    {"captured/resnet34-infer.csv.gz", "", 1.163},
    {"captured/mnasnet1_0-train.csv.gz", "", 1.047},
    {"captured/regnet_x_400mf-train.csv.gz", "", 1.036},
    {"captured/mobilenet_v3_large-infer.csv.gz", "", 1.177},
    {"captured/convnext_tiny-infer.csv.gz", "", 1.061},
    {"captured/vit_b_16-infer.csv.gz", "", 1.014},
    {"captured/lstm-lm-train.csv.gz", "", 1.093},
    // A third set, recorded after the policy families of 2026-12-07 had
    // been modelled on everything above, from eight more models: three miss
    // the goal, all three in their second iteration, when the tensors that
    // start it land in regions the first iteration freed and a large
    // tensor then needs a region again (README).
    {"captured/wide_resnet50_2-infer.csv.gz", "", 1.086},
    {"captured/inception_v3-infer.csv.gz", "", 1.168},
    {"captured/resnext50-train.csv.gz", "", 1.042},
    {"captured/vgg16_bn-train.csv.gz", "", 1.115},
    {"captured/swin_t-infer.csv.gz", "", 1.056},
    {"captured/efficientnet_b3-infer.csv.gz", "", 1.229},
    {"captured/mobilenet_v3_small-train.csv.gz", "", 1.041},
    {"captured/transformer-s2s-train.csv.gz", "", 1.067},
};

// Failures name the trace, not the struct's bytes.
void PrintTo(const FootprintCase& c, std::ostream* os) { *os << c.trace; }

class FootprintTest : public ::bfc::testing::ToolTest,
                      public ::testing::WithParamInterface<FootprintCase> {
 protected:
  FootprintTest() : ToolTest(BFC_REPLAY_BINARY) {}
};

TEST_P(FootprintTest, LowFootprintHoldsItsMeasuredFootprint) {
  const FootprintCase& c = GetParam();
#ifndef BFC_HAVE_ZLIB
  if (absl::EndsWith(c.trace, ".gz")) {
    GTEST_SKIP() << "bfc-replay was built without zlib: it cannot read "
                 << c.trace << " (tools/deps.sh installs zlib1g-dev)";
  }
#endif
  const std::string data = BFC_TEST_DATA_DIR;
  std::string args = absl::StrCat(
      "--backend=sim-cudamalloc --memory-limit 16GiB "
      "--conf preset:low_footprint --summary-json - '",
      data, "/", c.trace, "'");
  if (*c.phases != '\0') {
    absl::StrAppend(&args, " --phases '", data, "/", c.phases, "'");
  }
  Result r = Run(args);
  ASSERT_TRUE(r.exited);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j =
      nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["failures"], 0);
  const double footprint = j["footprint"].get<double>();
  EXPECT_GE(footprint, 1.0);
  EXPECT_LE(footprint, c.guard);
  // Every trace has its iterations marked: the steady state's calls.
  ASSERT_TRUE(j.contains("last_iteration")) << r.out;
  const nlohmann::json& last = j["last_iteration"];
  EXPECT_LE(last["sub_allocator_allocs"].get<int64_t>() +
                last["sub_allocator_frees"].get<int64_t>(),
            20);
}

std::string CaseName(const ::testing::TestParamInfo<FootprintCase>& info) {
  std::string name = info.param.trace;
  std::string out;
  for (char ch : name.substr(name.rfind('/') + 1)) {
    if (ch == '.') break;
    out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(RealTraces, FootprintTest, ::testing::ValuesIn(kCases),
                         CaseName);

}  // namespace
}  // namespace bfc
