// File: tests/fuzz/parsers/trace_fuzzer.cc
// What bfc-replay does with a trace's text: ParseTrace, CompileTrace (unknown
// frees refused and skipped), replays into a 64 MiB allocator (one stream,
// and every row on its own stream with Validate every 16 operations), a
// warm second pass, and for short traces the --report path (history,
// accounts, JSON written and read back). Nothing may crash, and the
// allocator must validate after each replay.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/report/replay_report.h"
#include "bfc/virtual_sub_allocator.h"
#include "fuzz_support.h"

namespace {

constexpr size_t kLimit = size_t{64} << 20;

[[noreturn]] void Fail(const std::string& what, const absl::Status& s) {
  fprintf(stderr, "trace_fuzzer: %s: %s\n", what.c_str(),
          std::string(s.message()).c_str());
  abort();
}

void Replay(const bfc::CompiledTrace& trace, bool streams) {
  bfc::Allocator alloc(std::make_unique<bfc::VirtualSubAllocator>(kLimit),
                       kLimit, "fuzz");
  bfc::ReplayOptions options;
  size_t ops = 0;
  if (streams) {
    if (absl::Status s = alloc.SetStreamOps(bfc::MakeCompletedWorkStreamOps());
        !s.ok()) {
      Fail("SetStreamOps", s);
    }
    options.streams = true;
    options.after_op = [&](size_t, const bfc::ReplayOp&, void*) {
      if ((++ops & 15) == 0) {
        if (absl::Status s = alloc.Validate(); !s.ok()) Fail("Validate", s);
      }
    };
  }
  bfc::Replayer replayer(trace, alloc, options);
  if (replayer.Run().ok()) (void)replayer.Run();  // the warm pass
  replayer.ReleaseLive();
  if (absl::Status s = alloc.Validate(); !s.ok()) Fail("Validate at end", s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<bfc::Trace> trace = bfc::ParseTrace(text, "fuzz");
  if (!trace.ok()) return 0;
  for (bool skip : {false, true}) {
    bfc::CompileOptions co;
    co.skip_unknown_frees = skip;
    absl::StatusOr<bfc::CompiledTrace> compiled = bfc::CompileTrace(*trace, co);
    if (!compiled.ok()) continue;
    if (compiled->ops.size() > 20000) return 0;  // keeps each run short
    Replay(*compiled, /*streams=*/false);
    Replay(*compiled, /*streams=*/true);
    if (compiled->ops.size() > 300) continue;
    bfc::ReplayReportOptions ro;
    ro.source = &*trace;
    ro.account_names = {"a", "b"};
    ro.account_of_op = [](size_t i) { return i % 3; };
    auto make = [] {
      return std::make_unique<bfc::Allocator>(
          std::make_unique<bfc::VirtualSubAllocator>(kLimit), kLimit, "r");
    };
    absl::StatusOr<bfc::ReplayReport> report =
        bfc::BuildReplayReport(*compiled, make, ro);
    if (!report.ok()) continue;
    absl::StatusOr<bfc::ReplayReport> back =
        bfc::ReplayReportFromJson(bfc::ReplayReportToJson(*report));
    if (!back.ok()) Fail("the report does not read back", back.status());
  }
  return 0;
}
