// File: tests/fuzz/parsers/phases_fuzzer.cc
// bfc-replay's phase files (tools/replay_profile.h, ReadTracePhases) for a
// fixed small trace, read as if the trace had its real length, none, or 5
// events; what is accepted for the real length is mapped to accounts
// (MapOpsToPhases), profiled (ProfileReplay) and replayed with one account
// per phase, as bfc-replay --phases and --accounts do.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/virtual_sub_allocator.h"
#include "fuzz_support.h"
#include "replay_profile.h"

namespace {

constexpr size_t kLimit = size_t{64} << 20;

// 40 allocations of growing size on 7 pointers, each freed every 7th row.
const bfc::CompiledTrace& FixedTrace() {
  static const bfc::CompiledTrace* trace = [] {
    std::string csv = "Thread,Time,Action,Pointer,Size,Stream\n";
    for (int i = 0; i < 40; ++i) {
      csv += "1," + std::to_string(i) + ".0,allocate,0x" +
             std::to_string(1000 + i % 7) + "," +
             std::to_string(256 * (i + 1)) + ",0\n";
      if (i % 7 == 6) {
        for (int k = 0; k < 7; ++k) {
          csv += "1," + std::to_string(i) + ".5,free,0x" +
                 std::to_string(1000 + k) + ",0,0\n";
        }
      }
    }
    absl::StatusOr<bfc::Trace> parsed = bfc::ParseTrace(csv, "fixed");
    if (!parsed.ok()) abort();
    bfc::CompileOptions co;
    co.skip_unknown_frees = true;
    absl::StatusOr<bfc::CompiledTrace> compiled =
        bfc::CompileTrace(*parsed, co);
    if (!compiled.ok()) abort();
    return new bfc::CompiledTrace(*std::move(compiled));
  }();
  return *trace;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bfc::fuzz::SilenceLogs();
  static bfc::fuzz::MemfdPath file("phases");
  const std::string& path = file.Write(data, size);
  const bfc::CompiledTrace& trace = FixedTrace();
  for (size_t num_events : {trace.num_events, size_t{0}, size_t{5}}) {
    absl::StatusOr<bfc::tools::TracePhases> phases =
        bfc::tools::ReadTracePhases(path, num_events);
    if (!phases.ok()) continue;
    (void)phases->NumIterations();
    (void)phases->LastIteration();
    if (num_events != trace.num_events) continue;
    const bfc::tools::PhaseAccountMap map =
        bfc::tools::MapOpsToPhases(trace, *phases);
    if (map.names.size() > 256) continue;  // bfc-replay's kMaxPhaseAccounts
    if (map.op_account.size() != trace.ops.size()) abort();
    for (uint32_t a : map.op_account) {
      if (a > map.names.size()) abort();
    }
    bfc::Allocator alloc(std::make_unique<bfc::VirtualSubAllocator>(kLimit),
                         kLimit, "fuzz");
    (void)bfc::tools::ProfileReplay(trace, alloc, &*phases, 16);
    bfc::Allocator charged(std::make_unique<bfc::VirtualSubAllocator>(kLimit),
                           kLimit, "fuzz-accounts");
    bfc::ReplayAccounts accounts;
    if (accounts
            .Open(&charged, map.names,
                  [&map](size_t i) { return map.op_account[i]; })
            .ok()) {
      bfc::ReplayOptions ro;
      accounts.Attach(&ro);
      (void)bfc::ReplayTrace(trace, charged, ro);
    }
    accounts.Close();
  }
  return 0;
}
