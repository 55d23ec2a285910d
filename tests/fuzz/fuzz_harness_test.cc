// File: tests/fuzz/fuzz_harness_test.cc
// The fuzzing harness as a deterministic randomized test, for builds without
// libFuzzer (gcc): fixed seeds generate random inputs, and every file in the
// committed seed corpus and in regressions/ (crash inputs the fuzzer found)
// is replayed. A failure prints the input in hex so it can be saved as a
// regression file.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "harness.h"

namespace bfc::fuzz {
namespace {

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string s;
  for (uint8_t b : bytes) absl::StrAppendFormat(&s, "%02x", b);
  return s;
}

size_t RunAndExpectNoFailure(const std::vector<uint8_t>& input,
                             const std::string& name) {
  return RunInput(input.data(), input.size(), [&](const std::string& what) {
    ADD_FAILURE() << name << ": " << what << "\ninput (" << input.size()
                  << " bytes, hex): " << Hex(input);
  });
}

std::vector<std::vector<uint8_t>> ReadDir(const std::string& dir) {
  std::vector<std::vector<uint8_t>> files;
  if (!std::filesystem::exists(dir)) return files;
  std::vector<std::filesystem::path> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename().string()[0] != '.' &&
        e.path().extension() != ".md") {
      paths.push_back(e.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) {
    std::ifstream f(p, std::ios::binary);
    files.emplace_back(std::istreambuf_iterator<char>(f),
                       std::istreambuf_iterator<char>());
  }
  return files;
}

TEST(FuzzHarnessTest, SeedCorpusAndRegressions) {
  size_t ops = 0, inputs = 0;
  for (const char* sub : {"corpus", "regressions"}) {
    const std::string dir = absl::StrCat(BFC_FUZZ_DIR, "/", sub);
    for (const auto& input : ReadDir(dir)) {
      ops += RunAndExpectNoFailure(input, absl::StrCat(sub, " file"));
      ++inputs;
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(inputs, 0u) << "no seed corpus in " << BFC_FUZZ_DIR;
  RecordProperty("ops", static_cast<int>(ops));
}

// Random inputs, biased towards valid operations by drawing the opcode and
// argument bytes from the same generator: each seed is one input.
TEST(FuzzHarnessTest, DeterministicRandomInputs) {
  size_t ops = 0;
  const int kInputs = 400;
  for (int seed = 0; seed < kInputs; ++seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> input(64 + rng() % 6000);
    for (uint8_t& b : input) b = static_cast<uint8_t>(rng());
    // Every configuration byte in turn; faults on a quarter of the inputs.
    input[0] = static_cast<uint8_t>(seed * 37);
    if (seed % 4 != 0) input[1] &= 0x7f;
    ops += RunAndExpectNoFailure(input, absl::StrCat("seed ", seed));
    if (HasFailure()) return;
  }
  EXPECT_GT(ops, 100000u);
  RecordProperty("ops", static_cast<int>(ops));
}

}  // namespace
}  // namespace bfc::fuzz
