// File: bfc/report/replay_report.h
// -----------------------------------------------------------------------------
//
// A whole replay, made visible: what bfc-replay's --json, --svg and --html
// write. BuildReplayReport replays a CompiledTrace (bfc/replay/trace.h) against
// a fresh allocator and records, after every op, the bytes callers have live
// (requested), the bytes in use (whole chunks), the pool held from the
// sub-allocator and TF's external fragmentation metric; then it takes a
// MemoryDump (bfc/memory_dump.h) at the peak of bytes in use and at the end
// of the trace (before anything left live is freed).
//
// The peak snapshot needs the allocator as it was at the peak, which is only
// known once the trace has been replayed: the replay is deterministic, so a
// second replay into a second fresh allocator stops there to take it. Hence
// `make_allocator` is called twice; both allocators must be configured alike.
//
// The HTML page (RenderReplayReportHtml) is one self-contained file: inline
// script, style and data, no network. It draws the four series over the
// event index in one chart, both memory maps (hover or click a chunk for its
// address, sizes, allocation id and site), and the summary numbers. Its
// template is tools/viewer/viewer.html, embedded at build time.
//
// Example:
//
//   auto make = [] {
//     return std::make_unique<bfc::Allocator>(
//         std::make_unique<bfc::VirtualSubAllocator>(size_t{16} << 30),
//         size_t{16} << 30, "replay");
//   };
//   absl::StatusOr<bfc::ReplayReport> r = bfc::BuildReplayReport(*ops, make);
//   std::ofstream("report.html") << bfc::RenderReplayReportHtml(*r);
//
// Thread-compatible; the functions are thread-safe.
#ifndef BFC_REPLAY_REPORT_H_
#define BFC_REPLAY_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/memory_dump.h"
#include "bfc/replay/replay.h"
#include "bfc/replay/trace.h"

namespace bfc {

// The bytes charged to one account (bfc/account.h) after each op, parallel
// to the timeline's other series: what the viewer's per-account chart draws.
struct ReplayAccountSeries {
  std::string path;                   // "replay/iter0"
  std::vector<int64_t> bytes_in_use;  // AccountStats::bytes_in_use
};

// One sample per replayed op, parallel vectors.
struct ReplayTimeline {
  std::vector<uint64_t> event_index;  // the op's row in the trace (0-based)
  std::vector<int64_t> live_bytes;    // requested bytes of live allocations
  std::vector<int64_t> in_use_bytes;  // whole chunks in use
  std::vector<int64_t> pool_bytes;    // regions held
  std::vector<double> fragmentation;  // AllocatorStats::fragmentation
  // With ReplayReportOptions::account_names: one series per account, in
  // their order; empty otherwise.
  std::vector<ReplayAccountSeries> accounts;

  size_t size() const { return event_index.size(); }
};

struct ReplaySnapshot {
  std::string label;      // "peak" or "end"
  uint64_t op_index = 0;  // taken after this op
  uint64_t event_index = 0;
  MemoryDump dump;
};

// One event of the first replay's allocator history
// (Allocator::RecordMemoryHistory), tied to the op it happened in and, when
// the source trace was given, to that op's row: what the viewer scrubs
// through and what the PyTorch snapshot's trace holds.
struct ReplayHistoryEvent {
  MemoryEvent event;
  uint64_t op_index = 0;  // index into the timeline (and CompiledTrace::ops)
  uint64_t line = 0;      // 1-based line of the op's row in the trace file
  uint64_t pointer = 0;   // the row's original pointer (0: unknown)
};

struct ReplayReport {
  std::string trace_name;
  ReplaySummary summary;  // of the first replay
  ReplayTimeline timeline;
  std::vector<ReplaySnapshot> snapshots;  // peak, then end
  // Every allocation, free, region change and failure of the first replay,
  // in order; empty when ReplayReportOptions::history was off.
  std::vector<ReplayHistoryEvent> history;
  // Whether `history` was recorded (an empty trace records an empty one).
  // A report without one is written without "history", so that the viewer
  // turns scrubbing off rather than scrub an empty history.
  bool has_history = true;
};

struct ReplayReportOptions {
  ReplayOptions replay;  // its after_op is replaced; on_allocate is kept
  // Called every few thousand ops of each pass and once at its end with
  // (ops done so far over both passes, ops of both passes).
  std::function<void(size_t done, size_t total)> progress;
  // Record ReplayReport::history (about 64 bytes per allocation or free).
  bool history = true;
  // The trace `trace` was compiled from: gives history events their line
  // and original pointer. Optional; must outlive the call.
  const Trace* source = nullptr;
  // Accounts: on each allocator it makes, the report opens a root account
  // "replay" with one child per name (unique, no '/'), charges allocate op i
  // to child account_of_op(i) (an index into account_names; anything else:
  // the root), and records each child's bytes in use after every op
  // (ReplayTimeline::accounts: 8 bytes per account per op, in memory and,
  // as text, in the JSON). Empty: no accounts.
  std::vector<std::string> account_names;
  std::function<size_t(size_t op_index)> account_of_op;
};

// Errors: those of Replayer::Run (an inconsistent trace), Internal when
// make_allocator returns nullptr, InvalidArgument for account names an
// account cannot have (Account::CreateChild's message).
absl::StatusOr<ReplayReport> BuildReplayReport(
    const CompiledTrace& trace,
    const std::function<std::unique_ptr<Allocator>()>& make_allocator,
    const ReplayReportOptions& options = ReplayReportOptions());

// {"format": "bfc-replay-report", "version": 1, "trace": NAME,
//  "summary": {...every ReplaySummary field...},
//  "timeline": {"event_index": [...], "live_bytes": [...], ...,
//               "accounts": [{"path": P, "bytes_in_use": [...]}, ...]},
//  ("accounts" only when the replay had accounts)
//  "snapshots": [{"label", "op_index", "event_index", "dump": MEMORY DUMP}],
//  "history": {"action": [...], "op_index": [...], "address": [...],
//              "size": [...], "requested_size": [...],
//              "allocation_id": [...], "time_us": [...], "line": [...],
//              "pointer": ["0x...", ...]}}
// with MEMORY DUMP as in bfc/memory_dump.h and one column entry per history
// event ("action": MemoryEvent::Action's value; "pointer" a hex string, ""
// when unknown, as JavaScript numbers cannot hold every 64-bit pointer).
// "history" is written only when the report has one (has_history);
// "history" and "timeline.accounts" are optional when read (reports written
// before they existed, or without history). A report has at least one
// snapshot, and each snapshot's op_index lies on the timeline.
std::string ReplayReportToJson(const ReplayReport& report, int indent = -1);
absl::StatusOr<ReplayReport> ReplayReportFromJson(std::string_view json);

// The self-contained viewer page.
std::string RenderReplayReportHtml(const ReplayReport& report);

}  // namespace bfc

#endif  // BFC_REPLAY_REPORT_H_
