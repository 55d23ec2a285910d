// File: tests/fuzz/parsers/trace_file_fuzzer.cc
// ReadTrace on a file holding the input (plain or gzip, told by content:
// truncated, concatenated and padded gzip members), then CompileTrace.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bfc/replay/trace.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  static bfc::fuzz::MemfdPath file("trace");
  absl::StatusOr<bfc::Trace> trace = bfc::ReadTrace(file.Write(data, size));
  if (trace.ok()) (void)bfc::CompileTrace(*trace);
  return 0;
}
