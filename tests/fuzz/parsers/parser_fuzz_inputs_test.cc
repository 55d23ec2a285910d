// File: tests/fuzz/parsers/parser_fuzz_inputs_test.cc
// Every committed input of the parser fuzzers (corpus/<target>/ and
// regressions/<target>/) run once through its target, in every build (gcc,
// BFC_CHECK_LEVEL=2, the sanitizers), so that what a fuzzer once found stays
// fixed without libFuzzer. A target aborts on what it checks: the test
// process dies, and CTest names the target.
//
// CMake compiles each target's source once more with its entry point
// renamed (LLVMFuzzerTestOneInput -> BfcParserFuzz_<target>).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
int BfcParserFuzz_conf(const uint8_t* data, size_t size);
int BfcParserFuzz_trace(const uint8_t* data, size_t size);
int BfcParserFuzz_trace_file(const uint8_t* data, size_t size);
int BfcParserFuzz_phases(const uint8_t* data, size_t size);
int BfcParserFuzz_json(const uint8_t* data, size_t size);
int BfcParserFuzz_plan(const uint8_t* data, size_t size);
}

namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
  // Input folders under tests/fuzz/parsers (missing ones are skipped).
  std::vector<std::string> dirs;
};

std::vector<Target> Targets() {
  return {
      {"conf", BfcParserFuzz_conf, {"corpus/conf", "regressions/conf"}},
      {"trace", BfcParserFuzz_trace, {"corpus/trace", "regressions/trace"}},
      {"trace_file",
       BfcParserFuzz_trace_file,
       {"corpus/trace_file", "corpus/trace", "regressions/trace_file"}},
      {"phases", BfcParserFuzz_phases, {"corpus/phases", "regressions/phases"}},
      {"json", BfcParserFuzz_json, {"corpus/json", "regressions/json"}},
      {"plan", BfcParserFuzz_plan, {"corpus/trace", "regressions/plan"}},
  };
}

class ParserFuzzInputsTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ParserFuzzInputsTest, EveryCommittedInputRuns) {
  const Target target = Targets()[GetParam()];
  size_t inputs = 0;
  for (const std::string& dir : target.dirs) {
    const fs::path path = fs::path(BFC_PARSER_FUZZ_DIR) / dir;
    if (!fs::is_directory(path)) continue;
    for (const fs::directory_entry& e : fs::directory_iterator(path)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
      SCOPED_TRACE(e.path().string());
      EXPECT_EQ(target.run(reinterpret_cast<const uint8_t*>(bytes.data()),
                           bytes.size()),
                0);
      ++inputs;
    }
  }
  // A target whose inputs went missing would pass by running nothing.
  EXPECT_GT(inputs, 0u) << target.name << ": no committed inputs";
  // And an empty input, which every target must take.
  EXPECT_EQ(target.run(nullptr, 0), 0);
}

INSTANTIATE_TEST_SUITE_P(Targets, ParserFuzzInputsTest,
                         ::testing::Range(size_t{0}, Targets().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           return std::string(Targets()[info.param].name);
                         });

}  // namespace
