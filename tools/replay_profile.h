// File: tools/replay_profile.h
// -----------------------------------------------------------------------------
//
// What bfc-replay measures beyond the summary: the phases of a trace (from a
// NAME.phases.csv file, `Phase,FirstEvent,Time`, as the shared traces carry
// in meta/) and, per replay, the pool and live bytes over the events and the
// sub-allocator calls of the last training or inference iteration.
//
// The profile is a second replay of the same trace into a fresh allocator
// configured like the first, with a callback after every op that reads the
// allocator's stats. The allocator is deterministic, so the second replay
// makes the same sub-allocator calls as the timed one; keeping the callback
// out of the timed replay keeps its ns/op honest.
//
// Phase files: CSV, a header line naming the columns `Phase` and `FirstEvent`
// (others, such as `Time`, are ignored), then one line per phase with its
// name and the 0-based index of its first event among the trace's data rows;
// indices must not decrease and may not pass the trace's event count (the
// last phase, `end`, usually equals it). Blank lines, a UTF-8 byte order mark
// and CRLF line ends are accepted. A phase runs to the next phase's first
// event (the last one to the end of the trace). Iterations are the phases
// named iterN.
//
// Thread safety: thread-compatible.
#ifndef BFC_TOOLS_REPLAY_PROFILE_H_
#define BFC_TOOLS_REPLAY_PROFILE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bfc/allocator.h"
#include "bfc/replay/trace.h"

namespace bfc::tools {

struct TracePhase {
  std::string name;
  size_t first_event = 0;
  size_t end_event = 0;  // one past the last event
};

struct TracePhases {
  std::string path;  // the file they came from
  std::vector<TracePhase> phases;

  // Phases named iter<digits>, and the last of them (nullptr when none).
  size_t NumIterations() const;
  const TracePhase* LastIteration() const;
};

// Reads a phase file for a trace of `num_events` events. InvalidArgument
// (NotFound for a missing file) naming the file and, for a bad line, its
// number and what is wrong: no header or one without the Phase and
// FirstEvent columns, a missing column, an empty name, a FirstEvent that is
// not a whole number, an index that decreases or passes `num_events`, no
// phase at all; also a directory, "-" (standard input is not read) and a
// file over 16 MiB (never read whole). Never throws.
absl::StatusOr<TracePhases> ReadTracePhases(const std::string& path,
                                            size_t num_events);

// <directory of trace_path>/meta/<trace_name>.phases.csv when that file
// exists, else "" (also for "-", standard input).
std::string FindPhasesFile(const std::string& trace_path,
                           const std::string& trace_name);

// The sub-allocator calls and pool peak over one phase of a replay.
struct PhaseProfile {
  std::string phase;
  size_t events = 0;
  int64_t sub_allocator_allocs = 0;  // regions obtained during the phase
  int64_t sub_allocator_frees = 0;   // regions given back during the phase
  int64_t peak_pool_bytes = 0;       // the largest pool during the phase
};

struct ReplayProfile {
  std::optional<PhaseProfile> last_iteration;  // with phases that have one
  size_t iterations = 0;
  // Pool and live bytes after each op, the maximum of each bucket of events
  // (at most max_points each; empty when max_points is 0).
  std::vector<int64_t> pool_bytes;
  std::vector<int64_t> live_bytes;
  int64_t sub_allocator_allocs = 0;  // over the whole replay
  int64_t sub_allocator_frees = 0;
};

// bfc-replay --accounts: one account per distinct phase name, in order of
// first appearance (empty phases included), and for each op of a trace the
// index of the account of the phase its event falls in (names.size() for an
// op in no phase).
struct PhaseAccountMap {
  std::vector<std::string> names;
  std::vector<uint32_t> op_account;
};
PhaseAccountMap MapOpsToPhases(const CompiledTrace& trace,
                               const TracePhases& phases);

// Replays `trace` into `allocator` (fresh: its counters are taken as the
// start) with a stats read after every op. `phases` may be null. `streams`:
// ReplayOptions::streams (the allocator must have its StreamOps). Errors are
// the replayer's (an inconsistent trace).
absl::StatusOr<ReplayProfile> ProfileReplay(const CompiledTrace& trace,
                                            Allocator& allocator,
                                            const TracePhases* phases,
                                            size_t max_points,
                                            bool streams = false);

}  // namespace bfc::tools

#endif  // BFC_TOOLS_REPLAY_PROFILE_H_
