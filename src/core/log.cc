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
// This thread's innermost ScopedLogDeferral: where Log() queues instead of
// sending.
ABSL_CONST_INIT thread_local const ScopedLogDeferral* deferral = nullptr;
}  // namespace

ScopedLogDeferral::ScopedLogDeferral(LogQueue* queue)
    : queue_(queue), outer_(deferral) {
  deferral = this;
}

ScopedLogDeferral::~ScopedLogDeferral() { deferral = outer_; }

}  // namespace internal

namespace {

// Heap-allocated and never destroyed: logging may happen during static
// destruction (an allocator destroyed at exit reporting leaks).
LogSink* sink ABSL_GUARDED_BY(internal::log_sink_mutex) = nullptr;

void DefaultSink(LogSeverity severity, std::string_view message) noexcept {
  // One write per line where there is memory for it (lines from several
  // threads stay whole); otherwise in pieces, under stdio's lock.
  try {
    std::string line = std::string("[bfc ") + LogSeverityName(severity) + "] ";
    line.append(message.data(), message.size());
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stderr);
    return;
  } catch (...) {
  }
  flockfile(stderr);
  std::fputs("[bfc ", stderr);
  std::fputs(LogSeverityName(severity), stderr);
  std::fputs("] ", stderr);
  std::fwrite(message.data(), 1, message.size(), stderr);
  std::fputc('\n', stderr);
  funlockfile(stderr);
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

namespace {

// Sends to the sink, past any deferral. Throws nothing: it runs from
// destructors (an allocator's lock release sends its queue), so a host out of
// memory here must not become std::terminate. Without memory to copy the
// sink (a std::function), the message goes to stderr instead.
void SendNow(LogSeverity severity, std::string_view message) noexcept {
  // Copy the sink so a slow sink does not hold the lock, and a sink may
  // itself call SetLogSink.
  LogSink current;
  try {
    internal::MutexLock lock(&internal::log_sink_mutex);
    if (sink != nullptr && *sink) current = *sink;
  } catch (...) {
    DefaultSink(severity, message);
    return;
  }
  if (!current) {
    DefaultSink(severity, message);
    return;
  }
  // A sink is user code below the library's noexcept boundary: what it throws
  // is reported on stderr with the message it was given, never propagated.
  const char* what = "an exception that is not a std::exception";
  std::string what_text;
  try {
    current(severity, message);
    return;
  } catch (const std::exception& e) {
    try {
      what_text = e.what();
      what = what_text.c_str();
    } catch (...) {
      what = "an exception whose message there was no memory to copy";
    }
  } catch (...) {
  }
  std::string note;
  try {
    note = std::string("the log sink threw (") + what +
           "); the message it was given follows";
  } catch (...) {
    // No memory for the note: the short form below.
  }
  DefaultSink(LogSeverity::kError, note.empty()
                                       ? std::string_view("the log sink threw")
                                       : std::string_view(note));
  DefaultSink(severity, message);
}

}  // namespace

namespace internal {

void SendQueuedLogsBeforeAbort(LogQueue* own) {
  // Outermost first: its messages were queued before the inner ones.
  const ScopedLogDeferral* chain[64];
  size_t n = 0;
  for (const ScopedLogDeferral* d = deferral; d != nullptr && n < 64;
       d = d->outer_) {
    chain[n++] = d;
  }
  while (n > 0) {
    LogQueue* q = chain[--n]->queue_;
    for (const auto& [severity, message] : *q) SendNow(severity, message);
    q->clear();
  }
  if (own != nullptr) {
    for (const auto& [severity, message] : *own) SendNow(severity, message);
    own->clear();
  }
}

}  // namespace internal

void Log(LogSeverity severity, std::string_view message) {
  if (const internal::ScopedLogDeferral* d = internal::deferral) {
    try {
      d->queue_->emplace_back(severity, std::string(message));
      return;
    } catch (...) {
      // No host memory to queue it: sent now rather than lost.
    }
  }
  SendNow(severity, message);
}

}  // namespace bfc
