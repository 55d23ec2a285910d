// File: bfc/cuda_stream_ops.h
// -----------------------------------------------------------------------------
//
// bfc::StreamOps over the CUDA driver (bfc/stream_ops.h): what a
// bfc::Allocator needs to reuse memory across streams safely, for one
// device. Events are created with CU_EVENT_DISABLE_TIMING (the cheapest kind)
// in the device's primary context and pooled: an event the allocator no
// longer needs is recorded again later instead of being destroyed, so a
// steady state creates none (NVIDIA/cuCascade#189: events per device, reused).
// Every call goes through bfc's run-time driver table; nothing links cudart.
//
//   bfc::Allocator pool(std::make_unique<bfc::CudaDeviceSubAllocator>(0),
//                       size_t{8} << 30, "gpu0");
//   absl::StatusOr<std::unique_ptr<bfc::CudaStreamOps>> ops =
//       bfc::CudaStreamOps::Create(0);
//   if (ops.ok()) pool.SetStreamOps(*std::move(ops)).IgnoreError();
//
// Errors: every driver failure is a Status naming the call, its arguments
// and the CUDA error ("cuEventRecord(stream 0x...) failed:
// CUDA_ERROR_INVALID_HANDLE: invalid resource handle"); nothing throws or
// aborts.
//
// Thread safety: thread-safe (the pool has its own mutex); calls take the
// device's primary context for their duration and leave the caller's current
// context as it was.
#ifndef BFC_CUDA_STREAM_OPS_H_
#define BFC_CUDA_STREAM_OPS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bfc/internal/mutex.h"
#include "bfc/stream_ops.h"

namespace bfc {

class CudaStreamOps : public StreamOps {
 public:
  // Unavailable (with the driver's reason) when there is no usable driver
  // or `device` does not exist.
  static absl::StatusOr<std::unique_ptr<CudaStreamOps>> Create(int device);
  // Destroys the pooled events (not ones still handed out: their owner
  // gives them back first). Safe at process exit: when the driver is gone or
  // shutting down, the events are left to it and nothing fails.
  ~CudaStreamOps() override;

  // `stream` must belong to this device (nullptr: the legacy default
  // stream). A pooled event is recorded again before a new one is created;
  // when cuEventRecord fails, the event goes back to the pool.
  absl::StatusOr<Event> RecordEvent(StreamId stream) override;
  // CUDA_ERROR_NOT_READY is false, not an error.
  absl::StatusOr<bool> QueryEvent(Event event) override;
  // cuStreamWaitEvent with flags 0: the wait is on the event as recorded
  // now, so the event may be released and recorded again right after.
  absl::Status StreamWaitEvent(StreamId stream, Event event) override;
  absl::Status SynchronizeEvent(Event event) override;
  // `event` must come from this object's RecordEvent and not be released
  // twice; nullptr is ignored. Makes no driver call.
  void ReleaseEvent(Event event) override;

  int device() const { return device_; }
  // cuEventCreate calls so far (the pool's size at its largest).
  int64_t events_created() const;
  // cuEventRecord calls so far.
  int64_t events_recorded() const;

 private:
  explicit CudaStreamOps(int device) : device_(device) {}

  const int device_;
  mutable internal::Mutex mu_;
  std::vector<Event> free_events_ ABSL_GUARDED_BY(mu_);
  int64_t events_created_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t events_recorded_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace bfc

#endif  // BFC_CUDA_STREAM_OPS_H_
