// File: tests/fuzz/allocator_fuzzer.cc
// libFuzzer target: bytes -> a configured allocator and a sequence of
// operations, checked after each one against Validate() and a shadow model
// (harness.h). Build with the `fuzz` preset (clang, -fsanitize=fuzzer plus
// ASan/UBSan) and run on the committed seed corpus:
//
//   build-fuzz/tests/fuzz/allocator_fuzzer -runs=20000 tests/fuzz/corpus
//
// At exit it prints "bfc_fuzz_ops: N" (operations run by this process), which
// .ci/run adds up. A crashing input goes to tests/fuzz/regressions/, where
// fuzz_harness_test replays it in every build.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness.h"

namespace {

std::atomic<uint64_t> g_ops{0};

void PrintOps() {
  std::fprintf(stderr, "bfc_fuzz_ops: %llu\n",
               static_cast<unsigned long long>(g_ops.load()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::atexit(PrintOps);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_ops += bfc::fuzz::RunInput(data, size, [](const std::string& what) {
    std::fprintf(stderr, "bfc_fuzz: broken promise %s\n", what.c_str());
    std::fflush(stderr);
    std::abort();
  });
  return 0;
}
