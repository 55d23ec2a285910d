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
// allocator's out-of-memory report reaches the sink with no allocator lock
// held: the sink may look at any allocator then (every device's usage, say).
// Other messages (a caller's invalid free or request, StreamOps and
// sub-allocator failures, destruction reports) come with the logging
// allocator's lock held: the sink must not call back into that allocator,
// and should not call into another one either (two allocators logging such
// messages at once would each wait for the other's lock).
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
