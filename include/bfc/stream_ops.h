// File: bfc/stream_ops.h
// -----------------------------------------------------------------------------
//
// What the allocator needs from a device's streams and events to reuse memory
// across streams safely (stream-ordered reuse; README "Streams"). The
// allocator stamps a chunk freed on stream P with a fence (P, sequence) and
// makes no call here for that: same-stream reuse needs none. Only when
// another stream S wants the chunk does it record an event on P (lazily,
// covering every free on P so far), query it, make S wait for it, or, on the
// out-of-memory path, synchronize it.
//
// Implementations: bfc::CudaStreamOps (bfc/cuda_stream_ops.h: the CUDA driver
// table, events pooled per device) and the tests' simulated streams
// (tests/testing/fake_stream_ops.h).
//
// Thread safety: the allocator calls these with its mutex held, one call at a
// time per allocator; an implementation shared by several allocators must be
// thread-safe. Calls must not call back into the allocator.
#ifndef BFC_STREAM_OPS_H_
#define BFC_STREAM_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace bfc {

// An opaque stream handle: a cudaStream_t / CUstream value (PyTorch, CuPy and
// RMM pass theirs through unchanged). nullptr is the legacy default stream,
// which is also the implicit stream of every call that names none.
using StreamId = void*;
inline constexpr StreamId kImplicitStream = nullptr;

class StreamOps {
 public:
  // An opaque event handle, valid until ReleaseEvent.
  using Event = void*;

  virtual ~StreamOps() = default;

  // An event recorded on `stream` now: it completes when all work queued on
  // `stream` before this call has completed.
  virtual absl::StatusOr<Event> RecordEvent(StreamId stream) = 0;
  // True once the work `event` captured has completed; false while pending.
  virtual absl::StatusOr<bool> QueryEvent(Event event) = 0;
  // Work queued on `stream` after this call waits for `event` (on the
  // device: the host does not block).
  virtual absl::Status StreamWaitEvent(StreamId stream, Event event) = 0;
  // Blocks the calling thread until `event` has completed.
  virtual absl::Status SynchronizeEvent(Event event) = 0;
  // The allocator no longer uses `event` (it may be pooled and recorded
  // again).
  virtual void ReleaseEvent(Event event) = 0;
};

}  // namespace bfc

#endif  // BFC_STREAM_OPS_H_
