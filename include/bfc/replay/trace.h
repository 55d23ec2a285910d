// File: bfc/replay/trace.h
// -----------------------------------------------------------------------------
//
// Allocation traces in RAPIDS RMM's `logging_resource_adaptor` CSV format:
//
//   Thread,Time,Action,Pointer,Size,Stream
//   14666,0.000400172,allocate,0x293b5880,37632,0
//   14666,0.000512345,free,0x293b5880,37632,0
//
// Action is `allocate`, `free` or `allocate failure`. Files may be plain
// `.csv` or gzip-compressed `.csv.gz`. The original Pointer is used only to
// pair a free with its allocation.
//
// A Trace is parsed text; CompileTrace turns it into replay operations whose
// pointers are dense slot indices, so a replay loop does no hashing.
//
// Thread-compatible.
#ifndef BFC_TRACE_H_
#define BFC_TRACE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace bfc {

struct TraceEvent {
  enum class Action : uint8_t { kAllocate, kFree, kAllocateFailure };
  Action action = Action::kAllocate;
  uint64_t thread = 0;
  double time = 0;
  uint64_t pointer = 0;  // the original address: pairing only
  size_t size = 0;
  uint64_t stream = 0;
  size_t line = 0;  // 1-based line in the file (the header is line 1)
};

struct Trace {
  std::string name;  // file name without directories and extensions
  std::vector<TraceEvent> events;
  // What messages about the trace's lines name, so that CompileTrace's
  // errors point where ParseTrace's and ReadTrace's do: the path ReadTrace
  // read ("standard input" for "-"), or ParseTrace's name. Empty in a Trace
  // built by hand; then messages name `name`.
  std::string source;
};

// Parses CSV text: RAPIDS RMM's logging_resource_adaptor log as every
// generation writes it (tests/data/formats): the header
// `Thread,Time,Action,Pointer,Size,Stream` (columns after Stream ignored) or
// none (rows from the first line); Action allocate, free (or deallocate) or
// `allocate failure`, whose pointer may be a null spelling ((nil), (null),
// 0x0, empty); Stream in decimal, hex with or without 0x, or null; Time in
// seconds or HH:MM:SS.ffffff. Errors name the line and say what is wrong.
absl::StatusOr<Trace> ParseTrace(std::string_view csv, std::string name);

// The path ReadTrace reads as standard input (a file named "-" is "./-").
inline constexpr char kStandardInputPath[] = "-";

// Reads a trace file, plain or gzip-compressed (detected from its first two
// bytes, whatever its name). Any file that can be read once from start to
// end works: a regular file, a FIFO, a pipe (/dev/stdin, /dev/fd/N as bash's
// `<(...)` gives), standard input as "-" (Trace::name "stdin"); nothing is
// rewound. Gzip is read as gzip -d reads it: concatenated members are one
// stream, and each must be complete (a file cut short or missing its trailer
// is DataLoss, never a shorter trace).
//
// Errors name the path (and the line, for a malformed row): NotFound for a
// missing file, PermissionDenied for one that cannot be opened,
// InvalidArgument for a directory or a malformed row, DataLoss for a read
// error or corrupt or truncated gzip data, ResourceExhausted for a trace that
// does not fit in memory. Never throws.
absl::StatusOr<Trace> ReadTrace(const std::string& path);

struct ReadTraceOptions {
  // The most bytes of trace text (after gzip decompression) read into memory;
  // a trace with more is ResourceExhausted as soon as the text passes it,
  // naming the limit. 0: a quarter of the memory this process may use
  // (physical memory, or a container's cgroup limit when lower; the parsed
  // events take about as much again). A few megabytes of gzip can
  // inflate to terabytes, and on Linux a string grown past the memory there
  // is does not fail: the process is killed.
  size_t max_text_bytes = 0;
};
// ReadTrace with a limit on the text read (ReadTraceOptions).
absl::StatusOr<Trace> ReadTrace(const std::string& path,
                                const ReadTraceOptions& options);

// One replay step. `slot` is a dense index standing for the original pointer.
struct ReplayOp {
  enum class Kind : uint8_t { kAllocate, kFree };
  Kind kind = Kind::kAllocate;
  // Index into CompiledTrace::streams of the row's Stream (0: stream 0, the
  // default one). Only a replay with ReplayOptions::streams uses it.
  uint16_t stream = 0;
  uint32_t slot = 0;
  size_t size = 0;         // allocate: bytes asked; free: the allocation's size
  size_t event_index = 0;  // index among the trace's data rows (0-based)
};

struct CompiledTrace {
  std::string name;
  std::vector<ReplayOp> ops;
  size_t num_slots = 0;          // distinct slots used
  size_t num_events = 0;         // data rows in the trace
  size_t num_failure_rows = 0;   // `allocate failure` rows (not replayed)
  size_t num_unknown_frees = 0;  // frees skipped (only with skip_unknown_frees)
  size_t peak_live_bytes = 0;    // max over time of live requested bytes
  size_t peak_live_rounded_bytes = 0;  // same with sizes rounded up to 256
  // The distinct Stream values, in order of first use; streams[0] is 0 (the
  // default stream) whether or not the trace uses it.
  std::vector<uint64_t> streams{0};
};

struct CompileOptions {
  // A free of a pointer that is not live is an error (naming its line) unless
  // this is set; then it is skipped and counted.
  bool skip_unknown_frees = false;
};

absl::StatusOr<CompiledTrace> CompileTrace(
    const Trace& trace, const CompileOptions& options = CompileOptions());

}  // namespace bfc

#endif  // BFC_TRACE_H_
