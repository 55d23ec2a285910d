// File: bfc/internal/log_queue.h
// -----------------------------------------------------------------------------
//
// Messages held back until a lock is released. An allocator queues its own
// messages under its lock and sends them once it is released (Allocator::Lock
// in bfc/allocator.h), so a log sink may call back into it. User code the
// allocator calls under that lock (a SubAllocator, StreamOps) may log too,
// through bfc::Log: a ScopedLogDeferral around such a call makes Log() on
// this thread append to the allocator's queue instead of calling the sink.
#ifndef BFC_INTERNAL_LOG_QUEUE_H_
#define BFC_INTERNAL_LOG_QUEUE_H_

#include <string>
#include <utility>
#include <vector>

#include "bfc/log.h"

namespace bfc::internal {

using LogQueue = std::vector<std::pair<LogSeverity, std::string>>;

// While alive, Log() on the constructing thread appends to `queue` (one the
// caller guards, e.g. under its lock) instead of sending; nested deferrals
// restore the outer one. A message that cannot be queued (no host memory) is
// sent at once. Not movable: it restores the thread's state on destruction.
class ScopedLogDeferral {
 public:
  explicit ScopedLogDeferral(LogQueue* queue);
  ~ScopedLogDeferral();
  ScopedLogDeferral(const ScopedLogDeferral&) = delete;
  ScopedLogDeferral& operator=(const ScopedLogDeferral&) = delete;

 private:
  friend void SendQueuedLogsBeforeAbort(LogQueue* own);
  friend void ::bfc::Log(LogSeverity severity, std::string_view message);
  LogQueue* const queue_;
  const ScopedLogDeferral* const outer_;
};

// For a path about to abort, after which no lock release sends anything:
// sends at once, past every deferral, what this thread's deferrals hold
// (outermost, oldest, first), then `own` (an allocator's queue, under its
// lock), clearing them.
void SendQueuedLogsBeforeAbort(LogQueue* own);

}  // namespace bfc::internal

#endif  // BFC_INTERNAL_LOG_QUEUE_H_
