// File: tools/tool_io.h
// -----------------------------------------------------------------------------
//
// Files in and out of the command-line tools (bfc-replay, bfc-plan), in one
// place so that both keep the same promise: a tool never destroys a user's
// file.
//
//   * Outputs are written to a temporary file in the destination's directory
//     and renamed over the destination only once everything was written, so a
//     failed or interrupted run leaves an existing file as it was
//     (WriteFileAtomically).
//   * An output may not name an input or another output (CheckDistinctPaths),
//     nor an existing file that looks like a trace: `--html my_trace.csv`,
//     with the output name forgotten, is refused rather than obeyed
//     (CheckOutputPath).
//   * Inputs: "-" is standard input; a pipe or FIFO is read as a stream; a
//     directory, an unreadable path or a truncated .gz is an error with a
//     message, never an abort (ReadTraceArg).
//
// Thread safety: single-threaded programs only (WriteFileAtomically installs
// signal handlers for the duration of the write).
#ifndef BFC_TOOLS_TOOL_IO_H_
#define BFC_TOOLS_TOOL_IO_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bfc/replay/trace.h"

namespace bfc::tools {

// The path that means standard input (for a trace) or standard output (for
// an output that allows it).
inline constexpr char kStdioPath[] = "-";

// Writes `contents` to `path` through a temporary file in the same directory,
// flushed to disk and renamed into place. A symlink at `path` is followed (the
// file it names is replaced, the link stays). An existing file keeps its
// permission bits; a new one gets 0666 minus the umask; one the user may not
// write is refused (a rename needs only the directory's permission). A
// symlink that leads nowhere yet creates its target. On any failure the
// temporary file is removed and `path` is untouched; SIGINT, SIGTERM and
// SIGHUP during the write remove the temporary file too. An existing file that
// is not a regular file (/dev/null, a FIFO) is written to in place, never
// replaced; a path naming one of this process's descriptors (/dev/stdout,
// /dev/stderr, /dev/fd/N, /proc/self/fd/N) is written through that
// descriptor, at its offset, even when the shell opened it on a regular
// file. Errors name the path and the system's reason.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents);

// Whether an existing regular file at `path` looks like an allocation trace
// (or another input the tools read): its name ends in .csv, .csv.gz or .gz,
// or its first bytes are RMM's CSV header or gzip's magic number.
bool LooksLikeTrace(const std::string& path);

// Whether the file is fit to be an output's destination, before any work is
// done. "" when it is; otherwise why not, in one line: an existing directory,
// an existing file that LooksLikeTrace or that the user may not write, a
// parent directory that does not exist, or "-" when `stdout_ok` is false.
std::string CheckOutputPath(const std::string& path, bool stdout_ok);

// A path as the user gave it, and the flag that gave it ("TRACE" for a
// positional input), for messages.
struct NamedPath {
  std::string flag;
  std::string path;
};

// Whether `a` and `b` name the same file: the same device and inode when both
// exist, else the same normalized absolute path (NormalizePath) once a final
// symlink that leads nowhere yet is followed (writing through it creates its
// target).
bool SameFile(const std::string& a, const std::string& b);

// An absolute path with ".", ".." and repeated slashes removed, and the
// existing directory part resolved through symlinks (realpath).
std::string NormalizePath(const std::string& path);

// InvalidArgument naming both flags and the path when an output names the
// same file as an input or as another output. An input "-" is whatever
// standard input was opened on (`tool - --json x < x` is refused); an output
// "-" goes where the shell sent standard output and is never checked.
absl::Status CheckDistinctPaths(const std::vector<NamedPath>& inputs,
                                const std::vector<NamedPath>& outputs);

// Reads a trace given on the command line: bfc::ReadTrace, which reads "-" as
// standard input and pipes, FIFOs and /dev/fd/N as streams (plain or gzip,
// nothing rewound), and refuses a directory or an incomplete gzip file with a
// message naming the path. Every error is bad input (exit status 1).
absl::StatusOr<Trace> ReadTraceArg(const std::string& path);

// A tool's exit status once standard output is flushed: `status` when
// everything written there arrived; otherwise, after a message naming the
// system's reason (a full disk, a closed pipe), 1 (an output not written)
// unless `status` already reports an error of its own.
int FinishStandardOutput(const char* tool, int status);

// The directory of the running executable (/proc/self/exe), or "" when it
// cannot be found.
std::string ExecutableDir();

// `text` (a file, trace, phase or account name) for a terminal: control
// characters (C0, DEL, and C1 as UTF-8 writes them, U+0080-U+009F) become
// \xNN, so that a name cannot move the cursor or clear the screen; a
// backslash becomes \\ so that the escapes read back unambiguously.
// Everything else, UTF-8 included, is kept.
std::string ForTerminal(std::string_view text);

// The planner's progress calls (PlanOptions::on_progress) for a line on a
// terminal: they come before each row and again now and then while a long
// row runs. Update says whether to redraw at `now` (the first call for a
// row, then at most four times a second) and sets *seconds to how long the
// row has been running. Reset before the next trace.
class RowProgress {
 public:
  bool Update(size_t row, size_t rows, absl::Time now, int64_t* seconds);
  void Reset() { drawn_ = absl::InfinitePast(); }

 private:
  size_t row_ = 0;
  size_t rows_ = 0;
  absl::Time row_start_;
  absl::Time drawn_ = absl::InfinitePast();
};

}  // namespace bfc::tools

#endif  // BFC_TOOLS_TOOL_IO_H_
