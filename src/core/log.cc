// File: src/core/log.cc
// The process-wide log sink. The default writes one line per message to
// stderr; a host runtime replaces it with SetLogSink.
#include "bfc/log.h"

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "bfc/internal/log_queue.h"
#include "bfc/internal/mutex.h"

namespace bfc {
namespace internal {

// Constant-initialized, and trivially destructible outside TSan builds:
// usable before main and during static destruction.
ABSL_CONST_INIT Mutex log_sink_mutex(absl::kConstInit);

namespace {
// Where Log() on this thread queues instead of sending (ScopedLogDeferral).
ABSL_CONST_INIT thread_local LogQueue* deferred_to = nullptr;
}  // namespace

ScopedLogDeferral::ScopedLogDeferral(LogQueue* queue) : previous_(deferred_to) {
  deferred_to = queue;
}

ScopedLogDeferral::~ScopedLogDeferral() { deferred_to = previous_; }

}  // namespace internal

namespace {

// Heap-allocated and never destroyed: logging may happen during static
// destruction (an allocator destroyed at exit reporting leaks).
LogSink* sink ABSL_GUARDED_BY(internal::log_sink_mutex) = nullptr;

void DefaultSink(LogSeverity severity, std::string_view message) {
  std::string line = std::string("[bfc ") + LogSeverityName(severity) + "] ";
  line.append(message.data(), message.size());
  line.push_back('\n');
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace

const char* LogSeverityName(LogSeverity severity) {
  switch (severity) {
    case LogSeverity::kInfo:
      return "I";
    case LogSeverity::kWarning:
      return "W";
    case LogSeverity::kError:
      return "E";
  }
  return "?";
}

LogSink SetLogSink(LogSink new_sink) {
  internal::MutexLock lock(&internal::log_sink_mutex);
  LogSink previous = sink != nullptr ? *sink : LogSink();
  if (sink == nullptr) sink = new LogSink();
  *sink = std::move(new_sink);
  return previous;
}

void Log(LogSeverity severity, std::string_view message) {
  if (internal::LogQueue* queue = internal::deferred_to) {
    try {
      queue->emplace_back(severity, std::string(message));
      return;
    } catch (...) {
      // No host memory to queue it: sent now rather than lost.
    }
  }
  // Copy the sink so a slow sink does not hold the lock, and a sink may
  // itself call SetLogSink.
  LogSink current;
  {
    internal::MutexLock lock(&internal::log_sink_mutex);
    if (sink != nullptr && *sink) current = *sink;
  }
  if (!current) {
    DefaultSink(severity, message);
    return;
  }
  // A sink is user code below the library's noexcept boundary: what it throws
  // is reported on stderr with the message it was given, never propagated.
  std::string what;
  try {
    current(severity, message);
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  DefaultSink(LogSeverity::kError, std::string("the log sink threw (") + what +
                                       "); the message it was given follows");
  DefaultSink(severity, message);
}

}  // namespace bfc
