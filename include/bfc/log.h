// File: bfc/log.h
// -----------------------------------------------------------------------------
//
// Where the library's messages go. Abseil 20220623 (the version Debian ships)
// has no `absl/log`, and a host runtime usually has its own logger, so every
// message the library emits goes through one process-wide, replaceable sink:
// stderr by default.
//
// Example: route bfc's messages into your runtime's logger.
//
//   bfc::SetLogSink([](bfc::LogSeverity s, std::string_view msg) {
//     MyLogger::Write(s == bfc::LogSeverity::kError ? "E" : "W", msg);
//   });
//
// Thread safety: SetLogSink and Log may be called from any thread. An
// allocator sends its messages (out-of-memory reports, a caller's invalid
// free or request, StreamOps and sub-allocator failures, destruction
// reports) with no allocator lock held: they are queued under its lock and
// sent once it is released. So the sink may call back into that allocator or
// any other (read stats, print a summary, even allocate), and may take locks
// of its own. Sent with the lock still held: what is queued when the
// library aborts (Options::abort_on_invalid_input, a broken invariant at
// BFC_CHECK_LEVEL 2), sent first so that it is not lost, and a message the
// host had no memory to queue. Log itself throws nothing: with no memory to
// copy the sink, a message goes to stderr. What user code the allocator calls
// under its lock logs through Log() (a SubAllocator, its visitors, StreamOps)
// is queued with the allocator's own messages (bfc/internal/log_queue.h). The C
// ABI creates a device's allocator under its registry lock, so a sink must not
// call the C ABI for a device that is not created yet while handling the
// constructor's messages (an invalid option, say).
#ifndef BFC_LOG_H_
#define BFC_LOG_H_

#include <functional>
#include <string_view>

namespace bfc {

enum class LogSeverity { kInfo = 0, kWarning = 1, kError = 2 };

// Returns "I", "W" or "E".
const char* LogSeverityName(LogSeverity severity);

using LogSink =
    std::function<void(LogSeverity severity, std::string_view message)>;

// A sink that throws does not break the caller: Log catches the exception and
// writes a note naming it, then the message, to stderr.
//
// Replaces the process-wide sink and returns the previous one. An empty sink
// restores the default (one line per message on stderr).
LogSink SetLogSink(LogSink sink);

// Sends `message` to the current sink.
void Log(LogSeverity severity, std::string_view message);

}  // namespace bfc

#endif  // BFC_LOG_H_
