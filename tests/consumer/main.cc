// A consumer of the installed bfc package, linked by the target names the
// README uses (bfc::bfc, bfc::replay, bfc::report, bfc::planner): allocates
// and validates, replays a small trace, renders a dump as JSON and plans the
// same trace offline. Exit status 0 means every layer linked and worked.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bfc/allocator.h"
#include "bfc/host_sub_allocator.h"
#include "bfc/planner/memory_management.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"
#include "bfc/report/memory_dump_json.h"

namespace {

// bfc::bfc
int Core(bfc::Allocator& alloc) {
  void* p = alloc.AllocateRaw(256, 1000);
  if (p == nullptr || alloc.AllocatedSize(p) != 1024) return 1;
  static_cast<char*>(p)[999] = 1;  // host memory is writable
  alloc.DeallocateRaw(p);
  if (!alloc.Validate().ok() || alloc.GetStats()->bytes_in_use != 0) return 2;
  return 0;
}

// bfc::replay: an RMM log (two live blocks, then both freed) replayed.
int Replay(bfc::Allocator& alloc) {
  const char* csv =
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "1,0.1,allocate,0x1000,4096,0\n"
      "1,0.2,allocate,0x2000,100,0\n"
      "1,0.3,free,0x1000,4096,0\n"
      "1,0.4,free,0x2000,100,0\n";
  absl::StatusOr<bfc::Trace> trace = bfc::ParseTrace(csv, "consumer");
  if (!trace.ok()) return 3;
  absl::StatusOr<bfc::CompiledTrace> compiled = bfc::CompileTrace(*trace);
  if (!compiled.ok()) return 4;
  absl::StatusOr<bfc::ReplaySummary> summary =
      bfc::ReplayTrace(*compiled, alloc);
  if (!summary.ok() || summary->allocations != 2 || summary->failures != 0) {
    return 5;
  }
  return 0;
}

// bfc::report
int Report(const bfc::Allocator& alloc) {
  const std::string json = bfc::MemoryDumpToJson(alloc.RecordMemoryMap());
  absl::StatusOr<bfc::MemoryDump> back = bfc::MemoryDumpFromJson(json);
  return back.ok() ? 0 : 6;
}

// bfc::planner: the same two blocks' lifetimes planned offline.
int Planner() {
  using Record = bfc::planner::TensorUsageRecord<size_t>;
  const std::vector<Record> records = {Record(4096, 0, 2), Record(100, 1, 3)};
  bfc::planner::OffsetsAssignment plan;
  if (!bfc::planner::AssignOffsetsToTensors(
           records, bfc::planner::MemoryStrategy::GREEDY_BY_SIZE, &plan)
           .ok()) {
    return 7;
  }
  // Both live at task 1: they may not share bytes.
  return plan.total_size >= 4096 + 100 ? 0 : 8;
}

}  // namespace

int main() {
  bfc::Allocator alloc(std::make_unique<bfc::HostSubAllocator>(),
                       size_t{64} << 20, "consumer");
  for (int rc : {Core(alloc), Replay(alloc), Report(alloc), Planner()}) {
    if (rc != 0) {
      std::printf("consumer failed: %d\n", rc);
      return rc;
    }
  }
  std::printf("consumer ok: %s\n",
              alloc.RenderOccupancy().substr(0, 10).c_str());
  return 0;
}
