// File: src/core/log.cc
// The process-wide log sink. The default writes one line per message to
// stderr; a host runtime replaces it with SetLogSink.
#include "bfc/log.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/base/const_init.h"
#include "absl/base/thread_annotations.h"
#include "bfc/internal/mutex.h"

namespace bfc {
namespace internal {

// Constant-initialized, and trivially destructible outside TSan builds:
// usable before main and during static destruction.
ABSL_CONST_INIT Mutex log_sink_mutex(absl::kConstInit);

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
  // Copy the sink so a slow sink does not hold the lock, and a sink may
  // itself call SetLogSink.
  LogSink current;
  {
    internal::MutexLock lock(&internal::log_sink_mutex);
    if (sink != nullptr && *sink) current = *sink;
  }
  if (current) {
    current(severity, message);
  } else {
    DefaultSink(severity, message);
  }
}

}  // namespace bfc
